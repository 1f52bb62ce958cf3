//! Pools: the broker's front. Loads a pool on first use (with its ads,
//! overlap and rank-function actors), places each new batch by
//! matchmaking, and routes every later command by the durable routes.
//!
//! Placement: the matching projects are tried best first. Before a batch
//! exists anywhere, a project that refuses it (down, no such app, no
//! quota, ...) is skipped: a quick get_templates probe first, and after a
//! failed submit a look-up by name that says the batch was not created.
//! The route is written before the submit starts, so once a batch may
//! exist on a project, every later command (the gridmanager's resubmit
//! after a restart included) goes there.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::classad::expr::Expr;
use gahp_protocol::classad::EvalAd;
use gahp_protocol::gahp::{AsyncCommand, Command, CommandResult};

use crate::data_overlap::{DataOverlap, Overlaps, Uploaded};
use crate::matchmaker::{
    functions_called, job_ad, project_ad, rank_projects, Gathered, InputData, JobSide, ProjectSide, ProjectStatus, DATA_OVERLAP,
};
use crate::pool::{Pool, PoolError};
use crate::project_ads::{CurrentAds, ProjectAds};
use crate::rank_functions::{RankFunctions, RankValues};
use crate::registry::Registry;
use crate::routes::Routes;
use crate::{rpc_client_of, sequence_holder, tree_of};
use gahp_project::rpc::Rpc;
use gahp_project::tree::Run;
use gahp_sequences::store::SequenceStore;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::{FileStager, Stage};
use gahp_services::state_db::StateDb;

/// A loaded pool and its actors.
#[derive(Clone)]
pub(super) struct PoolHandle {
    /// The routes' key: the pool file's canonical path ([`pool_id`]).
    pub(super) id: String,
    pub(super) pool: Arc<Pool>,
    ads: Addr<ProjectAds>,
    pub(crate) overlap: Addr<DataOverlap>,
    functions: Addr<RankFunctions>,
}

/// Per (pool id, project): the earliest min_mod_time a failed query could
/// not answer; that project is asked from there until it answers, so its
/// changes while it was down are not skipped.
type Floors = Rc<RefCell<HashMap<(String, String), f64>>>;

pub struct Pools {
    pub(super) config: Arc<DaemonConfig>,
    pub(super) projects: Addr<Registry>,
    stager: Addr<FileStager>,
    routes: Routes,
    pub(super) db: StateDb,
    pools: HashMap<PathBuf, PoolHandle>,
    floors: Floors,
}

/// What names a pool in the state database: its file's canonical path.
pub fn pool_id(path: &Path) -> String {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()).to_string_lossy().into_owned()
}

impl Pools {
    pub fn new(config: Arc<DaemonConfig>, projects: Addr<Registry>, stager: Addr<FileStager>, db: StateDb) -> Self {
        Pools { config, projects, stager, routes: Routes::new(db.clone()), db, pools: HashMap::new(), floors: Rc::default() }
    }

    pub(super) fn pool(&mut self, path: &Path) -> Result<PoolHandle, PoolError> {
        // One handle per pool file, however it is named; loaded from the
        // name given (its relative paths are taken from there).
        let id = pool_id(path);
        if let Some(h) = self.pools.get(Path::new(&id)) {
            return Ok(h.clone());
        }
        let pool = Arc::new(match &self.config.pool_grants {
            Some(grants) => Pool::load_granted(path, grants)?,
            None => Pool::load(path)?,
        });
        tracing::info!(pool = %id, projects = pool.projects.len(), "pool loaded");
        self.resume_sequences(&id, &pool);
        let h = PoolHandle {
            id,
            ads: ProjectAds::new(pool.clone(), self.projects.clone()).start(),
            overlap: DataOverlap::new(pool.clone(), self.projects.clone()).start(),
            functions: RankFunctions::new(pool.clone()).start(),
            pool,
        };
        self.pools.insert(PathBuf::from(&h.id), h.clone());
        Ok(h)
    }

    /// One command's view of the pool at `path`.
    pub(super) fn broker(&mut self, path: &Path) -> Result<Broker, PoolError> {
        Ok(Broker {
            pool: self.pool(path)?,
            projects: self.projects.clone(),
            stager: self.stager.clone(),
            routes: self.routes.clone(),
            floors: self.floors.clone(),
        })
    }
}

impl Actor for Pools {
    type Context = Context<Self>;
}

/// An accepted `BOINC_*` or `BOINC_SEQUENCE_*` command for the pool
/// selected when its line was read.
#[derive(Message)]
#[rtype(result = "CommandResult")]
pub struct RunOnPool {
    pub pool: PathBuf,
    pub command: Command,
}

impl Handler<RunOnPool> for Pools {
    type Result = ResponseFuture<CommandResult>;

    fn handle(&mut self, RunOnPool { pool, command }: RunOnPool, _: &mut Context<Self>) -> Self::Result {
        let broker = match self.broker(&pool) {
            Ok(b) => b,
            Err(e) => {
                let failed = command.failure(format!("{} failed: {e}", command.code()));
                return Box::pin(std::future::ready(failed));
            }
        };
        match command {
            Command::Boinc(command) => Box::pin(broker.run(command)),
            Command::Sequence(command) => {
                let stores = self.stores(&broker);
                Box::pin(broker.run_sequence(command, stores))
            }
            // The dispatch hands these to the BLAH front end.
            Command::Blah(command) => Box::pin(std::future::ready(CommandResult::Blah(command.failure("not a command of a pool")))),
        }
    }
}

/// Chooses a project of the pool for one BLAH job (`pool` in `[blah]`):
/// the job's own `+remote_BoincRequirements`/`+remote_BoincRank` override
/// the pool's defaults. The first matching project that takes the app now
/// is the answer; the job then stays on it, as if it had named it.
#[derive(Message)]
#[rtype(result = "Result<PoolChoice, String>")]
pub struct PlaceJob {
    pub pool: PathBuf,
    pub name: String,
    /// The app, or why there is none (a hold reason).
    pub app: Result<String, String>,
    pub inputs: Vec<PathBuf>,
    pub requirements: Option<String>,
    pub rank: Option<String>,
    /// A work sequence job: its sequence's name. Once a project of the pool
    /// holds that sequence (a released job), the job goes there.
    pub sequence: Option<String>,
}

pub struct PoolChoice {
    pub url: String,
    pub authenticator_file: PathBuf,
}

impl Handler<PlaceJob> for Pools {
    type Result = ResponseFuture<Result<PoolChoice, String>>;

    fn handle(&mut self, msg: PlaceJob, _: &mut Context<Self>) -> Self::Result {
        let broker = match self.broker(&msg.pool) {
            Ok(b) => b,
            Err(e) => {
                let e = format!("{e}; fix it, then condor_release the job");
                return Box::pin(async move { Err(e) });
            }
        };
        let stores = self.stores(&broker);
        let work = actix_rt::spawn(async move { broker.place_job(msg, stores).await });
        Box::pin(async move { work.await.unwrap_or_else(|_| Err("internal error in the broker; condor_release the job".into())) })
    }
}

/// One command's view of the pool (owned by its task).
pub(super) struct Broker {
    pub(super) pool: PoolHandle,
    pub(super) projects: Addr<Registry>,
    pub(crate) stager: Addr<FileStager>,
    routes: Routes,
    pub(crate) floors: Floors,
}

/// What the job side of a match asks for.
pub(super) struct Wanted<'a> {
    pub(super) name: &'a str,
    pub(super) app: &'a str,
    pub(super) job_count: usize,
    /// Overrides of the pool's defaults (a BLAH job's own).
    pub(super) requirements: Option<Expr>,
    pub(super) rank: Option<Expr>,
}

/// Where a name leads.
pub(crate) enum Route {
    Project(usize),
    Unknown,
}

impl Broker {
    pub(super) fn pool(&self) -> &Pool {
        &self.pool.pool
    }

    /// Runs `command` on project `p`'s tree.
    pub(crate) async fn on(&self, p: usize, command: AsyncCommand) -> CommandResult {
        let code = command.code();
        let Some(tree) = tree_of(&self.projects, &self.pool().projects[p].key).await else {
            return CommandResult::Error(format!("{code} failed: internal error (no project tree)"));
        };
        tree.send(Run { command }).await.unwrap_or_else(|_| {
            CommandResult::Error(format!(
                "{code} failed: internal error (the project's worker stopped); the command may not have completed"
            ))
        })
    }

    /// Runs a blocking route look-up off the actor threads.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Routes, &str) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let (routes, id) = (self.routes.clone(), self.pool.id.clone());
        match tokio::task::spawn_blocking(move || f(&routes, &id)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("state database: {e}")),
            Err(_) => Err("state database: internal error".into()),
        }
    }

    fn by_name(&self, name: Option<String>) -> Result<Route, String> {
        match name {
            None => Ok(Route::Unknown),
            Some(n) => match self.pool().projects.iter().position(|p| p.name == n) {
                Some(i) => Ok(Route::Project(i)),
                None => Err(format!("the batch is on project {n}, which is no longer in the pool file")),
            },
        }
    }

    pub(crate) async fn batch_route(&self, batch: &str) -> Result<Route, String> {
        let b = batch.to_string();
        let name = self.blocking(move |r, pool| r.project_of_batch(pool, &b)).await?;
        self.by_name(name)
    }

    pub(crate) async fn job_route(&self, job: &str) -> Result<Route, String> {
        let j = job.to_string();
        let route = self.blocking(move |r, pool| r.route_of_job(pool, &j)).await?;
        self.by_name(route.map(|(_, project)| project))
    }

    pub(super) async fn stage(&self, paths: Vec<PathBuf>) -> Result<Vec<InputData>, String> {
        let staged =
            self.stager.send(Stage(paths)).await.map_err(|_| "internal error: file stager stopped".to_string())?.map_err(|e| e.0)?;
        let mut seen = HashSet::new();
        Ok(staged
            .into_iter()
            .filter(|f| seen.insert(f.phys_name.clone()))
            .map(|f| InputData { md5: f.phys_name.chars().take(32).collect(), phys_name: f.phys_name, size: f.size })
            .collect())
    }

    /// The matching projects, best first.
    pub(super) async fn matchmake(&self, want: &Wanted<'_>, inputs: &[InputData]) -> Result<Vec<usize>, String> {
        let pool = self.pool();
        let statuses: Vec<ProjectStatus> =
            self.pool.ads.send(CurrentAds { app: want.app.to_string() }).await.map_err(|_| "internal error: project ads stopped")?;
        let ads: Vec<EvalAd> = pool
            .projects
            .iter()
            .zip(&statuses)
            .map(|(p, s)| {
                let side =
                    ProjectSide { name: &p.name, url: &p.key.url, attributes: &p.attributes, requirements: &p.requirements, rank: &p.rank };
                project_ad(&side, s)
            })
            .collect();
        let job = job_ad(&JobSide {
            batch_name: want.name,
            app: want.app,
            job_count: want.job_count,
            inputs,
            requirements: want.requirements.clone().unwrap_or_else(|| pool.requirements.clone()),
            rank: want.rank.clone().unwrap_or_else(|| pool.rank.clone()),
        });
        let up: Vec<usize> = (0..statuses.len()).filter(|&i| statuses[i].up == Some(true)).collect();
        let mut gathered =
            Gathered { defined: pool.functions.iter().map(|f| f.name.to_ascii_lowercase()).collect(), values: HashMap::new() };
        for f in functions_called(&job, &ads) {
            let values: Vec<Option<f64>> = if f == DATA_OVERLAP {
                self.pool.overlap.send(Overlaps { files: inputs.to_vec(), projects: up.clone() }).await.map_err(|_| "internal error")?
            } else if gathered.defined.contains(&f) {
                let job_data = job_data_key(want.app, inputs);
                let job = Arc::new(job.clone());
                let projects = up.iter().map(|&i| (i, Arc::new(ads[i].clone()))).collect();
                self.pool.functions.send(RankValues { function: f.clone(), job_data, job, projects }).await.map_err(|_| "internal error")?
            } else {
                continue;
            };
            for (&i, v) in up.iter().zip(values) {
                if let Some(v) = v {
                    gathered.values.insert((f.clone(), pool.projects[i].name.clone()), v);
                }
            }
        }
        let ranked = rank_projects(&job, &ads, &gathered);
        tracing::info!(
            pool = %self.pool.id,
            batch = %want.name,
            "matches: {}",
            ranked.iter().map(|c| format!("{} (rank {}, {})", pool.projects[c.project].name, c.job_rank, c.project_rank)).collect::<Vec<_>>().join(", ")
        );
        Ok(ranked.into_iter().map(|c| c.project).collect())
    }

    async fn place_job(&self, job: PlaceJob, stores: Vec<SequenceStore>) -> Result<PoolChoice, String> {
        if let Some(name) = &job.sequence {
            if let Some(p) = sequence_holder(stores, &self.pool.id, name).await? {
                let project = &self.pool().projects[p];
                tracing::info!(pool = %self.pool.id, project = %project.name, job = %job.name, "BLAH job goes where its sequence is");
                return Ok(PoolChoice { url: project.key.url.clone(), authenticator_file: project.authenticator_file.clone() });
            }
        }
        let app = job.app?;
        let parse = |what: &str, text: Option<String>| {
            text.map(|t| {
                Expr::parse(&t)
                    .map_err(|e| format!("the job's {what} is not a ClassAd expression ({e}); fix it, then condor_release the job"))
            })
            .transpose()
        };
        let want = Wanted {
            name: &job.name,
            app: &app,
            job_count: 1,
            requirements: parse("+remote_BoincRequirements", job.requirements)?,
            rank: parse("+remote_BoincRank", job.rank)?,
        };
        let inputs = self.stage(job.inputs).await.map_err(|e| format!("can't read an input file: {e}"))?;
        let mut skipped = Vec::new();
        for p in self.matchmake(&want, &inputs).await? {
            let project = &self.pool().projects[p];
            match self.probe(p, &app).await {
                Ok(()) => {
                    tracing::info!(pool = %self.pool.id, project = %project.name, job = %job.name, "BLAH job placed");
                    self.pool.overlap.do_send(Uploaded { project: p, names: inputs.iter().map(|f| f.phys_name.clone()).collect() });
                    return Ok(PoolChoice { url: project.key.url.clone(), authenticator_file: project.authenticator_file.clone() });
                }
                Err(why) => skipped.push(format!("{}: {why}", project.name)),
            }
        }
        let why = if skipped.is_empty() { "none matches the job's Requirements".to_string() } else { skipped.join("; ") };
        Err(format!("no project of the pool {} takes the job ({why})", self.pool().path.display()))
    }

    /// Whether project `p` takes the app now (up, app known, access).
    pub(super) async fn probe(&self, p: usize, app: &str) -> Result<(), String> {
        let project = &self.pool().projects[p];
        let rpc = rpc_client_of(&self.projects, &project.key).await.ok_or("internal error (no project tree)")?;
        let deadline = Instant::now() + self.pool().probe_timeout;
        let xml = request::get_templates_for_app(&project.key.authenticator, app);
        rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_templates, deadline)
            .await
            .map(|_| ())
            .map_err(|e| project.key.authenticator.redact_in(&e.to_string()))
    }
}

/// What identifies a batch's data for the rank-function cache.
fn job_data_key(app: &str, inputs: &[InputData]) -> String {
    let mut names: Vec<&str> = inputs.iter().map(|f| f.phys_name.as_str()).collect();
    names.sort_unstable();
    format!("{app}\n{}", names.join("\n"))
}
