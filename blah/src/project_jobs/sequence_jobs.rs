//! A sequence job: its work sequence on the project's relocator, its
//! status from the sequence's, its final state delivered.

use actix::prelude::*;

use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::sequence_commands::{SequenceState, SequenceStatus, StepSelector};
use gahp_protocol::gahp::BlahResult;

use super::*;
use crate::outputs::{held_ad, place_sequence, sequence_ad, sequence_failed};
use crate::placement::pool_placement;
use crate::sequence_ad;
use gahp_broker::pools::pool_id;
use gahp_sequences::relocator::{FetchSequence, SequenceError};

impl ProjectJobs {
    /// A sequence job becomes one CreateSequence on the project's
    /// SequenceRelocator (which resumes the stopped sequence of a released
    /// job: same `JobDirectory`, same definition).
    pub(super) fn submit_sequence(&mut self, batch: String, name: String, submitted: BlahJob, ctx: &mut Context<Self>) {
        let app = submitted.app().cloned();
        let templates = app.as_ref().ok().and_then(|app| self.templates(&app.name));
        let relocator = self.sequences.clone();
        let (url, file) = (self.key.url.clone(), self.authenticator_file.display().to_string());
        let pool = pool_placement(&submitted, &self.config.blah).map(|p| pool_id(&p.pool));
        let cfg = self.config.blah.clone();
        let work = async move {
            let refuse = |why| BatchOutcome { refused: vec![(name.clone(), why)], result: Ok(vec![]) };
            let app = match app {
                Ok(a) => a,
                Err(e) => return refuse(SubmitFailure::Map(e)),
            };
            let (Some(relocator), Some(templates)) = (relocator, templates) else {
                return refuse(SubmitFailure::Lost(
                    "internal error: the project's work sequences are not available; condor_release the job",
                ));
            };
            let templates = match templates.await {
                Ok(t) => t,
                Err(e) => {
                    let reason = templates_error(&e, &url, &file, &app.name, app.source.as_str());
                    return BatchOutcome { refused: vec![], result: Err((vec![name.clone()], SubmitFailure::Templates(reason, e))) };
                }
            };
            let create = match &submitted.sequence {
                Some(settings) => sequence_ad::create_sequence(&submitted, settings, &templates, &cfg),
                None => return refuse(SubmitFailure::Lost("internal error: this job is no work sequence; condor_release the job")),
            };
            let mut create = match create {
                Ok(c) => c,
                Err(e) => return refuse(SubmitFailure::Sequence(e.hold_reason())),
            };
            // Placed by the pool: relocated within it.
            create.def.pool = pool;
            match relocator.send(create).await {
                Ok(Ok(())) => BatchOutcome { refused: vec![], result: Ok(vec![name.clone()]) },
                Ok(Err(e @ SequenceError::Purged(_))) => refuse(SubmitFailure::Sequence(e.to_string())),
                Ok(Err(e)) => refuse(SubmitFailure::Sequence(format!(
                    "the work sequence could not be created: {e}; condor_release the job to try again"
                ))),
                Err(_) => refuse(SubmitFailure::Lost("internal error: the project's work sequences stopped; condor_release the job")),
            }
        };
        self.run(ctx, work, move |act, outcome, ctx| act.submitted(batch, outcome, ctx));
    }

    /// A sequence job's status from its sequence: idle until a step runs,
    /// then running for the whole chain; its files placed once complete.
    pub(super) fn sequence_status(
        &mut self,
        job: &str,
        r: Result<Result<(SequenceState, bool), SequenceError>, MailboxError>,
        ctx: &mut Context<Self>,
    ) -> BlahResult {
        let error = |error: String| BlahResult::Status { code: 1, error, status: 0, ad: None };
        let Some(j) = self.jobs.get(job) else { return error("internal error: job not loaded".into()) };
        let busy = j.busy;
        let (state, started) = match r {
            Ok(Ok(s)) => s,
            Ok(Err(SequenceError::NoSuchSequence(name))) => {
                let reason = format!(
                    "the work sequence {name} of this job is not in the daemon's state database (was it lost?); \
                     condor_release the job to run it again from its initial state"
                );
                self.finish(job, job_status::HELD, held_ad(job, &reason));
                return self.final_status(job);
            }
            Ok(Err(e)) => return error(format!("can't query the work sequence of {job}: {e}")),
            Err(_) => return error("internal error: the project's work sequences stopped; try again".into()),
        };
        let status = match state.status {
            SequenceStatus::Running if started || busy => job_status::RUNNING,
            SequenceStatus::Running => job_status::IDLE,
            SequenceStatus::Completed | SequenceStatus::Failed => {
                if !busy {
                    self.finish_sequence(job, state.clone(), ctx);
                }
                job_status::RUNNING
            }
            SequenceStatus::Aborted => {
                let mut removed = sequence_ad(job, job_status::REMOVED, &state);
                let why = state.reason.as_deref().unwrap_or("aborted");
                removed.insert("RemoveReason", gahp_protocol::classad::Value::Str(format!("the work sequence was aborted: {why}")));
                self.finish(job, job_status::REMOVED, removed);
                return self.final_status(job);
            }
        };
        BlahResult::status(status, sequence_ad(job, status, &state))
    }

    /// A completed sequence's files placed in the job's directory (then
    /// status 4), or a failed one's reported as a failed BOINC job is.
    pub(super) fn finish_sequence(&mut self, job: &str, state: SequenceState, ctx: &mut Context<Self>) {
        let Some(j) = self.jobs.get_mut(job).filter(|j| j.recorded) else { return };
        j.busy = true;
        self.read_jobs(ctx, vec![job.to_string()], move |act, mut jobs, ctx| {
            if let Some((job, submitted)) = jobs.pop() {
                act.finish_sequence_with(&job, submitted, state, ctx);
            }
        });
    }

    fn finish_sequence_with(&mut self, job: &str, submitted: Option<BlahJob>, state: SequenceState, ctx: &mut Context<Self>) {
        let Some(j) = self.jobs.get_mut(job) else { return };
        let Some(submitted) = submitted else {
            j.busy = false;
            return;
        };
        let app = submitted.app.as_ref().map(|a| a.name.clone()).map_err(Clone::clone);
        let templates = app.as_ref().ok().and_then(|a| self.templates(a));
        let relocator = self.sequences.clone();
        // Fetched here whole, then placed by the rules of any job's outputs.
        let staged = self.config.state_dir.join("blah-sequence-out").join(job);
        let (b, prefix) = (job.to_string(), self.config.blah.name_prefix.clone());
        let work = async move {
            if state.status == SequenceStatus::Failed {
                return tokio::task::spawn_blocking(move || sequence_failed(&b, &submitted, &state))
                    .await
                    .map_err(|e| format!("internal error: {e}"))?;
            }
            let app = app?;
            let templates =
                templates.ok_or("the project has no HTTP client")?.await.map_err(|e| format!("error getting templates: {e}"))?;
            let relocator = relocator.ok_or("the project's work sequences are not available")?;
            let name = sequence_ad::sequence_name(&submitted, &prefix);
            let s = staged.clone();
            tokio::task::spawn_blocking(move || {
                let _ = std::fs::remove_dir_all(&s);
                std::fs::create_dir_all(&s)
            })
            .await
            .map_err(|e| format!("internal error: {e}"))?
            .map_err(|e| format!("can't make {}: {e}", staged.display()))?;
            relocator
                .send(FetchSequence { name, step: StepSelector::Latest, dir: staged.clone() })
                .await
                .map_err(|_| "the project's work sequences stopped".to_string())?
                .map_err(|e| e.to_string())?;
            tokio::task::spawn_blocking(move || {
                let placed = place_sequence(&b, &submitted, &app, &templates.outputs, &staged, &state);
                let _ = std::fs::remove_dir_all(&staged);
                placed.map(|done| (job_status::COMPLETED, done))
            })
            .await
            .map_err(|e| format!("internal error: {e}"))?
        };
        let job = job.to_string();
        self.run(ctx, work, move |act, r, _| act.settled(&job, r));
    }
}
