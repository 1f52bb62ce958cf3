//! ProjectTree: one per selected project. Shares the project's RpcClient
//! (with the project's work sequences, which the registry starts beside
//! it), owns its BatchMonitor and OutputFetcher, and carries out the
//! BOINC_* commands (`commands/`, a file each, which start a
//! SubmitPipeline per submit), rendering their outcome into their result
//! lines with the authenticator redacted. (The BLAH front end renders its
//! own, in `blah/`.)

use std::sync::Arc;

use actix::prelude::*;
use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use crate::batch_monitor::BatchMonitor;
use crate::commands::{self, Workers};
use crate::output_fetcher::OutputFetcher;
use crate::rpc::RpcClient;
use crate::submit_pipeline::SUBMIT_BATCHES_AT_ONCE;
use crate::ProjectKey;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::state_db::StateDb;

pub struct ProjectTree {
    workers: Workers,
}

impl ProjectTree {
    /// `rpc`: the project's HTTP client (`RpcClient::new(key, config)`).
    pub fn new(key: ProjectKey, config: Arc<DaemonConfig>, rpc: Addr<RpcClient>, stager: Addr<FileStager>, db: StateDb) -> Self {
        let monitor = BatchMonitor::new(key.clone(), config.clone(), rpc.clone()).start();
        let fetcher = OutputFetcher::new(key.clone(), rpc.clone(), config.unpack).start();
        let submit_slots = Arc::new(tokio::sync::Semaphore::new(SUBMIT_BATCHES_AT_ONCE));
        ProjectTree { workers: Workers { key, config, stager, rpc, monitor, fetcher, db, submit_slots } }
    }
}

impl Actor for ProjectTree {
    type Context = Context<Self>;
}

/// Carry out one asynchronous command; always yields its result.
#[derive(Message)]
#[rtype(result = "CommandResult")]
pub struct Run {
    pub command: AsyncCommand,
}

impl Handler<Run> for ProjectTree {
    type Result = ResponseFuture<CommandResult>;

    fn handle(&mut self, msg: Run, _: &mut Context<Self>) -> Self::Result {
        if let Some(name) = &self.workers.config.panic_on {
            if names(&msg.command).any(|n| n == name) {
                panic!("test hook: a command named {name}");
            }
        }
        let work = commands::run(&self.workers, msg.command);
        let auth = self.workers.key.authenticator.clone();
        Box::pin(async move {
            match work.await {
                CommandResult::Error(msg) => CommandResult::Error(auth.redact_in(&msg)),
                other => other,
            }
        })
    }
}

/// The tree's HTTP client, for actors that make their own calls on this
/// project (the BLAH front end).
#[derive(Message)]
#[rtype(result = "Addr<RpcClient>")]
pub struct ClientOf;

impl Handler<ClientOf> for ProjectTree {
    type Result = MessageResult<ClientOf>;
    fn handle(&mut self, _: ClientOf, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.workers.rpc.clone())
    }
}

/// Batch and job names a command refers to (for the test hook).
fn names(c: &AsyncCommand) -> Box<dyn Iterator<Item = &String> + '_> {
    match c {
        AsyncCommand::Ping => Box::new(std::iter::empty()),
        AsyncCommand::Submit(b) => Box::new(std::iter::once(&b.batch_name).chain(b.jobs.iter().map(|j| &j.name))),
        AsyncCommand::QueryBatches { batches, .. } => Box::new(batches.iter()),
        AsyncCommand::FetchOutput(f) => Box::new(std::iter::once(&f.job_name)),
        AsyncCommand::AbortJobs { jobs } => Box::new(jobs.iter()),
        AsyncCommand::RetireBatch { batch } | AsyncCommand::SetLease { batch, .. } => Box::new(std::iter::once(batch)),
    }
}
