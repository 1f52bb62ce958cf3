//! The BLAH dialect through `boinc_gahp serve`: a work sequence job
//! (`BoincSequenceSteps`) is the client's like its other jobs, its files
//! carried by `boinc_gahp connect` both ways; and serve's configured BLAH
//! pool places the jobs of a client granted every project in it, while a
//! client granted fewer keeps its first project. The real binaries over
//! TLS against the simulated project.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::blah::*;
use crate::common::serve::*;
use crate::common::*;
use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::sequence_commands::SequenceCommand;
use gahp_protocol::gahp::{BlahCommand, Command};

/// A sequence's steps run one after another.
const SEQUENCE_WAIT: Duration = Duration::from_secs(180);

/// A config file for serve: sequences looked at every 0.2 s, BLAH
/// statuses every 0.3 s, and `extra` in its `[blah]` table.
fn serve_config(dir: &Path, extra: &str) -> PathBuf {
    let config = dir.join("config.toml");
    std::fs::write(&config, format!("sequence_poll_ms = 200\n[blah]\nstatus_refresh_secs = 0.3\n{extra}\n")).unwrap();
    config
}

/// A `stepper` work sequence job of `steps` steps in `iwd` on the first
/// tier: an empty `state` (its state file) and `extra`, its other input.
fn sequence_job(iwd: &Path, job_dir: &str, steps: i64) -> ClassAd {
    std::fs::create_dir_all(iwd).unwrap();
    std::fs::write(iwd.join("state"), "").unwrap();
    std::fs::write(iwd.join("extra"), format!("extra of {job_dir}\n")).unwrap();
    gahp_testkit::blah_job_ad(
        iwd,
        job_dir,
        &[
            ("BoincApp", str_value("stepper")),
            ("TransferInput", str_value("state, extra")),
            ("Out", str_value("seq.out")),
            ("Err", str_value(&iwd.join("seq.err").display().to_string())),
            ("BoincSequenceSteps", Value::Int(steps)),
            ("BoincStateFiles", str_value("state")),
            ("BoincMaxStepTime", Value::Int(60)),
        ],
    )
}

/// The stepper's state after `n` steps of `job_dir`'s job, computed here:
/// every step ran once, in order, on the state the one before left.
fn expected_state(job_dir: &str, n: u32) -> String {
    let extra = format!("extra of {job_dir}\n");
    let mut state = String::new();
    for _ in 0..n {
        state = boinc_sim::apps::stepper_next(&state, extra.as_bytes()).unwrap();
    }
    state
}

/// The names of the sim's jobs.
fn sim_job_names(sim: &Sim) -> Vec<String> {
    sim.state()["jobs"].as_array().unwrap().iter().filter_map(|j| j["name"].as_str().map(String::from)).collect()
}

#[test]
fn a_blah_sequence_job_through_connect_is_the_clients_and_its_final_state_comes_back_into_its_iwd() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    // Two clients on one BOINC account: only their names keep them apart.
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let bob = add_client(dir.path(), &tokens, &sim, "bob");
    let config = serve_config(dir.path(), "");
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &[]);

    // The job's files are on the first tier only, in a directory with a space.
    let iwd = dir.path().join("submit dir");
    let job_dir = "home_bl_127.0.0.1_9618_vm_9.0_1795253890";
    let mut g = s.connect(&alice, dir.path(), &[]);
    assert_eq!(g.set_prefix("GAHP:").unwrap(), ["S"]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let id = submit(&mut g, sequence_job(&iwd, job_dir, 3));
    assert!(id.ends_with(&format!("/blah#{job_dir}#1")), "the client sees its id without the prefix: {id}");
    let last = wait_final(&mut g, &id, SEQUENCE_WAIT);
    assert_eq!(last[2], "4", "{last:?}");
    let done = ClassAd::parse(&last[3]).unwrap();
    assert_eq!((done.get_int("ExitCode"), done.get_int("BoincStepsDone")), (Some(0), Some(3)), "{done}");
    // The final state is here, in the local Iwd, before status 4 was read;
    // Out and Err too.
    assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), expected_state(job_dir, 3));
    assert_eq!(std::fs::read(iwd.join("seq.out")).unwrap(), b"");
    assert_eq!(std::fs::read(iwd.join("seq.err")).unwrap(), b"");

    // On the project every step's job is the client's.
    let names = sim_job_names(&sim);
    let steps: Vec<&String> = names.iter().filter(|n| n.contains(&format!("blah-{job_dir}#"))).collect();
    assert!(steps.len() >= 3, "{names:?}");
    let prefix = format!("alice~blah-{job_dir}#");
    assert!(steps.iter().all(|n| n.starts_with(&prefix)), "{steps:?}");
    for step in 1..=3 {
        assert!(steps.iter().any(|n| n.starts_with(&format!("{prefix}{step}#"))), "step {step}: {steps:?}");
    }
    // The sequence is the client's own: it queries it by its bare name
    // (on the project, selected as for any sequence command).
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    let r = sequence_call(&mut g, SequenceCommand::Query { name: format!("blah-{job_dir}") });
    assert_eq!(r[..2], ["NULL", "COMPLETED"], "{r:?}");

    // Another client on the same account neither sees nor touches it.
    let mut other = s.connect(&bob, dir.path(), &[]);
    other.command_line(b"ASYNC_MODE_ON").unwrap();
    assert_eq!(other.command(&sim.select()).unwrap(), ["S"]);
    let r = blah(&mut other, BlahCommand::JobStatus { job_id: id.clone() });
    assert_eq!((r[0].as_str(), r[2].as_str(), r[3].as_str()), ("1", "0", "N/A"), "{r:?}");
    assert_eq!(blah(&mut other, BlahCommand::JobCancel { job_id: id.clone() })[0], "0");
    let r = sequence_call(&mut other, SequenceCommand::Query { name: format!("blah-{job_dir}") });
    assert!(r[0].ends_with(&format!("no sequence named blah-{job_dir}")), "{r:?}");
    let r = sequence_call(&mut other, SequenceCommand::Abort { name: format!("blah-{job_dir}") });
    assert_ne!(r[0], "NULL", "{r:?}");
    // Bob's cancel did nothing to alice's job.
    let r = blah(&mut g, BlahCommand::JobStatus { job_id: id.clone() });
    assert_eq!(r[2], "4", "{r:?}");
    assert!(!sim_job_names(&sim).iter().any(|n| n.starts_with("bob~")), "bob made nothing");

    // Paths the client names (here as they are, `--remote-paths`) stay
    // in its area.
    let mut raw = s.connect(&alice, dir.path(), &["--remote-paths"]);
    raw.command_line(b"ASYNC_MODE_ON").unwrap();
    for (iwd, inputs) in [("../bob/files/j", "state, extra"), ("/etc", "state, extra"), ("j", "../../bob/files/state, extra")] {
        let mut ad = sequence_job(&dir.path().join("unused"), "home_bl_escape_1.0", 2);
        ad.insert("Iwd", str_value(iwd));
        ad.insert("Err", str_value("seq.err"));
        ad.insert("TransferInput", str_value(inputs));
        let line = gahp_protocol::gahp::request::format(&Request::Command {
            reqid: ReqId(90),
            command: Command::Blah(BlahCommand::JobSubmit { ad }),
        });
        assert_eq!(raw.command_line(&line).unwrap(), ["E"], "Iwd {iwd}, inputs {inputs}");
    }
    let log = s.log_text();
    assert!(log.contains("is not a relative path inside the client's area"), "the refusal says why");
}

/// A BLAH job of app `uppercase` in `iwd` (its input written there), with
/// `extra` attributes.
fn uppercase_job(iwd: &Path, job_dir: &str, extra: &[(&str, &str)]) -> ClassAd {
    std::fs::create_dir_all(iwd).unwrap();
    std::fs::write(iwd.join("in.txt"), format!("input of {job_dir}\n")).unwrap();
    let mut attrs =
        vec![("BoincApp", str_value("uppercase")), ("TransferInput", str_value("in.txt")), ("TransferOutput", str_value("out"))];
    attrs.extend(extra.iter().map(|(k, v)| (*k, str_value(v))));
    gahp_testkit::blah_job_ad(iwd, job_dir, &attrs)
}

/// Which of the sims holds a job of that BOINC name.
fn holders(sims: &[(&str, &Sim)], boinc: &str) -> Vec<String> {
    sims.iter().filter(|(_, sim)| sim_job_names(sim).iter().any(|n| n == boinc)).map(|(n, _)| n.to_string()).collect()
}

#[test]
fn serves_blah_pool_places_the_jobs_of_a_client_granted_all_its_projects_and_not_of_one_granted_fewer() {
    let (a, b) = (Sim::start(), Sim::start());
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client_sims(dir.path(), &tokens, &[&a, &b], "alice");
    let bob = add_client_sims(dir.path(), &tokens, &[&a], "bob");
    // The admin's pool of both (its key files are the admin's; a client's
    // projects are used with its token's).
    let sims = [("a", &a), ("b", &b)];
    pool_file(dir.path(), &sims, "");
    let config = serve_config(dir.path(), "pool = \"pool.toml\"");
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &[]);

    // Alice: the pool places her jobs; a job's Requirements choose either
    // project, so both are reached, each under her name.
    let mut g = s.connect(&alice, dir.path(), &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let job_dir = format!("home_bl_pool_{name}.0_1");
        let ad = uppercase_job(
            &dir.path().join(format!("alice {name}")),
            &job_dir,
            &[("BoincRequirements", &format!("TARGET.Name == \"{name}\""))],
        );
        ids.push((name, job_dir, submit(&mut g, ad)));
    }
    for (name, job_dir, id) in &ids {
        let last = wait_final(&mut g, id, WAIT);
        assert_eq!(last[2], "4", "{last:?}");
        let boinc = format!("alice~blah#{job_dir}#1");
        assert_eq!(holders(&sims, &boinc), [*name], "{boinc}");
        let out = dir.path().join(format!("alice {name}")).join("out");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("INPUT OF {}\n", job_dir.to_uppercase()));
    }
    // With the client's authenticator: each project's batch is its account's.
    let log = s.log_text();
    assert!(log.contains("the client's BLAH jobs are placed by the pool"), "{log}");

    // Bob has no grant for b: the pool is not his, his jobs go to his
    // first project whatever they ask, and the log says why, once.
    let mut g = s.connect(&bob, dir.path(), &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let job_dir = "home_bl_bob.0_1";
    let id = submit(&mut g, uppercase_job(&dir.path().join("bob"), job_dir, &[("BoincRequirements", "TARGET.Name == \"b\"")]));
    let last = wait_final(&mut g, &id, WAIT);
    assert_eq!(last[2], "4", "{last:?}");
    assert_eq!(holders(&sims, &format!("bob~blah#{job_dir}#1")), ["a"]);
    let log = s.log_text();
    let why = "the client's BLAH jobs go to its first project, not the pool";
    assert_eq!(log.matches(why).count(), 1, "{log}");
    assert!(log.contains(&format!("project b: {} is not one of this client's projects", b.url)), "{log}");
    // Reconnecting does not say it again.
    drop(g);
    let mut g = s.connect(&bob, dir.path(), &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    assert_eq!(s.log_text().matches(why).count(), 1);
    // No key of the serving host's reached a log line.
    for sim in [&a, &b] {
        assert!(!s.log_text().contains(&sim.auth), "an authenticator in the log");
    }
}

/// A BLAH sequence job reads its own inputs again at every step, from its
/// directory on the second tier: that directory stays while the job is
/// live, however short the retention.
#[test]
fn a_live_blah_sequence_jobs_directory_outlasts_the_retention() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let config = serve_config(dir.path(), "");
    // 0.00002 days: 1.7 s, swept every 0.2 s.
    let s = serve_with(dir.path(), &tokens, &["--config", config.to_str().unwrap()], &["--keep-files-days", "0.00002"]);
    let iwd = dir.path().join("long job");
    let job_dir = "home_bl_127.0.0.1_9618_vm_11.0_1795253890";
    let mut g = s.connect(&alice, dir.path(), &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    // Four steps of at least a second each: the later ones start well
    // after the retention of the directory's files ran out.
    let mut ad = sequence_job(&iwd, job_dir, 4);
    ad.insert("Arguments", str_value("--sleep-ms 1000"));
    let id = submit(&mut g, ad);
    let last = wait_final(&mut g, &id, SEQUENCE_WAIT);
    assert_eq!(last[2], "4", "{last:?}");
    let done = ClassAd::parse(&last[3]).unwrap();
    assert_eq!((done.get_int("ExitCode"), done.get_int("BoincStepsDone")), (Some(0), Some(4)), "{done}");
    assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), expected_state(job_dir, 4));
    // Over and delivered: its directory goes with the retention.
    let blah_dirs = s.files("alice").join(".transfer/blah");
    let until = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(&blah_dirs).map(|d| d.count()).unwrap_or(0) > 0 {
        assert!(Instant::now() < until, "the job's directory is still kept");
        std::thread::sleep(Duration::from_millis(200));
    }
}
