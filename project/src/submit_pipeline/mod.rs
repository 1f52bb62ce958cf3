//! SubmitPipeline: one actor per BOINC_SUBMIT.
//!
//! get_templates -> stage inputs (MD5 names) -> find or create the batch
//! (its look-up by name sent beside the first two) -> query_files (ties
//! present files to the batch) -> upload_files (absent ones, in calls
//! bounded by count and bytes: PHP's max_file_uploads and post_max_size)
//! -> submit_batch.
//!
//! A step that failed transiently is retried with backoff; finished steps are
//! not redone. Steps that create something are sent once, and after a lost
//! reply the pipeline asks the server what it has before trying again:
//! * the batch is looked up by name before it is created (a real server
//!   does not refuse a second batch of the same name);
//! * a lost query_files/upload_files is followed by query_files without a
//!   batch (no side effect) and per-file association, where a duplicate-key
//!   error means "already associated" (the real server dies on re-association);
//! * a lost submit_batch is followed by query_batch: jobs there mean done;
//! * an upload PHP refused for its size limits is split the same way (and
//!   the smaller byte budget kept for the project), or, for a file no call
//!   can carry, reported with the file, its size and the PHP setting.
//!
//! `upload` is the upload step: calls sized by the project's PHP limits,
//! split and sent again when refused, the learnt budget kept.

mod compact;
mod upload;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use bytes::Bytes;
use futures_util::FutureExt;
use gahp_protocol::boinc::command_line::ArgRefused;
use gahp_protocol::boinc::{reply, request, BatchInfo, Script, SubmitParams, Templates};
use gahp_protocol::gahp::{JobParams, ParamValue};
use tokio::sync::Semaphore;

use crate::rpc::{backoff, Parse, Rpc, RpcClient, RpcError};
use crate::templates::TemplatesCall;
use crate::{submit_records, ProjectKey};
use gahp_services::clock::unix_now;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::{FileStager, Stage, StagedFile};
use gahp_services::state_db::StateDb;

pub use compact::{BadArgs, CompactBatch, JobNames};

/// submit_batch requests of one project built and in flight at once (one
/// of 10,000 jobs is about 1.9 MB): a hundred submits arriving together
/// do their small steps side by side, and their requests a few at a time.
pub const SUBMIT_BATCHES_AT_ONCE: usize = 4;

/// How old an answer of the look-up by name may be when the create is
/// decided on it.
const LOOK_UP_FRESH: Duration = Duration::from_secs(1);

/// Why a submission failed; rendered to text where the result line is made.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("no jobs")]
    NoJobs,
    #[error("invalid job parameter {name}: '{value}' is not a number")]
    BadParam { name: &'static str, value: String },
    #[error("job name {0} appears twice in the batch")]
    DuplicateJob(String),
    #[error("error getting templates: {0}")]
    Templates(RpcError),
    #[error("error submitting jobs: job {job}: {refused}")]
    WrapperArgs { job: String, refused: ArgRefused },
    #[error("error processing input files: -1 job {job} has {got} input file(s) but app {app} takes {need}")]
    InputCount { job: String, app: String, need: usize, got: usize },
    #[error("error processing input files: -108 {0}")]
    LocalFile(String),
    #[error("error processing input files: {0}")]
    Files(RpcError),
    #[error("error processing input files: -1 input file {path} ({size} bytes) is over the project's {limit}")]
    TooBig { path: String, size: u64, limit: PhpLimit },
    #[error("error creating batch: {0}")]
    CreateBatch(RpcError),
    #[error("error creating batch: -1 a batch named {0} already exists on the server with other jobs")]
    NameTaken(String),
    #[error("error submitting jobs: {0}")]
    Submit(RpcError),
    #[error("error submitting jobs: -1 the submit_batch request of {jobs} jobs ({bytes} bytes) is over the project's {}; submit fewer jobs per batch", PhpLimit::PostMaxSize)]
    SubmitTooBig { bytes: usize, jobs: usize },
    #[error("error submitting jobs: internal error ({0})")]
    Internal(&'static str),
}

/// The PHP setting of the server that refused a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhpLimit {
    UploadMaxFilesize,
    PostMaxSize,
}

impl std::fmt::Display for PhpLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PhpLimit::UploadMaxFilesize => "PHP upload_max_filesize, the largest file it accepts",
            PhpLimit::PostMaxSize => "PHP post_max_size, the largest request it accepts",
        })
    }
}

/// BOINC's "project down for maintenance": an error reply that passes.
pub const PROJECT_DOWN: i64 = -183;

impl SubmitError {
    /// The server's error, if an RPC failed.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            SubmitError::Templates(e) | SubmitError::Files(e) | SubmitError::CreateBatch(e) | SubmitError::Submit(e) => Some(e),
            _ => None,
        }
    }

    /// The project was down for maintenance: trying later may succeed.
    pub fn project_down(&self) -> bool {
        matches!(self.rpc(), Some(RpcError::Boinc { num: PROJECT_DOWN, .. }))
    }
}

type Step<T> = Result<T, SubmitError>;

pub struct SubmitPipeline {
    key: ProjectKey,
    config: Arc<DaemonConfig>,
    rpc: Addr<RpcClient>,
    stager: Addr<FileStager>,
    db: StateDb,
    batch: Option<CompactBatch>,
    /// The app's templates when the caller has them (no get_templates),
    /// or the project's call for them that the caller shares.
    templates: Option<Templates>,
    shared_templates: Option<TemplatesCall>,
    /// The project's permits for building and sending submit_batch.
    submit_slots: Option<Arc<Semaphore>>,
    deadline: Instant,
}

impl SubmitPipeline {
    pub fn new(
        key: ProjectKey,
        config: Arc<DaemonConfig>,
        rpc: Addr<RpcClient>,
        stager: Addr<FileStager>,
        db: StateDb,
        batch: CompactBatch,
        deadline: Instant,
    ) -> Self {
        SubmitPipeline {
            key,
            config,
            rpc,
            stager,
            db,
            batch: Some(batch),
            templates: None,
            shared_templates: None,
            submit_slots: None,
            deadline,
        }
    }

    /// Uses these templates of the batch's app instead of asking for them.
    pub fn with_templates(mut self, templates: Templates) -> Self {
        self.templates = Some(templates);
        self
    }

    /// Waits for this get_templates of the batch's app (a project's
    /// cached call, `project::templates`) instead of making its own.
    pub fn with_shared_templates(mut self, call: TemplatesCall) -> Self {
        self.shared_templates = Some(call);
        self
    }

    /// Builds and sends its submit_batch only with one of these permits
    /// (the project's [`SUBMIT_BATCHES_AT_ONCE`]).
    pub fn with_submit_slots(mut self, slots: Arc<Semaphore>) -> Self {
        self.submit_slots = Some(slots);
        self
    }
}

impl Actor for SubmitPipeline {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "Result<(), SubmitError>")]
pub struct RunPipeline;

impl Handler<RunPipeline> for SubmitPipeline {
    type Result = ResponseActFuture<Self, Result<(), SubmitError>>;

    fn handle(&mut self, _: RunPipeline, _: &mut Context<Self>) -> Self::Result {
        let run = Run {
            key: self.key.clone(),
            config: self.config.clone(),
            rpc: self.rpc.clone(),
            stager: self.stager.clone(),
            db: self.db.clone(),
            submit_slots: self.submit_slots.clone(),
            deadline: self.deadline,
        };
        let (batch, templates, shared) = (self.batch.take(), self.templates.take(), self.shared_templates.take());
        Box::pin(
            async move {
                let batch = batch.ok_or(SubmitError::Internal("pipeline ran twice"))?;
                let name = batch.batch_name.clone();
                let r = run.submit(batch, templates, shared).await;
                if let Err(e) = &r {
                    tracing::info!(batch = %name, "submit failed: {}", run.key.authenticator.redact_in(&e.to_string()));
                }
                r
            }
            .into_actor(self)
            // One pipeline per submit: it ends with its command.
            .map(|result, _, ctx| {
                ctx.stop();
                result
            }),
        )
    }
}

/// What the pipeline needs while it runs (owned by its future).
struct Run {
    key: ProjectKey,
    config: Arc<DaemonConfig>,
    rpc: Addr<RpcClient>,
    stager: Addr<FileStager>,
    db: StateDb,
    submit_slots: Option<Arc<Semaphore>>,
    deadline: Instant,
}

enum CreateRecord {
    SentAt,
    Sent(f64),
    Forget,
}

enum BatchSlot {
    /// An empty batch (new, or left by an earlier attempt) to fill.
    Empty(i64),
    /// The server already has these jobs in a batch of this name.
    AlreadySubmitted,
}

impl Run {
    async fn submit(&self, batch: CompactBatch, templates: Option<Templates>, shared: Option<TemplatesCall>) -> Step<()> {
        if batch.is_empty() {
            return Err(SubmitError::NoJobs);
        }
        let params = submit_params(&batch.params)?;
        if let Some(dup) = batch.names().duplicate() {
            return Err(SubmitError::DuplicateJob(dup));
        }
        // The look-up by name has no side effect: it goes out beside the
        // templates and the hashing, so a submit waits for one request
        // fewer in a row. If the submit fails here first, it is dropped;
        // an answer older than LOOK_UP_FRESH (long hashing) is asked again,
        // so the create still follows its look-up closely.
        let look_up = self.look_up(&batch.batch_name).map(|found| Ok::<_, SubmitError>((found, Instant::now())));
        let (staged, (found, at)) = futures_util::future::try_join(self.prepare(&batch, templates, shared), look_up).await?;
        let found = (at.elapsed() < LOOK_UP_FRESH).then_some(found);
        let mut names: Vec<&str> = Vec::new();
        let mut seen_names = HashSet::new();
        for f in staged.values() {
            if seen_names.insert(f.phys_name.as_str()) {
                names.push(&f.phys_name);
            }
        }
        names.sort_unstable();

        let batch_id = match self.find_or_create_batch(&batch, found).await? {
            BatchSlot::AlreadySubmitted => {
                tracing::info!(batch = %batch.batch_name, "already on the server; nothing to do");
                return Ok(());
            }
            BatchSlot::Empty(id) => id,
        };

        let names: Vec<String> = names.into_iter().map(String::from).collect();
        let absent = self.associate(batch_id, &names).await?;
        let by_name: HashMap<&str, &StagedFile> = staged.values().map(|f| (f.phys_name.as_str(), f)).collect();
        self.upload(batch_id, absent, &by_name).await?;

        // The request is built only with a permit, and dropped with it.
        let _permit = match &self.submit_slots {
            Some(slots) => Some(slots.clone().acquire_owned().await.map_err(|_| SubmitError::Internal("submit permits closed"))?),
            None => None,
        };
        // Physical input names once per distinct input list, not per job.
        let files: Vec<Vec<&str>> =
            batch.input_lists().map(|(_, list)| list.iter().map(|i| staged[&i.src].phys_name.as_str()).collect()).collect();
        let auth = &self.key.authenticator;
        let xml = request::submit_batch_each(auth, batch_id, &batch.app_name, &params, batch.len(), |i, name| {
            batch.names().write(i, name);
            let files = files.get(batch.input_list_of(i)).map_or(&[][..], Vec::as_slice);
            (batch.job(i).0, files)
        });
        drop(files);
        self.submit_jobs(batch_id, Bytes::from(xml), &batch).await
    }

    /// The app's templates checked against the batch's input lists, and
    /// the inputs hashed: what is known before anything is created.
    async fn prepare(
        &self,
        batch: &CompactBatch,
        templates: Option<Templates>,
        shared: Option<TemplatesCall>,
    ) -> Step<HashMap<PathBuf, StagedFile>> {
        let auth = &self.key.authenticator;
        let templates = match (templates, shared) {
            (Some(t), _) => t,
            (None, Some(call)) => call.await.map_err(SubmitError::Templates)?,
            (None, None) => self
                .idempotent(Script::SubmitRpcHandler, request::get_templates_for_app(auth, &batch.app_name), reply::parse_templates)
                .await
                .map_err(SubmitError::Templates)?,
        };
        // A runner's wrapper would cut or rewrite these arguments.
        if templates.is_runner() {
            if let Some((job, refused)) = batch.beyond_wrapper() {
                return Err(SubmitError::WrapperArgs { job: job.clone(), refused: refused.clone() });
            }
        }
        // The lists come in the order of their first job: the first list
        // that does not fit has the first job that does not.
        if let Some((job, list)) = batch.input_lists().find(|(_, l)| l.len() != templates.inputs.len()) {
            return Err(SubmitError::InputCount {
                job: batch.names().get(job),
                app: batch.app_name.clone(),
                need: templates.inputs.len(),
                got: list.len(),
            });
        }
        // Hash before touching the server: a missing file fails early and
        // leaves no empty batch behind.
        self.stage(batch).await
    }

    /// The batch of this name on the server, if any.
    async fn look_up(&self, name: &str) -> Result<BatchInfo, RpcError> {
        self.idempotent(Script::SubmitRpcHandler, request::query_batch_by_name(&self.key.authenticator, name), reply::parse_query_batch)
            .await
    }

    async fn idempotent<T: Send + 'static>(&self, script: Script, xml: String, parse: Parse<T>) -> Result<T, RpcError> {
        self.rpc.idempotent(script, xml, parse, self.deadline).await
    }

    async fn once<T: Send + 'static>(&self, script: Script, xml: impl Into<Bytes>, parse: Parse<T>) -> Result<T, RpcError> {
        self.rpc.once(script, xml, Vec::new(), parse, self.deadline).await
    }

    /// Waits before retrying a step; the error when the deadline is near.
    async fn pause(&self, attempt: u32, last: RpcError, wrap: fn(RpcError) -> SubmitError) -> Step<()> {
        if backoff(&self.config, attempt, self.deadline).await {
            Ok(())
        } else {
            Err(wrap(last))
        }
    }

    async fn stage(&self, batch: &CompactBatch) -> Step<HashMap<PathBuf, StagedFile>> {
        let mut seen = HashSet::new();
        let paths: Vec<PathBuf> =
            batch.input_lists().flat_map(|(_, l)| l.iter()).filter(|i| seen.insert(&i.src)).map(|i| i.src.clone()).collect();
        let staged = self
            .stager
            .send(Stage(paths))
            .await
            .map_err(|_| SubmitError::LocalFile("internal error: file stager stopped".into()))?
            .map_err(|e| SubmitError::LocalFile(e.0))?;
        let hashed = staged.iter().filter(|f| !f.from_cache).count();
        tracing::info!(batch = %batch.batch_name, files = staged.len(), hashed, cached = staged.len() - hashed, "staged input files");
        Ok(staged.into_iter().map(|f| (f.path.clone(), f)).collect())
    }

    /// The batch to fill: an empty one of this name if the server has it (a
    /// create whose reply was lost, or a resubmit after a restart), else a
    /// new one. Asking first is what keeps a retry from making two; and a
    /// create sent earlier whose outcome is unknown (recorded in the state
    /// database before it went out, so a killed daemon's counts too) may
    /// still land, so a new one waits until that one has settled.
    /// `found` is the first look-up's answer if it was asked just now.
    async fn find_or_create_batch(&self, batch: &CompactBatch, found: Option<Result<BatchInfo, RpcError>>) -> Step<BatchSlot> {
        let auth = &self.key.authenticator;
        let name = &batch.batch_name;
        let mut first = found;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let found = match first.take() {
                Some(found) => found,
                None => self.look_up(name).await,
            };
            match found {
                Ok(info) => {
                    self.creates(name, CreateRecord::Forget).await?;
                    return self.reuse(info, batch);
                }
                Err(RpcError::Boinc { ref msg, .. }) if msg == "no such batch" => {}
                Err(e) => return Err(SubmitError::CreateBatch(e)),
            }
            if let Some(sent_at) = self.creates(name, CreateRecord::SentAt).await? {
                let settled = sent_at + self.config.create_settle.as_secs_f64();
                let wait = settled - unix_now();
                if wait > 0.0 {
                    let wait = Duration::from_secs_f64(wait);
                    if Instant::now() + wait >= self.deadline {
                        return Err(SubmitError::CreateBatch(RpcError::Local(format!(
                            "a create_batch of {name} sent at {sent_at:.0} may still reach the server; not creating another before it settles"
                        ))));
                    }
                    tracing::info!(batch = %name, secs = wait.as_secs_f64(), "an earlier create_batch may still land; waiting before looking again");
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            let expire = unix_now() + self.config.initial_expire.as_secs_f64();
            self.creates(name, CreateRecord::Sent(unix_now())).await?;
            let created = self
                .once(Script::SubmitRpcHandler, request::create_batch(auth, name, &batch.app_name, expire), reply::parse_create_batch)
                .await;
            match created {
                Ok(id) => {
                    self.creates(name, CreateRecord::Forget).await?;
                    return Ok(BatchSlot::Empty(id));
                }
                // It may or may not exist now: look again before retrying.
                Err(e) if e.outcome_unknown() => self.pause(attempt, e, SubmitError::CreateBatch).await?,
                Err(e) => {
                    self.creates(name, CreateRecord::Forget).await?;
                    return Err(SubmitError::CreateBatch(e));
                }
            }
        }
    }

    /// Reads or writes this batch's record of a create_batch in flight.
    async fn creates(&self, batch: &str, what: CreateRecord) -> Step<Option<f64>> {
        let (db, project, account, batch) = (self.db.clone(), self.key.url.clone(), self.key.account(), batch.to_string());
        let done = tokio::task::spawn_blocking(move || match what {
            CreateRecord::SentAt => submit_records::create_sent_at(&db, &project, &account, &batch),
            CreateRecord::Sent(at) => submit_records::note_create_sent(&db, &project, &account, &batch, at).map(|()| None),
            CreateRecord::Forget => submit_records::forget_create(&db, &project, &account, &batch).map(|()| None),
        })
        .await;
        match done {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(SubmitError::CreateBatch(RpcError::Local(format!("the state database: {e}")))),
            Err(_) => Err(SubmitError::Internal("state database task failed")),
        }
    }

    fn reuse(&self, info: BatchInfo, batch: &CompactBatch) -> Step<BatchSlot> {
        if info.state == 0 && info.jobs.is_empty() {
            tracing::info!(batch = %batch.batch_name, id = info.id, "reusing the empty batch of this name");
            return Ok(BatchSlot::Empty(info.id));
        }
        let there: HashSet<&str> = info.jobs.iter().map(String::as_str).collect();
        if batch.names().iter().all(|name| there.contains(name.as_str())) {
            return Ok(BatchSlot::AlreadySubmitted);
        }
        Err(SubmitError::NameTaken(batch.batch_name.clone()))
    }

    /// Ties every present file to the batch; returns the absent names.
    async fn associate(&self, batch_id: i64, names: &[String]) -> Step<Vec<String>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let xml = request::query_files(&self.key.authenticator, Some(batch_id), names);
        match self.once(Script::JobFile, xml, reply::parse_query_files).await {
            Ok(absent) => Ok(absent.into_iter().filter_map(|i| names.get(i).cloned()).collect()),
            // The server may have associated some files before the reply was
            // lost; a second bulk call would die on those. One by one instead.
            Err(e) if e.outcome_unknown() || e.is_duplicate_entry() => self.associate_each(batch_id, names).await,
            Err(e) => Err(SubmitError::Files(e)),
        }
    }

    async fn associate_each(&self, batch_id: i64, names: &[String]) -> Step<Vec<String>> {
        let mut absent = Vec::new();
        for name in names {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let xml = request::query_files(&self.key.authenticator, Some(batch_id), std::slice::from_ref(name));
                match self.once(Script::JobFile, xml, reply::parse_query_files).await {
                    Ok(missing) => {
                        if !missing.is_empty() {
                            absent.push(name.clone());
                        }
                        break;
                    }
                    Err(e) if e.is_duplicate_entry() => break, // already tied to this batch
                    Err(e) if e.outcome_unknown() => self.pause(attempt, e, SubmitError::Files).await?,
                    Err(e) => return Err(SubmitError::Files(e)),
                }
            }
        }
        Ok(absent)
    }

    async fn submit_jobs(&self, batch_id: i64, xml: Bytes, batch: &CompactBatch) -> Step<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.once(Script::SubmitRpcHandler, xml.clone(), reply::parse_submit_batch).await {
                Ok(_) => return Ok(()),
                Err(RpcError::Boinc { num, ref msg }) if reply::body_dropped(num, msg) => {
                    return Err(SubmitError::SubmitTooBig { bytes: xml.len(), jobs: batch.len() });
                }
                Err(e) if e.outcome_unknown() => {
                    // Did the lost call create the jobs? Ask before sending again.
                    let xml = request::query_batch_by_id(&self.key.authenticator, batch_id);
                    let info =
                        self.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batch).await.map_err(SubmitError::Submit)?;
                    if !info.jobs.is_empty() {
                        return match self.reuse(info, batch)? {
                            BatchSlot::AlreadySubmitted => Ok(()),
                            BatchSlot::Empty(_) => unreachable!("a batch with jobs is not empty"),
                        };
                    }
                    self.pause(attempt, e, SubmitError::Submit).await?;
                }
                Err(e) => return Err(SubmitError::Submit(e)),
            }
        }
    }
}

/// The trailing job parameters as submit_batch takes them (0 = unspecified).
fn submit_params(p: &JobParams) -> Step<SubmitParams> {
    fn num<T: Copy + Default>(name: &'static str, v: &ParamValue<T>) -> Step<T> {
        match v {
            ParamValue::Unset => Ok(T::default()),
            ParamValue::Value(x) => Ok(*x),
            ParamValue::Invalid(raw) => Err(SubmitError::BadParam { name, value: raw.clone() }),
        }
    }
    Ok(SubmitParams {
        rsc_fpops_est: num("rsc_fpops_est", &p.rsc_fpops_est)?,
        rsc_fpops_bound: num("rsc_fpops_bound", &p.rsc_fpops_bound)?,
        rsc_memory_bound: num("rsc_memory_bound", &p.rsc_memory_bound)?,
        rsc_disk_bound: num("rsc_disk_bound", &p.rsc_disk_bound)?,
        delay_bound: num("delay_bound", &p.delay_bound)?,
        app_version_num: num("app_version_num", &p.app_version_num)?,
    })
}
