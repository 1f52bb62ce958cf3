//! `BOINC_QUERY_BATCHES`: answered by the project's BatchMonitor, which
//! shares one query_batch2 among all who ask at once.

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::gahp::CommandResult;

use super::Workers;
use crate::batch_monitor::Query;

pub(super) fn run(w: &Workers, min_mod_time: f64, batches: Vec<String>, deadline: Instant) -> ResponseFuture<CommandResult> {
    let monitor = w.monitor.clone();
    Box::pin(async move {
        let answer = monitor.send(Query { min_mod_time, batches, deadline }).await;
        answer.unwrap_or_else(|_| CommandResult::Error("error querying batch: internal error".into()))
    })
}
