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

    /// The client's own CPU run mode ("always", "auto" or "never", as
    /// `set_run_mode` takes it), if boinccmd can tell.
    pub fn run_mode(&self) -> Option<&'static str> {
        let mut cmd = Command::new("boinccmd");
        cmd.args(["--host", &self.rpc, "--passwd", &self.passwd, "--get_cc_status"]);
        cmd.stdin(Stdio::null()).stderr(Stdio::null());
        let out = cmd.output().ok().filter(|o| o.status.success())?;
        let text = String::from_utf8_lossy(&out.stdout);
        // The first "perm mode" is the CPU's (then GPU, network).
        let mode = text.lines().find_map(|l| l.trim().strip_prefix("perm mode: "))?;
        match mode {
            "always" => Some("always"),
            "according to prefs" => Some("auto"),
            "never" => Some("never"),
            _ => None,
        }
    }

    /// `boinccmd --task URL NAME OP`: OP is suspend, resume or abort.
    pub fn task_op(&self, name: &str, op: &str) -> bool {
        self.boinccmd(&["--task", &self.url, name, op])
    }

    /// The client's tasks (none where boinccmd fails).
    pub fn tasks(&self) -> Vec<ClientTask> {
        let mut cmd = Command::new("boinccmd");
        cmd.args(["--host", &self.rpc, "--passwd", &self.passwd, "--get_tasks"]);
        cmd.stdin(Stdio::null()).stderr(Stdio::null());
        match cmd.output() {
            Ok(out) if out.status.success() => ClientTask::parse_all(&String::from_utf8_lossy(&out.stdout)),
            _ => Vec::new(),
        }
    }
}

/// One task as `boinccmd --get_tasks` lists it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientTask {
    pub name: String,
    pub wu_name: String,
    /// `EXECUTING`, `SUSPENDED`, `UNINITIALIZED`, ...
    pub active_task_state: String,
}

impl ClientTask {
    /// The tasks of `--get_tasks`' output: `N) -----------` starts each,
    /// then `key: value` lines.
    pub fn parse_all(text: &str) -> Vec<ClientTask> {
        let mut tasks: Vec<ClientTask> = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.ends_with(") -----------") {
                tasks.push(ClientTask::default());
                continue;
            }
            let (Some(task), Some((key, value))) = (tasks.last_mut(), line.split_once(": ")) else { continue };
            match key {
                "name" => task.name = value.to_string(),
                "WU name" => task.wu_name = value.to_string(),
                "active_task_state" => task.active_task_state = value.to_string(),
                _ => {}
            }
        }
        tasks
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_read_from_get_tasks() {
        let text = "\n======== Tasks ========\n1) -----------\n   name: a_0\n   WU name: a\n   project URL: http://x/\n   \
                    active_task_state: EXECUTING\n   current CPU time: 1.5\n2) -----------\n   name: b_1\n   WU name: b\n   \
                    active_task_state: SUSPENDED\n";
        let tasks = ClientTask::parse_all(text);
        let t = |n: &str, w: &str, s: &str| ClientTask { name: n.into(), wu_name: w.into(), active_task_state: s.into() };
        assert_eq!(tasks, [t("a_0", "a", "EXECUTING"), t("b_1", "b", "SUSPENDED")]);
    }
}
