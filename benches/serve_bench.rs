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
//!
//! Two more runs, each its own serve:
//!
//!     cargo bench --bench serve_bench -- upload [--mib 256] [--gahp PATH]
//!
//! One client uploads a file of that size (`PUT` of the file protocol)
//! while another sends `BOINC_PING` every 2 ms: the latency of the pings'
//! return lines during the upload, against the same before it. `--gahp`
//! runs another build of `boinc_gahp` (an older one, to compare).
//!
//!     cargo bench --bench serve_bench -- connections [--count 20000] [--plain] [--gahp PATH]
//!
//! That many rounds one after the other, over TLS (`--plain`: TCP on
//! loopback, which has no handshake to fail), each: a whole session (AUTH,
//! the banner, COMMANDS, RESULTS, QUIT), a failed handshake (plain text to
//! the TLS port), a handshake and then a close without AUTH, and a
//! half-open connection (the first bytes of a handshake, then nothing; the
//! bench keeps up to 50 of them open, serve's `--auth-timeout 1` closes
//! them). serve's VmRSS, descriptors and threads after the first 1,000
//! rounds and after all of them, each time once the half-open ones timed
//! out and idle blocking threads ended.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gahp_protocol::gahp::escape::split_args;
use gahp_protocol::gahp::request::format;
use gahp_protocol::gahp::{AsyncCommand, Command as GahpCommand, InputFile, JobParams, JobSpec, ReqId, Request, SubmitBatch};
use gahp_testkit::{http, SimProcess};

const BATCHES: usize = 10;
const WAIT: Duration = Duration::from_secs(1800);

fn exe() -> PathBuf {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--gahp").and_then(|i| args.get(i + 1)) {
        Some(other) => PathBuf::from(other),
        None => PathBuf::from(env!("CARGO_BIN_EXE_boinc_gahp")),
    }
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
        let line = format(&Request::Command { reqid: ReqId(id), command: GahpCommand::Boinc(AsyncCommand::Submit(batch)) });
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
        let line = format(&Request::Command {
            reqid: ReqId(id),
            command: GahpCommand::Boinc(AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: names.clone() }),
        });
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
    if args.iter().any(|a| a == "upload") {
        return upload(&args);
    }
    if args.iter().any(|a| a == "connections") {
        return connections(&args);
    }
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse::<usize>().ok());
    let quick = args.iter().any(|a| a == "--quick");
    let clients = arg("--clients").unwrap_or(if quick { 10 } else { 100 });
    let jobs = arg("--jobs").unwrap_or(if quick { 100 } else { 1000 });

    let dir = tempfile::tempdir().unwrap();
    let (sim, url) = never_finishing_sim(dir.path());
    let state = dir.path().join("state");
    let mut token_of = Vec::new();
    for i in 0..clients {
        let name = format!("c{i:03}");
        token_of.push(add_token(dir.path(), &url, &sim.auth, &name));
        let files = state.join("clients").join(&name).join("files");
        std::fs::create_dir_all(&files).unwrap();
        for b in 0..BATCHES {
            std::fs::write(files.join(format!("in{b}")), format!("input {b} of {name}\n")).unwrap();
        }
    }
    let (serve, port) = start_serve(dir.path(), &["--insecure-loopback"]);
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

/// A simulated project whose one host never finishes a job, and its URL.
fn never_finishing_sim(dir: &Path) -> (SimProcess, String) {
    let sim_conf = dir.join("sim.toml");
    std::fs::write(&sim_conf, "[[hosts]]\nname = \"never\"\ncount = 1\nflops = 1e-3\n").unwrap();
    let sim =
        SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), &["--config", sim_conf.to_str().unwrap()]).expect("boinc-sim starts");
    let Request::SelectProject { url, .. } = sim.select() else { unreachable!() };
    (sim, url)
}

/// `token add NAME` to `dir/tokens.toml` for the project: the token.
fn add_token(dir: &Path, url: &str, authenticator: &str, name: &str) -> String {
    let auth = dir.join("account.auth");
    std::fs::write(&auth, format!("{authenticator}\n")).unwrap();
    let out = Command::new(exe())
        .args(["token", "add", name, "--tokens", dir.join("tokens.toml").to_str().unwrap(), "--project"])
        .arg(format!("{url}={}", auth.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// `serve` over `dir/state` with `dir/tokens.toml` and `extra` flags; its port.
fn start_serve(dir: &Path, extra: &[&str]) -> (Serve, u16) {
    let mut child = Command::new(exe())
        .args(["--state-dir", dir.join("state").to_str().unwrap(), "--log-file", dir.join("gahp.log").to_str().unwrap()])
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens", dir.join("tokens.toml").to_str().unwrap()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let port: u16 = line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"));
    (Serve(child), port)
}

fn arg_usize(args: &[String], name: &str) -> Option<usize> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok())
}

fn latencies(what: &str, v: &mut [Duration]) {
    println!(
        "{what}: {} commands, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        v.len(),
        ms(percentile(v, 0.5)),
        ms(percentile(v, 0.99)),
        ms(percentile(v, 1.0))
    );
}

/// `BOINC_PING` every 2 ms (under serve's default 1,000 lines a second)
/// until `stop`: each one's return line latency.
fn pings(c: &mut Conn, stop: &std::sync::atomic::AtomicBool) -> Vec<Duration> {
    let mut id = 0u32;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        id += 1;
        assert_eq!(c.command(format!("BOINC_PING {id}").as_bytes()), ["S"]);
        std::thread::sleep(Duration::from_millis(2));
        if id.is_multiple_of(500) {
            // Its results, so that they do not pile up.
            c.results();
        }
    }
    std::mem::take(&mut c.latencies)
}

/// One client's `PUT` of `mib` MiB while another pings.
fn upload(args: &[String]) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mib = arg_usize(args, "--mib").unwrap_or(256);
    let dir = tempfile::tempdir().unwrap();
    let (sim, url) = never_finishing_sim(dir.path());
    let (up_token, ping_token) = (add_token(dir.path(), &url, &sim.auth, "up"), add_token(dir.path(), &url, &sim.auth, "ping"));
    let (serve, port) = start_serve(dir.path(), &["--insecure-loopback"]);

    let size = mib << 20;
    let mut body = Vec::with_capacity(size + 8);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while body.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        body.extend_from_slice(&x.to_le_bytes());
    }
    body.truncate(size);
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(&body).iter().map(|b| format!("{b:02x}")).collect();

    let mut b = Conn::open(port, &ping_token);
    let select = format(&Request::SelectProject { url, authenticator: gahp_protocol::Authenticator::new("-") });
    assert_eq!(b.command(&select), ["S"]);
    let stop = Arc::new(AtomicBool::new(false));
    let idle = {
        let stop2 = stop.clone();
        let t = std::thread::spawn(move || (pings(&mut b, &stop2), b));
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap()
    };
    let (mut before, mut b) = idle;
    b.latencies.clear();
    stop.store(false, Ordering::Relaxed);

    let mut a = Conn::open(port, &up_token);
    a.out.write_all(b"FILES 1\n").unwrap();
    assert_eq!(a.line(), "FILES S");
    let stop2 = stop.clone();
    let pinger = std::thread::spawn(move || pings(&mut b, &stop2));
    let started = Instant::now();
    a.out.write_all(format!("PUT {sha} {size}\n").as_bytes()).unwrap();
    for chunk in body.chunks(1 << 20) {
        a.out.write_all(chunk).unwrap();
    }
    let sent = started.elapsed();
    let answer = a.line();
    let stored = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut during = pinger.join().unwrap();
    assert_eq!(answer, "FILES S", "the upload was refused");
    let peak = status_field(serve.0.id(), "VmHWM:");

    println!("serve_bench upload: {mib} MiB through one serve (plain TCP on loopback) while another client pings");
    println!("upload: all bytes sent after {:.2} s, stored (FILES S) after {:.2} s", sent.as_secs_f64(), stored.as_secs_f64());
    latencies("BOINC_PING return line, 3 s before the upload", &mut before);
    latencies("BOINC_PING return line, during the upload", &mut during);
    println!("serve peak RSS (VmHWM) {:.1} MiB", peak / 1024.0);
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// A TLS client that trusts `ca` (PEM) for 127.0.0.1.
fn tls_config(ca: &Path) -> std::sync::Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    std::sync::Arc::new(config)
}

/// Lines of a stream, read until one ends with `\n`.
fn read_line_of(s: &mut impl std::io::Read) -> String {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while s.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    String::from_utf8_lossy(&line).trim_end().to_string()
}

/// A whole session: AUTH, the banner, COMMANDS, RESULTS, QUIT.
fn session(s: &mut (impl std::io::Read + Write), token: &str) {
    s.write_all(format!("AUTH {token}\r\n").as_bytes()).unwrap();
    assert_eq!(read_line_of(s), "S");
    assert!(read_line_of(s).starts_with("$GahpVersion"));
    s.write_all(b"COMMANDS\r\n").unwrap();
    assert!(read_line_of(s).starts_with("S "));
    s.write_all(b"RESULTS\r\n").unwrap();
    assert_eq!(read_line_of(s), "S 0");
    s.write_all(b"QUIT\r\n").unwrap();
    assert_eq!(read_line_of(s), "S");
}

/// serve's VmRSS, descriptors and threads once the half-open connections
/// timed out there (`--auth-timeout 1`) and its idle blocking threads
/// ended (tokio's 10 s).
fn settled(pid: u32, half_open: &mut std::collections::VecDeque<TcpStream>) -> (f64, usize, f64) {
    std::thread::sleep(Duration::from_secs(2));
    half_open.clear();
    std::thread::sleep(Duration::from_secs(10));
    (status_field(pid, "VmRSS:"), fds(pid), status_field(pid, "Threads:"))
}

/// Connections one after the other, good and bad; what serve keeps.
fn connections(args: &[String]) {
    use std::io::Read;
    let count = arg_usize(args, "--count").unwrap_or(20_000);
    let plain = args.iter().any(|a| a == "--plain");
    let dir = tempfile::tempdir().unwrap();
    let (sim, url) = never_finishing_sim(dir.path());
    let token = add_token(dir.path(), &url, &sim.auth, "conn");
    let (ca, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    std::fs::write(&key, cert.key_pair.serialize_pem()).unwrap();
    let (ca_s, key_s) = (ca.to_str().unwrap(), key.to_str().unwrap());
    let mut flags = vec!["--auth-timeout", "1"];
    flags.extend(if plain { vec!["--insecure-loopback"] } else { vec!["--tls-cert", ca_s, "--tls-key", key_s] });
    let (serve, port) = start_serve(dir.path(), &flags);
    let pid = serve.0.id();
    let config = tls_config(&ca);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let connect = || {
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        tcp
    };
    let mut half_open = std::collections::VecDeque::new();
    let mut sample = None;
    let started = Instant::now();
    for round in 1..=count {
        if plain {
            session(&mut connect(), &token);
            // Connected, then gone without a word.
            drop(connect());
        } else {
            let tls = rustls::ClientConnection::new(config.clone(), name.clone()).unwrap();
            session(&mut rustls::StreamOwned::new(tls, connect()), &token);
            // Plain text to the TLS port: the handshake fails.
            let mut bad = connect();
            bad.write_all(b"AUTH bgt_x\r\nCOMMANDS\r\n").unwrap();
            let mut rest = Vec::new();
            let _ = bad.read_to_end(&mut rest);
            assert!(!String::from_utf8_lossy(&rest).contains("GahpVersion"));
            // A handshake, then a close without AUTH.
            let tls = rustls::ClientConnection::new(config.clone(), name.clone()).unwrap();
            let mut quiet = rustls::StreamOwned::new(tls, connect());
            while quiet.conn.is_handshaking() {
                quiet.conn.complete_io(&mut quiet.sock).unwrap();
            }
        }
        // Half-open: the first bytes of a TLS record, then nothing.
        let mut hung = connect();
        hung.write_all(&[0x16, 0x03, 0x01]).unwrap();
        half_open.push_back(hung);
        if half_open.len() > 50 {
            half_open.pop_front();
        }
        if round == 1000.min(count) {
            sample = Some(settled(pid, &mut half_open));
        }
    }
    let wall = started.elapsed();
    let (rss1, fds1, threads1) = sample.unwrap_or_default();
    let (rss2, fds2, threads2) = settled(pid, &mut half_open);
    let kind = if plain { "plain TCP" } else { "TLS" };
    println!("serve_bench connections: {count} rounds over {kind} in {:.1} s", wall.as_secs_f64());
    println!("after 1,000 rounds: VmRSS {rss1} KiB, {fds1} descriptors, {threads1} threads");
    println!("after {count} rounds: VmRSS {rss2} KiB ({:+} KiB), {fds2} descriptors, {threads2} threads", rss2 - rss1);
}
