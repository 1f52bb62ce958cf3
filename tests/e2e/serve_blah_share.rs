//! `batch boinc` jobs of several clients of one `boinc_gahp serve` on one
//! BOINC account share BOINC batches: one batch, one submission, for the
//! jobs they submit within one window; each job stays its client's (its
//! outputs in its client's Iwd, its id unknown to the others). Another
//! account gets its own batch; a kill -9 of serve mid-submit makes no job
//! twice, a client whose link drops mid-submit finds its jobs when it
//! comes back, and held jobs keep the batch until the last is removed.
//! The real binaries over TLS against the simulated project.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::blah::*;
use crate::common::serve::*;
use crate::common::*;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::BlahCommand;

/// Serve's config: a batch gathers jobs for `window` seconds.
fn serve_config(dir: &Path, window: f64) -> PathBuf {
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("[blah]\nstatus_refresh_secs = 0.3\nbatch_window_secs = {window}\ndefault_app = \"uppercase\"\n"))
        .unwrap();
    config
}

/// An uppercase job in `iwd` whose input says who and which it is.
fn uppercase_job(iwd: &Path, job_dir: &str) -> ClassAd {
    std::fs::create_dir_all(iwd).unwrap();
    std::fs::write(iwd.join("in"), format!("input of {job_dir}\n")).unwrap();
    let attrs = [("TransferInput", str_value("in")), ("TransferOutput", str_value("out")), ("BoincApp", str_value("uppercase"))];
    gahp_testkit::blah_job_ad(iwd, job_dir, &attrs)
}

/// The sim's batches with their job names.
fn sim_batches(sim: &Sim) -> Vec<(String, Vec<String>)> {
    let state = sim.state();
    let jobs = state["jobs"].as_array().unwrap();
    state["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let names = jobs.iter().filter(|j| j["batch"] == b["id"]).filter_map(|j| j["name"].as_str().map(String::from)).collect();
            (b["name"].as_str().unwrap_or_default().to_string(), names)
        })
        .collect()
}

/// Every RPC the project answered, by endpoint, summed.
fn sim_rpcs(sim: &Sim) -> u64 {
    sim.state()["rpc_counts"].as_object().unwrap().values().filter_map(|v| v.as_u64()).sum()
}

/// Each client submits two jobs within one window; returns once the
/// shared submit_batch has begun (a fault holds it).
fn submit_two_each_until_submit_batch(sim: &Sim, clients: &mut [Client], dir: &Path) {
    for i in 0..2 {
        for c in clients.iter_mut() {
            c.submit(dir, i);
        }
    }
    let until = Instant::now() + WAIT;
    while sim.calls("submit_rpc_handler.php:submit_batch") < 1 {
        assert!(Instant::now() < until, "submit_batch did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The project's names of those two jobs of each client, sorted.
fn two_jobs_each(names: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = names.iter().flat_map(|n| (0..2).map(move |i| format!("{n}~blah#home_bl_{n}_{i}.0_1#1"))).collect();
    all.sort();
    all
}

/// Waits until every batch on the project is retired.
fn wait_all_retired(sim: &Sim) {
    let until = Instant::now() + WAIT;
    while sim.state()["batches"].as_array().unwrap().iter().any(|b| b["state"].as_i64() != Some(4)) {
        assert!(Instant::now() < until, "not every batch was retired: {}", sim.state()["batches"]);
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct Client {
    name: String,
    g: GahpClient,
    /// (JobDirectory, id, Iwd) of each job.
    jobs: Vec<(String, String, PathBuf)>,
}

fn connect(s: &Serve, token: &Path, name: &str, dir: &Path) -> Client {
    let mut g = s.connect(token, dir, &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    Client { name: name.to_string(), g, jobs: Vec::new() }
}

impl Client {
    fn submit(&mut self, dir: &Path, i: usize) {
        let job_dir = format!("home_bl_{}_{i}.0_1", self.name);
        let iwd = dir.join(format!("{} job {i}", self.name));
        let id = submit(&mut self.g, uppercase_job(&iwd, &job_dir));
        self.jobs.push((job_dir, id, iwd));
    }

    /// Every job completes, its output in its own Iwd.
    fn all_complete(&mut self) {
        for (job_dir, id, iwd) in &self.jobs {
            let last = wait_final(&mut self.g, id, WAIT);
            assert_eq!(last[2], "4", "{}: {last:?}", self.name);
            let out = std::fs::read_to_string(iwd.join("out")).unwrap();
            assert_eq!(out, format!("INPUT OF {}\n", job_dir.to_uppercase()), "{}", self.name);
        }
    }
}

#[test]
fn clients_on_one_account_share_one_batch_and_each_keeps_its_jobs() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    // Three clients on one account (each its own key file).
    let names = ["alice", "bob", "carol"];
    let token: Vec<PathBuf> = names.iter().map(|n| add_client(dir.path(), &tokens, &sim, n)).collect();
    let config = serve_config(dir.path(), 3.0);
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &[]);
    let mut clients: Vec<Client> = names.iter().zip(&token).map(|(n, t)| connect(&s, t, n, dir.path())).collect();

    // Within one window: two jobs each, and one of carol's whose input is
    // missing (her failure must not fail the others).
    for i in 0..2 {
        for c in &mut clients {
            c.submit(dir.path(), i);
        }
    }
    let mut broken =
        gahp_testkit::blah_job_ad(&dir.path().join("carol broken"), "home_bl_carol_broken.0_1", &[("BoincApp", str_value("uppercase"))]);
    broken.insert("TransferInput", str_value("missing"));
    std::fs::create_dir_all(dir.path().join("carol broken")).unwrap();
    let broken = submit(&mut clients[2].g, broken);

    for c in &mut clients {
        c.all_complete();
    }
    let held = wait_final(&mut clients[2].g, &broken, WAIT);
    assert_eq!(held[2], "5", "{held:?}");
    assert!(held[3].contains("missing"), "{held:?}");

    // One batch on the project holds all six, each under its client's name.
    let batches = sim_batches(&sim);
    assert_eq!(batches.len(), 1, "one BOINC batch for the three clients: {batches:?}");
    let (batch, jobs) = &batches[0];
    assert_eq!(jobs.len(), 6, "{jobs:?}");
    for c in &clients {
        for (job_dir, id, _) in &c.jobs {
            assert!(jobs.contains(&format!("{}~blah#{job_dir}#1", c.name)), "{job_dir}: {jobs:?}");
            assert!(id.ends_with(&format!("/blah#{job_dir}#1")), "{id}");
        }
    }
    // The batch's name tells no client's name or job.
    assert!(names.iter().all(|n| !batch.contains(n)), "{batch}");
    assert_eq!(sim.calls("submit_rpc_handler.php:create_batch"), 1);
    assert_eq!(sim.calls("submit_rpc_handler.php:submit_batch"), 1);

    // Bob asking for alice's job gets the answer of a job he never had,
    // and his cancel of it does nothing.
    let alices = clients[0].jobs[0].1.clone();
    let unknown = alices.replace("home_bl_alice_0", "home_bl_nobody_0");
    let (bob_of_alice, bob_of_unknown) = {
        let g = &mut clients[1].g;
        (blah(g, BlahCommand::JobStatus { job_id: alices.clone() }), blah(g, BlahCommand::JobStatus { job_id: unknown.clone() }))
    };
    assert_eq!(bob_of_alice[0], "1", "{bob_of_alice:?}");
    let as_unknown: Vec<String> = bob_of_unknown.iter().map(|f| f.replace("home_bl_nobody_0", "home_bl_alice_0")).collect();
    assert_eq!(bob_of_alice, as_unknown);
    assert_eq!(blah(&mut clients[1].g, BlahCommand::JobCancel { job_id: alices.clone() })[0], "0");
    let r = blah(&mut clients[0].g, BlahCommand::JobStatus { job_id: alices });
    assert_eq!(r[2], "4", "{r:?}");

    // Retired once every client's jobs are delivered, not before.
    wait_all_retired(&sim);
    assert_eq!(sim.calls("submit_rpc_handler.php:retire_batch"), 1, "retired once, by the last client done");
}

#[test]
fn a_client_on_another_account_gets_its_own_batch() {
    let dir = tempfile::tempdir().unwrap();
    let other_auth = "0123456789abcdef0123456789abcdef";
    let sim = Sim::start_config(dir.path(), &format!("[[users]]\nname = \"other\"\nauthenticator = \"{other_auth}\"\nsubmit_all = true\n"));
    let tokens = dir.path().join("tokens.toml");
    let ann = add_client(dir.path(), &tokens, &sim, "ann");
    let bo = add_client(dir.path(), &tokens, &sim, "bo");
    let cy = add_client(dir.path(), &tokens, &sim, "cy");
    std::fs::write(dir.path().join("cy.auth"), format!("{other_auth}\n")).unwrap();
    let config = serve_config(dir.path(), 3.0);
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &[]);
    let mut clients: Vec<Client> =
        [("ann", &ann), ("bo", &bo), ("cy", &cy)].into_iter().map(|(n, t)| connect(&s, t, n, dir.path())).collect();
    for c in &mut clients {
        c.submit(dir.path(), 0);
        c.submit(dir.path(), 1);
    }
    for c in &mut clients {
        c.all_complete();
    }
    let mut batches = sim_batches(&sim);
    assert_eq!(batches.len(), 2, "one batch per account: {batches:?}");
    batches.sort_by_key(|(_, jobs)| jobs.len());
    let mut cys = batches[0].1.clone();
    cys.sort();
    assert_eq!(cys, ["cy~blah#home_bl_cy_0.0_1#1", "cy~blah#home_bl_cy_1.0_1#1"], "{batches:?}");
    assert_eq!(batches[1].1.len(), 4, "{batches:?}");
    assert!(batches[1].1.iter().all(|j| j.starts_with("ann~") || j.starts_with("bo~")), "{batches:?}");
}

#[test]
fn kill_9_of_serve_while_a_shared_batch_is_submitted_makes_every_job_once() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let names = ["ann", "bo", "cy"];
    let token: Vec<PathBuf> = names.iter().map(|n| add_client(dir.path(), &tokens, &sim, n)).collect();
    let config = serve_config(dir.path(), 2.0);
    let global = ["--config", config.to_str().unwrap()];
    let s = serve_with(dir.path(), &tokens, &global, &["--insecure-loopback"]);
    // The shared batch is made, then its submit_batch hangs.
    sim.set_faults(serde_json::json!({"seed": 1, "script": [
        {"endpoint": "submit_rpc_handler.php:submit_batch", "nth": 1, "kind": "hang"},
    ]}));
    let mut clients: Vec<Client> = names.iter().zip(&token).map(|(n, t)| connect(&s, t, n, dir.path())).collect();
    submit_two_each_until_submit_batch(&sim, &mut clients, dir.path());
    let first = sim_batches(&sim);
    assert_eq!(first.len(), 1, "one shared batch: {first:?}");
    let mut s = s;
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    drop(s);

    // Serve again on its state; the clients come back and ask on.
    let s = serve_with(dir.path(), &tokens, &global, &["--insecure-loopback"]);
    let jobs: Vec<Vec<(String, String, PathBuf)>> = clients.into_iter().map(|c| c.jobs).collect();
    let mut clients: Vec<Client> = names.iter().zip(&token).map(|(n, t)| connect(&s, t, n, dir.path())).collect();
    for (c, jobs) in clients.iter_mut().zip(jobs) {
        c.jobs = jobs;
        // A resubmit after the restart is the same job.
        let (job_dir, id, iwd) = c.jobs[1].clone();
        assert_eq!(submit(&mut c.g, uppercase_job(&iwd, &job_dir)), id);
    }
    for c in &mut clients {
        c.all_complete();
    }
    // Each job exactly once on the project.
    let batches = sim_batches(&sim);
    let mut all: Vec<String> = batches.iter().flat_map(|(_, jobs)| jobs.clone()).collect();
    all.sort();
    let want = two_jobs_each(&names);
    assert_eq!(all, want, "every job once: {batches:?}");
    let log = s.log_text();
    let alone = log.lines().filter(|l| l.contains("submitting them in a batch of their own")).count();
    // The opener (ann) filled the shared batch, left empty by the kill;
    // the others found none of theirs in it and made their own.
    assert_eq!((batches.len(), alone), (3, 2), "{batches:?}");
    let anns = batches.iter().find(|(name, _)| *name == first[0].0).map(|(_, jobs)| jobs.clone()).unwrap_or_default();
    assert!(anns.len() == 2 && anns.iter().all(|j| j.starts_with("ann~")), "{batches:?}");
}

#[test]
fn a_client_that_leaves_while_its_shared_batch_is_submitted_finds_its_jobs_when_it_comes_back() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let names = ["ann", "bo", "cy"];
    let token: Vec<PathBuf> = names.iter().map(|n| add_client(dir.path(), &tokens, &sim, n)).collect();
    let config = serve_config(dir.path(), 2.0);
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &["--insecure-loopback"]);
    // The shared submit_batch hangs 4 s, then fails; the retry goes through.
    sim.set_faults(serde_json::json!({"seed": 1, "script": [
        {"endpoint": "submit_rpc_handler.php:submit_batch", "nth": 1, "kind": "hang", "hang_ms": 4000},
    ]}));
    let mut clients: Vec<Client> = names.iter().zip(&token).map(|(n, t)| connect(&s, t, n, dir.path())).collect();
    submit_two_each_until_submit_batch(&sim, &mut clients, dir.path());
    // Bo's link drops mid-submit (his connect is killed).
    let mut bo = clients.remove(1);
    bo.g.kill();
    let bo_jobs = bo.jobs;
    for c in &mut clients {
        c.all_complete();
    }
    // Bo comes back: his jobs were in the shared batch all along.
    let mut bo = connect(&s, &token[1], "bo", dir.path());
    bo.jobs = bo_jobs;
    bo.all_complete();

    let batches = sim_batches(&sim);
    assert_eq!(batches.len(), 1, "one batch, bo's jobs in it: {batches:?}");
    let mut all = batches[0].1.clone();
    all.sort();
    let want = two_jobs_each(&names);
    assert_eq!(all, want, "every job once");
    assert_eq!(sim.calls("submit_rpc_handler.php:create_batch"), 1);
    wait_all_retired(&sim);
}

#[test]
fn a_shared_batch_waits_for_held_jobs_and_is_retired_once_the_last_is_removed() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let ann = add_client(dir.path(), &tokens, &sim, "ann");
    let bo = add_client(dir.path(), &tokens, &sim, "bo");
    // One failed attempt at the outputs holds a job; an attempt gives up
    // after 3 s.
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "command_timeout_secs = 3\nretry_base_ms = 50\n[blah]\nstatus_refresh_secs = 0.3\nbatch_window_secs = 2\n\
         default_app = \"uppercase\"\noutput_fetch_attempts = 1\n",
    )
    .unwrap();
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &["--insecure-loopback"]);
    // Every output download fails.
    sim.set_faults(serde_json::json!({"seed": 1, "rules": {"get_output.php:*": {"http500": 1.0}}}));
    let mut clients = [connect(&s, &ann, "ann", dir.path()), connect(&s, &bo, "bo", dir.path())];
    let ids: Vec<String> = clients
        .iter_mut()
        .map(|c| {
            let iwd = dir.path().join(format!("{} job", c.name));
            submit(&mut c.g, uppercase_job(&iwd, &format!("home_bl_{}_0.0_1", c.name)))
        })
        .collect();
    for (c, id) in clients.iter_mut().zip(&ids) {
        let r = wait_final(&mut c.g, id, WAIT);
        assert_eq!(r[2], "5", "{}'s job is held: {r:?}", c.name);
    }
    assert_eq!(sim_batches(&sim).len(), 1, "one shared batch");
    let retired = || sim.calls("submit_rpc_handler.php:retire_batch");
    // A held job may be released and its outputs fetched again: the batch
    // stays while either client holds one, ann's removal (condor_rm) or not.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(retired(), 0, "retired under held jobs");
    assert_eq!(blah(&mut clients[0].g, BlahCommand::JobCancel { job_id: ids[0].clone() })[0], "0");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(retired(), 0, "retired under bo's held job");
    // Bo removes his: nobody needs the batch any more.
    assert_eq!(blah(&mut clients[1].g, BlahCommand::JobCancel { job_id: ids[1].clone() })[0], "0");
    wait_all_retired(&sim);
    assert_eq!(retired(), 1);
}

/// The measure of BENCHMARKS.md: 20 clients of 5 jobs each through one
/// serve, all within one window: the BOINC batches and RPCs they cost
/// (printed), every job completed.
#[test]
fn twenty_clients_of_five_jobs_cost_one_batch() {
    const CLIENTS: usize = 20;
    const JOBS: usize = 5;
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let names: Vec<String> = (0..CLIENTS).map(|i| format!("c{i:02}")).collect();
    let token: Vec<PathBuf> = names.iter().map(|n| add_client(dir.path(), &tokens, &sim, n)).collect();
    let config = serve_config(dir.path(), 10.0);
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &["--insecure-loopback"]);
    let mut clients: Vec<Client> = names.iter().zip(&token).map(|(n, t)| connect(&s, t, n, dir.path())).collect();
    let started = Instant::now();
    for i in 0..JOBS {
        for c in &mut clients {
            c.submit(dir.path(), i);
        }
    }
    let submitted = started.elapsed();
    for c in &mut clients {
        c.all_complete();
    }
    let batches = sim_batches(&sim);
    wait_all_retired(&sim);
    let rpcs = sim_rpcs(&sim);
    let jobs = (CLIENTS * JOBS) as f64;
    println!(
        "share bench: {CLIENTS} clients x {JOBS} jobs (submitted in {:.1} s): {} BOINC batches, {rpcs} RPCs, {:.2} RPCs/job; {}",
        submitted.as_secs_f64(),
        batches.len(),
        rpcs as f64 / jobs,
        sim.state()["rpc_counts"]
    );
    assert_eq!(batches.len(), 1, "{batches:?}");
    assert_eq!(batches[0].1.len(), CLIENTS * JOBS);
}
