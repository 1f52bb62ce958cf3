//! The relocator's API: what `BOINC_SEQUENCE_*` and the BLAH front end
//! send it, each message with its handler.

use std::path::PathBuf;

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::{SequenceState, StepSelector};

use super::*;
use crate::decide;
use crate::store::{Phase, SequenceDef, SequenceRecord, StepFile};
use gahp_services::atomic_file;

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
    pub(super) fn extend(&mut self, msg: ExtendSequence, ctx: &mut Context<Self>) -> Result<(), SequenceError> {
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
    pub(super) fn end(&mut self, msg: EndSequence, ctx: &mut Context<Self>) -> Result<(), SequenceError> {
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
    pub(super) fn state_of(&self, rec: &SequenceRecord) -> SequenceState {
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
                    atomic_file::copy_whole(&store.content_path(&f.md5), &dest)
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
