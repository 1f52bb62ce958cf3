//! `boinc_gahp connect`: stdin/stdout to a `boinc_gahp serve` over TLS.
//! It proves the token, then relays GAHP both ways, so the gridmanager
//! speaks to the remote second tier as to a local daemon; the files its
//! requests name travel over the same connection (`relay`, docs/serve.md).
//! When the link drops it dials again, for `--reconnect-for`, presenting
//! the same session id, so the gridmanager sees nothing of it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::dial::{DialError, Dialer};

#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The server, `host:port`.
    pub addr: String,
    /// A file whose first word is this client's token.
    #[arg(long)]
    pub token_file: PathBuf,
    /// Trust roots for the server's certificate (PEM; default: the web's).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Plain TCP instead of TLS, to a serve on a loopback address.
    #[arg(long)]
    pub insecure_loopback: bool,
    /// Send no files: paths in requests name files in this client's area
    /// on the serving host (put there by other means).
    #[arg(long)]
    pub remote_paths: bool,
    /// When the link to the server drops, dial again for up to this many
    /// seconds (backing off from 0.2 s to 30 s) and carry on; 0: end, as
    /// the link did.
    #[arg(long, default_value_t = 3600, value_name = "SECS")]
    pub reconnect_for: u64,
}

pub fn run(args: &ConnectArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("boinc_gahp connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    let done = rt.block_on(connect(args));
    // stdin's reader thread may be blocked in a read: don't wait for it.
    rt.shutdown_background();
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("boinc_gahp connect: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(args: &ConnectArgs) -> Result<(), String> {
    let dialer =
        Dialer::new(&args.addr, &args.token_file, args.ca.as_deref(), args.insecure_loopback, Duration::from_secs(args.reconnect_for))?;
    let (stream, already) = dialer.dial().await.map_err(|(DialError::Refused(e) | DialError::Failed(e))| e)?;
    super::relay::relay(&dialer, stream, already, !args.remote_paths).await
}
