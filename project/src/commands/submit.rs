//! `BOINC_SUBMIT`: a SubmitPipeline of its own stages the inputs, makes
//! the batch and submits its jobs; the typed error becomes the result's
//! one line here.

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::gahp::error_text::{one_line, MAX_HOLD_REASON};
use gahp_protocol::gahp::{CommandResult, SubmitBatch};

use super::{condor_job_of, Workers};
use crate::submit_pipeline::{CompactBatch, RunPipeline, SubmitPipeline};
use crate::templates::templates_of;

pub(super) fn run(w: &Workers, batch: SubmitBatch, deadline: Instant) -> ResponseFuture<CommandResult> {
    let auth = w.key.authenticator.clone();
    // Kept compactly from here on (names as `<batch>_<k>`, shared argument
    // and input lists), arguments as BOINC can carry them; refused before
    // anything is created.
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
    let templates = templates_of(&w.key, &w.rpc, &batch.app_name, deadline);
    let pipeline = SubmitPipeline::new(w.key.clone(), w.config.clone(), w.rpc.clone(), w.stager.clone(), w.db.clone(), batch, deadline)
        .with_shared_templates(templates)
        .with_submit_slots(w.submit_slots.clone())
        .start();
    Box::pin(async move {
        match pipeline.send(RunPipeline).await {
            Ok(Ok(())) => CommandResult::Ok,
            // The gridmanager holds the job with this text: one line; the
            // whole of a server's page goes to the log.
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

/// One log line per job of a batch whose submission failed: the
/// gridmanager holds each of them with `reason`.
fn log_failed_jobs(batch: &str, jobs: impl Iterator<Item = impl AsRef<str>>, reason: &str) {
    for job in jobs {
        let job = job.as_ref();
        tracing::warn!(condor_job = %condor_job_of(job), boinc_batch = %batch, boinc_job = %job, "submission failed: {reason}");
    }
}
