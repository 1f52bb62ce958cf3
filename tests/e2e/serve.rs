//! `boinc_gahp serve` and `boinc_gahp connect`, the real binaries over TLS
//! (a throwaway certificate) and loopback TCP, against the simulated
//! project: who gets in, who is refused and how, and what a client may see.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::serve::*;
use crate::common::*;
use gahp_protocol::gahp::sequence_commands::{CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use gahp_protocol::gahp::{BlahCommand, Command as GahpCommand};

/// The tests put a client's files in its area themselves.
const REMOTE_PATHS: &[&str] = &["--remote-paths"];

/// `connect` that is refused: its exit status and what it says.
fn refused(s: &Serve, token_file: &Path) -> String {
    let out = Command::new(boinc_gahp()).args(s.connect_args(token_file, &[])).stdin(Stdio::null()).output().unwrap();
    assert!(!out.status.success() && out.stdout.is_empty(), "a refused connect writes no GAHP");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn open_fds(s: &Serve) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", s.child.id())).map(|d| d.count()).unwrap_or(0)
}

/// Everything the server sends until it closes (or the read times out).
fn read_all(r: &mut impl Read) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn fetch(job: &str, dir: &str, dst: &str) -> AsyncCommand {
    AsyncCommand::FetchOutput(FetchOutput {
        job_name: job.into(),
        dir: dir.into(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::Some,
        specs: vec![OutputSpec { src: "out".into(), dst: dst.into() }],
    })
}

#[test]
fn a_client_runs_a_batch_through_serve_and_another_client_cannot_see_it() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let bob = add_client(dir.path(), &tokens, &sim, "bob");
    let s = serve(dir.path(), &tokens, &[]);

    // Alice's inputs are in her area on the second tier; her paths are relative to it.
    let area = s.files("alice");
    std::fs::create_dir_all(area.join("in")).unwrap();
    let files: Vec<PathBuf> = (0..3)
        .map(|i| {
            std::fs::write(area.join(format!("in/f{i}")), format!("hello {i}\n")).unwrap();
            PathBuf::from(format!("in/f{i}"))
        })
        .collect();

    let mut a = s.connect(&alice, dir.path(), REMOTE_PATHS);
    assert!(a.banner.starts_with("$GahpVersion"), "{}", a.banner);
    // Whatever authenticator the client sends, its token's is used.
    let select = Request::SelectProject { url: sim.url.clone(), authenticator: Authenticator::new("not-the-key") };
    assert_eq!(a.command(&select).unwrap(), ["S"]);
    let r = a.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("b1", &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    let jobs = wait_finished(&mut a, "b1");
    assert_eq!(jobs.len(), 3);
    assert!(jobs.iter().all(|(name, st)| name.starts_with("b1#") && st == "DONE"), "names come back as the client gave them: {jobs:?}");
    std::fs::create_dir_all(area.join("out")).unwrap();
    let r = a.call(|id| async_cmd(id, fetch("b1#0.0", "out", "got0.txt")), WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(std::fs::read_to_string(area.join("out/got0.txt")).unwrap(), "HELLO 0\n");
    // On the project the names are the client's own.
    assert_eq!(sim.batches_named("alice~b1").len(), 1);
    assert!(sim.batches_named("b1").is_empty());

    // A path outside her area is refused before anything is done.
    let bad = uppercase_batch("b2", &[PathBuf::from("/etc/passwd")]);
    let id = a.reqid();
    assert_eq!(a.command(&async_cmd(id, AsyncCommand::Submit(bad))).unwrap(), ["E"]);
    let id = a.reqid();
    assert_eq!(a.command(&async_cmd(id, fetch("b1#1.0", "../../bob", "x"))).unwrap(), ["E"]);
    // A project not in her token, and a pool file on this host, are refused.
    let other = Request::SelectProject { url: "http://127.0.0.1:9/other/".into(), authenticator: Authenticator::new("x") };
    assert_eq!(a.command(&other).unwrap(), ["E"]);
    let pool = Request::SelectProject { url: "pool:/etc/boinc-gahp/pool.toml".into(), authenticator: Authenticator::new("-") };
    assert_eq!(a.command(&pool).unwrap(), ["E"]);
    // The BLAH dialect: a ping reaches her token's first project; a submit
    // whose ad names files in her area is taken (tests/e2e/serve_files.rs
    // runs BLAH jobs through connect with their files).
    let ping = a.call(
        |id| Request::Command { reqid: ReqId(id), command: GahpCommand::Blah(BlahCommand::Ping { batch_type: "boinc".into() }) },
        WAIT,
    );
    assert_eq!(ping.unwrap(), ["0", "No error"]);
    let ad = gahp_testkit::blah_job_ad(Path::new("in"), "job1", &[]);
    let id = a.reqid();
    assert_eq!(
        a.command(&Request::Command { reqid: ReqId(id), command: GahpCommand::Blah(BlahCommand::JobSubmit { ad }) }).unwrap(),
        ["S"]
    );

    // Bob, on the same BOINC account, gets for Alice's batch and jobs exactly
    // what he gets for ones that do not exist.
    let mut b = s.connect(&bob, dir.path(), REMOTE_PATHS);
    assert_eq!(b.command(&sim.select()).unwrap(), ["S"]);
    let ask = |b: &mut GahpClient, cmd: AsyncCommand| b.call(|id| async_cmd(id, cmd), WAIT).unwrap();
    for (hers, none) in [
        (
            AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["b1".into()] },
            AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["zz".into()] },
        ),
        (fetch("b1#0.0", "out", "x"), fetch("zz#0.0", "out", "x")),
        (AsyncCommand::AbortJobs { jobs: vec!["b1#1.0".into()] }, AsyncCommand::AbortJobs { jobs: vec!["zz#1.0".into()] }),
        (AsyncCommand::RetireBatch { batch: "b1".into() }, AsyncCommand::RetireBatch { batch: "zz".into() }),
        (AsyncCommand::SetLease { batch: "b1".into(), lease_time: 2e9 }, AsyncCommand::SetLease { batch: "zz".into(), lease_time: 2e9 }),
    ] {
        let (got, want) = (ask(&mut b, hers.clone()), ask(&mut b, none));
        if matches!(hers, AsyncCommand::QueryBatches { .. } | AsyncCommand::FetchOutput(_)) {
            assert_ne!(got[0], "NULL", "{hers:?}: {got:?}");
        }
        let want: Vec<String> = want.iter().map(|w| w.replace("zz", "b1")).collect();
        assert_eq!(got, want, "{hers:?}");
    }
    // Alice's batch is untouched.
    let jobs = wait_finished(&mut a, "b1");
    assert!(jobs.iter().all(|(_, st)| st == "DONE"), "{jobs:?}");

    let log = s.log_text();
    for secret in [sim.auth.as_str(), std::fs::read_to_string(&alice).unwrap().trim()] {
        assert!(!log.contains(secret), "a secret in the log");
    }
}

#[test]
fn no_token_a_wrong_or_revoked_token_garbage_and_plain_tcp_are_refused() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let carol = add_client(dir.path(), &tokens, &sim, "carol");
    let s = serve(dir.path(), &tokens, &["--auth-timeout", "2", "--max-line", "1048576"]);

    let wrong = dir.path().join("wrong.token");
    std::fs::write(&wrong, "bgt_0000000000000000000000000000000000000000000000000000000000000000\n").unwrap();
    assert!(refused(&s, &wrong).contains("the server refused: token refused"), "{}", refused(&s, &wrong));

    // Carol is connected when she is revoked: her session ends, and her token
    // is then refused exactly like a wrong one.
    let mut c = s.connect(&carol, dir.path(), REMOTE_PATHS);
    assert_eq!(c.command_line(b"COMMANDS").unwrap()[0], "S");
    let out = Command::new(boinc_gahp()).args(["token", "revoke", "carol", "--tokens", s.tokens.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    assert!(c.wait_exit(Duration::from_secs(20)).unwrap().is_some(), "the revoked client's connection ends");
    assert!(refused(&s, &carol).contains("the server refused: token refused"));

    // No token: nothing sent in time.
    let mut t = s.tls();
    let started = Instant::now();
    assert_eq!(read_all(&mut t).trim_end(), "E authentication\\ timed\\ out");
    assert!(started.elapsed() < Duration::from_secs(15));

    // Garbage first, over TLS.
    let mut t = s.tls();
    t.write_all(b"BOINC_PING 1\r\n").unwrap();
    assert_eq!(read_all(&mut t).trim_end(), "E the\\ first\\ line\\ must\\ be\\ AUTH\\ <token>");
    // A 10 MB line before authenticating.
    let mut t = s.tls();
    let _ = t.write_all(&vec![b'A'; 10 << 20]);
    // The refusal may be lost to the reset of the unread rest; never a session.
    let got = read_all(&mut t);
    assert!(got.is_empty() || got.starts_with("E the\\ first\\ line"), "{got:?}");

    // Plain TCP to the TLS port: no GAHP line comes back, the connection closes.
    let mut plain = TcpStream::connect(s.addr()).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    plain.write_all(b"AUTH bgt_x\r\nCOMMANDS\r\n").unwrap();
    let got = read_all(&mut plain);
    assert!(!got.contains("$GahpVersion") && !got.starts_with('S'), "{got:?}");

    // After all that, a good client goes on, and a 10 MB line (over its
    // 1 MiB limit) gets E without ending its session.
    let mut a = s.connect(&alice, dir.path(), REMOTE_PATHS);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    let mut long = b"BOINC_PING 7 ".to_vec();
    long.extend(std::iter::repeat_n(b'x', 10 << 20));
    assert_eq!(a.command_line(&long).unwrap(), ["E"]);
    assert_eq!(a.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);

    let log = s.log_text();
    assert!(log.contains("TLS handshake failed") && log.contains("unknown token"), "refusals are logged");
    assert!(!log.contains(std::fs::read_to_string(&alice).unwrap().trim()) && !log.contains(&sim.auth));
}

#[test]
fn a_thousand_half_open_connections_stall_no_one_and_their_descriptors_return() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let s = serve(dir.path(), &tokens, &["--auth-timeout", "3"]);
    let mut a = s.connect(&alice, dir.path(), REMOTE_PATHS);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    assert_eq!(a.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);
    let baseline = open_fds(&s);

    let half_open: Vec<TcpStream> = (0..1000).map(|_| TcpStream::connect(s.addr()).unwrap()).collect();
    // A connected client and a new one both go on meanwhile.
    let started = Instant::now();
    assert_eq!(a.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);
    let mut a2 = s.connect(&alice, dir.path(), REMOTE_PATHS);
    assert_eq!(a2.command_line(b"COMMANDS").unwrap()[0], "S");
    assert!(started.elapsed() < Duration::from_secs(3), "served within the half-open connections' auth timeout");
    drop(a);

    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let open = open_fds(&s);
        // The client's replaced connection closed; its new one is open.
        if open <= baseline {
            break;
        }
        assert!(Instant::now() < until, "descriptors stay open: {open} > {baseline}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(half_open);
    assert_eq!(a2.command_line(b"COMMANDS").unwrap()[0], "S");
}

#[test]
fn results_wait_for_a_client_that_comes_back_on_a_new_connection() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let s = serve(dir.path(), &tokens, &["--insecure-loopback"]);
    let plain = |token: &Path| s.connect(token, dir.path(), REMOTE_PATHS);
    let area = s.files("alice");
    std::fs::create_dir_all(&area).unwrap();
    std::fs::write(area.join("f"), "x\n").unwrap();

    let mut a = plain(&alice);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    a.set_next_reqid(40);
    a.submit_async(&async_cmd(40, AsyncCommand::Submit(uppercase_batch("r1", &[PathBuf::from("f")])))).unwrap();
    a.kill();

    // Back on a new connection: the submit's result is there, once.
    let mut a = plain(&alice);
    let r = a.wait_result(40, WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    assert!(a.results().unwrap().is_empty());
    assert_eq!(sim.batches_named("alice~r1").len(), 1);
}

#[test]
fn connections_over_the_limit_are_closed_and_a_freed_slot_is_used_again() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let s = serve(dir.path(), &tokens, &["--insecure-loopback", "--max-connections", "1"]);
    let connect = || Command::new(boinc_gahp()).args(s.connect_args(&alice, &[])).stdin(Stdio::null()).output().unwrap();
    let before = open_fds(&s);
    let held = TcpStream::connect(s.addr()).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while open_fds(&s) <= before {
        assert!(Instant::now() < until, "the held connection was never accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = connect();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("closed the connection before answering AUTH"), "{said}");
    drop(held);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let out = connect();
        // stdin is empty: banner, then EOF ends the session.
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).starts_with("$GahpVersion"));
            break;
        }
        assert!(Instant::now() < until, "the slot never came back");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn insecure_loopback_is_refused_off_loopback_and_tls_needs_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, "").unwrap();
    for (args, says) in [
        (vec!["serve", "--listen", "0.0.0.0:0", "--tokens", tokens.to_str().unwrap(), "--insecure-loopback"], "not a loopback address"),
        (vec!["serve", "--listen", "127.0.0.1:0", "--tokens", tokens.to_str().unwrap()], "--tls-cert"),
    ] {
        let out = Command::new(boinc_gahp()).args(["--state-dir", dir.path().to_str().unwrap()]).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn a_sequence_runs_in_its_clients_area_and_another_client_cannot_see_it() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let bob = add_client(dir.path(), &tokens, &sim, "bob");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "sequence_poll_ms = 200\n").unwrap();
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &[]);
    let area = s.files("alice");
    std::fs::create_dir_all(area.join("run")).unwrap();
    std::fs::create_dir_all(area.join("out")).unwrap();
    std::fs::write(area.join("run/state0"), b"").unwrap();
    std::fs::write(area.join("run/extra"), "extra of md\n").unwrap();

    let seq = sequence_call;
    let create = |state: &str| {
        SequenceCommand::Create(CreateSequence {
            name: "md".into(),
            app_name: "stepper".into(),
            steps: 2,
            max_step_time: 600,
            max_attempts: 3,
            end_marker: None,
            state_files: vec![InputFile { src: state.into(), dst_name: "state".into() }],
            args: vec![],
            inputs: vec![InputFile { src: "run/extra".into(), dst_name: "extra".into() }],
        })
    };
    let mut a = s.connect(&alice, dir.path(), REMOTE_PATHS);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    // A state file outside her area is refused before anything is made.
    let id = a.reqid();
    let outside = Request::Command { reqid: ReqId(id), command: GahpCommand::Sequence(create("/etc/passwd")) };
    assert_eq!(a.command(&outside).unwrap(), ["E"]);
    assert_eq!(seq(&mut a, create("run/state0")), ["NULL"]);
    let done = wait_sequence_over(&mut a, "md", Duration::from_secs(120));
    assert_eq!((done[1].as_str(), done[2].as_str()), ("COMPLETED", "2"), "{done:?}");
    let r = seq(&mut a, SequenceCommand::Fetch(FetchSequence { name: "md".into(), step: StepSelector::Latest, dir: "out".into() }));
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(r[1], "2", "{r:?}");
    let mut want = String::new();
    for _ in 0..2 {
        want = boinc_sim::apps::stepper_next(&want, b"extra of md\n").unwrap();
    }
    assert_eq!(std::fs::read_to_string(area.join("out/state")).unwrap(), want);
    // On the project, every step's batch carries her prefix.
    assert!(!sim.batches_named("alice~md#1#1").is_empty(), "step 1 as alice's on the project");
    assert!(sim.batches_named("md#1#1").is_empty());

    // Bob gets for her sequence what he gets for one that does not exist,
    // and cannot end, abort or fetch it.
    let mut b = s.connect(&bob, dir.path(), REMOTE_PATHS);
    assert_eq!(b.command(&sim.select()).unwrap(), ["S"]);
    for (hers, none) in [
        (SequenceCommand::Query { name: "md".into() }, SequenceCommand::Query { name: "zz".into() }),
        (SequenceCommand::Abort { name: "md".into() }, SequenceCommand::Abort { name: "zz".into() }),
        (SequenceCommand::End { name: "md".into() }, SequenceCommand::End { name: "zz".into() }),
        (
            SequenceCommand::Fetch(FetchSequence { name: "md".into(), step: StepSelector::Latest, dir: "o".into() }),
            SequenceCommand::Fetch(FetchSequence { name: "zz".into(), step: StepSelector::Latest, dir: "o".into() }),
        ),
    ] {
        let (got, want) = (seq(&mut b, hers.clone()), seq(&mut b, none));
        assert_ne!(got[0], "NULL", "{hers:?}: {got:?}");
        let want: Vec<String> = want.iter().map(|w| w.replace("zz", "md")).collect();
        assert_eq!(got, want, "{hers:?}");
    }
    let r = seq(&mut a, SequenceCommand::Query { name: "md".into() });
    assert_eq!(r[1], "COMPLETED", "hers is untouched: {r:?}");
}
