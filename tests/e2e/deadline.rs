//! Every HTTP call ends by its deadline, also when the project sends the
//! headers and then stalls or drips the body: a ping answers within its
//! timeout, an idempotent call is retried, a call that creates something
//! is recovered by asking the server (never done twice), a download is
//! retried. And the simulated project frees each held connection once the
//! daemon has given up on it.

use crate::common::*;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Long enough for any of these calls with the fix, far shorter than a
/// stalled body lasts without it (the test fails, it does not hang).
const CALL_WAIT: Duration = Duration::from_secs(20);

/// One attempt has 1.5 s for its whole reply; a download must keep up
/// 512 bytes per second.
fn deadline_gahp(sim: &Sim, dir: &Path) -> GahpClient {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "rpc_timeout_secs = 1.5\nping_timeout_secs = 2\ndownload_stall_secs = 1\ncommand_timeout_secs = 30\ncreate_settle_secs = 1\n",
    )
    .unwrap();
    let mut g = gahp_with(dir, &["--config", config.to_str().unwrap()], &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    g
}

/// The nth call of each endpoint gets its kind; a drip is a byte per `drip_ms`.
fn script(faults: &[(&str, u64, &str)], drip_ms: u64) -> serde_json::Value {
    json!({"seed": 1, "script": faults.iter().map(|(e, n, k)| json!({"endpoint": e, "nth": n, "kind": k, "drip_ms": drip_ms})).collect::<Vec<_>>()})
}

/// The simulated project let go of every held reply (bounded wait: the
/// daemon closes its connection when it gives up).
fn assert_nothing_held(sim: &Sim) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let held = sim.state()["fault_bodies_held"].as_u64().unwrap();
        if held == 0 {
            return;
        }
        assert!(Instant::now() < until, "the project still holds {held} reply(ies) open");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_ping_against_a_stalled_or_dripping_body_answers_within_its_timeout() {
    let sim = Sim::start();
    sim.set_faults(script(&[("submit_rpc_handler.php:ping", 1, "stall_body"), ("submit_rpc_handler.php:ping", 2, "drip_body")], 200));
    let dir = tempfile::tempdir().unwrap();
    let mut g = deadline_gahp(&sim, dir.path());
    for what in ["stalled", "dripping"] {
        let t = Instant::now();
        let r = g.call(|id| async_cmd(id, AsyncCommand::Ping), CALL_WAIT).unwrap_or_else(|e| panic!("{what} ping: {e}"));
        let took = t.elapsed();
        assert!(r[0].starts_with("ping_server returned -184 transient HTTP failure (reply body stalled"), "{what}: {r:?}");
        // ping_timeout_secs = 2, and the attempt's 1.5 s bound it.
        assert!(took < Duration::from_secs(4), "{what} ping took {took:?}");
        assert!(took >= Duration::from_millis(1400), "{what} ping gave up early: {took:?}");
    }
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Ping), CALL_WAIT).unwrap(), ["NULL"]);
    assert_eq!(sim.calls("submit_rpc_handler.php:ping"), 3, "a ping makes one attempt");
    assert_nothing_held(&sim);
}

#[test]
fn an_idempotent_query_whose_reply_stalls_or_drips_is_retried() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = deadline_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 2, "q");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("q", &files))), CALL_WAIT).unwrap(), ["NULL"]);
    sim.set_faults(script(
        &[("submit_rpc_handler.php:query_batch2", 1, "stall_body"), ("submit_rpc_handler.php:query_batch2", 2, "drip_body")],
        100,
    ));
    let t = Instant::now();
    let r = g.call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["q".into()] }), CALL_WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(r[3..].len(), 4, "both jobs: {r:?}");
    assert_eq!(sim.calls("submit_rpc_handler.php:query_batch2"), 3, "stalled, dripped, then answered");
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
    assert_nothing_held(&sim);
}

#[test]
fn a_create_or_submit_whose_reply_stalls_or_drips_is_done_once() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = deadline_gahp(&sim, dir.path());
    for (name, kind) in [("stall", "stall_body"), ("drip", "drip_body")] {
        sim.set_faults(script(&[("submit_rpc_handler.php:create_batch", 1, kind), ("submit_rpc_handler.php:submit_batch", 1, kind)], 100));
        // The project's call counts are over its whole life.
        let (creates, submits) = (sim.calls("submit_rpc_handler.php:create_batch"), sim.calls("submit_rpc_handler.php:submit_batch"));
        let files = inputs(dir.path(), 3, name);
        let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch(name, &files))), CALL_WAIT).unwrap();
        assert_eq!(r, ["NULL"], "submit of {name}");
        let batches = sim.batches_named(name);
        assert_eq!(batches.len(), 1, "exactly one batch named {name}: {batches:?}");
        assert_eq!(sim.jobs_of(batches[0]["id"].as_i64().unwrap()).len(), 3, "each job exactly once");
        assert_eq!(sim.calls("submit_rpc_handler.php:create_batch") - creates, 1, "{name}: the batch was found, not created again");
        assert_eq!(sim.calls("submit_rpc_handler.php:submit_batch") - submits, 1, "{name}: the jobs were found, not submitted again");
    }
    assert_nothing_held(&sim);
}

#[test]
fn a_download_that_stalls_or_drips_is_retried_and_arrives_whole() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = deadline_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 1, "dl");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("dl", &files))), CALL_WAIT).unwrap(), ["NULL"]);
    wait_finished(&mut g, "dl");
    // A byte per 500 ms: the 14-byte output would take 7 s, and far
    // below 512 bytes per second it is a stall after 1 s.
    sim.set_faults(script(&[("get_output.php:workunit_file", 1, "stall_body"), ("get_output.php:workunit_file", 2, "drip_body")], 500));
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let fetch =
        FetchOutput { job_name: "dl#0.0".into(), dir: out.clone(), stderr_file: "/dev/null".into(), mode: FetchMode::All, specs: vec![] };
    let t = Instant::now();
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), CALL_WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(std::fs::read_to_string(out.join("out")).unwrap(), "INPUT 0 OF DL\n");
    assert_eq!(sim.calls("get_output.php:workunit_file"), 3, "stalled, dripped, then whole");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    assert_nothing_held(&sim);
}
