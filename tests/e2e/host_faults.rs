//! The submit host's own faults (issue 37): a full disk under the outputs,
//! the stderr file and the log, and a state database that is garbled or
//! cut short. A full disk is a small tmpfs in a mount namespace of the
//! test's own (`gahp_testkit::PrivateTmpfs`): it needs root, as CI runs;
//! elsewhere those tests say so and pass without running.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::common::*;
use gahp_testkit::tmpfs::FILLER;
use gahp_testkit::PrivateTmpfs;

/// A tmpfs of `size` on `dir`, or None after saying why the test skips.
fn tmpfs(dir: &Path, size: &str) -> Option<PrivateTmpfs> {
    match PrivateTmpfs::mount(dir, size) {
        Ok(fs) => Some(fs),
        Err(why) => {
            eprintln!("skipped: a full disk is a tmpfs in a mount namespace of its own, and {why}");
            None
        }
    }
}

/// The daemon inside `fs`'s namespace, its state in `dir/state`, its log
/// at `log`, its stderr into `dir/stderr.txt`, `extra` flags after.
fn gahp_inside(fs: &PrivateTmpfs, dir: &Path, log: &Path, extra: &[&str]) -> GahpClient {
    let (nsenter, mut args) = fs.wrap(Path::new(env!("CARGO_BIN_EXE_boinc_gahp")), dir);
    let state = dir.join("state");
    for a in ["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap(), "--retry-base-ms", "20"].iter().chain(extra) {
        args.push(a.to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stderr = std::fs::File::create(dir.join("stderr.txt")).unwrap();
    let mut g = GahpClient::spawn_with_stderr(&nsenter, &args, &[], dir, Stdio::from(stderr)).expect("boinc_gahp starts");
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    g
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// A job of the uppercase app, finished on the project.
fn finished_job(sim: &Sim, g: &mut GahpClient, dir: &Path, name: &str) -> String {
    let files = inputs(dir, 1, name);
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch(name, &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"], "{r:?}");
    wait_finished(g, name);
    let _ = sim;
    format!("{name}#0.0")
}

fn fetch(g: &mut GahpClient, job: &str, dir: &Path, stderr: &str) -> Vec<String> {
    let fetch = FetchOutput {
        job_name: job.into(),
        dir: dir.to_path_buf(),
        stderr_file: stderr.into(),
        mode: FetchMode::Some,
        specs: vec![OutputSpec { src: "out".into(), dst: "out".into() }],
    };
    g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap()
}

/// BOINC_FETCH_OUTPUT into a full disk: the error names the cause and the
/// path; the stderr file it appends to is as it was (not half-appended),
/// one it would make is not made, no output lands. With the space back,
/// the same fetch brings everything, the stderr text appended once.
#[test]
fn a_fetch_onto_a_full_disk_names_the_cause_and_leaves_every_file_whole() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    let Some(fs) = tmpfs(&full, "64k") else { return };
    let mut g = gahp_inside(&fs, dir.path(), &dir.path().join("gahp.log"), &[]);
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    let job = finished_job(&sim, &mut g, dir.path(), "fullout");
    std::fs::write(fs.view().join("old_stderr"), "earlier text\n").unwrap();
    fs.fill().unwrap();

    let old = full.join("old_stderr");
    let r = fetch(&mut g, &job, &full, old.to_str().unwrap());
    assert!(r[0].contains("No space left on device") && r[0].contains(old.to_str().unwrap()), "{r:?}");
    assert_eq!(std::fs::read_to_string(fs.view().join("old_stderr")).unwrap(), "earlier text\n", "not half-appended");
    let new = full.join("new_stderr");
    let r = fetch(&mut g, &job, &full, new.to_str().unwrap());
    assert!(r[0].contains("No space left on device") && r[0].contains(new.to_str().unwrap()), "{r:?}");
    assert_eq!(names_in(&fs.view()), [FILLER, "old_stderr"], "no empty stderr file, no partial output");

    fs.free().unwrap();
    let r = fetch(&mut g, &job, &full, old.to_str().unwrap());
    assert_eq!(r[0], "NULL", "{r:?}");
    assert_eq!(std::fs::read_to_string(fs.view().join("out")).unwrap(), "INPUT 0 OF FULLOUT\n");
    let stderr = std::fs::read_to_string(fs.view().join("old_stderr")).unwrap();
    assert!(stderr.starts_with("earlier text\n") && stderr.len() > "earlier text\n".len(), "appended: {stderr:?}");
    assert_eq!(names_in(&fs.view()), ["old_stderr", "out"]);
}

/// The log's disk full: the daemon goes on answering, says once on stderr
/// that it drops log lines, and once the log can be written again the log
/// says how many it dropped.
#[test]
fn with_its_log_disk_full_the_daemon_goes_on_and_says_once_that_it_drops_lines() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let Some(fs) = tmpfs(&logs, "64k") else { return };
    let mut g = gahp_inside(&fs, dir.path(), &logs.join("gahp.log"), &["--log-level", "debug"]);
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    fs.fill().unwrap();
    // The log's own last page has room still (a tmpfs counts pages): to
    // its end with empty lines, so the daemon's next line finds none.
    for name in names_in(&fs.view()).into_iter().filter(|n| n.starts_with("gahp.log")) {
        let mut log = std::fs::OpenOptions::new().append(true).open(fs.view().join(name)).unwrap();
        while std::io::Write::write(&mut log, b"\n").is_ok_and(|n| n == 1) {}
    }

    // Work that logs: a batch submitted, watched, fetched.
    let job = finished_job(&sim, &mut g, dir.path(), "fulllog");
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    assert_eq!(fetch(&mut g, &job, &out, "/dev/null")[0], "NULL");
    let said = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap();
    assert_eq!(said.matches("log lines are dropped").count(), 1, "said once: {said}");
    assert!(said.contains("No space left on device"), "{said}");

    // Room again: its next line (QUIT's "exiting") comes after the count.
    fs.free().unwrap();
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "fulllog".into() }), WAIT).unwrap(), ["NULL"]);
    g.close(WAIT).unwrap();
    let mut log = String::new();
    for name in names_in(&fs.view()) {
        log.push_str(&std::fs::read_to_string(fs.view().join(name)).unwrap());
    }
    assert!(log.contains("log lines were dropped here"), "{log}");
    assert!(log.contains("exiting"), "{log}");
    assert!(log.contains("boinc_gahp starting"), "the lines before the disk filled are kept");
    let said = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap();
    assert_eq!(said.matches("log lines are dropped").count(), 1, "still said once: {said}");
}

/// `state.sqlite3` garbled, or cut short: the daemon starts with an empty
/// one, the old file moved aside, a line on stderr and in the log saying
/// where; what was in it is not half-read.
#[test]
fn an_unreadable_state_database_is_moved_aside_and_the_daemon_starts() {
    let sim = Sim::start();
    for damage in ["garbled", "truncated"] {
        let dir = tempfile::tempdir().unwrap();
        let mut g = ready_gahp(&sim, dir.path());
        let name = format!("unreadable{damage}");
        let files = inputs(dir.path(), 40, &name);
        assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch(&name, &files))), WAIT).unwrap(), ["NULL"]);
        g.close(WAIT).unwrap();
        let db = dir.path().join("state/state.sqlite3");
        // Everything in the file itself, as after a checkpoint: the damage
        // is to the database, not to a log that would stand in for it.
        rusqlite::Connection::open(&db).unwrap().execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        let len = std::fs::metadata(&db).unwrap().len();
        assert!(len > 8192, "{len} bytes: pages to cut");
        match damage {
            "garbled" => {
                std::fs::write(&db, (0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect::<Vec<_>>()).unwrap()
            }
            _ => std::fs::OpenOptions::new().write(true).open(&db).unwrap().set_len(len / 2).unwrap(),
        }

        let stderr = dir.path().join("stderr.txt");
        let state = dir.path().join("state");
        let log = dir.path().join("gahp.log");
        let args = ["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap()];
        let exe = Path::new(env!("CARGO_BIN_EXE_boinc_gahp"));
        let mut g = GahpClient::spawn_with_stderr(exe, &args, &[], dir.path(), Stdio::from(std::fs::File::create(&stderr).unwrap()))
            .unwrap_or_else(|e| panic!("{damage}: the daemon starts: {e}"));
        g.command_line(b"ASYNC_MODE_ON").unwrap();
        assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
        // It works: the same batch again is found on the project by name.
        assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch(&name, &files))), WAIT).unwrap(), ["NULL"]);
        assert_eq!(sim.batches_named(&name).len(), 1, "{damage}: nothing made twice");

        let aside: Vec<PathBuf> =
            names_in(&state).into_iter().filter(|n| n.starts_with("state.sqlite3.unreadable-")).map(|n| state.join(n)).collect();
        assert!(!aside.is_empty(), "{damage}: moved aside: {:?}", names_in(&state));
        let said = std::fs::read_to_string(&stderr).unwrap();
        let line = format!("moved aside to {}", aside[0].display());
        assert!(said.contains(&line), "{damage}: stderr says where: {said}");
        assert!(log_text(dir.path()).contains(&line), "{damage}: so does the log");
        g.close(WAIT).unwrap();
    }
}
