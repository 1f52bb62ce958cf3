//! Watching the live steps: one query_batch2 per poll for all of them, and
//! a look at a step whose deadline has come; what the server says is judged
//! by `decide`.

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};

use super::*;
use crate::decide::{self, judge, Next, ServerState};
use crate::store::Phase;
use gahp_project::rpc::{Rpc, RpcError};
use gahp_services::clock::unix_now;

impl SequenceRelocator {
    /// One round, every `sequence_poll`: [`advance`](Self::advance), then
    /// poll the live steps and act on what the poll says.
    pub(super) fn tick(&mut self, ctx: &mut Context<Self>) {
        self.purge_stopped(ctx);
        self.advance(ctx);
        self.poll(ctx);
    }

    pub(super) fn poll(&mut self, ctx: &mut Context<Self>) {
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
    pub(super) fn poll_at_deadline(&mut self, name: &str, job: String, deadline: f64, ctx: &mut Context<Self>) {
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
    pub(super) fn observe(&mut self, name: &str, job: &str, state: ServerState, now: f64, ctx: &mut Context<Self>) {
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
}

pub(super) fn job_state(group: &[gahp_protocol::boinc::JobState], job: &str) -> ServerState {
    group.iter().find(|j| j.name == job).map(|j| ServerState::from_status(&j.status)).unwrap_or(ServerState::Missing)
}
