//! A step that missed its deadline, erred or was lost: abort_jobs, a dead
//! branch, and a new attempt from the last completed state (on another
//! project of the pool, for a pool's sequence).

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::sequence_commands::DeadBranch;

use super::*;
use crate::decide::{self, LiveAttempt, Relocation, ServerState};
use crate::store::Phase;
use gahp_project::rpc::{Rpc, RpcError};
use gahp_services::clock::unix_now;

impl SequenceRelocator {
    /// Aborts the attempt, then records its dead branch and either the next
    /// attempt (`Some`) or the sequence's failure.
    pub(super) fn relocate(&mut self, name: String, live: LiveAttempt, why: Relocation, next: Option<u32>, ctx: &mut Context<Self>) {
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
}
