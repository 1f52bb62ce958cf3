//! `boinc_gahp connect` across a dropped link: `serve` killed with -9 and
//! started again on its port while three clients have 300 jobs and
//! commands in flight. The same connect processes dial again, resume their
//! sessions (prefix, asynchronous mode, selection) and send again what had
//! no result; every request gets one result, none twice, every batch is
//! made once, every output comes with its content. And what ends a
//! reconnecting connect: a revoked token, or `--reconnect-for` running out.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::ledger::*;
use common::serve::*;
use common::*;

const CLIENTS: [&str; 3] = ["ann", "bo", "cy"];
/// Per client: batches done before the kill, then one in flight at it.
const BATCHES: usize = 4;
const JOBS: usize = 25;

/// What a request asked, to check its result against.
#[derive(Debug, Clone, PartialEq)]
enum Asked {
    Submit(usize),
    Fetch(String),
    Query(usize),
    Ping,
}

/// One client as a gridmanager would be, through one connect process for
/// the whole test: every result it ever read is kept.
struct Client {
    ledger: Ledger<Asked>,
    /// The connect's working directory: its inputs and outputs.
    home: PathBuf,
    inputs: Vec<PathBuf>,
    g: GahpClient,
}

impl std::ops::Deref for Client {
    type Target = Ledger<Asked>;
    fn deref(&self) -> &Ledger<Asked> {
        &self.ledger
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Ledger<Asked> {
        &mut self.ledger
    }
}

impl Client {
    fn send(&mut self, asked: Asked, command: AsyncCommand) -> u32 {
        let id = self.g.reqid();
        self.g.submit_async(&async_cmd(id, command)).unwrap();
        self.asked.insert(id, asked);
        id
    }

    fn submit(&mut self, b: usize) -> u32 {
        let batch = uppercase_batch(&format!("b{b}"), &self.inputs[b * JOBS..(b + 1) * JOBS]);
        self.send(Asked::Submit(b), AsyncCommand::Submit(batch))
    }

    fn fetch(&mut self, job: &str) -> u32 {
        self.send(Asked::Fetch(job.into()), fetch_out(job))
    }

    fn query(&mut self, b: usize) -> u32 {
        self.send(Asked::Query(b), AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![format!("b{b}")] })
    }

    fn read_results(&mut self) {
        self.ledger.read_results(&mut self.g);
    }

    fn wait_for(&mut self, ids: &[u32]) {
        self.ledger.wait_for(&mut self.g, ids);
    }

    /// The one result of `id`; fails on none or two.
    fn one(&self, id: u32) -> &Vec<String> {
        self.ledger.one(id).unwrap_or_else(|| panic!("{}: no result for {id} ({:?})", self.name, self.asked[&id]))
    }
}

/// Whether the sim ran every job of the batch.
fn done_on_sim(sim: &Sim, name: &str) -> bool {
    all_done_on_sim(sim, name, JOBS)
}

#[test]
fn the_same_connects_carry_on_across_a_kill_9_of_serve_and_every_request_gets_one_result() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let token_files: Vec<PathBuf> = CLIENTS.iter().map(|name| add_client(dir.path(), &tokens, &sim, name)).collect();
    let s = serve(dir.path(), &tokens, &[]);
    let port = s.port;

    let mut clients: Vec<Client> = CLIENTS
        .iter()
        .zip(&token_files)
        .map(|(&name, token)| {
            let home = dir.path().join(name);
            std::fs::create_dir_all(home.join("out")).unwrap();
            let inputs = (0..BATCHES * JOBS)
                .map(|i| {
                    let p = home.join(format!("in-{i}"));
                    std::fs::write(&p, format!("{name} job {i}\n")).unwrap();
                    p
                })
                .collect();
            let mut g = s.connect(token, &home, &[]);
            // State the session must get back after each reconnection.
            if name == "bo" {
                assert_eq!(g.set_prefix("BO:").unwrap(), ["S"]);
            }
            assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
            assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
            Client { ledger: Ledger::new(name), home, inputs, g }
        })
        .collect();

    for c in &mut clients {
        for b in 0..BATCHES - 1 {
            c.submit(b);
        }
    }
    // Ann reads all she can before the kill; Bo and Cy read nothing.
    let ann_submits: Vec<u32> = clients[0].asked.keys().copied().collect();
    clients[0].wait_for(&ann_submits);
    for c in &clients {
        for b in 0..BATCHES - 1 {
            until(&format!("{}~b{b} to run", c.name), || done_on_sim(&sim, &format!("{}~b{b}", c.name)));
        }
    }
    for c in &mut clients {
        for b in 0..BATCHES - 1 {
            for job in job_names(b, JOBS) {
                c.fetch(&job);
            }
        }
    }
    let ann_fetches: Vec<u32> = clients[0].asked.iter().filter(|(_, a)| matches!(a, Asked::Fetch(_))).map(|(id, _)| *id).collect();
    clients[0].wait_for(&ann_fetches);

    // In flight at the kill: each client's last batch (its create_batch held
    // by the project) and queries of its batches (held too).
    sim.set_faults(serde_json::json!({"rules": {
        "submit_rpc_handler.php:create_batch": {"delay": 1.0, "delay_ms": 4000},
        "submit_rpc_handler.php:query_batch2": {"delay": 1.0, "delay_ms": 4000},
    }}));
    for c in &mut clients {
        c.submit(BATCHES - 1);
        for b in 0..BATCHES - 1 {
            c.query(b);
        }
    }
    let connects: Vec<u32> = clients.iter().map(|c| c.g.pid()).collect();
    let mut s = s;
    // SIGKILL: no chance to write anything more.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    sim.set_faults(serde_json::json!({}));
    // A command sent while serve is down waits in the pipe: connect reads
    // nothing while it dials again.
    let pings: Vec<u32> = clients
        .iter_mut()
        .map(|c| {
            let id = c.g.reqid();
            let mut line = gahp_protocol::gahp::request::format(&async_cmd(id, AsyncCommand::Ping));
            line.push(b'\n');
            c.g.send_raw(&line).unwrap();
            c.asked.insert(id, Asked::Ping);
            id
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let s = serve_at(dir.path(), &tokens, port, &[]);

    for (c, ping) in clients.iter_mut().zip(&pings) {
        // The command sent meanwhile is answered on the resumed session,
        // with the prefix the client set.
        assert_eq!(c.g.read_reply().unwrap(), ["S"], "{}: the command {ping} sent while serve was down", c.name);
        let everything: Vec<u32> = c.asked.keys().copied().collect();
        c.wait_for(&everything);
    }
    // The last batch, submitted again by connect after the restart, runs
    // once; its outputs are fetched over the resumed sessions.
    for c in &mut clients {
        let name = format!("{}~b{}", c.name, BATCHES - 1);
        until(&format!("{name} to run"), || done_on_sim(&sim, &name));
        let ids: Vec<u32> = job_names(BATCHES - 1, JOBS).iter().map(|j| c.fetch(j)).collect();
        c.wait_for(&ids);
    }

    let mut fetched_total = 0;
    for (c, pid) in clients.iter_mut().zip(&connects) {
        assert_eq!(c.g.pid(), *pid, "{}: the same connect process", c.name);
        assert!(c.g.try_wait().unwrap().is_none(), "{}: its connect is still running", c.name);
        c.read_results();
        for (id, asked) in c.asked.clone() {
            let r = c.one(id);
            assert_eq!(r[0], "NULL", "{}: {asked:?} ({id}): {r:?}", c.name);
            if let Asked::Query(b) = asked {
                assert!(r.iter().any(|a| a == &format!("b{b}#0.0")), "{}: the query of b{b}: {r:?}", c.name);
            }
        }
        for b in 0..BATCHES {
            assert_eq!(sim.batches_named(&format!("{}~b{b}", c.name)).len(), 1, "{}: batch b{b} made once", c.name);
            for (i, job) in job_names(b, JOBS).iter().enumerate() {
                let got = std::fs::read_to_string(c.home.join(format!("out/{job}.txt"))).unwrap();
                assert_eq!(got, format!("{} JOB {}\n", c.name.to_uppercase(), b * JOBS + i));
                fetched_total += 1;
            }
        }
    }
    assert_eq!(fetched_total, 300);
    // Bo's and Cy's unread results were stored before the kill: their
    // requests, sent again, were recognised and not run twice.
    assert!(s.log_text().contains("not run again"), "no request was recognised as sent again");
}

/// A connect of the test's own with its stderr kept, past the banner.
struct Watched {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    stderr: PathBuf,
}

impl Watched {
    fn start(s: &Serve, token: &Path, dir: &Path, extra: &[&str]) -> Watched {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let stderr = dir.join(format!("connect-{}.err", STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        let mut child = Command::new(boinc_gahp())
            .args(s.connect_args(token, extra))
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take().unwrap(), BufReader::new(child.stdout.take().unwrap()));
        let mut w = Watched { child, stdin, stdout, stderr };
        assert!(w.line().starts_with("$GahpVersion"));
        w
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    fn command(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.line()
    }

    /// Its exit within `within`, and how long it took.
    fn exit_within(&mut self, within: Duration) -> (std::process::ExitStatus, Duration) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, started.elapsed());
            }
            assert!(started.elapsed() < within, "connect still running after {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_token_revoked_while_serve_is_down_ends_the_reconnecting_connect_with_the_reason() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let dora = add_client(dir.path(), &tokens, &sim, "dora");
    let mut s = serve(dir.path(), &tokens, &[]);
    let port = s.port;
    let mut c = Watched::start(&s, &dora, dir.path(), &[]);
    assert_eq!(c.command("COMMANDS").split(' ').next(), Some("S"));

    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let out = Command::new(boinc_gahp()).args(["token", "revoke", "dora", "--tokens", tokens.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let _s = serve_at(dir.path(), &tokens, port, &[]);

    let (status, _) = c.exit_within(WAIT);
    assert!(!status.success(), "a refused reconnection is a failure");
    let err = c.stderr();
    assert!(err.contains("lost the connection") && err.contains("the server refused: token refused"), "{err}");
    assert!(!err.contains(std::fs::read_to_string(&dora).unwrap().trim()), "the token is not printed");
}

#[test]
fn reconnect_for_bounds_the_dialling_when_serve_never_comes_back() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let eve = add_client(dir.path(), &tokens, &sim, "eve");
    let mut s = serve(dir.path(), &tokens, &["--insecure-loopback"]);
    let mut c = Watched::start(&s, &eve, dir.path(), &["--reconnect-for", "3"]);
    assert_eq!(c.command("COMMANDS").split(' ').next(), Some("S"));
    s.child.kill().unwrap();
    s.child.wait().unwrap();

    let (status, took) = c.exit_within(Duration::from_secs(30));
    assert!(!status.success());
    let err = c.stderr();
    assert!(err.contains("gave up reconnecting after 3 s"), "{err}");
    assert!(took >= Duration::from_millis(2500), "it dialled for its bound, not less: {took:?}");

    // 0: the old way, the link's close ends connect (a success, as at EOF).
    let s = serve(dir.path(), &tokens, &["--insecure-loopback"]);
    let mut c = Watched::start(&s, &eve, dir.path(), &["--reconnect-for", "0"]);
    assert_eq!(c.command("COMMANDS").split(' ').next(), Some("S"));
    drop(s);
    let (status, _) = c.exit_within(Duration::from_secs(20));
    assert!(status.success(), "{}", c.stderr());
}

#[test]
fn a_replaced_connection_and_a_revoked_one_end_with_the_reason_and_do_not_come_back() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let fay = add_client(dir.path(), &tokens, &sim, "fay");
    let s = serve(dir.path(), &tokens, &[]);
    let mut first = Watched::start(&s, &fay, dir.path(), &[]);
    assert_eq!(first.command("COMMANDS").split(' ').next(), Some("S"));
    let mut second = Watched::start(&s, &fay, dir.path(), &[]);
    assert_eq!(second.command("COMMANDS").split(' ').next(), Some("S"));

    // The replaced one does not dial again (it would replace the new one).
    let (status, _) = first.exit_within(WAIT);
    assert!(!status.success());
    assert!(first.stderr().contains("the server ended the session: replaced by a newer connection of this client"), "{}", first.stderr());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(second.command("COMMANDS").split(' ').next(), Some("S"), "the new connection is left alone");

    let out = Command::new(boinc_gahp()).args(["token", "revoke", "fay", "--tokens", tokens.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let (status, _) = second.exit_within(WAIT);
    assert!(!status.success());
    assert!(second.stderr().contains("the server ended the session: token revoked"), "{}", second.stderr());
    assert!(!second.stderr().contains("lost the connection"), "not dialled again: {}", second.stderr());
}

/// The link cut while a submit's inputs go up, with the line before it
/// perhaps still waiting for its reply (both written at once, as a
/// gridmanager's queue may): after the reconnection both are answered,
/// the inputs go up again (those already whole on the second tier are
/// not sent twice), and the batch is made once.
#[test]
fn a_link_cut_while_inputs_go_up_loses_neither_that_line_nor_the_one_before_it() {
    const FILES: usize = 120;
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let token = add_client(dir.path(), &tokens, &sim, "ann");
    let s = serve(dir.path(), &tokens, &[]);
    let port = s.port;
    let home = dir.path().join("ann");
    std::fs::create_dir_all(&home).unwrap();
    // 1.5 MB each (a project takes at most 2 MB a file): 180 MB to go up.
    let inputs: Vec<PathBuf> = (0..FILES)
        .map(|i| {
            let p = home.join(format!("in-{i}"));
            let line = format!("input {i} of the cut upload\n");
            std::fs::write(&p, line.repeat(1_500_000 / line.len())).unwrap();
            p
        })
        .collect();
    let mut g = s.connect(&token, &home, &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    let id = g.reqid();
    let mut lines = b"COMMANDS\r\n".to_vec();
    lines.extend(gahp_protocol::gahp::request::format(&async_cmd(id, AsyncCommand::Submit(uppercase_batch("cut", &inputs)))));
    lines.extend_from_slice(b"\r\n");
    g.send_raw(&lines).unwrap();

    // Cut the link once some inputs are up and the rest are not.
    let area_in = s.files("ann").join(".transfer/in");
    let up = || {
        std::fs::read_dir(&area_in)
            .map(|d| d.filter_map(Result::ok).filter(|e| !e.file_name().to_string_lossy().starts_with('.')).count())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + WAIT;
    while up() < 5 {
        assert!(Instant::now() < deadline, "no input went up");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut s = s;
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let at_cut = up();
    assert!(at_cut < FILES, "every input was up before the cut ({at_cut}): nothing was cut");
    std::thread::sleep(Duration::from_millis(500));
    let _s = serve_at(dir.path(), &tokens, port, &[]);

    let commands = g.read_reply().unwrap();
    assert_eq!(commands[0], "S", "{commands:?}");
    assert!(commands.iter().any(|c| c == "BOINC_SUBMIT"), "{commands:?}");
    assert_eq!(g.read_reply().unwrap(), ["S"], "the submit whose inputs were going up");
    let r = g.wait_result(id, WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(sim.batches_named("ann~cut").len(), 1);
    assert_eq!(up(), FILES);
    assert!(g.try_wait().unwrap().is_none(), "connect carried on");
}
