//! Three columns on a real BOINC server, in one run: the server's floor
//! (the requests each command needs, made directly by the plainest
//! keep-alive client: `real_boinc/floor.rs`), BOINC's C `boinc_gahp`, and
//! this daemon, both driven over pipes the way the gridmanager drives them.
//! For each workload: the time, the ratio to the floor, and the HTTP
//! requests the server logged. Prints numbers; asserts only that every
//! command succeeded.
//!
//!     cargo bench --bench real_boinc_bench                  # full sizes
//!     cargo bench --bench real_boinc_bench -- --quick       # smaller sizes
//!     cargo bench --bench real_boinc_bench -- submit ping   # only workloads whose name has one of these
//!
//! Workloads: `ping` (one at a time), `pings` (at once), `submit1`,
//! `submit100` (median of five each), `submit10k` (median of three), the
//! submits' columns taking turns at going first, `storm` (100
//! BOINC_QUERY_BATCHES of the 10,000-job batch at once), `fetch` (100
//! BOINC_FETCH_OUTPUTs at once: the outputs of 10 jobs the project's client
//! computed, each 10 times; measured first, the client then suspended).
//!
//! Needs the real server of `../shared/real-boinc` (started), or another
//! project named by the environment:
//!   BOINC_REAL_URL        project URL, plain http (default http://127.0.0.1/boinctest/)
//!   BOINC_REAL_AUTH_FILE  the submitter's authenticator (default
//!                         /opt/boinc-real/submitter_auth.txt)
//!   BOINC_REF_GAHP        BOINC's C daemon (default /opt/boinc-ref/boinc_gahp)
//!   BOINC_REAL_ACCESS_LOG the web server's access log, to count HTTP
//!                         requests (default /var/log/apache2/access.log;
//!                         not counted if unreadable)
//!   BOINC_REAL_CLIENT_RPC, BOINC_REAL_CLIENT_PASSWD  the client's GUI RPC,
//!                         nudged with boinccmd while `fetch` waits for its
//!                         jobs (default 127.0.0.1:31418, clientpw)
//!
//! Only the URL's host is talked to; tests and benchmarks keep to loopback.

#[path = "bench/floor.rs"]
mod floor;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gahp_protocol::gahp::{AsyncCommand, Command, FetchMode, FetchOutput, InputFile, JobParams, JobSpec, ReqId, Request, SubmitBatch};
use gahp_protocol::Authenticator;
use gahp_testkit::GahpClient;

// The bench drives only the client's nudges (its tests and task calls are the e2e's).
#[allow(dead_code, unused_imports)]
#[path = "boinc_client.rs"]
mod boinc_client;
use boinc_client::{BoincClient, Nudger};

const WAIT: Duration = Duration::from_secs(1800);
/// What this daemon uses at most at once (`max_concurrent_rpcs`): the
/// floor's connections when a workload runs at once.
const CONNS: usize = 8;
const APP: &str = "uppercase";

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

fn cmd(id: u32, c: AsyncCommand) -> Request {
    Request::Command { reqid: ReqId(id), command: Command::Boinc(c) }
}

/// One daemon under test.
struct Daemon {
    name: &'static str,
    gahp: GahpClient,
}

impl Daemon {
    fn start(name: &'static str, exe: &Path, args: &[&str], dir: &Path, url: &str, auth: &str) -> Daemon {
        std::fs::create_dir_all(dir).unwrap();
        let mut gahp = GahpClient::spawn(exe, args, &[], dir).unwrap_or_else(|e| panic!("{name} ({}) starts: {e}", exe.display()));
        assert_eq!(gahp.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"], "{name}");
        let select = Request::SelectProject { url: url.to_string(), authenticator: Authenticator::new(auth) };
        assert_eq!(gahp.command(&select).unwrap(), ["S"], "{name}: BOINC_SELECT_PROJECT");
        Daemon { name, gahp }
    }

    fn call(&mut self, c: AsyncCommand) -> Vec<String> {
        let name = self.name;
        self.gahp.call(|id| cmd(id, c), WAIT).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Every command sent before any result is read; each must answer `ok`.
    fn at_once(&mut self, commands: Vec<AsyncCommand>, ok: impl Fn(&[String]) -> bool) {
        let first = self.gahp.reqid();
        let n = commands.len() as u32;
        for (id, c) in (first..).zip(commands) {
            self.gahp.submit_async(&cmd(id, c)).unwrap();
        }
        for id in first..first + n {
            let r = self.gahp.wait_result(id, WAIT).unwrap();
            assert!(ok(&r), "{}: {r:?}", self.name);
        }
        self.gahp.set_next_reqid(first + n);
    }
}

/// HTTP requests the project's web server has logged so far.
struct AccessLog(Option<PathBuf>);

impl AccessLog {
    fn count(&self) -> Option<usize> {
        let path = self.0.as_ref()?;
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.lines().filter(|l| !l.contains("BOINC client (") && !l.contains("internal dummy connection")).count())
    }

    /// The time `f` took and the requests made meanwhile (volunteer
    /// clients' left out).
    fn measure(&self, pid: Option<u32>, f: impl FnOnce()) -> Measure {
        let before = self.count();
        let cpu_before = cpu_secs(pid);
        let t = Instant::now();
        f();
        let secs = t.elapsed().as_secs_f64();
        let cpu = cpu_secs(pid) - cpu_before;
        // The server logs a request when it has answered it.
        std::thread::sleep(Duration::from_millis(300));
        let requests = match (before, self.count()) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        Measure { secs, requests, cpu }
    }
}

/// CPU seconds (user and system) a process has used: the daemon's, or with
/// `None` this one's (the floor's client).
fn cpu_secs(pid: Option<u32>) -> f64 {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line, in clock ticks (100 a second).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().skip(11).take(2).filter_map(|v| v.parse().ok()).collect();
    f.iter().sum::<f64>() / 100.0
}

#[derive(Clone, Copy)]
struct Measure {
    secs: f64,
    requests: Option<usize>,
    /// CPU seconds the client used meanwhile (the daemon, or the floor's).
    cpu: f64,
}

/// The median of runs by time, requests per run.
fn median(mut runs: Vec<Measure>) -> Measure {
    runs.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    runs[runs.len() / 2]
}

struct Row {
    what: String,
    cells: [Option<Measure>; 3],
}

fn print_table(rows: &[Row]) {
    fn time(s: f64) -> String {
        if s < 1.0 {
            format!("{:.1} ms", s * 1e3)
        } else {
            format!("{s:.2} s")
        }
    }
    println!();
    println!("| workload | server floor | C `boinc_gahp` | boinc-gahp | boinc-gahp / C |");
    println!("|---|---|---|---|---|");
    for r in rows {
        let floor = r.cells[0].map(|m| m.secs);
        let cell = |i: usize| match r.cells[i] {
            None => "—".to_string(),
            Some(m) => {
                let ratio = match floor {
                    Some(f) if f > 0.0 && i > 0 => format!(" ({:.2}×)", m.secs / f),
                    _ => String::new(),
                };
                let reqs = m.requests.map_or("requests not counted".into(), |n| format!("{n} req"));
                format!("{}{ratio}, {reqs}, CPU {}", time(m.secs), time(m.cpu))
            }
        };
        let vs_c = match (&r.cells[1], &r.cells[2]) {
            (Some(c), Some(o)) => format!("{:.2}×", o.secs / c.secs),
            _ => "—".into(),
        };
        println!("| {} | {} | {} | {} | {vs_c} |", r.what, cell(0), cell(1), cell(2));
    }
}

/// Input contents new to the project: `tag` makes them this run's and this
/// column's own.
fn contents(n: usize, tag: &str) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{tag} input {i}\n").repeat(8).into_bytes()).collect()
}

fn write_inputs(dir: &Path, data: &[Vec<u8>]) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    data.iter()
        .enumerate()
        .map(|(i, d)| {
            let p = dir.join(format!("in{i}.txt"));
            std::fs::write(&p, d).unwrap();
            p
        })
        .collect()
}

fn batch(name: &str, jobs: usize, files: &[PathBuf]) -> SubmitBatch {
    SubmitBatch {
        batch_name: name.into(),
        app_name: APP.into(),
        jobs: (0..jobs)
            .map(|i| JobSpec {
                name: format!("{name}_{i}"),
                args: Vec::new(),
                inputs: vec![InputFile { src: files[i % files.len()].clone(), dst_name: "in".into() }],
            })
            .collect(),
        params: JobParams::default(),
    }
}

struct Bench {
    dir: tempfile::TempDir,
    run: String,
    project: floor::Project,
    log: AccessLog,
    daemons: [Daemon; 2],
    /// Every batch made, to abort and retire at the end.
    batches: Vec<(String, usize)>,
}

impl Bench {
    /// A submit of `jobs` jobs sharing `inputs` new inputs, in each column,
    /// column `first` first: every submit adds its jobs to the project's
    /// tables, so the columns take turns at going first and last.
    fn submit(&mut self, label: &str, jobs: usize, inputs: usize, first: usize) -> [Measure; 3] {
        let tag = format!("{}_{label}", self.run);
        let mut out = [None; 3];
        for column in (0..3).map(|k| (first + k) % 3) {
            let name = format!("bench_{tag}_{}", ["floor", "c", "ours"][column]);
            let data = contents(inputs, &name);
            out[column] = Some(if column == 0 {
                let files: Vec<floor::Input> = data.into_iter().map(floor::Input::new).collect();
                let project = self.project.clone();
                self.log.measure(None, || {
                    floor::submit(&mut floor::Conn::new(&project), &project, APP, &name, jobs, &files);
                })
            } else {
                let d = &mut self.daemons[column - 1];
                let b = batch(&name, jobs, &write_inputs(&self.dir.path().join(&name), &data));
                self.log.measure(Some(d.gahp.pid()), || assert_eq!(d.call(AsyncCommand::Submit(b)), ["NULL"], "{}: submit", d.name))
            });
            self.batches.push((name, jobs));
        }
        out.map(|m| m.expect("every column ran"))
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // Other words select workloads by name (cargo's own flags are skipped);
    // the 10,000-job submit runs whenever the storm does (it queries that batch).
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let phase = |name: &str| only.is_empty() || only.iter().any(|o| name.starts_with(o.as_str()));
    let url = env_or("BOINC_REAL_URL", "http://127.0.0.1/boinctest/");
    let auth_file = env_or("BOINC_REAL_AUTH_FILE", "/opt/boinc-real/submitter_auth.txt");
    let c_exe = PathBuf::from(env_or("BOINC_REF_GAHP", "/opt/boinc-ref/boinc_gahp"));
    let log = AccessLog(Some(PathBuf::from(env_or("BOINC_REAL_ACCESS_LOG", "/var/log/apache2/access.log"))).filter(|p| p.is_file()));
    let auth = std::fs::read_to_string(&auth_file).unwrap_or_else(|e| panic!("{auth_file}: {e} (start ../shared/real-boinc first)"));
    let auth = auth.split_whitespace().next().expect("an authenticator").to_string();
    // The fetch reads `fetches` outputs of `finished` jobs, each job's in
    // turn: the project's one client computes a job in about 20 s.
    let (ping1, pings, big, storm, fetches, reps) = if quick { (50, 200, 1_000, 20, 20, 3) } else { (200, 2_000, 10_000, 100, 100, 5) };
    let finished = if quick { 5 } else { 10 };

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    println!(
        "machine: {} cores, {cpu}; project {url}; the floor's and the daemons' requests at once: {CONNS} connections",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );

    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs());
    let ours_dir = dir.path().join("ours");
    let state = ours_dir.join("state");
    let logf = ours_dir.join("gahp.log");
    let ours = Daemon::start(
        "boinc-gahp",
        Path::new(env!("CARGO_BIN_EXE_boinc_gahp")),
        &["--state-dir", state.to_str().unwrap(), "--log-file", logf.to_str().unwrap()],
        &ours_dir,
        &url,
        &auth,
    );
    let c = Daemon::start("C boinc_gahp", &c_exe, &[], &dir.path().join("c"), &url, &auth);
    let project = floor::Project::new(&url, &auth);
    let mut b = Bench { dir, run, project: project.clone(), log, daemons: [c, ours], batches: Vec::new() };
    let mut rows = Vec::new();

    // The jobs the fetch reads, first: the project's client computes them
    // before any other workload gives it jobs to compute first.
    let fetch_batch = format!("bench_{}_fetch", b.run);
    if phase("fetch") {
        let files = write_inputs(&b.dir.path().join("fetch"), &contents(1, &fetch_batch));
        let submit = AsyncCommand::Submit(batch(&fetch_batch, finished, &files));
        assert_eq!(b.daemons[1].call(submit), ["NULL"], "the fetch's jobs");
        b.batches.push((fetch_batch.clone(), finished));
    }

    // Warm both daemons and the server (first connections, PHP's caches).
    floor::ping(&mut floor::Conn::new(&project));
    for d in &mut b.daemons {
        assert_eq!(d.call(AsyncCommand::Ping), ["NULL"], "{}", d.name);
    }

    if phase("fetch") && wait_done(&mut b.daemons[1], &fetch_batch, finished, &url) {
        let jobs: Vec<String> = (0..fetches).map(|k| format!("{fetch_batch}_{}", k % finished)).collect();
        let mut cells = [None; 3];
        cells[0] = Some(b.log.measure(None, || {
            floor::at_once(&project, CONNS, fetches, |conn, k| {
                floor::fetch(conn, &project, &jobs[k]);
            })
        }));
        for (i, d) in b.daemons.iter_mut().enumerate() {
            let out = b.dir.path().join(format!("fetched_{i}"));
            let commands: Vec<AsyncCommand> = jobs
                .iter()
                .enumerate()
                .map(|(k, j)| {
                    let dir = out.join(k.to_string());
                    std::fs::create_dir_all(&dir).unwrap();
                    AsyncCommand::FetchOutput(FetchOutput {
                        job_name: j.clone(),
                        dir,
                        stderr_file: "stderr".into(),
                        mode: FetchMode::All,
                        specs: Vec::new(),
                    })
                })
                .collect();
            cells[i + 1] = Some(b.log.measure(Some(d.gahp.pid()), || d.at_once(commands, |r| r[0] == "NULL")));
        }
        rows.push(Row {
            what: format!("{fetches} `BOINC_FETCH_OUTPUT` at once ({finished} jobs' outputs, each {} times)", fetches / finished),
            cells,
        });
    }

    // The project's client neither computes nor asks for work while the
    // rest is measured: the jobs the workloads submit would take its CPU.
    let client = client(&url);
    client_modes(&client, "never");

    if phase("ping") {
        let mut cells = [None; 3];
        cells[0] = Some(b.log.measure(None, || {
            let mut conn = floor::Conn::new(&project);
            (0..ping1).for_each(|_| floor::ping(&mut conn));
        }));
        for (i, d) in b.daemons.iter_mut().enumerate() {
            cells[i + 1] =
                Some(b.log.measure(Some(d.gahp.pid()), || {
                    (0..ping1).for_each(|_| assert_eq!(d.call(AsyncCommand::Ping), ["NULL"], "{}", d.name))
                }));
        }
        rows.push(Row { what: format!("{ping1} `BOINC_PING` one at a time"), cells });
    }
    if phase("pings") {
        let mut cells = [None; 3];
        cells[0] = Some(b.log.measure(None, || floor::at_once(&project, CONNS, pings, |conn, _| floor::ping(conn))));
        for (i, d) in b.daemons.iter_mut().enumerate() {
            cells[i + 1] = Some(b.log.measure(Some(d.gahp.pid()), || d.at_once(vec![AsyncCommand::Ping; pings], |r| r == ["NULL"])));
        }
        rows.push(Row { what: format!("{pings} `BOINC_PING` at once"), cells });
    }

    // Small submits, the gridmanager's usual: the median of `reps`, the
    // columns taking turns.
    for (label, jobs, inputs) in [("submit1", 1, 1), ("submit100", 100, 10)] {
        if !phase(label) {
            continue;
        }
        let runs: Vec<[Measure; 3]> = (0..reps).map(|k| b.submit(&format!("{label}_{k}"), jobs, inputs, k % 3)).collect();
        let cells = [0, 1, 2].map(|i| Some(median(runs.iter().map(|r| r[i]).collect())));
        let what = if jobs == 1 {
            "`BOINC_SUBMIT` of 1 job".to_string()
        } else {
            format!("`BOINC_SUBMIT` of {jobs} jobs sharing {inputs} inputs")
        };
        rows.push(Row { what: format!("{what} (median of {reps})"), cells });
    }

    if phase("submit10k") || phase("storm") {
        let runs: Vec<[Measure; 3]> = (0..3).map(|k| b.submit(&format!("big_{k}"), big, 20, k)).collect();
        for (k, r) in runs.iter().enumerate() {
            let order: Vec<String> =
                (0..3).map(|i| (k + i) % 3).map(|c| format!("{} {:.2} s", ["floor", "C", "ours"][c], r[c].secs)).collect();
            println!("submit of {big}, run {}: {}", k + 1, order.join(", then "));
        }
        let cells = [0, 1, 2].map(|i| Some(median(runs.iter().map(|r| r[i]).collect())));
        rows.push(Row { what: format!("`BOINC_SUBMIT` of {big} jobs sharing 20 inputs (median of 3)"), cells });
    }
    if phase("storm") {
        // Each column queries its own big batch; the floor needs one
        // query_batch2 for every identical query.
        let names: Vec<String> = ["floor", "c", "ours"].iter().map(|c| format!("bench_{}_big_0_{c}", b.run)).collect();
        let mut cells = [None; 3];
        cells[0] = Some(b.log.measure(None, || floor::query(&mut floor::Conn::new(&project), &project, &names[0])));
        for (i, d) in b.daemons.iter_mut().enumerate() {
            let q = AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![names[i + 1].clone()] };
            cells[i + 1] = Some(b.log.measure(Some(d.gahp.pid()), || d.at_once(vec![q; storm], |r| r[0] == "NULL")));
        }
        rows.push(Row { what: format!("{storm} `BOINC_QUERY_BATCHES` at once over a {big}-job batch"), cells });
    }

    print_table(&rows);
    println!("(times: one run each, small submits the median; ratios to the floor in brackets; requests as the web server logged them)");
    for d in &mut b.daemons {
        println!("{}: peak RSS {:.1} MB", d.name, d.gahp.peak_rss_mib());
    }

    // Leave nothing running on the project: abort every job, retire every batch.
    let ours = &mut b.daemons[1];
    for (name, jobs) in &b.batches {
        let all: Vec<String> = (0..*jobs).map(|i| format!("{name}_{i}")).collect();
        assert_eq!(ours.call(AsyncCommand::AbortJobs { jobs: all }), ["NULL"], "abort {name}");
        assert_eq!(ours.call(AsyncCommand::RetireBatch { batch: name.clone() }), ["NULL"], "retire {name}");
    }
    println!("aborted and retired {} batches", b.batches.len());
    client_modes(&client, "always");
}

/// The project's client (where there is one).
fn client(url: &str) -> BoincClient {
    BoincClient {
        rpc: env_or("BOINC_REAL_CLIENT_RPC", "127.0.0.1:31418"),
        passwd: env_or("BOINC_REAL_CLIENT_PASSWD", "clientpw"),
        url: url.to_string(),
    }
}

/// Its run and network modes: "never" or "always".
fn client_modes(client: &BoincClient, mode: &str) {
    client.set_run_mode(mode);
    client.set_network_mode(mode);
}

/// Waits (nudging the project's client) until every job of `batch` is
/// done; false, saying so, when they are not within 30 minutes.
fn wait_done(d: &mut Daemon, batch: &str, jobs: usize, url: &str) -> bool {
    let client = client(url);
    let mut nudger = Nudger::new(Some(&client), Duration::from_secs(20));
    let until = Instant::now() + Duration::from_secs(1800);
    loop {
        let r = d.call(AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![batch.to_string()] });
        assert_eq!(r[0], "NULL", "{r:?}");
        let done = r[3..].chunks(2).filter(|p| p.get(1).is_some_and(|s| s == "DONE")).count();
        if done == jobs {
            return true;
        }
        if Instant::now() > until {
            println!("fetch: only {done} of {jobs} jobs done in 30 minutes; not measured");
            return false;
        }
        nudger.tick();
        std::thread::sleep(Duration::from_secs(2));
    }
}
