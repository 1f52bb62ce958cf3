//! An app's input and output templates, fetched once per period however
//! many submits, deliveries and sequence jobs want them at once: the first
//! asker's get_templates is shared by every later one (single flight), and
//! reused for `TEMPLATES_TTL`; a failed call is not reused.
//!
//! One cache per project and account serves every actor of the thread
//! (the futures are local to it): the trees and BLAH projects of the stdio
//! daemon, and those of all the clients of one `boinc_gahp serve`, whose
//! runtimes share the thread. Two clients on one account submitting one
//! app then cost one get_templates a period. Keyed by account as well as
//! URL: a BOINC server checks the authenticator of a get_templates (a bad
//! one is answered `bad authenticator`), so an account is never given
//! what was fetched with another's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::Addr;
use futures_util::future::{FutureExt, LocalBoxFuture, Shared};
use gahp_protocol::boinc::{reply, request, Script, Templates};
use gahp_protocol::Authenticator;

use crate::project::rpc::{Rpc, RpcClient, RpcError};
use crate::project::ProjectKey;

/// How long an app's templates are reused.
pub const TEMPLATES_TTL: Duration = Duration::from_secs(60);

/// One get_templates of an app, shared by everyone who waits for it.
pub type TemplatesCall = Shared<LocalBoxFuture<'static, Result<Templates, RpcError>>>;

thread_local! {
    static CACHES: RefCell<HashMap<ProjectKey, TemplatesCache>> = RefCell::default();
}

/// The app's templates on this project for this account, from the cache
/// every actor of this thread shares; a new call is made with `rpc`.
pub fn templates_of(key: &ProjectKey, rpc: &Addr<RpcClient>, app: &str, deadline: Instant) -> TemplatesCall {
    CACHES.with(|c| c.borrow_mut().entry(key.clone()).or_default().get(rpc, &key.authenticator, app, deadline))
}

#[derive(Default)]
struct TemplatesCache {
    calls: HashMap<String, (Instant, TemplatesCall)>,
}

impl TemplatesCache {
    /// The app's templates: the call in flight or done within the period,
    /// else a new one bounded by `deadline`.
    fn get(&mut self, rpc: &Addr<RpcClient>, auth: &Authenticator, app: &str, deadline: Instant) -> TemplatesCall {
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
