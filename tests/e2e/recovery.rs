//! Transient failures are retried, BOINC errors reported, lost replies
//! recovered by asking the server: nothing is ever created twice. And each
//! command acts on the project selected when it arrived.

use crate::common::*;
use serde_json::json;
use std::time::Duration;

/// Fails the nth call of `endpoint` with `kind` (scripted, deterministic).
fn script(faults: &[(&str, u64, &str)]) -> serde_json::Value {
    json!({"seed": 1, "script": faults.iter().map(|(e, n, k)| json!({"endpoint": e, "nth": n, "kind": k})).collect::<Vec<_>>()})
}

fn submit_ok(sim: &Sim, g: &mut GahpClient, dir: &std::path::Path, name: &str, n: usize) {
    let files = inputs(dir, n, name);
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch(name, &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"], "submit of {name}");
    let batches = sim.batches_named(name);
    assert_eq!(batches.len(), 1, "exactly one batch named {name}: {batches:?}");
    let jobs = sim.jobs_of(batches[0]["id"].as_i64().unwrap());
    assert_eq!(jobs.len(), n, "each job exactly once");
}

#[test]
fn lost_create_batch_reply_makes_no_second_batch() {
    let sim = Sim::start();
    sim.set_faults(script(&[("submit_rpc_handler.php:create_batch", 1, "lose_reply")]));
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "lostcreate", 2);
    assert_eq!(sim.calls("submit_rpc_handler.php:create_batch"), 1, "the batch was found, not created again");
}

#[test]
fn lost_submit_batch_reply_makes_no_second_copy_of_a_job() {
    let sim = Sim::start();
    sim.set_faults(script(&[("submit_rpc_handler.php:submit_batch", 1, "lose_reply")]));
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "lostsubmit", 3);
    assert_eq!(sim.calls("submit_rpc_handler.php:submit_batch"), 1);
}

#[test]
fn torn_and_lost_file_replies_are_recovered() {
    let sim = Sim::start();
    sim.set_faults(script(&[
        ("job_file.php:query_files", 1, "truncate"),
        ("job_file.php:upload_files", 1, "lose_reply"),
        ("job_file.php:upload_files", 2, "malformed"),
    ]));
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "lostfiles", 45);
}

#[test]
fn transient_http_failures_are_retried_everywhere() {
    let sim = Sim::start();
    sim.set_faults(script(&[
        ("submit_rpc_handler.php:get_templates", 1, "http503"),
        ("submit_rpc_handler.php:query_batch", 1, "reset"),
        ("submit_rpc_handler.php:create_batch", 1, "http500"),
        ("submit_rpc_handler.php:submit_batch", 1, "http503"),
        ("submit_rpc_handler.php:query_batch2", 1, "malformed"),
        ("submit_rpc_handler.php:ping", 1, "reset"),
        ("get_output.php:workunit_file", 1, "http500"),
    ]));
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    // A ping makes one attempt (the gridmanager probes with it and must
    // learn "down" at once): the reset is reported, the next ping passes.
    let r = g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap();
    assert!(r[0].starts_with("ping_server returned -184 transient HTTP failure"), "{r:?}");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);
    submit_ok(&sim, &mut g, dir.path(), "flaky", 2);
    wait_finished(&mut g, "flaky");
    let fetch = FetchOutput {
        job_name: "flaky#0.0".into(),
        dir: dir.path().into(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap()[0], "NULL");
    assert_eq!(std::fs::read_to_string(dir.path().join("out")).unwrap(), "INPUT 0 OF FLAKY\n");
}

#[test]
fn random_faults_on_every_endpoint_lose_nothing_and_duplicate_nothing() {
    let sim = Sim::start();
    let rule = json!({"http500": 0.1, "http503": 0.05, "reset": 0.05, "truncate": 0.05, "malformed": 0.05, "lose_reply": 0.1});
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    for seed in [42, 7, 1234, 99, 5] {
        sim.set_faults(json!({"seed": seed, "rules": {"*": rule}}));
        for b in 0..2 {
            submit_ok(&sim, &mut g, dir.path(), &format!("chaos{seed}_{b}"), 25);
        }
    }
    // Under faults, queries and fetches still come back right.
    sim.set_faults(json!({"seed": 8, "rules": {"*": rule}}));
    let jobs = wait_finished(&mut g, "chaos42_0");
    assert_eq!(jobs.len(), 25);
    let out = dir.path().join("chaos_out");
    std::fs::create_dir_all(&out).unwrap();
    for (i, (job, status)) in jobs.iter().enumerate().take(5) {
        assert_eq!(status, "DONE");
        let fetch = FetchOutput {
            job_name: job.clone(),
            dir: out.clone(),
            stderr_file: "/dev/null".into(),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst: format!("out{i}").into() }],
        };
        let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
        assert_eq!(r[0], "NULL", "{r:?}");
        let n: usize = job.rsplit('#').next().unwrap().trim_end_matches(".0").parse().unwrap();
        assert_eq!(std::fs::read_to_string(out.join(format!("out{i}"))).unwrap(), format!("INPUT {n} OF CHAOS42_0\n"));
    }
}

#[test]
fn retries_give_up_in_time_and_say_why() {
    let sim = Sim::start();
    sim.set_faults(json!({"seed": 1, "rules": {"submit_rpc_handler.php:get_templates": {"http503": 1.0}}}));
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp_with(dir.path(), &["--command-timeout", "3"], &[]);
    g.command(&sim.select()).unwrap();
    let files = inputs(dir.path(), 1, "giveup");
    let t = std::time::Instant::now();
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("giveup", &files))), WAIT).unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(r.len(), 1);
    assert!(r[0].starts_with("error getting templates: -184 transient HTTP failure (HTTP 503)"), "{r:?}");
    assert!(sim.calls("submit_rpc_handler.php:get_templates") > 2, "it was retried");
    assert!(sim.batches_named("giveup").is_empty());
}

#[test]
fn a_hung_server_is_cut_off_by_the_rpc_timeout() {
    let sim = Sim::start();
    sim.set_faults(script(&[("submit_rpc_handler.php:ping", 1, "hang")]));
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp_with(dir.path(), &["--rpc-timeout", "1"], &[]);
    g.command(&sim.select()).unwrap();
    let t = std::time::Instant::now();
    let r = g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap();
    assert!(r[0].starts_with("ping_server returned -184 transient HTTP failure (Timeout"), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // The hang was one-shot: the next ping passes.
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);
}

#[test]
fn commands_stay_bound_to_the_project_selected_when_they_arrived() {
    let a = Sim::start();
    let b = Sim::start();
    // A is slow, so its submit is still running when B is selected.
    a.set_faults(json!({"seed": 3, "rules": {"submit_rpc_handler.php:get_templates": {"delay": 1.0, "delay_ms": 1500}}}));
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp(dir.path());
    let files = inputs(dir.path(), 1, "bind");
    g.command(&a.select()).unwrap();
    g.submit_async(&async_cmd(2, AsyncCommand::Submit(uppercase_batch("bound", &files)))).unwrap();
    g.command(&b.select()).unwrap();
    g.submit_async(&async_cmd(3, AsyncCommand::Ping)).unwrap();
    g.command(&a.select()).unwrap();
    g.submit_async(&async_cmd(4, AsyncCommand::Ping)).unwrap();
    g.command(&b.select()).unwrap();
    assert_eq!(g.wait_result(2, WAIT).unwrap(), ["NULL"]);
    assert_eq!(g.wait_result(3, WAIT).unwrap(), ["NULL"]);
    assert_eq!(g.wait_result(4, WAIT).unwrap(), ["NULL"]);
    assert_eq!(a.batches_named("bound").len(), 1);
    assert!(b.batches_named("bound").is_empty());
    assert_eq!(a.calls("submit_rpc_handler.php:ping"), 1);
    assert_eq!(b.calls("submit_rpc_handler.php:ping"), 1);
}

#[test]
fn a_storm_of_identical_queries_costs_one_rpc() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "storm", 2);
    let before = sim.calls("submit_rpc_handler.php:query_batch2");
    for id in 100..300 {
        g.submit_async(&async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["storm".into()] })).unwrap();
    }
    for id in 100..300 {
        let r = g.wait_result(id, WAIT).unwrap();
        assert_eq!(r[0], "NULL");
        assert_eq!(r[2], "2");
    }
    assert_eq!(sim.calls("submit_rpc_handler.php:query_batch2") - before, 1);
}

#[test]
fn a_torn_download_is_fetched_again_and_never_lands_short() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "torn", 1);
    wait_finished(&mut g, "torn");
    sim.set_faults(script(&[("get_output.php:workunit_file", 1, "truncate"), ("get_output.php:workunit_file", 2, "lose_reply")]));
    let fetch = FetchOutput {
        job_name: "torn#0.0".into(),
        dir: dir.path().into(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap()[0], "NULL");
    assert_eq!(std::fs::read_to_string(dir.path().join("out")).unwrap(), "INPUT 0 OF TORN\n");
    assert_eq!(sim.calls("get_output.php:workunit_file"), 3);
}

#[test]
fn a_daemon_killed_mid_submit_is_finished_by_the_next_one() {
    let sim = Sim::start();
    // submit_batch waits, so the daemon dies with the batch created and the
    // files up, but the jobs not (yet) created.
    sim.set_faults(json!({"seed": 1, "rules": {"submit_rpc_handler.php:submit_batch": {"delay": 1.0, "delay_ms": 2000}}}));
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 3, "killed");
    let batch = uppercase_batch("killed", &files);
    let mut g = ready_gahp(&sim, dir.path());
    g.submit_async(&async_cmd(2, AsyncCommand::Submit(batch.clone()))).unwrap();
    let until = std::time::Instant::now() + WAIT;
    while sim.calls("submit_rpc_handler.php:submit_batch") == 0 {
        assert!(std::time::Instant::now() < until, "submit_batch never sent");
        std::thread::sleep(Duration::from_millis(20));
    }
    g.kill();
    // The gridmanager restarts and submits the same batch again.
    sim.set_faults(json!({}));
    let mut g = ready_gahp(&sim, dir.path());
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    std::thread::sleep(Duration::from_millis(2500)); // let the first, delayed submit_batch land if it will
    let batches = sim.batches_named("killed");
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(sim.jobs_of(batches[0]["id"].as_i64().unwrap()).len(), 3);
    assert_eq!(sim.calls("submit_rpc_handler.php:create_batch"), 1);
}

#[test]
fn a_torn_no_such_batch_reply_is_retried_not_reported() {
    // The look-up before create_batch answers "no such batch"; cut in
    // transit it read as a BOINC error with an empty message, and the
    // submit failed with "error creating batch: -1 ". Several cuts at
    // seeded points: each is a transient failure, retried.
    let sim = Sim::start();
    let cuts: Vec<(&str, u64, &str)> = (1..=6).map(|n| ("submit_rpc_handler.php:query_batch", n, "truncate")).collect();
    sim.set_faults(script(&cuts));
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "tornlookup", 2);
    assert_eq!(sim.calls("submit_rpc_handler.php:create_batch"), 1);
    assert!(sim.calls("submit_rpc_handler.php:query_batch") >= 7, "every torn look-up was asked again");
}

#[test]
fn a_look_up_answered_long_before_the_create_is_asked_again() {
    // A's look-up by name goes out beside its get_templates and answers
    // "no such batch" at once; the templates hang until A's RPC timeout.
    // Meanwhile B (another daemon: a gridmanager restarted on another
    // state directory) submits the same batch. Deciding on the stale
    // answer, A would create a second batch of the name, whose jobs the
    // server refuses (B has their names); asked again, it finds B's jobs
    // there and has nothing to do.
    let sim = Sim::start();
    sim.set_faults(script(&[("submit_rpc_handler.php:get_templates", 1, "hang")]));
    let a_dir = tempfile::tempdir().unwrap();
    let mut a = gahp_with(a_dir.path(), &["--rpc-timeout", "10"], &[]);
    a.command_line(b"ASYNC_MODE_ON").unwrap();
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    let files = inputs(a_dir.path(), 2, "stale");
    a.submit_async(&async_cmd(2, AsyncCommand::Submit(uppercase_batch("stale", &files)))).unwrap();
    let until = std::time::Instant::now() + WAIT;
    while sim.calls("submit_rpc_handler.php:get_templates") < 1 || sim.calls("submit_rpc_handler.php:query_batch") < 1 {
        assert!(std::time::Instant::now() < until, "A's look-up and templates never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let b_dir = tempfile::tempdir().unwrap();
    let mut b = ready_gahp(&sim, b_dir.path());
    submit_ok(&sim, &mut b, b_dir.path(), "stale", 2);
    assert_eq!(sim.calls("submit_rpc_handler.php:get_templates"), 2, "A's templates still hang when B's batch is there");
    assert_eq!(a.wait_result(2, WAIT).unwrap(), ["NULL"]);
    let batches = sim.batches_named("stale");
    assert_eq!(batches.len(), 1, "one batch of the name: {batches:?}");
    assert_eq!(sim.jobs_of(batches[0]["id"].as_i64().unwrap()).len(), 2);
    assert_eq!(sim.calls("submit_rpc_handler.php:create_batch"), 1, "only B created");
    assert!(log_text(a_dir.path()).contains("already on the server"));
}

#[test]
fn a_fetch_onto_a_full_filesystem_fails_and_leaves_nothing() {
    // A tiny tmpfs, filled: needs root (CI runs as root); said and skipped
    // otherwise.
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "fullfs", 1);
    wait_finished(&mut g, "fullfs");
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let mounted = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=8k", "gahp-test-fullfs"]).arg(&full).status();
    if !mounted.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    // Fill it to the last byte: the write that does not fit fails.
    let mut filler = std::fs::File::create(full.join("filler")).unwrap();
    while std::io::Write::write_all(&mut filler, &[b'x'; 1024]).is_ok() {}
    drop(filler);
    let fetch = FetchOutput {
        job_name: "fullfs#0.0".into(),
        dir: full.clone(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    let left: Vec<String> = std::fs::read_dir(&full).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let _ = std::process::Command::new("umount").arg(&full).status();
    assert!(r[0].contains("No space left"), "a fetch onto a full disk is an error: {r:?}");
    assert_eq!(left, ["filler"], "no partial file");
}

#[test]
fn a_php_fatal_page_instead_of_an_output_file_is_tried_again() {
    // get_output.php dies on a lost database connection now and then; the
    // download is idempotent, so it is retried like any RPC's fatal page.
    // (Seed 3 makes the sim's "malformed" reply the PHP fatal page.)
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "fataldl", 1);
    wait_finished(&mut g, "fataldl");
    sim.set_faults(json!({"seed": 3, "script": [{"endpoint": "get_output.php:workunit_file", "nth": 1, "kind": "malformed"}]}));
    let fetch = FetchOutput {
        job_name: "fataldl#0.0".into(),
        dir: dir.path().into(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(std::fs::read_to_string(dir.path().join("out")).unwrap(), "INPUT 0 OF FATALDL\n");
    assert_eq!(sim.calls("get_output.php:workunit_file"), 2);
}

#[test]
fn transient_failures_do_not_use_up_the_tries_of_a_fatal_page() {
    // A PHP fatal page, a 503, a second fatal page, then the file: the 503
    // must not use up a fatal page's tries. (Seed 5 makes both "malformed"
    // replies the PHP fatal page.)
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "mixeddl", 1);
    wait_finished(&mut g, "mixeddl");
    let e = "get_output.php:workunit_file";
    sim.set_faults(json!({"seed": 5, "script": [
        {"endpoint": e, "nth": 1, "kind": "malformed"},
        {"endpoint": e, "nth": 2, "kind": "http503"},
        {"endpoint": e, "nth": 3, "kind": "malformed"},
    ]}));
    let fetch = FetchOutput {
        job_name: "mixeddl#0.0".into(),
        dir: dir.path().into(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(sim.calls(e), 4);
}

#[test]
fn a_lost_database_on_query_completed_job_is_waited_out_not_read_as_no_finished_instance() {
    // The script dies on a lost database connection more often than a
    // server bug's few tries allow: for a finished job that passes, so it
    // is retried like a torn reply until the file comes.
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "lostdb", 1);
    wait_finished(&mut g, "lostdb");
    let e = "submit_rpc_handler.php:query_completed_job";
    let script: Vec<_> = (1..=5).map(|nth| json!({"endpoint": e, "nth": nth, "kind": "php_fatal"})).collect();
    sim.set_faults(json!({"seed": 1, "script": script}));
    let fetch = FetchOutput {
        job_name: "lostdb#0.0".into(),
        dir: dir.path().into(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(std::fs::read_to_string(dir.path().join("out")).unwrap(), "INPUT 0 OF LOSTDB\n");
    assert_eq!(sim.calls(e), 6);
}

#[test]
fn a_create_batch_still_in_flight_when_the_daemon_dies_makes_no_second_batch() {
    // The killed daemon's create_batch reaches the server after the next
    // daemon has looked the name up and found nothing. The next daemon
    // knows (from the state database) that a create went out and waits for
    // it to settle instead of creating a second batch of the name.
    let sim = Sim::start();
    sim.set_faults(json!({"seed": 1, "rules": {"submit_rpc_handler.php:create_batch": {"delay": 1.0, "delay_ms": 2000}}}));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "create_settle_secs = 6\n").unwrap();
    let start = |dir: &std::path::Path| {
        let mut g = gahp_with(dir, &["--config", config.to_str().unwrap()], &[]);
        g.command_line(b"ASYNC_MODE_ON").unwrap();
        assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
        g
    };
    let files = inputs(dir.path(), 3, "inflight");
    let batch = uppercase_batch("inflight", &files);
    let mut g = start(dir.path());
    g.submit_async(&async_cmd(2, AsyncCommand::Submit(batch.clone()))).unwrap();
    let until = std::time::Instant::now() + WAIT;
    while sim.calls("submit_rpc_handler.php:create_batch") == 0 {
        assert!(std::time::Instant::now() < until, "create_batch never sent");
        std::thread::sleep(Duration::from_millis(20));
    }
    g.kill();
    sim.set_faults(json!({}));
    let mut g = start(dir.path());
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    std::thread::sleep(Duration::from_millis(2500));
    let batches = sim.batches_named("inflight");
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(sim.jobs_of(batches[0]["id"].as_i64().unwrap()).len(), 3);
    assert_eq!(sim.calls("submit_rpc_handler.php:create_batch"), 1, "the dead daemon's batch was found and filled");
    assert!(log_text(dir.path()).contains("an earlier create_batch may still land"));
}

#[test]
fn a_partial_file_a_killed_daemon_left_is_removed_by_the_next_fetch_there() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // What a daemon killed mid-download leaves: its temporary file, named
    // as the daemon names them, and a user's file that only looks alike.
    let left = out.join(".out.Xy12Zq.part");
    std::fs::write(&left, b"half a fi").unwrap();
    std::fs::write(out.join("mine.part"), b"keep").unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    submit_ok(&sim, &mut g, dir.path(), "swept", 1);
    wait_finished(&mut g, "swept");
    let fetch = FetchOutput {
        job_name: "swept#0.0".into(),
        dir: out.clone(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert!(!left.exists(), "the abandoned temporary file is gone");
    let mut names: Vec<String> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["mine.part", "out"]);
}
