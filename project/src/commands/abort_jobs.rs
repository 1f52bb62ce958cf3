//! `BOINC_ABORT_JOBS`: abort_jobs on the project (sent again after a
//! transient failure: aborting twice is aborting once).

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::CommandResult;

use super::{done, Workers};
use crate::rpc::Rpc;

pub(super) fn run(w: &Workers, jobs: Vec<String>, deadline: Instant) -> ResponseFuture<CommandResult> {
    let (rpc, auth) = (w.rpc.clone(), w.key.authenticator.clone());
    Box::pin(async move {
        let xml = request::abort_jobs(&auth, &jobs);
        done(rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await, "abort_jobs() returned")
    })
}
