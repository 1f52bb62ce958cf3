//! Tunables of the daemon, read straight from the TOML config file (every
//! key optional; the defaults suit HTCondor's gridmanager: every command ends
//! inside its 300 s call timeout). Durations are written as `*_secs` (a
//! positive number) or `*_ms` (a whole number); nonsense is refused with the
//! key's name, never replaced by a guess.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// Where the SQLite state (MD5 cache, BLAH jobs) lives.
    pub state_dir: PathBuf,
    /// Log file, rotated daily; default `<state_dir>/boinc_gahp.log`.
    pub log_file: Option<PathBuf>,
    /// A `tracing` filter, e.g. `info` or `info,gahp_project=debug`.
    pub log_level: String,
    /// Log files kept; older ones are deleted at each rotation.
    pub max_log_files: usize,
    /// How often the log file rotates: `daily` (the default), `hourly` or
    /// `minutely` (for soak tests, where days pass in minutes).
    pub log_rotation: LogRotation,
    /// A whole command (all its RPCs and retries) gives up after this.
    #[serde(rename = "command_timeout_secs", with = "secs")]
    pub command_timeout: Duration,
    /// One HTTP exchange (request sent until reply body read).
    #[serde(rename = "rpc_timeout_secs", with = "secs")]
    pub rpc_timeout: Duration,
    #[serde(rename = "connect_timeout_secs", with = "secs")]
    pub connect_timeout: Duration,
    /// BOINC_PING / BLAH_PING: one attempt within this; a probe must learn
    /// "down" in seconds, not after the retries of a command.
    #[serde(rename = "ping_timeout_secs", with = "secs")]
    pub ping_timeout: Duration,
    /// A download attempt fails when fewer than 512 bytes arrive in this
    /// long (a stalled or dripping body); it may last until the download's
    /// deadline while the body keeps flowing.
    #[serde(rename = "download_stall_secs", with = "secs")]
    pub download_stall_timeout: Duration,
    /// First retry delay; doubled per attempt up to `retry_max`, each delay
    /// then scaled by a random factor in [0.5, 1].
    #[serde(rename = "retry_base_ms", with = "millis")]
    pub retry_base: Duration,
    #[serde(rename = "retry_max_ms", with = "millis")]
    pub retry_max: Duration,
    /// HTTP requests in flight per project.
    pub max_concurrent_rpcs: usize,
    /// Files per upload_files call (PHP's max_file_uploads is 20).
    pub upload_chunk: usize,
    /// Bytes per upload_files request body (files, multipart framing and
    /// request XML): PHP drops a body over its `post_max_size` whole.
    pub upload_max_bytes: u64,
    /// Identical BOINC_QUERY_BATCHES within this window share one RPC.
    #[serde(rename = "query_coalesce_ms", with = "millis")]
    pub query_coalesce: Duration,
    /// Ask the server with floor(min_mod_time) - 1: its clock has 1 s steps.
    pub widen_min_mod_time: bool,
    /// How often work sequences ask for their steps' status (one
    /// query_batch2 per project for every live step).
    #[serde(rename = "sequence_poll_ms", with = "millis")]
    pub sequence_poll: Duration,
    /// A sequence stopped by a cancelled `batch boinc` job (condor_hold or
    /// condor_rm: the gridmanager sends the same cancel) and not resumed
    /// within this is taken for removed: purged (its batches retired, its
    /// files deleted).
    #[serde(rename = "purge_stopped_sequences_after_secs", with = "secs")]
    pub purge_stopped_after: Duration,
    /// create_batch's first expiry, before the gridmanager's first lease.
    #[serde(rename = "initial_expire_secs", with = "secs")]
    pub initial_expire: Duration,
    /// How long a create_batch request may take to reach the server's
    /// script: one sent less than this ago, whose outcome is unknown (a lost
    /// reply, or a daemon killed while it was in flight), may still land,
    /// so a batch of that name is not created again until it has passed.
    #[serde(rename = "create_settle_secs", with = "secs")]
    pub create_settle: Duration,
    /// Extra trust roots (PEM) besides the built-in web roots.
    pub ca_files: Vec<PathBuf>,
    /// Hashing threads.
    pub hash_threads: usize,
    /// Test hook (`BOINC_GAHP_PANIC_ON`, never from the file): a command
    /// naming this batch or job panics its actor.
    #[serde(skip)]
    pub panic_on: Option<String>,
    /// A served client's projects (URL, authenticator file), set by
    /// `boinc_gahp serve`: its pools may name only these, and use them with
    /// these keys (`Pool::load_granted`). None: the stdio daemon.
    #[serde(skip)]
    pub pool_grants: Option<Vec<(String, PathBuf)>>,
    /// The `BLAH_*` front end (`grid_resource = batch boinc`).
    pub blah: BlahConfig,
    /// What a zip from a project, an app or a volunteer's host may hold.
    pub unpack: UnpackLimits,
    /// The Prometheus metrics endpoint (docs/metrics.md).
    pub metrics: MetricsConfig,
    /// Settings of one project (`[projects."URL"]`), over the ones above.
    pub projects: BTreeMap<String, ProjectConfig>,
}

/// The `[metrics]` section: off unless `listen` is set.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where `/metrics` is served, e.g. `127.0.0.1:9631`; loopback only.
    /// Each daemon HTCondor starts (one per user) needs its own port: one
    /// that finds it taken goes on without metrics, saying so in its log.
    pub listen: Option<std::net::SocketAddr>,
}

/// What one project's server takes, where it differs from the defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectConfig {
    /// Its PHP's `max_file_uploads`, if not 20.
    pub upload_chunk: Option<usize>,
    /// Its PHP's `post_max_size` in bytes, if not 8M.
    pub upload_max_bytes: Option<u64>,
}

/// PHP's stock `post_max_size` (8M): the default byte budget of an upload.
pub const PHP_POST_MAX_SIZE: u64 = 8 << 20;

/// Smallest byte budget allowed: room for a request and a small file.
const MIN_UPLOAD_BYTES: u64 = 64 << 10;

/// How one upload_files call to a project is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadLimits {
    pub max_files: usize,
    pub max_bytes: u64,
}

/// How often the log rotates to a new file (named by its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogRotation {
    Daily,
    Hourly,
    Minutely,
}

/// Where `BLAH_*` jobs go and how they are watched (the `[blah]` section
/// of the config file).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlahConfig {
    /// The default project; a job may name another with `BoincProjectUrl`.
    pub project_url: Option<String>,
    /// A file whose first word is the account key (`BoincAuthenticatorFile`
    /// overrides it per job). `~/` is the home directory; a relative path is
    /// relative to the config file.
    pub authenticator_file: Option<PathBuf>,
    /// The app of jobs that name none (neither `+remote_BoincApp` nor
    /// `batch_queue`) and send no executable (docs/runner.md).
    pub default_app: Option<String>,
    /// The runner (docs/runner.md) that jobs naming no app and sending
    /// their own executable go to.
    pub runner_app: Option<String>,
    /// The runner for jobs with a `container_image` that name no app (one
    /// with `container = true` in its `[blah.apps.<name>]`).
    pub container_runner_app: Option<String>,
    /// What each app provides for a job's requests (`[blah.apps.<name>]`).
    pub apps: BTreeMap<String, AppConfig>,
    /// Jobs may choose their own project and authenticator file.
    pub allow_project_override: bool,
    /// One query_batch2 per project per period answers every status.
    #[serde(rename = "status_refresh_secs", with = "secs")]
    pub status_refresh: Duration,
    /// A submission retries transient failures this long, then holds the job.
    #[serde(rename = "submit_timeout_secs", with = "secs")]
    pub submit_timeout: Duration,
    /// Batch expiry set on the server, renewed at half-life while watched.
    #[serde(rename = "lease_secs", with = "secs")]
    pub lease: Duration,
    /// Failed output downloads before the job is held.
    pub output_fetch_attempts: u32,
    /// Jobs submitted within this of a batch's first job, to the same
    /// project and app, share its BOINC batch (a lone job waits this long;
    /// 0: no waiting).
    #[serde(rename = "batch_window_secs", with = "secs_or_zero")]
    pub batch_window: Duration,
    /// At most this many jobs per shared BOINC batch (1: a batch per job).
    pub batch_max_jobs: usize,
    /// At most this many `BLAH_JOB_SUBMIT`s and `BLAH_JOB_STATUS`es are in
    /// progress at once (each waits for the state database or the status
    /// cache only); while that many are, the session reads no more requests
    /// (the gridmanager's pipe holds them), so a flood of them costs memory
    /// for this many, not for all of them. (A submit the pool places is
    /// not counted: its matchmaking may wait for the projects.)
    pub max_commands_in_progress: usize,
    /// A finished job (completed, removed, held or cancelled) is kept this
    /// long after it ended, for the gridmanager's later questions, then
    /// forgotten (checked while the daemon runs, every 1/24 of this, at
    /// most hourly).
    #[serde(rename = "forget_finished_jobs_after_secs", with = "secs")]
    pub forget_finished_after: Duration,
    /// A `transfer_input_files` URL is fetched on the submit side, once
    /// per batch, into a file of at most this many bytes (docs/blah.md
    /// "Inputs"); a larger one holds the job.
    pub url_input_max_bytes: u64,
    /// Each URL input (or each run of a file transfer plugin) must be
    /// fetched within this, or the job is held.
    #[serde(rename = "url_input_timeout_secs", with = "secs")]
    pub url_input_timeout: Duration,
    /// HTCondor file transfer plugins (executables) for URL schemes other
    /// than http and https (osdf://, pelican://, s3://, ...). Unset: those
    /// of `condor_config_val FILETRANSFER_PLUGINS`, if HTCondor is there.
    /// `~/` is the home directory; a relative path is relative to the
    /// config file.
    pub transfer_plugins: Option<Vec<PathBuf>>,
    /// Where this came from, named in hold reasons that ask for a fix.
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
    /// A pool file: jobs that name no project are placed by matchmaking.
    /// `~/` is the home directory; a relative path is relative to the
    /// config file.
    pub pool: Option<PathBuf>,
    /// Put before every BOINC batch and job name made for a job: a served
    /// client's `<client>~` (`boinc_gahp serve`), so its names are its own.
    #[serde(skip)]
    pub name_prefix: String,
    /// Status and cancel answer only for jobs in the state database: an
    /// unknown id is not looked up on the project (a served client has no
    /// other jobs).
    #[serde(skip)]
    pub known_jobs_only: bool,
}

/// What a zip may hold (`[unpack]` in the config file; docs/configuration.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UnpackLimits {
    /// Entries (files and directories).
    pub max_entries: u64,
    /// Bytes of all the files, unpacked.
    pub max_bytes: u64,
    /// Unpacked bytes per byte of the zip, once the unpacked bytes pass
    /// [`RATIO_FLOOR`]: deflate can reach about 1,030, text about 10.
    pub max_ratio: u64,
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits { max_entries: 10_000, max_bytes: 4 << 30, max_ratio: 200 }
    }
}

impl UnpackLimits {
    /// These limits with `max_bytes` set by a job (HTCondor's
    /// `max_transfer_output_mb`, in MiB); 0 or less leaves them.
    pub fn with_job_bytes(self, mib: Option<i64>) -> Self {
        match mib {
            Some(m) if m > 0 => UnpackLimits { max_bytes: (m as u64).saturating_mul(1 << 20), ..self },
            _ => self,
        }
    }
}

/// Below this many unpacked bytes the ratio is not looked at: a small
/// file of one repeated byte is no danger.
pub const RATIO_FLOOR: u64 = 64 << 20;

/// The default bound of one URL input (1 GiB).
pub const DEFAULT_URL_INPUT_MAX_BYTES: u64 = 1 << 30;

/// What one app provides for a job's requests (docs/runner.md).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AppConfig {
    /// `request_cpus` up to this goes to the app; more is held.
    pub cpus: u32,
    /// `request_gpus` up to this goes to the app; more is held.
    pub gpus: u32,
    /// Floating-point operations per second of a typical host: turns
    /// `batch_runtime` into `rsc_fpops_bound`.
    pub flops: f64,
    /// What a job's environment does at an app that is not a runner.
    pub environment: EnvironmentPolicy,
    /// A runner that runs each job in its `container_image` (BOINC's
    /// docker_wrapper): container jobs go only to such an app.
    pub container: bool,
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig { cpus: 1, gpus: 0, flops: DEFAULT_HOST_FLOPS, environment: EnvironmentPolicy::Hold, container: false }
    }
}

/// BOINC's usual estimate of a host's speed (1e10 floating-point
/// operations a second), for apps that name none.
pub const DEFAULT_HOST_FLOPS: f64 = 1e10;

/// An app that is not a runner can't give a job its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvironmentPolicy {
    /// A job with an environment is held, saying so.
    Hold,
    /// The environment is dropped, as the admin chose.
    Ignore,
}

impl BlahConfig {
    /// What `app` provides (the defaults for an app not in the file).
    pub fn app(&self, app: &str) -> AppConfig {
        self.apps.get(app).cloned().unwrap_or_default()
    }
}

impl Default for BlahConfig {
    fn default() -> Self {
        BlahConfig {
            project_url: None,
            authenticator_file: None,
            default_app: None,
            runner_app: None,
            container_runner_app: None,
            apps: BTreeMap::new(),
            allow_project_override: true,
            status_refresh: Duration::from_secs(30),
            submit_timeout: Duration::from_secs(3600),
            lease: Duration::from_secs(7 * 24 * 3600),
            output_fetch_attempts: 5,
            batch_window: Duration::from_secs(2),
            batch_max_jobs: 1000,
            max_commands_in_progress: 1000,
            forget_finished_after: Duration::from_secs(90 * 24 * 3600),
            url_input_max_bytes: DEFAULT_URL_INPUT_MAX_BYTES,
            url_input_timeout: Duration::from_secs(600),
            transfer_plugins: None,
            config_file: None,
            pool: None,
            name_prefix: String::new(),
            known_jobs_only: false,
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            state_dir: default_state_dir(),
            log_file: None,
            log_level: "info".into(),
            max_log_files: 14,
            log_rotation: LogRotation::Daily,
            command_timeout: Duration::from_secs(270),
            rpc_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            ping_timeout: Duration::from_secs(10),
            download_stall_timeout: Duration::from_secs(60),
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            max_concurrent_rpcs: 8,
            upload_chunk: 20,
            upload_max_bytes: PHP_POST_MAX_SIZE,
            query_coalesce: Duration::from_secs(5),
            widen_min_mod_time: true,
            sequence_poll: Duration::from_secs(30),
            purge_stopped_after: Duration::from_secs(30 * 24 * 3600),
            initial_expire: Duration::from_secs(3600),
            create_settle: Duration::from_secs(10),
            ca_files: Vec::new(),
            hash_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            panic_on: None,
            pool_grants: None,
            blah: BlahConfig::default(),
            unpack: UnpackLimits::default(),
            metrics: MetricsConfig::default(),
            projects: BTreeMap::new(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{key}: {why}")]
pub struct ConfigError {
    pub key: &'static str,
    pub why: String,
}

impl DaemonConfig {
    /// Parses a config file's text; unknown keys and bad values are errors.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let config: DaemonConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }

    /// What the types alone do not rule out.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, why: &str| Err(ConfigError { key, why: why.into() });
        if self.max_concurrent_rpcs == 0 {
            return bad("max_concurrent_rpcs", "must be at least 1");
        }
        if !(1..=20).contains(&self.upload_chunk) {
            return bad("upload_chunk", "must be 1 to 20 (PHP takes at most 20 files per request)");
        }
        if self.upload_max_bytes < MIN_UPLOAD_BYTES {
            return bad("upload_max_bytes", "must be at least 65536");
        }
        for (url, p) in &self.projects {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return bad("projects", "keys must be project URLs (http:// or https://)");
            }
            if p.upload_chunk == Some(0) {
                return bad("projects.upload_chunk", "must be at least 1");
            }
            if p.upload_max_bytes.is_some_and(|b| b < MIN_UPLOAD_BYTES) {
                return bad("projects.upload_max_bytes", "must be at least 65536");
            }
        }
        if self.unpack.max_entries == 0 || self.unpack.max_bytes == 0 || self.unpack.max_ratio == 0 {
            return bad("unpack", "max_entries, max_bytes and max_ratio must each be at least 1");
        }
        if self.metrics.listen.is_some_and(|a| !a.ip().is_loopback()) {
            return bad("metrics.listen", "must be a loopback address (serve --metrics-listen may name another)");
        }
        if self.hash_threads == 0 {
            return bad("hash_threads", "must be at least 1");
        }
        if self.max_log_files == 0 {
            return bad("max_log_files", "must be at least 1");
        }
        if self.sequence_poll.is_zero() {
            return bad("sequence_poll_ms", "must be at least 1");
        }
        if self.retry_base.is_zero() {
            return bad("retry_base_ms", "must be at least 1");
        }
        if self.retry_max < self.retry_base {
            return bad("retry_max_ms", "must not be less than retry_base_ms");
        }
        if self.blah.batch_max_jobs == 0 {
            return bad("blah.batch_max_jobs", "must be at least 1 (1: a BOINC batch per job)");
        }
        if !(1..=1_000_000).contains(&self.blah.max_commands_in_progress) {
            return bad("blah.max_commands_in_progress", "must be from 1 to 1000000");
        }
        if self.blah.output_fetch_attempts == 0 {
            return bad("blah.output_fetch_attempts", "must be at least 1");
        }
        if self.blah.project_url.as_deref().is_some_and(|u| !(u.starts_with("http://") || u.starts_with("https://"))) {
            return bad("blah.project_url", "must be an http:// or https:// URL");
        }
        if self.blah.url_input_max_bytes == 0 {
            return bad("blah.url_input_max_bytes", "must be at least 1");
        }
        if self.blah.transfer_plugins.as_ref().is_some_and(|p| p.iter().any(|p| p.as_os_str().is_empty())) {
            return bad("blah.transfer_plugins", "must be paths of executables (an empty one is not)");
        }
        if self.blah.apps.values().any(|a| !(a.flops.is_finite() && a.flops > 0.0)) {
            return bad("blah.apps.flops", "must be a positive number (operations a second)");
        }
        Ok(())
    }

    /// The bounds of an upload_files call to the project at `url` (a
    /// `[projects]` key matches with or without its final `/`).
    pub fn upload_limits(&self, url: &str) -> UploadLimits {
        let url = url.trim_end_matches('/');
        let p = self.projects.iter().find(|(k, _)| k.trim_end_matches('/') == url).map(|(_, p)| p);
        UploadLimits {
            max_files: p.and_then(|p| p.upload_chunk).unwrap_or(self.upload_chunk),
            max_bytes: p.and_then(|p| p.upload_max_bytes).unwrap_or(self.upload_max_bytes),
        }
    }
}

/// `*_secs` keys: a positive, finite number of seconds.
mod secs {
    use serde::{de::Error, Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v.is_finite() && v > 0.0 && v < 1e12) {
            return Err(D::Error::custom(format!("{v} is not a positive number of seconds")));
        }
        Ok(Duration::from_secs_f64(v))
    }
}

/// `*_secs` keys where 0 means "none": a finite number of seconds, not
/// negative.
mod secs_or_zero {
    use serde::{de::Error, Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v.is_finite() && (0.0..1e12).contains(&v)) {
            return Err(D::Error::custom(format!("{v} is not a number of seconds (0 or more)")));
        }
        Ok(Duration::from_secs_f64(v))
    }
}

/// `*_ms` keys: a whole number of milliseconds.
mod millis {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// `$XDG_STATE_HOME/boinc-gahp`, else `~/.local/state/boinc-gahp`, else a
/// directory under the temp dir (the gridmanager always sets HOME).
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("boinc-gahp");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".local/state/boinc-gahp");
    }
    std::env::temp_dir().join("boinc-gahp-state")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_optional_and_values_are_read_as_written() {
        let c = DaemonConfig::from_toml("").unwrap();
        assert_eq!(c.command_timeout, Duration::from_secs(270));
        let c = DaemonConfig::from_toml("command_timeout_secs = 12.5\nretry_base_ms = 20\n[blah]\nlease_secs = 60\n").unwrap();
        assert_eq!(c.command_timeout, Duration::from_millis(12_500));
        assert_eq!(c.retry_base, Duration::from_millis(20));
        assert_eq!(c.blah.lease, Duration::from_secs(60));
        assert_eq!(c.blah.forget_finished_after, Duration::from_secs(90 * 86_400));
        let c = DaemonConfig::from_toml("[blah]\nforget_finished_jobs_after_secs = 120.5\n").unwrap();
        assert_eq!(c.blah.forget_finished_after, Duration::from_millis(120_500));
        assert_eq!(c.log_rotation, LogRotation::Daily);
        assert_eq!((c.blah.url_input_max_bytes, c.blah.url_input_timeout), (1 << 30, Duration::from_secs(600)));
        assert_eq!(c.blah.transfer_plugins, None);
        let c = DaemonConfig::from_toml("[blah]\nurl_input_max_bytes = 1000\nurl_input_timeout_secs = 2.5\ntransfer_plugins = [\"/p\"]\n")
            .unwrap();
        assert_eq!((c.blah.url_input_max_bytes, c.blah.url_input_timeout), (1000, Duration::from_millis(2500)));
        assert_eq!(c.blah.transfer_plugins, Some(vec![PathBuf::from("/p")]));
        assert_eq!(DaemonConfig::from_toml("log_rotation = \"minutely\"").unwrap().log_rotation, LogRotation::Minutely);
    }

    #[test]
    fn apps_say_what_they_provide() {
        let c = DaemonConfig::from_toml(
            "[blah]\nrunner_app = \"runner\"\n[blah.apps.runner]\ncpus = 4\ngpus = 1\nflops = 2e9\n[blah.apps.uppercase]\nenvironment = \"ignore\"\n",
        )
        .unwrap();
        assert_eq!(c.blah.runner_app.as_deref(), Some("runner"));
        assert_eq!(
            c.blah.app("runner"),
            AppConfig { cpus: 4, gpus: 1, flops: 2e9, environment: EnvironmentPolicy::Hold, container: false }
        );
        assert_eq!(c.blah.app("uppercase").environment, EnvironmentPolicy::Ignore);
        assert_eq!(c.blah.app("other"), AppConfig::default());
        for bad in ["flops = 0", "flops = -1", "cpu = 2", "environment = \"pass\""] {
            let e = DaemonConfig::from_toml(&format!("[blah.apps.x]\n{bad}\n")).unwrap_err();
            assert!(e.contains("flops") || e.contains("unknown") || e.contains("variant"), "{bad}: {e}");
        }
    }

    #[test]
    fn upload_limits_are_per_project_over_the_defaults() {
        let c = DaemonConfig::from_toml(
            "upload_max_bytes = 4000000\n[projects.\"https://big.example/p\"]\nupload_max_bytes = 100000000\nupload_chunk = 50\n",
        )
        .unwrap();
        assert_eq!(c.upload_limits("https://big.example/p/"), UploadLimits { max_files: 50, max_bytes: 100_000_000 });
        assert_eq!(c.upload_limits("https://other.example/"), UploadLimits { max_files: 20, max_bytes: 4_000_000 });
        let d = DaemonConfig::default().upload_limits("http://x/");
        assert_eq!(d, UploadLimits { max_files: 20, max_bytes: 8 << 20 });
    }

    #[test]
    fn nonsense_is_refused_with_the_key_named() {
        for (text, key) in [
            ("command_timeout_secs = -3", "command_timeout_secs"),
            ("rpc_timeout_secs = 0", "rpc_timeout_secs"),
            ("rpc_timeout_secs = nan", "rpc_timeout_secs"),
            ("download_stall_secs = \"soon\"", "download_stall_secs"),
            ("retry_base_ms = -1", "retry_base_ms"),
            ("upload_chunk = 21", "upload_chunk"),
            ("max_concurrent_rpcs = 0", "max_concurrent_rpcs"),
            ("retry_base_ms = 900\nretry_max_ms = 100", "retry_max_ms"),
            ("no_such_key = 1", "no_such_key"),
            ("[blah]\nstatus_refresh_secs = 0", "status_refresh_secs"),
            ("[blah]\nbatch_window_secs = -1", "batch_window_secs"),
            ("[blah]\nforget_finished_jobs_after_secs = 0", "forget_finished_jobs_after_secs"),
            ("[blah]\nbatch_max_jobs = 0", "blah.batch_max_jobs"),
            ("[blah]\nmax_commands_in_progress = 0", "blah.max_commands_in_progress"),
            ("[blah]\nmax_commands_in_progress = 9223372036854775807", "blah.max_commands_in_progress"),
            ("ping_timeout_secs = 0", "ping_timeout_secs"),
            ("log_rotation = \"weekly\"", "log_rotation"),
            ("[blah]\nproject_url = \"ftp://x/\"", "blah.project_url"),
            ("[blah]\nurl_input_max_bytes = 0", "blah.url_input_max_bytes"),
            ("[blah]\nurl_input_max_bytes = -1", "url_input_max_bytes"),
            ("[blah]\nurl_input_timeout_secs = 0", "url_input_timeout_secs"),
            ("[blah]\ntransfer_plugins = [\"\"]", "blah.transfer_plugins"),
            ("[blah]\ntransfer_plugins = \"/usr/libexec/condor/curl_plugin\"", "transfer_plugins"),
            ("upload_max_bytes = 1000", "upload_max_bytes"),
            ("[projects.\"http://a/\"]\nupload_max_bytes = 10", "projects.upload_max_bytes"),
            ("[projects.\"http://a/\"]\nupload_chunk = 0", "projects.upload_chunk"),
            ("[projects.\"a\"]\nupload_chunk = 5", "projects"),
            ("[projects.\"http://a/\"]\npost_max_size = 5", "post_max_size"),
        ] {
            let err = DaemonConfig::from_toml(text).expect_err(text);
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}

/// Why an authenticator file gave no account key.
#[derive(Debug, thiserror::Error)]
pub enum AuthenticatorFileError {
    #[error("can't read the authenticator file {}: {source}", path.display())]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("the authenticator file {} is empty", path.display())]
    Empty { path: PathBuf },
}

/// The account key in an authenticator file: its first word (a file
/// written by hand often ends with a line break, or has a comment after).
/// Every reader of such a file goes through here.
pub fn read_authenticator_file(path: &std::path::Path) -> Result<gahp_protocol::Authenticator, AuthenticatorFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthenticatorFileError::Unreadable { path: path.into(), source })?;
    text.split_whitespace().next().map(gahp_protocol::Authenticator::new).ok_or_else(|| AuthenticatorFileError::Empty { path: path.into() })
}
