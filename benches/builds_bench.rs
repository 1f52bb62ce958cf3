//! Builds of `boinc_gahp` side by side in one run (the packages' portable
//! zig build against a plain `cargo build`, say): BOINC_PING one at a
//! time and all at once, and a BOINC_SUBMIT, against one `boinc-sim` on
//! 127.0.0.1. The builds take turns round by round, so that a busy machine
//! weighs on each alike; medians are printed with each binary's size.
//! Prints numbers; asserts only that every command succeeded.
//!
//!     GAHP_BENCH_BUILDS="native=path/to/boinc_gahp zig=path/to/other" \
//!         cargo bench --bench builds_bench [-- --quick]
//!
//! Without GAHP_BENCH_BUILDS it runs this build's `boinc_gahp` alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gahp_protocol::gahp::{AsyncCommand, Command, InputFile, JobParams, JobSpec, ReqId, Request, SubmitBatch};
use gahp_testkit::{GahpClient, SimProcess};

const WAIT: Duration = Duration::from_secs(600);

fn cmd(id: u32, c: AsyncCommand) -> Request {
    Request::Command { reqid: ReqId(id), command: Command::Boinc(c) }
}

/// One round of one build: (pings one at a time, pings at once, submit) in seconds, peak RSS.
fn round(exe: &Path, sim: &SimProcess, dir: &Path, tag: &str, pings: u32, jobs: usize) -> ([f64; 3], f64) {
    std::fs::create_dir_all(dir).unwrap();
    let state = dir.join("state");
    let log = dir.join("gahp.log");
    let mut g = GahpClient::spawn(exe, &["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap()], &[], dir)
        .unwrap_or_else(|e| panic!("{} starts: {e}", exe.display()));
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);

    let t = Instant::now();
    for _ in 0..pings {
        assert_eq!(g.call(|id| cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);
    }
    let one_at_a_time = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let first = g.reqid();
    for id in first..first + pings {
        g.submit_async(&cmd(id, AsyncCommand::Ping)).unwrap();
    }
    for id in first..first + pings {
        assert_eq!(g.wait_result(id, WAIT).unwrap(), ["NULL"]);
    }
    g.set_next_reqid(first + pings);
    let at_once = t.elapsed().as_secs_f64();

    // Inputs of this round's own content: nothing is on the project yet.
    let files: Vec<PathBuf> = (0..20)
        .map(|i| {
            let p = dir.join(format!("in{i}.txt"));
            std::fs::write(&p, format!("{tag} input {i}\n").repeat(64)).unwrap();
            p
        })
        .collect();
    let b = SubmitBatch {
        batch_name: format!("builds_{tag}"),
        app_name: "uppercase".into(),
        jobs: (0..jobs)
            .map(|i| JobSpec {
                name: format!("builds_{tag}#{i}.0"),
                args: Vec::new(),
                inputs: vec![InputFile { src: files[i % files.len()].clone(), dst_name: "in".into() }],
            })
            .collect(),
        params: JobParams::default(),
    };
    let t = Instant::now();
    assert_eq!(g.call(|id| cmd(id, AsyncCommand::Submit(b)), WAIT).unwrap(), ["NULL"]);
    let submit = t.elapsed().as_secs_f64();
    let rss = g.peak_rss_mib();
    g.close(Duration::from_secs(30)).unwrap();
    ([one_at_a_time, at_once, submit], rss)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let builds: Vec<(String, PathBuf)> = match std::env::var("GAHP_BENCH_BUILDS") {
        Ok(s) => s
            .split_whitespace()
            .map(|w| {
                let (name, path) = w.split_once('=').expect("GAHP_BENCH_BUILDS: name=path words");
                (name.to_string(), PathBuf::from(path))
            })
            .collect(),
        Err(_) => vec![("this".into(), PathBuf::from(env!("CARGO_BIN_EXE_boinc_gahp")))],
    };
    let (rounds, pings, jobs) = if quick { (3, 100, 1_000) } else { (5, 500, 10_000) };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    println!(
        "machine: {} cores, {cpu}; {rounds} rounds of {pings} pings and a {jobs}-job submit per build, taking turns",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    for (name, path) in &builds {
        let size = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).len();
        println!("{name:>8}: {} ({:.2} MB)", path.display(), size as f64 / 1e6);
    }

    let sim = SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), &[]).expect("boinc-sim starts");
    let dir = tempfile::tempdir().unwrap();
    let mut times: Vec<[Vec<f64>; 3]> = builds.iter().map(|_| Default::default()).collect();
    let mut rss = vec![0f64; builds.len()];
    for r in 0..rounds {
        for (i, (name, path)) in builds.iter().enumerate() {
            let tag = format!("{name}{r}");
            let (t, peak) = round(path, &sim, &dir.path().join(&tag), &tag, pings, jobs);
            for (k, v) in t.into_iter().enumerate() {
                times[i][k].push(v);
            }
            rss[i] = rss[i].max(peak);
        }
    }
    for (i, (name, _)) in builds.iter().enumerate() {
        let [a, b, c] = times[i].clone();
        println!(
            "{name:>8}: {pings} BOINC_PING one at a time {:.3} s ({:.2} ms each), at once {:.3} s; BOINC_SUBMIT of {jobs} jobs {:.2} s; peak RSS {:.1} MB (medians of {rounds})",
            median(a.clone()),
            median(a) * 1e3 / pings as f64,
            median(b),
            median(c),
            rss[i]
        );
    }
}
