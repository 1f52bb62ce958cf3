//! `boinc_gahp demo`: starts the simulated BOINC project in process, runs
//! the real daemon as a child over pipes (as HTCondor does), and drives it
//! through one batch: submit, watch the jobs run, fetch every output,
//! check it, retire the batch, print a summary. Outputs stay in a directory
//! it names.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gahp_protocol::gahp::{
    AsyncCommand, Command, FetchMode, FetchOutput, InputFile, JobParams, JobSpec, OutputSpec, ReqId, Request, SubmitBatch,
};
use gahp_protocol::Authenticator;

use gahp_client::GahpClient;

#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Number of jobs in the batch.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
    /// Where to leave inputs, outputs and logs (default: a new temp dir).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

fn async_cmd(reqid: u32, command: AsyncCommand) -> Request {
    Request::Command { reqid: ReqId(reqid), command: Command::Boinc(command) }
}

pub fn run(args: DemoArgs) -> Result<(), String> {
    let out = match args.out {
        Some(d) => d,
        None => tempfile::Builder::new().prefix("boinc-gahp-demo-").tempdir().map_err(|e| e.to_string())?.keep(),
    };
    for d in ["inputs", "results", "state", "sim"] {
        std::fs::create_dir_all(out.join(d)).map_err(e("creating the demo directory"))?;
    }
    let exe = std::env::current_exe().map_err(e("finding this executable"))?;

    println!("boinc-gahp demo — everything is in {}", out.display());
    let (url, auth, _sim) = start_sim(&out.join("sim"), &exe)?;
    println!("simulated BOINC project at {url}");

    let log = out.join("boinc_gahp.log");
    let state = out.join("state");
    // A config of its own (all defaults), so that the user's cannot change
    // or break the demo.
    let config = out.join("boinc_gahp.toml");
    std::fs::write(&config, "# the demo's daemon: every setting at its default\n").map_err(e("writing the demo's config"))?;
    let (config, state, log) = (config.to_string_lossy(), state.to_string_lossy(), log.to_string_lossy());
    let mut gahp = GahpClient::spawn(&exe, &["--config", &config, "--state-dir", &state, "--log-file", &log], &[], &out)
        .map_err(e("starting the daemon"))?;
    println!("daemon started (pid {}): {}", gahp.pid(), gahp.banner);

    // The start-up sequence of HTCondor's gridmanager.
    let cmds = gahp.command_line(b"COMMANDS").map_err(e("COMMANDS"))?;
    if cmds.iter().any(|c| c == "RESPONSE_PREFIX") {
        gahp.set_prefix("GAHP:").map_err(e("RESPONSE_PREFIX"))?;
    }
    gahp.command_line(b"ASYNC_MODE_ON").map_err(e("ASYNC_MODE_ON"))?;
    gahp.command(&Request::SelectProject { url: url.clone(), authenticator: Authenticator::new(auth) }).map_err(e("SELECT"))?;
    let wait = Duration::from_secs(args.timeout);
    check(gahp.call(|id| async_cmd(id, AsyncCommand::Ping), wait).map_err(e("BOINC_PING"))?, "BOINC_PING")?;

    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let batch_name = format!("demo#{}#uppercase#{stamp}", std::process::id());
    let mut jobs = Vec::new();
    let mut expected = Vec::new();
    for i in 0..args.jobs {
        let text = format!("hello from job {i} of the boinc-gahp demo\n");
        let path = out.join("inputs").join(format!("in_{i}.txt"));
        std::fs::write(&path, &text).map_err(e("writing an input"))?;
        expected.push(text.to_uppercase());
        jobs.push(JobSpec {
            name: format!("{batch_name}#{i}.0"),
            args: vec![],
            inputs: vec![InputFile { src: path, dst_name: "in".into() }],
        });
    }
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    let submit = SubmitBatch { batch_name: batch_name.clone(), app_name: "uppercase".into(), jobs, params: JobParams::default() };
    let started = Instant::now();
    check(gahp.call(|id| async_cmd(id, AsyncCommand::Submit(submit)), wait).map_err(e("BOINC_SUBMIT"))?, "BOINC_SUBMIT")?;
    println!("submitted batch {batch_name} with {} jobs", names.len());
    let lease = stamp as f64 + 6.0 * 3600.0;
    check(
        gahp.call(|id| async_cmd(id, AsyncCommand::SetLease { batch: batch_name.clone(), lease_time: lease }), wait)
            .map_err(e("SET_LEASE"))?,
        "BOINC_SET_LEASE",
    )?;

    // Watch until every job is DONE or ERROR.
    let tty = std::io::stdout().is_terminal();
    let mut states: Vec<String> = vec!["?".into(); names.len()];
    let mut last_line = String::new();
    loop {
        let r = gahp
            .call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![batch_name.clone()] }), wait)
            .map_err(e("BOINC_QUERY_BATCHES"))?;
        if r.first().map(String::as_str) != Some("NULL") {
            return Err(format!("BOINC_QUERY_BATCHES failed: {}", r.join(" ")));
        }
        for pair in r.get(3..).unwrap_or_default().chunks(2) {
            if let [job, status] = pair {
                if let Some(i) = names.iter().position(|n| n == job) {
                    states[i] = status.clone();
                }
            }
        }
        let count = |s: &str| states.iter().filter(|x| *x == s).count();
        let (done, error) = (count("DONE"), count("ERROR"));
        let line =
            format!("{:>3}/{} done, {} running, {} waiting, {} failed", done, names.len(), count("IN_PROGRESS"), count("UNSENT"), error);
        if tty {
            let width = 30;
            let filled = if names.is_empty() { width } else { (done + error) * width / names.len() };
            print!("\r[{}{}] {line}   ", "#".repeat(filled), ".".repeat(width - filled));
            let _ = std::io::stdout().flush();
        } else if line != last_line {
            println!("progress: {line}");
        }
        last_line = line;
        if done + error == names.len() {
            break;
        }
        if started.elapsed() > wait {
            return Err(format!("the batch did not finish within {} s", args.timeout));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    if tty {
        println!();
    }

    println!("{:<40} {:>6} {:>5} {:>12} {:>12}  output", "job", "status", "exit", "elapsed (s)", "cpu (s)");
    let mut ok = 0;
    for (i, name) in names.iter().enumerate() {
        if states[i] != "DONE" {
            println!("{name:<40} {:>6}", states[i]);
            continue;
        }
        let dst = out.join("results").join(format!("out_{i}.txt"));
        let fetch = FetchOutput {
            job_name: name.clone(),
            dir: out.join("results"),
            stderr_file: PathBuf::from(format!("stderr_{i}.txt")),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst: dst.clone() }],
        };
        let r = gahp.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), wait).map_err(e("BOINC_FETCH_OUTPUT"))?;
        match r.as_slice() {
            [null, exit, elapsed, cpu] if null == "NULL" => {
                let got = std::fs::read_to_string(&dst).unwrap_or_default();
                let verdict = if got == expected[i] {
                    ok += 1;
                    "ok"
                } else {
                    "WRONG"
                };
                println!("{name:<40} {:>6} {exit:>5} {elapsed:>12} {cpu:>12}  {} ({verdict})", "DONE", display(&dst, &out));
            }
            other => println!("{name:<40} fetch failed: {}", other.join(" ")),
        }
    }
    check(
        gahp.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: batch_name.clone() }), wait).map_err(e("RETIRE"))?,
        "BOINC_RETIRE_BATCH",
    )?;
    let status = gahp.close(Duration::from_secs(5)).map_err(e("stopping the daemon"))?;
    println!(
        "{ok} of {} jobs done with the right output in {:.1} s; daemon exited ({status}); outputs in {}",
        names.len(),
        started.elapsed().as_secs_f64(),
        out.join("results").display()
    );
    if ok == names.len() {
        Ok(())
    } else {
        Err(format!("{} job(s) did not produce the expected output", names.len() - ok))
    }
}

/// Turns an IO error into a message that says what was being done.
fn e(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |err| format!("{what}: {err}")
}

fn display(p: &Path, base: &Path) -> String {
    p.strip_prefix(base).unwrap_or(p).display().to_string()
}

fn check(result: Vec<String>, what: &str) -> Result<(), String> {
    match result.first().map(String::as_str) {
        Some("NULL") => Ok(()),
        _ => Err(format!("{what} failed: {}", result.join(" "))),
    }
}

/// Runs the simulated project on its own thread and runtime for the
/// lifetime of the returned guard.
fn start_sim(dir: &Path, exe: &Path) -> Result<(String, String, SimGuard), String> {
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (dir, exe) = (dir.to_path_buf(), exe.to_path_buf());
    let thread = std::thread::spawn(move || {
        let system = actix_rt::System::new();
        system.block_on(async move {
            let mut opts = boinc_sim::SimOptions::new_default("127.0.0.1:0".parse().expect("a socket address"));
            opts.dir = Some(dir);
            opts.app_exe = exe;
            match boinc_sim::start(opts).await {
                Ok(handle) => {
                    let _ = tx.send(Ok((handle.project_url.clone(), handle.authenticator.clone())));
                    let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                    handle.stop().await;
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        });
    });
    let (url, auth) = rx.recv().map_err(|_| "the simulated project did not start".to_string())??;
    Ok((url, auth, SimGuard { stop: Some(stop_tx), thread: Some(thread) }))
}

struct SimGuard {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SimGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
