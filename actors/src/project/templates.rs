//! An app's input and output templates, fetched once per period however
//! many submits, deliveries and sequence jobs want them at once: the first
//! asker's get_templates is shared by every later one (single flight), and
//! reused for `TEMPLATES_TTL`; a failed call is not reused. Held inside
//! one actor (the futures are local to its thread).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::Addr;
use futures_util::future::{FutureExt, LocalBoxFuture, Shared};
use gahp_protocol::boinc::{reply, request, Script, Templates};
use gahp_protocol::Authenticator;

use crate::project::rpc::{Rpc, RpcClient, RpcError};

/// How long an app's templates are reused.
pub const TEMPLATES_TTL: Duration = Duration::from_secs(60);

/// One get_templates of an app, shared by everyone who waits for it.
pub type TemplatesCall = Shared<LocalBoxFuture<'static, Result<Templates, RpcError>>>;

#[derive(Default)]
pub struct TemplatesCache {
    calls: HashMap<String, (Instant, TemplatesCall)>,
}

impl TemplatesCache {
    /// The app's templates: the call in flight or done within the period,
    /// else a new one bounded by `deadline`.
    pub fn get(&mut self, rpc: &Addr<RpcClient>, auth: &Authenticator, app: &str, deadline: Instant) -> TemplatesCall {
        if let Some((at, call)) = self.calls.get(app) {
            if at.elapsed() < TEMPLATES_TTL && !matches!(call.peek(), Some(Err(_))) {
                return call.clone();
            }
        }
        let (rpc, xml) = (rpc.clone(), request::get_templates_for_app(auth, app));
        let call =
            async move { rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_templates, deadline).await }.boxed_local().shared();
        self.calls.insert(app.to_string(), (Instant::now(), call.clone()));
        call
    }
}
