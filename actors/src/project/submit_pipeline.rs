//! SubmitPipeline: one actor per BOINC_SUBMIT.
//!
//! get_templates -> stage inputs (MD5 names) -> find or create the batch ->
//! query_files (ties present files to the batch) -> upload_files (absent
//! ones, in calls bounded by count and bytes: PHP's max_file_uploads and
//! post_max_size) -> submit_batch.
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use gahp_protocol::boinc::reply::UploadRefusal;
use gahp_protocol::boinc::{reply, request, BatchInfo, Script, SubmitJob, SubmitParams, Templates};
use gahp_protocol::gahp::{ParamValue, SubmitBatch};

use crate::clock::unix_now;
use crate::config::{DaemonConfig, UploadLimits};
use crate::file_stager::{FileStager, Stage, StagedFile};
use crate::project::rpc::{backoff, Attachment, Parse, Rpc, RpcClient, RpcError};
use crate::project::{submit_records, ProjectKey};
use crate::state_db::StateDb;

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
    batch: Option<SubmitBatch>,
    /// The app's templates when the caller has them (no get_templates).
    templates: Option<Templates>,
    deadline: Instant,
}

impl SubmitPipeline {
    pub fn new(
        key: ProjectKey,
        config: Arc<DaemonConfig>,
        rpc: Addr<RpcClient>,
        stager: Addr<FileStager>,
        db: StateDb,
        batch: SubmitBatch,
        deadline: Instant,
    ) -> Self {
        SubmitPipeline { key, config, rpc, stager, db, batch: Some(batch), templates: None, deadline }
    }

    /// Uses these templates of the batch's app instead of asking for them.
    pub fn with_templates(mut self, templates: Templates) -> Self {
        self.templates = Some(templates);
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
            deadline: self.deadline,
        };
        let (batch, templates) = (self.batch.take(), self.templates.take());
        Box::pin(
            async move {
                let batch = batch.ok_or(SubmitError::Internal("pipeline ran twice"))?;
                let name = batch.batch_name.clone();
                let r = run.submit(batch, templates).await;
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
    async fn submit(&self, batch: SubmitBatch, templates: Option<Templates>) -> Step<()> {
        if batch.jobs.is_empty() {
            return Err(SubmitError::NoJobs);
        }
        let params = submit_params(&batch)?;
        let mut seen = HashSet::new();
        if let Some(dup) = batch.jobs.iter().find(|j| !seen.insert(j.name.as_str())) {
            return Err(SubmitError::DuplicateJob(dup.name.clone()));
        }
        let auth = &self.key.authenticator;

        let templates = match templates {
            Some(t) => t,
            None => self
                .idempotent(Script::SubmitRpcHandler, request::get_templates_for_app(auth, &batch.app_name), reply::parse_templates)
                .await
                .map_err(SubmitError::Templates)?,
        };
        if let Some(job) = batch.jobs.iter().find(|j| j.inputs.len() != templates.inputs.len()) {
            return Err(SubmitError::InputCount {
                job: job.name.clone(),
                app: batch.app_name.clone(),
                need: templates.inputs.len(),
                got: job.inputs.len(),
            });
        }

        // Hash before touching the server: a missing file fails early and
        // leaves no empty batch behind.
        let staged = self.stage(&batch).await?;
        let mut names: Vec<&str> = Vec::new();
        let mut seen_names = HashSet::new();
        for f in staged.values() {
            if seen_names.insert(f.phys_name.as_str()) {
                names.push(&f.phys_name);
            }
        }
        names.sort_unstable();

        let batch_id = match self.find_or_create_batch(&batch).await? {
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

        let jobs: Vec<SubmitJob> = batch
            .jobs
            .iter()
            .map(|j| SubmitJob {
                name: &j.name,
                args: &j.args,
                files: j.inputs.iter().map(|i| staged[&i.src].phys_name.as_str()).collect(),
            })
            .collect();
        let xml = request::submit_batch(auth, batch_id, &batch.app_name, &params, &jobs);
        drop(jobs);
        self.submit_jobs(batch_id, xml, &batch).await
    }

    async fn idempotent<T: Send + 'static>(&self, script: Script, xml: String, parse: Parse<T>) -> Result<T, RpcError> {
        self.rpc.idempotent(script, xml, parse, self.deadline).await
    }

    async fn once<T: Send + 'static>(&self, script: Script, xml: String, parse: Parse<T>) -> Result<T, RpcError> {
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

    async fn stage(&self, batch: &SubmitBatch) -> Step<HashMap<PathBuf, StagedFile>> {
        let mut seen = HashSet::new();
        let paths: Vec<PathBuf> =
            batch.jobs.iter().flat_map(|j| j.inputs.iter()).filter(|i| seen.insert(&i.src)).map(|i| i.src.clone()).collect();
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
    async fn find_or_create_batch(&self, batch: &SubmitBatch) -> Step<BatchSlot> {
        let auth = &self.key.authenticator;
        let name = &batch.batch_name;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let found = self.idempotent(Script::SubmitRpcHandler, request::query_batch_by_name(auth, name), reply::parse_query_batch).await;
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

    fn reuse(&self, info: BatchInfo, batch: &SubmitBatch) -> Step<BatchSlot> {
        if info.state == 0 && info.jobs.is_empty() {
            tracing::info!(batch = %batch.batch_name, id = info.id, "reusing the empty batch of this name");
            return Ok(BatchSlot::Empty(info.id));
        }
        let there: HashSet<&str> = info.jobs.iter().map(String::as_str).collect();
        if batch.jobs.iter().all(|j| there.contains(j.name.as_str())) {
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

    /// Uploads the absent files in calls bounded by count and by bytes. A
    /// call PHP refused for its limits is split and sent again (a smaller
    /// byte budget learnt for the project); after a refusal, a lost reply or
    /// a duplicate, the server is asked what it has before anything is sent
    /// again, so nothing is stored or associated twice.
    async fn upload(&self, batch_id: i64, absent: Vec<String>, files: &HashMap<&str, &StagedFile>) -> Step<()> {
        if absent.is_empty() {
            return Ok(());
        }
        let auth = &self.key.authenticator;
        let mut limits = self.config.upload_limits(&self.key.url);
        let configured = limits.max_bytes;
        limits.max_bytes = limits.max_bytes.min(self.learnt_budget(configured).await.unwrap_or(u64::MAX));
        let mut parts: HashMap<String, Attachment> = HashMap::with_capacity(absent.len());
        for name in &absent {
            let f = files[name.as_str()];
            // Opened here so that an unreadable file fails now, as a local
            // error; its content is streamed when the call is sent.
            let cant_read = |e: std::io::Error| SubmitError::LocalFile(format!("can't read input file {}: {e}", f.path.display()));
            let size = tokio::fs::File::open(&f.path).await.map_err(cant_read)?.metadata().await.map_err(cant_read)?.len();
            let filename = f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            parts.insert(name.clone(), Attachment { filename, path: f.path.clone(), size });
        }
        let base = BODY_FRAMING + auth.expose().len() as u64;
        let cost = |name: &String| part_cost(name, &parts[name]);
        let mut calls: VecDeque<Vec<String>> = plan_calls(&absent, base, limits, cost).into();
        let mut lost = 0;
        while let Some(call) = calls.pop_front() {
            let attachments = call.iter().map(|n| parts[n].clone()).collect();
            let xml = request::upload_files(auth, batch_id, &call);
            let e = match self.rpc.once(Script::JobFile, xml, attachments, reply::parse_upload_files, self.deadline).await {
                Ok(()) => {
                    lost = 0;
                    continue;
                }
                Err(e) => e,
            };
            let too_big = |name: &String, limit: PhpLimit| {
                let p = &parts[name];
                SubmitError::TooBig { path: p.path.display().to_string(), size: p.size, limit }
            };
            // Files that go back in calls of their own.
            let mut isolate = Vec::new();
            let refusal = match &e {
                RpcError::Boinc { num, msg } => reply::upload_refusal(*num, msg),
                _ => None,
            };
            match refusal {
                Some(UploadRefusal::BodyDropped) if call.len() > 1 => {
                    let body = base + call.iter().map(cost).sum::<u64>();
                    limits.max_bytes = limits.max_bytes.min(body / 2);
                    tracing::info!(project = %self.key.url, body, budget = limits.max_bytes, "the server dropped an upload over its post_max_size; splitting");
                    self.learn_budget(configured, limits.max_bytes).await;
                }
                Some(UploadRefusal::BodyDropped) => return Err(too_big(&call[0], PhpLimit::PostMaxSize)),
                Some(UploadRefusal::FileTooBig { filename }) => {
                    let named: Vec<String> = call.iter().filter(|n| parts[*n].filename == filename).cloned().collect();
                    if named.len() == 1 || call.len() == 1 {
                        return Err(too_big(named.first().unwrap_or(&call[0]), PhpLimit::UploadMaxFilesize));
                    }
                    // Several files of that name: each alone says which.
                    isolate = if named.is_empty() { call.clone() } else { named };
                }
                Some(UploadRefusal::TooManyFiles { kept, .. }) if kept > 0 => {
                    tracing::info!(project = %self.key.url, kept, "the server takes fewer files per call; splitting");
                    limits.max_files = limits.max_files.min(kept);
                }
                // Lost reply, or another submit uploaded the same file first.
                _ if e.outcome_unknown() || e.is_duplicate_entry() => {
                    if e.outcome_unknown() {
                        lost += 1;
                        self.pause(lost, e, SubmitError::Files).await?;
                    }
                }
                _ => return Err(SubmitError::Files(e)),
            }
            let missing = self.still_absent(batch_id, call).await?;
            let (alone, rest): (Vec<String>, Vec<String>) = missing.into_iter().partition(|n| isolate.contains(n));
            let again = plan_calls(&rest, base, limits, cost).into_iter().chain(alone.into_iter().map(|n| vec![n]));
            for c in again.rev() {
                calls.push_front(c);
            }
        }
        Ok(())
    }

    /// Which of `names` the server still lacks, after a call whose outcome
    /// is unknown or refused: asked without a batch (no side effect); those
    /// it has (stored by the lost call, or by someone else) are tied to the
    /// batch one by one, and any that vanished meanwhile count as missing.
    async fn still_absent(&self, batch_id: i64, names: Vec<String>) -> Step<Vec<String>> {
        let xml = request::query_files(&self.key.authenticator, None, &names);
        let absent = self.idempotent(Script::JobFile, xml, reply::parse_query_files).await.map_err(SubmitError::Files)?;
        let absent: HashSet<usize> = absent.into_iter().collect();
        let (mut missing, mut present) = (Vec::new(), Vec::new());
        for (i, name) in names.into_iter().enumerate() {
            if absent.contains(&i) {
                missing.push(name)
            } else {
                present.push(name)
            }
        }
        missing.extend(self.associate_each(batch_id, &present).await?);
        Ok(missing)
    }

    /// The byte budget learnt for this project under `configured`, if any.
    async fn learnt_budget(&self, configured: u64) -> Option<u64> {
        let (db, project) = (self.db.clone(), self.key.url.clone());
        match tokio::task::spawn_blocking(move || submit_records::learnt_upload_budget(&db, &project, configured)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::warn!("can't read the learnt upload budget: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// Keeps a smaller byte budget for later uploads to this project.
    async fn learn_budget(&self, configured: u64, learnt: u64) {
        let (db, project) = (self.db.clone(), self.key.url.clone());
        match tokio::task::spawn_blocking(move || submit_records::note_upload_budget(&db, &project, configured, learnt)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("can't store the learnt upload budget: {e}"),
            Err(_) => tracing::warn!("can't store the learnt upload budget: task failed"),
        }
    }

    async fn submit_jobs(&self, batch_id: i64, xml: String, batch: &SubmitBatch) -> Step<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.once(Script::SubmitRpcHandler, xml.clone(), reply::parse_submit_batch).await {
                Ok(_) => return Ok(()),
                Err(RpcError::Boinc { num, ref msg }) if reply::body_dropped(num, msg) => {
                    return Err(SubmitError::SubmitTooBig { bytes: xml.len(), jobs: batch.jobs.len() });
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

/// Bytes of an upload_files body besides its files (the request part and
/// the closing boundary, the authenticator's length apart), and per file
/// (its part's head and its `<phys_name>`, the two names apart): upper
/// bounds of what `rpc::multipart` and `request::upload_files` write.
const BODY_FRAMING: u64 = 1024;
const PART_FRAMING: u64 = 256;

/// What a file adds to an upload_files body, at most.
fn part_cost(phys_name: &str, a: &Attachment) -> u64 {
    a.size + PART_FRAMING + (a.filename.len() + phys_name.len()) as u64
}

/// Groups `names` into upload calls, in order: at most `limits.max_files`
/// a call, and at most `limits.max_bytes` of body (`base` plus each file's
/// `cost`); a file over the budget goes alone (a server with larger limits
/// may still take it).
fn plan_calls(names: &[String], base: u64, limits: UploadLimits, cost: impl Fn(&String) -> u64) -> Vec<Vec<String>> {
    let mut calls: Vec<Vec<String>> = Vec::new();
    let mut body = base;
    for name in names {
        let c = cost(name);
        match calls.last_mut() {
            Some(call) if call.len() < limits.max_files.max(1) && body.saturating_add(c) <= limits.max_bytes => {
                call.push(name.clone());
                body += c;
            }
            _ => {
                calls.push(vec![name.clone()]);
                body = base.saturating_add(c);
            }
        }
    }
    calls
}

/// The trailing job parameters as submit_batch takes them (0 = unspecified).
fn submit_params(batch: &SubmitBatch) -> Step<SubmitParams> {
    fn num<T: Copy + Default>(name: &'static str, v: &ParamValue<T>) -> Step<T> {
        match v {
            ParamValue::Unset => Ok(T::default()),
            ParamValue::Value(x) => Ok(*x),
            ParamValue::Invalid(raw) => Err(SubmitError::BadParam { name, value: raw.clone() }),
        }
    }
    let p = &batch.params;
    Ok(SubmitParams {
        rsc_fpops_est: num("rsc_fpops_est", &p.rsc_fpops_est)?,
        rsc_fpops_bound: num("rsc_fpops_bound", &p.rsc_fpops_bound)?,
        rsc_memory_bound: num("rsc_memory_bound", &p.rsc_memory_bound)?,
        rsc_disk_bound: num("rsc_disk_bound", &p.rsc_disk_bound)?,
        delay_bound: num("delay_bound", &p.delay_bound)?,
        app_version_num: num("app_version_num", &p.app_version_num)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(sizes: &[u64], max_files: usize, max_bytes: u64) -> Vec<Vec<u64>> {
        let names: Vec<String> = (0..sizes.len()).map(|i| i.to_string()).collect();
        let calls = plan_calls(&names, 100, UploadLimits { max_files, max_bytes }, |n| sizes[n.parse::<usize>().unwrap()]);
        calls.iter().map(|c| c.iter().map(|n| sizes[n.parse::<usize>().unwrap()]).collect()).collect()
    }

    #[test]
    fn calls_are_bounded_by_count_and_bytes_and_a_big_file_goes_alone() {
        assert_eq!(plan(&[1; 5], 2, 1000), [vec![1, 1], vec![1, 1], vec![1]]);
        assert_eq!(plan(&[400, 400, 400, 200], 20, 1000), [vec![400, 400], vec![400, 200]]);
        assert_eq!(plan(&[400, 5000, 400], 20, 1000), [vec![400], vec![5000], vec![400]]);
        assert_eq!(plan(&[900], 20, 1000), [vec![900]]);
        assert!(plan(&[], 20, 1000).is_empty());
    }

    #[test]
    fn the_too_big_error_names_file_size_and_setting() {
        let e = SubmitError::TooBig { path: "/data/big.in".into(), size: 3145728, limit: PhpLimit::UploadMaxFilesize };
        assert_eq!(
            e.to_string(),
            "error processing input files: -1 input file /data/big.in (3145728 bytes) is over the project's PHP upload_max_filesize, the largest file it accepts"
        );
    }
}
