//! The fault plan: per-endpoint rules of how likely each kind of fault is,
//! one-shot scripted faults, and their validation (`docs/sim-faults.md`).

use std::collections::BTreeMap;
use std::time::Duration;

/// Default hang before the connection is dropped, when `hang_ms` is 0.
pub const DEFAULT_HANG_MS: u64 = 60_000;
/// Default delay, when `delay` is drawn and `delay_ms` is 0.
pub const DEFAULT_DELAY_MS: u64 = 1_000;
/// Upper bound accepted for `delay_ms`, `hang_ms` and `drip_ms` (one hour).
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// Default pause between the bytes of a `drip_body`, when `drip_ms` is 0.
pub const DEFAULT_DRIP_MS: u64 = 1_000;

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
    pub(super) fn exclusive(&self) -> [(FaultKind, f64); 9] {
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

    pub(super) fn drip_duration(&self) -> Duration {
        Duration::from_millis(if self.drip_ms == 0 { DEFAULT_DRIP_MS } else { self.drip_ms })
    }

    pub(super) fn hang_duration(&self) -> Duration {
        Duration::from_millis(if self.hang_ms == 0 { DEFAULT_HANG_MS } else { self.hang_ms })
    }

    pub(super) fn delay_duration(&self) -> Duration {
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
    /// Hosts that send hostile outputs for runner jobs (crate::hostile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostile_outputs: Option<crate::hostile::HostileOutputs>,
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
    #[error("{0}")]
    Hostile(String),
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
        if let Some(h) = &self.hostile_outputs {
            h.validate().map_err(FaultPlanError::Hostile)?;
        }
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
    /// The snake_case name used in plans and in [`Faults::injected`](super::Faults::injected).
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
