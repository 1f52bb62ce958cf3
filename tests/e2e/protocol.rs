//! The GAHP line protocol as HTCondor's gridmanager speaks it, against the
//! real binary over pipes.

use crate::common::*;
use std::time::{Duration, Instant};

#[test]
fn startup_sequence_transcript() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp(dir.path());
    assert_eq!(g.banner, r"$GahpVersion: 1.0.2 Nov 21 2026 BOINC\ GAHP\ (rust)\ 0.1.0 $");
    assert!(g.banner.len() <= 149);

    let cmds = g.command_line(b"COMMANDS").unwrap();
    assert_eq!(cmds[0], "S");
    for c in [
        "ASYNC_MODE_OFF",
        "ASYNC_MODE_ON",
        "BOINC_ABORT_JOBS",
        "BOINC_FETCH_OUTPUT",
        "BOINC_PING",
        "BOINC_QUERY_BATCHES",
        "BOINC_RETIRE_BATCH",
        "BOINC_SELECT_PROJECT",
        "BOINC_SET_LEASE",
        "BOINC_SUBMIT",
        "COMMANDS",
        "QUIT",
        "RESPONSE_PREFIX",
        "RESULTS",
        "VERSION",
    ] {
        assert!(cmds.iter().any(|x| x == c), "{c} advertised");
    }
    // RESPONSE_PREFIX: its own reply unprefixed, everything after prefixed.
    g.send_raw(b"RESPONSE_PREFIX GAHP:\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"S");
    g.send_raw(b"ASYNC_MODE_ON\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"GAHP:S");
    let select = format!("BOINC_SELECT_PROJECT {} {}\r\n", sim.url, sim.auth);
    g.send_raw(select.as_bytes()).unwrap();
    assert_eq!(g.read_line().unwrap(), b"GAHP:S");
    g.send_raw(b"BOINC_PING 2\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"GAHP:S");
    // The ping finishes: one R, then RESULTS gives its line.
    assert_eq!(g.read_line_within(WAIT).unwrap(), b"GAHP:R");
    g.send_raw(b"RESULTS\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"GAHP:S 1");
    assert_eq!(g.read_line().unwrap(), b"GAHP:2 NULL");
    g.send_raw(b"VERSION\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), format!("GAHP:S {}", g.banner).as_bytes());
    g.send_raw(b"RESULTS\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"GAHP:S 0");
    // QUIT: S, then the process ends.
    g.send_raw(b"QUIT\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"GAHP:S");
    let status = g.close(Duration::from_secs(5)).unwrap();
    assert!(status.success());
}

#[test]
fn eof_ends_the_daemon_promptly_with_work_in_flight() {
    let sim = Sim::start();
    sim.set_faults(serde_json::json!({"seed": 1, "rules": {"submit_rpc_handler.php:ping": {"delay": 1.0, "delay_ms": 30000}}}));
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    for id in 2..50 {
        g.submit_async(&async_cmd(id, AsyncCommand::Ping)).unwrap();
    }
    let t = Instant::now();
    assert!(g.close(Duration::from_secs(5)).unwrap().success());
    assert!(t.elapsed() < Duration::from_secs(3), "exit took {:?}", t.elapsed());
}

/// Standard input that is a file, not a pipe (read another way:
/// `src/stdin.rs`): every command is read and answered, and its end ends
/// the daemon.
#[test]
fn commands_from_a_file_are_answered_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("commands");
    std::fs::write(&input, "VERSION\r\nCOMMANDS\r\nNO_SUCH_COMMAND\r\nVERSION\r\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_boinc_gahp"))
        .args(["--log-file", dir.path().join("gahp.log").to_str().unwrap(), "--state-dir", dir.path().join("state").to_str().unwrap()])
        .current_dir(dir.path())
        .stdin(std::fs::File::open(&input).unwrap())
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "banner and four answers: {text}");
    assert!(lines[0].starts_with("$GahpVersion"), "{text}");
    assert!(lines[1].starts_with("S $GahpVersion"), "{text}");
    assert!(lines[2].starts_with("S ") && lines[2].contains("BOINC_PING"), "{text}");
    assert!(lines[3].starts_with('E'), "{text}");
    assert_eq!(lines[4], lines[1], "{text}");
}

#[test]
fn malformed_input_gets_e_and_the_daemon_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp(dir.path());
    let bad: &[&[u8]] = &[
        b"",
        b"NOT_A_COMMAND",
        b"BOINC_BOGUS 13",
        b"BOINC_PING",
        b"BOINC_PING 0",
        b"BOINC_PING 12abc",
        b"BOINC_PING -3",
        b"BOINC_PING 99999999999999",
        b"BOINC_PING 5 extra",
        b"BOINC_QUERY_BATCHES 12 0 x",
        b"BOINC_QUERY_BATCHES 12 0 2 onlyone",
        b"BOINC_QUERY_BATCHES 12 zero 1 b",
        b"BOINC_SUBMIT 7 b app 1 j 0 0 NULL NULL",
        b"BOINC_SUBMIT 7 b app 2 j 0 0",
        b"BOINC_SUBMIT 7 b app 1 j 4000000000 a",
        b"BOINC_SUBMIT 7 b app x",
        b"BOINC_FETCH_OUTPUT 8 job /tmp err MAYBE 0",
        b"BOINC_FETCH_OUTPUT 8 job /tmp err SOME 1 out",
        b"BOINC_ABORT_JOBS 9",
        b"BOINC_SET_LEASE 10 batch soon",
        b"BOINC_SELECT_PROJECT onlyurl",
        b"RESPONSE_PREFIX",
        b"BOINC_RETIRE_BATCH 11 b\xff\xfe",
    ];
    for line in bad {
        assert_eq!(g.command_line(line).unwrap(), ["E"], "{}", String::from_utf8_lossy(line));
    }
    // A line longer than the limit is not kept; a huge valid one is fine
    // (checked with a 100,000-job submit in commands_e2e).
    assert_eq!(g.command_line(b"boinc_ping 3").unwrap(), ["S"], "case-insensitive codes");
    assert_eq!(g.command_line(b"BOINC_PING 3").unwrap(), ["E"], "a pending request id is refused");
    let r = g.wait_result(3, WAIT).unwrap();
    assert_eq!(r, ["no project selected"]);
    assert_eq!(g.command_line(b"COMMANDS").unwrap()[0], "S");
}

#[test]
fn escaped_newlines_and_empty_arguments_stay_inside_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp_with(dir.path(), &["--command-timeout", "5"], &[]);
    // A project URL with an escaped LF and spaces is one argument; an empty
    // argument (two spaces) is an argument too.
    g.send_raw(b"BOINC_SELECT_PROJECT http://127.0.0.1:9/a\\ b\\\nc/ auth\n").unwrap();
    assert_eq!(g.read_reply().unwrap(), ["S"]);
    g.send_raw(b"BOINC_SELECT_PROJECT  auth\n").unwrap();
    assert_eq!(g.read_reply().unwrap(), ["S"], "an empty URL is still two arguments");
    g.send_raw(b"BOINC_RETIRE_BATCH 4 a\\ b\\\\c\n").unwrap();
    assert_eq!(g.read_reply().unwrap(), ["S"]);
    let r = g.wait_result(4, WAIT).unwrap();
    assert_eq!(r.len(), 1, "one error argument: {r:?}");
    assert!(r[0].starts_with("retire_batch() returned -1 unusable project URL"), "{r:?}");
}

#[test]
fn async_mode_notifies_once_per_results() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp(dir.path());
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    for id in 2..12 {
        g.submit_async(&async_cmd(id, AsyncCommand::Ping)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    // Results queued before async mode is on are announced when it comes on.
    g.send_raw(b"ASYNC_MODE_ON\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"S");
    assert_eq!(g.read_line_within(WAIT).unwrap(), b"R");
    // No second R before RESULTS.
    assert!(g.read_line_within(Duration::from_millis(300)).is_err());
    let results = g.results().unwrap();
    assert_eq!(results.len(), 10);
    let mut ids: Vec<u32> = results.iter().map(|r| r[0].parse().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, (2..12).collect::<Vec<_>>(), "each request exactly once");
    assert!(results.iter().all(|r| r[1] == "NULL"));
}

#[test]
fn return_lines_come_at_once_with_thousands_in_flight_and_a_slow_server() {
    let sim = Sim::start();
    sim.set_faults(serde_json::json!({"seed": 7, "rules": {"*": {"delay": 1.0, "delay_ms": 2000}}}));
    let dir = tempfile::tempdir().unwrap();
    // Enough HTTP concurrency that the 2000 slow RPCs finish in seconds.
    let config = dir.path().join("gahp.toml");
    std::fs::write(&config, "max_concurrent_rpcs = 500\n").unwrap();
    let mut g = gahp_with(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    g.command(&sim.select()).unwrap();
    let t = Instant::now();
    let mut worst = Duration::ZERO;
    for id in 2..2002u32 {
        let one = Instant::now();
        g.submit_async(&async_cmd(id, AsyncCommand::SetLease { batch: format!("nosuch{id}"), lease_time: 1.0 })).unwrap();
        worst = worst.max(one.elapsed());
    }
    eprintln!("2000 return lines in {:?}, worst {:?}", t.elapsed(), worst);
    assert!(worst < Duration::from_secs(1), "worst return line took {worst:?}");
    // Every one of them gets exactly one result.
    let mut seen = std::collections::HashSet::new();
    let until = Instant::now() + Duration::from_secs(120);
    while seen.len() < 2000 {
        for r in g.results().unwrap() {
            assert!(seen.insert(r[0].parse::<u32>().unwrap()), "duplicate result {r:?}");
            assert!(r[1].starts_with("set_lease() returned -1 no such batch"), "{r:?}");
        }
        assert!(Instant::now() < until, "only {} results", seen.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_panicking_actor_still_yields_one_result_and_the_daemon_goes_on() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp_with(dir.path(), &[], &[("BOINC_GAHP_PANIC_ON", "doomed")]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    g.command(&sim.select()).unwrap();
    let r = g.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "doomed".into() }), WAIT).unwrap();
    assert_eq!(r.len(), 1);
    assert!(r[0].contains("internal error"), "{r:?}");
    // The project's tree was replaced: the next command works.
    let r = g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    assert!(log_text(dir.path()).contains("panic"));
}

#[test]
fn config_txt_selects_the_initial_project_and_version_flag_works() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.txt"), format!("{}\n{}\n", sim.url, sim.auth)).unwrap();
    let mut g = gahp(dir.path());
    let r = g.call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["nosuch".into()] }), WAIT).unwrap();
    assert_eq!(r, ["error querying batch: -1 no batch named nosuch"]);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_boinc_gahp")).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "--version writes to stderr");
    assert!(String::from_utf8_lossy(&out.stderr).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn the_authenticator_never_reaches_the_log() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp_with(dir.path(), &["--log-level", "trace"], &[]);
    g.command(&sim.select()).unwrap();
    let files = inputs(dir.path(), 2, "auth");
    g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("authcheck", &files))), WAIT).unwrap();
    g.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "nosuch".into() }), WAIT).unwrap();
    drop(g);
    let log = log_text(dir.path());
    assert!(log.len() > 100, "something was logged");
    assert!(!log.contains(&sim.auth), "authenticator in the log");
}

#[test]
fn results_leave_in_completion_order() {
    let sim = Sim::start();
    // The ping is slow, the retire fast: the retire's result comes first.
    sim.set_faults(serde_json::json!({"seed": 1, "rules": {"submit_rpc_handler.php:ping": {"delay": 1.0, "delay_ms": 1500}}}));
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp(dir.path());
    g.command(&sim.select()).unwrap();
    g.submit_async(&async_cmd(2, AsyncCommand::Ping)).unwrap();
    g.submit_async(&async_cmd(3, AsyncCommand::RetireBatch { batch: "nosuch".into() })).unwrap();
    let until = Instant::now() + WAIT;
    let mut order = Vec::new();
    while order.len() < 2 {
        order.extend(g.results().unwrap().into_iter().map(|r| r[0].clone()));
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(order, ["3", "2"]);
}
