//! `BOINC_ABORT_JOBS` on a pool: each job aborted where its route says.

use std::collections::HashMap;

use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use super::unknown;
use crate::pools::{Broker, Route};

impl Broker {
    /// Each project gets its own jobs; every project is asked even if one
    /// fails, and the first failure is reported.
    pub(crate) async fn abort(&self, jobs: Vec<String>) -> CommandResult {
        let mut by_project: HashMap<usize, Vec<String>> = HashMap::new();
        for j in jobs {
            match self.job_route(&j).await {
                Ok(Route::Project(p)) => by_project.entry(p).or_default().push(j),
                Ok(Route::Unknown) => return unknown("abort_jobs() returned -1", "job", &j),
                Err(e) => return CommandResult::Error(e),
            }
        }
        let results =
            futures_util::future::join_all(by_project.into_iter().map(|(p, jobs)| self.on(p, AsyncCommand::AbortJobs { jobs }))).await;
        results.into_iter().find(|r| r.is_error()).unwrap_or(CommandResult::Ok)
    }
}
