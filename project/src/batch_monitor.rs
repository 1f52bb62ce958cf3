//! BatchMonitor: BOINC_QUERY_BATCHES for one project. Identical queries
//! (same batches, same min_mod_time) share one query_batch2 RPC while it is
//! in flight, and reuse its answer for `query_coalesce` afterwards, so a
//! storm of identical queries costs one RPC per poll interval. The answer
//! is kept compactly as the reply is read (`QueryAnswer`), shared by every
//! result of the storm, and rendered into each result line only as the
//! session writes it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::reply::QueryBatch2Reader;
use gahp_protocol::boinc::{request, Script};
use gahp_protocol::gahp::{CommandResult, QueryAnswerBuilder};
use tokio::sync::oneshot;

use crate::rpc::{Rpc, RpcClient, StreamedReply};
use crate::ProjectKey;
use gahp_services::config::DaemonConfig;

type QueryKey = (u64, Vec<String>);

pub struct BatchMonitor {
    key: ProjectKey,
    config: Arc<DaemonConfig>,
    rpc: Addr<RpcClient>,
    /// Queries in flight and who else waits for their answer.
    in_flight: HashMap<QueryKey, Vec<oneshot::Sender<CommandResult>>>,
    recent: HashMap<QueryKey, (Instant, CommandResult)>,
    /// Its share of the batches gauge: those in its last answer.
    watched: gahp_services::metrics::GaugeShare,
}

impl BatchMonitor {
    pub fn new(key: ProjectKey, config: Arc<DaemonConfig>, rpc: Addr<RpcClient>) -> Self {
        let watched = gahp_services::metrics::global().batch_share(gahp_services::metrics::client_of(&config), &key.url);
        BatchMonitor { key, config, rpc, in_flight: HashMap::new(), recent: HashMap::new(), watched }
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
    type Result = ResponseFuture<CommandResult>;

    fn handle(&mut self, msg: Query, ctx: &mut Context<Self>) -> Self::Result {
        let key: QueryKey = (msg.min_mod_time.to_bits(), msg.batches.clone());
        let window = self.config.query_coalesce;
        self.recent.retain(|_, (at, _)| at.elapsed() < window);
        if let Some((_, answer)) = self.recent.get(&key) {
            let answer = answer.clone();
            return Box::pin(async move { answer });
        }
        let (tx, rx) = oneshot::channel();
        let first = !self.in_flight.contains_key(&key);
        self.in_flight.entry(key.clone()).or_default().push(tx);
        if first {
            // The RPC runs as a task of its own and reports back with
            // QueryDone, which answers everyone waiting for this query.
            let (rpc, auth, me) = (self.rpc.clone(), self.key.authenticator.clone(), ctx.address());
            let widen = self.config.widen_min_mod_time;
            actix_rt::spawn(async move {
                let answer = query_batch2(&rpc, &auth, msg.min_mod_time, msg.batches, widen, msg.deadline).await;
                me.do_send(QueryDone { key, answer });
            });
        }
        Box::pin(async move { rx.await.unwrap_or_else(|_| CommandResult::Error("error querying batch: internal error".into())) })
    }
}

/// The answer of a query_batch2, for everyone who asked the same.
#[derive(Message)]
#[rtype(result = "()")]
struct QueryDone {
    key: QueryKey,
    answer: CommandResult,
}

impl Handler<QueryDone> for BatchMonitor {
    type Result = ();

    fn handle(&mut self, msg: QueryDone, _: &mut Context<Self>) {
        for waiter in self.in_flight.remove(&msg.key).unwrap_or_default() {
            let _ = waiter.send(msg.answer.clone());
        }
        if !msg.answer.is_error() {
            self.watched.set(&[("watched", msg.key.1.len() as i64)]);
            self.recent.insert(msg.key, (Instant::now(), msg.answer));
        }
    }
}

/// One BOINC_QUERY_BATCHES as a query_batch2 RPC, rendered as its result.
async fn query_batch2(
    rpc: &Addr<RpcClient>,
    auth: &gahp_protocol::Authenticator,
    min_mod_time: f64,
    batches: Vec<String>,
    widen: bool,
    deadline: Instant,
) -> CommandResult {
    // The server's mod_time has 1-second resolution: ask from a second
    // earlier so that no change is lost (duplicates are harmless).
    let asked = if widen && min_mod_time > 0.0 { (min_mod_time.floor() - 1.0).max(0.0) } else { min_mod_time };
    let wanted = batches.len();
    let xml = request::query_batch2(auth, asked, &batches);
    match rpc.idempotent_streamed(Script::SubmitRpcHandler, xml, answer_reader, deadline).await {
        Ok((answer, server_time)) if answer.groups() == wanted => CommandResult::QueryAnswer(Arc::new(answer.finish(server_time))),
        Ok((answer, _)) => {
            let groups = answer.groups();
            CommandResult::Error(format!("error querying batch: -1 the server answered for {groups} batches, {wanted} were asked"))
        }
        Err(e) => CommandResult::Error(auth.redact_in(&format!("error querying batch: {e}"))),
    }
}

/// A query_batch2 reply read into its compact answer as it arrives
/// (neither the reply nor a per-job structure is held whole); it is the
/// answer once the whole reply has come and read as one.
fn answer_reader() -> Box<dyn StreamedReply<Output = (QueryAnswerBuilder, f64)>> {
    Box::new(QueryBatch2Reader::new(QueryAnswerBuilder::new()))
}
