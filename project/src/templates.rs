//! An app's input and output templates, fetched once per period however
//! many submits, deliveries, sequence jobs and pool ads want them at once
//! (a [`SharedCalls`] table: single flight, reused for `TEMPLATES_TTL`, a
//! failed call not reused).
//!
//! One table per thread: two clients of one `boinc_gahp serve` on one
//! account submitting one app cost one get_templates a period. Keyed by
//! account as well as URL: a BOINC server checks the authenticator of a
//! get_templates (a bad one is answered `bad authenticator`), so an
//! account is never given what was fetched with another's.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use actix::Addr;
use futures_util::future::FutureExt;
use gahp_protocol::boinc::{reply, request, Script, Templates};

use crate::rpc::{Rpc, RpcClient};
use crate::shared_calls::{Fresh, SharedCall, SharedCalls};
use crate::ProjectKey;

/// How long an app's templates are reused.
pub const TEMPLATES_TTL: Duration = Duration::from_secs(60);

/// One get_templates of an app, shared by everyone who waits for it.
pub type TemplatesCall = SharedCall<Templates>;

thread_local! {
    static CALLS: RefCell<SharedCalls<(ProjectKey, String), Templates>> = RefCell::default();
}

/// The app's templates on this project for this account, from the table
/// every actor of this thread shares; a new call is made with `rpc`,
/// bounded by `deadline`.
pub fn templates_of(key: &ProjectKey, rpc: &Addr<RpcClient>, app: &str, deadline: Instant) -> TemplatesCall {
    CALLS.with(|c| {
        c.borrow_mut().get((key.clone(), app.to_string()), Fresh::For(TEMPLATES_TTL), || {
            let (rpc, xml) = (rpc.clone(), request::get_templates_for_app(&key.authenticator, app));
            async move { rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_templates, deadline).await }.boxed_local()
        })
    })
}
