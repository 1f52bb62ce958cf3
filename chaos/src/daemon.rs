//! The daemon under test, started and restarted as the gridmanager does:
//! the same state directory, the same log, the project selected again.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use gahp_protocol::gahp::Request;
use gahp_protocol::Authenticator;
use gahp_testkit::{GahpClient, PrivateTmpfs};

pub struct DaemonSpec {
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub rpc_timeout: Duration,
    /// The `[blah]` configuration (the BLAH dialect's project).
    pub config: PathBuf,
}

impl DaemonSpec {
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// Starts the daemon, reads its banner, turns async mode on.
    pub fn start(&self) -> std::io::Result<GahpClient> {
        self.start_at(&self.dir.join("state"), &self.log_dir().join("gahp.log"), None, Stdio::null())
    }

    /// Starts a daemon on the state directory `state` and the log `log`,
    /// inside `fs`'s mount namespace if given (to see its tmpfs), its
    /// stderr into `stderr`.
    pub fn start_at(&self, state: &Path, log: &Path, inside: Option<&PrivateTmpfs>, stderr: Stdio) -> std::io::Result<GahpClient> {
        let timeout = format!("{}", self.rpc_timeout.as_secs_f64());
        let (program, mut args) = match inside {
            Some(fs) => fs.wrap(&self.exe, &self.dir),
            None => (self.exe.clone(), Vec::new()),
        };
        let own = [
            "--config",
            path_str(&self.config)?,
            "--state-dir",
            path_str(state)?,
            "--log-file",
            path_str(log)?,
            "--log-level",
            "debug",
            "--retry-base-ms",
            "50",
            "--rpc-timeout",
            &timeout,
        ];
        args.extend(own.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut g = GahpClient::spawn_with_stderr(&program, &args, &[], &self.dir, stderr)?;
        let commands = g.command_line(b"COMMANDS")?;
        if !commands.iter().any(|c| c == "BOINC_SUBMIT") {
            return Err(std::io::Error::other(format!("COMMANDS said {commands:?}")));
        }
        let r = g.command_line(b"ASYNC_MODE_ON")?;
        if r != ["S"] {
            return Err(std::io::Error::other(format!("ASYNC_MODE_ON said {r:?}")));
        }
        Ok(g)
    }
}

fn path_str(p: &Path) -> std::io::Result<&str> {
    p.to_str().ok_or_else(|| std::io::Error::other(format!("path {} is not UTF-8", p.display())))
}

/// BOINC_SELECT_PROJECT; the reply must be `S`.
pub fn select(g: &mut GahpClient, url: &str, auth: &Authenticator) -> std::io::Result<()> {
    let r = g.command(&Request::SelectProject { url: url.to_string(), authenticator: auth.clone() })?;
    if r != ["S"] {
        return Err(std::io::Error::other(format!("BOINC_SELECT_PROJECT said {r:?}")));
    }
    Ok(())
}

/// Children of this process still running the daemon's executable.
pub fn leftover_daemons(exe: &Path) -> Vec<u32> {
    let me = std::process::id();
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let short: String = name.chars().take(15).collect();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...
        let Some((comm_part, rest)) = stat.rsplit_once(')') else { continue };
        let comm = comm_part.split_once('(').map(|(_, c)| c).unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (state, ppid) = (fields.first().copied().unwrap_or(""), fields.get(1).and_then(|p| p.parse::<u32>().ok()));
        if ppid == Some(me) && comm == short && state != "Z" {
            out.push(pid);
        }
    }
    out
}
