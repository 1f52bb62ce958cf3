//! What runs on a timer: leases renewed, batches retired once every job
//! in them is delivered or removed, records pruned.

use std::collections::HashSet;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::Authenticator;

use super::*;
use crate::job_records;
use crate::shared_batch;
use gahp_project::rpc::{Rpc, RpcClient};
use gahp_services::clock::unix_now;

impl ProjectJobs {
    /// Retires a batch once no job in it is needed (the state database
    /// knows every member, also those no longer in memory).
    pub(super) fn retire_if_done(&mut self, batch: String, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        if self.retired_batches.contains(&batch) || self.submitting.contains(&batch) {
            return;
        }
        let (store, b) = (self.store.clone(), batch.clone());
        let needed = async move { store.read(move |c| Ok((job_records::batch_needed(c, &b)?, job_records::batch_shared(c, &b)?))).await };
        self.run(ctx, needed, move |act, needed, ctx| {
            let Ok((false, shared)) = needed else { return };
            // Another client's jobs may still need a shared batch.
            if shared && !shared_batch::done_with(&batch, &shared_batch::participant(&act.config.blah.name_prefix, &act.pkey)) {
                return;
            }
            if !act.retired_batches.insert(batch.clone()) {
                return;
            }
            let auth = act.auth().clone();
            let deadline = Instant::now() + act.config.rpc_timeout;
            let b = batch.clone();
            // Once it is done the batch is forgotten here: no job of it is
            // left to ask again (a second retire would be harmless), and a
            // daemon that runs for months must not keep a name per batch.
            act.run(ctx, async move { retire(&rpc, &auth, &b, deadline).await }, move |act, (), _| {
                act.retired_batches.remove(&batch);
                act.batch_ids.remove(&batch);
            });
        });
    }

    /// Retries owed aborts and renews due leases (one call at a time).
    pub(super) fn upkeep(&mut self, ctx: &mut Context<Self>) {
        self.batch_names.prune();
        for batch in std::mem::take(&mut self.aborts) {
            // A failure puts it back for the next round.
            self.abort(batch, ctx, None);
        }
        let Some(rpc) = self.rpc.clone() else { return };
        if self.upkeep_running {
            return;
        }
        let lease = self.config.blah.lease.as_secs_f64();
        let now = unix_now();
        let renew = batches_of(self.jobs.values().filter(|j| j.watched() && !j.is_sequence() && j.lease_until < now + lease / 2.0));
        if renew.is_empty() {
            return;
        }
        self.upkeep_running = true;
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        let leases = async move {
            let mut renewed = Vec::new();
            for b in renew {
                let xml = request::set_expire_time(&auth, &b, now + lease);
                match rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await {
                    Ok(()) => renewed.push(b),
                    Err(e) => tracing::info!(batch = %b, "can't renew the batch's lease: {}", auth.redact_in(&e.to_string())),
                }
            }
            renewed
        };
        self.run(ctx, leases, move |act, renewed, _| {
            act.upkeep_running = false;
            let renewed: HashSet<String> = renewed.into_iter().collect();
            let mut leased = Vec::new();
            for (name, j) in act.jobs.iter_mut().filter(|(_, j)| renewed.contains(&*j.batch)) {
                j.lease_until = now + lease;
                leased.push(Box::<str>::from(name));
            }
            act.store.write_rows("store a lease", leased, move |c, name| job_records::set_lease(c, name, now + lease));
        });
    }
}

pub(super) async fn retire(rpc: &Addr<RpcClient>, auth: &Authenticator, batch: &str, deadline: Instant) {
    let xml = request::retire_batch(auth, batch);
    if let Err(e) = rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await {
        tracing::info!(batch, "can't retire the batch: {}", auth.redact_in(&e.to_string()));
    }
}
