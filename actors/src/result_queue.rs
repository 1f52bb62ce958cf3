//! ResultQueue: completed results in completion order. It alone decides
//! whether a request id may be accepted and it delivers each accepted id's
//! result exactly once (invariants 2 and 3).

use std::collections::{HashSet, VecDeque};

use actix::prelude::*;
use bytes::Bytes;
use gahp_protocol::gahp::{CommandResult, ReqId};

/// One result line, without prefix and newline: `head` then `tail`. A
/// shared answer's tail is the one body every result of it points to.
pub struct ResultLine {
    pub head: Vec<u8>,
    pub tail: Bytes,
}

impl ResultLine {
    fn new(reqid: ReqId, result: CommandResult) -> Self {
        match result {
            CommandResult::Encoded(args) => ResultLine { head: reqid.to_string().into_bytes(), tail: args },
            other => ResultLine { head: other.encode(reqid), tail: Bytes::new() },
        }
    }
}

#[derive(Default)]
pub struct ResultQueue {
    /// Accepted, no result yet.
    in_flight: HashSet<ReqId>,
    /// Result queued, not yet handed out by a RESULTS.
    queued: HashSet<ReqId>,
    /// Encoded result lines, oldest first.
    ready: VecDeque<ResultLine>,
    async_mode: bool,
    /// An `R` was written since the last RESULTS.
    notified: bool,
    session: Option<Recipient<Notify>>,
}

impl Actor for ResultQueue {
    type Context = Context<Self>;
}

impl ResultQueue {
    fn maybe_notify(&mut self) {
        if self.async_mode && !self.notified && !self.ready.is_empty() {
            if let Some(s) = &self.session {
                self.notified = true;
                s.do_send(Notify);
            }
        }
    }
}

/// Asks the Session to write one `R` line.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Notify;

#[derive(Message)]
#[rtype(result = "()")]
pub struct SetSession(pub Recipient<Notify>);

impl Handler<SetSession> for ResultQueue {
    type Result = ();
    fn handle(&mut self, msg: SetSession, _: &mut Context<Self>) {
        // A new session (a served client back on a new connection) starts
        // in synchronous mode and owes no RESULTS for an earlier `R`.
        self.session = Some(msg.0);
        self.async_mode = false;
        self.notified = false;
    }
}

/// Registers a request id; `false` if it is already pending (answer `E`).
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Accept(pub ReqId);

impl Handler<Accept> for ResultQueue {
    type Result = bool;
    fn handle(&mut self, msg: Accept, _: &mut Context<Self>) -> bool {
        if self.queued.contains(&msg.0) {
            return false;
        }
        self.in_flight.insert(msg.0)
    }
}

/// The one result of an accepted request.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Complete {
    pub reqid: ReqId,
    pub result: CommandResult,
}

impl Handler<Complete> for ResultQueue {
    type Result = ();
    fn handle(&mut self, msg: Complete, _: &mut Context<Self>) {
        if !self.in_flight.remove(&msg.reqid) {
            tracing::error!(reqid = msg.reqid.0, "dropping a second result for one request");
            return;
        }
        self.queued.insert(msg.reqid);
        self.ready.push_back(ResultLine::new(msg.reqid, msg.result));
        self.maybe_notify();
    }
}

/// Takes every queued result line (the body of a RESULTS reply).
#[derive(Message)]
#[rtype(result = "Vec<ResultLine>")]
pub struct Drain;

impl Handler<Drain> for ResultQueue {
    type Result = MessageResult<Drain>;
    fn handle(&mut self, _: Drain, _: &mut Context<Self>) -> Self::Result {
        self.notified = false;
        self.queued.clear();
        MessageResult(self.ready.drain(..).collect())
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct SetAsync(pub bool);

impl Handler<SetAsync> for ResultQueue {
    type Result = ();
    fn handle(&mut self, msg: SetAsync, _: &mut Context<Self>) {
        self.async_mode = msg.0;
        if !msg.0 {
            self.notified = false;
        }
        // Results queued before async mode was switched on are announced too.
        self.maybe_notify();
    }
}
