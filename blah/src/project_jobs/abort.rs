//! BLAH_JOB_CANCEL: the one job aborted on the server.

use std::time::Instant;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::BlahResult;
use tokio::sync::oneshot;

use super::*;
use crate::job_records;
use gahp_project::rpc::{Rpc, RpcError};
use gahp_project::submit_pipeline::PROJECT_DOWN;
use gahp_sequences::relocator::{SequenceError, StopSequence};

impl ProjectJobs {
    /// abort_jobs of this one job, then `reply` (code 0 either way: an
    /// abort that did not land is retried by `upkeep` until it does, and an
    /// error would replace the reason of a held job). A BOINC error (no
    /// such job, already over) counts as done: the job will not run. Its
    /// batch is retired once no job in it is needed.
    pub(super) fn abort(&mut self, job: String, ctx: &mut Context<Self>, reply: Option<oneshot::Sender<BlahResult>>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        let j = job.clone();
        let stop = self.jobs.get(job.as_str()).and_then(Job::sequence_name);
        let is_sequence = stop.is_some();
        let work: LocalBoxFuture<'static, Result<(), String>> = match (stop, self.sequences.clone()) {
            // A sequence is stopped, not aborted: its live step is aborted,
            // its completed state kept for a release (the same job again).
            (Some(name), Some(relocator)) => Box::pin(async move {
                match relocator.send(StopSequence { name }).await {
                    Ok(Ok(())) | Ok(Err(SequenceError::NoSuchSequence(_) | SequenceError::Finished(_))) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("the project's work sequences stopped".into()),
                }
            }),
            _ => Box::pin(async move {
                let xml = request::abort_jobs(&auth, std::slice::from_ref(&j));
                match rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await {
                    Ok(()) => Ok(()),
                    Err(RpcError::Boinc { num, msg }) if num != PROJECT_DOWN => {
                        tracing::info!(job = %j, "nothing to abort: {msg}");
                        Ok(())
                    }
                    Err(e) => Err(auth.redact_in(&e.to_string())),
                }
            }),
        };
        self.run(ctx, work, move |act, r, ctx| {
            let pending = r.is_err();
            let batch = act.jobs.get(job.as_str()).map(|j| j.batch.to_string());
            if let Err(e) = r {
                tracing::warn!(job = %job, "the abort did not reach the project yet, retrying later: {e}");
                act.aborts.insert(job.clone());
            } else {
                act.aborts.remove(&job);
                act.jobs.remove(job.as_str());
            }
            let j = job.clone();
            act.store.write("store an abort", move |c| {
                job_records::set_abort_pending(c, &j, pending)?;
                if !pending {
                    job_records::set_retired(c, &j)?;
                }
                Ok(())
            });
            // A sequence's batches are its SequenceRelocator's.
            if let Some(batch) = batch.filter(|_| !pending && !is_sequence) {
                act.retire_if_done(batch, ctx);
            }
            if let Some(reply) = reply {
                let _ = reply.send(BlahResult::ok());
            }
        });
    }
}
