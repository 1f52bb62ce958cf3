//! ProjectJobs: the BLAH jobs of one BOINC project. Jobs submitted close
//! together (same app) share a BOINC batch: the batch gathers jobs for
//! `batch_window`, then goes through the project's SubmitPipeline in the
//! background, whole. It answers BLAH_JOB_STATUS from a cache that one
//! query_batch2 over all watched batches refreshes per period (a storm of
//! status queries costs nothing more; an outage leaves the last known
//! states in place), places a finished job's files before its status turns
//! final, aborts the one job the gridmanager cancels, renews batch leases,
//! and retires a batch once every job in it has been delivered or removed.
//! An app's templates are fetched once per cache period, however many
//! submissions and deliveries want them at once.
//!
//! Memory is a cache of the state database: a job it does not hold is
//! loaded from there (a restarted daemon picks its jobs up by id), and a
//! job it never recorded is still watched by its id alone.
//!
//! The actor's work, a file each: `submit` (gathering jobs into batches,
//! templates, the pipeline), `sequences` (a sequence job on the project's
//! relocator), `status` (the cached states and their refresh), `delivery`
//! (a finished job's files before its final status), `abort`, `upkeep`
//! (leases, retiring, the periodic tasks), and `messages` (its API).

mod abort;
mod counts;
mod delivery;
mod job_map;
mod messages;
mod sequence_jobs;
mod status;
mod submit;
mod upkeep;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use futures_util::StreamExt;
use gahp_protocol::boinc::CompletedJob;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::Authenticator;

use crate::job::BlahJob;
use crate::job_records::{self, JobRecord, JobRecords, Phase};
use crate::map::{JobId, MapError};
use crate::outputs::held_ad;
use crate::sequence_ad;
use gahp_broker::registry::{Registry, SequencesOf, TreeOf};
use gahp_project::rpc::{RpcClient, RpcError};
use gahp_project::submit_pipeline::{SubmitError, PROJECT_DOWN};
use gahp_project::templates::TemplatesCall;
use gahp_project::tree::ClientOf;
use gahp_project::ProjectKey;
use gahp_sequences::relocator::SequenceRelocator;
use gahp_services::config::{BlahConfig, DaemonConfig, UnpackLimits};
use gahp_services::file_stager::FileStager;

use job_map::JobMap;
pub use messages::*;

/// Why a job could not be submitted; its text becomes the hold reason.
#[derive(Debug, thiserror::Error)]
enum SubmitFailure {
    #[error("{}", .0.hold_reason())]
    Map(MapError),
    #[error("{0}")]
    Templates(String, RpcError),
    /// Shared by the participants of a batch (`blah::shared_batch`).
    #[error("the BOINC submission failed: {0}; condor_release the job to try again")]
    Pipeline(Arc<SubmitError>),
    #[error("{0}")]
    Lost(&'static str),
    /// A work sequence job that can't become a sequence: the hold reason.
    #[error("{0}")]
    Sequence(String),
    #[error("internal error: {0}; condor_release the job to try again")]
    Internal(String),
}

impl SubmitFailure {
    /// The project was down for maintenance: the submission waits.
    fn project_down(&self) -> bool {
        match self {
            SubmitFailure::Templates(_, e) => matches!(e, RpcError::Boinc { num: PROJECT_DOWN, .. }),
            SubmitFailure::Pipeline(e) => e.project_down(),
            _ => false,
        }
    }
}

/// How the submission of one shared batch ended.
struct BatchOutcome {
    /// Members that could not join (their own fault).
    refused: Vec<(String, SubmitFailure)>,
    /// The members submitted, or why none were.
    result: Result<Vec<String>, (Vec<String>, SubmitFailure)>,
}

pub struct ProjectJobs {
    /// The project key of this project's job ids.
    pkey: String,
    key: ProjectKey,
    authenticator_file: PathBuf,
    config: Arc<DaemonConfig>,
    /// The config for SubmitPipeline: batches are created with the lease.
    pipeline_config: Arc<DaemonConfig>,
    projects: Addr<Registry>,
    stager: Addr<FileStager>,
    store: JobRecords,
    /// Set before any message is handled (see `started`).
    rpc: Option<Addr<RpcClient>>,
    /// The project's work sequences (sequence jobs run there); as `rpc`.
    sequences: Option<Addr<SequenceRelocator>>,
    /// By BOINC job name.
    jobs: JobMap<Job>,
    /// The BOINC batch names of `jobs`, one copy each.
    batch_names: BatchNames,
    /// Batches gathering jobs or being submitted.
    submitting: HashSet<String>,
    /// Batches being retired by this daemon.
    retired_batches: HashSet<String>,
    /// BOINC batch ids by name, learnt for their zips of outputs.
    batch_ids: HashMap<String, i64>,
    /// What query_completed_job said of a DONE job whose delivery has not
    /// ended yet: a delivery tried again (a download failed) does not ask
    /// twice.
    completed: CompletedCache,
    refreshing: bool,
    refresh_again: bool,
    /// A piece of changed BOINC statuses is being written.
    saving_statuses: bool,
    upkeep_running: bool,
    /// Cancelled jobs whose abort has not reached the server yet.
    aborts: HashSet<String>,
    /// Its share of the jobs-by-state gauge (`counts`).
    job_counts: gahp_services::metrics::GaugeShare,
}

/// A job in memory: 40 bytes (see `a_job_in_memory_is_small`); what few
/// jobs have is in `rare`.
struct Job {
    /// Its BOINC batch (shared by the jobs of the batch).
    batch: BatchName,
    lease_until: f64,
    /// What most jobs in flight have none of.
    rare: Option<Box<Rare>>,
    /// The HTCondor job (`<cluster>.<proc>`), for the log line of a hold
    /// ([`CondorJob`]).
    condor: CondorJob,
    phase: Phase,
    /// Its last status in query_batch2 ([`Job::boinc`]).
    boinc: u8,
    /// Its submit ad is recorded (and readable). The ad stays in the state
    /// database, read where it is used ([`ProjectJobs::read_ads`]: the
    /// submission, the delivery, a failure's lookup): a job in flight keeps
    /// only what its status needs. `false` for a job known only by its id.
    recorded: bool,
    /// A submission, delivery or failure lookup is under way.
    busy: bool,
    retired: bool,
    /// Its BOINC status changed and is not yet in the state database
    /// ([`ProjectJobs::save_statuses`]).
    boinc_unsaved: bool,
}

/// The parts of a job that most jobs in flight don't have.
#[derive(Default)]
struct Rare {
    /// Its ad is a work sequence's: the sequence's name.
    sequence: Option<Box<str>>,
    final_status: Option<(i32, ClassAd)>,
    /// When this daemon first tried to submit it (until it is submitted).
    submitting_since: Option<Instant>,
    /// Failed deliveries or failure lookups.
    failures: u32,
    /// A query_batch2 status this daemon does not know, as it came.
    other_status: Option<Box<str>>,
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.sequence.is_none()
            && self.final_status.is_none()
            && self.submitting_since.is_none()
            && self.failures == 0
            && self.other_status.is_none()
    }
}

/// `<cluster>.<proc>` in 8 bytes (an `Option<(u32, u32)>` takes 12).
#[derive(Clone, Copy)]
struct CondorJob(u64);

impl CondorJob {
    const UNKNOWN: CondorJob = CondorJob(u64::MAX);

    fn new(id: Option<(u32, u32)>) -> CondorJob {
        id.map_or(CondorJob::UNKNOWN, |(c, p)| CondorJob(u64::from(c) << 32 | u64::from(p)))
    }
}

impl std::fmt::Display for CondorJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            u64::MAX => f.write_str("unknown"),
            id => write!(f, "{}.{}", id >> 32, id & u64::from(u32::MAX)),
        }
    }
}

/// A job's status in query_batch2, kept as one byte (the text of a status
/// this daemon does not know is kept as it came).
#[derive(Debug, Clone, PartialEq, Eq)]
enum BoincStatus {
    /// One of [`BoincStatus::KNOWN`], by its index.
    Known(u8),
    /// Boxed twice (a thin pointer), so that a job's status is 16 bytes.
    Other(Box<Box<str>>),
}

impl BoincStatus {
    const KNOWN: [&'static str; 5] = ["UNSENT", "IN_PROGRESS", "DONE", "ERROR", "ABORTED"];
    /// A job's `boinc` byte: no status yet, or one kept in its `rare`.
    const NONE: u8 = u8::MAX;
    const OTHER: u8 = u8::MAX - 1;

    fn of(text: &str) -> BoincStatus {
        match BoincStatus::KNOWN.iter().position(|k| *k == text) {
            Some(k) => BoincStatus::Known(k as u8),
            None => BoincStatus::Other(Box::new(text.into())),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            BoincStatus::Known(k) => BoincStatus::KNOWN.get(usize::from(*k)).copied().unwrap_or_default(),
            BoincStatus::Other(t) => t,
        }
    }
}

impl Job {
    /// `batches` shares one copy of each BOINC batch name among its jobs;
    /// `prefix` is the front end's `name_prefix` (its sequences' too).
    /// `cfg` reads the submit ad of a record an older daemon made.
    fn from_record(rec: JobRecord, batches: &mut BatchNames, cfg: &BlahConfig) -> Job {
        Job::from_record_with_job(rec, batches, cfg).0
    }

    /// [`Job::from_record`], and the typed job it read.
    fn from_record_with_job(rec: JobRecord, batches: &mut BatchNames, cfg: &BlahConfig) -> (Job, Option<BlahJob>) {
        // A retired job's record keeps no job (see job_records::set_retired).
        let parsed = BlahJob::from_record(rec.job.as_deref(), &rec.ad, cfg).unwrap_or_else(|e| {
            tracing::warn!(batch = %rec.batch, "{e}");
            None
        });
        let sequence =
            parsed.as_ref().filter(|job| job.is_sequence()).map(|job| sequence_ad::sequence_name(job, &cfg.name_prefix).into_boxed_str());
        let condor_job = parsed.as_ref().and_then(|job| job.condor_job.as_deref()).and_then(condor_numbers);
        let final_ad = rec.final_ad.as_deref().and_then(|t| ClassAd::parse(t).ok());
        let final_status = match (rec.phase, rec.status, final_ad) {
            // A cancelled job keeps its final status: a held job's reason
            // must outlive the gridmanager's cancel and its restart.
            (Phase::Final | Phase::Cancelled, Some(s), Some(ad)) => Some((s, ad)),
            (Phase::Final, ..) => Some((job_status::HELD, held_ad(&rec.batch, "the final status of this job was lost"))),
            _ => None,
        };
        let lease_until = rec.lease_until;
        let mut job = Job {
            batch: batches.share(&rec.boinc_batch),
            lease_until,
            rare: None,
            condor: CondorJob::new(condor_job),
            phase: rec.phase,
            boinc: BoincStatus::NONE,
            recorded: parsed.is_some(),
            busy: false,
            retired: rec.retired,
            boinc_unsaved: false,
        };
        if let Some(s) = rec.boinc_status.as_deref() {
            job.set_boinc(BoincStatus::of(s));
        }
        if sequence.is_some() || final_status.is_some() {
            job.rare = Some(Box::new(Rare { sequence, final_status, ..Rare::default() }));
        }
        (job, parsed)
    }

    /// A job the state database does not know (it was lost): watched by id.
    fn unknown(batch: &str, batches: &mut BatchNames) -> Job {
        Job {
            batch: batches.share(batch),
            lease_until: 0.0,
            rare: None,
            condor: CondorJob::UNKNOWN,
            phase: Phase::Active,
            boinc: BoincStatus::NONE,
            recorded: false,
            busy: false,
            retired: false,
            boinc_unsaved: false,
        }
    }

    fn watched(&self) -> bool {
        self.phase == Phase::Active && self.final_status().is_none()
    }

    /// Its `rare` part, made if it has none.
    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drops its `rare` part once there is nothing in it.
    fn tidy(&mut self) {
        if self.rare.as_deref().is_some_and(Rare::is_empty) {
            self.rare = None;
        }
    }

    fn sequence(&self) -> Option<&str> {
        self.rare.as_ref()?.sequence.as_deref()
    }

    /// A work sequence: its SequenceRelocator watches its BOINC jobs.
    fn is_sequence(&self) -> bool {
        self.sequence().is_some()
    }

    /// Its sequence's name, if it is a sequence job.
    fn sequence_name(&self) -> Option<String> {
        self.sequence().filter(|n| !n.is_empty()).map(|n| n.to_string())
    }

    /// `<cluster>.<proc>` of its HTCondor job, or `unknown`.
    fn condor_job(&self) -> String {
        self.condor.to_string()
    }

    fn final_status(&self) -> Option<&(i32, ClassAd)> {
        self.rare.as_ref()?.final_status.as_ref()
    }

    fn set_final_status(&mut self, status: i32, ad: ClassAd) {
        self.rare_mut().final_status = Some((status, ad));
    }

    /// Its last status in query_batch2, if any.
    fn boinc(&self) -> Option<&str> {
        match self.boinc {
            BoincStatus::NONE => None,
            BoincStatus::OTHER => self.rare.as_ref()?.other_status.as_deref(),
            known => BoincStatus::KNOWN.get(usize::from(known)).copied(),
        }
    }

    fn set_boinc(&mut self, status: BoincStatus) {
        match status {
            BoincStatus::Known(k) => {
                self.boinc = k;
                if self.rare.as_ref().is_some_and(|r| r.other_status.is_some()) {
                    self.rare_mut().other_status = None;
                    self.tidy();
                }
            }
            BoincStatus::Other(text) => {
                self.boinc = BoincStatus::OTHER;
                self.rare_mut().other_status = Some(*text);
            }
        }
    }

    fn submitting_since(&self) -> Option<Instant> {
        self.rare.as_ref()?.submitting_since
    }

    /// Its submission begins (the first time: when it began is kept).
    fn submitting(&mut self) {
        self.rare_mut().submitting_since.get_or_insert_with(Instant::now);
    }

    /// It is submitted: when its submission began no longer matters.
    fn submitted(&mut self) {
        if let Some(r) = self.rare.as_mut() {
            r.submitting_since = None;
        }
        self.tidy();
    }

    /// One more failed delivery or failure lookup: how many there were.
    fn failed(&mut self) -> u32 {
        let r = self.rare_mut();
        r.failures += 1;
        r.failures
    }
}

/// The BOINC batches of `jobs`, each once, in order. Gathered one by one:
/// collecting 100,000 jobs' names into a set first made a `String` of each
/// and a `Vec` of them all (5 MB at the peak of the memory bench).
fn batches_of<'a>(jobs: impl Iterator<Item = &'a Job>) -> Vec<String> {
    let mut batches = std::collections::BTreeSet::new();
    for j in jobs {
        batches.insert(&*j.batch);
    }
    batches.into_iter().map(str::to_string).collect()
}

/// `<cluster>.<proc>` as two numbers.
fn condor_numbers(id: &str) -> Option<(u32, u32)> {
    let (c, p) = id.split_once('.')?;
    Some((c.parse().ok()?, p.parse().ok()?))
}

/// A BOINC batch name shared by its jobs in memory: a thin pointer (8
/// bytes; an `Rc<str>` is 16).
#[derive(Clone, PartialEq, Eq, Hash)]
struct BatchName(Rc<Box<str>>);

impl std::ops::Deref for BatchName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for BatchName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BatchName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One copy of each BOINC batch name, shared by the jobs in memory (a
/// batch has up to `max_batch_jobs` of them).
#[derive(Default)]
struct BatchNames(HashSet<BatchName>);

impl BatchNames {
    fn share(&mut self, name: &str) -> BatchName {
        if let Some(n) = self.0.get(name) {
            return n.clone();
        }
        let n = BatchName(Rc::new(name.into()));
        self.0.insert(n.clone());
        n
    }

    /// Forgets the names no job holds any more.
    fn prune(&mut self) {
        self.0.retain(|n| Rc::strong_count(&n.0) > 1);
    }
}

impl ProjectJobs {
    pub fn new(
        pkey: String,
        key: ProjectKey,
        authenticator_file: PathBuf,
        config: Arc<DaemonConfig>,
        projects: Addr<Registry>,
        stager: Addr<FileStager>,
        store: JobRecords,
    ) -> Self {
        let mut pipeline_config = (*config).clone();
        pipeline_config.initial_expire = config.blah.lease;
        let job_counts = gahp_services::metrics::global().job_share(gahp_services::metrics::client_of(&config), &key.url);
        ProjectJobs {
            pkey,
            key,
            authenticator_file,
            config,
            pipeline_config: Arc::new(pipeline_config),
            projects,
            stager,
            store,
            rpc: None,
            sequences: None,
            jobs: JobMap::default(),
            batch_names: BatchNames::default(),
            submitting: HashSet::new(),
            retired_batches: HashSet::new(),
            batch_ids: HashMap::new(),
            completed: CompletedCache::default(),
            refreshing: false,
            refresh_again: false,
            saving_statuses: false,
            upkeep_running: false,
            aborts: HashSet::new(),
            job_counts,
        }
    }

    pub(super) fn auth(&self) -> &Authenticator {
        &self.key.authenticator
    }

    /// What a hold reason says of a job the state database does not know.
    pub(super) fn no_record(&self) -> String {
        format!(
            "the daemon has no record of this job (a job is forgotten forget_finished_jobs_after_secs = {} after it ended, \
             or the daemon's state database was lost)",
            self.config.blah.forget_finished_after.as_secs_f64()
        )
    }

    /// Runs `work` as a task of its own, then `then` on the actor. (A
    /// future in this actor's context would be polled whenever any of them
    /// wakes: O(work in flight) each time.) Nothing happens if the actor
    /// is gone by then.
    pub(super) fn run<T: Send + 'static>(
        &self,
        ctx: &Context<Self>,
        work: impl std::future::Future<Output = T> + 'static,
        then: impl FnOnce(&mut Self, T, &mut Context<Self>) + Send + 'static,
    ) {
        let me = ctx.address();
        actix_rt::spawn(async move {
            let out = work.await;
            me.do_send(Apply(Box::new(move |act, ctx| then(act, out, ctx))));
        });
    }

    /// Brings a job into memory from the state database if needed.
    pub(super) fn load(&mut self, id: JobId) -> ResponseActFuture<Self, ()> {
        if self.jobs.contains_key(id.job.as_str()) {
            return Box::pin(fut::ready(()));
        }
        let (store, j) = (self.store.clone(), id.job.clone());
        Box::pin(async move { store.read(move |c| job_records::load(c, &j)).await }.into_actor(self).map(move |rec, act, ctx| {
            let JobId { batch, job: name, .. } = id;
            if act.jobs.contains_key(name.as_str()) {
                return;
            }
            let job = match rec {
                Ok(Some(rec)) => {
                    if rec.abort_pending {
                        act.aborts.insert(name.clone());
                    }
                    Job::from_record(rec, &mut act.batch_names, &act.config.blah)
                }
                Ok(None) => Job::unknown(&batch, &mut act.batch_names),
                Err(e) => {
                    tracing::warn!(job = %name, "can't read the job's record ({e}); watching it by id");
                    Job::unknown(&batch, &mut act.batch_names)
                }
            };
            act.jobs.insert(&name, job);
            act.advance(&name, ctx);
        }))
    }

    /// Starts what a job waits for: its batch's submission (also after a
    /// restart).
    pub(super) fn advance(&mut self, job: &str, ctx: &mut Context<Self>) {
        if let Some(j) = self.jobs.get(job).filter(|j| j.phase == Phase::Submitting && !j.busy) {
            let batch = j.batch.to_string();
            self.gather(batch, ctx);
        }
    }

    /// Reads the typed jobs of `jobs` from the state database (a job in
    /// memory keeps none), then runs `then` with each job's name and typed
    /// job (None: not recorded, unreadable, or the database failed).
    pub(super) fn read_jobs(
        &self,
        ctx: &Context<Self>,
        jobs: Vec<String>,
        then: impl FnOnce(&mut Self, Vec<(String, Option<BlahJob>)>, &mut Context<Self>) + Send + 'static,
    ) {
        let store = self.store.clone();
        let cfg = self.config.blah.clone();
        let work = async move {
            let names = jobs.clone();
            let recorded = match store.read(move |c| job_records::load_jobs(c, &names)).await {
                Ok(recorded) => recorded,
                Err(e) => {
                    tracing::warn!("can't read submitted jobs from the state database: {e}");
                    vec![None; jobs.len()]
                }
            };
            let typed = |rec: job_records::RecordedJob| BlahJob::from_record(rec.json.as_deref(), &rec.ad, &cfg).ok().flatten();
            jobs.into_iter().zip(recorded).map(|(job, rec)| (job, rec.and_then(typed))).collect::<Vec<_>>()
        };
        self.run(ctx, work, then);
    }
}

/// Jobs delivered at once from one batch zip (their query_completed_job
/// calls and file writes).
const ZIP_DELIVERIES_AT_ONCE: usize = 16;

/// How a delivery ended: the job's final status and ad, or why not.
type DeliveryOutcome = Result<(i32, ClassAd), String>;

/// Shared by the project actor and its deliveries (all on its thread).
type CompletedCache = Rc<RefCell<HashMap<String, CompletedJob>>>;

/// One DONE job to deliver: its typed job and its app's templates.
struct Delivery {
    job: String,
    submitted: BlahJob,
    templates: Option<TemplatesCall>,
    completed: CompletedCache,
    /// The bounds of its output zips (the config's and its own).
    limits: UnpackLimits,
}

/// What one query_batch2 said.
struct BatchStates {
    /// Job -> its status, for every job of the batches answered.
    states: status::JobStates,
    answered: HashSet<String>,
    /// Batch -> how many of its jobs are DONE (delivered ones included).
    finished: HashMap<String, usize>,
    /// Batches the server does not know (or another user owns), and why.
    gone: Vec<(String, String)>,
}

impl Actor for ProjectJobs {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(counts::EVERY, |act, _| act.publish_job_counts());
        // Nothing is handled before the project's HTTP client is known.
        let (projects, key) = (self.projects.clone(), self.key.clone());
        ctx.wait(
            async move {
                let tree = projects.send(TreeOf(key.clone())).await.ok()?;
                Some((tree.send(ClientOf).await.ok()?, projects.send(SequencesOf(key)).await.ok()?))
            }
            .into_actor(self)
            .map(|clients, act, ctx| match clients {
                Some((rpc, sequences)) => {
                    act.rpc = Some(rpc);
                    act.sequences = Some(sequences);
                }
                None => {
                    tracing::error!(project = %act.key.url, "no HTTP client for the project; stopping its BLAH jobs actor");
                    ctx.stop();
                }
            }),
        );
        let (store, pkey) = (self.store.clone(), self.pkey.clone());
        ctx.spawn(async move { store.read(move |c| job_records::pending_aborts(c, &pkey)).await }.into_actor(self).map(|r, act, _| {
            act.aborts.extend(r.unwrap_or_default());
        }));
        ctx.run_interval(self.config.blah.status_refresh, |act, ctx| {
            act.refresh(ctx);
            act.upkeep(ctx);
        });
    }
}

/// What to do on the actor when a task's work is done.
type Then = Box<dyn FnOnce(&mut ProjectJobs, &mut Context<ProjectJobs>) + Send>;

/// The end of work run as a task (see `ProjectJobs::run`).
#[derive(Message)]
#[rtype(result = "()")]
struct Apply(Then);

impl Handler<Apply> for ProjectJobs {
    type Result = ();
    fn handle(&mut self, msg: Apply, ctx: &mut Context<Self>) {
        (msg.0)(self, ctx)
    }
}

/// A hold reason for a failed get_templates that says what to fix.
fn templates_error(e: &RpcError, url: &str, file: &str, app: &str, source: &str) -> String {
    match e {
        RpcError::Boinc { msg, .. } if msg.starts_with("app not found") => format!(
            "the BOINC project {url} has no app named {app} (from {source}): set +remote_BoincApp or batch_queue to one \
             of its apps, then condor_release the job"
        ),
        RpcError::Boinc { msg, .. } if msg.contains("authenticator") => format!(
            "the BOINC project {url} refused the account key in {file} ({msg}): put the account's authenticator there, \
             then condor_release the job"
        ),
        RpcError::Boinc { msg, .. } if msg.contains("submit access") => format!(
            "the account in {file} may not submit jobs of app {app} to {url} ({msg}): ask the project for submit access, \
             then condor_release the job"
        ),
        RpcError::HttpStatus { .. } => {
            format!("{url} does not answer as a BOINC project does ({e}): check the project URL, then condor_release the job")
        }
        _ => format!("can't get the templates of app {app} from {url}: {e}; condor_release the job to try again"),
    }
}

#[cfg(test)]
mod job_tests {
    use super::*;

    #[test]
    fn a_job_in_memory_is_small() {
        // What a job in flight costs besides its name (in the JobMap): no
        // submit ad, its batch name shared, what few jobs have apart.
        assert!(std::mem::size_of::<Job>() <= 40, "{}", std::mem::size_of::<Job>());
    }

    #[test]
    fn statuses_come_back_as_they_went_in() {
        for s in ["UNSENT", "IN_PROGRESS", "DONE", "ERROR", "ABORTED", "SOMETHING_NEW", ""] {
            assert_eq!(BoincStatus::of(s).as_str(), s);
        }
        assert!(matches!(BoincStatus::of("DONE"), BoincStatus::Known(_)));
    }

    #[test]
    fn condor_ids_are_two_numbers_or_unknown() {
        assert_eq!(condor_numbers("17.0"), Some((17, 0)));
        assert_eq!(condor_numbers("17"), None);
        assert_eq!(condor_numbers("99999999999.0"), None);
        let mut names = BatchNames::default();
        let mut job = Job::unknown("b", &mut names);
        assert_eq!(job.condor_job(), "unknown");
        job.condor = CondorJob::new(Some((42, 3)));
        assert_eq!(job.condor_job(), "42.3");
        job.condor = CondorJob::new(Some((u32::MAX - 1, u32::MAX)));
        assert_eq!(job.condor_job(), format!("{}.{}", u32::MAX - 1, u32::MAX));
    }

    #[test]
    fn a_record_an_older_daemon_made_loads_as_the_same_job_as_a_new_one() {
        let cfg = BlahConfig { default_app: Some("stepper".into()), ..BlahConfig::default() };
        let text = "[ JobDirectory = \"home_bl_x_7.2_1\"; Iwd = \"/w\"; TransferInput = \"state\"; \
                    BoincSequenceSteps = 3; BoincStateFiles = \"state\"; ClusterId = 7; ProcId = 2 ]";
        let typed = BlahJob::parse(&ClassAd::parse(text).unwrap(), &cfg).unwrap();
        let record = |job: Option<String>, ad: &str| JobRecord {
            batch: "blah#home_bl_x_7.2_1#1".into(),
            boinc_batch: "blah#home_bl_x_7.2_1#1".into(),
            project: "k".into(),
            job,
            ad: ad.into(),
            phase: Phase::Submitting,
            boinc_status: None,
            status: None,
            final_ad: None,
            abort_pending: false,
            retired: false,
            lease_until: 0.0,
        };
        let mut names = BatchNames::default();
        let (old, old_job) = Job::from_record_with_job(record(None, text), &mut names, &cfg);
        let (new, new_job) = Job::from_record_with_job(record(Some(typed.to_json()), ""), &mut names, &cfg);
        assert_eq!((old_job.as_ref(), new_job.as_ref()), (Some(&typed), Some(&typed)));
        for job in [&old, &new] {
            assert!(job.recorded);
            assert_eq!(job.sequence_name().as_deref(), Some("blah-home_bl_x_7.2_1"));
            assert_eq!(job.condor_job(), "7.2");
        }
        // A retired record keeps neither: a job answered from its status.
        let (retired, none) = Job::from_record_with_job(record(None, ""), &mut names, &cfg);
        assert!(!retired.recorded && none.is_none());
    }

    #[test]
    fn batches_are_named_once_each_in_order() {
        let mut names = BatchNames::default();
        let jobs: Vec<Job> = ["b2", "b1", "b2", "b3", "b1"].iter().map(|b| Job::unknown(b, &mut names)).collect();
        assert_eq!(batches_of(jobs.iter()), ["b1", "b2", "b3"]);
        assert!(batches_of(jobs.iter().take(0)).is_empty());
    }

    #[test]
    fn a_batch_name_is_held_once_and_forgotten_with_its_last_job() {
        let mut names = BatchNames::default();
        let a = Job::unknown("batch_a", &mut names);
        let b = Job::unknown("batch_a", &mut names);
        assert!(Rc::ptr_eq(&a.batch.0, &b.batch.0));
        let c = Job::unknown("batch_c", &mut names);
        drop((a, b));
        names.prune();
        assert_eq!(names.0.len(), 1);
        assert!(names.0.contains("batch_c"));
        drop(c);
        names.prune();
        assert!(names.0.is_empty());
    }
}
