//! SequenceRelocator: the work sequences of one project account (one per
//! ProjectTree). It submits each step as a one-job batch through the
//! SubmitPipeline, watches every live step with one query_batch2 per poll,
//! collects a finished step's outputs into the content store, and relocates
//! a step that misses its deadline, errors or is lost: abort_jobs, a dead
//! branch, and a new attempt from the last completed state.
//!
//! Why one batch per step: steps of different sequences come due at
//! different times, so a shared batch would hold the next step of one
//! sequence until the others are ready; one-job batches cost a
//! create_batch and a retire_batch per step, while status stays one
//! query_batch2 per poll for all live steps. The batch's name is the job's
//! (`<sequence>#<step>#<attempt>`), which is what makes a submit after a
//! restart safe: the pipeline looks the batch up by name first, so an
//! attempt that reached the server is never submitted twice.
//!
//! The API (messages below) is what `BOINC_SEQUENCE_*` and the BLAH front
//! end use: Create (also resumes a stopped sequence of the same
//! definition), Extend, End, Query, Fetch, Abort, and Stop (aborts the
//! live step but keeps the sequence resumable).
//!
//! A sequence placed by a pool (`def.pool`) is relocated to the pool's
//! next-best project: its record moves, in one transaction, to that
//! project's relocator ([`AdoptSequence`]), and a note of the move stays
//! here, so a message sent here still reaches it (forwarded through the
//! broker).

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{command_line, reply, request, Script, Templates};
use gahp_protocol::gahp::sequence::{DeadBranch, SequenceState, StepSelector};
use gahp_protocol::gahp::{InputFile, JobParams, JobSpec, SubmitBatch};

use crate::atomic_file;
use crate::broker::pools::Pools;
use crate::broker::sequences::{NextProject, SequenceHolder};
use crate::clock::unix_now;
use crate::config::DaemonConfig;
use crate::file_stager::{md5_file, FileStager};
use crate::project::output_fetcher::check_output_names;
use crate::project::rpc::{Rpc, RpcClient, RpcError};
use crate::project::submit_pipeline::{RunPipeline, SubmitError, SubmitPipeline};
use crate::project::ProjectKey;
use crate::sequences::decide::{self, judge, LiveAttempt, Next, Relocation, ServerState};
use crate::sequences::store::{Phase, SequenceDef, SequenceRecord, SequenceStore, StepFile};
use crate::state_db::StateDb;

/// A dead branch left by the owner's stop (not a failure: it uses up no
/// attempt and is no relocation).
const STOPPED: &str = "stopped by owner";

/// A content file no sequence names is deleted once it is this old (a
/// younger one may be a new sequence's initial state, not yet recorded),
/// or `purge_stopped_after` if that is shorter.
const CONTENT_SETTLED: std::time::Duration = std::time::Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum SequenceError {
    #[error("no sequence named {0}")]
    NoSuchSequence(String),
    #[error("a sequence named {0} already exists with another definition")]
    Exists(String),
    #[error("sequence {0} is finished")]
    Finished(String),
    #[error("{0}")]
    Purged(String),
    #[error("sequence {name} has no completed step {step}")]
    NoSuchStep { name: String, step: u32 },
    #[error("invalid sequence: {0}")]
    Invalid(String),
    #[error("{0}")]
    Local(String),
    #[error("{0}")]
    Rpc(RpcError),
}

fn local(e: impl std::fmt::Display) -> SequenceError {
    SequenceError::Local(e.to_string())
}

/// Connections of the lane for status polls and relocations.
const URGENT_RPCS: usize = 2;

pub struct SequenceRelocator {
    key: ProjectKey,
    config: Arc<DaemonConfig>,
    rpc: Addr<RpcClient>,
    /// A lane of its own for status polls and relocations (the abort and the
    /// replacement's submit): with hundreds of sequences, the routine step
    /// traffic queues for the project's connections, and a replacement
    /// waiting behind it would start seconds after its step's deadline.
    urgent: Addr<RpcClient>,
    stager: Addr<FileStager>,
    store: SequenceStore,
    seqs: HashMap<String, SequenceRecord>,
    /// Live attempts not yet known to be on the server (just made, or held
    /// over a restart): submitted, idempotently by name, before polled.
    unsubmitted: HashSet<String>,
    /// Sequences with an RPC or file work in flight.
    busy: HashSet<String>,
    polling: bool,
    /// Live attempts with a timer at their deadline (job names).
    timed: HashSet<String>,
    templates: HashMap<String, Templates>,
    /// Attempts that replace one that missed its deadline, by job name:
    /// that deadline (seconds since the epoch), to log how long the
    /// replacement took to reach the server.
    replacing_late: HashMap<String, f64>,
    /// The broker: where a pool sequence goes next, and where one that
    /// moved away is now.
    pools: Option<Addr<Pools>>,
}

impl SequenceRelocator {
    pub fn new(
        key: ProjectKey,
        config: Arc<DaemonConfig>,
        rpc: Addr<RpcClient>,
        stager: Addr<FileStager>,
        db: StateDb,
        pools: Option<Addr<Pools>>,
    ) -> Self {
        let account = key.account();
        let store = SequenceStore::new(db, &config.state_dir, &key.url, &account);
        let lane = DaemonConfig { max_concurrent_rpcs: URGENT_RPCS, ..(*config).clone() };
        let urgent = RpcClient::new(key.clone(), Arc::new(lane)).start();
        SequenceRelocator {
            key,
            config,
            rpc,
            urgent,
            stager,
            store,
            seqs: HashMap::new(),
            unsubmitted: HashSet::new(),
            busy: HashSet::new(),
            polling: false,
            timed: HashSet::new(),
            templates: HashMap::new(),
            replacing_late: HashMap::new(),
            pools,
        }
    }

    fn save(&self, name: &str) {
        if let Some(rec) = self.seqs.get(name) {
            if let Err(e) = self.store.save(rec) {
                tracing::error!(sequence = name, "can't save the sequence: {e}");
            }
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.config.command_timeout
    }

    /// One round, every `sequence_poll`: [`advance`](Self::advance), then
    /// poll the live steps and act on what the poll says.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.purge_stopped(ctx);
        self.advance(ctx);
        self.poll(ctx);
    }

    /// Purges the sequences stopped for longer than `purge_stopped_after`:
    /// the gridmanager cancels a `batch boinc` job alike for condor_hold
    /// and condor_rm, so one that is never resumed was removed. Its
    /// batches are retired and its files deleted; its record stays, so a
    /// release after all is told what happened.
    fn purge_stopped(&mut self, ctx: &mut Context<Self>) {
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
    fn advance(&mut self, ctx: &mut Context<Self>) {
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

    fn submit(&mut self, name: String, ctx: &mut Context<Self>) {
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
            let batch = SubmitBatch {
                batch_name: job.clone(),
                app_name: def.app_name.clone(),
                jobs: vec![JobSpec { name: job.clone(), args, inputs }],
                params: JobParams::default(),
            };
            let pipeline = SubmitPipeline::new(key, config, rpc, stager, db, batch, deadline).with_templates(templates.clone()).start();
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
    fn clean_up(&self, abort: Option<String>, retire: Vec<String>, ctx: &mut Context<Self>) {
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

    fn poll(&mut self, ctx: &mut Context<Self>) {
        if self.polling {
            return;
        }
        let jobs: Vec<(String, String)> = self
            .seqs
            .iter()
            .filter(|(n, r)| r.phase == Phase::Running && !self.busy.contains(*n) && !self.unsubmitted.contains(*n))
            .filter_map(|(n, r)| r.live.map(|l| (n.clone(), decide::job_name(n, l.step, l.attempt))))
            .collect();
        if jobs.is_empty() {
            return;
        }
        self.polling = true;
        let (rpc, auth, deadline) = (self.urgent.clone(), self.key.authenticator.clone(), self.deadline());
        let work = async move {
            let names: Vec<String> = jobs.iter().map(|(_, j)| j.clone()).collect();
            let states = match rpc
                .idempotent(Script::SubmitRpcHandler, request::query_batch2(&auth, 0.0, &names), reply::parse_query_batch2, deadline)
                .await
            {
                Ok(states) => states.batches.into_iter().zip(&names).map(|(group, job)| job_state(&group, job)).collect(),
                // One batch the server does not know fails the whole call:
                // ask one by one to find it.
                Err(RpcError::Boinc { .. }) => {
                    let mut each = Vec::with_capacity(names.len());
                    for job in &names {
                        let one = rpc
                            .idempotent(
                                Script::SubmitRpcHandler,
                                request::query_batch2(&auth, 0.0, std::slice::from_ref(job)),
                                reply::parse_query_batch2,
                                deadline,
                            )
                            .await;
                        each.push(match one {
                            Ok(s) => s.batches.first().map(|g| job_state(g, job)).unwrap_or(ServerState::Missing),
                            Err(RpcError::Boinc { .. }) => ServerState::Missing,
                            Err(_) => ServerState::Unknown,
                        });
                    }
                    each
                }
                Err(e) => {
                    tracing::info!("sequence poll failed: {}", auth.redact_in(&e.to_string()));
                    Vec::new()
                }
            };
            (jobs, states)
        };
        ctx.spawn(work.into_actor(self).map(|(jobs, states), act, ctx| {
            act.polling = false;
            let now = unix_now();
            for ((name, job), state) in jobs.into_iter().zip(states) {
                act.observe(&name, &job, state, now, ctx);
            }
        }));
    }

    /// Asks for `job`'s status at its deadline (seconds since the epoch) if
    /// it is still live then, so that a missed deadline is acted on at once
    /// rather than at the next regular poll (up to a poll interval later).
    fn poll_at_deadline(&mut self, name: &str, job: String, deadline: f64, ctx: &mut Context<Self>) {
        if !self.timed.insert(job.clone()) {
            return;
        }
        // A hair after it: the verdict needs the deadline passed.
        let wait = std::time::Duration::from_secs_f64((deadline - unix_now()).max(0.0) + 0.001);
        let name = name.to_string();
        ctx.run_later(wait, move |act, ctx| {
            act.timed.remove(&job);
            let still_live = act
                .seqs
                .get(&name)
                .is_some_and(|r| r.phase == Phase::Running && r.live.is_some_and(|l| decide::job_name(&name, l.step, l.attempt) == job));
            if !still_live {
                return;
            }
            if act.busy.contains(&name) {
                return;
            }
            // This job alone: a poll of every live step may be under way
            // and takes longer.
            let (rpc, auth, deadline) = (act.urgent.clone(), act.key.authenticator.clone(), act.deadline());
            let one = job.clone();
            let work = async move {
                rpc.idempotent(
                    Script::SubmitRpcHandler,
                    request::query_batch2(&auth, 0.0, std::slice::from_ref(&one)),
                    reply::parse_query_batch2,
                    deadline,
                )
                .await
                .map(|s| s.batches.first().map(|g| job_state(g, &one)).unwrap_or(ServerState::Missing))
            };
            ctx.spawn(work.into_actor(act).map(move |r, act, ctx| match r {
                Ok(state) => act.observe(&name, &job, state, unix_now(), ctx),
                Err(RpcError::Boinc { .. }) => act.observe(&name, &job, ServerState::Missing, unix_now(), ctx),
                // The next regular poll asks again.
                Err(e) => {
                    tracing::info!(sequence = %name, "status at the deadline failed: {}", act.key.authenticator.redact_in(&e.to_string()))
                }
            }));
        });
    }

    /// Applies one polled status and acts on the verdict.
    fn observe(&mut self, name: &str, job: &str, state: ServerState, now: f64, ctx: &mut Context<Self>) {
        if self.busy.contains(name) {
            return;
        }
        let Some(rec) = self.seqs.get_mut(name) else { return };
        let Some(live) = rec.live.as_mut() else { return };
        if rec.phase != Phase::Running || decide::job_name(name, live.step, live.attempt) != job {
            return;
        }
        live.server = state;
        if state == ServerState::InProgress && live.first_in_progress.is_none() {
            live.first_in_progress = Some(now);
            self.save(name);
        }
        let Some(rec) = self.seqs.get(name) else { return };
        let Some(live) = rec.live else { return };
        let limits = decide::Limits {
            max_step_time: f64::from(rec.def.max_step_time),
            max_attempts: rec.def.max_attempts,
            unsent_grace: 2.0 * self.config.sequence_poll.as_secs_f64(),
        };
        let failures = rec.dead.iter().filter(|d| d.step == live.step && d.reason != STOPPED).count() as u32;
        match judge(&live, &limits, failures, now) {
            Next::Wait => {
                if let Some(seen) = live.first_in_progress {
                    self.poll_at_deadline(name, job.to_string(), seen + limits.max_step_time, ctx);
                }
            }
            Next::Collect => self.collect(name.to_string(), live, ctx),
            Next::Relocate { why, attempt } => self.relocate(name.to_string(), live, why, Some(attempt), ctx),
            Next::Fail { why } => self.relocate(name.to_string(), live, why, None, ctx),
        }
    }

    /// Aborts the attempt, then records its dead branch and either the next
    /// attempt (`Some`) or the sequence's failure.
    fn relocate(&mut self, name: String, live: LiveAttempt, why: Relocation, next: Option<u32>, ctx: &mut Context<Self>) {
        self.busy.insert(name.clone());
        let job = decide::job_name(&name, live.step, live.attempt);
        let (rpc, auth, deadline) = (self.urgent.clone(), self.key.authenticator.clone(), self.deadline());
        let work = async move {
            rpc.idempotent(Script::SubmitRpcHandler, request::abort_jobs(&auth, &[job]), reply::parse_success, deadline).await
        };
        ctx.spawn(work.into_actor(self).map(move |r, act, ctx| {
            act.busy.remove(&name);
            // A BOINC error (the job is already gone) still frees the step; a
            // transient one leaves the attempt for the next poll to retry.
            if let Err(e) = &r {
                if !matches!(e, RpcError::Boinc { .. }) {
                    tracing::info!(sequence = %name, "abort of step {} will be retried", live.step);
                    return;
                }
            }
            let now = unix_now();
            let Some(rec) = act.seqs.get_mut(&name) else { return };
            let branch = DeadBranch {
                step: live.step,
                attempt: live.attempt,
                reason: why.reason().into(),
                submitted: live.submitted,
                abandoned: now,
            };
            rec.dead.push(branch.clone());
            // The deadline it missed, if that is why: to log how late its
            // replacement is.
            let late = match (&why, live.first_in_progress) {
                (Relocation::DeadlineMissed, Some(seen)) => Some(seen + f64::from(rec.def.max_step_time)),
                _ => None,
            };
            if let (Some(pool), Some(pools), Some(_)) = (rec.def.pool.clone(), act.pools.clone(), next) {
                // The next attempt is made where the sequence goes.
                rec.relocations += 1;
                rec.live = None;
                if let Err(e) = act.store.bury(rec, &branch) {
                    tracing::error!(sequence = %name, "can't record a dead branch: {e}");
                }
                tracing::info!(sequence = %name, step = live.step, "relocating within pool {pool}: {}", why.reason());
                act.move_on(name, pool, pools, live.step, late, ctx);
                return;
            }
            match next {
                Some(attempt) => {
                    rec.relocations += 1;
                    rec.live = Some(LiveAttempt {
                        step: live.step,
                        attempt,
                        submitted: now,
                        first_in_progress: None,
                        server: ServerState::Unknown,
                    });
                    act.unsubmitted.insert(name.clone());
                    if let Some(deadline) = late {
                        act.replacing_late.insert(decide::job_name(&name, live.step, attempt), deadline);
                    }
                    tracing::info!(sequence = %name, step = live.step, attempt, "relocating: {}", why.reason());
                }
                None => {
                    rec.phase = Phase::Failed;
                    rec.live = None;
                    rec.reason = Some(format!("step {} failed {} times, last: {}", live.step, rec.def.max_attempts, why.reason()));
                }
            }
            // A failed sequence needs none of its batches any more.
            if let Some(rec) = act.seqs.get(&name).filter(|r| r.phase == Phase::Failed) {
                act.clean_up(None, batches_left(rec, &name, live.step, live.attempt), ctx);
            }
            if let Some(rec) = act.seqs.get(&name) {
                if let Err(e) = act.store.bury(rec, &branch) {
                    tracing::error!(sequence = %name, "can't record a dead branch: {e}");
                }
            }
            act.advance(ctx);
        }));
    }

    /// Downloads a finished step's outputs into the content store.
    fn collect(&mut self, name: String, live: LiveAttempt, ctx: &mut Context<Self>) {
        let Some(rec) = self.seqs.get(&name) else { return };
        self.busy.insert(name.clone());
        let job = decide::job_name(&name, live.step, live.attempt);
        let (rpc, key, store, deadline) = (self.rpc.clone(), self.key.clone(), self.store.clone(), self.deadline());
        let (app, marker) = (rec.def.app_name.clone(), rec.def.end_marker.clone());
        let cached = self.templates.get(&app).cloned();
        let work = async move {
            let templates = match cached {
                Some(t) => t,
                None => rpc
                    .idempotent(
                        Script::SubmitRpcHandler,
                        request::get_templates_for_app(&key.authenticator, &app),
                        reply::parse_templates,
                        deadline,
                    )
                    .await
                    .map_err(|e| e.to_string())?,
            };
            check_output_names(&templates)?;
            let mut files = Vec::new();
            for (i, out) in templates.outputs.iter().enumerate() {
                let incoming = store.content_path("incoming");
                std::fs::create_dir_all(incoming.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
                let tmp = atomic_file::temp_beside(&incoming).map_err(|e| e.to_string())?;
                let url = request::output_url(&key.url, &key.authenticator, &job, i);
                match rpc.download(url, tmp.path().to_path_buf(), deadline).await {
                    Ok(_) => {}
                    // An optional output the step did not write (a heartbeat).
                    Err(RpcError::Boinc { msg, .. }) if msg.contains("no such file") => continue,
                    Err(e) => return Err(e.to_string()),
                }
                let kept = store.clone();
                let md5 = tokio::task::spawn_blocking(move || -> io::Result<String> {
                    let md5 = md5_file(tmp.path())?;
                    let dest = kept.content_path(&md5);
                    if !dest.exists() {
                        atomic_file::persist(tmp, &dest)?;
                    }
                    Ok(md5)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                files.push(StepFile { name: out.clone(), md5 });
            }
            let marker_seen = marker.is_some_and(|m| files.iter().any(|f| f.name == m));
            Ok::<_, String>((templates, files, marker_seen))
        };
        ctx.spawn(work.into_actor(self).map(move |r, act, ctx| {
            act.busy.remove(&name);
            let (templates, files, marker_seen) = match r {
                Ok(v) => v,
                Err(e) => {
                    tracing::info!(sequence = %name, "collecting step {} will be retried: {}", live.step, act.key.authenticator.redact_in(&e));
                    return;
                }
            };
            if let Err(e) = act.store.put_files(&name, live.step, &files) {
                tracing::error!(sequence = %name, "can't record step {}'s files: {e}", live.step);
                return;
            }
            let Some(rec) = act.seqs.get_mut(&name) else { return };
            act.templates.insert(rec.def.app_name.clone(), templates);
            rec.done = live.step;
            rec.live = None;
            rec.ended |= marker_seen;
            if decide::next_step(rec.done, rec.planned, rec.ended, false).is_none() {
                rec.phase = Phase::Completed;
            }
            act.save(&name);
            // Batches no longer needed on the server: those of the step
            // before this one, dead branches included (this step's still tie
            // the inputs the next step shares, so retiring them now would
            // make them upload again), and this step's once the sequence is
            // over.
            let Some(rec) = act.seqs.get(&name) else { return };
            let finished = rec.phase == Phase::Completed;
            let mut retire = Vec::new();
            for step in [live.step.saturating_sub(1), if finished { live.step } else { 0 }] {
                if step > 0 {
                    retire.extend(attempt_batches(rec, &name, step, 0));
                }
            }
            act.clean_up(None, retire, ctx);
            act.advance(ctx);
        }));
    }

    /// Hands a pool sequence whose step was abandoned on this project to
    /// the pool's next-best project; if there is none (or the move fails),
    /// the next attempt is made here.
    fn move_on(&mut self, name: String, pool: String, pools: Addr<Pools>, step: u32, late: Option<f64>, ctx: &mut Context<Self>) {
        let Some(rec) = self.seqs.get(&name) else { return };
        // No attempt is made here while the broker is asked.
        self.busy.insert(name.clone());
        let state_paths = match self.store.state_before(&name, step, &rec.def.state_names) {
            Ok(files) => files.iter().map(|f| self.store.content_path(&f.md5)).collect::<Vec<_>>(),
            Err(e) => {
                tracing::error!(sequence = %name, "can't read the state to relocate: {e}");
                Vec::new()
            }
        };
        let mut inputs = state_paths;
        inputs.extend(rec.def.inputs.iter().map(|(p, _)| p.clone()));
        let ask = NextProject { pool, name: name.clone(), app: rec.def.app_name.clone(), inputs, from: self.key.clone() };
        ctx.spawn(pools.send(ask).into_actor(self).map(move |r, act, ctx| {
            let next = match r {
                Ok(Ok(next)) => next,
                Ok(Err(e)) => {
                    tracing::info!(sequence = %name, "no other project of the pool takes the step: {e}");
                    None
                }
                Err(_) => None,
            };
            let moved = next.and_then(|(key, relocator)| {
                let to = SequenceStore::new(act.store.db().clone(), &act.config.state_dir, &key.url, &key.account());
                let pool = act.seqs.get(&name)?.def.pool.clone()?;
                match act.store.move_to(&to, &name, &pool) {
                    Ok(()) => Some((key, relocator)),
                    Err(e) => {
                        tracing::warn!(sequence = %name, project = %key.url, "can't move the sequence: {e}");
                        None
                    }
                }
            });
            act.busy.remove(&name);
            let Some((key, relocator)) = moved else {
                // Here, then.
                act.advance(ctx);
                return;
            };
            tracing::info!(sequence = %name, project = %key.url, "sequence moved to another project of its pool");
            act.unsubmitted.remove(&name);
            if let Some(rec) = act.seqs.remove(&name) {
                // Nothing of it is needed here any more.
                act.clean_up(None, batches_left(&rec, &name, step, 0), ctx);
            }
            relocator.do_send(AdoptSequence { name, late_deadline: late });
        }));
    }

    /// The pool of a sequence that is not here because it moved away.
    fn moved_away(&self, name: &str) -> Option<String> {
        if self.seqs.contains_key(name) {
            return None;
        }
        self.store.moved_away(name).unwrap_or_else(|e| {
            tracing::error!(sequence = name, "can't read where the sequence went: {e}");
            None
        })
    }

    /// Sends `msg` on to the relocator that holds sequence `name` of `pool`
    /// now.
    fn forward<M, T>(&self, pool: String, name: String, msg: M, ctx: &Context<Self>) -> ResponseFuture<Result<T, SequenceError>>
    where
        M: Message<Result = Result<T, SequenceError>> + Send + 'static,
        T: Send + 'static,
        SequenceRelocator: Handler<M>,
    {
        let (pools, me) = (self.pools.clone(), ctx.address());
        Box::pin(async move {
            let pools = pools.ok_or_else(|| SequenceError::NoSuchSequence(name.clone()))?;
            let holder = pools
                .send(SequenceHolder { pool, name: name.clone() })
                .await
                .map_err(|_| local("internal error: the broker stopped"))?
                .map_err(SequenceError::Local)?;
            match holder {
                Some(relocator) if relocator != me => {
                    relocator.send(msg).await.map_err(|_| local("internal error: the sequence worker stopped"))?
                }
                _ => Err(SequenceError::NoSuchSequence(name)),
            }
        })
    }

    fn record(&self, name: &str) -> Result<&SequenceRecord, SequenceError> {
        self.seqs.get(name).ok_or_else(|| SequenceError::NoSuchSequence(name.into()))
    }

    /// Stops the sequence in `phase`, aborting its live step.
    fn halt(&mut self, name: &str, phase: Phase, reason: Option<String>, ctx: &mut Context<Self>) -> Result<(), SequenceError> {
        let rec = self.seqs.get_mut(name).ok_or_else(|| SequenceError::NoSuchSequence(name.into()))?;
        if rec.phase.finished() {
            return Err(SequenceError::Finished(name.into()));
        }
        rec.phase = phase;
        rec.reason = reason;
        let live = rec.live.take();
        if let Some(live) = live {
            let branch = DeadBranch {
                step: live.step,
                attempt: live.attempt,
                reason: STOPPED.into(),
                submitted: live.submitted,
                abandoned: unix_now(),
            };
            rec.dead.push(branch.clone());
            self.store.bury(rec, &branch).map_err(local)?;
            // An aborted sequence needs none of its batches any more.
            let retire = if phase == Phase::Aborted { batches_left(rec, name, live.step, live.attempt) } else { Vec::new() };
            self.unsubmitted.remove(name);
            self.replacing_late.remove(&decide::job_name(name, live.step, live.attempt));
            self.clean_up(Some(decide::job_name(name, live.step, live.attempt)), retire, ctx);
        } else {
            self.store.save(rec).map_err(local)?;
        }
        Ok(())
    }
}

/// The batches of every attempt of `step` (there is one per attempt, named
/// like its job): attempts of its dead branches, the one that completed it,
/// and at least `upto`. None for step 0.
fn attempt_batches(rec: &SequenceRecord, name: &str, step: u32, upto: u32) -> Vec<String> {
    if step == 0 {
        return Vec::new();
    }
    let dead = rec.dead.iter().filter(|d| d.step == step).map(|d| d.attempt).max().unwrap_or(0);
    // A completed step's attempt comes after all its dead ones.
    let last = if step <= rec.done { dead + 1 } else { dead }.max(upto);
    (1..=last).map(|a| decide::job_name(name, step, a)).collect()
}

/// The batches a sequence still has on the server (those of earlier steps
/// are retired as it goes): its last completed step's and every attempt of
/// step `current`, at least `upto`.
fn batches_left(rec: &SequenceRecord, name: &str, current: u32, upto: u32) -> Vec<String> {
    let mut all = attempt_batches(rec, name, rec.done, 0);
    all.extend(attempt_batches(rec, name, current, upto));
    all
}

/// A submit failure that may pass: transient, or the project is down.
fn submit_may_pass(e: &SubmitError) -> bool {
    e.project_down() || e.rpc().is_some_and(RpcError::outcome_unknown) || matches!(e, SubmitError::Internal(_))
}

fn job_state(group: &[gahp_protocol::boinc::JobState], job: &str) -> ServerState {
    group.iter().find(|j| j.name == job).map(|j| ServerState::from_status(&j.status)).unwrap_or(ServerState::Missing)
}

/// The step's input files in the app's template order: a state file from
/// the content store, else the owner's input of that name.
fn step_inputs(
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

impl Actor for SequenceRelocator {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match self.store.load_all() {
            Ok(all) => {
                for rec in all {
                    // A live attempt held over a restart may or may not have
                    // reached the server: the submit finds out by name.
                    if rec.phase == Phase::Running && rec.live.is_some() {
                        self.unsubmitted.insert(rec.def.name.clone());
                    }
                    self.seqs.insert(rec.def.name.clone(), rec);
                }
                if !self.seqs.is_empty() {
                    tracing::info!(project = %self.key.url, sequences = self.seqs.len(), "resuming work sequences");
                }
            }
            Err(e) => tracing::error!(project = %self.key.url, "can't load the work sequences: {e}"),
        }
        match self.store.retires_due() {
            Ok(due) if !due.is_empty() => self.clean_up(None, due, ctx),
            Ok(_) => {}
            Err(e) => tracing::error!(project = %self.key.url, "can't read the batches to retire: {e}"),
        }
        ctx.run_interval(self.config.sequence_poll, |act, ctx| act.tick(ctx));
        self.tick(ctx);
    }
}

/// Creates a sequence, or resumes a stopped one of the same definition
/// (HTCondor's hold then release). Creating a running sequence again with
/// the same definition is a no-op (a retried command).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), SequenceError>")]
pub struct CreateSequence {
    pub def: SequenceDef,
    /// Planned steps.
    pub steps: u32,
    /// The initial state files: (local path, state file name).
    pub state_files: Vec<(PathBuf, String)>,
}

impl Handler<CreateSequence> for SequenceRelocator {
    type Result = ResponseActFuture<Self, Result<(), SequenceError>>;

    fn handle(&mut self, msg: CreateSequence, ctx: &mut Context<Self>) -> Self::Result {
        let name = msg.def.name.clone();
        if let Some(pool) = self.moved_away(&name) {
            return Box::pin(fut::wrap_future(self.forward(pool, name, msg, ctx)));
        }
        if let Some(rec) = self.seqs.get_mut(&name) {
            let r = if rec.def != msg.def {
                Err(SequenceError::Exists(name.clone()))
            } else if rec.phase == Phase::Purged {
                let why = rec.reason.as_deref().unwrap_or("purged");
                Err(SequenceError::Purged(format!("sequence {name} was {why}; submit the job anew")))
            } else if rec.phase == Phase::Stopped {
                rec.phase = Phase::Running;
                rec.reason = None;
                Ok(())
            } else {
                Ok(())
            };
            if r.is_ok() {
                self.save(&name);
            }
            return Box::pin(fut::ready(r).map(|r, act: &mut Self, ctx| {
                act.advance(ctx);
                r
            }));
        }
        let CreateSequence { def, steps, state_files } = msg;
        let store = self.store.clone();
        let work = async move {
            if let Some(why) = decide::bad_name(&def.name) {
                return Err(SequenceError::Invalid(format!("the name {:?} can't name BOINC jobs: {why}", def.name)));
            }
            if steps == 0 || def.max_step_time == 0 || def.max_attempts == 0 {
                return Err(SequenceError::Invalid("steps, max step time and max attempts must be at least 1".into()));
            }
            if state_files.is_empty() || def.state_names.len() != state_files.len() {
                return Err(SequenceError::Invalid("the state files do not match the definition".into()));
            }
            let rec = SequenceRecord {
                def,
                planned: steps,
                done: 0,
                phase: Phase::Running,
                ended: false,
                reason: None,
                relocations: 0,
                live: None,
                dead: Vec::new(),
            };
            tokio::task::spawn_blocking(move || {
                let mut initial = Vec::new();
                for (path, file) in &state_files {
                    let md5 =
                        store.keep(path).map_err(|e| SequenceError::Local(format!("can't read state file {}: {e}", path.display())))?;
                    initial.push(StepFile { name: file.clone(), md5 });
                }
                store.put_files(&rec.def.name, 0, &initial).map_err(local)?;
                store.save(&rec).map_err(local)?;
                Ok(rec)
            })
            .await
            .map_err(local)?
        };
        Box::pin(work.into_actor(self).map(|r, act, ctx| {
            let rec = r?;
            act.seqs.insert(rec.def.name.clone(), rec);
            act.advance(ctx);
            Ok(())
        }))
    }
}

/// Adds steps after the last planned one (reopens a sequence that
/// completed because its plan ran out).
#[derive(Message)]
#[rtype(result = "Result<(), SequenceError>")]
pub struct ExtendSequence {
    pub name: String,
    pub steps: u32,
}

impl Handler<ExtendSequence> for SequenceRelocator {
    type Result = ResponseFuture<Result<(), SequenceError>>;
    fn handle(&mut self, msg: ExtendSequence, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(pool) = self.moved_away(&msg.name) {
            return self.forward(pool, msg.name.clone(), msg, ctx);
        }
        Box::pin(std::future::ready(self.extend(msg, ctx)))
    }
}

impl SequenceRelocator {
    fn extend(&mut self, msg: ExtendSequence, ctx: &mut Context<Self>) -> Result<(), SequenceError> {
        let rec = self.seqs.get_mut(&msg.name).ok_or_else(|| SequenceError::NoSuchSequence(msg.name.clone()))?;
        let reopen = rec.phase == Phase::Completed && !rec.ended;
        if rec.phase.finished() && !reopen {
            return Err(SequenceError::Finished(msg.name));
        }
        rec.planned = decide::extend(rec.planned, msg.steps);
        if reopen {
            rec.phase = Phase::Running;
        }
        self.store.save(rec).map_err(local)?;
        self.advance(ctx);
        Ok(())
    }
}

/// No step after the current one.
#[derive(Message)]
#[rtype(result = "Result<(), SequenceError>")]
pub struct EndSequence {
    pub name: String,
}

impl Handler<EndSequence> for SequenceRelocator {
    type Result = ResponseFuture<Result<(), SequenceError>>;
    fn handle(&mut self, msg: EndSequence, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(pool) = self.moved_away(&msg.name) {
            return self.forward(pool, msg.name.clone(), msg, ctx);
        }
        Box::pin(std::future::ready(self.end(msg, ctx)))
    }
}

impl SequenceRelocator {
    fn end(&mut self, msg: EndSequence, ctx: &mut Context<Self>) -> Result<(), SequenceError> {
        let rec = self.seqs.get_mut(&msg.name).ok_or_else(|| SequenceError::NoSuchSequence(msg.name.clone()))?;
        if !rec.phase.finished() {
            rec.ended = true;
            self.store.save(rec).map_err(local)?;
            self.advance(ctx);
        }
        Ok(())
    }
}

/// Where the sequence stands (`BOINC_SEQUENCE_QUERY`).
#[derive(Message)]
#[rtype(result = "Result<SequenceState, SequenceError>")]
pub struct QuerySequence {
    pub name: String,
}

impl Handler<QuerySequence> for SequenceRelocator {
    type Result = ResponseFuture<Result<SequenceState, SequenceError>>;
    fn handle(&mut self, msg: QuerySequence, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(pool) = self.moved_away(&msg.name) {
            return self.forward(pool, msg.name.clone(), msg, ctx);
        }
        Box::pin(std::future::ready(self.record(&msg.name).map(|rec| self.state_of(rec))))
    }
}

impl SequenceRelocator {
    fn state_of(&self, rec: &SequenceRecord) -> SequenceState {
        SequenceState {
            status: rec.phase.status(),
            steps_done: rec.done,
            steps_planned: rec.planned,
            current_step: rec.live.map_or(0, |l| l.step),
            attempt: rec.live.map_or(0, |l| l.attempt),
            relocations: rec.relocations,
            project_url: self.key.url.clone(),
            reason: rec.reason.clone(),
            dead_branches: rec.dead.clone(),
        }
    }
}

/// [`QuerySequence`], and whether the work began (a step completed, or the
/// live one was seen running): HTCondor's running, not idle, job.
#[derive(Message)]
#[rtype(result = "Result<(SequenceState, bool), SequenceError>")]
pub struct QueryStarted {
    pub name: String,
}

impl Handler<QueryStarted> for SequenceRelocator {
    type Result = ResponseFuture<Result<(SequenceState, bool), SequenceError>>;
    fn handle(&mut self, msg: QueryStarted, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(pool) = self.moved_away(&msg.name) {
            return self.forward(pool, msg.name.clone(), msg, ctx);
        }
        Box::pin(std::future::ready(self.record(&msg.name).map(|rec| {
            let started = rec.done > 0 || rec.live.is_some_and(|l| l.first_in_progress.is_some());
            (self.state_of(rec), started)
        })))
    }
}

/// Writes a completed step's files (its outputs, and the state it left)
/// into `dir`, each whole or not at all; yields the step and file names.
#[derive(Message)]
#[rtype(result = "Result<(u32, Vec<String>), SequenceError>")]
pub struct FetchSequence {
    pub name: String,
    pub step: StepSelector,
    pub dir: PathBuf,
}

impl Handler<FetchSequence> for SequenceRelocator {
    type Result = ResponseFuture<Result<(u32, Vec<String>), SequenceError>>;
    fn handle(&mut self, msg: FetchSequence, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(pool) = self.moved_away(&msg.name) {
            return self.forward(pool, msg.name.clone(), msg, ctx);
        }
        let checked = self.record(&msg.name).and_then(|rec| {
            let step = match msg.step {
                StepSelector::Latest => rec.done,
                StepSelector::Step(n) => n,
            };
            if step == 0 || step > rec.done {
                return Err(SequenceError::NoSuchStep { name: msg.name.clone(), step });
            }
            Ok((step, rec.def.state_names.clone()))
        });
        let store = self.store.clone();
        Box::pin(async move {
            let (step, state_names) = checked?;
            tokio::task::spawn_blocking(move || {
                let mut files = store.files(&msg.name, step).map_err(local)?;
                // A heartbeat step wrote no state: the state it left is older.
                for carried in store.state_before(&msg.name, step, &state_names).map_err(local)? {
                    if !files.iter().any(|f| f.name == carried.name) {
                        files.push(carried);
                    }
                }
                let mut names = Vec::with_capacity(files.len());
                for f in files {
                    let dest = msg.dir.join(&f.name);
                    copy_whole(&store.content_path(&f.md5), &dest)
                        .map_err(|e| SequenceError::Local(format!("can't write {}: {e}", dest.display())))?;
                    names.push(f.name);
                }
                names.sort();
                Ok((step, names))
            })
            .await
            .map_err(local)?
        })
    }
}

/// Streams `src` to `dest` through a temporary file and a rename.
pub(crate) fn copy_whole(src: &Path, dest: &Path) -> io::Result<()> {
    let mut input = std::fs::File::open(src)?;
    atomic_file::write_whole(dest, |out| io::copy(&mut input, out).map(drop))
}

/// Aborts the live step and ends the sequence for good (`ABORTED`).
#[derive(Message)]
#[rtype(result = "Result<(), SequenceError>")]
pub struct AbortSequence {
    pub name: String,
}

impl Handler<AbortSequence> for SequenceRelocator {
    type Result = ResponseFuture<Result<(), SequenceError>>;
    fn handle(&mut self, msg: AbortSequence, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(pool) = self.moved_away(&msg.name) {
            return self.forward(pool, msg.name.clone(), msg, ctx);
        }
        Box::pin(std::future::ready(self.halt(&msg.name, Phase::Aborted, Some("aborted by owner".into()), ctx)))
    }
}

/// Aborts the live step but keeps the sequence resumable: a later
/// [`CreateSequence`] with the same definition continues from the last
/// completed state with a new attempt of the current step.
#[derive(Message)]
#[rtype(result = "Result<(), SequenceError>")]
pub struct StopSequence {
    pub name: String,
}

impl Handler<StopSequence> for SequenceRelocator {
    type Result = ResponseFuture<Result<(), SequenceError>>;
    fn handle(&mut self, msg: StopSequence, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(pool) = self.moved_away(&msg.name) {
            return self.forward(pool, msg.name.clone(), msg, ctx);
        }
        Box::pin(std::future::ready(self.halt(&msg.name, Phase::Stopped, None, ctx)))
    }
}

/// Takes over a pool sequence that another project of its pool moved here
/// (its record is already in this account's store) and goes on with it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AdoptSequence {
    pub name: String,
    /// The deadline the abandoned step missed, if that was why.
    pub late_deadline: Option<f64>,
}

impl Handler<AdoptSequence> for SequenceRelocator {
    type Result = ();
    fn handle(&mut self, msg: AdoptSequence, ctx: &mut Context<Self>) {
        if self.seqs.contains_key(&msg.name) {
            return;
        }
        let rec = match self.store.load(&msg.name) {
            Ok(Some(rec)) => rec,
            Ok(None) => return tracing::error!(sequence = %msg.name, "a sequence moved here is not in the store"),
            Err(e) => return tracing::error!(sequence = %msg.name, "can't load a sequence moved here: {e}"),
        };
        if rec.phase == Phase::Running && rec.live.is_some() {
            self.unsubmitted.insert(msg.name.clone());
        }
        self.seqs.insert(msg.name.clone(), rec);
        self.advance(ctx);
        let live = self.seqs.get(&msg.name).and_then(|r| r.live);
        if let (Some(deadline), Some(l)) = (msg.late_deadline, live) {
            self.replacing_late.insert(decide::job_name(&msg.name, l.step, l.attempt), deadline);
        }
    }
}
