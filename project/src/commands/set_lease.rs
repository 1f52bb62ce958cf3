//! `BOINC_SET_LEASE`: set_expire_time on the project (sent again after a
//! transient failure: the same time set twice is set once).

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::CommandResult;

use super::{done, Workers};
use crate::rpc::Rpc;

pub(super) fn run(w: &Workers, batch: String, lease_time: f64, deadline: Instant) -> ResponseFuture<CommandResult> {
    let (rpc, auth) = (w.rpc.clone(), w.key.authenticator.clone());
    Box::pin(async move {
        let xml = request::set_expire_time(&auth, &batch, lease_time);
        done(rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await, "set_lease() returned")
    })
}
