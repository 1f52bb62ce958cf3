//! Benchmarks for the budgets in docs/design.md. Prints numbers; asserts nothing
//! about time (a busy machine must not fail a build). Run:
//!
//!     cargo bench --bench gahp_bench            # full sizes
//!     cargo bench --bench gahp_bench -- --quick # smaller, for a smoke run
//!     cargo bench --bench gahp_bench -- md5     # only the benchmarks whose name has `md5`
//!
//! Everything talks to a `boinc-sim` on 127.0.0.1 only.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gahp_protocol::gahp::{AsyncCommand, Command, InputFile, JobParams, JobSpec, ReqId, Request, SubmitBatch};
use gahp_testkit::GahpClient;
use gahp_testkit::SimProcess;

const WAIT: Duration = Duration::from_secs(600);

fn sim() -> SimProcess {
    sim_with(&[])
}

fn sim_with(args: &[&str]) -> SimProcess {
    SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), args).expect("boinc-sim starts")
}

/// A sim whose PHP limits are off, its config written in `dir`.
fn sim_without_php_limits(dir: &Path) -> SimProcess {
    let path = dir.join("sim.toml");
    std::fs::write(&path, "[quirks]\nupload_max_filesize = 0\npost_max_size = 0\n").unwrap();
    sim_with(&["--config", path.to_str().unwrap()])
}

fn daemon(dir: &Path, sim: &SimProcess) -> GahpClient {
    let state = dir.join("state");
    let log = dir.join("gahp.log");
    let mut g = GahpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_boinc_gahp")),
        &["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap()],
        &[],
        dir,
    )
    .expect("boinc_gahp starts");
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    g.command(&sim.select()).unwrap();
    g
}

fn cmd(id: u32, c: AsyncCommand) -> Request {
    Request::Command { reqid: ReqId(id), command: Command::Boinc(c) }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn batch(name: &str, jobs: usize, files: &[PathBuf]) -> SubmitBatch {
    SubmitBatch {
        batch_name: name.into(),
        app_name: "uppercase".into(),
        jobs: (0..jobs)
            .map(|i| JobSpec {
                name: format!("{name}#{i}.0"),
                args: vec!["--sleep-ms".into(), "1".into()],
                inputs: vec![InputFile { src: files[i % files.len()].clone(), dst_name: "in".into() }],
            })
            .collect(),
        params: JobParams::default(),
    }
}

fn write_files(dir: &Path, n: usize, size: usize, tag: &str) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{tag}_{i}.dat"));
            let mut data = format!("{tag} file {i}\n").into_bytes();
            data.resize(size.max(data.len()), b'x');
            std::fs::write(&p, data).unwrap();
            p
        })
        .collect()
}

/// The daemon's log lines about staging, as (hashed, cached) pairs.
fn staging_lines(dir: &Path) -> Vec<(u64, u64)> {
    let mut text = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("gahp.log") {
            text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    let field = |l: &str, k: &str| l.split(&format!("{k}=")).nth(1).and_then(|r| r.split_whitespace().next()).and_then(|v| v.parse().ok());
    text.lines().filter(|l| l.contains("staged input files")).filter_map(|l| Some((field(l, "hashed")?, field(l, "cached")?))).collect()
}

fn return_latency(n: u32) {
    let sim = sim();
    // A slow server: every RPC waits 2 s, so requests pile up in flight.
    sim.set_faults(serde_json::json!({"seed": 1, "rules": {"*": {"delay": 1.0, "delay_ms": 2000}}}));
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(dir.path(), &sim);
    let mut lat = Vec::with_capacity(n as usize);
    let t = Instant::now();
    for id in 2..n + 2 {
        let req = cmd(id, AsyncCommand::SetLease { batch: format!("b{id}"), lease_time: 1.0 });
        let one = Instant::now();
        g.submit_async(&req).unwrap();
        lat.push(one.elapsed());
    }
    let total = t.elapsed();
    lat.sort();
    println!(
        "return line, {n} requests in flight (server delays 2 s): p50 {:?}  p99 {:?}  max {:?}  ({:.0} requests/s)",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1],
        n as f64 / total.as_secs_f64()
    );
}

fn big_submit(jobs: usize) {
    // 100,000 jobs make a ~15 MB submit_batch request, more than a stock
    // PHP takes (post_max_size 8M): this project has no such limit.
    let dir = tempfile::tempdir().unwrap();
    let sim = sim_without_php_limits(dir.path());
    let files = write_files(&dir.path().join("in"), 100, 1024, "big");
    let b = batch("bigbatch", jobs, &files);
    let line = gahp_protocol::gahp::request::format(&cmd(2, AsyncCommand::Submit(b)));
    let mut parse = Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let r = gahp_protocol::gahp::request::parse(&line);
        parse = parse.min(t.elapsed());
        assert!(r.is_ok());
    }
    println!("BOINC_SUBMIT of {jobs} jobs: {:.1} MB line parsed in {:?} (best of 3)", line.len() as f64 / 1e6, parse);
    let mut g = daemon(dir.path(), &sim);
    let t = Instant::now();
    assert_eq!(g.command_line(&line).unwrap(), ["S"]);
    let ret = t.elapsed();
    let r = g.wait_result(2, WAIT).unwrap();
    let done = t.elapsed();
    assert_eq!(r, ["NULL"], "{r:?}");
    println!(
        "BOINC_SUBMIT of {jobs} jobs end to end: return line after {ret:?}, result after {:.2} s; daemon peak RSS {:.0} MB",
        done.as_secs_f64(),
        g.peak_rss_mib()
    );
    let t = Instant::now();
    let r = g.call(|id| cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["bigbatch".into()] }), WAIT).unwrap();
    assert_eq!(r[0], "NULL");
    println!("BOINC_QUERY_BATCHES over {} jobs: {:.3} s end to end (query_batch2 + parse + result line)", r[2], t.elapsed().as_secs_f64());
}

fn md5_throughput(mb: usize) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.bin");
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&p).unwrap();
        for _ in 0..mb {
            f.write_all(&chunk).unwrap();
        }
    }
    let best = |f: &dyn Fn()| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .min()
            .unwrap()
    };
    let ours = best(&|| {
        gahp_services::file_stager::md5_file(&p).unwrap();
    });
    let theirs = best(&|| {
        let out = std::process::Command::new("md5sum").arg(&p).output().expect("md5sum runs");
        assert!(out.status.success());
    });
    let rate = |d: Duration| mb as f64 / d.as_secs_f64();
    println!(
        "MD5 of {mb} MiB (page cache warm, one core): ours {:.0} MiB/s, md5sum {:.0} MiB/s, ratio {:.2}",
        rate(ours),
        rate(theirs),
        rate(ours) / rate(theirs)
    );
}

fn warm_cache_and_shared_inputs(jobs: usize, nfiles: usize, size: usize) {
    let sim = sim();
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(&dir.path().join("in"), nfiles, size, "shared");
    let mut g = daemon(dir.path(), &sim);
    let t = Instant::now();
    let r = g.call(|id| cmd(id, AsyncCommand::Submit(batch("shared1", jobs, &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    let first = t.elapsed();
    println!(
        "{jobs} jobs sharing {nfiles} input files of {} KiB: {:.2} s; query_files calls {}, upload_files calls {}; staging {:?} (hashed, cached)",
        size / 1024,
        first.as_secs_f64(),
        sim.calls("job_file.php:query_files"),
        sim.calls("job_file.php:upload_files"),
        staging_lines(dir.path()).last()
    );
    let t = Instant::now();
    let r = g.call(|id| cmd(id, AsyncCommand::Submit(batch("shared2", jobs, &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    println!(
        "warm re-submit of the same unchanged files: {:.2} s; staging {:?} (hashed, cached); upload_files calls now {}",
        t.elapsed().as_secs_f64(),
        staging_lines(dir.path()).last(),
        sim.calls("job_file.php:upload_files")
    );
}

fn query_storm(n: u32) {
    let sim = sim();
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(&dir.path().join("in"), 1, 64, "storm");
    let mut g = daemon(dir.path(), &sim);
    assert_eq!(g.call(|id| cmd(id, AsyncCommand::Submit(batch("storm", 10, &files))), WAIT).unwrap(), ["NULL"]);
    let before = sim.calls("submit_rpc_handler.php:query_batch2");
    let t = Instant::now();
    for id in 1000..1000 + n {
        g.submit_async(&cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["storm".into()] })).unwrap();
    }
    for id in 1000..1000 + n {
        g.wait_result(id, WAIT).unwrap();
    }
    println!(
        "{n} identical BOINC_QUERY_BATCHES: {} query_batch2 RPC(s), all answered in {:.2} s",
        sim.calls("submit_rpc_handler.php:query_batch2") - before,
        t.elapsed().as_secs_f64()
    );
}

/// `n` concurrent BOINC_QUERY_BATCHES over one `jobs`-job batch, their
/// results left queued until all are in: the daemon's peak memory.
fn storm_memory(jobs: usize, n: u32) {
    let sim = sim();
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(&dir.path().join("in"), 100, 64, "stormmem");
    let mut g = daemon(dir.path(), &sim);
    assert_eq!(g.call(|id| cmd(id, AsyncCommand::Submit(batch("stormmem", jobs, &files))), WAIT).unwrap(), ["NULL"]);
    let after_submit = g.peak_rss_mib();
    let t = Instant::now();
    for id in 5000..5000 + n {
        g.submit_async(&cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["stormmem".into()] })).unwrap();
    }
    // Let every result queue up before the first RESULTS drains them.
    std::thread::sleep(Duration::from_secs(3));
    let mut bytes = 0;
    for id in 5000..5000 + n {
        let r = g.wait_result(id, WAIT).unwrap();
        assert_eq!(r[0], "NULL");
        bytes += r.iter().map(|a| a.len() + 1).sum::<usize>();
    }
    println!(
        "{n} concurrent BOINC_QUERY_BATCHES over a {jobs}-job batch: answered in {:.2} s ({:.1} MB of result lines); \
         daemon peak RSS {after_submit:.0} MB after the submit, {:.0} MB after the storm",
        t.elapsed().as_secs_f64(),
        bytes as f64 / 1e6,
        g.peak_rss_mib()
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // Other words select benchmarks by name (cargo's own flags are skipped).
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let run = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    println!(
        "machine: {} cores, {cpu}; {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        if quick { "quick sizes" } else { "full sizes" }
    );
    if run("return_latency") {
        return_latency(if quick { 1_000 } else { 10_000 });
    }
    if run("big_submit") {
        big_submit(if quick { 10_000 } else { 100_000 });
    }
    if run("md5") {
        md5_throughput(if quick { 64 } else { 512 });
    }
    if run("shared_inputs") {
        warm_cache_and_shared_inputs(if quick { 1_000 } else { 10_000 }, 100, if quick { 64 << 10 } else { 1 << 20 });
    }
    if run("query_storm") {
        query_storm(if quick { 200 } else { 1_000 });
    }
    if run("storm_memory") {
        storm_memory(if quick { 1_000 } else { 10_000 }, 100);
    }
}
