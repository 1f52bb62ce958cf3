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

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::future::{FutureExt, LocalBoxFuture, Shared};
use futures_util::StreamExt;
use gahp_protocol::boinc::{reply, request, CompletedJob, Script, Templates};
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::sequence::{SequenceState, SequenceStatus, StepSelector};
use gahp_protocol::gahp::{AsyncCommand, BlahResult, CommandResult, SubmitBatch};
use gahp_protocol::Authenticator;
use tokio::sync::oneshot;

use crate::blah::batch_zip::{self, SharedBatchZip};
use crate::blah::map::{self, JobId, MapError};
use crate::blah::outputs::{deliver_done, held_ad, place_sequence, resolve_error, sequence_ad, sequence_failed, status_ad};
use crate::blah::sequence;
use crate::blah::store::{self, BlahStore, JobRecord, Phase};
use crate::broker::pools::{pool_id, pool_placement};
use crate::clock::unix_now;
use crate::config::{BlahConfig, DaemonConfig};
use crate::file_stager::FileStager;
use crate::project::output_fetcher::completed_job;
use crate::project::rpc::{Rpc, RpcClient, RpcError};
use crate::project::submit_pipeline::{RunPipeline, SubmitError, SubmitPipeline, PROJECT_DOWN};
use crate::project::tree::{ClientOf, Run, SequencesOf};
use crate::project::ProjectKey;
use crate::projects::{Projects, TreeOf};
use crate::sequences::relocator::{FetchSequence, QueryStarted, SequenceError, SequenceRelocator, StopSequence};

/// How long an app's templates are reused.
const TEMPLATES_TTL: Duration = Duration::from_secs(60);

/// One get_templates of an app, shared by everyone who waits for it.
type TemplatesCall = Shared<LocalBoxFuture<'static, Result<Templates, RpcError>>>;

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
    jobs: HashMap<String, Job>,
    templates: HashMap<String, (Instant, TemplatesCall)>,
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
    /// Its BOINC batch.
    batch: String,
    /// The submit ad; `None` for a job known only by its id.
    ad: Option<ClassAd>,
    phase: Phase,
    /// Its last status in query_batch2.
    boinc: Option<String>,
    final_status: Option<(i32, ClassAd)>,
    /// A submission, delivery or failure lookup is under way.
    busy: bool,
    /// When this daemon first tried to submit it.
    submitting_since: Option<Instant>,
    failures: u32,
    lease_until: f64,
    retired: bool,
}

impl Job {
    fn from_record(rec: JobRecord) -> Job {
        let ad = ClassAd::parse(&rec.ad).map_err(|e| tracing::warn!(batch = %rec.batch, "its recorded submit ad is unreadable: {e}")).ok();
        let final_ad = rec.final_ad.as_deref().and_then(|t| ClassAd::parse(t).ok());
        let final_status = match (rec.phase, rec.status, final_ad) {
            // A cancelled job keeps its final status: a held job's reason
            // must outlive the gridmanager's cancel and its restart.
            (Phase::Final | Phase::Cancelled, Some(s), Some(ad)) => Some((s, ad)),
            (Phase::Final, ..) => Some((job_status::HELD, held_ad(&rec.batch, "the final status of this job was lost"))),
            _ => None,
        };
        let lease_until = rec.lease_until;
        Job {
            batch: rec.boinc_batch,
            ad,
            phase: rec.phase,
            boinc: rec.boinc_status,
            final_status,
            busy: false,
            submitting_since: None,
            failures: 0,
            lease_until,
            retired: rec.retired,
        }
    }

    /// A job the state database does not know (it was lost): watched by id.
    fn unknown(batch: String) -> Job {
        Job {
            batch,
            ad: None,
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
        self.ad.as_ref().is_some_and(sequence::is_sequence)
    }

    /// Its sequence's name, if it is a sequence job.
    fn sequence_name(&self) -> Option<String> {
        self.ad.as_ref().filter(|ad| sequence::is_sequence(ad)).and_then(|ad| sequence::sequence_name(ad).ok())
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
            jobs: HashMap::new(),
            templates: HashMap::new(),
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

    fn auth(&self) -> &Authenticator {
        &self.key.authenticator
    }

    /// Runs `work` as a task of its own, then `then` on the actor. (A
    /// future in this actor's context would be polled whenever any of them
    /// wakes: O(work in flight) each time.) Nothing happens if the actor
    /// is gone by then.
    fn run<T: Send + 'static>(
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
    fn load(&mut self, id: JobId) -> ResponseActFuture<Self, ()> {
        if self.jobs.contains_key(&id.job) {
            return Box::pin(fut::ready(()));
        }
        let (store, j) = (self.store.clone(), id.job.clone());
        Box::pin(async move { store.read(move |c| store::load(c, &j)).await }.into_actor(self).map(move |rec, act, ctx| {
            let JobId { batch, job: name, .. } = id;
            if act.jobs.contains_key(&name) {
                return;
            }
            let job = match rec {
                Ok(Some(rec)) => {
                    if rec.abort_pending {
                        act.aborts.insert(name.clone());
                    }
                    Job::from_record(rec)
                }
                Ok(None) => Job::unknown(batch),
                Err(e) => {
                    tracing::warn!(job = %name, "can't read the job's record ({e}); watching it by id");
                    Job::unknown(batch)
                }
            };
            act.jobs.insert(name.clone(), job);
            act.advance(&name, ctx);
        }))
    }

    /// Starts what a job waits for: its batch's submission (also after a
    /// restart).
    fn advance(&mut self, job: &str, ctx: &mut Context<Self>) {
        if let Some(j) = self.jobs.get(job).filter(|j| j.phase == Phase::Submitting && !j.busy) {
            let batch = j.batch.clone();
            self.gather(batch, ctx);
        }
    }

    /// Lets a batch gather jobs for the window, then submits it.
    fn gather(&mut self, batch: String, ctx: &mut Context<Self>) {
        if self.submitting.insert(batch.clone()) {
            ctx.run_later(self.config.blah.batch_window, move |act, ctx| act.close(batch, ctx));
        }
    }

    fn status(&mut self, batch: &str, ctx: &mut Context<Self>) -> BlahResult {
        // `batch` is the job's name, which its status ad calls BatchjobId.
        let Some(job) = self.jobs.get(batch) else {
            return BlahResult::Status { code: 1, error: "internal error: job not loaded".into(), status: 0, ad: None };
        };
        let status = match (&job.final_status, job.phase, job.boinc.as_deref()) {
            (Some((status, ad)), ..) => {
                let r = BlahResult::status(*status, ad.clone());
                // A delivered job was loaded from the state database only
                // to answer this: nothing is left to watch, and kept in
                // memory it would stay there for the daemon's lifetime (a
                // job each, the gridmanager asks after every one).
                if job.retired {
                    self.jobs.remove(batch);
                }
                return r;
            }
            (None, Phase::Cancelled, _) => job_status::REMOVED,
            (None, Phase::Active, Some("IN_PROGRESS" | "DONE" | "ERROR")) => job_status::RUNNING,
            (None, Phase::Active, None) if job.ad.is_none() => {
                self.refresh(ctx);
                let error = format!("the state of BOINC job {batch} is not known yet; asked {}", self.key.url);
                return BlahResult::Status { code: 1, error, status: 0, ad: None };
            }
            _ => job_status::IDLE,
        };
        BlahResult::status(status, status_ad(batch, status))
    }

    /// A status: a running sequence job's from its sequence, else `status`.
    fn answer(&mut self, job: String, ctx: &mut Context<Self>) -> ResponseActFuture<Self, BlahResult> {
        let name = self.jobs.get(&job).filter(|j| j.watched()).and_then(Job::sequence_name);
        match (name, self.sequences.clone()) {
            (Some(name), Some(relocator)) => Box::pin(
                async move { relocator.send(QueryStarted { name }).await }
                    .into_actor(self)
                    .map(move |r, act, ctx| act.sequence_status(&job, r, ctx)),
            ),
            _ => Box::pin(fut::ready(self.status(&job, ctx))),
        }
    }

    /// One query_batch2 over every watched batch; coalesced.
    fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing {
            self.refresh_again = true;
            return;
        }
        let Some(rpc) = self.rpc.clone() else { return };
        let names: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.watched() && !j.is_sequence())
            .map(|j| j.batch.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if names.is_empty() {
            return;
        }
        self.refreshing = true;
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        self.run(ctx, async move { query_states(&rpc, &auth, names, deadline).await }, |act, r, ctx| {
            act.refreshing = false;
            match r {
                Ok(states) => act.refreshed(states, ctx),
                Err(e) => tracing::info!(project = %act.key.url, "status refresh failed, reporting the last known states: {}", act.auth().redact_in(&e.to_string())),
            }
            if std::mem::take(&mut act.refresh_again) {
                act.refresh(ctx);
            }
        });
    }

    fn refreshed(&mut self, states: BatchStates, ctx: &mut Context<Self>) {
        let BatchStates { states, answered, finished, gone } = states;
        let gone: HashMap<String, String> = gone.into_iter().collect();
        let mut lost = Vec::new();
        for (name, job) in self.jobs.iter_mut().filter(|(_, j)| j.watched() && !j.is_sequence()) {
            match states.get(name) {
                Some(status) if job.boinc.as_deref() != Some(status.as_str()) => {
                    let (j, s) = (name.clone(), status.clone());
                    self.store.write("store a BOINC status", move |c| store::set_boinc_status(c, &j, &s));
                    job.boinc = Some(status.clone());
                }
                Some(_) => {}
                None => match gone.get(&job.batch) {
                    Some(why) => lost.push((name.clone(), format!("its batch {} is not there: {why}", job.batch))),
                    None if answered.contains(&job.batch) => lost.push((name.clone(), format!("its batch {} has no such job", job.batch))),
                    // Not asked about (it was submitted while the query was out).
                    None => {}
                },
            }
        }
        for (name, why) in lost {
            let reason = format!(
                "BOINC job {name} is not on {} ({why}): it was never created (the daemon stopped while submitting it?) \
                 or was removed there; condor_release the job to submit it again",
                self.key.url
            );
            self.finish(&name, job_status::HELD, held_ad(&name, &reason));
        }
        let todo: Vec<(String, String)> =
            self.jobs.iter().filter(|(_, j)| j.watched() && !j.busy).filter_map(|(b, j)| j.boinc.clone().map(|s| (b.clone(), s))).collect();
        // DONE jobs by BOINC batch: several of one batch may share its zip.
        let mut done: HashMap<String, Vec<String>> = HashMap::new();
        for (job, status) in todo {
            match status.as_str() {
                "DONE" => match self.jobs.get(&job) {
                    Some(j) if j.ad.is_some() => done.entry(j.batch.clone()).or_default().push(job),
                    _ => self.deliver(job, ctx),
                },
                "ERROR" => self.resolve(job, ctx),
                _ => {}
            }
        }
        for (batch, jobs) in done {
            if batch_zip::worth_a_zip(jobs.len(), finished.get(&batch).copied().unwrap_or(0)) {
                self.deliver_from_zip(batch, jobs, ctx);
            } else {
                for job in jobs {
                    self.deliver(job, ctx);
                }
            }
        }
    }

    /// Records a job's final status (3, 4 or 5); it is answered from now on.
    fn finish(&mut self, batch: &str, status: i32, ad: ClassAd) {
        self.completed.borrow_mut().remove(batch);
        let Some(job) = self.jobs.get_mut(batch) else { return };
        if job.phase == Phase::Cancelled {
            return;
        }
        if status == job_status::HELD {
            // The one line an admin greps for: which HTCondor job, which
            // BOINC batch and job, and why.
            let condor_job = job.ad.as_ref().and_then(map::condor_job_id).unwrap_or_else(|| "unknown".into());
            tracing::warn!(
                condor_job = %condor_job,
                boinc_batch = %job.batch,
                boinc_job = %batch,
                "job held: {}",
                ad.get_str("HoldReason").unwrap_or("")
            );
        }
        let (b, text) = (batch.to_string(), ad.to_string());
        self.store.write("store a final status", move |c| store::set_phase(c, &b, Phase::Final, Some(status), Some(text)));
        job.phase = Phase::Final;
        job.final_status = Some((status, ad));
    }

    /// The app's templates: one get_templates per cache period, shared by
    /// every submission and delivery that wants them meanwhile.
    fn templates(&mut self, app: &str) -> Option<TemplatesCall> {
        let rpc = self.rpc.clone()?;
        if let Some((at, call)) = self.templates.get(app) {
            if at.elapsed() < TEMPLATES_TTL && !matches!(call.peek(), Some(Err(_))) {
                return Some(call.clone());
            }
        }
        let xml = request::get_templates_for_app(self.auth(), app);
        let deadline = Instant::now() + self.config.command_timeout;
        let templates =
            async move { rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_templates, deadline).await }.boxed_local().shared();
        self.templates.insert(app.to_string(), (Instant::now(), templates.clone()));
        Some(templates)
    }

    /// Closes a gathering batch and submits its members in the background:
    /// the mapping of each, then one SubmitPipeline (as BOINC_SUBMIT's, with
    /// a long deadline: it retries transient failures, and after a lost
    /// reply or a restart finds what it began by the batch's name).
    fn close(&mut self, batch: String, ctx: &mut Context<Self>) {
        let (store, gathering, b) = (self.store.clone(), self.store.gathering.clone(), batch.clone());
        let members = async move { store.read(move |c| store::close_batch(c, &gathering, &b)).await };
        self.run(ctx, members, move |act, members, ctx| match members {
            Ok(members) => act.submit(batch, members, ctx),
            Err(e) => {
                tracing::warn!(batch = %batch, "can't read the batch's jobs ({e}); trying again later");
                ctx.run_later(act.config.blah.status_refresh.max(Duration::from_secs(1)), move |act, ctx| act.close(batch, ctx));
            }
        });
    }

    fn submit(&mut self, batch: String, records: Vec<JobRecord>, ctx: &mut Context<Self>) {
        let mut members = Vec::new();
        for rec in records {
            let name = rec.batch.clone();
            let job = self.jobs.entry(name.clone()).or_insert_with(|| Job::from_record(rec));
            // Cancelled since the database said otherwise.
            if job.phase == Phase::Submitting {
                job.busy = true;
                job.submitting_since.get_or_insert_with(Instant::now);
                members.push((name, job.ad.clone()));
            }
        }
        // A sequence job is never gathered with others: it is alone.
        if let [(name, Some(ad))] = members.as_slice() {
            if sequence::is_sequence(ad) {
                let (name, ad) = (name.clone(), ad.clone());
                return self.submit_sequence(batch, name, ad, ctx);
            }
        }
        let Some(rpc) = self.rpc.clone().filter(|_| !members.is_empty()) else {
            self.submitting.remove(&batch);
            return;
        };
        let cfg = self.config.blah.clone();
        // Every member has the app of the batch's gathering key.
        let app = members.iter().find_map(|(_, ad)| map::choose_app(ad.as_ref()?, &cfg).ok());
        let templates = app.as_ref().and_then(|(app, _)| self.templates(app));
        let deadline = Instant::now() + cfg.submit_timeout;
        let (key, config, stager) = (self.key.clone(), self.pipeline_config.clone(), self.stager.clone());
        let db = self.store.db().clone();
        let file = self.authenticator_file.display().to_string();
        let b = batch.clone();
        let work = async move {
            let mut refused = Vec::new();
            let (Some((app, source)), Some(templates)) = (app, templates) else {
                // No member has a usable ad (the app is chosen from it).
                for (name, ad) in members {
                    let why = match ad.map(|ad| map::choose_app(&ad, &cfg)) {
                        Some(Err(e)) => SubmitFailure::Map(e),
                        _ => SubmitFailure::Lost("the submit ad of this job was lost; condor_release the job"),
                    };
                    refused.push((name, why));
                }
                return BatchOutcome { refused, result: Ok(vec![]) };
            };
            let all: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
            let templates = match templates.await {
                Ok(t) => t,
                Err(e) => {
                    let reason = templates_error(&e, &key.url, &file, &app, source);
                    return BatchOutcome { refused, result: Err((all, SubmitFailure::Templates(reason, e))) };
                }
            };
            let mut spec = SubmitBatch { batch_name: b.clone(), app_name: app.clone(), jobs: Vec::new(), params: Default::default() };
            let mut included = Vec::new();
            for (name, ad) in members {
                let Some(ad) = ad else {
                    refused.push((name, SubmitFailure::Lost("the submit ad of this job was lost; condor_release the job")));
                    continue;
                };
                let mapped = map::choose_app(&ad, &cfg).and_then(|(a, _)| {
                    let one = map::submit_batch(&ad, &name, &a, &templates)?;
                    map::output_plan(&ad, &a, &templates.outputs)?;
                    Ok((a, one))
                });
                match mapped {
                    Ok((a, _)) if a != app => {
                        refused.push((name, SubmitFailure::Lost("its app changed while it waited for its batch; condor_release the job")))
                    }
                    Ok((_, one)) => {
                        // The batch takes the first member's batch-wide parameters
                        // (its gathering key makes them the same for all).
                        if spec.jobs.is_empty() {
                            spec.params = one.params;
                        }
                        spec.jobs.extend(one.jobs);
                        included.push(name);
                    }
                    Err(e) => refused.push((name, SubmitFailure::Map(e))),
                }
            }
            if included.is_empty() {
                return BatchOutcome { refused, result: Ok(vec![]) };
            }
            let pipeline = SubmitPipeline::new(key, config, rpc, stager, db, spec, deadline).with_templates(templates).start();
            let result = match pipeline.send(RunPipeline).await {
                Ok(Ok(())) => Ok(included),
                Ok(Err(e)) => Err((included, SubmitFailure::Pipeline(e))),
                Err(_) => Err((included, SubmitFailure::Pipeline(SubmitError::Internal("the submit pipeline stopped")))),
            };
            BatchOutcome { refused, result }
        };
        self.run(ctx, work, move |act, outcome, ctx| act.submitted(batch, outcome, ctx));
    }

    /// A sequence job becomes one CreateSequence on the project's
    /// SequenceRelocator (which resumes the stopped sequence of a released
    /// job: same `JobDirectory`, same definition).
    fn submit_sequence(&mut self, batch: String, name: String, ad: ClassAd, ctx: &mut Context<Self>) {
        let app = map::choose_app(&ad, &self.config.blah);
        let templates = app.as_ref().ok().and_then(|(app, _)| self.templates(app));
        let relocator = self.sequences.clone();
        let (url, file) = (self.key.url.clone(), self.authenticator_file.display().to_string());
        let pool = pool_placement(&ad, &self.config.blah).map(|p| pool_id(&p.pool));
        let work = async move {
            let refuse = |why| BatchOutcome { refused: vec![(name.clone(), why)], result: Ok(vec![]) };
            let (app, source) = match app {
                Ok(a) => a,
                Err(e) => return refuse(SubmitFailure::Map(e)),
            };
            let (Some(relocator), Some(templates)) = (relocator, templates) else {
                return refuse(SubmitFailure::Lost(
                    "internal error: the project's work sequences are not available; condor_release the job",
                ));
            };
            let templates = match templates.await {
                Ok(t) => t,
                Err(e) => {
                    let reason = templates_error(&e, &url, &file, &app, source);
                    return BatchOutcome { refused: vec![], result: Err((vec![name.clone()], SubmitFailure::Templates(reason, e))) };
                }
            };
            let create = match sequence::settings(&ad) {
                Ok(Some(settings)) => sequence::create_sequence(&ad, &settings, &app, &templates),
                Ok(None) => return refuse(SubmitFailure::Lost("internal error: this job is no work sequence; condor_release the job")),
                Err(e) => Err(e),
            };
            let mut create = match create {
                Ok(c) => c,
                Err(e) => return refuse(SubmitFailure::Sequence(e.hold_reason())),
            };
            // Placed by the pool: relocated within it.
            create.def.pool = pool;
            match relocator.send(create).await {
                Ok(Ok(())) => BatchOutcome { refused: vec![], result: Ok(vec![name.clone()]) },
                Ok(Err(e @ SequenceError::Purged(_))) => refuse(SubmitFailure::Sequence(e.to_string())),
                Ok(Err(e)) => refuse(SubmitFailure::Sequence(format!(
                    "the work sequence could not be created: {e}; condor_release the job to try again"
                ))),
                Err(_) => refuse(SubmitFailure::Lost("internal error: the project's work sequences stopped; condor_release the job")),
            }
        };
        self.run(ctx, work, move |act, outcome, ctx| act.submitted(batch, outcome, ctx));
    }

    /// A sequence job's status from its sequence: idle until a step runs,
    /// then running for the whole chain; its files placed once complete.
    fn sequence_status(
        &mut self,
        job: &str,
        r: Result<Result<(SequenceState, bool), SequenceError>, MailboxError>,
        ctx: &mut Context<Self>,
    ) -> BlahResult {
        let error = |error: String| BlahResult::Status { code: 1, error, status: 0, ad: None };
        let Some(j) = self.jobs.get(job) else { return error("internal error: job not loaded".into()) };
        let busy = j.busy;
        let (state, started) = match r {
            Ok(Ok(s)) => s,
            Ok(Err(SequenceError::NoSuchSequence(name))) => {
                let reason = format!(
                    "the work sequence {name} of this job is not in the daemon's state database (was it lost?); \
                     condor_release the job to run it again from its initial state"
                );
                self.finish(job, job_status::HELD, held_ad(job, &reason));
                return self.final_status(job);
            }
            Ok(Err(e)) => return error(format!("can't query the work sequence of {job}: {e}")),
            Err(_) => return error("internal error: the project's work sequences stopped; try again".into()),
        };
        let status = match state.status {
            SequenceStatus::Running if started || busy => job_status::RUNNING,
            SequenceStatus::Running => job_status::IDLE,
            SequenceStatus::Completed | SequenceStatus::Failed => {
                if !busy {
                    self.finish_sequence(job, state.clone(), ctx);
                }
                job_status::RUNNING
            }
            SequenceStatus::Aborted => {
                let mut removed = sequence_ad(job, job_status::REMOVED, &state);
                let why = state.reason.as_deref().unwrap_or("aborted");
                removed.insert("RemoveReason", gahp_protocol::classad::Value::Str(format!("the work sequence was aborted: {why}")));
                self.finish(job, job_status::REMOVED, removed);
                return self.final_status(job);
            }
        };
        BlahResult::status(status, sequence_ad(job, status, &state))
    }

    fn final_status(&self, job: &str) -> BlahResult {
        match self.jobs.get(job).and_then(|j| j.final_status.clone()) {
            Some((status, ad)) => BlahResult::status(status, ad),
            None => BlahResult::Status { code: 1, error: "internal error: no final status".into(), status: 0, ad: None },
        }
    }

    /// A completed sequence's files placed in the job's directory (then
    /// status 4), or a failed one's reported as a failed BOINC job is.
    fn finish_sequence(&mut self, job: &str, state: SequenceState, ctx: &mut Context<Self>) {
        let Some(j) = self.jobs.get_mut(job) else { return };
        let Some(ad) = j.ad.clone() else { return };
        j.busy = true;
        let app = map::choose_app(&ad, &self.config.blah).map(|a| a.0);
        let templates = app.as_ref().ok().and_then(|a| self.templates(a));
        let relocator = self.sequences.clone();
        // Fetched here whole, then placed by the rules of any job's outputs.
        let staged = self.config.state_dir.join("blah-sequence-out").join(job);
        let b = job.to_string();
        let work = async move {
            if state.status == SequenceStatus::Failed {
                return tokio::task::spawn_blocking(move || sequence_failed(&b, &ad, &state))
                    .await
                    .map_err(|e| format!("internal error: {e}"))?;
            }
            let app = app.map_err(|e| e.to_string())?;
            let templates =
                templates.ok_or("the project has no HTTP client")?.await.map_err(|e| format!("error getting templates: {e}"))?;
            let relocator = relocator.ok_or("the project's work sequences are not available")?;
            let name = sequence::sequence_name(&ad).map_err(|e| e.to_string())?;
            let s = staged.clone();
            tokio::task::spawn_blocking(move || {
                let _ = std::fs::remove_dir_all(&s);
                std::fs::create_dir_all(&s)
            })
            .await
            .map_err(|e| format!("internal error: {e}"))?
            .map_err(|e| format!("can't make {}: {e}", staged.display()))?;
            relocator
                .send(FetchSequence { name, step: StepSelector::Latest, dir: staged.clone() })
                .await
                .map_err(|_| "the project's work sequences stopped".to_string())?
                .map_err(|e| e.to_string())?;
            tokio::task::spawn_blocking(move || {
                let placed = place_sequence(&b, &ad, &app, &templates.outputs, &staged, &state);
                let _ = std::fs::remove_dir_all(&staged);
                placed.map(|done| (job_status::COMPLETED, done))
            })
            .await
            .map_err(|e| format!("internal error: {e}"))?
        };
        let job = job.to_string();
        self.run(ctx, work, move |act, r, _| act.settled(&job, r));
    }

    fn submitted(&mut self, batch: String, outcome: BatchOutcome, ctx: &mut Context<Self>) {
        for (name, why) in outcome.refused {
            let reason = self.auth().redact_in(&why.to_string());
            self.member_failed(&name, &reason, ctx);
        }
        match outcome.result {
            Ok(members) => {
                self.submitting.remove(&batch);
                let until = unix_now() + self.config.blah.lease.as_secs_f64();
                for name in members {
                    let Some(job) = self.jobs.get_mut(&name) else { continue };
                    job.busy = false;
                    if job.phase == Phase::Cancelled {
                        // Cancelled while it was being submitted: abort it now.
                        self.abort(name, ctx, None);
                        continue;
                    }
                    job.phase = Phase::Active;
                    // Created with the lease as its expiry (see pipeline_config).
                    job.lease_until = until;
                    let j = name.clone();
                    self.store.write("store a submission", move |c| {
                        store::set_phase(c, &j, Phase::Active, None, None)?;
                        store::set_lease(c, &j, until)
                    });
                }
                tracing::info!(batch = %batch, project = %self.key.url, "submitted to BOINC");
            }
            Err((members, why)) => {
                let timeout = self.config.blah.submit_timeout;
                let waiting = members.iter().filter_map(|n| self.jobs.get(n)).filter_map(|j| j.submitting_since).min();
                if why.project_down() && waiting.is_some_and(|t| t.elapsed() < timeout) {
                    tracing::info!(batch = %batch, "the project is down for maintenance; submitting again later: {}", self.auth().redact_in(&why.to_string()));
                    for name in &members {
                        if let Some(job) = self.jobs.get_mut(name) {
                            job.busy = false;
                        }
                    }
                    ctx.run_later(self.config.blah.status_refresh.max(Duration::from_secs(1)), move |act, ctx| act.close(batch, ctx));
                    return;
                }
                self.submitting.remove(&batch);
                // The edge: the typed failure becomes the hold reason here.
                let reason = self.auth().redact_in(&why.to_string());
                for name in members {
                    self.member_failed(&name, &reason, ctx);
                }
            }
        }
    }

    /// A member that did not go in: held with `reason` (aborted if
    /// cancelled meanwhile: an earlier attempt may have made it).
    fn member_failed(&mut self, name: &str, reason: &str, ctx: &mut Context<Self>) {
        let Some(job) = self.jobs.get_mut(name) else { return };
        job.busy = false;
        if job.phase == Phase::Cancelled {
            return self.abort(name.to_string(), ctx, None);
        }
        self.finish(name, job_status::HELD, held_ad(name, reason));
    }

    /// Places a DONE job's files, then makes its status 4.
    fn deliver(&mut self, batch: String, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(delivery) = self.delivery(&batch) else { return };
        let (key, cfg) = (self.key.clone(), self.config.blah.clone());
        let deadline = Instant::now() + self.config.command_timeout;
        let work = async move { delivery.run(&rpc, &key, &cfg, None, deadline).await };
        self.run(ctx, work, move |act, r, _| act.settled(&batch, r));
    }

    /// Places the files of several DONE jobs of one BOINC batch from the
    /// batch's zip (one download), each job's status then 4; what the zip
    /// does not cover, or all of it if the zip can't be had, is downloaded
    /// job by job.
    fn deliver_from_zip(&mut self, boinc_batch: String, jobs: Vec<String>, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let deliveries: Vec<Delivery> = jobs.iter().filter_map(|j| self.delivery(j)).collect();
        if deliveries.is_empty() {
            return;
        }
        let (key, cfg) = (self.key.clone(), self.config.blah.clone());
        let known_id = self.batch_ids.get(&boinc_batch).copied();
        let state_dir = self.config.state_dir.clone();
        let now = Instant::now();
        let (zip_deadline, deadline) = (now + self.config.rpc_timeout, now + self.config.command_timeout);
        let b = boinc_batch.clone();
        let work = async move {
            let id = match known_id {
                Some(id) => Ok(id),
                None => batch_zip::batch_id(&rpc, &key.authenticator, &b, zip_deadline).await,
            };
            let wanted = deliveries.iter().map(|d| d.job.clone()).collect();
            let (id, zip) = match id {
                Ok(id) => (Some(id), batch_zip::fetch(&rpc, &key, id, &state_dir, wanted, zip_deadline).await),
                Err(e) => (None, Err(e)),
            };
            let zip = zip
                .map_err(|e| {
                    let e = key.authenticator.redact_in(&e.to_string());
                    tracing::info!(batch = %b, "fetching the outputs job by job: {e}");
                })
                .ok()
                .map(|z| SharedBatchZip::new(z.into()));
            let (rpc, key, cfg, zip) = (&rpc, &key, &cfg, zip.as_ref());
            let results: Vec<(String, DeliveryOutcome)> = futures_util::stream::iter(deliveries)
                .map(|d| async move {
                    let r = d.run(rpc, key, cfg, zip, deadline).await;
                    (d.job, r)
                })
                .buffer_unordered(ZIP_DELIVERIES_AT_ONCE)
                .collect()
                .await;
            (id, results)
        };
        self.run(ctx, work, move |act, (id, results), _| {
            if let Some(id) = id {
                act.batch_ids.insert(boinc_batch, id);
            }
            for (job, r) in results {
                act.settled(&job, r);
            }
        });
    }

    /// What delivering a DONE job needs; the job is then busy. A job
    /// without its ad is held here (nothing says where its files go).
    fn delivery(&mut self, batch: &str) -> Option<Delivery> {
        let job = self.jobs.get_mut(batch)?;
        let Some(ad) = job.ad.clone() else {
            let reason = "the daemon has no record of where this job's outputs go (its state database was lost); \
                          condor_release the job to run it again";
            self.finish(batch, job_status::HELD, held_ad(batch, reason));
            return None;
        };
        job.busy = true;
        let templates = map::choose_app(&ad, &self.config.blah).ok().and_then(|(app, _)| self.templates(&app));
        Some(Delivery { job: batch.to_string(), ad, templates, completed: self.completed.clone() })
    }

    /// Finds out why an ERROR job failed: status 4 with its exit code, or 3.
    fn resolve(&mut self, batch: String, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(job) = self.jobs.get_mut(&batch) else { return };
        job.busy = true;
        let (key, ad, boinc_batch) = (self.key.clone(), job.ad.clone(), job.batch.clone());
        let deadline = Instant::now() + self.config.command_timeout;
        let b = batch.clone();
        let work = async move { resolve_error(&rpc, &key, &boinc_batch, &b, ad.as_ref(), deadline).await };
        self.run(ctx, work, move |act, r, _| act.settled(&batch, r));
    }

    /// A delivery or failure lookup ended: final, or retried at the next
    /// refresh until `output_fetch_attempts` failures hold the job.
    fn settled(&mut self, batch: &str, r: Result<(i32, ClassAd), String>) {
        let attempts = self.config.blah.output_fetch_attempts.max(1);
        let Some(job) = self.jobs.get_mut(batch) else { return };
        job.busy = false;
        match r {
            Ok((status, ad)) => self.finish(batch, status, ad),
            Err(e) => {
                job.failures += 1;
                let e = self.key.authenticator.redact_in(&e);
                tracing::info!(batch, failures = job.failures, "finishing the job failed: {e}");
                if job.failures >= attempts {
                    let reason = format!("can't finish BOINC job {batch}: {e}; condor_release the job to run it again");
                    self.finish(batch, job_status::HELD, held_ad(batch, &reason));
                }
            }
        }
    }

    /// abort_jobs of this one job, then `reply` (code 0 either way: an
    /// abort that did not land is retried by `upkeep` until it does, and an
    /// error would replace the reason of a held job). A BOINC error (no
    /// such job, already over) counts as done: the job will not run. Its
    /// batch is retired once no job in it is needed.
    fn abort(&mut self, job: String, ctx: &mut Context<Self>, reply: Option<oneshot::Sender<BlahResult>>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        let j = job.clone();
        let stop = self.jobs.get(&job).and_then(Job::sequence_name);
        let is_sequence = stop.is_some();
        let work: LocalBoxFuture<'static, Result<(), String>> = match (stop, self.sequences.clone()) {
            // A sequence is stopped, not aborted: its live step is aborted,
            // its completed state kept for a release (the same job again).
            (Some(name), Some(relocator)) => Box::pin(async move {
                match relocator.send(StopSequence { name }).await {
                    Ok(Ok(())) | Ok(Err(SequenceError::NoSuchSequence(_) | SequenceError::Finished(_))) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("the project's work sequences stopped".into()),
                }
            }),
            _ => Box::pin(async move {
                let xml = request::abort_jobs(&auth, std::slice::from_ref(&j));
                match rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await {
                    Ok(()) => Ok(()),
                    Err(RpcError::Boinc { num, msg }) if num != PROJECT_DOWN => {
                        tracing::info!(job = %j, "nothing to abort: {msg}");
                        Ok(())
                    }
                    Err(e) => Err(auth.redact_in(&e.to_string())),
                }
            }),
        };
        self.run(ctx, work, move |act, r, ctx| {
            let pending = r.is_err();
            let batch = act.jobs.get(&job).map(|j| j.batch.clone());
            if let Err(e) = r {
                tracing::warn!(job = %job, "the abort did not reach the project yet, retrying later: {e}");
                act.aborts.insert(job.clone());
            } else {
                act.aborts.remove(&job);
                act.jobs.remove(&job);
            }
            let j = job.clone();
            act.store.write("store an abort", move |c| {
                store::set_abort_pending(c, &j, pending)?;
                if !pending {
                    store::set_retired(c, &j)?;
                }
                Ok(())
            });
            // A sequence's batches are its SequenceRelocator's.
            if let Some(batch) = batch.filter(|_| !pending && !is_sequence) {
                act.retire_if_done(batch, ctx);
            }
            if let Some(reply) = reply {
                let _ = reply.send(BlahResult::ok());
            }
        });
    }

    /// Retires a batch once no job in it is needed (the state database
    /// knows every member, also those no longer in memory).
    fn retire_if_done(&mut self, batch: String, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        if self.retired_batches.contains(&batch) || self.submitting.contains(&batch) {
            return;
        }
        let (store, b) = (self.store.clone(), batch.clone());
        let needed = async move { store.read(move |c| store::batch_needed(c, &b)).await };
        self.run(ctx, needed, move |act, needed, ctx| {
            if !matches!(needed, Ok(false)) || !act.retired_batches.insert(batch.clone()) {
                return;
            }
            let auth = act.auth().clone();
            let deadline = Instant::now() + act.config.rpc_timeout;
            let b = batch.clone();
            // Once it is done the batch is forgotten here: no job of it is
            // left to ask again (a second retire would be harmless), and a
            // daemon that runs for months must not keep a name per batch.
            act.run(ctx, async move { retire(&rpc, &auth, &b, deadline).await }, move |act, (), _| {
                act.retired_batches.remove(&batch);
                act.batch_ids.remove(&batch);
            });
        });
    }

    /// Retries owed aborts and renews due leases (one call at a time).
    fn upkeep(&mut self, ctx: &mut Context<Self>) {
        for batch in std::mem::take(&mut self.aborts) {
            // A failure puts it back for the next round.
            self.abort(batch, ctx, None);
        }
        let Some(rpc) = self.rpc.clone() else { return };
        if self.upkeep_running {
            return;
        }
        let lease = self.config.blah.lease.as_secs_f64();
        let now = unix_now();
        let renew: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.watched() && !j.is_sequence() && j.lease_until < now + lease / 2.0)
            .map(|j| j.batch.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if renew.is_empty() {
            return;
        }
        self.upkeep_running = true;
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        let leases = async move {
            let mut renewed = Vec::new();
            for b in renew {
                let xml = request::set_expire_time(&auth, &b, now + lease);
                match rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await {
                    Ok(()) => renewed.push(b),
                    Err(e) => tracing::info!(batch = %b, "can't renew the batch's lease: {}", auth.redact_in(&e.to_string())),
                }
            }
            renewed
        };
        self.run(ctx, leases, move |act, renewed, _| {
            act.upkeep_running = false;
            let renewed: HashSet<String> = renewed.into_iter().collect();
            for (name, j) in act.jobs.iter_mut().filter(|(_, j)| renewed.contains(&j.batch)) {
                j.lease_until = now + lease;
                let name = name.clone();
                act.store.write("store a lease", move |c| store::set_lease(c, &name, now + lease));
            }
        });
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

impl Delivery {
    async fn run(
        &self,
        rpc: &Addr<RpcClient>,
        key: &ProjectKey,
        cfg: &BlahConfig,
        zip: Option<&SharedBatchZip>,
        deadline: Instant,
    ) -> DeliveryOutcome {
        let templates = self.templates.clone().ok_or("the job's app is not known")?;
        let templates = templates.await.map_err(|e| format!("error getting templates: {e}"))?;
        let known = self.completed.borrow().get(&self.job).cloned();
        let completed = match known {
            Some(c) => c,
            None => {
                let c = completed_job(rpc, &key.authenticator, &self.job, deadline).await?;
                self.completed.borrow_mut().insert(self.job.clone(), c.clone());
                c
            }
        };
        let done = deliver_done(rpc, key, cfg, &self.job, &self.ad, &templates, &completed, zip, deadline).await?;
        Ok((job_status::COMPLETED, done))
    }
}

/// What one query_batch2 said.
struct BatchStates {
    /// Job -> its status, for every job of the batches answered.
    states: HashMap<String, String>,
    answered: HashSet<String>,
    /// Batch -> how many of its jobs are DONE (delivered ones included).
    finished: HashMap<String, usize>,
    /// Batches the server does not know (or another user owns), and why.
    gone: Vec<(String, String)>,
}

/// query_batch2 over `names`; a batch the server does not know (or that
/// another user owns) is dropped from the query and reported as gone.
async fn query_states(
    rpc: &Addr<RpcClient>,
    auth: &Authenticator,
    mut names: Vec<String>,
    deadline: Instant,
) -> Result<BatchStates, RpcError> {
    let mut out = BatchStates { states: HashMap::new(), answered: HashSet::new(), finished: HashMap::new(), gone: Vec::new() };
    while !names.is_empty() {
        let xml = request::query_batch2(auth, 0.0, &names);
        match rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batch2, deadline).await {
            Ok(reply) => {
                for (name, jobs) in names.into_iter().zip(reply.batches) {
                    out.finished.insert(name.clone(), jobs.iter().filter(|j| j.status == "DONE").count());
                    out.states.extend(jobs.into_iter().map(|j| (j.name, j.status)));
                    out.answered.insert(name);
                }
                break;
            }
            Err(RpcError::Boinc { num, msg }) => {
                let named = msg.strip_prefix("no batch named ").or_else(|| msg.strip_prefix("not owner of ")).map(str::trim);
                let Some(i) = named.and_then(|n| names.iter().position(|b| b == n)) else {
                    return Err(RpcError::Boinc { num, msg });
                };
                out.gone.push((names.remove(i), msg));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

async fn retire(rpc: &Addr<RpcClient>, auth: &Authenticator, batch: &str, deadline: Instant) {
    let xml = request::retire_batch(auth, batch);
    if let Err(e) = rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_success, deadline).await {
        tracing::info!(batch, "can't retire the batch: {}", auth.redact_in(&e.to_string()));
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

/// Make sure a job is loaded (and its submission running).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Track {
    pub id: JobId,
}

impl Handler<Track> for BlahProject {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Track, _: &mut Context<Self>) -> Self::Result {
        self.load(msg.id)
    }
}

/// BLAH_JOB_STATUS of one of this project's jobs.
#[derive(Message)]
#[rtype(result = "BlahResult")]
pub struct Status {
    pub id: JobId,
}

impl Handler<Status> for BlahProject {
    type Result = ResponseActFuture<Self, BlahResult>;
    fn handle(&mut self, msg: Status, _: &mut Context<Self>) -> Self::Result {
        if self.config.panic_on.as_ref() == Some(&msg.id.job) {
            panic!("test hook: a status of {}", msg.id.job);
        }
        let job = msg.id.job.clone();
        Box::pin(self.load(msg.id).then(move |(), act, ctx| act.answer(job, ctx)))
    }
}

/// BLAH_JOB_CANCEL: the state database already says cancelled. The
/// answer goes to `reply` once the abort was tried.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Cancel {
    pub id: JobId,
    pub reply: oneshot::Sender<BlahResult>,
}

impl Handler<Cancel> for BlahProject {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Cancel, _: &mut Context<Self>) -> Self::Result {
        let Cancel { id, reply } = msg;
        let batch = id.job.clone();
        Box::pin(self.load(id).map(move |(), act, ctx| {
            let Some(job) = act.jobs.get_mut(&batch) else { return };
            let submitting = job.phase == Phase::Submitting && job.busy;
            job.phase = Phase::Cancelled;
            if submitting {
                // The submission aborts what it made when it ends.
                let _ = reply.send(BlahResult::ok());
            } else {
                act.abort(batch, ctx, Some(reply));
            }
        }))
    }
}

/// The final status (3 or 4) of a job was queued: it no longer needs its
/// batch, which is retired once no job in it does.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Delivered {
    pub id: JobId,
}

impl Handler<Delivered> for BlahProject {
    type Result = ();
    fn handle(&mut self, msg: Delivered, ctx: &mut Context<Self>) {
        let name = msg.id.job;
        let Some(job) = self.jobs.get_mut(&name) else { return };
        if job.retired || !matches!(job.final_status, Some((job_status::REMOVED | job_status::COMPLETED, _))) {
            return;
        }
        job.retired = true;
        let batch = job.batch.clone();
        let is_sequence = job.is_sequence();
        // Answered from the state database if ever asked again.
        self.jobs.remove(&name);
        self.store.write("store a delivery", move |c| store::set_retired(c, &name));
        if !is_sequence {
            self.retire_if_done(batch, ctx);
        }
    }
}

/// BLAH_PING: the project's ping_server, as BOINC_PING does it.
#[derive(Message)]
#[rtype(result = "BlahResult")]
pub struct Ping;

impl Handler<Ping> for BlahProject {
    type Result = ResponseFuture<BlahResult>;
    fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> Self::Result {
        let (projects, key) = (self.projects.clone(), self.key.clone());
        Box::pin(async move {
            let Ok(tree) = projects.send(TreeOf(key)).await else {
                return BlahResult::Simple { code: 1, error: "internal error: no project tree".into() };
            };
            match tree.send(Run { command: AsyncCommand::Ping }).await {
                Ok(CommandResult::Ok) => BlahResult::ok(),
                Ok(CommandResult::Error(e)) => BlahResult::Simple { code: 1, error: e },
                _ => BlahResult::Simple { code: 1, error: "internal error: the project's worker stopped".into() },
            }
        })
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
