//! The process's Prometheus metrics (docs/metrics.md): one registry for
//! the stdio daemon or for `serve` and all its clients. The actors count
//! into it through the functions below (a line each where they act); the
//! state database's size is read when a scrape asks. `metrics_http`
//! serves it, when the config or `serve` asks for that.
//!
//! Label values are bounded: a project is a URL the config, the tokens
//! file or the gridmanager chose; a client is a token's name (never the
//! token); kinds, outcomes, causes and states are the fixed words below.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::config::DaemonConfig;

/// The `Content-Type` of [`Metrics::encode`]'s text (Prometheus text 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The RPCs of BOINC's API by the root element of their request, and the
/// two GETs; anything else is `other`, so the label stays bounded.
const RPC_KINDS: &[&str] = &[
    "ping",
    "get_templates",
    "create_batch",
    "query_batch",
    "query_batches",
    "submit_batch",
    "query_batch2",
    "query_completed_job",
    "abort_jobs",
    "retire_batch",
    "set_expire_time",
    "query_files",
    "upload_files",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    project: String,
    kind: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    project: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    project: String,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProjectLabels {
    project: String,
}

/// `client` is empty for the stdio daemon.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    client: String,
    project: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    client: String,
}

type Latency = Family<KindLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 5 ms to about 80 s: a ping on loopback to a submit_batch of 100,000 jobs.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

pub struct Metrics {
    registry: Registry,
    rpcs: Family<RpcLabels, Counter>,
    rpc_seconds: Latency,
    faults: Family<CauseLabels, Counter>,
    retries: Family<CauseLabels, Counter>,
    uploaded: Family<ProjectLabels, Counter>,
    downloaded: Family<ProjectLabels, Counter>,
    jobs: Family<StateLabels, Gauge>,
    jobs_finished: Family<StateLabels, Counter>,
    batches: Family<StateLabels, Gauge>,
    connections: Family<ClientLabels, Gauge>,
    connections_total: Family<ClientLabels, Counter>,
    auth_failures: Counter,
    state_dbs: StateDbs,
}

/// The one registry of the process.
static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn global() -> &'static Metrics {
    &METRICS
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("boinc_gahp");
        let m = Metrics {
            rpcs: Family::default(),
            rpc_seconds: Family::new_with_constructor(latency_histogram),
            faults: Family::default(),
            retries: Family::default(),
            uploaded: Family::default(),
            downloaded: Family::default(),
            jobs: Family::default(),
            jobs_finished: Family::default(),
            batches: Family::default(),
            connections: Family::default(),
            connections_total: Family::default(),
            auth_failures: Counter::default(),
            state_dbs: StateDbs::default(),
            registry: Registry::default(),
        };
        registry.register("rpcs", "RPCs to BOINC projects by kind and how they ended (after their retries)", m.rpcs.clone());
        registry.register_with_unit("rpc_duration", "Time an RPC took, its retries included", Unit::Seconds, m.rpc_seconds.clone());
        registry.register("rpc_faults", "Failed HTTP attempts by cause (each one, retried or not)", m.faults.clone());
        registry.register("rpc_retries", "HTTP attempts made again after a fault, by the fault's cause", m.retries.clone());
        registry.register_with_unit("uploaded", "Input file bytes uploaded to projects", Unit::Bytes, m.uploaded.clone());
        registry.register_with_unit("downloaded", "Output file bytes downloaded from projects", Unit::Bytes, m.downloaded.clone());
        registry.register("jobs", "batch boinc (BLAH) jobs the daemon holds, by state", m.jobs.clone());
        registry.register(
            "jobs_finished",
            "batch boinc (BLAH) jobs that reached a final state (completed, held, removed)",
            m.jobs_finished.clone(),
        );
        registry.register("batches", "BOINC_* batches in the last status poll, by state", m.batches.clone());
        registry.register("serve_connections", "Connections of each client of serve open now", m.connections.clone());
        registry.register("serve_connections_opened", "Connections each client of serve opened", m.connections_total.clone());
        registry.register("serve_auth_failures", "Connections to serve refused at AUTH", m.auth_failures.clone());
        registry.register_collector(Box::new(m.state_dbs.clone()));
        Metrics { registry, ..m }
    }

    /// The text a scrape gets.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// One RPC ended after `took` (`kind` from [`rpc_kind`]).
    pub fn rpc(&self, project: &str, kind: &'static str, outcome: &'static str, took: Duration) {
        self.rpcs.get_or_create(&RpcLabels { project: project.to_string(), kind, outcome }).inc();
        self.rpc_seconds.get_or_create(&KindLabels { project: project.to_string(), kind }).observe(took.as_secs_f64());
    }

    /// A failed attempt (`detail` as the RPC client words it); `retried`
    /// if another attempt follows.
    pub fn fault(&self, project: &str, detail: &str, retried: bool) {
        let labels = CauseLabels { project: project.to_string(), cause: fault_cause(detail) };
        self.faults.get_or_create(&labels).inc();
        if retried {
            self.retries.get_or_create(&labels).inc();
        }
    }

    pub fn uploaded(&self, project: &str, bytes: u64) {
        self.uploaded.get_or_create(&ProjectLabels { project: project.to_string() }).inc_by(bytes);
    }

    pub fn downloaded(&self, project: &str, bytes: u64) {
        self.downloaded.get_or_create(&ProjectLabels { project: project.to_string() }).inc_by(bytes);
    }

    /// A BLAH job's final status (3 removed, 4 completed, 5 held).
    pub fn job_finished(&self, client: &str, project: &str, status: i32) {
        let state = match status {
            3 => "removed",
            4 => "completed",
            5 => "held",
            _ => "other",
        };
        self.jobs_finished.get_or_create(&StateLabels { client: client.to_string(), project: project.to_string(), state }).inc();
    }

    /// An actor's share of `boinc_gahp_jobs` (see [`GaugeShare`]).
    pub fn job_share(&self, client: &str, project: &str) -> GaugeShare {
        GaugeShare::new(self.jobs.clone(), client, project)
    }

    /// An actor's share of `boinc_gahp_batches`.
    pub fn batch_share(&self, client: &str, project: &str) -> GaugeShare {
        GaugeShare::new(self.batches.clone(), client, project)
    }

    /// A client of serve connected (authenticated); the guard counts it
    /// open until dropped.
    pub fn connected(&self, client: &str) -> OpenConnection {
        let labels = ClientLabels { client: client.to_string() };
        self.connections_total.get_or_create(&labels).inc();
        let gauge = self.connections.get_or_create(&labels).clone();
        gauge.inc();
        OpenConnection(gauge)
    }

    pub fn auth_failed(&self) {
        self.auth_failures.inc();
    }

    /// The state database of `dir` is measured at each scrape from now on.
    pub fn watch_state_db(&self, client: &str, dir: &Path) {
        let mut dbs = self.state_dbs.0.lock().unwrap_or_else(|p| p.into_inner());
        dbs.insert(client.to_string(), dir.join(crate::state_db::DB_FILE));
    }
}

/// The client label of the actors running under `config`: a served
/// client's name (its names' prefix is `<client>~`), empty for the stdio
/// daemon.
pub fn client_of(config: &DaemonConfig) -> &str {
    config.blah.name_prefix.strip_suffix('~').unwrap_or(&config.blah.name_prefix)
}

/// The kind of an RPC from its request document (`<submit_batch>...`).
pub fn rpc_kind(xml: &[u8]) -> &'static str {
    let root = xml.strip_prefix(b"<").unwrap_or(b"");
    let end = root.iter().position(|b| !(b.is_ascii_alphanumeric() || *b == b'_')).unwrap_or(root.len());
    RPC_KINDS.iter().find(|k| k.as_bytes() == &root[..end]).copied().unwrap_or("other")
}

/// The cause of a failed attempt, from the words the RPC client (`rpc.rs`)
/// and awc give it; `rpc.rs`'s tests check each of its own.
pub fn fault_cause(detail: &str) -> &'static str {
    let d = detail.to_ascii_lowercase();
    // First: a PHP page's text may name a connection of its own (MySQL's).
    if d.starts_with("server script died") || d.starts_with("the server script lost its database") {
        "server_script"
    } else if d.starts_with("http 5") {
        "http_5xx"
    } else if d.starts_with("http 429") {
        "http_429"
    } else if d.contains("failed to connect") || d.contains("connection refused") || d.contains("dns") || d.contains("resolve") {
        "connect"
    } else if d.starts_with("http 408") || d.contains("timeout") || d.contains("timed out") {
        "timeout"
    } else if d.starts_with("reply body stalled") || d.starts_with("download stalled") || d.starts_with("download not done") {
        "stalled"
    } else if d.starts_with("reply cut short") || d.starts_with("download cut short") || d.contains("reset") || d.contains("broken pipe") {
        "torn"
    } else {
        "other"
    }
}

/// What one actor contributes to a gauge of states (its jobs or batches of
/// one project): [`GaugeShare::set`] replaces its last counts, and
/// dropping it takes them back, so the gauge is the sum over the actors
/// alive (several clients of serve on one project each have one).
pub struct GaugeShare {
    family: Family<StateLabels, Gauge>,
    client: String,
    project: String,
    last: HashMap<&'static str, i64>,
}

impl GaugeShare {
    fn new(family: Family<StateLabels, Gauge>, client: &str, project: &str) -> GaugeShare {
        GaugeShare { family, client: client.to_string(), project: project.to_string(), last: HashMap::new() }
    }

    /// Its counts by state now; a state it does not name counts 0.
    pub fn set(&mut self, counts: &[(&'static str, i64)]) {
        let mut now: HashMap<&'static str, i64> = self.last.keys().map(|s| (*s, 0)).collect();
        for (state, n) in counts {
            *now.entry(state).or_default() += n;
        }
        for (state, n) in &now {
            let delta = n - self.last.get(state).copied().unwrap_or(0);
            if delta != 0 || !self.last.contains_key(state) {
                self.gauge(state).inc_by(delta);
            }
        }
        now.retain(|_, n| *n != 0);
        self.last = now;
    }

    fn gauge(&self, state: &'static str) -> Gauge {
        self.family.get_or_create(&StateLabels { client: self.client.clone(), project: self.project.clone(), state }).clone()
    }
}

impl Drop for GaugeShare {
    fn drop(&mut self) {
        for (state, n) in std::mem::take(&mut self.last) {
            self.gauge(state).dec_by(n);
        }
    }
}

/// An open connection of a client of serve, counted until dropped.
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The state databases, by client: each one's file and its write-ahead
/// log, measured when scraped.
#[derive(Debug, Default, Clone)]
struct StateDbs(std::sync::Arc<Mutex<HashMap<String, PathBuf>>>);

impl Collector for StateDbs {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let dbs: Vec<(String, PathBuf)> =
            self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(c, p)| (c.clone(), p.clone())).collect();
        if dbs.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "state_db_size",
            "Bytes of the state database (with its write-ahead log)",
            Some(&Unit::Bytes),
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (client, path) in dbs {
            let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            let bytes = len(&path) + len(Path::new(&wal));
            let gauge = ConstGauge::new(bytes as i64);
            gauge.encode(family.encode_family(&ClientLabels { client })?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `name{labels}` in `text` (labels as written).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn an_rpc_is_counted_by_kind_and_outcome_with_its_latency() {
        let m = Metrics::new();
        m.rpc("http://p/", "submit_batch", "ok", Duration::from_millis(30));
        m.rpc("http://p/", "submit_batch", "ok", Duration::from_millis(30));
        m.rpc("http://p/", "query_batch2", "transient", Duration::from_secs(2));
        let text = m.encode();
        assert_eq!(sample(&text, r#"boinc_gahp_rpcs_total{project="http://p/",kind="submit_batch",outcome="ok"}"#), Some(2.0), "{text}");
        assert_eq!(sample(&text, r#"boinc_gahp_rpcs_total{project="http://p/",kind="query_batch2",outcome="transient"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"boinc_gahp_rpc_duration_seconds_count{project="http://p/",kind="submit_batch"}"#), Some(2.0), "{text}");
        assert_eq!(
            sample(&text, r#"boinc_gahp_rpc_duration_seconds_bucket{project="http://p/",kind="submit_batch",le="0.04"}"#),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, r#"boinc_gahp_rpc_duration_seconds_bucket{project="http://p/",kind="submit_batch",le="0.02"}"#),
            Some(0.0)
        );
        assert!(text.contains("# TYPE boinc_gahp_rpc_duration_seconds histogram"));
    }

    #[test]
    fn bytes_faults_and_retries_have_units_and_causes() {
        let m = Metrics::new();
        m.uploaded("http://p/", 1000);
        m.uploaded("http://p/", 24);
        m.downloaded("http://p/", 7);
        m.fault("http://p/", "HTTP 503", true);
        m.fault("http://p/", "HTTP 503", false);
        let text = m.encode();
        assert_eq!(sample(&text, r#"boinc_gahp_uploaded_bytes_total{project="http://p/"}"#), Some(1024.0), "{text}");
        assert_eq!(sample(&text, r#"boinc_gahp_downloaded_bytes_total{project="http://p/"}"#), Some(7.0));
        assert_eq!(sample(&text, r#"boinc_gahp_rpc_faults_total{project="http://p/",cause="http_5xx"}"#), Some(2.0));
        assert_eq!(sample(&text, r#"boinc_gahp_rpc_retries_total{project="http://p/",cause="http_5xx"}"#), Some(1.0));
    }

    #[test]
    fn shares_of_a_gauge_add_up_and_leave_with_their_actor() {
        let m = Metrics::new();
        let mut a = m.job_share("alice", "http://p/");
        let mut b = m.job_share("alice", "http://p/");
        a.set(&[("running", 3), ("idle", 1)]);
        b.set(&[("running", 2)]);
        let running = r#"boinc_gahp_jobs{client="alice",project="http://p/",state="running"}"#;
        let idle = r#"boinc_gahp_jobs{client="alice",project="http://p/",state="idle"}"#;
        assert_eq!(sample(&m.encode(), running), Some(5.0));
        // A state no longer named counts 0.
        a.set(&[("running", 1)]);
        assert_eq!(sample(&m.encode(), running), Some(3.0));
        assert_eq!(sample(&m.encode(), idle), Some(0.0));
        drop(b);
        assert_eq!(sample(&m.encode(), running), Some(1.0));
        drop(a);
        assert_eq!(sample(&m.encode(), running), Some(0.0));
    }

    #[test]
    fn connections_are_counted_by_client_name_while_open() {
        let m = Metrics::new();
        let one = m.connected("alice");
        let two = m.connected("alice");
        drop(one);
        m.auth_failed();
        let text = m.encode();
        assert_eq!(sample(&text, r#"boinc_gahp_serve_connections{client="alice"}"#), Some(1.0), "{text}");
        assert_eq!(sample(&text, r#"boinc_gahp_serve_connections_opened_total{client="alice"}"#), Some(2.0));
        assert_eq!(sample(&text, "boinc_gahp_serve_auth_failures_total"), Some(1.0));
        drop(two);
        assert_eq!(sample(&m.encode(), r#"boinc_gahp_serve_connections{client="alice"}"#), Some(0.0));
    }

    #[test]
    fn the_state_database_is_measured_when_scraped() {
        let dir = tempfile::tempdir().unwrap();
        let m = Metrics::new();
        assert!(!m.encode().contains("state_db"), "no database, no sample");
        m.watch_state_db("", dir.path());
        std::fs::write(dir.path().join(crate::state_db::DB_FILE), [0u8; 4096]).unwrap();
        std::fs::write(dir.path().join(format!("{}-wal", crate::state_db::DB_FILE)), [0u8; 100]).unwrap();
        assert_eq!(sample(&m.encode(), r#"boinc_gahp_state_db_size_bytes{client=""}"#), Some(4196.0));
    }

    #[test]
    fn finished_jobs_are_counted_by_final_state() {
        let m = Metrics::new();
        m.job_finished("", "http://p/", 5);
        m.job_finished("", "http://p/", 4);
        m.job_finished("", "http://p/", 4);
        let text = m.encode();
        assert_eq!(sample(&text, r#"boinc_gahp_jobs_finished_total{client="",project="http://p/",state="completed"}"#), Some(2.0));
        assert_eq!(sample(&text, r#"boinc_gahp_jobs_finished_total{client="",project="http://p/",state="held"}"#), Some(1.0));
    }

    #[test]
    fn rpc_kinds_are_the_request_roots_or_other() {
        assert_eq!(rpc_kind(b"<submit_batch>\n<authenticator>x</authenticator>"), "submit_batch");
        assert_eq!(rpc_kind(b"<query_batch2>\n"), "query_batch2");
        assert_eq!(rpc_kind(b"<query_batch>\n"), "query_batch");
        assert_eq!(rpc_kind(b"<ping> </ping>\n"), "ping");
        assert_eq!(rpc_kind(b"<made_up_call>"), "other");
        assert_eq!(rpc_kind(b""), "other");
    }

    #[test]
    fn a_label_value_is_escaped_in_the_text() {
        let m = Metrics::new();
        m.uploaded("http://p/\"x\"\n", 1);
        assert!(m.encode().contains(r#"project="http://p/\"x\"\n""#), "{}", m.encode());
    }
}
