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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Default hang before the connection is dropped, when `hang_ms` is 0.
pub const DEFAULT_HANG_MS: u64 = 60_000;
/// Default delay, when `delay` is drawn and `delay_ms` is 0.
pub const DEFAULT_DELAY_MS: u64 = 1_000;
/// Upper bound accepted for `delay_ms`, `hang_ms` and `drip_ms` (one hour).
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// Default pause between the bytes of a `drip_body`, when `drip_ms` is 0.
pub const DEFAULT_DRIP_MS: u64 = 1_000;
/// How long a `stall_body` or `drip_body` holds its connection at most
/// when the client never goes away (one hour): the connection is freed
/// as soon as the client disconnects.
pub const MAX_HOLD: Duration = Duration::from_millis(MAX_DURATION_MS);
/// How often a stalled reply looks whether its client is still there.
const PEER_POLL: Duration = Duration::from_millis(100);

/// The client's end of a connection, as a held reply watches it: a
/// duplicate of the connection's socket, taken when it was accepted. A
/// stalled reply writes nothing, so only this tells it that its client
/// has gone (the server itself keeps a half-closed connection open while
/// a reply is under way, so that a request still runs to its end after
/// its client left, as a PHP script does).
#[derive(Clone, Debug)]
pub struct Peer(Arc<std::net::TcpStream>);

impl Peer {
    /// For `HttpServer::on_connect`: lets the held replies of this
    /// connection see their client leave (plain TCP only; over TLS a
    /// stalled reply holds on until [`MAX_HOLD`]).
    pub fn on_connect(conn: &dyn std::any::Any, ext: &mut actix_web::dev::Extensions) {
        use std::os::fd::AsFd;
        let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() else { return };
        match tcp.as_fd().try_clone_to_owned() {
            Ok(fd) => {
                let dup = std::net::TcpStream::from(fd);
                // Shares the socket's (already non-blocking) file status.
                if dup.set_nonblocking(true).is_ok() {
                    ext.insert(Peer(Arc::new(dup)));
                }
            }
            Err(e) => tracing::warn!("no watch on a client connection: {e}"),
        }
    }

    /// The watch of the connection `req` came on, if any.
    pub fn of(req: &actix_web::HttpRequest) -> Option<Peer> {
        req.conn_data::<Peer>().cloned()
    }

    /// Returns once the client has closed or reset its end.
    async fn gone(&self) {
        let mut probe = [0u8; 1];
        loop {
            actix_rt::time::sleep(PEER_POLL).await;
            match self.0.peek(&mut probe) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => {}
                Err(_) => return,
            }
        }
    }
}

/// Tolerance when checking that exclusive probabilities sum to at most 1.
const SUM_EPSILON: f64 = 1e-9;

/// Probabilities (each in `[0, 1]`) of each fault kind at one endpoint.
///
/// `http500`, `http503`, `reset`, `hang`, `truncate`, `malformed`,
/// `lose_reply`, `stall_body` and `drip_body` are mutually exclusive: at
/// most one of them happens per call, so their sum must be at most 1. `delay` is drawn independently and
/// combines with any of them (or with none).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultRule {
    pub http500: f64,
    pub http503: f64,
    pub reset: f64,
    pub delay: f64,
    /// Delay length; 0 means [`DEFAULT_DELAY_MS`].
    pub delay_ms: u64,
    pub hang: f64,
    /// How long a hang lasts before the connection dies; 0 means
    /// [`DEFAULT_HANG_MS`].
    pub hang_ms: u64,
    pub truncate: f64,
    pub malformed: f64,
    pub lose_reply: f64,
    pub stall_body: f64,
    pub drip_body: f64,
    /// Pause between the bytes of a `drip_body`; 0 means [`DEFAULT_DRIP_MS`].
    pub drip_ms: u64,
}

impl FaultRule {
    fn exclusive(&self) -> [(FaultKind, f64); 9] {
        [
            (FaultKind::Http500, self.http500),
            (FaultKind::Http503, self.http503),
            (FaultKind::Reset, self.reset),
            (FaultKind::Hang, self.hang),
            (FaultKind::Truncate, self.truncate),
            (FaultKind::Malformed, self.malformed),
            (FaultKind::LoseReply, self.lose_reply),
            (FaultKind::StallBody, self.stall_body),
            (FaultKind::DripBody, self.drip_body),
        ]
    }

    fn drip_duration(&self) -> Duration {
        Duration::from_millis(if self.drip_ms == 0 { DEFAULT_DRIP_MS } else { self.drip_ms })
    }

    fn hang_duration(&self) -> Duration {
        Duration::from_millis(if self.hang_ms == 0 { DEFAULT_HANG_MS } else { self.hang_ms })
    }

    fn delay_duration(&self) -> Duration {
        Duration::from_millis(if self.delay_ms == 0 { DEFAULT_DELAY_MS } else { self.delay_ms })
    }

    fn validate(&self, endpoint: &str) -> Result<(), FaultPlanError> {
        let named = [
            ("http500", self.http500),
            ("http503", self.http503),
            ("reset", self.reset),
            ("delay", self.delay),
            ("hang", self.hang),
            ("truncate", self.truncate),
            ("malformed", self.malformed),
            ("lose_reply", self.lose_reply),
            ("stall_body", self.stall_body),
            ("drip_body", self.drip_body),
        ];
        for (field, value) in named {
            if !value.is_finite() || !(0.0..=1.0).contains(&value) {
                return Err(FaultPlanError::Probability { endpoint: endpoint.to_string(), field, value });
            }
        }
        let sum: f64 = self.exclusive().iter().map(|(_, p)| p).sum();
        if sum > 1.0 + SUM_EPSILON {
            return Err(FaultPlanError::SumExceedsOne { endpoint: endpoint.to_string(), sum });
        }
        for (field, value) in [("delay_ms", self.delay_ms), ("hang_ms", self.hang_ms), ("drip_ms", self.drip_ms)] {
            if value > MAX_DURATION_MS {
                return Err(FaultPlanError::Duration { endpoint: endpoint.to_string(), field, value });
            }
        }
        Ok(())
    }
}

/// A deterministic one-shot fault: the `nth` (1-based) call matching
/// `endpoint` (an exact endpoint, `"<script>:*"` or `"*"`) gets `kind`,
/// whatever the random rules say.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedFault {
    pub endpoint: String,
    pub nth: u64,
    pub kind: FaultKind,
    /// Only for `kind = "hang"`: how long; 0 (the default) means the
    /// matching rule's `hang_ms`, else [`DEFAULT_HANG_MS`].
    #[serde(default)]
    pub hang_ms: u64,
    /// Only for `kind = "drip_body"`: the pause between bytes; 0 (the
    /// default) means the matching rule's `drip_ms`, else
    /// [`DEFAULT_DRIP_MS`].
    #[serde(default)]
    pub drip_ms: u64,
}

/// The fault plan: a seed, per-endpoint rules and a script of one-shot
/// faults. Rule keys are `"<script>:<rpc>"` (e.g.
/// `"submit_rpc_handler.php:create_batch"`, `"get_output.php:workunit_file"`),
/// `"<script>:*"` or `"*"`; the most specific key that exists wins (no
/// merging between levels).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultPlan {
    pub seed: u64,
    pub rules: BTreeMap<String, FaultRule>,
    pub script: Vec<ScriptedFault>,
}

/// Why a fault plan was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultPlanError {
    #[error("fault plan is not valid {format}: {message}")]
    Parse { format: &'static str, message: String },
    #[error("fault rule {endpoint:?}: {field} = {value} is not a probability in [0, 1]")]
    Probability { endpoint: String, field: &'static str, value: f64 },
    #[error(
        "fault rule {endpoint:?}: the exclusive kinds (http500, http503, reset, hang, \
         truncate, malformed, lose_reply, stall_body, drip_body) sum to {sum}, more than 1"
    )]
    SumExceedsOne { endpoint: String, sum: f64 },
    #[error("fault rule {endpoint:?}: {field} = {value} is more than {MAX_DURATION_MS} ms")]
    Duration { endpoint: String, field: &'static str, value: u64 },
    #[error("bad endpoint pattern {0:?}: expected \"<script>:<rpc>\", \"<script>:*\" or \"*\"")]
    Endpoint(String),
    #[error("scripted fault #{index} ({endpoint:?}): nth must be at least 1")]
    Nth { index: usize, endpoint: String },
}

/// Checks an endpoint pattern: `*`, `<script>:*` or `<script>:<rpc>`, with
/// a non-empty script name that is neither `*` nor contains `:`.
fn valid_pattern(p: &str) -> bool {
    if p == "*" {
        return true;
    }
    match p.split_once(':') {
        Some((script, rpc)) => {
            !script.is_empty() && script != "*" && !rpc.is_empty() && !rpc.contains(':') && !p.chars().any(char::is_whitespace)
        }
        None => false,
    }
}

impl FaultPlan {
    /// Parses a plan from TOML and validates it.
    pub fn from_toml(s: &str) -> Result<Self, FaultPlanError> {
        let plan: FaultPlan =
            toml::from_str(s).map_err(|e| FaultPlanError::Parse { format: "TOML", message: e.to_string().trim_end().to_string() })?;
        plan.validate()?;
        Ok(plan)
    }

    /// Parses a plan from JSON and validates it.
    pub fn from_json(s: &str) -> Result<Self, FaultPlanError> {
        let plan: FaultPlan = serde_json::from_str(s).map_err(|e| FaultPlanError::Parse { format: "JSON", message: e.to_string() })?;
        plan.validate()?;
        Ok(plan)
    }

    /// Checks probabilities, durations, endpoint patterns and `nth`.
    pub fn validate(&self) -> Result<(), FaultPlanError> {
        for (endpoint, rule) in &self.rules {
            if !valid_pattern(endpoint) {
                return Err(FaultPlanError::Endpoint(endpoint.clone()));
            }
            rule.validate(endpoint)?;
        }
        for (index, s) in self.script.iter().enumerate() {
            if !valid_pattern(&s.endpoint) {
                return Err(FaultPlanError::Endpoint(s.endpoint.clone()));
            }
            if s.nth == 0 {
                return Err(FaultPlanError::Nth { index, endpoint: s.endpoint.clone() });
            }
            for (field, value) in [("hang_ms", s.hang_ms), ("drip_ms", s.drip_ms)] {
                if value > MAX_DURATION_MS {
                    return Err(FaultPlanError::Duration { endpoint: s.endpoint.clone(), field, value });
                }
            }
        }
        Ok(())
    }

    /// The rule that applies to `endpoint` (exact, then `<script>:*`, then
    /// `*`), if any.
    pub fn rule_for(&self, endpoint: &str) -> Option<&FaultRule> {
        if let Some(r) = self.rules.get(endpoint) {
            return Some(r);
        }
        if let Some((script, _)) = endpoint.split_once(':') {
            if let Some(r) = self.rules.get(&format!("{script}:*")) {
                return Some(r);
            }
        }
        self.rules.get("*")
    }
}

/// The kinds of fault that change what the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Http500,
    Http503,
    Reset,
    Hang,
    Truncate,
    Malformed,
    LoseReply,
    /// Acted on; the headers (full `Content-Length`) and part of the body,
    /// then nothing, the connection held open until the client goes away.
    StallBody,
    /// Acted on; the headers, then the body one byte every `drip_ms`.
    DripBody,
    /// HTTP 200 with the PHP fatal page of a lost database connection after
    /// what the script had printed (scripted only: `malformed` draws it at
    /// random among other garbage).
    PhpFatal,
}

impl FaultKind {
    /// The snake_case name used in plans and in [`Faults::injected`].
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Http500 => "http500",
            FaultKind::Http503 => "http503",
            FaultKind::Reset => "reset",
            FaultKind::Hang => "hang",
            FaultKind::Truncate => "truncate",
            FaultKind::Malformed => "malformed",
            FaultKind::LoseReply => "lose_reply",
            FaultKind::StallBody => "stall_body",
            FaultKind::DripBody => "drip_body",
            FaultKind::PhpFatal => "php_fatal",
        }
    }

    /// Whether the request is still acted on by the handler (the fault
    /// only spoils the reply).
    pub fn acts(self) -> bool {
        matches!(
            self,
            FaultKind::Truncate
                | FaultKind::Malformed
                | FaultKind::LoseReply
                | FaultKind::StallBody
                | FaultKind::DripBody
                | FaultKind::PhpFatal
        )
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// The decision for one call. `Fault::default()` (or [`Fault::none`]) is
/// "no fault".
#[derive(Debug, Clone, Default)]
pub struct Fault {
    pub kind: Option<FaultKind>,
    pub delay: Option<Duration>,
    hang: Duration,
    drip: Duration,
    cut: u64,
    /// The injector's count of held connections.
    held: Option<Arc<AtomicU64>>,
    /// The client, for a stalled reply to see it leave.
    peer: Option<Peer>,
}

const HTML_500: &str = "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n\
<html><head>\n\
<title>500 Internal Server Error</title>\n\
</head><body>\n\
<h1>Internal Server Error</h1>\n\
<p>The server encountered an internal error or\n\
misconfiguration and was unable to complete\n\
your request.</p>\n\
<p>Please contact the server administrator at \n \
webmaster@localhost to inform them of the time this error occurred,\n \
and the actions you performed just before this error.</p>\n\
<p>More information about this error may be available\n\
in the server error log.</p>\n\
<hr>\n\
<address>Apache/2.4 Server at 127.0.0.1</address>\n\
</body></html>\n";

const HTML_503: &str = "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n\
<html><head>\n\
<title>503 Service Unavailable</title>\n\
</head><body>\n\
<h1>Service Unavailable</h1>\n\
<p>The server is temporarily unable to service your\n\
request due to maintenance downtime or capacity\n\
problems. Please try again later.</p>\n\
<hr>\n\
<address>Apache/2.4 Server at 127.0.0.1</address>\n\
</body></html>\n";

const HTML_CONTENT_TYPE: &str = "text/html; charset=iso-8859-1";

const PHP_FATAL: &str = "<br />\n\
<b>Fatal error</b>:  Uncaught mysqli_sql_exception: Lost connection to MySQL server during query \
in /home/boincadm/projects/sim/html/inc/db_conn.inc:67\n\
Stack trace:\n\
#0 /home/boincadm/projects/sim/html/inc/db_conn.inc(67): mysqli-&gt;query()\n\
#1 {main}\n  \
thrown in <b>/home/boincadm/projects/sim/html/inc/db_conn.inc</b> on line <b>67</b><br />\n";

const PROXY_PAGE: &str = "<html>\r\n\
<head><title>502 Bad Gateway</title></head>\r\n\
<body>\r\n\
<center><h1>502 Bad Gateway</h1></center>\r\n\
<hr><center>nginx</center>\r\n\
</body>\r\n\
</html>\r\n";

/// A response whose body fails on its first poll: actix-web drops the
/// connection before flushing anything (the head is still in its write
/// buffer), so the client sees the connection close with no response.
fn connection_dies() -> HttpResponse {
    let stream = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected fault: connection dropped"))
    });
    HttpResponse::Ok().streaming(stream)
}

impl Fault {
    /// No fault.
    pub fn none() -> Self {
        Fault::default()
    }

    /// Watches `peer` (see [`Peer::of`]) while a `StallBody` holds its
    /// connection: the reply is dropped as soon as the client leaves.
    pub fn watching(mut self, peer: Option<Peer>) -> Self {
        self.peer = peer;
        self
    }

    /// How long a `Hang` lasts before the connection dies.
    pub fn hang_duration(&self) -> Duration {
        self.hang
    }

    /// Whether the handler should act on the request (false for the kinds
    /// [`before`](Self::before) answers).
    pub fn acts(&self) -> bool {
        !matches!(self.kind, Some(k) if !k.acts())
    }

    /// Before the handler acts. Sleeps the delay if any. For `Http500`,
    /// `Http503`, `Reset` and `Hang` returns the response to give instead:
    /// the request must then NOT be acted on. `Hang` first sleeps its hang
    /// time, then behaves as `Reset`.
    pub async fn before(&self) -> Option<HttpResponse> {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        match self.kind? {
            FaultKind::Http500 => Some(HttpResponse::InternalServerError().content_type(HTML_CONTENT_TYPE).body(HTML_500)),
            FaultKind::Http503 => Some(HttpResponse::ServiceUnavailable().content_type(HTML_CONTENT_TYPE).body(HTML_503)),
            FaultKind::Reset => Some(connection_dies()),
            FaultKind::Hang => {
                tokio::time::sleep(self.hang).await;
                Some(connection_dies())
            }
            FaultKind::Truncate
            | FaultKind::Malformed
            | FaultKind::LoseReply
            | FaultKind::StallBody
            | FaultKind::DripBody
            | FaultKind::PhpFatal => None,
        }
    }

    /// After the handler acted: turns its reply into what the client gets.
    ///
    /// * no fault (or a kind `before` handles): `status`, `content_type`,
    ///   `extra_headers` and `body` as given;
    /// * `Truncate`: the same, but the body is cut at a seeded point strictly
    ///   before its end (an empty body stays empty); `Content-Length` is that
    ///   of the cut body, so the client sees a complete but short reply;
    /// * `Malformed`: HTTP 200 with garbage instead (seeded choice among a
    ///   PHP fatal error after the reply's first line, a proxy's HTML error
    ///   page, or binary bytes), without `extra_headers`;
    /// * `LoseReply`: the connection dies with no response;
    /// * `StallBody`: the normal headers with the full `Content-Length`
    ///   (none for an empty body: chunked), the body up to a seeded point
    ///   strictly before its end, then nothing until the client goes away
    ///   (or [`MAX_HOLD`]);
    /// * `DripBody`: the normal headers, then the body one byte per
    ///   `drip_ms` (an empty body comes at once).
    ///
    /// A `Content-Length` in `extra_headers` is ignored (actix computes it);
    /// an invalid header name or value is skipped with a warning.
    pub fn after(&self, status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
        match self.kind {
            Some(FaultKind::LoseReply) => connection_dies(),
            Some(FaultKind::Truncate) => {
                let cut = if body.is_empty() { 0 } else { (self.cut % body.len() as u64) as usize };
                if extra_headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-disposition")) {
                    // A file download torn in transit: the promised length,
                    // then the connection dies, as a real network cut looks.
                    torn(status, content_type, body, cut, extra_headers)
                } else {
                    build(status, content_type, body.slice(..cut), extra_headers)
                }
            }
            Some(FaultKind::Malformed) => self.malformed(content_type, &body),
            Some(FaultKind::PhpFatal) => fatal_page(content_type, &body),
            Some(FaultKind::StallBody) => self.stalled(status, content_type, body, extra_headers),
            Some(FaultKind::DripBody) => self.dripping(status, content_type, body, extra_headers),
            _ => build(status, content_type, body, extra_headers),
        }
    }

    /// A count of this reply in [`Faults::held_bodies`] until it is dropped:
    /// actix drops a response's body when its client goes away.
    fn hold(&self) -> Held {
        let count = self.held.clone().unwrap_or_default();
        count.fetch_add(1, Ordering::SeqCst);
        Held(count)
    }

    fn stalled(&self, status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
        use futures_util::StreamExt;
        let (held, peer) = (self.hold(), self.peer.clone());
        let cut = if body.is_empty() { 0 } else { (self.cut % body.len() as u64) as usize };
        let first = futures_util::stream::once(std::future::ready(Ok::<Bytes, std::io::Error>(body.slice(..cut))));
        let stall = futures_util::stream::once(async move {
            let _held = held;
            let gone = async {
                match &peer {
                    Some(p) => p.gone().await,
                    None => std::future::pending().await,
                }
            };
            // Either way the connection dies here, and `held` with it.
            let why = match tokio::time::timeout(MAX_HOLD, gone).await {
                Ok(()) => "injected fault: the client of a stalled body left",
                Err(_) => "injected fault: stalled body given up",
            };
            Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why))
        });
        let stream = first.chain(stall);
        let r = build(status, content_type, Bytes::new(), extra_headers);
        if body.is_empty() {
            r.set_body(actix_web::body::BoxBody::new(actix_web::body::BodyStream::new(stream)))
        } else {
            r.set_body(actix_web::body::BoxBody::new(actix_web::body::SizedStream::new(body.len() as u64, stream)))
        }
    }

    fn dripping(&self, status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
        let (held, pause, started) = (self.hold(), self.drip, std::time::Instant::now());
        let full = body.len() as u64;
        // One byte per pause; a write to a client that has gone fails and
        // actix drops the stream, and with it `held`.
        let stream = futures_util::stream::unfold((body, held), move |(rest, held)| async move {
            if rest.is_empty() {
                return None;
            }
            if started.elapsed() > MAX_HOLD {
                let gone = std::io::Error::new(std::io::ErrorKind::TimedOut, "injected fault: dripping body given up");
                return Some((Err(gone), (Bytes::new(), held)));
            }
            actix_rt::time::sleep(pause).await;
            Some((Ok::<Bytes, std::io::Error>(rest.slice(..1)), (rest.slice(1..), held)))
        });
        let r = build(status, content_type, Bytes::new(), extra_headers);
        r.set_body(actix_web::body::BoxBody::new(actix_web::body::SizedStream::new(full, stream)))
    }

    fn malformed(&self, content_type: &str, body: &Bytes) -> HttpResponse {
        match self.cut % 3 {
            0 => fatal_page(content_type, body),
            1 => build(StatusCode::OK, "text/html", Bytes::from_static(PROXY_PAGE.as_bytes()), &[]),
            _ => {
                let mut rng = StdRng::seed_from_u64(self.cut);
                let n = rng.gen_range(16..256);
                // Binary noise that is not valid UTF-8 nor XML: starts with 0xFF.
                let mut out = vec![0xFFu8];
                out.extend((0..n).map(|_| rng.gen::<u8>()));
                build(StatusCode::OK, content_type, Bytes::from(out), &[])
            }
        }
    }
}

/// Counted in [`Faults::held_bodies`] while alive.
struct Held(Arc<AtomicU64>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A PHP fatal error after whatever the script had printed: for an XML
/// reply, its declaration and root element line.
fn fatal_page(content_type: &str, body: &Bytes) -> HttpResponse {
    let mut out = Vec::new();
    if body.starts_with(b"<?xml") {
        let mut lines = body.split_inclusive(|b| *b == b'\n');
        for _ in 0..2 {
            if let Some(l) = lines.next() {
                out.extend_from_slice(l);
            }
        }
    }
    out.extend_from_slice(PHP_FATAL.as_bytes());
    build(StatusCode::OK, content_type, Bytes::from(out), &[])
}

/// Headers with the full Content-Length, the first `cut` bytes, then a
/// dropped connection.
fn torn(status: StatusCode, content_type: &str, body: Bytes, cut: usize, extra_headers: &[(&str, String)]) -> HttpResponse {
    use futures_util::StreamExt;
    let full = body.len() as u64;
    let head = futures_util::stream::once(std::future::ready(Ok::<Bytes, std::io::Error>(body.slice(..cut))));
    // A moment for the first bytes to leave before the connection dies.
    let cut_off = futures_util::stream::once(async {
        actix_rt::time::sleep(Duration::from_millis(50)).await;
        Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected fault: download torn"))
    });
    let r = build(status, content_type, Bytes::new(), extra_headers);
    r.set_body(actix_web::body::BoxBody::new(actix_web::body::SizedStream::new(full, head.chain(cut_off))))
}

fn build(status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
    let mut b = HttpResponse::build(status);
    match HeaderValue::from_str(content_type) {
        Ok(v) => {
            b.insert_header((actix_web::http::header::CONTENT_TYPE, v));
        }
        Err(_) => tracing::warn!(content_type, "invalid content type skipped"),
    }
    for (name, value) in extra_headers {
        let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) else {
            tracing::warn!(header = name, "invalid header skipped");
            continue;
        };
        if n == actix_web::http::header::CONTENT_LENGTH {
            continue;
        }
        b.append_header((n, v));
    }
    b.body(body)
}
