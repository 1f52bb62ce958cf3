//! Pools: the broker's front. Loads a pool on first use (with its ads,
//! overlap and rank-function actors), places each new batch by
//! matchmaking, and routes every later command by the durable routes.
//! Like `Registry`, it turns every accepted request into exactly one
//! result.
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
use std::time::{Duration, Instant};

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::classad::expr::Expr;
use gahp_protocol::classad::EvalAd;
use gahp_protocol::gahp::{AsyncCommand, CommandResult, ReqId, SubmitBatch};

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
use gahp_project::rpc::{Rpc, RpcError};
use gahp_project::tree::Run;
use gahp_sequences::store::SequenceStore;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::{FileStager, Stage};
use gahp_services::result_queue::{Complete, ResultQueue};
use gahp_services::state_db::StateDb;

/// A loaded pool and its actors.
#[derive(Clone)]
pub(super) struct PoolHandle {
    /// The routes' key: the pool file's canonical path ([`pool_id`]).
    pub(super) id: String,
    pub(super) pool: Arc<Pool>,
    ads: Addr<ProjectAds>,
    overlap: Addr<DataOverlap>,
    functions: Addr<RankFunctions>,
}

/// Per (pool id, project): the earliest min_mod_time a failed query could
/// not answer; that project is asked from there until it answers, so its
/// changes while it was down are not skipped.
type Floors = Rc<RefCell<HashMap<(String, String), f64>>>;

pub struct Pools {
    pub(super) config: Arc<DaemonConfig>,
    pub(super) queue: Addr<ResultQueue>,
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
    pub fn new(
        config: Arc<DaemonConfig>,
        queue: Addr<ResultQueue>,
        projects: Addr<Registry>,
        stager: Addr<FileStager>,
        db: StateDb,
    ) -> Self {
        Pools { config, queue, projects, stager, routes: Routes::new(db.clone()), db, pools: HashMap::new(), floors: Rc::default() }
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

/// An accepted `BOINC_*` command for the pool selected when it arrived.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PoolDispatch {
    pub reqid: ReqId,
    pub pool: PathBuf,
    pub command: AsyncCommand,
}

impl Handler<PoolDispatch> for Pools {
    type Result = ();

    fn handle(&mut self, msg: PoolDispatch, _: &mut Context<Self>) {
        let PoolDispatch { reqid, pool, command } = msg;
        let queue = self.queue.clone();
        let broker = match self.broker(&pool) {
            Ok(b) => b,
            Err(e) => {
                queue.do_send(Complete { reqid, result: CommandResult::Error(format!("{} failed: {e}", command.code())) });
                return;
            }
        };
        let code = command.code();
        // Placement may try several projects; this is the net under it.
        let limit = self.config.command_timeout + Duration::from_secs(15);
        actix_rt::spawn(async move {
            // Its own task, so that a panic in it still gets a result.
            let mut work = actix_rt::spawn(broker.run(command));
            let result = match tokio::time::timeout(limit, &mut work).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => {
                    CommandResult::Error(format!("{code} failed: internal error in the broker; the command may not have completed"))
                }
                Err(_) => {
                    work.abort();
                    CommandResult::Error(format!("{code} timed out after {} s", limit.as_secs()))
                }
            };
            queue.do_send(Complete { reqid, result });
        });
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
    stager: Addr<FileStager>,
    routes: Routes,
    floors: Floors,
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
enum Route {
    Project(usize),
    Unknown,
}

impl Broker {
    pub(super) fn pool(&self) -> &Pool {
        &self.pool.pool
    }

    async fn run(self, command: AsyncCommand) -> CommandResult {
        let code = command.code();
        let result = match command {
            AsyncCommand::Ping => self.ping().await,
            AsyncCommand::Submit(batch) => self.submit(batch).await,
            AsyncCommand::QueryBatches { min_mod_time, batches } => self.query(min_mod_time, batches).await,
            AsyncCommand::FetchOutput(fetch) => match self.job_route(&fetch.job_name).await {
                Ok(Route::Project(p)) => self.on(p, AsyncCommand::FetchOutput(fetch)).await,
                Ok(Route::Unknown) => unknown("get_output_file() returned -1", "job", &fetch.job_name),
                Err(e) => CommandResult::Error(e),
            },
            AsyncCommand::AbortJobs { jobs } => self.abort(jobs).await,
            AsyncCommand::RetireBatch { batch } => match self.batch_route(&batch).await {
                Ok(Route::Project(p)) => self.on(p, AsyncCommand::RetireBatch { batch }).await,
                Ok(Route::Unknown) => unknown("retire_batch() returned -1", "batch", &batch),
                Err(e) => CommandResult::Error(e),
            },
            AsyncCommand::SetLease { batch, lease_time } => match self.batch_route(&batch).await {
                Ok(Route::Project(p)) => self.on(p, AsyncCommand::SetLease { batch, lease_time }).await,
                Ok(Route::Unknown) => unknown("set_lease() returned -1", "batch", &batch),
                Err(e) => CommandResult::Error(e),
            },
        };
        if let CommandResult::Error(e) = &result {
            tracing::info!(pool = %self.pool.id, "{code} failed: {e}");
        }
        result
    }

    /// Runs `command` on project `p`'s tree.
    async fn on(&self, p: usize, command: AsyncCommand) -> CommandResult {
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
    async fn blocking<T: Send + 'static>(
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

    async fn batch_route(&self, batch: &str) -> Result<Route, String> {
        let b = batch.to_string();
        let name = self.blocking(move |r, pool| r.project_of_batch(pool, &b)).await?;
        self.by_name(name)
    }

    async fn job_route(&self, job: &str) -> Result<Route, String> {
        let j = job.to_string();
        let route = self.blocking(move |r, pool| r.route_of_job(pool, &j)).await?;
        self.by_name(route.map(|(_, project)| project))
    }

    /// Up if any project of the pool answers.
    async fn ping(&self) -> CommandResult {
        let n = self.pool().projects.len();
        let results = futures_util::future::join_all((0..n).map(|p| self.on(p, AsyncCommand::Ping))).await;
        if results.iter().any(|r| matches!(r, CommandResult::Ok)) {
            return CommandResult::Ok;
        }
        let why: Vec<String> = results
            .iter()
            .zip(&self.pool().projects)
            .map(|(r, p)| format!("{}: {}", p.name, if let CommandResult::Error(e) = r { e.as_str() } else { "?" }))
            .collect();
        CommandResult::Error(format!("ping_server returned -1 no project of the pool answers ({})", why.join("; ")))
    }

    async fn submit(&self, batch: SubmitBatch) -> CommandResult {
        match self.batch_route(&batch.batch_name).await {
            // Once a batch may exist on a project, it stays there.
            Ok(Route::Project(p)) => {
                let names = self.phys_names(&batch).await;
                let result = self.on(p, AsyncCommand::Submit(batch)).await;
                if matches!(result, CommandResult::Ok) {
                    self.pool.overlap.do_send(Uploaded { project: p, names });
                }
                result
            }
            Ok(Route::Unknown) => self.place(batch).await,
            Err(e) => CommandResult::Error(format!("error submitting jobs: {e}")),
        }
    }

    /// The content names of the batch's inputs (empty if they can't be had:
    /// the submit itself then says why).
    async fn phys_names(&self, batch: &SubmitBatch) -> Vec<String> {
        self.inputs(batch).await.map(|files| files.into_iter().map(|f| f.phys_name).collect()).unwrap_or_default()
    }

    /// The distinct input files of the batch, hashed (through the MD5 cache
    /// the submit pipeline uses next).
    async fn inputs(&self, batch: &SubmitBatch) -> Result<Vec<InputData>, String> {
        let mut seen = HashSet::new();
        let paths: Vec<PathBuf> =
            batch.jobs.iter().flat_map(|j| j.inputs.iter()).filter(|i| seen.insert(&i.src)).map(|i| i.src.clone()).collect();
        self.stage(paths).await
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

    async fn place(&self, batch: SubmitBatch) -> CommandResult {
        if batch.jobs.is_empty() {
            return CommandResult::Error("error submitting jobs: no jobs".into());
        }
        let inputs = match self.inputs(&batch).await {
            Ok(i) => i,
            Err(e) => return CommandResult::Error(format!("error processing input files: -108 {e}")),
        };
        let want = Wanted { name: &batch.batch_name, app: &batch.app_name, job_count: batch.jobs.len(), requirements: None, rank: None };
        let candidates = match self.matchmake(&want, &inputs).await {
            Ok(c) => c,
            Err(e) => return CommandResult::Error(format!("error submitting jobs: {e}")),
        };
        let mut skipped: Vec<String> = Vec::new();
        for p in candidates {
            let project = &self.pool().projects[p];
            if let Err(why) = self.probe(p, &batch.app_name).await {
                tracing::info!(pool = %self.pool.id, project = %project.name, batch = %batch.batch_name, "skipped: {why}");
                skipped.push(format!("{}: {why}", project.name));
                continue;
            }
            let (b, name) = (batch.batch_name.clone(), project.name.clone());
            let jobs: Vec<String> = batch.jobs.iter().map(|j| j.name.clone()).collect();
            if let Err(e) = self.blocking(move |r, pool| r.bind(pool, &b, &name, &jobs)).await {
                return CommandResult::Error(format!("error submitting jobs: {e}"));
            }
            tracing::info!(pool = %self.pool.id, project = %project.name, batch = %batch.batch_name, "batch placed");
            let result = self.on(p, AsyncCommand::Submit(batch.clone())).await;
            let CommandResult::Error(err) = &result else {
                self.pool.overlap.do_send(Uploaded { project: p, names: inputs.iter().map(|f| f.phys_name.clone()).collect() });
                return result;
            };
            if !self.batch_absent(p, &batch.batch_name).await {
                // It exists there (or may): it stays.
                return result;
            }
            let b = batch.batch_name.clone();
            if let Err(e) = self.blocking(move |r, pool| r.unbind(pool, &b)).await {
                return CommandResult::Error(format!("error submitting jobs: {e}"));
            }
            tracing::info!(pool = %self.pool.id, project = %project.name, batch = %batch.batch_name, "refused before creation: {err}");
            skipped.push(format!("{}: {err}", project.name));
        }
        let why = if skipped.is_empty() { "none matches its Requirements".to_string() } else { skipped.join("; ") };
        CommandResult::Error(format!("error submitting jobs: -1 no project of the pool takes the batch ({why})"))
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

    /// True only if the project says it has no batch of this name.
    async fn batch_absent(&self, p: usize, batch: &str) -> bool {
        let project = &self.pool().projects[p];
        let Some(rpc) = rpc_client_of(&self.projects, &project.key).await else {
            return false;
        };
        let deadline = Instant::now() + self.pool().probe_timeout;
        let xml = request::query_batch_by_name(&project.key.authenticator, batch);
        matches!(
            rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batch, deadline).await,
            Err(RpcError::Boinc { ref msg, .. }) if msg == "no such batch"
        )
    }

    /// One query per project, answered in request order with the earliest
    /// server_time of the projects that answered (passing it back can only
    /// report a change twice, never miss one). A project that fails leaves
    /// its batches with no news this time.
    async fn query(&self, min_mod_time: f64, batches: Vec<String>) -> CommandResult {
        let mut by_project: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, b) in batches.iter().enumerate() {
            match self.batch_route(b).await {
                Ok(Route::Project(p)) => by_project.entry(p).or_default().push(i),
                Ok(Route::Unknown) => tracing::warn!(pool = %self.pool.id, batch = %b, "query of a batch the pool never placed"),
                Err(e) => return CommandResult::Error(format!("error querying batch: {e}")),
            }
        }
        let asks: Vec<(usize, Vec<usize>, f64)> = by_project
            .into_iter()
            .map(|(p, idx)| {
                let key = (self.pool.id.clone(), self.pool().projects[p].name.clone());
                let from = self.floors.borrow().get(&key).map_or(min_mod_time, |f| f.min(min_mod_time));
                (p, idx, from)
            })
            .collect();
        let limit = self.pool().query_timeout;
        let answers = futures_util::future::join_all(asks.iter().map(|(p, idx, from)| {
            let names: Vec<String> = idx.iter().map(|&i| batches[i].clone()).collect();
            let query = self.on(*p, AsyncCommand::QueryBatches { min_mod_time: *from, batches: names });
            async move {
                tokio::time::timeout(limit, query)
                    .await
                    .unwrap_or_else(|_| CommandResult::Error(format!("error querying batch: no answer within {} s", limit.as_secs_f64())))
            }
        }))
        .await;
        let mut groups: Vec<Vec<(String, String)>> = vec![Vec::new(); batches.len()];
        let mut server_time: Option<f64> = None;
        let mut first_error = None;
        for ((p, idx, from), answer) in asks.iter().zip(answers) {
            let key = (self.pool.id.clone(), self.pool().projects[*p].name.clone());
            match answer.batches() {
                Some((t, got)) if got.len() == idx.len() => {
                    self.floors.borrow_mut().remove(&key);
                    server_time = Some(server_time.map_or(t, |s: f64| s.min(t)));
                    for (&i, g) in idx.iter().zip(got) {
                        groups[i] = g;
                    }
                }
                _ => {
                    let why = if let CommandResult::Error(e) = answer { e } else { "unexpected reply".into() };
                    tracing::info!(pool = %self.pool.id, project = %key.1, "query failed; its batches wait: {why}");
                    self.floors.borrow_mut().insert(key, *from);
                    first_error.get_or_insert(why);
                }
            }
        }
        match (server_time, first_error) {
            (Some(server_time), _) => CommandResult::Batches { server_time, groups },
            (None, Some(e)) => CommandResult::Error(e),
            // No batch of the request was placed by the pool.
            (None, None) => CommandResult::Batches { server_time: min_mod_time, groups },
        }
    }

    /// Each project gets its own jobs; every project is asked even if one
    /// fails, and the first failure is reported.
    async fn abort(&self, jobs: Vec<String>) -> CommandResult {
        let mut by_project: HashMap<usize, Vec<String>> = HashMap::new();
        for j in jobs {
            match self.job_route(&j).await {
                Ok(Route::Project(p)) => by_project.entry(p).or_default().push(j),
                Ok(Route::Unknown) => return unknown("abort_jobs() returned -1", "job", &j),
                Err(e) => return CommandResult::Error(e),
            }
        }
        let results =
            futures_util::future::join_all(by_project.into_iter().map(|(p, jobs)| self.on(p, AsyncCommand::AbortJobs { jobs }))).await;
        results.into_iter().find(|r| r.is_error()).unwrap_or(CommandResult::Ok)
    }
}

fn unknown(operation: &str, what: &str, name: &str) -> CommandResult {
    CommandResult::Error(format!("{operation} no such {what} in the pool: {name}"))
}

/// What identifies a batch's data for the rank-function cache.
fn job_data_key(app: &str, inputs: &[InputData]) -> String {
    let mut names: Vec<&str> = inputs.iter().map(|f| f.phys_name.as_str()).collect();
    names.sort_unstable();
    format!("{app}\n{}", names.join("\n"))
}
