//! `BOINC_RETIRE_BATCH`: retire_batch on the project (sent again after a
//! transient failure: retiring twice is retiring once).

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::CommandResult;

use super::{done, Workers};
use crate::rpc::Rpc;

pub(super) fn run(w: &Workers, batch: String, deadline: Instant) -> ResponseFuture<CommandResult> {
    let (rpc, auth) = (w.rpc.clone(), w.key.authenticator.clone());
    Box::pin(async move {
        let xml = request::retire_batch(&auth, &batch);
        done(rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await, "retire_batch() returned")
    })
}
