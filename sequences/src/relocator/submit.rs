//! Moving a sequence on: its next attempt submitted through the
//! SubmitPipeline, stopped sequences purged, finished batches aborted and
//! retired.

use std::path::PathBuf;

use actix::prelude::*;
use gahp_protocol::boinc::{command_line, reply, request, Script, Templates};
use gahp_protocol::gahp::{InputFile, JobParams, JobSpec, SubmitBatch};

use super::*;
use crate::decide::{self, LiveAttempt, ServerState};
use crate::store::{Phase, SequenceDef, StepFile};
use gahp_project::rpc::{Rpc, RpcError};
use gahp_project::submit_pipeline::{CompactBatch, RunPipeline, SubmitError, SubmitPipeline};
use gahp_services::clock::unix_now;

impl SequenceRelocator {
    /// Purges the sequences stopped for longer than `purge_stopped_after`:
    /// the gridmanager cancels a `batch boinc` job alike for condor_hold
    /// and condor_rm, so one that is never resumed was removed. Its
    /// batches are retired and its files deleted; its record stays, so a
    /// release after all is told what happened.
    pub(super) fn purge_stopped(&mut self, ctx: &mut Context<Self>) {
        let (now, after) = (unix_now(), self.config.purge_stopped_after.as_secs_f64());
        let due: Vec<String> = self
            .seqs
            .iter()
            .filter(|(n, r)| r.phase == Phase::Stopped && !self.busy.contains(*n))
            .filter(|(_, r)| {
                let stopped = r.dead.iter().filter(|d| d.reason == STOPPED).map(|d| d.abandoned).fold(f64::NAN, f64::max);
                stopped.is_finite() && now - stopped > after
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            let Some(rec) = self.seqs.get_mut(&name) else { continue };
            rec.phase = Phase::Purged;
            rec.reason = Some(format!("purged: stopped (its job held or removed) and not resumed within {} s", after.round()));
            let retire = batches_left(rec, &name, rec.done + 1, 0);
            tracing::info!(sequence = %name, "purging a sequence stopped for more than {} s", after.round());
            self.save(&name);
            self.clean_up(None, retire, ctx);
            let (store, n, settled) = (self.store.clone(), name.clone(), CONTENT_SETTLED.min(self.config.purge_stopped_after));
            actix_rt::spawn(async move {
                match tokio::task::spawn_blocking(move || store.purge_files(&n, settled)).await {
                    Ok(Ok(n)) => tracing::info!(sequence = %name, files = n, "purged sequence's files deleted"),
                    Ok(Err(e)) => tracing::warn!(sequence = %name, "can't delete a purged sequence's files: {e}"),
                    Err(_) => {}
                }
            });
        }
    }

    /// Starts due steps and submits what is not on the server. Called after
    /// anything that may make a step due; it does not poll (polls keep to
    /// their interval, and to the deadlines of late steps).
    pub(super) fn advance(&mut self, ctx: &mut Context<Self>) {
        let now = unix_now();
        let names: Vec<String> = self.seqs.keys().filter(|n| !self.busy.contains(*n)).cloned().collect();
        for name in names {
            let Some(rec) = self.seqs.get_mut(&name) else { continue };
            if rec.phase != Phase::Running {
                continue;
            }
            if rec.live.is_none() {
                match decide::next_step(rec.done, rec.planned, rec.ended, false) {
                    Some(step) => {
                        let attempt = 1 + rec.dead.iter().filter(|d| d.step == step).map(|d| d.attempt).max().unwrap_or(0);
                        rec.live =
                            Some(LiveAttempt { step, attempt, submitted: now, first_in_progress: None, server: ServerState::Unknown });
                        self.unsubmitted.insert(name.clone());
                    }
                    None => rec.phase = Phase::Completed,
                }
                self.save(&name);
            }
            if self.unsubmitted.contains(&name) {
                self.submit(name, ctx);
            }
        }
    }

    pub(super) fn submit(&mut self, name: String, ctx: &mut Context<Self>) {
        let Some(rec) = self.seqs.get(&name) else { return };
        let Some(live) = rec.live else { return };
        self.busy.insert(name.clone());
        let job = decide::job_name(&name, live.step, live.attempt);
        let def = rec.def.clone();
        let app = def.app_name.clone();
        // A replacement (attempt 2 on) takes the urgent lane.
        let lane = if live.attempt > 1 { &self.urgent } else { &self.rpc };
        let (store, stager, rpc, key, config) =
            (self.store.clone(), self.stager.clone(), lane.clone(), self.key.clone(), self.config.clone());
        let db = self.store.db().clone();
        let templates = self.templates.get(&def.app_name).cloned();
        let deadline = self.deadline();
        let work = async move {
            let templates = match templates {
                Some(t) => t,
                None => rpc
                    .idempotent(
                        Script::SubmitRpcHandler,
                        request::get_templates_for_app(&key.authenticator, &def.app_name),
                        reply::parse_templates,
                        deadline,
                    )
                    .await
                    .map_err(|e| (e.is_transient(), format!("error getting templates: {e}")))?,
            };
            let (seq, step, names, paths) = (def.name.clone(), live.step, def.state_names.clone(), store.clone());
            let state = tokio::task::spawn_blocking(move || store.state_before(&seq, step, &names))
                .await
                .map_err(|e| (true, e.to_string()))?
                .map_err(|e| (true, e.to_string()))?;
            let inputs = step_inputs(&def, &templates, &state, |md5| paths.content_path(md5)).map_err(|e| (false, e))?;
            let args = command_line::quote_args(&def.args).map_err(|e| (false, e.to_string()))?;
            if templates.is_runner() {
                command_line::fits_wrapper(&def.args).map_err(|e| (false, e.to_string()))?;
            }
            let batch = SubmitBatch {
                batch_name: job.clone(),
                app_name: def.app_name.clone(),
                jobs: vec![JobSpec { name: job.clone(), args, inputs }],
                params: JobParams::default(),
            };
            let pipeline = SubmitPipeline::new(key, config, rpc, stager, db, CompactBatch::of(batch), deadline)
                .with_templates(templates.clone())
                .start();
            match pipeline.send(RunPipeline).await {
                Ok(Ok(())) => Ok(templates),
                Ok(Err(e)) => Err((submit_may_pass(&e), e.to_string())),
                Err(_) => Err((true, "the submit pipeline stopped".into())),
            }
        };
        ctx.spawn(work.into_actor(self).map(move |r, act, ctx| {
            act.busy.remove(&name);
            match r {
                Ok(templates) => {
                    act.templates.insert(app, templates);
                    act.unsubmitted.remove(&name);
                    // The grace of a step never sent runs from when it
                    // reached the server, not from when it was due (the
                    // submit may have queued for connections).
                    let same = |l: &LiveAttempt| l.step == live.step && l.attempt == live.attempt && l.first_in_progress.is_none();
                    if let Some(l) = act.seqs.get_mut(&name).and_then(|r| r.live.as_mut()).filter(|l| same(l)) {
                        l.submitted = unix_now();
                        act.save(&name);
                    }
                    let job = decide::job_name(&name, live.step, live.attempt);
                    if let Some(deadline) = act.replacing_late.remove(&job) {
                        let since_deadline_ms = ((unix_now() - deadline) * 1000.0).round() as i64;
                        tracing::info!(sequence = %name, step = live.step, attempt = live.attempt, since_deadline_ms, "replacement of a late step submitted");
                    }
                    let still_running = act.seqs.get(&name).is_some_and(|r| r.phase == Phase::Running);
                    if !still_running {
                        // Stopped or aborted while the submit was under way.
                        act.clean_up(Some(decide::job_name(&name, live.step, live.attempt)), Vec::new(), ctx);
                    }
                }
                Err((true, e)) => tracing::info!(sequence = %name, "submit of step {} will be retried: {}", live.step, act.key.authenticator.redact_in(&e)),
                Err((false, e)) => {
                    let reason = format!("step {} could not be submitted: {}", live.step, act.key.authenticator.redact_in(&e));
                    act.unsubmitted.remove(&name);
                    if let Some(rec) = act.seqs.get_mut(&name) {
                        rec.phase = Phase::Failed;
                        rec.reason = Some(reason);
                        rec.live = None;
                    }
                    act.save(&name);
                }
            }
        }));
    }

    /// Best effort: aborts `abort` (a job that is left is one more instance
    /// a host runs), then retires the batches in `retire` (those of a
    /// sequence that is over).
    /// The retires are recorded first and forgotten once done: a daemon
    /// killed in between does them when it resumes.
    pub(super) fn clean_up(&self, abort: Option<String>, retire: Vec<String>, ctx: &mut Context<Self>) {
        if let Err(e) = self.store.queue_retires(&retire) {
            tracing::error!(project = %self.key.url, "can't record batches to retire: {e}");
        }
        let (rpc, auth, deadline) = (self.rpc.clone(), self.key.authenticator.clone(), self.deadline());
        let store = self.store.clone();
        ctx.spawn(
            async move {
                if let Some(job) = abort {
                    if let Err(e) =
                        rpc.idempotent(Script::SubmitRpcHandler, request::abort_jobs(&auth, &[job]), reply::parse_success, deadline).await
                    {
                        tracing::info!("abort_jobs failed: {}", auth.redact_in(&e.to_string()));
                    }
                }
                for batch in retire {
                    let r = rpc
                        .idempotent(Script::SubmitRpcHandler, request::retire_batch(&auth, &batch), reply::parse_success, deadline)
                        .await;
                    // A BOINC error: the batch is not there to retire.
                    if matches!(r, Ok(()) | Err(RpcError::Boinc { .. })) {
                        let store = store.clone();
                        let done = tokio::task::spawn_blocking(move || store.retire_done(&batch)).await;
                        if let Ok(Err(e)) = done {
                            tracing::warn!("can't record a retired batch: {e}");
                        }
                    }
                }
            }
            .into_actor(self),
        );
    }
}

/// A submit failure that may pass: transient, or the project is down.
pub(super) fn submit_may_pass(e: &SubmitError) -> bool {
    e.project_down() || e.rpc().is_some_and(RpcError::outcome_unknown) || matches!(e, SubmitError::Internal(_))
}

/// The step's input files in the app's template order: a state file from
/// the content store, else the owner's input of that name.
pub(super) fn step_inputs(
    def: &SequenceDef,
    templates: &Templates,
    state: &[StepFile],
    content_path: impl Fn(&str) -> PathBuf,
) -> Result<Vec<InputFile>, String> {
    templates
        .inputs
        .iter()
        .map(|slot| {
            if let Some(f) = state.iter().find(|f| &f.name == slot) {
                return Ok(InputFile { src: content_path(&f.md5), dst_name: slot.clone() });
            }
            match def.inputs.iter().find(|(_, n)| n == slot) {
                Some((path, _)) => Ok(InputFile { src: path.clone(), dst_name: slot.clone() }),
                None => {
                    Err(format!("app {} takes an input {slot} that is neither a state file nor an input of the sequence", def.app_name))
                }
            }
        })
        .collect()
}
