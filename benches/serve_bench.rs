//! Many first tiers through one `boinc_gahp serve` (issue 25). Prints
//! numbers; asserts only that every command got its answer. Run:
//!
//!     cargo bench --bench serve_bench                  # 100 clients x 1,000 jobs
//!     cargo bench --bench serve_bench -- --quick       # 10 clients x 100 jobs
//!     cargo bench --bench serve_bench -- --clients 50 --jobs 2000
//!
//! One simulated project whose one host never finishes a job, so every
//! job stays in flight; every client on one BOINC account (a project's
//! submitter account shared by a site's users, the case serve is for).
//! Each client is a thread speaking GAHP over loopback TCP
//! (`--insecure-loopback`): AUTH, select, its jobs in 10 batches submitted
//! at once (each batch's jobs share one input file of the client's), then
//! RESULTS every 100 ms until every submit has its result, then 3 rounds
//! of BOINC_QUERY_BATCHES of its 10 batches. Reported: serve's peak RSS
//! (VmHWM) and threads, the latency of each command's return line (from
//! the line sent to its `S` read: the serving thread's backlog) at p50 and
//! p99, each client's time from connect to banner, each submit's time to
//! its result, and the project's RPCs per job.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gahp_protocol::gahp::escape::split_args;
use gahp_protocol::gahp::request::format;
use gahp_protocol::gahp::{AsyncCommand, InputFile, JobParams, JobSpec, ReqId, Request, SubmitBatch};
use gahp_testkit::{http, SimProcess};

const BATCHES: usize = 10;
const WAIT: Duration = Duration::from_secs(1800);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_boinc_gahp"))
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A field of /proc/<pid>/status (kB fields in kB).
fn status_field(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// One client's connection: lines in, lines out, with the time each
/// command's return line took.
struct Conn {
    out: TcpStream,
    lines: BufReader<TcpStream>,
    latencies: Vec<Duration>,
    /// From the TCP connect to the banner read.
    auth: Duration,
}

impl Conn {
    fn open(port: u16, token: &str) -> Conn {
        let t = Instant::now();
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(WAIT)).unwrap();
        let mut c = Conn { out: tcp.try_clone().unwrap(), lines: BufReader::new(tcp), latencies: Vec::new(), auth: Duration::ZERO };
        c.out.write_all(format!("AUTH {token}\r\n").as_bytes()).unwrap();
        assert_eq!(c.line(), "S", "AUTH refused");
        assert!(c.line().starts_with("$GahpVersion"));
        c.auth = t.elapsed();
        c
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.lines.read_line(&mut l).unwrap();
        assert!(!l.is_empty(), "serve closed the connection");
        l.trim_end().to_string()
    }

    /// Sends a line; returns its return line's fields.
    fn command(&mut self, line: &[u8]) -> Vec<String> {
        let t = Instant::now();
        self.out.write_all(line).unwrap();
        self.out.write_all(b"\r\n").unwrap();
        let reply = self.line();
        self.latencies.push(t.elapsed());
        split_args(reply.as_bytes()).into_iter().map(|a| String::from_utf8_lossy(&a).into_owned()).collect()
    }

    /// One RESULTS: the request ids of its result lines.
    fn results(&mut self) -> Vec<(u32, String)> {
        let header = self.command(b"RESULTS");
        assert_eq!(header[0], "S", "{header:?}");
        let n: usize = header[1].parse().unwrap();
        (0..n)
            .map(|_| {
                let l = self.line();
                let (id, rest) = l.split_once(' ').unwrap_or((&l, ""));
                (id.parse().unwrap(), rest.split(' ').next().unwrap_or("").to_string())
            })
            .collect()
    }
}

struct ClientRun {
    auth: Duration,
    latencies: Vec<Duration>,
    submit_results: Vec<Duration>,
}

fn client(port: u16, token: String, url: String, jobs: usize) -> ClientRun {
    let mut c = Conn::open(port, &token);
    let select = format(&Request::SelectProject { url, authenticator: gahp_protocol::Authenticator::new("-") });
    assert_eq!(c.command(&select), ["S"]);
    let per_batch = jobs.div_ceil(BATCHES);
    let mut sent = std::collections::HashMap::new();
    for b in 0..BATCHES {
        let batch = SubmitBatch {
            batch_name: format!("b{b}"),
            app_name: "uppercase".into(),
            jobs: (0..per_batch)
                .map(|k| JobSpec {
                    name: format!("b{b}_{k}"),
                    args: vec![],
                    inputs: vec![InputFile { src: PathBuf::from(format!("in{b}")), dst_name: "in".into() }],
                })
                .collect(),
            params: JobParams::default(),
        };
        let id = b as u32 + 1;
        let line = format(&Request::Async { reqid: ReqId(id), command: AsyncCommand::Submit(batch) });
        assert_eq!(c.command(&line), ["S"]);
        sent.insert(id, Instant::now());
    }
    let mut submit_results = Vec::new();
    let until = Instant::now() + WAIT;
    while !sent.is_empty() {
        assert!(Instant::now() < until, "submits without a result: {:?}", sent.keys());
        std::thread::sleep(Duration::from_millis(100));
        for (id, first) in c.results() {
            assert_eq!(first, "NULL", "submit {id} failed");
            submit_results.push(sent.remove(&id).expect("a result for a submit sent").elapsed());
        }
    }
    let names: Vec<String> = (0..BATCHES).map(|b| format!("b{b}")).collect();
    for round in 0..3u32 {
        let id = 100 + round;
        let line =
            format(&Request::Async { reqid: ReqId(id), command: AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: names.clone() } });
        assert_eq!(c.command(&line), ["S"]);
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let got = c.results();
            if let Some((_, first)) = got.iter().find(|(i, _)| *i == id) {
                assert_eq!(first, "NULL");
                break;
            }
            assert!(Instant::now() < until, "no query result");
        }
    }
    c.command(b"QUIT");
    ClientRun { auth: c.auth, latencies: c.latencies, submit_results }
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v.get(((v.len() as f64 * p).ceil() as usize).saturating_sub(1)).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse::<usize>().ok());
    let quick = args.iter().any(|a| a == "--quick");
    let clients = arg("--clients").unwrap_or(if quick { 10 } else { 100 });
    let jobs = arg("--jobs").unwrap_or(if quick { 100 } else { 1000 });

    let dir = tempfile::tempdir().unwrap();
    let sim_conf = dir.path().join("sim.toml");
    std::fs::write(&sim_conf, "[[hosts]]\nname = \"never\"\ncount = 1\nflops = 1e-3\n").unwrap();
    let sim =
        SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), &["--config", sim_conf.to_str().unwrap()]).expect("boinc-sim starts");
    let Request::SelectProject { url, .. } = sim.select() else { unreachable!() };
    let auth = dir.path().join("account.auth");
    std::fs::write(&auth, format!("{}\n", sim.auth)).unwrap();
    let tokens = dir.path().join("tokens.toml");
    let state = dir.path().join("state");
    let mut token_of = Vec::new();
    for i in 0..clients {
        let name = format!("c{i:03}");
        let out = Command::new(exe())
            .args(["token", "add", &name, "--tokens", tokens.to_str().unwrap(), "--project"])
            .arg(format!("{url}={}", auth.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let files = state.join("clients").join(&name).join("files");
        std::fs::create_dir_all(&files).unwrap();
        for b in 0..BATCHES {
            std::fs::write(files.join(format!("in{b}")), format!("input {b} of {name}\n")).unwrap();
        }
        token_of.push(String::from_utf8(out.stdout).unwrap().trim().to_string());
    }

    let mut child = Command::new(exe())
        .args(["--state-dir", state.to_str().unwrap(), "--log-file", dir.path().join("gahp.log").to_str().unwrap()])
        .args(["serve", "--listen", "127.0.0.1:0", "--insecure-loopback", "--tokens", tokens.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"));
    let serve = Serve(child);
    let pid = serve.0.id();
    let (rss0, threads0) = (status_field(pid, "VmHWM:"), status_field(pid, "Threads:"));

    let started = Instant::now();
    let runs: Vec<ClientRun> = token_of
        .into_iter()
        .map(|token| {
            let url = url.clone();
            std::thread::spawn(move || client(port, token, url, jobs))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("a client failed"))
        .collect();
    let wall = started.elapsed();

    let peak = status_field(pid, "VmHWM:");
    let now = status_field(pid, "VmRSS:");
    let threads = status_field(pid, "Threads:");
    let (mut lat, mut sub): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    let mut auth: Vec<Duration> = runs.iter().map(|r| r.auth).collect();
    for r in runs {
        lat.extend(r.latencies);
        sub.extend(r.submit_results);
    }
    let n_lat = lat.len();
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    let body = http(addr, "GET", &format!("/{path}__sim/state?jobs=0"), None);
    let state_json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let counts = state_json["rpc_counts"].as_object().cloned().unwrap_or_default();
    let rpcs: u64 = counts.values().filter_map(|v| v.as_u64()).sum();
    let total_jobs = clients * jobs.div_ceil(BATCHES) * BATCHES;

    println!("serve_bench: {clients} clients x {jobs} jobs ({total_jobs} jobs, {} batches) through one serve", clients * BATCHES);
    println!("wall {:.1} s", wall.as_secs_f64());
    println!(
        "serve peak RSS (VmHWM) {:.1} MiB (idle before the clients: {:.1} MiB); RSS at the end {:.1} MiB",
        peak / 1024.0,
        rss0 / 1024.0,
        now / 1024.0
    );
    println!("serve threads: {threads} (before the clients: {threads0})");
    println!(
        "command return line latency over {n_lat} commands: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(percentile(&mut lat, 0.5)),
        ms(percentile(&mut lat, 0.99)),
        ms(percentile(&mut lat, 1.0))
    );
    println!(
        "connect to banner (AUTH, and the client's runtime started): p50 {:.0} ms, max {:.0} ms",
        ms(percentile(&mut auth, 0.5)),
        ms(percentile(&mut auth, 1.0))
    );
    println!(
        "submit to its result ({} submits of {} jobs): p50 {:.0} ms, p99 {:.0} ms",
        sub.len(),
        jobs.div_ceil(BATCHES),
        ms(percentile(&mut sub, 0.5)),
        ms(percentile(&mut sub, 0.99))
    );
    println!("project RPCs: {rpcs} in all, {:.4} per job", rpcs as f64 / total_jobs as f64);
    let mut by: Vec<(String, u64)> = counts.into_iter().map(|(k, v)| (k, v.as_u64().unwrap_or(0))).collect();
    by.sort();
    for (k, v) in by {
        println!("  {k}: {v}");
    }
}
