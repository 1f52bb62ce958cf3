//! `BOINC_PING` on a pool: up if any of its projects answers.

use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use crate::pools::Broker;

impl Broker {
    /// Up if any project of the pool answers.
    pub(crate) async fn ping(&self) -> CommandResult {
        let n = self.pool().projects.len();
        let results = futures_util::future::join_all((0..n).map(|p| self.on(p, AsyncCommand::Ping))).await;
        if results.iter().any(|r| matches!(r, CommandResult::Ok)) {
            return CommandResult::Ok;
        }
        let why: Vec<String> = results
            .iter()
            .zip(&self.pool().projects)
            .map(|(r, p)| format!("{}: {}", p.name, if let CommandResult::Error(e) = r { e.as_str() } else { "?" }))
            .collect();
        CommandResult::Error(format!("ping_server returned -1 no project of the pool answers ({})", why.join("; ")))
    }
}
