//! The `BOINC_*` commands on one project, a file each: what the project's
//! tree does for each (the tree's `Run` hands every command here, and
//! redacts the authenticator from what comes back). A pool's broker runs
//! them on the project it chose, through the same `Run`.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use crate::batch_monitor::BatchMonitor;
use crate::output_fetcher::OutputFetcher;
use crate::rpc::RpcClient;
use crate::ProjectKey;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::state_db::StateDb;

mod abort_jobs;
mod fetch_output;
mod ping;
mod query_batches;
mod retire_batch;
mod set_lease;
mod submit;

/// What the commands are carried out with: the project, the daemon's
/// settings and the tree's actors.
pub struct Workers {
    pub key: ProjectKey,
    pub config: Arc<DaemonConfig>,
    pub stager: Addr<FileStager>,
    pub rpc: Addr<RpcClient>,
    pub monitor: Addr<BatchMonitor>,
    pub fetcher: Addr<OutputFetcher>,
    pub db: StateDb,
    /// Permits to build and send a submit_batch (see `SUBMIT_BATCHES_AT_ONCE`).
    pub submit_slots: Arc<tokio::sync::Semaphore>,
}

/// The work of one command; it always yields the command's result.
pub fn run(w: &Workers, command: AsyncCommand) -> ResponseFuture<CommandResult> {
    let deadline = Instant::now() + w.config.command_timeout;
    match command {
        AsyncCommand::Ping => ping::run(w),
        AsyncCommand::Submit(batch) => submit::run(w, batch, deadline),
        AsyncCommand::QueryBatches { min_mod_time, batches } => query_batches::run(w, min_mod_time, batches, deadline),
        AsyncCommand::FetchOutput(fetch) => fetch_output::run(w, fetch, deadline),
        AsyncCommand::AbortJobs { jobs } => abort_jobs::run(w, jobs, deadline),
        AsyncCommand::RetireBatch { batch } => retire_batch::run(w, batch, deadline),
        AsyncCommand::SetLease { batch, lease_time } => set_lease::run(w, batch, lease_time, deadline),
    }
}

/// `NULL`, or the reference's `<operation> <n> <msg>` error text.
fn done<E: std::fmt::Display>(r: Result<(), E>, operation: &str) -> CommandResult {
    match r {
        Ok(()) => CommandResult::Ok,
        Err(e) => CommandResult::Error(format!("{operation} {e}")),
    }
}

/// The HTCondor job id in a gridmanager's BOINC job name
/// (`condor#<schedd>#<app>#<qdate>#<cluster>.<proc>`), else `unknown`.
fn condor_job_of(job_name: &str) -> &str {
    let last = job_name.rsplit('#').next().unwrap_or("");
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match last.split_once('.') {
        Some((cluster, proc)) if job_name.contains('#') && digits(cluster) && digits(proc) => last,
        _ => "unknown",
    }
}

#[cfg(test)]
mod condor_job_tests {
    use super::condor_job_of;

    #[test]
    fn the_condor_job_id_is_the_last_field_of_a_gridmanager_job_name() {
        assert_eq!(condor_job_of("condor#s.example.org#w_1#1716400000#42.0"), "42.0");
        assert_eq!(condor_job_of("condor#s#worker#1716400000#42.17"), "42.17");
        assert_eq!(condor_job_of("my_job_1.0"), "unknown");
        assert_eq!(condor_job_of("condor#s#worker#x.y"), "unknown");
    }
}
