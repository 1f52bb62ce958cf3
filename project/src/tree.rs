//! ProjectTree: one per selected project. Shares the project's RpcClient
//! (with the project's work sequences, which the registry starts beside
//! it), owns its BatchMonitor and OutputFetcher, starts a SubmitPipeline
//! per submit, and
//! renders the outcome of the BOINC_* commands into their result lines,
//! with the authenticator redacted. (The BLAH front end renders its own,
//! in `blah/`.)

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::error_text::{one_line, MAX_HOLD_REASON};
use gahp_protocol::gahp::{AsyncCommand, CommandResult};

use crate::batch_monitor::{BatchMonitor, Query};
use crate::output_fetcher::{Fetch, OutputFetcher};
use crate::rpc::{Rpc, RpcClient};
use crate::submit_pipeline::{CompactBatch, RunPipeline, SubmitPipeline, SUBMIT_BATCHES_AT_ONCE};
use crate::templates::templates_of;
use crate::ProjectKey;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::state_db::StateDb;

pub struct ProjectTree {
    key: ProjectKey,
    config: Arc<DaemonConfig>,
    stager: Addr<FileStager>,
    rpc: Addr<RpcClient>,
    monitor: Addr<BatchMonitor>,
    fetcher: Addr<OutputFetcher>,
    db: StateDb,
    /// Permits to build and send a submit_batch (see `SUBMIT_BATCHES_AT_ONCE`).
    submit_slots: Arc<tokio::sync::Semaphore>,
}

impl ProjectTree {
    /// `rpc`: the project's HTTP client (`RpcClient::new(key, config)`).
    pub fn new(key: ProjectKey, config: Arc<DaemonConfig>, rpc: Addr<RpcClient>, stager: Addr<FileStager>, db: StateDb) -> Self {
        let monitor = BatchMonitor::new(key.clone(), config.clone(), rpc.clone()).start();
        let fetcher = OutputFetcher::new(key.clone(), rpc.clone(), config.unpack).start();
        let submit_slots = Arc::new(tokio::sync::Semaphore::new(SUBMIT_BATCHES_AT_ONCE));
        ProjectTree { key, config, stager, rpc, monitor, fetcher, db, submit_slots }
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
        if let Some(name) = &self.config.panic_on {
            if names(&msg.command).any(|n| n == name) {
                panic!("test hook: a command named {name}");
            }
        }
        let deadline = Instant::now() + self.config.command_timeout;
        let auth = self.key.authenticator.clone();
        let rpc = self.rpc.clone();
        let work: ResponseFuture<CommandResult> = match msg.command {
            AsyncCommand::Ping => {
                // One attempt, answered at once: the gridmanager probes with it.
                let deadline = Instant::now() + self.config.ping_timeout.min(self.config.command_timeout);
                Box::pin(async move {
                    done(
                        rpc.once(Script::SubmitRpcHandler, request::ping(), Vec::new(), reply::parse_ping, deadline).await,
                        "ping_server returned",
                    )
                })
            }
            AsyncCommand::Submit(batch) => {
                // Kept compactly from here on (names as `<batch>_<k>`,
                // shared argument and input lists), arguments as BOINC can
                // carry them; refused before anything is created.
                let batch_name = batch.batch_name.clone();
                let batch = match CompactBatch::quoting_args(batch) {
                    Ok(b) => b,
                    Err(e) => {
                        let msg = auth.redact_in(&format!("error submitting jobs: {e}"));
                        log_failed_jobs(&batch_name, e.names.iter(), &msg);
                        return Box::pin(async move { CommandResult::Error(msg) });
                    }
                };
                // For the log lines of a failure (`<batch>_<k>` names: none kept).
                let job_names = batch.names().clone();
                // One get_templates per app per period, however many submits.
                let templates = templates_of(&self.key, &rpc, &batch.app_name, deadline);
                let pipeline =
                    SubmitPipeline::new(self.key.clone(), self.config.clone(), rpc, self.stager.clone(), self.db.clone(), batch, deadline)
                        .with_shared_templates(templates)
                        .with_submit_slots(self.submit_slots.clone())
                        .start();
                Box::pin(async move {
                    // The edge: the typed error becomes the result's text here.
                    match pipeline.send(RunPipeline).await {
                        Ok(Ok(())) => CommandResult::Ok,
                        // The gridmanager holds the job with this text: one
                        // line; the whole of a server's page goes to the log.
                        Ok(Err(e)) => {
                            let text = auth.redact_in(&e.to_string());
                            let line = one_line(&text, MAX_HOLD_REASON);
                            if line != text {
                                tracing::warn!("submit failed: {text}");
                            }
                            log_failed_jobs(&batch_name, job_names.iter(), &line);
                            CommandResult::Error(line)
                        }
                        Err(_) => CommandResult::Error("error submitting jobs: internal error (the submit pipeline stopped)".into()),
                    }
                })
            }
            AsyncCommand::QueryBatches { min_mod_time, batches } => {
                let monitor = self.monitor.clone();
                Box::pin(async move {
                    monitor
                        .send(Query { min_mod_time, batches, deadline })
                        .await
                        .unwrap_or_else(|_| CommandResult::Error("error querying batch: internal error".into()))
                })
            }
            AsyncCommand::FetchOutput(fetch) => {
                let (fetcher, auth) = (self.fetcher.clone(), auth.clone());
                let job = fetch.job_name.clone();
                Box::pin(async move {
                    let result = fetcher
                        .send(Fetch { fetch, deadline })
                        .await
                        .unwrap_or_else(|_| CommandResult::Error("get_output_file() returned -1 internal error".into()));
                    if let CommandResult::Error(reason) = &result {
                        // Redacted here too: the line is logged before the
                        // result is redacted below.
                        let reason = auth.redact_in(reason);
                        tracing::warn!(condor_job = %condor_job_of(&job), boinc_job = %job, "fetching the job's outputs failed: {reason}");
                    }
                    result
                })
            }
            AsyncCommand::AbortJobs { jobs } => Box::pin(async move {
                let xml = request::abort_jobs(&auth, &jobs);
                done(rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await, "abort_jobs() returned")
            }),
            AsyncCommand::RetireBatch { batch } => Box::pin(async move {
                let xml = request::retire_batch(&auth, &batch);
                done(rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await, "retire_batch() returned")
            }),
            AsyncCommand::SetLease { batch, lease_time } => Box::pin(async move {
                let xml = request::set_expire_time(&auth, &batch, lease_time);
                done(rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await, "set_lease() returned")
            }),
        };
        let auth = self.key.authenticator.clone();
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
        MessageResult(self.rpc.clone())
    }
}

/// `NULL`, or the reference's `<operation> <n> <msg>` error text.
fn done<E: std::fmt::Display>(r: Result<(), E>, operation: &str) -> CommandResult {
    match r {
        Ok(()) => CommandResult::Ok,
        Err(e) => CommandResult::Error(format!("{operation} {e}")),
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

/// One log line per job of a batch whose submission failed: the
/// gridmanager holds each of them with `reason`.
fn log_failed_jobs(batch: &str, jobs: impl Iterator<Item = impl AsRef<str>>, reason: &str) {
    for job in jobs {
        let job = job.as_ref();
        tracing::warn!(condor_job = %condor_job_of(job), boinc_batch = %batch, boinc_job = %job, "submission failed: {reason}");
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
