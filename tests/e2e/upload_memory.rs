//! Inputs are streamed from disk when they are uploaded: the daemon's peak
//! memory stays far below the size of the file it sends. The real daemon
//! over pipes, boinc-sim on loopback.

use crate::common::*;

const SIZE: u64 = 512 << 20;

#[test]
fn a_512_mib_input_is_uploaded_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    // A project whose PHP takes a file of that size in one request.
    let sim = Sim::start_without_php_limits(dir.path());
    // The hosts lose what they get: the job is not run on 512 MiB.
    for id in 1..=4 {
        sim.set_host(&format!("{{\"id\": {id}, \"lost_rate\": 1.0}}"));
    }
    let big = dir.path().join("big.in");
    // Sparse: nothing is written here, all of it is read and sent.
    std::fs::File::create(&big).unwrap().set_len(SIZE).unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let before = g.peak_rss_mib();
    let batch = uppercase_batch("big", std::slice::from_ref(&big));
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    let peak = g.peak_rss_mib();
    let stored: Vec<u64> = sim.state()["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["batches"].as_array().is_some_and(|b| !b.is_empty()))
        .filter_map(|f| f["size"].as_u64())
        .collect();
    assert_eq!(stored, [SIZE], "the project holds the whole file");
    println!("upload of {} MiB: daemon peak RSS {peak:.1} MiB (before the submit {before:.1} MiB)", SIZE >> 20);
    assert!(peak < 64.0, "peak RSS {peak:.1} MiB for a {} MiB upload", SIZE >> 20);
}
