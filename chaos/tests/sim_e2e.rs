//! The built `gahp-chaos --sim` for one seed with a few small batches: the
//! real daemon through the fault proxy against boinc-sim on loopback.

use std::path::PathBuf;
use std::process::Command;

fn sibling(name: &str) -> PathBuf {
    let chaos = PathBuf::from(env!("CARGO_BIN_EXE_gahp-chaos"));
    let p = chaos.parent().expect("a target directory").join(name);
    assert!(p.exists(), "{} is not built: run `cargo build --release --bins` (or the whole workspace's tests)", p.display());
    p
}

/// One run of the built `gahp-chaos --sim` with `args`, its work and
/// report in `dir`: its stdout and report, after checking that it passed.
fn chaos_sim(dir: &std::path::Path, args: &[&str]) -> (String, serde_json::Value) {
    let report = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_gahp-chaos"))
        .args(["--sim", "--runs", "1"])
        .args(args)
        .arg("--gahp")
        .arg(sibling("boinc_gahp"))
        .arg("--sim-exe")
        .arg(sibling("boinc-sim"))
        .arg("--work-dir")
        .arg(dir.join("runs"))
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "gahp-chaos failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (stdout, serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap())
}

#[test]
fn one_seed_against_the_simulated_project_passes_and_writes_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, json) = chaos_sim(dir.path(), &["--seed", "5", "--batches", "4", "--profile", "default", "--finish-wait", "120"]);
    assert!(stdout.contains("summary: 1 runs, 4 batches"), "{stdout}");
    assert_eq!(json["violations"], 0);
    let run = &json["runs"][0];
    assert_eq!(run["seed"], 5);
    assert!(run["rpcs"].as_u64().unwrap() > 10, "{run}");
    // One kill -9 of the workload's daemon per run; the host-faults phase
    // (as root) kills its own second daemon once more, named as such.
    let kills: Vec<&str> = run["kills"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    let of_the_workload = kills.iter().filter(|k| !k.starts_with("host faults:")).count();
    assert_eq!(of_the_workload, 1, "one kill -9 per run: {run}");
    // Every decision of the proxy is on record for a replay.
    let decisions = std::fs::read_to_string(dir.path().join("runs/seed-5/decisions.jsonl")).unwrap();
    assert_eq!(decisions.lines().count() as u64, run["rpcs"].as_u64().unwrap());
}

#[test]
fn a_missing_project_is_an_error_not_a_pass() {
    let out = Command::new(env!("CARGO_BIN_EXE_gahp-chaos")).args(["--seed", "1"]).output().unwrap();
    assert!(!out.status.success());
}

/// One seeded run of a hostile profile against the simulated project: the
/// run's report, after checking that it found no violation and that every
/// hostile kind reached the daemon.
fn hostile_run(profile: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let (_, json) = chaos_sim(dir.path(), &["--seed", "1", "--batches", "64", "--profile", profile, "--finish-wait", "60"]);
    assert_eq!(json["violations"], 0);
    let run = json["runs"][0].clone();
    assert_eq!(run["skipped"].as_array().unwrap().len(), 0, "{run}");
    assert_eq!(run["hostile_kinds"].as_object().unwrap().len(), 16, "{run}");
    assert!(run["hostile_jobs"].as_u64().unwrap() >= 16, "{run}");
    run
}

#[test]
fn the_hostile_hosts_profile_sends_every_kind_and_finds_nothing_reached_past_a_job() {
    let run = hostile_run("hostile-hosts");
    // Some jobs stayed honest, and the daemon's memory stayed far below a bomb's.
    let (jobs, hostile) = (run["blah_jobs"].as_u64().unwrap(), run["hostile_jobs"].as_u64().unwrap());
    assert!(jobs > hostile, "{run}");
    assert!(run["peak_rss_mib"].as_f64().unwrap() < 128.0, "{run}");
}

#[test]
fn with_a_quorum_the_hostile_host_is_outvoted_and_no_job_completes_with_its_lie() {
    hostile_run("hostile-hosts-quorum");
}
