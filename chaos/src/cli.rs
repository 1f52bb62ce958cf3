//! The `gahp-chaos` command line: a sweep of seeded runs, or a soak.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use gahp_protocol::Authenticator;
use gahp_testkit::SimProcess;

use crate::http1::Upstream;
use crate::plan::Profile;
use crate::run::{RunReport, RunSpec};
use crate::truth::{Source, Truth};
use crate::{run, soak};

#[derive(Debug, Parser)]
#[command(name = "gahp-chaos", about = "Chaos testing of boinc_gahp against a BOINC project")]
pub struct Cli {
    /// The project's URL (http or https); batches are created with the
    /// account of --auth-file and retired at the end.
    #[arg(long, required_unless_present = "sim", conflicts_with = "sim")]
    url: Option<String>,
    /// A file whose first word is the account's authenticator.
    #[arg(long, required_unless_present = "sim", conflicts_with = "sim")]
    auth_file: Option<PathBuf>,
    /// Start a simulated project (boinc-sim) for each run instead.
    #[arg(long)]
    sim: bool,
    /// The first run's seed; run k uses seed + k.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Batches per run.
    #[arg(long, default_value_t = 30)]
    batches: usize,
    #[arg(long, value_enum, default_value_t = Profile::Default)]
    profile: Profile,
    /// No kill -9 of the daemon.
    #[arg(long)]
    no_kill: bool,
    /// The daemon (default: boinc_gahp beside this program).
    #[arg(long)]
    gahp: Option<PathBuf>,
    /// The simulated project's binary (default: boinc-sim beside this program).
    #[arg(long)]
    sim_exe: Option<PathBuf>,
    /// Extra CA certificates for an https project (PEM).
    #[arg(long)]
    ca_file: Vec<PathBuf>,
    /// Where runs keep their logs, decisions and outputs.
    #[arg(long, default_value = "gahp-chaos-runs")]
    work_dir: PathBuf,
    /// The JSON report.
    #[arg(long, default_value = "gahp-chaos-report.json")]
    report: PathBuf,
    /// How long a run waits for the project to run its jobs (seconds).
    #[arg(long, default_value_t = 600)]
    finish_wait: u64,
    /// Soak mode (needs --sim): one daemon under a steady workload for this
    /// many minutes, its memory, descriptors, state database and logs
    /// sampled; the verdict says whether any of them kept growing.
    #[arg(long, requires = "sim", value_name = "MINUTES")]
    soak: Option<f64>,
    /// Soak mode: seconds between two samples.
    #[arg(long, default_value_t = 30.0)]
    sample_secs: f64,
    /// Soak mode: sim seconds per real second; the daemon's intervals are
    /// its defaults divided by it (720: 10 days in 20 minutes).
    #[arg(long, default_value_t = 720.0)]
    time_scale: f64,
    /// Soak mode: BOINC_* batches, and as many BLAH_* jobs, kept in flight.
    #[arg(long, default_value_t = 4)]
    in_flight: usize,
    /// Soak mode: the dialects of the workload (one alone shows which side
    /// a growth comes from).
    #[arg(long, value_enum, default_value_t = soak::Dialects::Both)]
    soak_dialect: soak::Dialects,
}

/// How much faster than real time the simulated project runs.
const SIM_TIME_SCALE: f64 = 100.0;

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join(name))).unwrap_or_else(|| PathBuf::from(name))
}

/// The command that replays one seed.
fn replay_command(cli: &Cli, seed: u64) -> String {
    let mut cmd = String::from("gahp-chaos");
    if cli.sim {
        cmd.push_str(" --sim");
    } else {
        cmd.push_str(&format!(
            " --url {} --auth-file {}",
            cli.url.as_deref().unwrap_or(""),
            cli.auth_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
        ));
    }
    let profile = clap::ValueEnum::to_possible_value(&cli.profile).map(|v| v.get_name().to_string()).unwrap_or_default();
    cmd.push_str(&format!(" --seed {seed} --runs 1 --batches {} --profile {profile}", cli.batches));
    if cli.no_kill {
        cmd.push_str(" --no-kill");
    }
    cmd
}

fn print_run(r: &RunReport, replay: &str) {
    println!("seed {} ({:.0} s, {} RPCs through the proxy)", r.seed, r.seconds, r.rpcs);
    println!("  {:<22} {:>6}", "batches / jobs", format!("{}/{}", r.batches, r.jobs));
    let rows: [(&str, String); 14] = [
        ("submits ok / errors", format!("{}/{}", r.submits_ok, r.submit_errors)),
        ("resubmits", r.resubmits.to_string()),
        ("queries", r.queries.to_string()),
        ("fetches ok / errors", format!("{}/{}", r.fetches_ok, r.fetch_errors)),
        ("aborts", r.aborts.to_string()),
        ("leases", r.leases.to_string()),
        ("retired", r.retired.to_string()),
        ("BLAH jobs", r.blah_jobs.to_string()),
        ("batches via the pool", r.pool_batches.to_string()),
        ("sequences / on the pool", format!("{}/{}", r.sequences, r.pool_sequences)),
        ("sequence steps / relocations", format!("{}/{}", r.sequence_steps, r.relocations)),
        ("kill -9", if r.kills.is_empty() { "-".into() } else { r.kills.join(",") }),
        ("restarts", r.restarts.to_string()),
        ("violations", r.violations.len().to_string()),
    ];
    for (k, v) in rows {
        println!("  {k:<22} {v:>6}");
    }
    let faulted: usize = r.faults.iter().filter(|(k, _)| *k != "none").map(|(_, v)| v).sum();
    let faults: Vec<String> = r.faults.iter().filter(|(k, _)| *k != "none").map(|(k, v)| format!("{k} {v}")).collect();
    println!("  {:<22} {:>6}  {}", "faults injected", faulted, faults.join(", "));
    if !r.hostile_kinds.is_empty() {
        let kinds: Vec<String> = r.hostile_kinds.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("  {:<22} {:>6}  {}", "jobs with hostile zips", r.hostile_jobs, kinds.join(", "));
        println!("  {:<22} {:>6.0}  (bound {} MiB)", "daemon peak RSS MiB", r.peak_rss_mib, run::RSS_BOUND_MIB);
    }
    for s in &r.skipped {
        println!("  skipped: {s}");
    }
    for v in &r.violations {
        println!("  VIOLATION: {v}");
    }
    if !r.violations.is_empty() {
        println!("  replay: {replay}");
    }
}

pub fn cli_main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.soak {
        Some(minutes) => soak(&cli, minutes),
        None => sweep(&cli),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("gahp-chaos: {e}");
            ExitCode::from(2)
        }
    }
}

fn soak(cli: &Cli, minutes: f64) -> Result<bool, String> {
    if !(minutes.is_finite() && minutes > 0.0 && minutes <= 24.0 * 60.0) {
        return Err(format!("--soak {minutes}: minutes, more than 0 and at most a day"));
    }
    if !(cli.time_scale.is_finite() && cli.time_scale >= 1.0 && cli.sample_secs.is_finite() && cli.sample_secs >= 1.0) {
        return Err("--time-scale and --sample-secs: at least 1".into());
    }
    std::fs::create_dir_all(&cli.work_dir).map_err(|e| format!("{}: {e}", cli.work_dir.display()))?;
    let work_dir = cli.work_dir.canonicalize().map_err(|e| e.to_string())?;
    let spec = soak::SoakSpec {
        gahp_exe: cli.gahp.clone().unwrap_or_else(|| sibling("boinc_gahp")),
        sim_exe: cli.sim_exe.clone().unwrap_or_else(|| sibling("boinc-sim")),
        dir: work_dir.join(format!("soak-{}", cli.seed)),
        duration: Duration::from_secs_f64(minutes * 60.0),
        sample_every: Duration::from_secs_f64(cli.sample_secs),
        time_scale: cli.time_scale,
        seed: cli.seed,
        in_flight: cli.in_flight.max(1),
        dialects: cli.soak_dialect,
    };
    soak::soak(&spec)
}

fn sweep(cli: &Cli) -> Result<bool, String> {
    let gahp = cli.gahp.clone().unwrap_or_else(|| sibling("boinc_gahp"));
    let sim_exe = cli.sim_exe.clone().unwrap_or_else(|| sibling("boinc-sim"));
    std::fs::create_dir_all(&cli.work_dir).map_err(|e| format!("{}: {e}", cli.work_dir.display()))?;
    let work_dir = cli.work_dir.canonicalize().map_err(|e| e.to_string())?;
    // Batch names of this invocation never meet an earlier one's.
    let tag = format!("{:x}", (run::now_secs() as u64) % 0x100_0000);
    let mut reports = Vec::new();
    let mut replays = Vec::new();
    for k in 0..cli.runs {
        let seed = cli.seed + k;
        let dir = work_dir.join(format!("seed-{seed}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        // A simulated project of its own per run, jobs 100x faster.
        let time_scale = if cli.sim { SIM_TIME_SCALE } else { 1.0 };
        let sim = if cli.sim {
            let mut args = vec!["--time-scale".to_string(), SIM_TIME_SCALE.to_string()];
            if cli.profile == Profile::HostileHostsQuorum {
                // Three hosts and a runner app with a quorum of 2.
                let config = dir.join("sim.toml");
                std::fs::write(&config, run::QUORUM_SIM_CONFIG).map_err(|e| e.to_string())?;
                args.extend(["--config".to_string(), config.display().to_string()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Some(SimProcess::start(&sim_exe, &args).map_err(|e| format!("starting {}: {e}", sim_exe.display()))?)
        } else {
            None
        };
        let (url, auth, auth_file, source) = match &sim {
            Some(s) => {
                let f = dir.join("sim.auth");
                std::fs::write(&f, format!("{}\n", s.auth)).map_err(|e| e.to_string())?;
                (s.url.clone(), Authenticator::new(s.auth.clone()), f, Source::Sim)
            }
            None => {
                let f = cli.auth_file.clone().ok_or("--auth-file is needed")?;
                let f = f.canonicalize().map_err(|e| format!("{}: {e}", f.display()))?;
                (
                    cli.url.clone().ok_or("--url is needed")?,
                    gahp_services::config::read_authenticator_file(&f).map_err(|e| e.to_string())?,
                    f,
                    Source::Rpc,
                )
            }
        };
        let upstream = Upstream::parse(&url, &cli.ca_file).map_err(|e| e.to_string())?;
        let truth = Truth::new(upstream.clone(), auth.clone(), source).map_err(|e| e.to_string())?;
        let spec = RunSpec {
            seed,
            profile: cli.profile,
            batches: cli.batches,
            kill: !cli.no_kill,
            gahp_exe: gahp.clone(),
            dir: dir.clone(),
            tag: tag.clone(),
            upstream,
            auth,
            auth_file,
            truth: &truth,
            finish_wait: Duration::from_secs(cli.finish_wait),
            time_scale,
        };
        let report = run::run(&spec).unwrap_or_else(|e| RunReport {
            seed,
            dir: dir.clone(),
            violations: vec![format!("the run could not be carried out: {e}")],
            ..Default::default()
        });
        let replay = replay_command(cli, seed);
        print_run(&report, &replay);
        if !report.violations.is_empty() {
            replays.push(replay);
        }
        reports.push(report);
        drop(sim);
    }
    let violations: usize = reports.iter().map(|r| r.violations.len()).sum();
    let rpcs: usize = reports.iter().map(|r| r.rpcs).sum();
    let faulted: usize = reports.iter().flat_map(|r| r.faults.iter()).filter(|(k, _)| *k != "none").map(|(_, v)| v).sum();
    let lost: usize = reports.iter().filter_map(|r| r.faults.get("lose_reply")).sum();
    let batches: usize = reports.iter().map(|r| r.batches).sum();
    let kills: usize = reports.iter().map(|r| r.kills.len()).sum();
    println!(
        "summary: {} runs, {batches} batches, {rpcs} RPCs, {faulted} faulted ({:.0}%), {lost} lost replies, {kills} kill -9, {violations} violations",
        reports.len(),
        100.0 * faulted as f64 / rpcs.max(1) as f64
    );
    let json = serde_json::json!({
        "target": if cli.sim { "simulated project".to_string() } else { cli.url.clone().unwrap_or_default() },
        "profile": cli.profile,
        "seeds": [cli.seed, cli.seed + cli.runs.saturating_sub(1)],
        "batches_per_run": cli.batches,
        "violations": violations,
        "replay": replays,
        "runs": reports,
    });
    std::fs::write(&cli.report, serde_json::to_string_pretty(&json).unwrap_or_default())
        .map_err(|e| format!("{}: {e}", cli.report.display()))?;
    println!("report: {}", cli.report.display());
    for r in &replays {
        println!("replay: {r}");
    }
    Ok(violations == 0)
}
