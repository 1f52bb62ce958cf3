//! Seeded, reproducible fault injection for the simulated BOINC project.
//!
//! A [`FaultPlan`] says, per endpoint, how likely each kind of fault is, and
//! optionally lists one-shot [`ScriptedFault`]s ("the 1st `create_batch`
//! loses its reply"). [`Faults`] holds the plan in force (settable at start
//! and at run time), a seeded RNG and per-endpoint call counters; every
//! request handler asks it for a [`Fault`] with [`Faults::draw`] and then
//! brackets its work with [`Fault::before`] and [`Fault::after`]:
//!
//! ```ignore
//! let fault = faults.draw("submit_rpc_handler.php:create_batch");
//! if let Some(resp) = fault.before().await {
//!     return resp; // 500 / 503 / reset / hang: the request is not acted on
//! }
//! let body = handle(...); // the request IS acted on
//! fault.after(StatusCode::OK, "text/xml", body, &[])
//! ```
//!
//! Decisions are a pure function of the seed and the sequence of calls to
//! `draw` (each call consumes exactly three random numbers, whatever the
//! rule), so a failing chaos run can be replayed. The plan format and the
//! semantics of each kind are documented in `docs/sim-faults.md`.
//!
//! `plan.rs` holds the plan's format and its checks, `reply.rs` how a
//! drawn fault shows in the reply; here is the injector that draws.

mod plan;
mod reply;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use plan::{
    FaultKind, FaultPlan, FaultPlanError, FaultRule, ScriptedFault, DEFAULT_DELAY_MS, DEFAULT_DRIP_MS, DEFAULT_HANG_MS, MAX_DURATION_MS,
};
pub use reply::{Fault, Peer, MAX_HOLD};

struct Inner {
    plan: FaultPlan,
    rng: StdRng,
    /// Calls seen, keyed by exact endpoint, by `<script>:*` and by `*`.
    calls: BTreeMap<String, u64>,
    injected: BTreeMap<String, u64>,
}

impl Inner {
    fn new(plan: FaultPlan) -> Self {
        Inner { rng: StdRng::seed_from_u64(plan.seed), plan, calls: BTreeMap::new(), injected: BTreeMap::new() }
    }
}

/// The shared fault injector: cheap to clone, safe to use from every worker.
#[derive(Clone)]
pub struct Faults {
    inner: Arc<Mutex<Inner>>,
    /// Connections a `stall_body` or `drip_body` holds open right now.
    held: Arc<AtomicU64>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").field("plan", &self.lock().plan).finish()
    }
}

impl Default for Faults {
    fn default() -> Self {
        Faults::new(FaultPlan::default())
    }
}

impl Faults {
    /// An injector with `plan` in force. The plan is used as given; call
    /// [`FaultPlan::validate`] first if it comes from outside (the parse
    /// functions do).
    pub fn new(plan: FaultPlan) -> Self {
        Faults { inner: Arc::new(Mutex::new(Inner::new(plan))), held: Arc::new(AtomicU64::new(0)) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked mid-draw; the
        // data is still consistent enough for fault injection.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the plan: the RNG restarts from the new seed, and the call
    /// counters (which scripted faults count against) and the
    /// [`injected`](Self::injected) tallies start again from zero.
    pub fn set_plan(&self, plan: FaultPlan) {
        tracing::info!(seed = plan.seed, rules = plan.rules.len(), script = plan.script.len(), "fault plan set");
        *self.lock() = Inner::new(plan);
    }

    /// The plan in force.
    pub fn plan(&self) -> FaultPlan {
        self.lock().plan.clone()
    }

    /// Counts one call to `endpoint` and decides its fault. Deterministic for
    /// a given seed and sequence of calls.
    pub fn draw(&self, endpoint: &str) -> Fault {
        let mut g = self.lock();
        let inner = &mut *g;
        // Always three draws per call, whatever the rule, so that changing
        // one endpoint's rule does not shift the decisions of others.
        let u_kind: f64 = inner.rng.gen();
        let u_delay: f64 = inner.rng.gen();
        let u_cut: u64 = inner.rng.gen();

        let script_key = endpoint.split_once(':').map(|(s, _)| format!("{s}:*"));
        let mut keys: Vec<&str> = vec![endpoint];
        if let Some(k) = script_key.as_deref() {
            if k != endpoint {
                keys.push(k);
            }
        }
        if endpoint != "*" {
            keys.push("*");
        }
        for k in &keys {
            *inner.calls.entry((*k).to_string()).or_insert(0) += 1;
        }

        let rule = inner.plan.rule_for(endpoint).cloned().unwrap_or_default();
        let scripted =
            inner.plan.script.iter().find(|s| keys.contains(&s.endpoint.as_str()) && inner.calls.get(&s.endpoint).copied() == Some(s.nth));

        let mut fault = Fault {
            kind: None,
            delay: None,
            hang: rule.hang_duration(),
            drip: rule.drip_duration(),
            cut: u_cut,
            held: Some(self.held.clone()),
            peer: None,
        };
        if let Some(s) = scripted {
            fault.kind = Some(s.kind);
            if s.hang_ms != 0 {
                fault.hang = Duration::from_millis(s.hang_ms);
            }
            if s.drip_ms != 0 {
                fault.drip = Duration::from_millis(s.drip_ms);
            }
        } else {
            let mut acc = 0.0;
            for (kind, p) in rule.exclusive() {
                acc += p;
                if p > 0.0 && u_kind < acc {
                    fault.kind = Some(kind);
                    break;
                }
            }
            if rule.delay > 0.0 && u_delay < rule.delay {
                fault.delay = Some(rule.delay_duration());
            }
        }

        if let Some(kind) = fault.kind {
            *inner.injected.entry(format!("{endpoint} {}", kind.as_str())).or_insert(0) += 1;
            tracing::info!(endpoint, kind = kind.as_str(), scripted = scripted.is_some(), "fault injected");
        }
        if let Some(d) = fault.delay {
            *inner.injected.entry(format!("{endpoint} delay")).or_insert(0) += 1;
            tracing::info!(endpoint, delay_ms = d.as_millis() as u64, "delay injected");
        }
        fault
    }

    /// Adds one to the tally of `key` (what [`injected`](Self::injected)
    /// shows), for faults drawn elsewhere: a hostile host's output.
    pub(crate) fn count_injected(&self, key: &str) {
        *self.lock().injected.entry(key.to_string()).or_insert(0) += 1;
    }

    /// Replies of `stall_body` or `drip_body` still holding their
    /// connection: back to 0 once their clients have gone away.
    pub fn held_bodies(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// What has been injected since the plan was set: `"<endpoint> <kind>"`
    /// (kind as in the plan, plus `delay`) → count.
    pub fn injected(&self) -> BTreeMap<String, u64> {
        self.lock().injected.clone()
    }
}
