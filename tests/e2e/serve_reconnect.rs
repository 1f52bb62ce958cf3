//! `boinc_gahp connect` across a dropped link: `serve` killed with -9 and
//! started again on its port while three clients have 300 jobs and
//! commands in flight. The same connect processes dial again, resume their
//! sessions (prefix, asynchronous mode, selection) and send again what had
//! no result; every request gets one result, none twice, every batch is
//! made once, every output comes with its content. And what ends a
//! reconnecting connect: a revoked token, or `--reconnect-for` running out.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::ledger::*;
use crate::common::serve::*;
use crate::common::*;

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

/// `n` inputs `in-<i>` of 1.5 MB each (a project takes at most 2 MB a
/// file), each of its own content.
fn large_inputs(home: &Path, n: usize, what: &str) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = home.join(format!("in-{i}"));
            let line = format!("input {i} of the {what}\n");
            std::fs::write(&p, line.repeat(1_500_000 / line.len())).unwrap();
            p
        })
        .collect()
}

/// A submit of 120 inputs of 1.5 MB written (after a `COMMANDS` in the
/// same write, as a gridmanager's queue may) through a connect, and serve
/// killed once some inputs are up and the rest are not.
struct CutUpload {
    sim: Sim,
    dir: tempfile::TempDir,
    tokens: PathBuf,
    port: u16,
    inputs: Vec<PathBuf>,
    g: GahpClient,
    id: u32,
    area_in: PathBuf,
}

impl CutUpload {
    const FILES: usize = 120;

    fn cut() -> CutUpload {
        let sim = Sim::start();
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.toml");
        let token = add_client(dir.path(), &tokens, &sim, "ann");
        let mut s = serve(dir.path(), &tokens, &[]);
        let port = s.port;
        let home = dir.path().join("ann");
        std::fs::create_dir_all(&home).unwrap();
        // 180 MB to go up.
        let inputs = large_inputs(&home, Self::FILES, "cut upload");
        let mut g = s.connect(&token, &home, &[]);
        assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
        assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
        let id = g.reqid();
        let mut lines = b"COMMANDS\r\n".to_vec();
        lines.extend(gahp_protocol::gahp::request::format(&async_cmd(id, AsyncCommand::Submit(uppercase_batch("cut", &inputs)))));
        lines.extend_from_slice(b"\r\n");
        g.send_raw(&lines).unwrap();

        let area_in = s.files("ann").join(".transfer/in");
        let cut = CutUpload { sim, dir, tokens, port, inputs, g, id, area_in };
        let deadline = Instant::now() + WAIT;
        while cut.up() < 5 {
            assert!(Instant::now() < deadline, "no input went up");
            std::thread::sleep(Duration::from_millis(2));
        }
        s.child.kill().unwrap();
        s.child.wait().unwrap();
        let at_cut = cut.up();
        assert!(at_cut < Self::FILES, "every input was up before the cut ({at_cut}): nothing was cut");
        cut
    }

    /// Inputs whole in the area.
    fn up(&self) -> usize {
        std::fs::read_dir(&self.area_in)
            .map(|d| d.filter_map(Result::ok).filter(|e| !e.file_name().to_string_lossy().starts_with('.')).count())
            .unwrap_or(0)
    }

    /// serve again on its port; the `COMMANDS` reply that was cut.
    fn serve_again(&mut self) -> Serve {
        std::thread::sleep(Duration::from_millis(500));
        let s = serve_at(self.dir.path(), &self.tokens, self.port, &[]);
        let commands = self.g.read_reply().unwrap();
        assert_eq!(commands[0], "S", "{commands:?}");
        assert!(commands.iter().any(|c| c == "BOINC_SUBMIT"), "{commands:?}");
        s
    }
}

/// The link cut while a submit's inputs go up, with the line before it
/// perhaps still waiting for its reply: after the reconnection both are
/// answered, the inputs go up again (those already whole on the second
/// tier are not sent twice), and the batch is made once.
#[test]
fn a_link_cut_while_inputs_go_up_loses_neither_that_line_nor_the_one_before_it() {
    let mut cut = CutUpload::cut();
    let _s = cut.serve_again();
    assert_eq!(cut.g.read_reply().unwrap(), ["S"], "the submit whose inputs were going up");
    let r = cut.g.wait_result(cut.id, WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(cut.sim.batches_named("ann~cut").len(), 1);
    assert_eq!(cut.up(), CutUpload::FILES);
    assert!(cut.g.try_wait().unwrap().is_none(), "connect carried on");
}

/// The same cut, and the inputs not yet up deleted meanwhile: the submit,
/// tried again after the reconnection, is refused here with `E` (its
/// files can't be read), once; nothing is made, and connect goes on.
#[test]
fn a_line_cut_short_whose_inputs_went_away_gets_e_once_and_connect_goes_on() {
    let mut cut = CutUpload::cut();
    for input in &cut.inputs {
        std::fs::remove_file(input).unwrap();
    }
    let _s = cut.serve_again();
    assert_eq!(cut.g.read_reply().unwrap(), ["E"], "the submit whose inputs went away");
    assert_eq!(cut.g.command_line(b"COMMANDS").unwrap()[0], "S", "the next command");
    let id = cut.g.reqid();
    assert_eq!(cut.g.command(&async_cmd(id, AsyncCommand::Ping)).unwrap(), ["S"]);
    assert_eq!(cut.g.wait_result(id, WAIT).unwrap()[0], "NULL");
    assert!(cut.sim.batches_named("ann~cut").is_empty(), "nothing was made");
    assert!(cut.g.try_wait().unwrap().is_none(), "connect carried on");
}

/// A fetch's stderr text goes to its file once, also when the link is
/// cut after some fetches of a RESULTS block had their files brought and
/// before the block was handed on: the fetches are run again and their
/// block read again after the reconnection, and what was appended stays
/// appended once (it doubled before).
#[test]
fn a_link_cut_while_a_results_block_brings_its_files_appends_each_stderr_once() {
    const JOBS: usize = 30;
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let token = add_client(dir.path(), &tokens, &sim, "ann");
    let s = serve(dir.path(), &tokens, &[]);
    let port = s.port;
    let home = dir.path().join("ann");
    std::fs::create_dir_all(home.join("out")).unwrap();
    std::fs::create_dir_all(home.join("again")).unwrap();
    // 1.5 MB outputs: the block takes a while to bring.
    let inputs = large_inputs(&home, JOBS, "cut fetch");
    let mut g = s.connect(&token, &home, &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    let batch = uppercase_batch("cutfetch", &inputs);
    let jobs: Vec<String> = batch.jobs.iter().map(|j| format!("ann~{}", j.name)).collect();
    let names: Vec<String> = batch.jobs.iter().map(|j| j.name.clone()).collect();
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    until("the jobs to run", || all_done_on_sim(&sim, "ann~cutfetch", JOBS));

    let fetch = |job: &str, into: &str, err: String| {
        AsyncCommand::FetchOutput(FetchOutput {
            job_name: job.into(),
            dir: into.into(),
            stderr_file: err.into(),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst: format!("{job}.txt").into() }],
        })
    };
    let mut ids = Vec::new();
    for (i, job) in names.iter().enumerate() {
        let id = g.reqid();
        g.submit_async(&async_cmd(id, fetch(job, "out", format!("err-{i}.txt")))).unwrap();
        ids.push(id);
    }
    // Every fetch done on the second tier (its output and stderr there).
    let area_out = s.files("ann").join(".transfer/out");
    until("the fetches on the second tier", || {
        std::fs::read_dir(&area_out)
            .map(|d| d.filter_map(Result::ok).filter(|e| std::fs::read_dir(e.path()).map(|f| f.count()).unwrap_or(0) >= 2).count())
            .unwrap_or(0)
            == JOBS
    });
    std::thread::sleep(Duration::from_millis(500));

    // Cut the link once the block's first stderr is appended here.
    g.send_raw(b"RESULTS\r\n").unwrap();
    let local = |prefix: &str| {
        std::fs::read_dir(home.join("out"))
            .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with(prefix)).count())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + WAIT;
    while local("err-") == 0 {
        assert!(Instant::now() < deadline, "no stderr was brought");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut s = s;
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let at_cut = local("err-");
    assert!(at_cut < JOBS, "every stderr was brought before the cut ({at_cut}): nothing was cut");
    std::thread::sleep(Duration::from_millis(500));
    let s = serve_at(dir.path(), &tokens, port, &[]);

    // The RESULTS sent again after the reconnection, then the rest.
    let header = g.read_reply().unwrap();
    assert_eq!(header[0], "S", "{header:?}");
    let mut got: HashMap<u32, Vec<String>> = HashMap::new();
    for _ in 0..header[1].parse::<usize>().unwrap() {
        let line = String::from_utf8(g.read_line().unwrap()).unwrap();
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        assert!(got.insert(args[0].parse().unwrap(), args[1..].to_vec()).is_none(), "two results: {line}");
    }
    for &id in &ids {
        got.entry(id).or_insert_with(|| g.wait_result(id, WAIT).unwrap());
    }
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(got[id][0], "NULL", "fetch {i}: {:?}", got[id]);
    }

    // The same fetches again, uncut: each stderr file must be what one
    // fetch writes.
    for (i, job) in names.iter().enumerate() {
        let r = g.call(|id| async_cmd(id, fetch(job, "again", format!("err-{i}.txt"))), WAIT).unwrap();
        assert_eq!(r[0], "NULL", "{r:?}");
        let once = std::fs::read(home.join("again").join(format!("err-{i}.txt"))).unwrap();
        assert!(!once.is_empty(), "job {i} wrote no stderr");
        assert_eq!(std::fs::read(home.join("out").join(format!("err-{i}.txt"))).unwrap(), once, "job {i}'s stderr, cut at {at_cut}");
        let out = std::fs::read(home.join("out").join(format!("{job}.txt"))).unwrap();
        assert_eq!(out, std::fs::read(&inputs[i]).unwrap().to_ascii_uppercase(), "job {i}'s output");
    }
    assert_eq!(jobs.len(), JOBS);
    assert_eq!(sim.batches_named("ann~cutfetch").len(), 1);
    drop(s);
}

/// A TCP relay between connect and a plain-TCP serve that cuts links on
/// cue: the first when `cut_first` is set (at its next bytes up), the
/// second after it has carried `second_lines` lines down.
struct CuttingProxy {
    port: u16,
    cut_first: std::sync::Arc<std::sync::atomic::AtomicBool>,
    second_cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    links: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CuttingProxy {
    fn start(to: u16, second_lines: usize) -> CuttingProxy {
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut_first, second_cut, links) =
            (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (cf, sc, ls) = (cut_first.clone(), second_cut.clone(), links.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().take(20) {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else { continue };
                let n = ls.fetch_add(1, Ordering::SeqCst) + 1;
                let ends = Arc::new((client.try_clone().unwrap(), server.try_clone().unwrap()));
                let close = move || {
                    let _ = ends.0.shutdown(Shutdown::Both);
                    let _ = ends.1.shutdown(Shutdown::Both);
                };
                let (mut c_read, mut s_write, cf, close_up) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap(), cf.clone(), close.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(k @ 1..) = std::io::Read::read(&mut c_read, &mut buf) {
                        if n == 1 && cf.load(Ordering::SeqCst) {
                            return close_up();
                        }
                        if s_write.write_all(&buf[..k]).is_err() {
                            return close_up();
                        }
                    }
                    close_up();
                });
                let (mut s_read, mut c_write, sc) = (server, client, sc.clone());
                std::thread::spawn(move || {
                    let (mut buf, mut lines) = ([0u8; 65536], 0);
                    while let Ok(k @ 1..) = std::io::Read::read(&mut s_read, &mut buf) {
                        let mut end = k;
                        if n == 2 {
                            for (i, _) in buf[..k].iter().enumerate().filter(|(_, b)| **b == b'\n') {
                                lines += 1;
                                if lines == second_lines {
                                    end = i + 1;
                                    break;
                                }
                            }
                        }
                        if c_write.write_all(&buf[..end]).is_err() {
                            return close();
                        }
                        if n == 2 && lines == second_lines {
                            sc.store(true, Ordering::SeqCst);
                            return close();
                        }
                    }
                    close();
                });
            }
        });
        CuttingProxy { port, cut_first, second_cut, links }
    }
}

/// The link dropped while a submit's inputs go up, with three submits
/// taken and not answered, and dropped again while connect resumes (after
/// the server's fourth line on the new link): the third link resumes all
/// of it. Every submit gets one result, each batch is made once, and the
/// line whose inputs were going up is answered in its turn.
#[test]
fn a_second_drop_while_resuming_loses_nothing() {
    use std::sync::atomic::Ordering;
    const FILES: usize = 60;
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let token = add_client(dir.path(), &tokens, &sim, "ann");
    let s = serve(dir.path(), &tokens, &["--insecure-loopback"]);
    let proxy = CuttingProxy::start(s.port, 4);
    let home = dir.path().join("ann");
    std::fs::create_dir_all(&home).unwrap();
    let small: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = home.join(format!("small-{i}"));
            std::fs::write(&p, format!("small {i}\n")).unwrap();
            p
        })
        .collect();
    let large = large_inputs(&home, FILES, "twice cut upload");
    let mut args = s.connect_args(&token, &[]);
    args[1] = format!("127.0.0.1:{}", proxy.port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut g = GahpClient::spawn(boinc_gahp(), &args, &[], &home).unwrap();
    assert_eq!(g.set_prefix("P:").unwrap(), ["S"]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    // Three submits taken, their batches held at the project.
    sim.set_faults(serde_json::json!({"rules": {"submit_rpc_handler.php:create_batch": {"delay": 1.0, "delay_ms": 3000}}}));
    let mut ids: Vec<(u32, String)> = Vec::new();
    for (i, f) in small.iter().enumerate() {
        let id = g.reqid();
        let name = format!("s{i}");
        g.submit_async(&async_cmd(id, AsyncCommand::Submit(uppercase_batch(&name, std::slice::from_ref(f))))).unwrap();
        ids.push((id, name));
    }
    // The large one: cut while its inputs go up.
    let id = g.reqid();
    let mut line = gahp_protocol::gahp::request::format(&async_cmd(id, AsyncCommand::Submit(uppercase_batch("big", &large))));
    line.extend_from_slice(b"\r\n");
    g.send_raw(&line).unwrap();
    ids.push((id, "big".into()));
    let area_in = s.files("ann").join(".transfer/in");
    let up = || std::fs::read_dir(&area_in).map(|d| d.filter_map(Result::ok).count()).unwrap_or(0);
    until("some inputs to go up", || up() >= 5);
    proxy.cut_first.store(true, Ordering::SeqCst);

    assert_eq!(g.read_reply().unwrap(), ["S"], "the submit whose inputs were going up");
    assert!(proxy.second_cut.load(Ordering::SeqCst), "the second link was not cut while resuming");
    assert!(proxy.links.load(Ordering::SeqCst) >= 3, "no third link");
    sim.set_faults(serde_json::json!({}));
    for (id, name) in &ids {
        let r = g.wait_result(*id, WAIT).unwrap();
        assert_eq!(r[0], "NULL", "{name}: {r:?}");
        assert_eq!(sim.batches_named(&format!("ann~{name}")).len(), 1, "{name} made once");
    }
    // No second result for any of them.
    let extra = g.results().unwrap();
    assert!(extra.is_empty(), "{extra:?}");
    assert!(g.try_wait().unwrap().is_none(), "connect carried on");
}
