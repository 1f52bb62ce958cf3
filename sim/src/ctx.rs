//! What every request handler and the host scheduler share.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::apps::AppSpec;
use crate::clock::Clock;
use crate::config::{HostBehaviour, SimConfig};
use crate::faults::Faults;
use crate::project_db::Store;

/// An app with its database id.
#[derive(Debug, Clone)]
pub struct App {
    pub id: i64,
    pub spec: AppSpec,
}

/// The directories of the project.
#[derive(Debug, Clone)]
pub struct Dirs {
    pub root: PathBuf,
    /// Input files, by physical name.
    pub download: PathBuf,
    /// Instance output files, by physical name.
    pub upload: PathBuf,
    /// Work directories of running instances.
    pub slots: PathBuf,
}

/// One volunteer host. Ids are 1, 2, … in the order of the config's host
/// groups (the same ids after a restart with the same config).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SimHost {
    pub id: i64,
    pub name: String,
    pub user_id: i64,
    #[serde(flatten)]
    pub behaviour: HostBehaviour,
}

impl SimHost {
    /// The hosts of a configuration.
    pub fn all(cfg: &SimConfig) -> Vec<SimHost> {
        let mut hosts = Vec::new();
        for spec in &cfg.hosts {
            for i in 1..=spec.count {
                hosts.push(SimHost {
                    id: hosts.len() as i64 + 1,
                    name: format!("{}_{i}", spec.name),
                    user_id: spec.user_id,
                    behaviour: spec.behaviour(),
                });
            }
        }
        hosts
    }
}

pub struct Ctx {
    pub store: Store,
    pub clock: Clock,
    pub cfg: SimConfig,
    pub apps: Vec<App>,
    pub dirs: Dirs,
    pub faults: Faults,
    pub project_url: String,
    pub app_exe: PathBuf,
    /// Calls per `"<script>:<rpc>"`, faulted ones included.
    pub counts: Mutex<BTreeMap<String, u64>>,
    /// The project's web stop flag: RPCs answer -183 "project down for
    /// maintenance".
    pub web_stopped: AtomicBool,
    /// The volunteer hosts, by id - 1; their behaviour can change at run
    /// time (the scheduler reads it at each dispatch).
    pub hosts: Mutex<Vec<SimHost>>,
    /// Set by `__sim/batch_zip`: how batch_files zips are spoiled.
    pub batch_zip_spoil: Mutex<Option<ZipSpoil>>,
}

impl Ctx {
    pub fn app_by_name(&self, name: &str) -> Option<&App> {
        self.apps.iter().find(|a| a.spec.name == name)
    }

    pub fn app_by_id(&self, id: i64) -> Option<&App> {
        self.apps.iter().find(|a| a.id == id)
    }

    pub fn app_name(&self, id: i64) -> &str {
        self.app_by_id(id).map(|a| a.spec.name.as_str()).unwrap_or("")
    }

    /// The hosts as they are now.
    pub fn hosts(&self) -> Vec<SimHost> {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The behaviour of the host at `idx` (id - 1) now.
    pub fn host_behaviour(&self, idx: usize) -> Option<HostBehaviour> {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner()).get(idx).map(|h| h.behaviour)
    }

    pub fn web_stopped(&self) -> bool {
        self.web_stopped.load(Ordering::SeqCst)
    }

    pub fn count_call(&self, endpoint: &str) {
        let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(endpoint.to_string()).or_insert(0) += 1;
    }

    /// Where PHP would say the project lives (appears in fatal error pages).
    pub fn php_root(&self) -> String {
        format!("/home/boincadm/projects/{}", self.cfg.project_name)
    }

    /// `htmlspecialchars` with the configured apostrophe behaviour.
    pub fn html(&self, s: &str) -> String {
        crate::php::html(s, self.cfg.quirks.escape_apostrophe)
    }
}

/// How `__sim/batch_zip` spoils the batch_files zips (for tests of a
/// client's defences).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZipSpoil {
    /// The first entry's bytes changed (its CRC no longer matches).
    Corrupt,
    /// An extra entry named `../escaped`.
    Escape,
    /// The first entry left out.
    DropFirst,
    /// Bytes that are not a zip archive.
    Garbage,
}
