//! Inputs are streamed from disk when they are uploaded: the daemon's peak
//! memory stays far below the size of the file it sends. The real daemon
//! over pipes, boinc-sim on loopback.

mod common;
use common::*;

const SIZE: u64 = 512 << 20;

/// The daemon's peak resident set (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/<pid>/status");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[test]
fn a_512_mib_input_is_uploaded_in_bounded_memory() {
    let sim = Sim::start();
    // The hosts lose what they get: the job is not run on 512 MiB.
    for id in 1..=4 {
        sim.set_host(&format!("{{\"id\": {id}, \"lost_rate\": 1.0}}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.in");
    // Sparse: nothing is written here, all of it is read and sent.
    std::fs::File::create(&big).unwrap().set_len(SIZE).unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let before = peak_rss(g.pid());
    let batch = uppercase_batch("big", std::slice::from_ref(&big));
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    let peak = peak_rss(g.pid());
    let stored: Vec<u64> = sim.state()["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["batches"].as_array().is_some_and(|b| !b.is_empty()))
        .filter_map(|f| f["size"].as_u64())
        .collect();
    assert_eq!(stored, [SIZE], "the project holds the whole file");
    println!("upload of {} MiB: daemon peak RSS {:.1} MiB (before the submit {:.1} MiB)", SIZE >> 20, mib(peak), mib(before));
    assert!(peak < 64 << 20, "peak RSS {:.1} MiB for a {} MiB upload", mib(peak), SIZE >> 20);
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
