//! Work sequences at scale (issue 10): many concurrent sequences of the
//! sim's `stepper` app through the real daemon, with a group of hosts that
//! stall every step they take, so steps are relocated. Prints numbers;
//! asserts nothing about time. Run:
//!
//!     cargo bench --bench sequence_bench            # 1,000 sequences of 10 steps
//!     cargo bench --bench sequence_bench -- --quick # 100 sequences
//!
//! Everything talks to a `boinc-sim` on 127.0.0.1 only.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use gahp_protocol::gahp::sequence_commands::{CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use gahp_protocol::gahp::{Command, InputFile, ReqId, Request};
use gahp_testkit::{GahpClient, SimProcess};

const STEPS: u32 = 10;
const POLL_MS: u64 = 1000;
const MAX_STEP_TIME: u32 = 10;
/// The whole run may take this long before the bench gives up.
const LIMIT: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(600);

/// 300 hosts that take 0.1 s a step, and 30 listed first (so they get work
/// whenever free) that take 40 s, four times the maximum step time.
const SIM_CONFIG: &str = "\
[[hosts]]
name = \"stalled\"
count = 30
flops = 1e10
straggler_rate = 1.0
straggler_factor = 400.0

[[hosts]]
name = \"host\"
count = 300
flops = 1e10
";

fn seq(id: u32, command: SequenceCommand) -> Request {
    Request::Command { reqid: ReqId(id), command: Command::Sequence(command) }
}

/// Sends one command per sequence, then collects every result.
fn each(g: &mut GahpClient, names: &[String], make: impl Fn(&str) -> SequenceCommand) -> Vec<Vec<String>> {
    let ids: Vec<u32> = names
        .iter()
        .map(|n| {
            let id = g.reqid();
            g.submit_async(&seq(id, make(n))).unwrap();
            id
        })
        .collect();
    ids.into_iter().map(|id| g.wait_result(id, WAIT).unwrap()).collect()
}

/// The `since_deadline_ms` of every "replacement of a late step submitted"
/// line of the daemon's log.
fn replacement_latencies(dir: &Path) -> Vec<f64> {
    let mut text = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("gahp.log") {
            text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    text.lines()
        .filter(|l| l.contains("replacement of a late step submitted"))
        .filter_map(|l| l.split("since_deadline_ms=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn run(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sim.toml");
    std::fs::write(&config, SIM_CONFIG).unwrap();
    let sim =
        SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), &["--config", config.to_str().unwrap()]).expect("boinc-sim starts");
    let gahp_config = dir.path().join("gahp.toml");
    std::fs::write(&gahp_config, format!("sequence_poll_ms = {POLL_MS}\n")).unwrap();
    let (state, log) = (dir.path().join("state"), dir.path().join("gahp.log"));
    let mut g = GahpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_boinc_gahp")),
        &["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap(), "--config", gahp_config.to_str().unwrap()],
        &[],
        dir.path(),
    )
    .expect("boinc_gahp starts");
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    g.command(&sim.select()).unwrap();

    let inputs = dir.path().join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    let state0 = inputs.join("state0");
    std::fs::write(&state0, b"").unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("seq{i:04}")).collect();
    for name in &names {
        std::fs::write(inputs.join(name), format!("extra of {name}\n")).unwrap();
    }

    let t0 = Instant::now();
    let created = each(&mut g, &names, |name| {
        SequenceCommand::Create(CreateSequence {
            name: name.into(),
            app_name: "stepper".into(),
            steps: STEPS,
            max_step_time: MAX_STEP_TIME,
            max_attempts: 100,
            end_marker: None,
            state_files: vec![InputFile { src: state0.clone(), dst_name: "state".into() }],
            args: vec![],
            inputs: vec![InputFile { src: inputs.join(name), dst_name: "extra".into() }],
        })
    });
    assert!(created.iter().all(|r| r == &["NULL"]), "every create succeeds");
    let create_time = t0.elapsed();

    let mut running = names.clone();
    let mut last = Vec::new();
    while !running.is_empty() {
        assert!(t0.elapsed() < LIMIT, "{} sequences still running after {LIMIT:?}", running.len());
        std::thread::sleep(Duration::from_millis(500));
        let replies = each(&mut g, &running, |name| SequenceCommand::Query { name: name.into() });
        let mut still = Vec::new();
        for (name, r) in running.iter().zip(replies) {
            assert_eq!(r[0], "NULL", "{name}: {r:?}");
            if r[1] == "RUNNING" {
                still.push(name.clone());
            } else {
                last.push((name.clone(), r));
            }
        }
        running = still;
    }
    let makespan = t0.elapsed();
    let peak = g.peak_rss_mib();

    let failed = last.iter().filter(|(_, r)| r[1] != "COMPLETED").count();
    let relocations: u64 = last.iter().map(|(_, r)| r[6].parse::<u64>().unwrap()).sum();
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for (_, r) in &last {
        let dead: usize = r[9].parse().unwrap();
        for d in r[10..10 + 5 * dead].chunks(5) {
            *reasons.entry(d[2].clone()).or_default() += 1;
        }
    }
    // Every final state, against stepper_next computed here.
    let out = dir.path().join("out");
    let fetched = each(&mut g, &names, |name| {
        let d = out.join(name);
        std::fs::create_dir_all(&d).unwrap();
        SequenceCommand::Fetch(FetchSequence { name: name.into(), step: StepSelector::Latest, dir: d })
    });
    let right = names
        .iter()
        .zip(&fetched)
        .filter(|(name, r)| {
            let extra = format!("extra of {name}\n");
            let mut expected = String::new();
            for _ in 0..STEPS {
                expected = boinc_sim::apps::stepper_next(&expected, extra.as_bytes()).unwrap();
            }
            r[0] == "NULL" && std::fs::read_to_string(out.join(name).join("state")).is_ok_and(|s| s == expected)
        })
        .count();

    let counts: BTreeMap<String, u64> = serde_json::from_value(sim.state()["rpc_counts"].clone()).unwrap();
    let rpcs: u64 = counts.values().sum();
    let steps = (n as u64) * u64::from(STEPS);
    let mut lat = replacement_latencies(dir.path());
    lat.sort_by(f64::total_cmp);

    println!("{n} sequences of {STEPS} steps, 300 hosts + 30 that stall every step (40 s, max step time {MAX_STEP_TIME} s), sequence_poll_ms {POLL_MS}");
    println!("  creates answered in {:.2} s; makespan {:.1} s", create_time.as_secs_f64(), makespan.as_secs_f64());
    println!("  completed {} of {n}, final state right in {right}; failed {failed}", n - failed);
    println!("  relocations {relocations} ({reasons:?})");
    println!("  RPCs {rpcs}: {:.2} per step", rpcs as f64 / steps as f64);
    for (endpoint, c) in &counts {
        println!("    {endpoint}: {c} ({:.2} per step)", *c as f64 / steps as f64);
    }
    println!("  daemon peak RSS {peak:.0} MB");
    println!(
        "  missed deadline -> replacement submitted ({} replacements): p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms (target: under {POLL_MS} ms)",
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.95),
        lat.last().copied().unwrap_or(f64::NAN),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let quick = args.iter().any(|a| a == "--quick");
    run(if quick { 100 } else { 1_000 });
}
