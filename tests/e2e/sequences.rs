//! Work sequences end to end (`BOINC_SEQUENCE_*`, `docs/sequences.md`): the
//! real daemon over pipes against boinc-sim's `stepper` app on loopback.
//! The final state is checked against `stepper_next` computed here: it
//! proves every step ran once, in order, on the right state.

use crate::common::*;
use gahp_protocol::gahp::sequence_commands::{CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use gahp_protocol::gahp::Command;
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
    g.call(|id| Request::Command { reqid: ReqId(id), command: Command::Sequence(command) }, WAIT).unwrap()
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

#[test]
fn a_twenty_step_sequence_survives_lost_and_straggling_hosts() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    // Every host loses its instances until three relocations happened.
    for id in 1..=4 {
        sim.set_host(&format!("{{\"id\": {id}, \"lost_rate\": 1.0}}"));
    }
    let mut g = daemon(&sim, dir.path());
    assert_eq!(create(&mut g, dir.path(), "long", 20, 2, 50, &[]), ["NULL"]);
    wait_until(&mut g, "long", "three relocations", |r| r[6].parse::<u32>().unwrap() >= 3);
    // Then host 1 (the first free host, so the next attempt's) straggles
    // for ever and keeps its instance; the others work.
    for id in 1..=4 {
        sim.set_host(&format!("{{\"id\": {id}, \"lost_rate\": 0.0}}"));
    }
    sim.set_host("{\"id\": 1, \"straggler_rate\": 1.0, \"straggler_factor\": 1e9}");
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

// kill -9 in each phase of a step, on purpose: the daemon is made to sit in
// that phase by the sim (a hung submit_batch, a host that runs the step for
// seconds, a hung output download), killed there, restarted on the same
// state directory, and the sequence is driven to its end.

/// Waits until the sim's fault tally has `key` ("<endpoint> <kind>"): the
/// daemon's request is then inside that call.
fn wait_injected(sim: &Sim, key: &str) {
    let until = Instant::now() + LONG;
    while sim.state()["faults_injected"][key].as_u64().unwrap_or(0) == 0 {
        assert!(Instant::now() < until, "no {key} in time");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The sim's jobs of sequence `name`, with their step.
fn jobs_of_sequence(sim: &Sim, name: &str) -> Vec<(u32, serde_json::Value)> {
    let prefix = format!("{name}#");
    sim.state()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| {
            let rest = j["name"].as_str()?.strip_prefix(&prefix)?;
            let step = rest.split('#').next()?.parse().ok()?;
            Some((step, j.clone()))
        })
        .collect()
}

/// The job of `step` (any attempt) is in `status` on the server.
fn step_status_is(sim: &Sim, name: &str, step: u32, status: &str) -> bool {
    jobs_of_sequence(sim, name).iter().any(|(s, j)| *s == step && j["status"] == status)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Drives the restarted daemon to the end and checks what must hold after
/// any kill: the exact final state, one successful job per step on the
/// server (none live twice), one job per step and relocation, and no
/// partial file in the content store or the fetch directory. Returns the
/// relocations.
fn finish_after_kill(sim: &Sim, g: &mut GahpClient, dir: &Path, name: &str, steps: u32) -> usize {
    let r = wait_until(g, name, "completion", |r| r[1] != "RUNNING");
    assert_eq!((r[1].as_str(), r[2].parse::<u32>().unwrap()), ("COMPLETED", steps), "{r:?}");
    let out = dir.join(format!("{name}.out"));
    let (step, state) = fetch_latest(g, name, &out);
    assert_eq!((step, state), (steps, expected_state(name, steps)));
    assert_eq!(files_in(&out), ["state"], "only the state file, whole");
    let leftovers: Vec<String> = files_in(&dir.join("state/sequence-files")).into_iter().filter(|n| n.ends_with(".part")).collect();
    assert!(leftovers.is_empty(), "partial files in the content store: {leftovers:?}");
    let relocations: usize = r[6].parse().unwrap();
    let jobs = jobs_of_sequence(sim, name);
    assert_eq!(jobs.len(), steps as usize + relocations, "one job per step and relocation: {r:?}");
    for step in 1..=steps {
        let done = jobs.iter().filter(|(s, j)| *s == step && j["status"] == "DONE").count();
        assert_eq!(done, 1, "step {step}: one successful job, no step live twice");
    }
    relocations
}

#[test]
fn killed_while_a_step_is_being_submitted() {
    let sim = Sim::start();
    // Step 3's submit_batch hangs (and is never acted on): its batch exists,
    // its files are up, its job is not.
    sim.set_faults(serde_json::json!({
        "script": [{"endpoint": "submit_rpc_handler.php:submit_batch", "nth": 3, "kind": "hang", "hang_ms": 120000}]
    }));
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&sim, dir.path());
    assert_eq!(create(&mut g, dir.path(), "sub", 5, 60, 3, &[]), ["NULL"]);
    wait_injected(&sim, "submit_rpc_handler.php:submit_batch hang");
    let batch = sim.batches_named("sub#3#1");
    assert_eq!(batch.len(), 1, "step 3's batch was created");
    assert!(sim.jobs_of(batch[0]["id"].as_i64().unwrap()).is_empty(), "and holds no job yet");
    assert_eq!(query(&mut g, "sub")[4], "3", "the daemon is on step 3");
    g.kill();
    sim.set_faults(serde_json::json!({}));
    let mut g = daemon(&sim, dir.path());
    let relocations = finish_after_kill(&sim, &mut g, dir.path(), "sub", 5);
    assert_eq!(relocations, 0, "the empty batch was reused, not abandoned");
    assert_eq!(sim.batches_named("sub#3#1").len(), 1, "and not made twice");
}

#[test]
fn killed_while_a_step_is_running() {
    let sim = Sim::start();
    // Every step takes 3 s on its host (0.1 s times 30).
    for id in 1..=4 {
        sim.set_host(&format!("{{\"id\": {id}, \"straggler_rate\": 1.0, \"straggler_factor\": 30}}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&sim, dir.path());
    assert_eq!(create(&mut g, dir.path(), "run", 3, 60, 3, &[]), ["NULL"]);
    let until = Instant::now() + LONG;
    while !step_status_is(&sim, "run", 2, "IN_PROGRESS") {
        assert!(Instant::now() < until, "step 2 never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Two polls: the daemon has seen the step running.
    std::thread::sleep(Duration::from_millis(400));
    let r = query(&mut g, "run");
    assert_eq!((r[2].as_str(), r[4].as_str()), ("1", "2"), "{r:?}");
    assert!(step_status_is(&sim, "run", 2, "IN_PROGRESS"), "still running at the kill");
    g.kill();
    let mut g = daemon(&sim, dir.path());
    let relocations = finish_after_kill(&sim, &mut g, dir.path(), "run", 3);
    assert_eq!(relocations, 0, "the running job was watched again, not replaced");
}

#[test]
fn killed_while_a_step_is_being_fetched() {
    let sim = Sim::start();
    // Outputs are downloaded `state` then `DONE` (absent) per step: the
    // third download is step 2's state, and it hangs.
    sim.set_faults(serde_json::json!({
        "script": [{"endpoint": "get_output.php:workunit_file", "nth": 3, "kind": "hang", "hang_ms": 120000}]
    }));
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&sim, dir.path());
    assert_eq!(create(&mut g, dir.path(), "fetch", 4, 60, 3, &[]), ["NULL"]);
    wait_injected(&sim, "get_output.php:workunit_file hang");
    assert!(step_status_is(&sim, "fetch", 2, "DONE"), "step 2 finished on the server");
    let r = query(&mut g, "fetch");
    assert_eq!((r[2].as_str(), r[4].as_str()), ("1", "2"), "but is not collected yet: {r:?}");
    let partial: Vec<String> = files_in(&dir.path().join("state/sequence-files")).into_iter().filter(|n| n.ends_with(".part")).collect();
    assert_eq!(partial.len(), 1, "the download's temporary file: {partial:?}");
    g.kill();
    sim.set_faults(serde_json::json!({}));
    let mut g = daemon(&sim, dir.path());
    let relocations = finish_after_kill(&sim, &mut g, dir.path(), "fetch", 4);
    assert_eq!(relocations, 0, "a finished step is collected, not run again");
}

#[test]
fn a_missed_deadline_is_acted_on_at_the_deadline_not_at_the_next_poll() {
    let sim = Sim::start();
    // Host 1 (the first free one, so step 1's first attempt's) never
    // finishes; the replacement runs on another host.
    sim.set_host("{\"id\": 1, \"straggler_rate\": 1.0, \"straggler_factor\": 1e9}");
    let dir = tempfile::tempdir().unwrap();
    // Polls 3 s apart, a 1 s step time: a poll would see the miss up to
    // 2 s after the deadline.
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "sequence_poll_ms = 3000\n").unwrap();
    let mut g = gahp_with(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    assert_eq!(create(&mut g, dir.path(), "late", 1, 1, 3, &[]), ["NULL"]);
    let r = wait_until(&mut g, "late", "completion", |r| r[1] != "RUNNING");
    assert_eq!((r[1].as_str(), r[2].as_str(), r[6].as_str()), ("COMPLETED", "1", "1"), "{r:?}");
    assert_eq!(r[12], "deadline missed", "{r:?}");
    let log = log_text(dir.path());
    let late: Vec<i64> = log
        .lines()
        .filter(|l| l.contains("replacement of a late step submitted"))
        .filter_map(|l| l.split("since_deadline_ms=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(late.len(), 1, "{log}");
    assert!((0..1000).contains(&late[0]), "replacement submitted {} ms after the deadline", late[0]);
}

fn select(g: &mut GahpClient, line: &str) {
    assert_eq!(g.command_line(line.as_bytes()).unwrap(), ["S"], "{line}");
}

/// The statuses of sequence `name`'s jobs on `sim`.
fn job_statuses(sim: &Sim, name: &str) -> Vec<String> {
    let prefix = format!("{name}#");
    sim.state()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
        .map(|j| j["status"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn a_sequence_on_a_pool_moves_to_the_next_best_project_when_a_step_stalls() {
    let (a, b) = (Sim::start(), Sim::start());
    let dir = tempfile::tempdir().unwrap();
    // a is first in the pool (nothing else tells them apart), and every
    // host of a keeps its instance for ever.
    for id in 1..=4 {
        a.set_host(&format!("{{\"id\": {id}, \"straggler_rate\": 1.0, \"straggler_factor\": 1e9}}"));
    }
    // b's probe answers slowly: no attempt is made on a meanwhile.
    b.set_faults(serde_json::json!({"seed": 1, "rules": {"submit_rpc_handler.php:get_templates": {"delay": 1.0, "delay_ms": 1500}}}));
    let pool = pool_file(dir.path(), &[("a", &a), ("b", &b)], "");
    let pool_line = format!("BOINC_SELECT_PROJECT pool:{} -", pool.display());
    let mut g = daemon(&a, dir.path());
    select(&mut g, &pool_line);
    assert_eq!(create(&mut g, dir.path(), "roam", 4, 2, 3, &[]), ["NULL"]);
    let r = wait_until(&mut g, "roam", "a step on a", |r| r[4] == "1");
    assert_eq!(r[7], a.url, "placed on the first project of the pool: {r:?}");
    let r = wait_until(&mut g, "roam", "completion", |r| r[1] != "RUNNING");
    assert_eq!(r[1], "COMPLETED", "{r:?}");
    assert_eq!(r[2], "4", "{r:?}");
    assert_eq!(r[7], b.url, "relocated to the other project of the pool: {r:?}");
    assert_eq!(r[6], "1", "one relocation, a's step 1: {r:?}");
    assert_eq!(&r[9..13], ["1", "1", "1", "deadline missed"], "{r:?}");
    let (step, state) = fetch_latest(&mut g, "roam", &dir.path().join("out"));
    assert_eq!((step, state), (4, expected_state("roam", 4)));
    // Nothing was done on a, nothing is left running there, and every batch
    // of the sequence is retired on both projects.
    assert_eq!(job_statuses(&a, "roam").len(), 1, "step 1's one attempt on a");
    assert_eq!(job_statuses(&b, "roam").len(), 4, "each step once on b");
    assert!(job_statuses(&b, "roam").iter().all(|s| s == "DONE"), "{:?}", job_statuses(&b, "roam"));
    all_retired(&a, "roam", 1);
    all_retired(&b, "roam", 4);

    // After a restart the pool still finds it where it went, and so does
    // a command sent to the project it left (as a `batch boinc` job's status
    // is): it is forwarded.
    g.kill();
    let mut g = daemon(&a, dir.path());
    select(&mut g, &pool_line);
    let r = query(&mut g, "roam");
    assert_eq!((r[1].as_str(), r[7].as_str()), ("COMPLETED", b.url.as_str()), "{r:?}");
    assert_eq!(g.command(&a.select()).unwrap(), ["S"]);
    let r = query(&mut g, "roam");
    assert_eq!((r[1].as_str(), r[7].as_str()), ("COMPLETED", b.url.as_str()), "{r:?}");
    assert_eq!(g.command(&b.select()).unwrap(), ["S"]);
    assert_eq!(query(&mut g, "roam")[2], "4");
}
