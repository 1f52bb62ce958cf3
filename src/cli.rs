//! The command line of the `boinc_gahp` binary: the flags, the
//! subcommands (each one's arguments live with its command), and the
//! daemon's run on stdin/stdout. The settings the flags lead to are in
//! `settings.rs`, below the commands that read them.
//! A `config.txt` in the working directory (line 1 project URL, line 2
//! authenticator) selects an initial project, as BOINC's C GAHP does; a
//! broken one is logged and ignored, never fatal.

use std::io;
use std::path::Path;

use clap::{Parser, Subcommand};
use gahp_project::ProjectKey;
use gahp_protocol::Authenticator;

use crate::settings::{init_logging, GlobalFlags, Settings};

#[derive(Parser, Debug)]
#[command(name = "boinc_gahp", about = "BOINC GAHP for HTCondor's gridmanager (speaks GAHP on stdin/stdout)", disable_version_flag = true)]
pub struct Cli {
    /// Print the version (to stderr, like BOINC's C GAHP) and exit.
    #[arg(long)]
    pub version: bool,
    #[command(flatten)]
    pub flags: GlobalFlags,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check a set-up as the submitting user: the config, the project (or
    /// pool), the authenticator, the apps, the upload limits and the state
    /// directory. Exit 0 if all is well, 1 if something failed.
    Check(crate::check::CheckArgs),
    /// Make the directory HTCondor's ssh route (`grid_resource = batch boinc
    /// user@host`) starts this daemon from, on the host that runs it, as the
    /// user jobs log in as: DIR/bin/blahpd (this program), DIR/bin/condor_ft-gahp
    /// (HTCondor's), DIR/etc/condor_config.ft-gahp, DIR/log, DIR/sandbox.
    RemoteLayout(crate::remote_layout::RemoteLayoutArgs),
    /// Start a simulated BOINC project in process and drive the real daemon
    /// through a batch: submit, watch, fetch, summarise.
    #[cfg(feature = "sim")]
    Demo(crate::demo::DemoArgs),
    /// Manage the clients of `boinc_gahp serve` and their tokens.
    Token(crate::serve::TokenArgs),
    /// Serve GAHP over TLS to many first tiers, each proving a token
    /// (docs/serve.md).
    Serve(crate::serve::ServeArgs),
    /// Bridge stdin/stdout to a `boinc_gahp serve`: what HTCondor's
    /// BOINC_GAHP or BATCH_GAHP runs to use a remote second tier.
    Connect(crate::serve::connect::ConnectArgs),
}

/// `config.txt` in the working directory, as BOINC's C GAHP reads it.
pub fn initial_project(dir: &Path) -> Option<ProjectKey> {
    let text = std::fs::read_to_string(dir.join("config.txt")).ok()?;
    let mut lines = text.lines().map(str::trim);
    match (lines.next(), lines.next()) {
        (Some(url), Some(auth)) if !url.is_empty() && !auth.is_empty() => Some(ProjectKey::new(url, Authenticator::new(auth))),
        _ => {
            tracing::warn!("config.txt needs the project URL on line 1 and the authenticator on line 2; ignored");
            None
        }
    }
}

/// Runs the daemon on stdin/stdout until EOF or QUIT.
pub fn run_daemon(settings: Settings) -> io::Result<()> {
    init_logging(&settings.log_file, &settings.daemon.log_level, settings.daemon.max_log_files, settings.daemon.log_rotation);
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "boinc_gahp starting");
    let initial = std::env::current_dir().ok().and_then(|d| initial_project(&d));
    let system = actix_rt::System::new();
    let metrics = settings.daemon.metrics.listen;
    system.block_on(async {
        // Off by default; a taken port (another user's daemon) costs only the metrics.
        if let Some(addr) = metrics {
            match gahp_services::metrics_http::start(addr, true).await {
                Ok(local) => tracing::info!("metrics at http://{local}/metrics"),
                Err(e) => tracing::warn!("{e}; going on without metrics"),
            }
        }
        gahp_session::start_daemon(
            settings.daemon,
            crate::stdin::stdin(),
            Box::new(io::BufWriter::with_capacity(64 * 1024, io::stdout())),
            initial,
        )
        .map(|_| ())
    })?;
    system.run()
}
