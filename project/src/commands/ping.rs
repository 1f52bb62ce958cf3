//! `BOINC_PING`: one ping_server attempt, answered at once (the
//! gridmanager probes with it, and waits for nothing else meanwhile).

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::CommandResult;

use super::{done, Workers};
use crate::rpc::Rpc;

pub(super) fn run(w: &Workers) -> ResponseFuture<CommandResult> {
    let rpc = w.rpc.clone();
    let deadline = Instant::now() + w.config.ping_timeout.min(w.config.command_timeout);
    Box::pin(async move {
        let pinged = rpc.once(Script::SubmitRpcHandler, request::ping(), Vec::new(), reply::parse_ping, deadline).await;
        done(pinged, "ping_server returned")
    })
}
