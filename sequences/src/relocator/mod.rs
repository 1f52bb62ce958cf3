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
//!
//! The actor's work, a file each: `submit` (advance a sequence, submit
//! its next attempt, clean up), `poll` (watch the live steps), `relocate`
//! (a step that missed its deadline, erred or was lost), `collect` (a
//! finished step's outputs into the content store), `moves` (a pool's
//! sequence to another project, and what the relocator asks the broker),
//! and `messages` (its API).

mod collect;
mod messages;
mod moves;
mod poll;
mod relocate;
mod submit;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::Templates;
use gahp_protocol::gahp::sequence_commands::DeadBranch;

use crate::decide;
use crate::store::{Phase, SequenceRecord, SequenceStore};
use gahp_project::rpc::{RpcClient, RpcError};
use gahp_project::ProjectKey;
use gahp_services::clock::unix_now;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::state_db::StateDb;

pub use messages::*;
pub use moves::{NextProject, PoolLink, SequenceHolder};

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
    pools: Option<PoolLink>,
}

impl SequenceRelocator {
    pub fn new(
        key: ProjectKey,
        config: Arc<DaemonConfig>,
        rpc: Addr<RpcClient>,
        stager: Addr<FileStager>,
        db: StateDb,
        pools: Option<PoolLink>,
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

    pub(super) fn record(&self, name: &str) -> Result<&SequenceRecord, SequenceError> {
        self.seqs.get(name).ok_or_else(|| SequenceError::NoSuchSequence(name.into()))
    }

    /// Stops the sequence in `phase`, aborting its live step.
    pub(super) fn halt(&mut self, name: &str, phase: Phase, reason: Option<String>, ctx: &mut Context<Self>) -> Result<(), SequenceError> {
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
pub(super) fn attempt_batches(rec: &SequenceRecord, name: &str, step: u32, upto: u32) -> Vec<String> {
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
pub(super) fn batches_left(rec: &SequenceRecord, name: &str, current: u32, upto: u32) -> Vec<String> {
    let mut all = attempt_batches(rec, name, rec.done, 0);
    all.extend(attempt_batches(rec, name, current, upto));
    all
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
