//! Uploads within PHP's limits (issue 19): calls bounded by bytes as well as
//! by count, a budget learnt from a refusal, and a file no call can carry
//! reported with its name, size and the PHP setting. The real daemon over
//! pipes, boinc-sim with PHP's stock limits (2M per file, 8M per body, 20
//! files per call) on loopback.

use crate::common::*;
use std::path::{Path, PathBuf};

/// Writes `n` files of `size` bytes, each with its own content.
fn big_inputs(dir: &Path, n: usize, size: usize, tag: &str) -> Vec<PathBuf> {
    let d = dir.join("inputs");
    std::fs::create_dir_all(&d).unwrap();
    (0..n)
        .map(|i| {
            let p = d.join(format!("{tag}_{i}.txt"));
            let line = format!("input {i} of {tag}\n");
            std::fs::write(&p, line.as_bytes().iter().copied().cycle().take(size).collect::<Vec<u8>>()).unwrap();
            p
        })
        .collect()
}

/// The project's files that belong to a batch, as (size, batch ids).
fn stored(sim: &Sim) -> Vec<(u64, Vec<i64>)> {
    sim.state()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["size"].as_u64().unwrap(), f["batches"].as_array().unwrap().iter().map(|b| b.as_i64().unwrap()).collect()))
        .collect()
}

fn batch_id(sim: &Sim, name: &str) -> i64 {
    let found = sim.batches_named(name);
    assert_eq!(found.len(), 1, "one batch named {name}: {found:?}");
    found[0]["id"].as_i64().unwrap()
}

/// Files of `size` bytes held by the project, each tied to `batch` once.
fn held_once(sim: &Sim, size: u64, batch: i64) -> usize {
    let files = stored(sim);
    let mine: Vec<_> = files.iter().filter(|(s, b)| *s == size && b.contains(&batch)).collect();
    for (_, b) in &mine {
        assert_eq!(b.iter().filter(|x| **x == batch).count(), 1, "a file tied to batch {batch} twice: {files:?}");
    }
    mine.len()
}

const MIB: usize = 1 << 20;

#[test]
fn five_new_inputs_of_1_9_mib_go_up_in_several_calls() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start();
    let mut g = ready_gahp(&sim, dir.path());
    let size = 19 * MIB / 10;
    let files = big_inputs(dir.path(), 5, size, "nearly2");
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("nearly2", &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    // 9.5 MiB in all: more than one 8 MiB body, so two calls; none refused.
    assert_eq!(sim.calls("job_file.php:upload_files"), 2);
    assert_eq!(sim.calls("job_file.php:unparsable"), 0, "no body over post_max_size");
    let b = batch_id(&sim, "nearly2");
    assert_eq!(held_once(&sim, size as u64, b), 5);
    assert_eq!(sim.jobs_of(b).len(), 5);
}

#[test]
fn a_3_mib_input_fails_naming_the_file_its_size_and_upload_max_filesize() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start();
    let mut g = ready_gahp(&sim, dir.path());
    let mut files = big_inputs(dir.path(), 2, 1000, "small");
    let big = big_inputs(&dir.path().join("big"), 1, 3 * MIB, "big").remove(0);
    files.insert(1, big.clone());
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("toobig", &files))), WAIT).unwrap();
    assert_eq!(r.len(), 1, "{r:?}");
    let msg = &r[0];
    assert!(msg.starts_with("error processing input files: -1 input file "), "{msg}");
    assert!(msg.contains(&big.display().to_string()) && msg.contains("(3145728 bytes)"), "{msg}");
    assert!(msg.contains("upload_max_filesize"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
    // Refused at once, nothing of it stored; the batch has no jobs.
    assert_eq!(sim.calls("job_file.php:upload_files"), 1);
    assert!(stored(&sim).iter().all(|(s, _)| *s != 3 * MIB as u64));
    assert!(sim.jobs_of(batch_id(&sim, "toobig")).is_empty());
}

#[test]
fn a_smaller_post_max_size_is_learnt_and_calls_are_split_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    // Smaller than the daemon's default budget (8 MiB).
    let sim = Sim::start_config(dir.path(), "[quirks]\npost_max_size = 3145728\n");
    let mut g = ready_gahp(&sim, dir.path());
    let files = big_inputs(dir.path(), 5, MIB, "first");
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("first", &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    // One body of 5 MiB dropped; then calls of at most 2 files.
    assert_eq!(sim.calls("job_file.php:unparsable"), 1, "one refused call");
    let first_calls = sim.calls("job_file.php:upload_files");
    assert_eq!(first_calls, 3, "5 files in calls of 2, 2, 1");
    let b = batch_id(&sim, "first");
    assert_eq!(held_once(&sim, MIB as u64, b), 5);
    assert_eq!(sim.jobs_of(b).len(), 5);

    // The learnt budget holds for the next submit, and after a restart.
    let files = big_inputs(dir.path(), 5, MIB, "second");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("second", &files))), WAIT).unwrap(), ["NULL"]);
    g.close(WAIT).unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let files = big_inputs(dir.path(), 5, MIB, "third");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("third", &files))), WAIT).unwrap(), ["NULL"]);
    assert_eq!(sim.calls("job_file.php:unparsable"), 1, "no call refused after the first");
    assert_eq!(sim.calls("job_file.php:upload_files"), first_calls + 6);
    for name in ["second", "third"] {
        assert_eq!(held_once(&sim, MIB as u64, batch_id(&sim, name)), 5);
    }
}

#[test]
fn a_submit_batch_over_post_max_size_fails_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // 10,000 jobs make a submit_batch request of about 1.5 MB.
    let sim = Sim::start_config(dir.path(), "[quirks]\npost_max_size = 1048576\n");
    let mut g = ready_gahp(&sim, dir.path());
    let files = big_inputs(dir.path(), 1, 100, "many");
    let mut batch = uppercase_batch("many", &files);
    let job = batch.jobs[0].clone();
    batch.jobs = (0..10_000).map(|i| JobSpec { name: format!("many#{i}.0"), ..job.clone() }).collect();
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap();
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("error submitting jobs: -1 the submit_batch request of 10000 jobs ("), "{}", r[0]);
    assert!(r[0].contains("post_max_size") && r[0].contains("submit fewer jobs per batch"), "{}", r[0]);
    assert!(sim.jobs_of(batch_id(&sim, "many")).is_empty());
}
