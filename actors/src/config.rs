//! Tunables of the daemon. Defaults suit HTCondor's gridmanager: every
//! command ends inside its 300 s call timeout.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// Where the SQLite state (MD5 cache) lives.
    pub state_dir: PathBuf,
    /// A whole command (all its RPCs and retries) gives up after this.
    pub command_timeout: Duration,
    /// One HTTP exchange (request sent until reply body read).
    pub rpc_timeout: Duration,
    pub connect_timeout: Duration,
    /// A download fails when no byte arrives for this long.
    pub download_stall_timeout: Duration,
    /// First retry delay; doubled per attempt up to `retry_max`, full jitter.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// HTTP requests in flight per project.
    pub max_concurrent_rpcs: usize,
    /// Files per upload_files call (PHP's max_file_uploads is 20).
    pub upload_chunk: usize,
    /// Identical BOINC_QUERY_BATCHES within this window share one RPC.
    pub query_coalesce: Duration,
    /// Ask the server with floor(min_mod_time) - 1 (spec §7.4 mitigation).
    pub widen_min_mod_time: bool,
    /// create_batch's first expiry, before the gridmanager's first lease.
    pub initial_expire: Duration,
    /// Extra trust roots (PEM) besides the built-in web roots.
    pub ca_files: Vec<PathBuf>,
    /// Hashing threads.
    pub hash_threads: usize,
    /// Test hook: a command naming this batch or job panics its actor.
    pub panic_on: Option<String>,
    /// The `BLAH_*` front end (`grid_resource = batch boinc`).
    pub blah: BlahConfig,
}

/// Where `BLAH_*` jobs go and how they are watched (the `[blah]` section
/// of the config file).
#[derive(Debug, Clone)]
pub struct BlahConfig {
    /// The default project; a job may name another with `BoincProjectUrl`.
    pub project_url: Option<String>,
    /// A file whose first word is the account key (`BoincAuthenticatorFile`
    /// overrides it per job).
    pub authenticator_file: Option<PathBuf>,
    /// The app of jobs that set neither `+remote_BoincApp` nor `batch_queue`.
    pub default_app: Option<String>,
    /// Jobs may choose their own project and authenticator file.
    pub allow_project_override: bool,
    /// One query_batch2 per project per period answers every status.
    pub status_refresh: Duration,
    /// A submission retries transient failures this long, then holds the job.
    pub submit_timeout: Duration,
    /// Batch expiry set on the server, renewed at half-life while watched.
    pub lease: Duration,
    /// Failed output downloads before the job is held.
    pub output_fetch_attempts: u32,
    /// Where this came from, named in hold reasons that ask for a fix.
    pub config_file: Option<PathBuf>,
    /// A pool file: jobs that name no project are placed by matchmaking.
    pub pool: Option<PathBuf>,
}

impl Default for BlahConfig {
    fn default() -> Self {
        BlahConfig {
            project_url: None,
            authenticator_file: None,
            default_app: None,
            allow_project_override: true,
            status_refresh: Duration::from_secs(30),
            submit_timeout: Duration::from_secs(3600),
            lease: Duration::from_secs(7 * 24 * 3600),
            output_fetch_attempts: 5,
            config_file: None,
            pool: None,
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            state_dir: default_state_dir(),
            command_timeout: Duration::from_secs(270),
            rpc_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            download_stall_timeout: Duration::from_secs(60),
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            max_concurrent_rpcs: 8,
            upload_chunk: 20,
            query_coalesce: Duration::from_secs(5),
            widen_min_mod_time: true,
            initial_expire: Duration::from_secs(3600),
            ca_files: Vec::new(),
            hash_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            panic_on: None,
            blah: BlahConfig::default(),
        }
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
