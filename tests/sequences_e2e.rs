//! Work sequences end to end (`BOINC_SEQUENCE_*`, `docs/sequences.md`): the
//! real daemon over pipes against boinc-sim's `stepper` app on loopback.
//! The final state is checked against `stepper_next` computed here: it
//! proves every step ran once, in order, on the right state.

mod common;
use common::*;
use gahp_protocol::gahp::sequence::{CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use std::path::Path;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(180);

/// A daemon that polls its sequences every 200 ms.
fn daemon(sim: &Sim, dir: &Path) -> GahpClient {
    let config = dir.join("config.toml");
    std::fs::write(&config, "sequence_poll_ms = 200\n").unwrap();
    let mut g = gahp_with(dir, &["--config", config.to_str().unwrap()], &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    g
}

fn seq(g: &mut GahpClient, command: SequenceCommand) -> Vec<String> {
    g.call(|id| Request::Sequence { reqid: ReqId(id), command }, WAIT).unwrap()
}

/// A stepper sequence from an empty state, with `extra` as its other input.
fn create(g: &mut GahpClient, dir: &Path, name: &str, steps: u32, max_step_time: u32, max_attempts: u32, args: &[&str]) -> Vec<String> {
    let state = dir.join(format!("{name}.state0"));
    std::fs::write(&state, b"").unwrap();
    let extra = dir.join(format!("{name}.extra"));
    std::fs::write(&extra, format!("extra of {name}\n")).unwrap();
    seq(
        g,
        SequenceCommand::Create(CreateSequence {
            name: name.into(),
            app_name: "stepper".into(),
            steps,
            max_step_time,
            max_attempts,
            end_marker: Some("DONE".into()),
            state_files: vec![InputFile { src: state, dst_name: "state".into() }],
            args: args.iter().map(|a| a.to_string()).collect(),
            inputs: vec![InputFile { src: extra, dst_name: "extra".into() }],
        }),
    )
}

/// The state line after `n` steps, computed independently.
fn expected_state(name: &str, n: u32) -> String {
    let extra = format!("extra of {name}\n");
    let mut state = String::new();
    for _ in 0..n {
        state = boinc_sim::apps::stepper_next(&state, extra.as_bytes()).unwrap();
    }
    state
}

fn query(g: &mut GahpClient, name: &str) -> Vec<String> {
    let r = seq(g, SequenceCommand::Query { name: name.into() });
    assert_eq!(r[0], "NULL", "{r:?}");
    let dead: usize = r[9].parse().unwrap();
    assert_eq!(r.len(), 10 + 5 * dead, "field count of {r:?}");
    r
}

/// Queries until `done(reply)`; the last reply.
fn wait_until(g: &mut GahpClient, name: &str, what: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let until = Instant::now() + LONG;
    loop {
        let r = query(g, name);
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < until, "{name}: no {what} in time: {r:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn fetch_latest(g: &mut GahpClient, name: &str, out: &Path) -> (u32, String) {
    std::fs::create_dir_all(out).unwrap();
    let r = seq(g, SequenceCommand::Fetch(FetchSequence { name: name.into(), step: StepSelector::Latest, dir: out.into() }));
    assert_eq!(r[0], "NULL", "{r:?}");
    (r[1].parse().unwrap(), std::fs::read_to_string(out.join("state")).unwrap())
}

fn set_host(sim: &Sim, json: &str) {
    let rest = sim.url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    http(addr, "POST", &format!("/{path}__sim/hosts"), Some(json));
}

#[test]
fn a_twenty_step_sequence_survives_lost_and_straggling_hosts() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    // Every host loses its instances until three relocations happened.
    for id in 1..=4 {
        set_host(&sim, &format!("{{\"id\": {id}, \"lost_rate\": 1.0}}"));
    }
    let mut g = daemon(&sim, dir.path());
    assert_eq!(create(&mut g, dir.path(), "long", 20, 2, 50, &[]), ["NULL"]);
    wait_until(&mut g, "long", "three relocations", |r| r[6].parse::<u32>().unwrap() >= 3);
    // Then host 1 (the first free host, so the next attempt's) straggles
    // for ever and keeps its instance; the others work.
    for id in 1..=4 {
        set_host(&sim, &format!("{{\"id\": {id}, \"lost_rate\": 0.0}}"));
    }
    set_host(&sim, "{\"id\": 1, \"straggler_rate\": 1.0, \"straggler_factor\": 1e9}");
    let r = wait_until(&mut g, "long", "completion", |r| r[1] != "RUNNING");
    assert_eq!(r[1], "COMPLETED", "{r:?}");
    assert_eq!(r[2], "20", "steps done: {r:?}");
    let relocations: usize = r[6].parse().unwrap();
    assert!(relocations >= 4, "three lost, one straggling: {r:?}");
    let dead: usize = r[9].parse().unwrap();
    assert_eq!(dead, relocations, "each relocation leaves one dead branch: {r:?}");
    for d in r[10..].chunks(5) {
        assert!(["deadline missed", "never sent", "lost on the server", "job error"].contains(&d[2].as_str()), "{d:?}");
        assert!(d[4].parse::<f64>().unwrap() >= d[3].parse::<f64>().unwrap(), "{d:?}");
    }
    let (step, state) = fetch_latest(&mut g, "long", &dir.path().join("out"));
    assert_eq!(step, 20);
    assert_eq!(state, expected_state("long", 20));
    assert!(state.starts_with("counter 20 "), "{state}");
    // Every attempt's batch, dead branches included, is retired once the
    // sequence is over.
    all_retired(&sim, "long", 20 + relocations);
}

#[test]
fn extend_end_marker_end_command_and_abort() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&sim, dir.path());

    // Extend: 2 planned, 2 more.
    assert_eq!(create(&mut g, dir.path(), "ext", 2, 30, 3, &[]), ["NULL"]);
    assert_eq!(seq(&mut g, SequenceCommand::Extend { name: "ext".into(), steps: 2 }), ["NULL"]);
    // The back end ends it: DONE at counter 3 of 10.
    assert_eq!(create(&mut g, dir.path(), "marker", 10, 30, 3, &["--end-at", "3"]), ["NULL"]);
    // The owner ends it, and aborts another.
    assert_eq!(create(&mut g, dir.path(), "ended", 50, 30, 3, &["--sleep-ms", "300"]), ["NULL"]);
    assert_eq!(create(&mut g, dir.path(), "aborted", 50, 30, 3, &["--sleep-ms", "300"]), ["NULL"]);

    let r = wait_until(&mut g, "ext", "completion", |r| r[1] != "RUNNING");
    assert_eq!((r[1].as_str(), r[2].as_str(), r[3].as_str()), ("COMPLETED", "4", "4"), "{r:?}");
    assert_eq!(fetch_latest(&mut g, "ext", &dir.path().join("ext")).1, expected_state("ext", 4));

    let r = wait_until(&mut g, "marker", "completion", |r| r[1] != "RUNNING");
    assert_eq!((r[1].as_str(), r[2].as_str()), ("COMPLETED", "3"), "{r:?}");
    let (step, state) = fetch_latest(&mut g, "marker", &dir.path().join("marker"));
    assert_eq!((step, state), (3, expected_state("marker", 3)));
    assert!(dir.path().join("marker/DONE").exists());

    wait_until(&mut g, "ended", "a step", |r| r[2] != "0");
    assert_eq!(seq(&mut g, SequenceCommand::End { name: "ended".into() }), ["NULL"]);
    let r = wait_until(&mut g, "ended", "completion", |r| r[1] != "RUNNING");
    assert_eq!(r[1], "COMPLETED", "{r:?}");
    let done: u32 = r[2].parse().unwrap();
    assert!((1..50).contains(&done), "{r:?}");
    assert_eq!(fetch_latest(&mut g, "ended", &dir.path().join("ended")).1, expected_state("ended", done));

    assert_eq!(seq(&mut g, SequenceCommand::Abort { name: "aborted".into() }), ["NULL"]);
    let r = query(&mut g, "aborted");
    assert_eq!((r[1].as_str(), r[4].as_str()), ("ABORTED", "0"), "{r:?}");
    let r = seq(&mut g, SequenceCommand::Extend { name: "aborted".into(), steps: 1 });
    assert!(r[0].contains("finished"), "{r:?}");
    // Nothing of a sequence that is over stays on the server.
    for (name, at_least) in [("ext", 4), ("marker", 3), ("ended", done as usize), ("aborted", 1)] {
        all_retired(&sim, name, at_least);
    }
    let r = seq(&mut g, SequenceCommand::Query { name: "nope".into() });
    assert!(r[0].contains("no sequence named nope"), "{r:?}");
    // A name BOINC's create_work would split is refused before anything is made.
    let r = create(&mut g, dir.path(), "md run", 2, 600, 3, &[]);
    assert!(r[0].contains("can't name BOINC jobs") && r[0].contains("white space"), "{r:?}");
    let r = seq(&mut g, SequenceCommand::Query { name: "md run".into() });
    assert!(r[0].contains("no sequence named"), "{r:?}");
}

#[test]
fn a_daemon_killed_again_and_again_resumes_to_the_same_final_state() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&sim, dir.path());
    assert_eq!(create(&mut g, dir.path(), "killed", 12, 30, 3, &[]), ["NULL"]);
    // kill -9 at staggered moments: submitting, running, collecting.
    for pause_ms in [150u64, 400, 700, 250, 900, 550] {
        std::thread::sleep(Duration::from_millis(pause_ms));
        g.kill();
        g = daemon(&sim, dir.path());
        // The first command on the project resumes its sequences.
        query(&mut g, "killed");
    }
    let r = wait_until(&mut g, "killed", "completion", |r| r[1] != "RUNNING");
    assert_eq!((r[1].as_str(), r[2].as_str()), ("COMPLETED", "12"), "{r:?}");
    let (step, state) = fetch_latest(&mut g, "killed", &dir.path().join("out"));
    assert_eq!((step, state), (12, expected_state("killed", 12)));
    // Nothing was submitted twice: one job per step and relocation.
    let relocations: usize = r[6].parse().unwrap();
    let jobs =
        sim.state()["jobs"].as_array().unwrap().iter().filter(|j| j["name"].as_str().is_some_and(|n| n.starts_with("killed#"))).count();
    assert_eq!(jobs, 12 + relocations, "{r:?}");
}

/// Waits (the retires run after the status changes) until every batch of
/// sequence `name` is retired on the server; there are at least `at_least`.
fn all_retired(sim: &Sim, name: &str, at_least: usize) {
    const RETIRED: i64 = 4;
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let state = sim.state();
        let prefix = format!("{name}#");
        let batches: Vec<(String, i64)> = state["batches"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .map(|b| (b["name"].as_str().unwrap().to_string(), b["state"].as_i64().unwrap()))
            .collect();
        let left: Vec<_> = batches.iter().filter(|(_, s)| *s != RETIRED).collect();
        if left.is_empty() {
            assert!(batches.len() >= at_least, "{name}: {batches:?}");
            return;
        }
        assert!(Instant::now() < until, "{name}: not retired: {left:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn batches_left_to_retire_by_a_killed_daemon_are_retired_by_the_next() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    // Every retire_batch fails (the server does nothing) until the kill.
    sim.set_faults(serde_json::json!({"seed": 1, "rules": {"submit_rpc_handler.php:retire_batch": {"reset": 1.0}}}));
    let mut g = daemon(&sim, dir.path());
    assert_eq!(create(&mut g, dir.path(), "tidy", 3, 30, 3, &[]), ["NULL"]);
    let r = wait_until(&mut g, "tidy", "completion", |r| r[1] != "RUNNING");
    assert_eq!(r[1], "COMPLETED", "{r:?}");
    std::thread::sleep(Duration::from_millis(500));
    g.kill();
    let unretired = sim.state()["batches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["name"].as_str().unwrap().starts_with("tidy#") && b["state"].as_i64() != Some(4))
        .count();
    assert_eq!(unretired, 3, "nothing could be retired before the kill");
    sim.set_faults(serde_json::json!({}));
    let mut g = daemon(&sim, dir.path());
    query(&mut g, "tidy");
    all_retired(&sim, "tidy", 3);
}
