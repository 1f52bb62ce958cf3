//! The multi-project broker end to end: the real daemon over pipes with
//! `BOINC_SELECT_PROJECT pool:<file> -`, against several simulated projects
//! on loopback that hold different data.

use crate::common::*;
use std::path::{Path, PathBuf};

fn select_pool(g: &mut GahpClient, pool: &Path) {
    let line = format!("BOINC_SELECT_PROJECT pool:{} -", pool.display());
    assert_eq!(g.command_line(line.as_bytes()).unwrap(), ["S"]);
}

/// Puts `files` on `sim` (in a batch of its own, selected directly).
fn seed(g: &mut GahpClient, sim: &Sim, name: &str, app: &str, files: &[PathBuf]) {
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    let mut batch = uppercase_batch(name, files);
    batch.app_name = app.into();
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
}

fn submit(g: &mut GahpClient, name: &str, files: &[PathBuf]) -> Vec<String> {
    let batch = uppercase_batch(name, files);
    g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap()
}

/// Which of the sims has a batch of this name (exactly one must).
fn holder(sims: &[(&str, &Sim)], batch: &str) -> String {
    let with: Vec<&str> = sims.iter().filter(|(_, s)| !s.batches_named(batch).is_empty()).map(|(n, _)| *n).collect();
    assert_eq!(with.len(), 1, "{batch} is on {with:?}");
    with[0].to_string()
}

/// A project that only has the wordcount app.
fn wordcount_only(dir: &Path) -> Sim {
    let config = dir.join("wordcount_only.toml");
    std::fs::write(
        &config,
        "[[apps]]\nname = \"wordcount\"\ninputs = [\"in\"]\noutputs = [\"counts\", \"summary\"]\nfpops_est = 1e9\n\
         delay_bound = 86400.0\nmin_quorum = 1\ntarget_nresults = 1\nmax_error_results = 3\nmax_total_results = 5\n\
         max_success_results = 3\n",
    )
    .unwrap();
    Sim::start_with(&["--config", config.to_str().unwrap()])
}

#[test]
fn a_batch_lands_where_its_bytes_are_and_requirements_exclude_a_project_without_the_app() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (Sim::start(), Sim::start(), wordcount_only(dir.path()));
    let x = inputs(dir.path(), 3, "xdata");
    let y = inputs(dir.path(), 3, "ydata");
    let z = inputs(dir.path(), 2, "zdata");
    let mut g = gahp(dir.path());
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    seed(&mut g, &b, "seed#x", "uppercase", &x);
    // a holds one file of x and all of y; c holds everything but lacks the app.
    seed(&mut g, &a, "seed#y", "uppercase", &[y.clone(), vec![x[0].clone()]].concat());
    seed(&mut g, &c, "seed#all", "wordcount", &[x.clone(), y.clone(), z.clone()].concat());

    let sims = [("a", &a), ("b", &b), ("c", &c)];
    let pool = pool_file(dir.path(), &sims, "");
    select_pool(&mut g, &pool);
    assert_eq!(submit(&mut g, "pool#x", &x), ["NULL"]);
    assert_eq!(holder(&sims, "pool#x"), "b", "b has all of x, a a third, c lacks the app");
    assert_eq!(submit(&mut g, "pool#y", &y), ["NULL"]);
    assert_eq!(holder(&sims, "pool#y"), "a");
    // Nobody has z but c: a tie between a and b, settled by the pool order.
    assert_eq!(submit(&mut g, "pool#z", &z), ["NULL"]);
    assert_eq!(holder(&sims, "pool#z"), "a");
    // The placed batches run and their outputs come back through the pool.
    let jobs = wait_finished(&mut g, "pool#x");
    assert!(jobs.iter().all(|(_, s)| s == "DONE"), "{jobs:?}");

    // The data overlap asks query_files without a batch: no file got tied
    // to a batch it does not belong to, and c was never asked to submit.
    assert_eq!(c.calls("submit_rpc_handler.php:create_batch"), 1, "only the seed batch");
    let log = log_text(dir.path());
    assert!(log.contains("matches: b (rank 1,"), "{log}");
}

#[test]
fn a_project_down_before_creation_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Sim::start(), Sim::start());
    let x = inputs(dir.path(), 2, "xdata");
    let w = inputs(dir.path(), 1, "warm");
    let mut g = gahp(dir.path());
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    seed(&mut g, &a, "seed#x", "uppercase", &x);
    let pool = pool_file(dir.path(), &[("a", &a), ("b", &b)], "");
    select_pool(&mut g, &pool);
    // The ads are measured: both up, both have the app.
    assert_eq!(submit(&mut g, "warm#1", &w), ["NULL"]);
    assert_eq!(a.batches_named("warm#1").len(), 1);
    drop(a);
    // a is still up in its ad and first in the pool, but gone.
    assert_eq!(submit(&mut g, "pool#x", &x), ["NULL"]);
    assert_eq!(b.batches_named("pool#x").len(), 1);
    let log = log_text(dir.path());
    assert!(log.contains("skipped"), "{log}");
    // With every project down, the submit fails with the reasons.
    drop(b);
    let r = submit(&mut g, "pool#none", &x);
    assert!(r[0].contains("no project of the pool takes the batch"), "{r:?}");
}

#[test]
fn after_a_restart_every_command_reaches_the_right_project_and_one_down_hurts_only_its_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Sim::start(), Sim::start());
    let x = inputs(dir.path(), 3, "xdata");
    let y = inputs(dir.path(), 2, "ydata");
    let sims = [("a", &a), ("b", &b)];
    let pool = pool_file(dir.path(), &sims, "");
    {
        let mut g = gahp(dir.path());
        g.command_line(b"ASYNC_MODE_ON").unwrap();
        seed(&mut g, &a, "seed#x", "uppercase", &x);
        seed(&mut g, &b, "seed#y", "uppercase", &y);
        select_pool(&mut g, &pool);
        assert_eq!(submit(&mut g, "r#x", &x), ["NULL"]);
        assert_eq!(submit(&mut g, "r#y", &y), ["NULL"]);
        g.kill();
    }
    assert_eq!(holder(&sims, "r#x"), "a");
    assert_eq!(holder(&sims, "r#y"), "b");

    // Short command timeouts: a command on the project that goes down
    // below must fail within the test's wait.
    let mut g = gahp_with(dir.path(), &["--command-timeout", "8"], &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    select_pool(&mut g, &pool);
    // A resubmit after the restart goes back to where the batch is.
    assert_eq!(submit(&mut g, "r#x", &x), ["NULL"]);
    assert_eq!(holder(&sims, "r#x"), "a");
    wait_finished(&mut g, "r#x");
    wait_finished(&mut g, "r#y");
    // Both projects in one query, in request order, one server_time.
    let r = g
        .call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["r#y".into(), "r#x".into()] }), WAIT)
        .unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    r[1].parse::<f64>().unwrap();
    assert_eq!(r[2], "2");
    assert!(r[3].starts_with("r#y#") && r[7] == "3" && r[8].starts_with("r#x#"), "{r:?}");

    for (job, want) in [("r#x#1.0", "INPUT 1 OF XDATA\n"), ("r#y#0.0", "INPUT 0 OF YDATA\n")] {
        let out = dir.path().join(format!("out_{}", &job[..3].replace('#', "_")));
        std::fs::create_dir_all(&out).unwrap();
        let fetch = FetchOutput {
            job_name: job.into(),
            dir: out.clone(),
            stderr_file: PathBuf::from("/dev/null"),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst: PathBuf::from("got.txt") }],
        };
        assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap()[0], "NULL");
        assert_eq!(std::fs::read_to_string(out.join("got.txt")).unwrap(), want);
    }
    for batch in ["r#x", "r#y"] {
        let r = g.call(|id| async_cmd(id, AsyncCommand::SetLease { batch: batch.into(), lease_time: 4_102_444_800.0 }), WAIT).unwrap();
        assert_eq!(r, ["NULL"]);
    }
    assert_eq!(a.batches_named("r#x")[0]["expire_time"].as_f64(), Some(4_102_444_800.0));
    assert_eq!(b.batches_named("r#y")[0]["expire_time"].as_f64(), Some(4_102_444_800.0));
    let r = g.call(|id| async_cmd(id, AsyncCommand::AbortJobs { jobs: vec!["r#x#0.0".into(), "r#y#1.0".into()] }), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    let r = g.call(|id| async_cmd(id, AsyncCommand::AbortJobs { jobs: vec!["nobody#0".into()] }), WAIT).unwrap();
    assert!(r[0].contains("no such job in the pool"), "{r:?}");

    // b goes down: a's batch is still answered; b's has no news. (Another
    // min_mod_time than above: identical queries share answers for a while.)
    drop(b);
    let r = g
        .call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 1.0, batches: vec!["r#y".into(), "r#x".into()] }), WAIT)
        .unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(r[2], "0", "b is down: {r:?}");
    assert_eq!(r[3], "3", "a answers: {r:?}");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "r#x".into() }), WAIT).unwrap(), ["NULL"]);
    assert!(a.batches_named("r#x").is_empty() || a.batches_named("r#x")[0]["state"] != 1, "retired on a");
    let r = g.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "r#y".into() }), WAIT).unwrap();
    assert_ne!(r, ["NULL"], "b is down");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"], "the pool is up while a is");
}

#[test]
fn an_external_rank_function_runs_once_per_ttl_not_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Sim::start(), Sim::start());
    let count = dir.path().join("calls");
    let seen = dir.path().join("input.json");
    let script = dir.path().join("rank.sh");
    // b ranks higher; the function sees the job and project ads as JSON.
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ninput=$(cat)\necho \"$input\" > {seen}\necho x >> {count}\n\
             case \"$input\" in *'\"Name\":\"b\"'*) echo 2.5;; *) echo 1;; esac\n",
            seen = seen.display(),
            count = count.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let extra = format!(
        "rank = 'site_rank()'\nrank_cache_ttl_secs = 3\n[[rank_function]]\nname = \"site_rank\"\ncommand = [\"{}\"]\ntimeout_secs = 10\n",
        script.display()
    );
    let pool = pool_file(dir.path(), &[("a", &a), ("b", &b)], &extra);
    let x = inputs(dir.path(), 2, "xdata");
    let mut g = gahp(dir.path());
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    select_pool(&mut g, &pool);
    let calls = || std::fs::read_to_string(&count).unwrap_or_default().lines().count();
    for i in 0..3 {
        assert_eq!(submit(&mut g, &format!("f#{i}"), &x), ["NULL"]);
        assert_eq!(b.batches_named(&format!("f#{i}")).len(), 1, "the function ranks b first: {}", log_text(dir.path()));
    }
    assert_eq!(calls(), 2, "once per project for the data set, not per batch");
    let input: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(input["job"]["App"], "uppercase");
    assert_eq!(input["job"]["InputFiles"].as_array().unwrap().len(), 2);
    assert!(input["project"]["Up"].as_bool().unwrap());
    // Other data: asked again.
    let y = inputs(dir.path(), 1, "ydata");
    assert_eq!(submit(&mut g, "f#y", &y), ["NULL"]);
    assert_eq!(calls(), 4);
    // After the TTL, the same data is asked again.
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(submit(&mut g, "f#3", &x), ["NULL"]);
    assert_eq!(calls(), 6);
}

/// `[blah] pool = ...`: a `batch boinc` job that names no project goes to
/// the project holding its input; its own Requirements can overrule that.
#[test]
fn blah_jobs_through_a_pool_land_on_the_project_with_their_data() {
    use gahp_protocol::classad::{ClassAd, Value};
    use gahp_protocol::gahp::{BlahCommand, Command};

    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Sim::start(), Sim::start());
    let x = inputs(dir.path(), 1, "xdata");
    {
        let seed_dir = dir.path().join("seeder");
        std::fs::create_dir_all(&seed_dir).unwrap();
        let mut g = gahp(&seed_dir);
        g.command_line(b"ASYNC_MODE_ON").unwrap();
        seed(&mut g, &b, "seed#x", "uppercase", &x);
    }
    let sims = [("a", &a), ("b", &b)];
    pool_file(dir.path(), &sims, "");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[blah]\npool = \"pool.toml\"\nstatus_refresh_secs = 0.3\n").unwrap();
    let mut g = gahp_with(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();

    let mut job = |name: &str, extra: &[(&str, &str)]| {
        let iwd = dir.path().join(name);
        std::fs::create_dir_all(&iwd).unwrap();
        // Same name and content: BOINC names files by MD5 and extension.
        std::fs::copy(&x[0], iwd.join(x[0].file_name().unwrap())).unwrap();
        let mut ad = ClassAd::new();
        let s = |v: &str| Value::Str(v.into());
        for (k, v) in [
            ("In", "/dev/null"),
            ("Iwd", iwd.to_str().unwrap()),
            ("GridResource", "batch boinc"),
            ("JobDirectory", iwd.to_str().unwrap()),
            ("BoincApp", "uppercase"),
            ("TransferInput", x[0].file_name().unwrap().to_str().unwrap()),
            ("Arguments", ""),
            ("Environment", ""),
        ] {
            ad.insert(k, s(v));
        }
        for (k, v) in extra {
            ad.insert(*k, s(v));
        }
        let r = g.call(|id| Request::Command { reqid: ReqId(id), command: Command::Blah(BlahCommand::JobSubmit { ad }) }, WAIT).unwrap();
        assert_eq!(r[..2], ["0", "No error"], "{r:?}");
        r[2].rsplit('/').next().unwrap().to_string()
    };
    let on = |sim: &Sim, batch: &str| !sim.batches_named(batch).is_empty();
    let wait_on = |sim: &Sim, batch: &str| {
        let until = std::time::Instant::now() + WAIT;
        while !on(sim, batch) {
            assert!(std::time::Instant::now() < until, "{batch} never reached its project: {}", log_text(dir.path()));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let data_job = job("job1", &[]);
    wait_on(&b, &data_job);
    assert!(!on(&a, &data_job));
    // The job's own Requirements win over the data.
    let forced = job("job2", &[("BoincRequirements", "TARGET.Name == \"a\"")]);
    wait_on(&a, &forced);
    assert!(!on(&b, &forced));
}

/// A project that failed a query is asked again from the older
/// min_mod_time, so the changes it made while it could not answer are not
/// lost when the gridmanager passes back a later server_time.
#[test]
fn changes_on_a_project_that_missed_a_query_are_reported_when_it_answers_again() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Sim::start(), Sim::start());
    let x = inputs(dir.path(), 1, "xdata");
    let y = inputs(dir.path(), 2, "ydata");
    let mut g = gahp(dir.path());
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    seed(&mut g, &a, "seed#x", "uppercase", &x);
    seed(&mut g, &b, "seed#y", "uppercase", &y);
    let pool = pool_file(dir.path(), &[("a", &a), ("b", &b)], "");
    select_pool(&mut g, &pool);
    assert_eq!(submit(&mut g, "m#x", &x), ["NULL"]);
    // b's jobs take 1000 sim seconds (1e13 fpops at 1e10 flops): none can
    // finish before the first query, however slow this machine is, until
    // the test moves b's clock.
    let mut slow = uppercase_batch("m#y", &y);
    slow.params.rsc_fpops_est = ParamValue::Value(1e13);
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(slow)), WAIT).unwrap(), ["NULL"]);
    assert_eq!(holder(&[("a", &a), ("b", &b)], "m#y"), "b");
    let query = |g: &mut GahpClient, from: f64| {
        let r = g
            .call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: from, batches: vec!["m#x".into(), "m#y".into()] }), WAIT)
            .unwrap();
        assert_eq!(r[0], "NULL", "{r:?}");
        r
    };
    let groups = |r: &[String]| {
        let n_x: usize = r[2].parse().unwrap();
        let n_y: usize = r[3 + 2 * n_x].parse().unwrap();
        (n_x, n_y, r[4 + 2 * n_x..].to_vec())
    };
    let r = query(&mut g, 0.0);
    let s1: f64 = r[1].parse().unwrap();
    let (_, n_y, jobs) = groups(&r);
    assert_eq!(n_y, 2, "{r:?}");
    assert!(jobs.chunks(2).all(|p| p[1] != "DONE"), "b's jobs finished before the first query: {jobs:?}");
    // b cannot answer queries while its jobs finish.
    b.set_faults(serde_json::json!({ "rules": { "submit_rpc_handler.php:query_batch2": { "http503": 1.0 } } }));
    // Both clocks move on together: the pool's server_time is a's while b
    // cannot answer, and b's changes must come before it.
    b.advance_clock(1100.0);
    a.advance_clock(1100.0);
    let until = std::time::Instant::now() + WAIT;
    let b_jobs = || b.jobs_of(b.batches_named("m#y")[0]["id"].as_i64().unwrap());
    while !b_jobs().iter().all(|j| j["status"] == "DONE") {
        assert!(std::time::Instant::now() < until, "b's jobs did not finish");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Past the server's 1 s clock steps and the daemon's 1 s widening.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let r = query(&mut g, s1);
    let s2: f64 = r[1].parse().unwrap();
    assert!(s2 > s1 + 2.0, "{s1} {s2}");
    // So a query from s2 alone would miss them.
    assert!(b_jobs().iter().all(|j| j["mod_time"].as_f64().unwrap() < s2 - 1.0), "{s2} {:?}", b_jobs());
    assert_eq!(groups(&r).1, 0, "b could not answer: {r:?}");
    b.set_faults(serde_json::json!({}));
    // The gridmanager passes back the last server_time each time; b is
    // asked from s1 until it answers. (A query b's tree is still retrying
    // may miss the pool's timeout once more on a loaded machine.)
    let (mut from, mut seen) = (s2, Vec::new());
    let jobs = loop {
        let r = query(&mut g, from);
        let (_, n_y, jobs) = groups(&r);
        if n_y > 0 {
            assert_eq!(n_y, 2, "{r:?}");
            break jobs;
        }
        seen.push(r.clone());
        assert!(std::time::Instant::now() < until + WAIT, "b's jobs finished while it could not answer and were never reported: {seen:?}");
        from = r[1].parse().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert!(jobs.chunks(2).all(|p| p[1] == "DONE"), "{jobs:?}");
}
