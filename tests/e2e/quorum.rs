//! Results a public project can trust (docs/runner.md "Quorum"): script
//! jobs of a runner whose jobs run on two hosts and count only when they
//! agree, on the simulated project, where each host zips its outputs at
//! its own time and a host may lie (`lie_rate`); and the project's
//! validator, `deploy/boinc-runner/condor_runner_validate`, on zips made
//! here.

use crate::common::blah::{str_value, submit, wait_final};
use crate::common::script::script_job;
use crate::common::*;
use gahp_protocol::classad::ClassAd;
use serde_json::Value as Json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The sim's `runner` app with a quorum of 2 (as `register --quorum 2`).
const QUORUM_RUNNER: &str = "[[apps]]\nname = \"runner\"\ninputs = [\"condor_exec.exe\", \"condor_job.zip\"]\n\
outputs = [\"condor_out.zip\"]\njob_bounds = true\nfpops_est = 1e9\ndelay_bound = 86400\nmin_quorum = 2\n\
target_nresults = 2\nmax_error_results = 3\nmax_total_results = 7\nmax_success_results = 4\n";

/// A script that writes an output and a line of stdout, and exits 0.
const SCRIPT: &str = "#!/bin/sh\ntr a-z A-Z < in > out.txt\necho \"made out.txt\"\n";

/// The sim with these host groups and the quorum runner, a daemon on it,
/// and a job directory `q` with the script and its input.
struct World {
    sim: Sim,
    dir: tempfile::TempDir,
    g: GahpClient,
    iwd: PathBuf,
}

fn world(hosts: &str) -> World {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start_config(dir.path(), &format!("{hosts}\n{QUORUM_RUNNER}"));
    std::fs::write(dir.path().join("boinc.auth"), format!("{}\n", sim.auth)).unwrap();
    let config = dir.path().join("config.toml");
    let text = format!(
        "[blah]\nproject_url = \"{}\"\nauthenticator_file = \"boinc.auth\"\nstatus_refresh_secs = 0.3\n\
         batch_window_secs = 0.5\nrunner_app = \"runner\"\n",
        sim.url
    );
    std::fs::write(&config, text).unwrap();
    let mut g = gahp_with(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    let iwd = dir.path().join("q");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("analyze.sh"), SCRIPT).unwrap();
    std::fs::write(iwd.join("in"), "input of q\n").unwrap();
    World { sim, dir, g, iwd }
}

impl World {
    /// Submits the script job; its final status line.
    fn run_job(&mut self) -> Vec<String> {
        let ad = script_job(
            &self.iwd,
            "analyze.sh",
            &[("TransferInput", str_value("in")), ("Out", str_value("job.out")), ("Err", str_value("job.err"))],
        );
        let id = submit(&mut self.g, ad);
        wait_final(&mut self.g, &id, WAIT)
    }

    /// The instances of the one job on the project: (host, validate_state).
    fn instances(&self) -> (Json, Vec<(String, i64)>) {
        let state = self.sim.state();
        let jobs = state["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 1, "{state}");
        let job = jobs[0].clone();
        let xs = job["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x["host"].as_str().unwrap_or("").to_string(), x["validate_state"].as_i64().unwrap()))
            .collect();
        (job, xs)
    }
}

/// BOINC's validate states.
const VALID: i64 = 1;
const INVALID: i64 = 2;

#[test]
fn two_honest_hosts_agree_on_what_their_zips_hold_though_the_zips_differ() {
    let mut w = world("[[hosts]]\nname = \"honest\"\ncount = 2\n");
    let r = w.run_job();
    assert_eq!(r[2], "4", "completed: {r:?}");
    let ad = ClassAd::parse(&r[3]).unwrap();
    assert_eq!(ad.get_int("ExitCode"), Some(0), "{ad}");
    assert_eq!(std::fs::read_to_string(w.iwd.join("out.txt")).unwrap(), "INPUT OF Q\n");
    let (job, xs) = w.instances();
    assert_eq!(xs.len(), 2, "{job}");
    assert!(xs.iter().all(|(_, v)| *v == VALID), "both valid: {job}");
}

#[test]
fn a_lying_host_is_outvoted_and_nothing_of_its_output_reaches_the_job() {
    // The liar is the first host: it gets the job's first instance.
    let mut w = world("[[hosts]]\nname = \"liar\"\ncount = 1\nlie_rate = 1.0\n[[hosts]]\nname = \"honest\"\ncount = 2\n");
    let r = w.run_job();
    assert_eq!(r[2], "4", "completed: {r:?}");
    let ad = ClassAd::parse(&r[3]).unwrap();
    assert_eq!(ad.get_int("ExitCode"), Some(0), "{ad}");
    assert_eq!(std::fs::read_to_string(w.iwd.join("job.out")).unwrap(), "made out.txt\n", "the honest stdout");
    assert_eq!(std::fs::read_to_string(w.iwd.join("out.txt")).unwrap(), "INPUT OF Q\n");
    let (job, xs) = w.instances();
    let mut seen: Vec<(String, i64)> = xs.clone();
    seen.sort();
    assert_eq!(seen, [("honest_1".to_string(), VALID), ("honest_2".to_string(), VALID), ("liar_1".to_string(), INVALID)], "{job}");
    let log = log_text(w.dir.path());
    assert!(!log.contains("forged by"), "nothing of the liar's in the daemon's log");
}

#[test]
fn hosts_that_never_agree_fail_the_job_with_neither_output() {
    // Each liar lies its own way: no two results agree, and after
    // max_success_results (4) BOINC gives up on the job.
    // The project answers query_completed_job as BOINC's PHP means to
    // (not dying on it, as on PHP 8): with a disagreeing host's instance.
    let mut w = world("[quirks]\nquery_completed_job = \"intended\"\n[[hosts]]\nname = \"liar\"\ncount = 5\nlie_rate = 1.0\n");
    let r = w.run_job();
    let ad = ClassAd::parse(&r[3]).unwrap();
    assert_eq!(r[2], "4", "BOINC's failed job is a completed job with an exit code and reason: {r:?}");
    assert_eq!(ad.get_int("ExitCode"), Some(1), "{ad}");
    let reason = ad.get_str("ExitReason").unwrap_or_default();
    assert!(reason.contains("BOINC job failed"), "{reason}");
    assert!(!w.iwd.join("out.txt").exists(), "no host's output");
    let out = std::fs::read_to_string(w.iwd.join("job.out")).unwrap_or_default();
    assert!(!out.contains("made out.txt") && !out.contains("forged"), "no host's stdout: {out:?}");
    let err = std::fs::read_to_string(w.iwd.join("job.err")).unwrap();
    assert_eq!(err, "", "no host's stderr (the wrapper's log of a host that disagreed)");
    let (job, xs) = w.instances();
    assert_eq!(xs.len(), 5, "{job}");
    assert_ne!(job["error_mask"].as_i64(), Some(0), "{job}");
}

// ---------------------------------------------------------------- the validator

/// `deploy/boinc-runner/condor_runner_validate` on `zips`: its exit code
/// and stderr.
fn validate(zips: &[&Path]) -> (i32, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/boinc-runner/condor_runner_validate");
    let out = Command::new("python3").arg(script).args(zips).output().expect("python3 runs the validator (the project server has it)");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A zip of `entries` (name, bytes, unix mode) with every time `when`.
fn zip_of(path: &Path, entries: &[(&str, &[u8], u32)], when: zip::DateTime) -> PathBuf {
    use zip::write::SimpleFileOptions;
    let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, data, mode) in entries {
        let opts = SimpleFileOptions::default().last_modified_time(when).unix_permissions(*mode);
        if mode & 0o170000 == 0o120000 {
            w.add_symlink(*name, std::str::from_utf8(data).unwrap(), opts).unwrap();
        } else if name.ends_with('/') {
            w.add_directory(*name, opts).unwrap();
        } else {
            w.start_file(*name, opts).unwrap();
            w.write_all(data).unwrap();
        }
    }
    w.finish().unwrap();
    path.to_path_buf()
}

const RESULT: &[(&str, &[u8], u32)] =
    &[("_condor_exit_code", b"0", 0o644), ("_condor_stdout", b"made out.txt\n", 0o644), ("out.txt", b"INPUT\n", 0o644)];

#[test]
fn the_validator_compares_unpacked_files_and_exit_codes_not_zip_bytes() {
    let d = tempfile::tempdir().unwrap();
    let at = |n: &str| d.path().join(n);
    let t1 = zip::DateTime::from_date_and_time(2026, 1, 1, 10, 0, 0).unwrap();
    let t2 = zip::DateTime::from_date_and_time(2026, 3, 4, 5, 6, 8).unwrap();
    let a = zip_of(&at("a.zip"), RESULT, t1);
    // The same files, zipped at another time, in another order, with
    // other modes.
    let b = zip_of(&at("b.zip"), &[RESULT[2], RESULT[0], (RESULT[1].0, RESULT[1].1, 0o600)], t2);
    assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(validate(&[&a]).0, 0);
    assert_eq!(validate(&[&a, &b]), (0, String::new()));
    for (entries, what) in [
        (vec![RESULT[0], RESULT[1], ("out.txt", b"INPUT!\n" as &[u8], 0o644)], "out.txt differs"),
        (vec![("_condor_exit_code", b"3" as &[u8], 0o644), RESULT[1], RESULT[2]], "exit codes differ"),
        (vec![RESULT[0], ("_condor_stdout", b"forged\n" as &[u8], 0o644), RESULT[2]], "_condor_stdout differs"),
        (vec![RESULT[0], RESULT[1]], "different files"),
        (vec![RESULT[0], RESULT[1], RESULT[2], ("extra", b"" as &[u8], 0o644)], "different files"),
    ] {
        let c = zip_of(&at("c.zip"), &entries, t1);
        let (code, err) = validate(&[&a, &c]);
        assert_eq!(code, 1, "{what}: {err}");
        assert!(err.contains(what), "{what}: {err}");
    }
}

#[test]
fn the_validator_finds_hostile_zips_invalid_and_does_not_crash() {
    let d = tempfile::tempdir().unwrap();
    let at = |n: &str| d.path().join(n);
    let t = zip::DateTime::default();
    let good = zip_of(&at("good.zip"), RESULT, t);
    let cases: Vec<(PathBuf, &str)> = vec![
        (zip_of(&at("dotdot.zip"), &[RESULT[0], ("../x", b"1", 0o644)], t), "not a plain top-level file name"),
        (zip_of(&at("sub.zip"), &[RESULT[0], ("sub/x", b"1", 0o644)], t), "not a plain top-level file name"),
        (zip_of(&at("abs.zip"), &[RESULT[0], ("/etc/x", b"1", 0o644)], t), "not a plain top-level file name"),
        (zip_of(&at("link.zip"), &[RESULT[0], ("out.txt", b"/etc/passwd", 0o120777)], t), "not a regular file"),
        (zip_of(&at("dir.zip"), &[RESULT[0], ("d/", b"", 0o755)], t), "not a plain top-level file name"),
        (zip_of(&at("noexit.zip"), &[RESULT[1]], t), "no _condor_exit_code"),
        (zip_of(&at("badexit.zip"), &[("_condor_exit_code", b"0; rm -rf /", 0o644), RESULT[1]], t), "not an exit code"),
    ];
    for (zip, what) in &cases {
        let (code, err) = validate(&[zip]);
        assert_eq!(code, 1, "{}: {err}", zip.display());
        assert!(err.contains(what), "{}: {err}", zip.display());
        // Compared with a good one it is not a match either, never a crash.
        assert_eq!(validate(&[&good, zip]).0, 1, "{}", zip.display());
    }
    // A bomb: 300 MiB of zeros in a zip of about 300 KB.
    let bomb = at("bomb.zip");
    {
        use zip::write::SimpleFileOptions;
        let mut w = zip::ZipWriter::new(std::fs::File::create(&bomb).unwrap());
        w.start_file("_condor_exit_code", SimpleFileOptions::default()).unwrap();
        w.write_all(b"0").unwrap();
        w.start_file("_condor_stdout", SimpleFileOptions::default().compression_level(Some(9)).large_file(true)).unwrap();
        let mb = vec![0u8; 1 << 20];
        for _ in 0..300 {
            w.write_all(&mb).unwrap();
        }
        w.finish().unwrap();
    }
    assert!(std::fs::metadata(&bomb).unwrap().len() < 1 << 20);
    let (code, err) = validate(&[&bomb]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("zip bomb"), "{err}");
    // Not a zip, a damaged one, and one that was never uploaded.
    std::fs::write(at("junk.zip"), b"PK\x03\x04 junk").unwrap();
    let mut damaged = std::fs::read(&good).unwrap();
    let i = damaged.windows(7).position(|w| w == b"out.txt").unwrap() + 9;
    damaged[i] ^= 0xff;
    std::fs::write(at("damaged.zip"), &damaged).unwrap();
    for z in ["junk.zip", "damaged.zip", "never.zip"] {
        let (code, err) = validate(&[&at(z)]);
        assert_eq!(code, 1, "{z}: {err}");
        assert!(err.contains("invalid result"), "{z}: {err}");
    }
}
