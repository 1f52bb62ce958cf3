//! `boinc-sim` command line: starts the project, prints exactly one line on
//! stdout when it serves (`ready <project_url> <authenticator>`), logs
//! elsewhere, and exits on SIGTERM/SIGINT or when stdin closes.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::apps;
use crate::config::SimConfig;
use crate::faults::FaultPlan;
use crate::SimOptions;

#[derive(Debug, Parser)]
#[command(name = "boinc-sim", about = "A simulated BOINC project on loopback (remote job submission, volunteer hosts, fault injection)")]
pub struct Cli {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// State directory (created if needed); state survives restarts.
    /// Without it a temporary directory is used.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Configuration file (TOML), see docs/sim.md.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Fault plan (TOML), see docs/sim-faults.md.
    #[arg(long)]
    faults: Option<PathBuf>,
    /// Simulated seconds per real second (overrides the config).
    #[arg(long)]
    time_scale: Option<f64>,
    /// Log file (default: stderr). Filter with BOINC_SIM_LOG (e.g. debug).
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// Keep running when stdin closes (for service managers).
    #[arg(long)]
    ignore_stdin: bool,
}

fn init_logging(file: Option<&PathBuf>) -> Result<Option<tracing_appender::non_blocking::WorkerGuard>, String> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("BOINC_SIM_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    match file {
        Some(path) => {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
            let name = path.file_name().ok_or_else(|| format!("bad log file {}", path.display()))?;
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let appender = tracing_appender::rolling::never(dir, name);
            let (writer, guard) = tracing_appender::non_blocking(appender);
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(false).try_init().map_err(|e| e.to_string())?;
            Ok(Some(guard))
        }
        None => {
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init().map_err(|e| e.to_string())?;
            Ok(None)
        }
    }
}

fn load(cli: &Cli) -> Result<SimOptions, String> {
    let mut opts = SimOptions::new_default(cli.listen);
    if let Some(p) = &cli.config {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        opts.config = SimConfig::from_toml(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = &cli.faults {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        opts.faults = FaultPlan::from_toml(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(x) = cli.time_scale {
        opts.config.time_scale = x;
    }
    opts.config.validate().map_err(|e| e.to_string())?;
    opts.dir = cli.dir.clone();
    Ok(opts)
}

/// Resolves when the process should stop: SIGTERM, SIGINT, or EOF on
/// stdin (unless `ignore_stdin`). Call before announcing readiness, so
/// that a signal sent right after the ready line is caught.
fn stop_signal(ignore_stdin: bool) -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    if !ignore_stdin {
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut stdin = std::io::stdin().lock();
            loop {
                match std::io::Read::read(&mut stdin, &mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        });
    }
    Ok(async move {
        let stdin_closed = async {
            // Without the stdin watch, the sender is dropped: wait forever.
            if rx.await.is_ok() {
                return;
            }
            std::future::pending::<()>().await
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
            _ = stdin_closed => tracing::info!("stdin closed: stopping"),
        }
    })
}

/// The `boinc-sim` program. Hands `argv[1] == APP_ENTRY_ARG` invocations to
/// the built-in apps first.
pub fn cli_main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a.as_os_str()) == Some(std::ffi::OsStr::new(apps::APP_ENTRY_ARG)) {
        std::process::exit(apps::app_main(&args[2..]));
    }
    let cli = Cli::parse();
    let _guard = match init_logging(cli.log_file.as_ref()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("boinc-sim: can't set up logging: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = match load(&cli) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("boinc-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let system = actix_rt::System::new();
    system.block_on(async move {
        let stop = match stop_signal(cli.ignore_stdin) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("boinc-sim: can't watch signals: {e}");
                return ExitCode::from(1);
            }
        };
        let sim = match crate::start(opts).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("boinc-sim: can't start: {e}");
                return ExitCode::from(1);
            }
        };
        let mut out = std::io::stdout().lock();
        let ready = writeln!(out, "ready {} {}", sim.project_url, sim.authenticator).and_then(|_| out.flush());
        drop(out);
        if ready.is_err() {
            tracing::warn!("stdout is gone");
        }
        stop.await;
        sim.stop().await;
        ExitCode::SUCCESS
    })
}
