//! The seeded fault plan: which fault the proxy injects into the nth call of
//! an endpoint. A decision is a pure function of (seed, endpoint, n), so a
//! run replays even when the daemon's concurrent calls interleave
//! differently.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// What the proxy does with one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Forward and relay the reply unchanged.
    None,
    /// 500 or 503 without forwarding, with or without `Retry-After`.
    Status { code: u16, retry_after: Option<u32> },
    /// Close the connection before forwarding: the server did nothing.
    Reset,
    /// Forward (the server acts), then close without a reply.
    LoseReply,
    /// Forward, then the full `Content-Length`, part of the body and a
    /// closed connection.
    Torn { keep_permille: u32 },
    /// Forward, then the reply a few bytes at a time.
    Trickle { chunk: usize, pause_ms: u64 },
    /// Wait, then forward and relay.
    Delay { ms: u64 },
    /// Wait past the daemon's RPC timeout without forwarding, then close.
    Hang { ms: u64 },
    /// Forward, then HTTP 200 with what PHP had printed and a fatal error
    /// page, as a real server's uncaught database exception looks.
    PhpFatal,
    /// Forward, then the headers (the full `Content-Length`) and part of
    /// the body, then nothing until the daemon gives up and closes.
    StallBody { keep_permille: u32 },
    /// Forward, then the headers and the body one byte per `pause_ms`:
    /// slower than any whole-reply deadline of the daemon allows.
    DripBody { pause_ms: u64 },
}

impl Fault {
    /// A short name for tables and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Status { code: 500, retry_after: None } => "http500",
            Fault::Status { code: 500, .. } => "http500_retry_after",
            Fault::Status { retry_after: None, .. } => "http503",
            Fault::Status { .. } => "http503_retry_after",
            Fault::Reset => "reset",
            Fault::LoseReply => "lose_reply",
            Fault::Torn { .. } => "torn",
            Fault::Trickle { .. } => "trickle",
            Fault::Delay { .. } => "delay",
            Fault::Hang { .. } => "hang",
            Fault::PhpFatal => "php_fatal",
            Fault::StallBody { .. } => "stall_body",
            Fault::DripBody { .. } => "drip_body",
        }
    }

    /// Whether the request reaches the server.
    pub fn forwards(&self) -> bool {
        !matches!(self, Fault::Status { .. } | Fault::Reset | Fault::Hang { .. })
    }
}

/// How hard a run shakes the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Gentle,
    Default,
    Brutal,
    /// With --sim: script jobs whose hosts send hostile condor_out.zips,
    /// under gentle's faults (docs/chaos.md)
    HostileHosts,
    /// As hostile-hosts, at a runner app with a quorum of 2, one host of
    /// three lying about every job it gets
    HostileHostsQuorum,
}

impl Profile {
    /// Whether script jobs meet hostile hosts (run/hostile.rs).
    pub fn hostile(self) -> bool {
        matches!(self, Profile::HostileHosts | Profile::HostileHostsQuorum)
    }
}

/// Probabilities per call of each fault kind (they are exclusive).
#[derive(Debug, Clone, Copy)]
struct Mix {
    http500: f64,
    http503: f64,
    reset: f64,
    lose_reply: f64,
    torn: f64,
    trickle: f64,
    delay: f64,
    hang: f64,
    php_fatal: f64,
    stall_body: f64,
    drip_body: f64,
}

impl Profile {
    fn mix(self) -> Mix {
        match self {
            Profile::Gentle | Profile::HostileHosts | Profile::HostileHostsQuorum => Mix {
                http500: 0.02,
                http503: 0.02,
                reset: 0.02,
                lose_reply: 0.03,
                torn: 0.01,
                trickle: 0.0,
                delay: 0.02,
                hang: 0.0,
                php_fatal: 0.01,
                stall_body: 0.0,
                drip_body: 0.0,
            },
            // About 35% of calls faulted, 10% lost replies.
            Profile::Default => Mix {
                http500: 0.04,
                http503: 0.04,
                reset: 0.035,
                lose_reply: 0.10,
                torn: 0.04,
                trickle: 0.02,
                delay: 0.03,
                hang: 0.01,
                php_fatal: 0.03,
                // Each costs the daemon a whole RPC timeout: rare enough
                // that the short CI sweep keeps its duration.
                stall_body: 0.0025,
                drip_body: 0.0025,
            },
            Profile::Brutal => Mix {
                http500: 0.06,
                http503: 0.06,
                reset: 0.07,
                lose_reply: 0.20,
                torn: 0.07,
                trickle: 0.03,
                delay: 0.03,
                hang: 0.02,
                php_fatal: 0.04,
                stall_body: 0.01,
                drip_body: 0.01,
            },
        }
    }

    /// Batches per run when the operator does not say.
    pub fn max_jobs(self) -> usize {
        match self {
            Profile::Gentle | Profile::HostileHosts | Profile::HostileHostsQuorum => 3,
            Profile::Default => 6,
            Profile::Brutal => 10,
        }
    }
}

/// A stable 64-bit hash (FNV-1a): the same on every build and platform.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The longest a `Delay` holds a request before forwarding it: the
/// daemon's `create_settle_secs` must be longer (see run.rs).
pub const MAX_DELAY_MS: u64 = 1600;

/// The shortest pause of a `DripBody` between two bytes: a reply of 40
/// bytes or more outlasts the daemon's 4 s RPC timeout, and a download
/// drips far below its stall rate.
pub const DRIP_MIN_MS: u64 = 100;

/// The plan of one run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub seed: u64,
    pub profile: Profile,
    /// The daemon's per-attempt RPC timeout: a hang lasts past it.
    pub rpc_timeout: Duration,
}

impl Plan {
    /// The fault for call `n` (from 1) of `endpoint`.
    pub fn decide(&self, endpoint: &str, n: u64) -> Fault {
        let mut rng = StdRng::seed_from_u64(self.seed ^ fnv(endpoint.as_bytes()) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let m = self.profile.mix();
        // Always three draws, whatever the outcome.
        let (pick, a, b): (f64, u64, u64) = (rng.gen(), rng.gen(), rng.gen());
        let hang_ms = self.rpc_timeout.as_millis() as u64 + 500 + a % 1000;
        let table: [(f64, Fault); 11] = [
            (m.http500, Fault::Status { code: 500, retry_after: (a % 2 == 0).then_some(1 + (b % 2) as u32) }),
            (m.http503, Fault::Status { code: 503, retry_after: (a % 2 == 0).then_some(1 + (b % 2) as u32) }),
            (m.reset, Fault::Reset),
            (m.lose_reply, Fault::LoseReply),
            (m.torn, Fault::Torn { keep_permille: (a % 1000) as u32 }),
            (m.trickle, Fault::Trickle { chunk: 16 + (a % 512) as usize, pause_ms: 5 + b % 20 }),
            (m.delay, Fault::Delay { ms: 100 + a % (MAX_DELAY_MS - 100) }),
            (m.hang, Fault::Hang { ms: hang_ms }),
            (m.php_fatal, Fault::PhpFatal),
            (m.stall_body, Fault::StallBody { keep_permille: (a % 1000) as u32 }),
            (m.drip_body, Fault::DripBody { pause_ms: DRIP_MIN_MS + b % DRIP_MIN_MS }),
        ];
        let mut acc = 0.0;
        for (p, fault) in table {
            acc += p;
            if pick < acc {
                return fault;
            }
        }
        Fault::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(seed: u64, profile: Profile) -> Plan {
        Plan { seed, profile, rpc_timeout: Duration::from_secs(4) }
    }

    #[test]
    fn decisions_replay_from_the_seed() {
        let (a, b) = (plan(7, Profile::Default), plan(7, Profile::Default));
        for n in 1..200 {
            assert_eq!(a.decide("submit_rpc_handler.php:create_batch", n), b.decide("submit_rpc_handler.php:create_batch", n));
        }
        let c = plan(8, Profile::Default);
        assert!((1..200).any(|n| a.decide("x", n) != c.decide("x", n)), "another seed, another plan");
    }

    #[test]
    fn the_default_profile_faults_about_a_third_and_loses_a_tenth() {
        let p = plan(1, Profile::Default);
        let n = 20_000u64;
        let decisions: Vec<Fault> = (1..=n).map(|i| p.decide(&format!("e{}", i % 13), i)).collect();
        let faulted = decisions.iter().filter(|f| **f != Fault::None).count() as f64 / n as f64;
        let lost = decisions.iter().filter(|f| **f == Fault::LoseReply).count() as f64 / n as f64;
        assert!((0.32..0.38).contains(&faulted), "{faulted}");
        assert!((0.08..0.12).contains(&lost), "{lost}");
        for kind in ["http500", "http503_retry_after", "reset", "torn", "trickle", "delay", "hang", "php_fatal", "stall_body", "drip_body"]
        {
            assert!(decisions.iter().any(|f| f.label() == kind), "{kind} drawn");
        }
    }

    #[test]
    fn a_hang_outlasts_the_daemons_timeout() {
        let p = plan(3, Profile::Brutal);
        let hang = (1..50_000).map(|n| p.decide("h", n)).find(|f| matches!(f, Fault::Hang { .. })).unwrap();
        let Fault::Hang { ms } = hang else { unreachable!() };
        assert!(ms > 4000);
    }
}
