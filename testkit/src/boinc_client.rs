//! A real BOINC client on loopback, driven through its GUI RPC with
//! `boinccmd`: the real-server tests and benchmark ask it to contact the
//! project now, and suspend it while they measure.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A client's GUI RPC address and password, and the project it computes for.
pub struct BoincClient {
    pub rpc: String,
    pub passwd: String,
    pub url: String,
}

impl BoincClient {
    /// Runs `boinccmd` against the client; whether it succeeded.
    pub fn boinccmd(&self, args: &[&str]) -> bool {
        let mut cmd = Command::new("boinccmd");
        cmd.args(["--host", &self.rpc, "--passwd", &self.passwd]).args(args);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        cmd.status().is_ok_and(|s| s.success())
    }

    /// Asks the client to contact the project now: it backs off when it
    /// found no work, and new jobs would wait for minutes.
    pub fn nudge(&self) {
        self.boinccmd(&["--project", &self.url, "update"]);
    }

    /// "never", "auto" or "always".
    pub fn set_run_mode(&self, mode: &str) -> bool {
        self.boinccmd(&["--set_run_mode", mode])
    }

    pub fn set_network_mode(&self, mode: &str) -> bool {
        self.boinccmd(&["--set_network_mode", mode])
    }
}

/// Nudges a client at most once per `every`, however often it ticks
/// (nothing without a client).
pub struct Nudger<'a> {
    client: Option<&'a BoincClient>,
    every: Duration,
    last: Option<Instant>,
}

impl<'a> Nudger<'a> {
    pub fn new(client: Option<&'a BoincClient>, every: Duration) -> Nudger<'a> {
        Nudger { client, every, last: None }
    }

    pub fn tick(&mut self) {
        if let Some(c) = self.client {
            if self.last.is_none_or(|t| t.elapsed() >= self.every) {
                c.nudge();
                self.last = Some(Instant::now());
            }
        }
    }
}
