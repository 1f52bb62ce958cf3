//! BatchMonitor: BOINC_QUERY_BATCHES for one project. Identical queries
//! (same batches, same min_mod_time) share one query_batch2 RPC while it is
//! in flight, and reuse its answer for `query_coalesce` afterwards, so a
//! storm of identical queries costs one RPC per poll interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::CommandResult;
use tokio::sync::oneshot;

use crate::config::DaemonConfig;
use crate::projects::ProjectKey;
use crate::rpc_client::{call, Call, Retry, RpcClient};

type QueryKey = (u64, Vec<String>);

pub struct BatchMonitor {
    key: ProjectKey,
    config: Arc<DaemonConfig>,
    rpc: Addr<RpcClient>,
    /// Queries in flight and who else waits for their answer.
    in_flight: HashMap<QueryKey, Vec<oneshot::Sender<CommandResult>>>,
    recent: HashMap<QueryKey, (Instant, CommandResult)>,
}

impl BatchMonitor {
    pub fn new(key: ProjectKey, config: Arc<DaemonConfig>, rpc: Addr<RpcClient>) -> Self {
        BatchMonitor { key, config, rpc, in_flight: HashMap::new(), recent: HashMap::new() }
    }
}

impl Actor for BatchMonitor {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "CommandResult")]
pub struct Query {
    pub min_mod_time: f64,
    pub batches: Vec<String>,
    pub deadline: Instant,
}

impl Handler<Query> for BatchMonitor {
    type Result = ResponseActFuture<Self, CommandResult>;

    fn handle(&mut self, msg: Query, _: &mut Context<Self>) -> Self::Result {
        let key: QueryKey = (msg.min_mod_time.to_bits(), msg.batches.clone());
        let window = self.config.query_coalesce;
        self.recent.retain(|_, (at, _)| at.elapsed() < window);
        if let Some((_, answer)) = self.recent.get(&key) {
            return Box::pin(fut::ready(answer.clone()));
        }
        if let Some(waiters) = self.in_flight.get_mut(&key) {
            let (tx, rx) = oneshot::channel();
            waiters.push(tx);
            return Box::pin(
                async move { rx.await.unwrap_or_else(|_| CommandResult::Error("error querying batch: internal error".into())) }
                    .into_actor(self),
            );
        }
        self.in_flight.insert(key.clone(), Vec::new());
        let (rpc, auth) = (self.rpc.clone(), self.key.authenticator.clone());
        // The server's mod_time has 1-second resolution: ask from a second
        // earlier so that no change is lost (duplicates are harmless).
        let asked = if self.config.widen_min_mod_time && msg.min_mod_time > 0.0 {
            (msg.min_mod_time.floor() - 1.0).max(0.0)
        } else {
            msg.min_mod_time
        };
        let wanted = msg.batches.len();
        Box::pin(
            async move {
                let xml = request::query_batch2(&auth, asked, &msg.batches);
                let c = Call::new(Script::SubmitRpcHandler, xml, reply::parse_query_batch2, Retry::Idempotent, msg.deadline);
                match call(&rpc, c).await {
                    Ok(states) if states.batches.len() == wanted => CommandResult::Batches {
                        server_time: states.server_time,
                        groups: states.batches.into_iter().map(|jobs| jobs.into_iter().map(|j| (j.name, j.status)).collect()).collect(),
                    },
                    Ok(states) => CommandResult::Error(format!(
                        "error querying batch: -1 the server answered for {} batches, {wanted} were asked",
                        states.batches.len()
                    )),
                    Err(e) => CommandResult::Error(auth.redact_in(&format!("error querying batch: {e}"))),
                }
            }
            .into_actor(self)
            .map(move |answer, act, _| {
                for waiter in act.in_flight.remove(&key).unwrap_or_default() {
                    let _ = waiter.send(answer.clone());
                }
                if !answer.is_error() {
                    act.recent.insert(key, (Instant::now(), answer.clone()));
                }
                answer
            }),
        )
    }
}
