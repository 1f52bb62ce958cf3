//! `boinc_gahp check`: reads the config as the daemon would and asks the
//! project (or each project of a pool) what a submission will meet: does
//! it answer, is the authenticator accepted with submit rights, which apps
//! are there with which files, how large an upload its PHP takes, and is
//! the state directory usable. Plain lines for people (`ok`, `warn`,
//! `FAIL`), or one JSON document with `--json`; exit 1 if anything failed.
//! Nothing is created on a project (see `uploads.rs` for the probe).

mod pool;
mod project;
mod report;
mod state;
mod uploads;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use gahp_services::DaemonConfig;

use crate::settings::{config_path, GlobalFlags};
pub use report::{Level, Report};

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The project to check (default: `[blah] project_url` of the config).
    #[arg(long)]
    pub url: Option<String>,
    /// A file whose first word is the account key (default: `[blah]
    /// authenticator_file` of the config). The key is never printed.
    #[arg(long)]
    pub authenticator_file: Option<PathBuf>,
    /// The app jobs will use (default: `[blah] default_app`).
    #[arg(long)]
    pub app: Option<String>,
    /// A pool file to check (default: `[blah] pool` of the config).
    #[arg(long)]
    pub pool: Option<PathBuf>,
    /// Seconds each question to a project may take, retries included.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// The largest upload the probe tries, in MiB: a project that takes it
    /// is reported as taking at least that much.
    #[arg(long, default_value_t = 64)]
    pub probe_max_mib: u64,
    /// Skip the upload probe (it sends up to a few times `--probe-max-mib`).
    #[arg(long)]
    pub no_upload_probe: bool,
    /// One JSON document on stdout instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// Runs the check and prints its report; exit 0 if nothing failed, 1 if
/// something did.
pub fn run(flags: &GlobalFlags, args: &CheckArgs) -> ExitCode {
    let mut report = Report::default();
    let config = load_config(flags, &mut report);
    state::check(&config.state_dir, &mut report);
    let timeout = if args.timeout.is_finite() && args.timeout > 0.0 && args.timeout < 1e9 {
        Duration::from_secs_f64(args.timeout)
    } else {
        report.add(Level::Fail, "arguments", format!("--timeout {}: not a positive number of seconds", args.timeout));
        Duration::from_secs(30)
    };
    let system = actix_rt::System::new();
    system.block_on(async {
        let target = project::Target::from(&config, args);
        match target {
            Ok(Some(t)) => project::check(&config, &t, args, timeout, &mut report).await,
            Ok(None) => {}
            Err(why) => report.add(Level::Fail, "project", why),
        }
        let pool = args.pool.clone().or_else(|| config.blah.pool.clone());
        if let Some(pool) = pool {
            pool::check(&config, &pool, args.app.as_deref().or(config.blah.default_app.as_deref()), timeout, &mut report).await;
        }
        if !report.has("project") && !report.has("pool") {
            report.add(
                Level::Fail,
                "project",
                "no project to check: give --url and --authenticator-file, or set [blah] project_url or pool in the config".to_string(),
            );
        }
    });
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The config as the daemon reads it, its errors reported with their
/// line; a broken file leaves the defaults (and the flags) in force so the
/// rest can still be checked.
fn load_config(flags: &GlobalFlags, report: &mut Report) -> DaemonConfig {
    let path = config_path(flags);
    if let Some(p) = &path {
        let text = match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(e) => {
                report.add(Level::Fail, "config", format!("can't read {}: {e}", p.display()));
                return fallback(flags);
            }
        };
        if let Err(e) = DaemonConfig::from_toml(&text) {
            report.add(Level::Fail, "config", format!("{}: {}", p.display(), with_line(&text, &e)));
            return fallback(flags);
        }
    }
    match crate::settings::settings(flags) {
        Ok(s) => {
            let what = match &path {
                Some(p) => format!("{} read as the daemon reads it", p.display()),
                None => "no config file: the built-in defaults".to_string(),
            };
            report.add(Level::Ok, "config", what);
            s.daemon
        }
        Err(e) => {
            report.add(Level::Fail, "config", e);
            fallback(flags)
        }
    }
}

fn fallback(flags: &GlobalFlags) -> DaemonConfig {
    let mut d = DaemonConfig::default();
    if let Some(dir) = &flags.state_dir {
        d.state_dir = dir.clone();
    }
    d
}

/// A config error with the line it is about: TOML's own errors name it;
/// a value refused after parsing names its key, found here in the text.
fn with_line(text: &str, error: &str) -> String {
    let error = error.trim_end();
    if error.contains(" line ") {
        // TOML's own: a head naming line and column, the offending text
        // drawn with `|` gutters, then what was wrong.
        let kept: Vec<&str> = error.lines().map(str::trim).filter(|l| !l.is_empty() && !l.contains('|')).collect();
        return kept.join("; ");
    }
    let key = error.split(':').next().unwrap_or("").rsplit('.').next().unwrap_or("").trim();
    let found = (!key.is_empty())
        .then(|| text.lines().position(|l| l.split('=').next().is_some_and(|k| k.trim().trim_matches('"') == key) && l.contains('=')))
        .flatten();
    match found {
        Some(i) => format!("line {}: {error}", i + 1),
        None => error.to_string(),
    }
}

/// `~/x` under the home directory, else as given.
fn expand_home(file: &Path) -> PathBuf {
    match (file.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => file.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::with_line;

    #[test]
    fn config_errors_carry_their_line() {
        let e = gahp_services::DaemonConfig::from_toml("[blah]\nbatch_max_jobs = 0\n").unwrap_err();
        assert!(with_line("[blah]\nbatch_max_jobs = 0\n", &e).starts_with("line 2: blah.batch_max_jobs"), "{e}");
        let text = "state_dir = \"/x\"\n[blah\n";
        let e = gahp_services::DaemonConfig::from_toml(text).unwrap_err();
        let shown = with_line(text, &e);
        assert!(shown.starts_with("TOML parse error at line 2") && !shown.contains('\n') && !shown.contains('|'), "{shown}");
    }
}
