//! The settings of a run, below every command: the flags before the
//! subcommand, the config file they name, HTCondor's environment, and the
//! log they lead to. The daemon, `serve` and `check` read them alike.
//!
//! Configuration, later wins: built-in defaults, the TOML file
//! (`--config`, else `$BOINC_GAHP_CONFIG`, else
//! `~/.config/boinc-gahp/config.toml` if it exists; read straight into
//! `DaemonConfig`), HTCondor's environment (`GAHP_SSL_CAFILE`,
//! `GAHP_SSL_CADIR`), command-line flags.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gahp_services::config::LogRotation;
use gahp_services::DaemonConfig;

use crate::log_file::DroppingLog;

/// The flags given before the subcommand (or with none), which every
/// command that reads the config takes.
#[derive(clap::Args, Debug)]
pub struct GlobalFlags {
    /// TOML configuration file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Directory of the durable state (MD5 cache, BLAH jobs).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Log file (rotated daily); default `<state dir>/boinc_gahp.log`.
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Log filter, e.g. `info` or `gahp_project=debug`.
    #[arg(long)]
    pub log_level: Option<String>,
    /// Seconds a command may take, retries included (default 270).
    #[arg(long)]
    pub command_timeout: Option<f64>,
    /// Seconds one HTTP exchange may take (default 60).
    #[arg(long)]
    pub rpc_timeout: Option<f64>,
    /// First retry delay in milliseconds (default 500).
    #[arg(long)]
    pub retry_base_ms: Option<u64>,
}

pub struct Settings {
    pub daemon: DaemonConfig,
    pub log_file: PathBuf,
}

/// Seconds from a flag: positive and finite, or an error naming the flag.
fn flag_secs(flag: &str, v: f64) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v < 1e12 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!("{flag}: {v} is not a positive number of seconds"))
    }
}

/// The config file the daemon reads: `--config`, else `$BOINC_GAHP_CONFIG`,
/// else `~/.config/boinc-gahp/config.toml` if it exists.
pub fn config_path(flags: &GlobalFlags) -> Option<PathBuf> {
    flags.config.clone().or_else(|| std::env::var_os("BOINC_GAHP_CONFIG").map(PathBuf::from)).or_else(|| {
        let p = PathBuf::from(std::env::var_os("HOME")?).join(".config/boinc-gahp/config.toml");
        p.exists().then_some(p)
    })
}

pub fn settings(flags: &GlobalFlags) -> Result<Settings, String> {
    let path = config_path(flags);
    let mut d = match &path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("can't read {}: {e}", p.display()))?;
            DaemonConfig::from_toml(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => DaemonConfig::default(),
    };
    d.blah.authenticator_file = d.blah.authenticator_file.take().map(|f| beside(path.as_deref(), &f));
    d.blah.pool = d.blah.pool.take().map(|f| beside(path.as_deref(), &f));
    if let Some(plugins) = d.blah.transfer_plugins.as_mut() {
        plugins.iter_mut().for_each(|p| *p = beside(path.as_deref(), p));
    }
    d.blah.config_file = path;
    if let Some(f) = std::env::var_os("GAHP_SSL_CAFILE").filter(|f| !f.is_empty()) {
        d.ca_files.push(PathBuf::from(f));
    }
    if let Some(dir) = std::env::var_os("GAHP_SSL_CADIR").filter(|f| !f.is_empty()) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            d.ca_files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    d.panic_on = std::env::var("BOINC_GAHP_PANIC_ON").ok().filter(|s| !s.is_empty());
    if let Some(v) = &flags.state_dir {
        d.state_dir = v.clone();
    }
    if let Some(v) = flags.command_timeout {
        d.command_timeout = flag_secs("--command-timeout", v)?;
    }
    if let Some(v) = flags.rpc_timeout {
        d.rpc_timeout = flag_secs("--rpc-timeout", v)?;
    }
    if let Some(v) = flags.retry_base_ms {
        d.retry_base = Duration::from_millis(v);
    }
    if let Some(v) = &flags.log_file {
        d.log_file = Some(v.clone());
    }
    if let Some(v) = &flags.log_level {
        d.log_level = v.clone();
    }
    d.validate().map_err(|e| format!("{e}"))?;
    let log_file = d.log_file.clone().unwrap_or_else(|| d.state_dir.join("boinc_gahp.log"));
    Ok(Settings { daemon: d, log_file })
}

/// `~/x` under the home directory, a relative path beside the config file.
fn beside(config: Option<&Path>, file: &Path) -> PathBuf {
    if let (Ok(rest), Some(home)) = (file.strip_prefix("~"), std::env::var_os("HOME")) {
        return PathBuf::from(home).join(rest);
    }
    match config.and_then(Path::parent) {
        Some(dir) if file.is_relative() => dir.join(file),
        _ => file.to_path_buf(),
    }
}

/// The log's filter for `level` (`info` if it is not one).
pub fn log_filter(level: &str) -> tracing_subscriber::EnvFilter {
    // HTTP internals stay quiet at any level: at trace they would print
    // request lines, and a download URL carries the authenticator.
    let quiet = ",awc=warn,actix_http=warn,actix_tls=warn,h2=warn,rustls=warn,mio=warn";
    tracing_subscriber::EnvFilter::try_new(format!("{level}{quiet}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("info{quiet}")))
}

/// Logs go to a daily-rotated file, never to stdout (it carries the
/// protocol). Writes are synchronous so nothing is lost on a prompt exit;
/// a line the log's disk can't take is dropped (`log_file`).
pub fn init_logging(file: &Path, level: &str, max_files: usize, rotation: LogRotation) {
    let filter = log_filter(level);
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = file.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "boinc_gahp.log".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false);
    let installed = match std::fs::create_dir_all(dir) {
        Ok(()) => match tracing_appender::rolling::Builder::new()
            .rotation(match rotation {
                LogRotation::Daily => tracing_appender::rolling::Rotation::DAILY,
                LogRotation::Hourly => tracing_appender::rolling::Rotation::HOURLY,
                LogRotation::Minutely => tracing_appender::rolling::Rotation::MINUTELY,
            })
            .filename_prefix(name.to_string_lossy())
            .max_log_files(max_files.max(1))
            .build(dir)
        {
            // A full log disk drops lines rather than stall the daemon.
            Ok(appender) => {
                builder.with_writer(DroppingLog::new(appender, file.display().to_string())).log_internal_errors(false).try_init()
            }
            Err(_) => builder.with_writer(io::stderr).try_init(),
        },
        // No writable log directory: stderr, which the gridmanager drains.
        Err(_) => builder.with_writer(io::stderr).try_init(),
    };
    if installed.is_ok() {
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            tracing::error!("panic: {info}");
            default_hook(info);
        }));
    }
}
