//! BlahProject: the BLAH jobs of one BOINC project. Jobs submitted close
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
mod delivery;
mod job_store;
mod messages;
mod sequences;
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

use crate::blah::map::{self, JobId, MapError};
use crate::blah::outputs::held_ad;
use crate::blah::sequence;
use crate::blah::store::{self, BlahStore, JobRecord, Phase};
use crate::config::DaemonConfig;
use crate::file_stager::FileStager;
use crate::project::rpc::{RpcClient, RpcError};
use crate::project::submit_pipeline::{SubmitError, PROJECT_DOWN};
use crate::project::templates::TemplatesCall;
use crate::project::tree::{ClientOf, SequencesOf};
use crate::project::ProjectKey;
use crate::projects::{Projects, TreeOf};
use crate::sequences::relocator::SequenceRelocator;

use job_store::JobStore;
pub use messages::*;

/// Why a job could not be submitted; its text becomes the hold reason.
#[derive(Debug, thiserror::Error)]
enum SubmitFailure {
    #[error("{}", .0.hold_reason())]
    Map(MapError),
    #[error("{0}")]
    Templates(String, RpcError),
    #[error("the BOINC submission failed: {0}; condor_release the job to try again")]
    Pipeline(SubmitError),
    #[error("{0}")]
    Lost(&'static str),
    /// A work sequence job that can't become a sequence: the hold reason.
    #[error("{0}")]
    Sequence(String),
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

pub struct BlahProject {
    /// The project key of this project's job ids.
    pkey: String,
    key: ProjectKey,
    authenticator_file: PathBuf,
    config: Arc<DaemonConfig>,
    /// The config for SubmitPipeline: batches are created with the lease.
    pipeline_config: Arc<DaemonConfig>,
    projects: Addr<Projects>,
    stager: Addr<FileStager>,
    store: BlahStore,
    /// Set before any message is handled (see `started`).
    rpc: Option<Addr<RpcClient>>,
    /// The project's work sequences (sequence jobs run there); as `rpc`.
    sequences: Option<Addr<SequenceRelocator>>,
    /// By BOINC job name.
    jobs: JobStore<Job>,
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
    upkeep_running: bool,
    /// Cancelled jobs whose abort has not reached the server yet.
    aborts: HashSet<String>,
}

struct Job {
    /// Its BOINC batch (shared by the jobs of the batch).
    batch: Rc<str>,
    /// Its submit ad is recorded (and readable). The ad stays in the state
    /// database, read where it is used ([`BlahProject::read_ads`]: the
    /// submission, the delivery, a failure's lookup): a job in flight keeps
    /// only what its status needs. `false` for a job known only by its id.
    recorded: bool,
    /// Its ad is a work sequence's: the sequence's name.
    /// Boxed twice (a thin pointer): most jobs are not sequences.
    sequence: Option<Box<Box<str>>>,
    /// The HTCondor job (`<cluster>.<proc>`), for the log line of a hold.
    condor_job: Option<(u32, u32)>,
    phase: Phase,
    /// Its last status in query_batch2.
    boinc: Option<BoincStatus>,
    /// Boxed: most jobs in memory are in flight and have none.
    final_status: Option<Box<(i32, ClassAd)>>,
    /// A submission, delivery or failure lookup is under way.
    busy: bool,
    /// When this daemon first tried to submit it.
    submitting_since: Option<Instant>,
    failures: u32,
    lease_until: f64,
    retired: bool,
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
    fn from_record(rec: JobRecord, batches: &mut BatchNames, prefix: &str) -> Job {
        Job::from_record_with_ad(rec, batches, prefix).0
    }

    /// [`Job::from_record`], and the submit ad it read (parsed).
    fn from_record_with_ad(rec: JobRecord, batches: &mut BatchNames, prefix: &str) -> (Job, Option<ClassAd>) {
        // A retired job's record keeps no submit ad (see store::set_retired).
        let parsed = Some(rec.ad.as_str()).filter(|t| !t.is_empty()).and_then(|t| {
            ClassAd::parse(t).map_err(|e| tracing::warn!(batch = %rec.batch, "its recorded submit ad is unreadable: {e}")).ok()
        });
        let sequence = parsed.as_ref().filter(|ad| sequence::is_sequence(ad)).map(|ad| {
            // A sequence whose name can't be read is answered as a plain job.
            Box::new(sequence::sequence_name(ad, prefix).unwrap_or_default().into_boxed_str())
        });
        let condor_job = parsed.as_ref().and_then(map::condor_job_id).and_then(|id| condor_numbers(&id));
        let final_ad = rec.final_ad.as_deref().and_then(|t| ClassAd::parse(t).ok());
        let final_status = match (rec.phase, rec.status, final_ad) {
            // A cancelled job keeps its final status: a held job's reason
            // must outlive the gridmanager's cancel and its restart.
            (Phase::Final | Phase::Cancelled, Some(s), Some(ad)) => Some(Box::new((s, ad))),
            (Phase::Final, ..) => Some(Box::new((job_status::HELD, held_ad(&rec.batch, "the final status of this job was lost")))),
            _ => None,
        };
        let lease_until = rec.lease_until;
        let job = Job {
            batch: batches.share(&rec.boinc_batch),
            recorded: parsed.is_some(),
            sequence,
            condor_job,
            phase: rec.phase,
            boinc: rec.boinc_status.as_deref().map(BoincStatus::of),
            final_status,
            busy: false,
            submitting_since: None,
            failures: 0,
            lease_until,
            retired: rec.retired,
        };
        (job, parsed)
    }

    /// A job the state database does not know (it was lost): watched by id.
    fn unknown(batch: &str, batches: &mut BatchNames) -> Job {
        Job {
            batch: batches.share(batch),
            recorded: false,
            sequence: None,
            condor_job: None,
            phase: Phase::Active,
            boinc: None,
            final_status: None,
            busy: false,
            submitting_since: None,
            failures: 0,
            lease_until: 0.0,
            retired: false,
        }
    }

    fn watched(&self) -> bool {
        self.phase == Phase::Active && self.final_status.is_none()
    }

    /// A work sequence: its SequenceRelocator watches its BOINC jobs.
    fn is_sequence(&self) -> bool {
        self.sequence.is_some()
    }

    /// Its sequence's name, if it is a sequence job.
    fn sequence_name(&self) -> Option<String> {
        self.sequence.as_deref().filter(|n| !n.is_empty()).map(|n| n.to_string())
    }

    /// `<cluster>.<proc>` of its HTCondor job, or `unknown`.
    fn condor_job(&self) -> String {
        self.condor_job.map_or_else(|| "unknown".into(), |(c, p)| format!("{c}.{p}"))
    }
}

/// `<cluster>.<proc>` as two numbers.
fn condor_numbers(id: &str) -> Option<(u32, u32)> {
    let (c, p) = id.split_once('.')?;
    Some((c.parse().ok()?, p.parse().ok()?))
}

/// One copy of each BOINC batch name, shared by the jobs in memory (a
/// batch has up to `max_batch_jobs` of them).
#[derive(Default)]
struct BatchNames(HashSet<Rc<str>>);

impl BatchNames {
    fn share(&mut self, name: &str) -> Rc<str> {
        if let Some(n) = self.0.get(name) {
            return n.clone();
        }
        let n: Rc<str> = name.into();
        self.0.insert(n.clone());
        n
    }

    /// Forgets the names no job holds any more.
    fn prune(&mut self) {
        self.0.retain(|n| Rc::strong_count(n) > 1);
    }
}

impl BlahProject {
    pub fn new(
        pkey: String,
        key: ProjectKey,
        authenticator_file: PathBuf,
        config: Arc<DaemonConfig>,
        projects: Addr<Projects>,
        stager: Addr<FileStager>,
        store: BlahStore,
    ) -> Self {
        let mut pipeline_config = (*config).clone();
        pipeline_config.initial_expire = config.blah.lease;
        BlahProject {
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
            jobs: JobStore::default(),
            batch_names: BatchNames::default(),
            submitting: HashSet::new(),
            retired_batches: HashSet::new(),
            batch_ids: HashMap::new(),
            completed: CompletedCache::default(),
            refreshing: false,
            refresh_again: false,
            upkeep_running: false,
            aborts: HashSet::new(),
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
        Box::pin(async move { store.read(move |c| store::load(c, &j)).await }.into_actor(self).map(move |rec, act, ctx| {
            let JobId { batch, job: name, .. } = id;
            if act.jobs.contains_key(name.as_str()) {
                return;
            }
            let job = match rec {
                Ok(Some(rec)) => {
                    if rec.abort_pending {
                        act.aborts.insert(name.clone());
                    }
                    Job::from_record(rec, &mut act.batch_names, &act.config.blah.name_prefix)
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

    /// Reads the submit ads of `jobs` from the state database (a job in
    /// memory keeps none), then runs `then` with each job and its ad (None:
    /// not recorded, unreadable, or the database failed).
    pub(super) fn read_ads(
        &self,
        ctx: &Context<Self>,
        jobs: Vec<String>,
        then: impl FnOnce(&mut Self, Vec<(String, Option<ClassAd>)>, &mut Context<Self>) + Send + 'static,
    ) {
        let store = self.store.clone();
        let work = async move {
            let names = jobs.clone();
            let texts = match store.read(move |c| store::load_ads(c, &names)).await {
                Ok(texts) => texts,
                Err(e) => {
                    tracing::warn!("can't read submit ads from the state database: {e}");
                    vec![None; jobs.len()]
                }
            };
            jobs.into_iter().zip(texts).map(|(job, text)| (job, text.and_then(|t| ClassAd::parse(&t).ok()))).collect::<Vec<_>>()
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

/// One DONE job to deliver: its ad and its app's templates.
struct Delivery {
    job: String,
    ad: ClassAd,
    templates: Option<TemplatesCall>,
    completed: CompletedCache,
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

impl Actor for BlahProject {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Nothing is handled before the project's HTTP client is known.
        let (projects, key) = (self.projects.clone(), self.key.clone());
        ctx.wait(
            async move {
                let tree = projects.send(TreeOf(key)).await.ok()?;
                Some((tree.send(ClientOf).await.ok()?, tree.send(SequencesOf).await.ok()?))
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
        ctx.spawn(async move { store.read(move |c| store::pending_aborts(c, &pkey)).await }.into_actor(self).map(|r, act, _| {
            act.aborts.extend(r.unwrap_or_default());
        }));
        ctx.run_interval(self.config.blah.status_refresh, |act, ctx| {
            act.refresh(ctx);
            act.upkeep(ctx);
        });
    }
}

/// What to do on the actor when a task's work is done.
type Then = Box<dyn FnOnce(&mut BlahProject, &mut Context<BlahProject>) + Send>;

/// The end of work run as a task (see `BlahProject::run`).
#[derive(Message)]
#[rtype(result = "()")]
struct Apply(Then);

impl Handler<Apply> for BlahProject {
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
        // What a job in flight costs besides its name (the map's key): no
        // submit ad, its batch name shared.
        assert!(std::mem::size_of::<Job>() <= 96, "{}", std::mem::size_of::<Job>());
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
        job.condor_job = Some((42, 3));
        assert_eq!(job.condor_job(), "42.3");
    }

    #[test]
    fn a_batch_name_is_held_once_and_forgotten_with_its_last_job() {
        let mut names = BatchNames::default();
        let a = Job::unknown("batch_a", &mut names);
        let b = Job::unknown("batch_a", &mut names);
        assert!(Rc::ptr_eq(&a.batch, &b.batch));
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
