//! The simulated project's configuration (`--config FILE`, TOML): clock,
//! volunteer hosts, apps, users and the switches for the real server's
//! quirks. Every field has a default; `SimConfig::default()` is what the
//! sim serves without `--config`.

use serde::{Deserialize, Serialize};

use crate::apps::{builtin_apps, AppSpec};

/// Why a configuration was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config is not valid TOML: {0}")]
    Toml(String),
    #[error("config: {0}")]
    Invalid(String),
}

/// The whole configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// The project's path component: URLs are `http://ADDR/<project_name>/…`.
    pub project_name: String,
    /// Simulated seconds per real second (60 = a sim minute per second).
    /// The sim clock drives `server_time`, `mod_time`, deadlines, expiry.
    pub time_scale: f64,
    /// Real milliseconds between two rounds of the host scheduler.
    pub tick_ms: u64,
    /// Seed of the hosts' random draws (errors, stragglers, losses).
    pub seed: u64,
    /// Groups of identical volunteer hosts.
    pub hosts: Vec<HostSpec>,
    /// The project's apps (default: the built-in ones).
    pub apps: Vec<AppSpec>,
    /// Extra users, besides the default one (which has `submit_all`).
    pub users: Vec<UserSpec>,
    /// Behaviours of a real server worth a switch (spec §11).
    pub quirks: Quirks,
    /// Real seconds an instance's process may run before it is killed.
    pub run_timeout_secs: f64,
    /// How many instance processes run at once at most (real processes;
    /// more busy hosts just wait for a slot).
    pub max_parallel_runs: usize,
    /// Largest request body accepted, in bytes.
    pub max_request_bytes: usize,
    /// At most this many jobs are looked at per scheduler round (keeps a
    /// 100,000-job batch from stalling the RPCs).
    pub transition_batch: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            project_name: "boinctest".into(),
            time_scale: 1.0,
            tick_ms: 100,
            seed: 1,
            hosts: vec![HostSpec::default()],
            apps: builtin_apps(),
            users: Vec::new(),
            quirks: Quirks::default(),
            run_timeout_secs: 60.0,
            max_parallel_runs: 4,
            max_request_bytes: 1 << 30,
            transition_batch: 5000,
        }
    }
}

/// A group of `count` identical volunteer hosts.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostSpec {
    /// Hosts are called `<name>_<i>` (`i` from 1).
    pub name: String,
    pub count: u32,
    /// Speed: an instance takes `rsc_fpops_est / flops` simulated seconds.
    pub flops: f64,
    /// Probability that an instance fails on the host (client error,
    /// exit status -1) without running the app.
    pub error_rate: f64,
    /// Probability that an instance takes `straggler_factor` times longer.
    pub straggler_rate: f64,
    pub straggler_factor: f64,
    /// Probability that an instance never reports back (the host vanishes
    /// with it; it times out at its deadline).
    pub lost_rate: f64,
    /// Probability that the host lies about an instance it ran: it changes
    /// one output (a runner's `_condor_stdout`, another app's first output)
    /// in a way of its own, so that no two liars agree.
    pub lie_rate: f64,
    /// The project user who owns the hosts (jobs targeted at a user run on
    /// that user's hosts); 0 = none of the project's users.
    pub user_id: i64,
}

impl Default for HostSpec {
    fn default() -> Self {
        HostSpec {
            name: "host".into(),
            count: 4,
            flops: 1e10,
            error_rate: 0.0,
            straggler_rate: 0.0,
            straggler_factor: 10.0,
            lost_rate: 0.0,
            lie_rate: 0.0,
            user_id: 0,
        }
    }
}

impl HostSpec {
    /// What each host of the group does with an instance.
    pub fn behaviour(&self) -> HostBehaviour {
        HostBehaviour {
            flops: self.flops,
            error_rate: self.error_rate,
            straggler_rate: self.straggler_rate,
            straggler_factor: self.straggler_factor,
            lost_rate: self.lost_rate,
            lie_rate: self.lie_rate,
        }
    }
}

/// How a host treats the instances it gets (see [`HostSpec`]); set per
/// group in the config, changeable per host at run time (`__sim/hosts`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostBehaviour {
    pub flops: f64,
    pub error_rate: f64,
    pub straggler_rate: f64,
    pub straggler_factor: f64,
    pub lost_rate: f64,
    #[serde(default)]
    pub lie_rate: f64,
}

impl HostBehaviour {
    /// Values that would make the sim misbehave.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.flops.is_finite() && self.flops > 0.0) {
            return Err("flops must be > 0".into());
        }
        for (n, p) in [
            ("error_rate", self.error_rate),
            ("straggler_rate", self.straggler_rate),
            ("lost_rate", self.lost_rate),
            ("lie_rate", self.lie_rate),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{n} {p} is not in [0, 1]"));
            }
        }
        if !(self.straggler_factor.is_finite() && self.straggler_factor >= 1.0) {
            return Err("straggler_factor must be >= 1".into());
        }
        Ok(())
    }
}

/// A user to create at start (if no user of that name exists yet).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserSpec {
    pub name: String,
    /// Random 32 hex digits if absent.
    pub authenticator: Option<String>,
    /// A `user_submit` record with `submit_all`.
    pub submit_all: bool,
    /// Per-app submit rights (`user_submit_app` records).
    pub apps: Vec<String>,
    /// No `user_submit` record at all ("no submit access" / "no file
    /// access").
    pub no_submit: bool,
}

/// `query_completed_job` for a job without canonical instance (spec §4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CompletedJobMode {
    /// What the PHP code means: the last errored instance's fields.
    Intended,
    /// PHP < 8.1: only `<error_mask>`.
    #[serde(rename = "php_lt_81")]
    PhpLt81,
    /// PHP >= 8.1: the body stops after `<error_mask>` with a PHP fatal
    /// error (HTTP 200, as captured from a real 8.3 server).
    #[default]
    #[serde(rename = "php_ge_81")]
    PhpGe81,
}

/// Switches for a real server's quirks. Defaults = a current real server
/// (BOINC 8.3, PHP 8.2), as captured.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quirks {
    pub query_completed_job: CompletedJobMode,
    /// `'` → `&#039;` in `stderr_out` and HTML-escaped messages.
    pub escape_apostrophe: bool,
    /// File parts PHP accepts per upload (`max_file_uploads`); further
    /// parts are dropped. 0 = no limit.
    pub max_file_uploads: usize,
    /// Bytes of one uploaded file at most (`upload_max_filesize`, stock
    /// 2M): a larger part is refused. 0 = no limit.
    pub upload_max_filesize: u64,
    /// Bytes of a POST body at most (`post_max_size`, stock 8M): PHP drops
    /// a larger body whole, so the script sees no request. 0 = no limit.
    pub post_max_size: u64,
    /// Batch names with `'`, `"`, `\`, CR or LF are never found by name.
    pub double_escaped_names: bool,
    /// `query_files` with a larger `delete_time` fails after updating it.
    pub query_files_delete_time_error: bool,
    /// The first dispatch of an instance bumps the job's `mod_time`.
    pub first_dispatch_bumps_mod_time: bool,
    /// A request whose root element is completely empty (`<ping/>`) is
    /// "can't parse request message" (seen on the real server).
    pub reject_empty_root: bool,
}

impl Default for Quirks {
    fn default() -> Self {
        Quirks {
            query_completed_job: CompletedJobMode::PhpGe81,
            escape_apostrophe: true,
            max_file_uploads: 20,
            upload_max_filesize: 2 << 20,
            post_max_size: 8 << 20,
            double_escaped_names: true,
            query_files_delete_time_error: true,
            first_dispatch_bumps_mod_time: true,
            reject_empty_root: true,
        }
    }
}

impl SimConfig {
    /// Parses and checks a TOML configuration.
    pub fn from_toml(s: &str) -> Result<Self, ConfigError> {
        let cfg: SimConfig = toml::from_str(s).map_err(|e| ConfigError::Toml(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks values that would make the sim misbehave.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.project_name.is_empty() || !self.project_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return bad(format!("project_name {:?} must be [A-Za-z0-9_-]+", self.project_name));
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return bad(format!("time_scale {} must be > 0", self.time_scale));
        }
        if self.tick_ms == 0 {
            return bad("tick_ms must be > 0".into());
        }
        for h in &self.hosts {
            h.behaviour().validate().map_err(|m| ConfigError::Invalid(format!("host {}: {m}", h.name)))?;
        }
        let mut names = std::collections::BTreeSet::new();
        for a in &self.apps {
            if a.name.is_empty() || !names.insert(a.name.as_str()) {
                return bad(format!("app name {:?} empty or repeated", a.name));
            }
            if let Some(o) = a.optional_outputs.iter().find(|o| !a.outputs.contains(o)) {
                return bad(format!("app {}: optional output {o:?} is not one of its outputs", a.name));
            }
            if a.min_quorum == 0 || a.target_nresults < a.min_quorum {
                return bad(format!("app {}: need 1 <= min_quorum <= target_nresults", a.name));
            }
        }
        for u in &self.users {
            if u.name.is_empty() {
                return bad("a user needs a name".into());
            }
            for app in &u.apps {
                if !names.contains(app.as_str()) {
                    return bad(format!("user {}: unknown app {app}", u.name));
                }
            }
        }
        if !(self.run_timeout_secs.is_finite() && self.run_timeout_secs > 0.0) {
            return bad("run_timeout_secs must be > 0".into());
        }
        if self.max_parallel_runs == 0 {
            return bad("max_parallel_runs must be > 0".into());
        }
        Ok(())
    }

    /// The project's total speed (for `estimate_batch`).
    pub fn total_flops(&self) -> f64 {
        let f: f64 = self.hosts.iter().map(|h| h.flops * h.count as f64).sum();
        if f > 0.0 {
            f
        } else {
            1e9
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_round_trips() {
        let c = SimConfig::default();
        c.validate().unwrap();
        let s = toml::to_string(&c).unwrap();
        let back = SimConfig::from_toml(&s).unwrap();
        assert_eq!(back.apps.len(), c.apps.len());
    }

    #[test]
    fn partial_config() {
        let c = SimConfig::from_toml(
            "time_scale = 60\n[[hosts]]\nname = \"slow\"\ncount = 2\nflops = 1e9\n[quirks]\nquery_completed_job = \"intended\"\n",
        )
        .unwrap();
        assert_eq!(c.time_scale, 60.0);
        assert_eq!(c.hosts[0].count, 2);
        assert_eq!(c.hosts[0].straggler_factor, 10.0);
        assert_eq!(c.quirks.query_completed_job, CompletedJobMode::Intended);
        assert!(c.quirks.reject_empty_root);
        assert!(SimConfig::from_toml("bogus = 1").is_err());
    }

    #[test]
    fn the_documented_example_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/sim.md");
        let Ok(doc) = std::fs::read_to_string(path) else {
            return;
        };
        let start = doc.find("```toml\n").expect("a toml block") + 8;
        let end = start + doc[start..].find("```").unwrap();
        let c = SimConfig::from_toml(&doc[start..end]).unwrap();
        assert_eq!(c.hosts.len(), 2);
        assert_eq!(c.apps[1].min_quorum, 2);
        assert_eq!(c.users[0].apps, ["wordcount"]);
    }
}
