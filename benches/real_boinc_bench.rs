//! Side by side with BOINC's C `boinc_gahp` on a real BOINC server: both
//! daemons in one run, driven over pipes the way the gridmanager drives
//! them, against the same project. Prints numbers; asserts only that every
//! command succeeded.
//!
//!     cargo bench --bench real_boinc_bench                  # full sizes
//!     cargo bench --bench real_boinc_bench -- --quick       # 1,000 jobs
//!     cargo bench --bench real_boinc_bench -- submit        # only these phases (ping, submit, storm)
//!
//! Needs the real server of `../shared/real-boinc` (started), or another
//! project named by the environment:
//!   BOINC_REAL_URL        project URL (default http://127.0.0.1/boinctest/)
//!   BOINC_REAL_AUTH_FILE  the submitter's authenticator (default
//!                         /opt/boinc-real/submitter_auth.txt)
//!   BOINC_REF_GAHP        BOINC's C daemon (default /opt/boinc-ref/boinc_gahp)
//!   BOINC_REAL_ACCESS_LOG the web server's access log, to count HTTP
//!                         requests per phase (default
//!                         /var/log/apache2/access.log; skipped if unreadable)
//!
//! Only the URL's host is talked to; tests and benchmarks keep to loopback.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gahp_protocol::gahp::{AsyncCommand, InputFile, JobParams, JobSpec, ReqId, Request, SubmitBatch};
use gahp_protocol::Authenticator;
use gahp_testkit::GahpClient;

const WAIT: Duration = Duration::from_secs(1800);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn cmd(id: u32, c: AsyncCommand) -> Request {
    Request::Async { reqid: ReqId(id), command: c }
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

    /// Requests made while `f` ran (volunteer clients' requests left out).
    fn during<T>(&self, f: impl FnOnce() -> T) -> (T, String) {
        let before = self.count();
        let out = f();
        // The server logs a request when it has answered it.
        std::thread::sleep(Duration::from_millis(300));
        let requests = match (before, self.count()) {
            (Some(b), Some(a)) => format!("{} HTTP requests", a.saturating_sub(b)),
            _ => "requests not counted".into(),
        };
        (out, requests)
    }
}

fn write_inputs(dir: &Path, n: usize, tag: &str) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|i| {
            let p = dir.join(format!("in{i}.txt"));
            std::fs::write(&p, format!("{tag} input {i}\n").repeat(8)).unwrap();
            p
        })
        .collect()
}

fn batch(name: &str, jobs: usize, files: &[PathBuf]) -> SubmitBatch {
    SubmitBatch {
        batch_name: name.into(),
        app_name: "uppercase".into(),
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

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // Other words select phases by name (cargo's own flags are skipped);
    // the submit runs whenever the storm does (it queries that batch).
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let phase = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let url = env_or("BOINC_REAL_URL", "http://127.0.0.1/boinctest/");
    let auth_file = env_or("BOINC_REAL_AUTH_FILE", "/opt/boinc-real/submitter_auth.txt");
    let c_exe = PathBuf::from(env_or("BOINC_REF_GAHP", "/opt/boinc-ref/boinc_gahp"));
    let log = AccessLog(Some(PathBuf::from(env_or("BOINC_REAL_ACCESS_LOG", "/var/log/apache2/access.log"))).filter(|p| p.is_file()));
    let auth = std::fs::read_to_string(&auth_file).unwrap_or_else(|e| panic!("{auth_file}: {e} (start ../shared/real-boinc first)"));
    let auth = auth.split_whitespace().next().expect("an authenticator").to_string();
    let (jobs, inputs, pings, storm) = if quick { (1_000, 20, 50, 20) } else { (10_000, 20, 200, 100) };

    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    println!(
        "machine: {} cores, {cpu}; project {url}; {jobs} jobs, {inputs} shared inputs, {pings} pings, a storm of {storm}",
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
    let mut daemons = [ours, c];

    // Pings: one at a time (round-trip latency), then all at once.
    for d in daemons.iter_mut().filter(|_| phase("ping")) {
        let (t, reqs) = log.during(|| {
            let t = Instant::now();
            for _ in 0..pings {
                assert_eq!(d.call(AsyncCommand::Ping), ["NULL"], "{}", d.name);
            }
            t.elapsed()
        });
        println!(
            "{:>14}: {pings} BOINC_PING one at a time: {:.3} s ({:.1} ms each), {reqs}",
            d.name,
            t.as_secs_f64(),
            t.as_secs_f64() * 1e3 / pings as f64
        );
        let (t, reqs) = log.during(|| {
            let t = Instant::now();
            let first = d.gahp.reqid();
            for id in first..first + pings {
                d.gahp.submit_async(&cmd(id, AsyncCommand::Ping)).unwrap();
            }
            for id in first..first + pings {
                assert_eq!(d.gahp.wait_result(id, WAIT).unwrap(), ["NULL"], "{}", d.name);
            }
            d.gahp.set_next_reqid(first + pings);
            t.elapsed()
        });
        println!("{:>14}: {pings} BOINC_PING at once: {:.3} s, {reqs}", d.name, t.as_secs_f64());
    }

    // The submit: each daemon its own inputs (same sizes, other content),
    // so neither finds the other's files already on the server.
    let mut names = Vec::new();
    for (i, d) in daemons.iter_mut().enumerate() {
        let files = write_inputs(&dir.path().join(format!("in{i}")), inputs, &format!("{run} {}", d.name));
        let name = format!("bench_{run}_{}", if i == 0 { "ours" } else { "c" });
        let b = batch(&name, jobs, &files);
        let (t, reqs) = log.during(|| {
            let t = Instant::now();
            let r = d.call(AsyncCommand::Submit(b));
            assert_eq!(r, ["NULL"], "{}: submit", d.name);
            t.elapsed()
        });
        println!(
            "{:>14}: BOINC_SUBMIT of {jobs} jobs ({inputs} shared inputs): {:.2} s, {reqs}; peak RSS {:.1} MB",
            d.name,
            t.as_secs_f64(),
            d.gahp.peak_rss_mib()
        );
        names.push(name);
    }

    // A query storm: `storm` BOINC_QUERY_BATCHES of the daemon's own batch at once.
    for (d, name) in daemons.iter_mut().zip(&names).filter(|_| phase("storm")) {
        let (t, reqs) = log.during(|| {
            let t = Instant::now();
            let first = d.gahp.reqid();
            for id in first..first + storm {
                let q = AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![name.clone()] };
                d.gahp.submit_async(&cmd(id, q)).unwrap();
            }
            for id in first..first + storm {
                let r = d.gahp.wait_result(id, WAIT).unwrap();
                assert_eq!(r[0], "NULL", "{}: query {r:?}", d.name);
            }
            d.gahp.set_next_reqid(first + storm);
            t.elapsed()
        });
        println!(
            "{:>14}: {storm} BOINC_QUERY_BATCHES at once over its {jobs}-job batch: {:.2} s, {reqs}; peak RSS {:.1} MB",
            d.name,
            t.as_secs_f64(),
            d.gahp.peak_rss_mib()
        );
    }

    // Leave nothing running on the project: abort every job, retire both batches.
    let [ours, _] = &mut daemons;
    for name in &names {
        let jobs: Vec<String> = (0..jobs).map(|i| format!("{name}_{i}")).collect();
        assert_eq!(ours.call(AsyncCommand::AbortJobs { jobs }), ["NULL"], "abort {name}");
        assert_eq!(ours.call(AsyncCommand::RetireBatch { batch: name.clone() }), ["NULL"], "retire {name}");
    }
    println!("aborted and retired {}", names.join(", "));
}
