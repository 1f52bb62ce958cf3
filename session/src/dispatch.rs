//! Dispatch: the one path of every command (`BOINC_*`, `BOINC_SEQUENCE_*`
//! and `BLAH_*`) from the session down to whoever answers it, and the edge
//! where each accepted request becomes exactly one result: whatever
//! happens below (an error, a panic that kills an actor, a hang), one
//! `Complete` goes to the ResultQueue for its request id, shaped as its
//! command's result must be.
//!
//! Who answers: a `BLAH_*` command, the BLAH front end; any other, the
//! selected project (its tree, or for a sequence command its
//! SequenceRelocator) or the selected pool.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;
use gahp_protocol::gahp::sequence_commands::SequenceResult;
use gahp_protocol::gahp::{BlahCommand, Command, CommandResult, ReqId};
use tokio::sync::OwnedSemaphorePermit;

use crate::runtime::Runtime;
use gahp_blah::jobs::{BlahJobs, FinalStatusQueued, RunBlah};
use gahp_broker::pools::{Pools, RunOnPool};
use gahp_broker::registry::{Registry, SequencesOf, TreeOf};
use gahp_project::tree::{ProjectTree, Run};
use gahp_project::ProjectKey;
use gahp_services::result_queue::{Complete, ResultQueue};

/// What was selected when a command's line was read (invariant 4): the
/// command runs there, whatever is selected later.
#[derive(Clone)]
pub enum Target {
    /// Nothing yet: only `BLAH_*` commands can run.
    Nothing,
    Project(ProjectKey),
    /// A pool file (`BOINC_SELECT_PROJECT pool:<path> -`).
    Pool(PathBuf),
}

/// The actors that answer commands, and the net under them.
pub struct Dispatch {
    registry: Addr<Registry>,
    /// The trees this session's commands went to, so that a command does
    /// not wait for the registry's answer each time (2,000 pings at once
    /// took 0.1 s longer so); one that died is asked of the registry
    /// again, which replaces it.
    trees: Rc<RefCell<HashMap<ProjectKey, Addr<ProjectTree>>>>,
    pools: Addr<Pools>,
    blah: Addr<BlahJobs>,
    queue: Addr<ResultQueue>,
    /// Whoever answers bounds its own work by `command_timeout`; this is
    /// the net under it, so that a result comes even if something hangs.
    limit: Duration,
}

impl Dispatch {
    pub fn new(runtime: &Runtime) -> Self {
        Dispatch {
            registry: runtime.projects.clone(),
            trees: Rc::default(),
            pools: runtime.pools.clone(),
            blah: runtime.blah.clone(),
            queue: runtime.queue.clone(),
            limit: runtime.config.command_timeout + Duration::from_secs(15),
        }
    }

    /// Runs an accepted command on `to`; its result is queued once.
    /// `place`: a `BLAH_*` command's place among those in progress, given
    /// back once its result is queued.
    pub fn send(&self, reqid: ReqId, to: Target, command: Command, place: Option<OwnedSemaphorePermit>) {
        // All that is kept of the command while it runs.
        let code = command.code();
        let status_of = match &command {
            Command::Blah(BlahCommand::JobStatus { job_id }) => Some(job_id.clone()),
            _ => None,
        };
        let answer = self.answer(to, command, place.is_some());
        let (queue, blah, limit) = (self.queue.clone(), self.blah.clone(), self.limit);
        // A task of its own, not a future in an actor's context (which
        // actix polls whenever any of them wakes: O(in flight) each). The
        // work itself runs in the actors that answer (a panic there stops
        // the actor: `stopped` below); a panic on the way to them still
        // yields a result.
        actix_rt::spawn(async move {
            let answer = std::panic::AssertUnwindSafe(answer).catch_unwind();
            let result = match tokio::time::timeout(limit, answer).await {
                Ok(Ok(Ok(result))) => result,
                Ok(Ok(Err(stopped))) => Command::failure_of(
                    code,
                    format!("{code} failed: internal error ({stopped} stopped); the command may not have completed"),
                ),
                Ok(Err(_)) => {
                    Command::failure_of(code, format!("{code} failed: internal error (a panic); the command may not have completed"))
                }
                Err(_) => Command::failure_of(code, format!("{code} timed out after {} s", limit.as_secs())),
            };
            let delivered = status_of.filter(|_| matches!(&result, CommandResult::Blah(r) if r.is_final_status()));
            queue.do_send(Complete { reqid, result });
            drop(place);
            if let Some(job_id) = delivered {
                blah.do_send(FinalStatusQueued { job_id });
            }
        });
    }

    /// The answer of whoever answers `command` on `to`; Err: who stopped
    /// before answering.
    fn answer(&self, to: Target, command: Command, paced: bool) -> LocalBoxFuture<'static, Result<CommandResult, &'static str>> {
        match (command, to) {
            (Command::Blah(command), _) => {
                let blah = self.blah.clone();
                Box::pin(async move {
                    let result = blah.send(RunBlah { command, paced }).await;
                    result.map(CommandResult::Blah).map_err(|_| "the BLAH front end")
                })
            }
            (_, Target::Nothing) => Box::pin(std::future::ready(Ok(CommandResult::Error("no project selected".into())))),
            (command, Target::Pool(pool)) => {
                let pools = self.pools.clone();
                Box::pin(async move { pools.send(RunOnPool { pool, command }).await.map_err(|_| "the broker") })
            }
            (Command::Boinc(command), Target::Project(key)) => {
                let known = self.trees.borrow().get(&key).filter(|t| t.connected()).cloned();
                if let Some(tree) = known {
                    return Box::pin(async move { tree.send(Run { command }).await.map_err(|_| "the project's worker") });
                }
                let (registry, trees) = (self.registry.clone(), self.trees.clone());
                Box::pin(async move {
                    let tree = registry.send(TreeOf(key.clone())).await.map_err(|_| "the project registry")?;
                    trees.borrow_mut().insert(key, tree.clone());
                    tree.send(Run { command }).await.map_err(|_| "the project's worker")
                })
            }
            (Command::Sequence(command), Target::Project(key)) => {
                let registry = self.registry.clone();
                Box::pin(async move {
                    let sequences = registry.send(SequencesOf(key.clone())).await.map_err(|_| "the project registry")?;
                    let result = match gahp_sequences::commands::run(sequences, command, None).await {
                        SequenceResult::Error(e) => SequenceResult::Error(key.authenticator.redact_in(&e)),
                        other => other,
                    };
                    Ok(result.into_result())
                })
            }
        }
    }
}
