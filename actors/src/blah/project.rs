//! BlahProject: the BLAH jobs of one BOINC project. It submits each job
//! (one batch, one job) through the project's SubmitPipeline in the
//! background, answers BLAH_JOB_STATUS from a cache that one query_batch2
//! over all watched batches refreshes per period (a storm of status
//! queries costs nothing more; an outage leaves the last known states in
//! place), places a finished job's files before its status turns final,
//! aborts what the gridmanager cancels, renews batch leases, and retires
//! batches whose final status went out.
//!
//! Memory is a cache of the state database: a job it does not hold is
//! loaded from there (a restarted daemon picks its jobs up by id), and a
//! job it never recorded is still watched by its id alone.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script, Templates};
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::{AsyncCommand, BlahResult, CommandResult};
use gahp_protocol::Authenticator;
use tokio::sync::oneshot;

use crate::blah::map;
use crate::blah::outputs::{deliver_done, held_ad, resolve_error, status_ad};
use crate::blah::store::{self, BlahStore, JobRecord, Phase};
use crate::config::DaemonConfig;
use crate::file_stager::FileStager;
use crate::project::rpc::{call, Call, Retry, RpcClient, RpcError};
use crate::project::submit_pipeline::{RunPipeline, SubmitPipeline};
use crate::project::tree::{ClientOf, Run};
use crate::project::ProjectKey;
use crate::projects::{Projects, TreeOf};

/// How long an app's templates are reused between submissions.
const TEMPLATES_TTL: Duration = Duration::from_secs(60);

/// BOINC's "project down for maintenance": an error reply that passes.
const PROJECT_DOWN: i64 = -183;

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
    jobs: HashMap<String, Job>,
    templates: HashMap<String, (Instant, Templates)>,
    refreshing: bool,
    refresh_again: bool,
    upkeep_running: bool,
    /// Cancelled jobs whose abort has not reached the server yet.
    aborts: HashSet<String>,
}

struct Job {
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
    fn unknown() -> Job {
        Job {
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
            jobs: HashMap::new(),
            templates: HashMap::new(),
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
    fn load(&mut self, batch: String) -> ResponseActFuture<Self, ()> {
        if self.jobs.contains_key(&batch) {
            return Box::pin(fut::ready(()));
        }
        let (store, b) = (self.store.clone(), batch.clone());
        Box::pin(async move { store.read(move |c| store::load(c, &b)).await }.into_actor(self).map(move |rec, act, ctx| {
            if act.jobs.contains_key(&batch) {
                return;
            }
            let job = match rec {
                Ok(Some(rec)) => {
                    if rec.abort_pending {
                        act.aborts.insert(batch.clone());
                    }
                    Job::from_record(rec)
                }
                Ok(None) => Job::unknown(),
                Err(e) => {
                    tracing::warn!(batch = %batch, "can't read the job's record ({e}); watching it by id");
                    Job::unknown()
                }
            };
            act.jobs.insert(batch.clone(), job);
            act.advance(&batch, ctx);
        }))
    }

    /// Starts what a job waits for: its submission after a restart.
    fn advance(&mut self, batch: &str, ctx: &mut Context<Self>) {
        if matches!(self.jobs.get(batch), Some(j) if j.phase == Phase::Submitting && !j.busy) {
            self.submit(batch.to_string(), ctx);
        }
    }

    fn status(&mut self, batch: &str, ctx: &mut Context<Self>) -> BlahResult {
        let Some(job) = self.jobs.get(batch) else {
            return BlahResult::Status { code: 1, error: "internal error: job not loaded".into(), status: 0, ad: None };
        };
        let status = match (&job.final_status, job.phase, job.boinc.as_deref()) {
            (Some((status, ad)), ..) => return BlahResult::status(*status, ad.clone()),
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

    /// One query_batch2 over every watched batch; coalesced.
    fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing {
            self.refresh_again = true;
            return;
        }
        let Some(rpc) = self.rpc.clone() else { return };
        let names: Vec<String> = self.jobs.iter().filter(|(_, j)| j.watched()).map(|(n, _)| n.clone()).collect();
        if names.is_empty() {
            return;
        }
        self.refreshing = true;
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        self.run(ctx, async move { query_states(&rpc, &auth, names, deadline).await }, |act, r, ctx| {
            act.refreshing = false;
            match r {
                Ok((states, gone)) => act.refreshed(states, gone, ctx),
                Err(e) => tracing::info!(project = %act.key.url, "status refresh failed, reporting the last known states: {}", act.auth().redact_in(&e.to_string())),
            }
            if std::mem::take(&mut act.refresh_again) {
                act.refresh(ctx);
            }
        });
    }

    fn refreshed(&mut self, states: HashMap<String, String>, gone: Vec<(String, String)>, ctx: &mut Context<Self>) {
        for (batch, status) in states {
            let Some(job) = self.jobs.get_mut(&batch) else { continue };
            if job.boinc.as_deref() != Some(status.as_str()) {
                let (b, s) = (batch.clone(), status.clone());
                self.store.write("store a BOINC status", move |c| store::set_boinc_status(c, &b, &s));
                job.boinc = Some(status);
            }
        }
        for (batch, why) in gone {
            // It may have ended while the query was out.
            if !self.jobs.get(&batch).is_some_and(Job::watched) {
                continue;
            }
            let reason = format!(
                "BOINC job {batch} is not on {} ({why}): it was never created (the daemon stopped while submitting it?) \
                 or was removed there; condor_release the job to submit it again",
                self.key.url
            );
            self.finish(&batch, job_status::HELD, held_ad(&batch, &reason));
        }
        let todo: Vec<(String, String)> =
            self.jobs.iter().filter(|(_, j)| j.watched() && !j.busy).filter_map(|(b, j)| j.boinc.clone().map(|s| (b.clone(), s))).collect();
        for (batch, status) in todo {
            match status.as_str() {
                "DONE" => self.deliver(batch, ctx),
                "ERROR" => self.resolve(batch, ctx),
                _ => {}
            }
        }
    }

    /// Records a job's final status (3, 4 or 5); it is answered from now on.
    fn finish(&mut self, batch: &str, status: i32, ad: ClassAd) {
        let Some(job) = self.jobs.get_mut(batch) else { return };
        if job.phase == Phase::Cancelled {
            return;
        }
        if status == job_status::HELD {
            tracing::info!(batch, "holding the job: {}", ad.get_str("HoldReason").unwrap_or(""));
        }
        let (b, text) = (batch.to_string(), ad.to_string());
        self.store.write("store a final status", move |c| store::set_phase(c, &b, Phase::Final, Some(status), Some(text)));
        job.phase = Phase::Final;
        job.final_status = Some((status, ad));
    }

    /// Submits a job in the background: app templates, the mapping, then
    /// the SubmitPipeline of BOINC_SUBMIT with a long deadline (it retries
    /// transient failures). What fails after that holds the job.
    fn submit(&mut self, batch: String, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(job) = self.jobs.get_mut(&batch) else { return };
        let Some(ad) = job.ad.clone() else {
            self.finish(&batch, job_status::HELD, held_ad(&batch, "the submit ad of this job was lost; condor_release the job"));
            return;
        };
        job.busy = true;
        job.submitting_since.get_or_insert_with(Instant::now);
        let cfg = self.config.blah.clone();
        let (app, source) = match map::choose_app(&ad, &cfg) {
            Ok(a) => a,
            Err(e) => return self.submitted(&batch, Err((e.hold_reason(), false)), ctx),
        };
        let cached = self.templates.get(&app).filter(|(at, _)| at.elapsed() < TEMPLATES_TTL).map(|(_, t)| t.clone());
        let deadline = Instant::now() + cfg.submit_timeout;
        let (key, config, stager) = (self.key.clone(), self.pipeline_config.clone(), self.stager.clone());
        let file = self.authenticator_file.display().to_string();
        let b = batch.clone();
        // Err: the hold reason, and whether the project was down for
        // maintenance (then the submission is tried again later).
        let work = async move {
            let templates = match cached {
                Some(t) => t,
                None => {
                    let xml = request::get_templates_for_app(&key.authenticator, &app);
                    call(&rpc, Call::new(Script::SubmitRpcHandler, xml, reply::parse_templates, Retry::Idempotent, deadline))
                        .await
                        .map_err(|e| {
                            let down = matches!(e, RpcError::Boinc { num: PROJECT_DOWN, .. });
                            (templates_error(&e, &key.url, &file, &app, source), down)
                        })?
                }
            };
            let spec = map::submit_batch(&ad, &b, &app, &templates).map_err(|e| (e.hold_reason(), false))?;
            map::output_plan(&ad, &app, &templates.outputs).map_err(|e| (e.hold_reason(), false))?;
            let pipeline = SubmitPipeline::new(key, config, rpc, stager, spec, deadline).start();
            match pipeline.send(RunPipeline).await {
                Ok(CommandResult::Ok) => Ok((app, templates)),
                Ok(CommandResult::Error(m)) => {
                    // The pipeline's messages end with the RPC error: "<step>: <num> <msg>".
                    let down = m.contains(&format!(": {PROJECT_DOWN} "));
                    Err((format!("the BOINC submission failed: {m}; condor_release the job to try again"), down))
                }
                _ => Err(("the BOINC submission failed: internal error; condor_release the job to try again".to_string(), false)),
            }
        };
        self.run(ctx, work, move |act, r, ctx| {
            let r = r.map(|(app, templates)| {
                act.templates.insert(app, (Instant::now(), templates));
            });
            act.submitted(&batch, r, ctx);
        });
    }

    fn submitted(&mut self, batch: &str, r: Result<(), (String, bool)>, ctx: &mut Context<Self>) {
        let Some(job) = self.jobs.get_mut(batch) else { return };
        job.busy = false;
        if job.phase == Phase::Cancelled {
            // Cancelled while it was being submitted: abort what was made.
            return self.abort(batch.to_string(), ctx, None);
        }
        let timeout = self.config.blah.submit_timeout;
        if let Err((reason, true)) = &r {
            if job.submitting_since.is_some_and(|t| t.elapsed() < timeout) {
                tracing::info!(batch, "the project is down for maintenance; submitting again later: {reason}");
                let b = batch.to_string();
                ctx.run_later(self.config.blah.status_refresh.max(Duration::from_secs(1)), move |act, ctx| act.advance(&b, ctx));
                return;
            }
        }
        match r.map_err(|(reason, _)| reason) {
            Ok(()) => {
                job.phase = Phase::Active;
                // Created with the lease as its expiry (see pipeline_config).
                job.lease_until = unix_now() + self.config.blah.lease.as_secs_f64();
                let (b, until) = (batch.to_string(), job.lease_until);
                self.store.write("store a submission", move |c| {
                    store::set_phase(c, &b, Phase::Active, None, None)?;
                    store::set_lease(c, &b, until)
                });
                tracing::info!(batch, project = %self.key.url, "submitted to BOINC");
            }
            Err(reason) => {
                let reason = self.auth().redact_in(&reason);
                if reason.contains('\n') {
                    tracing::warn!(batch, "submission failed: {reason}");
                }
                self.finish(batch, job_status::HELD, held_ad(batch, &map::one_line(&reason)));
            }
        }
    }

    /// Places a DONE job's files, then makes its status 4.
    fn deliver(&mut self, batch: String, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(job) = self.jobs.get_mut(&batch) else { return };
        let Some(ad) = job.ad.clone() else {
            let reason = "the daemon has no record of where this job's outputs go (its state database was lost); \
                          condor_release the job to run it again";
            return self.finish(&batch, job_status::HELD, held_ad(&batch, reason));
        };
        job.busy = true;
        let (key, cfg) = (self.key.clone(), self.config.blah.clone());
        let deadline = Instant::now() + self.config.command_timeout;
        let b = batch.clone();
        let work = async move { deliver_done(&rpc, &key, &cfg, &b, &ad, deadline).await.map(|ad| (job_status::COMPLETED, ad)) };
        self.run(ctx, work, move |act, r, _| act.settled(&batch, r));
    }

    /// Finds out why an ERROR job failed: status 4 with its exit code, or 3.
    fn resolve(&mut self, batch: String, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(job) = self.jobs.get_mut(&batch) else { return };
        job.busy = true;
        let (key, ad) = (self.key.clone(), job.ad.clone());
        let deadline = Instant::now() + self.config.command_timeout;
        let b = batch.clone();
        let work = async move { resolve_error(&rpc, &key, &b, ad.as_ref(), deadline).await };
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

    /// abort_jobs then retire_batch, then `reply` (code 0 either way: an
    /// abort that did not land is retried by `upkeep` until it does, and an
    /// error would replace the reason of a held job). A BOINC error (no
    /// such job, already over) counts as done: the job will not run.
    fn abort(&mut self, batch: String, ctx: &mut Context<Self>, reply: Option<oneshot::Sender<BlahResult>>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        let b = batch.clone();
        let work = async move {
            let xml = request::abort_jobs(&auth, std::slice::from_ref(&b));
            match call(&rpc, Call::new(Script::SubmitRpcHandler, xml, reply::parse_success, Retry::Idempotent, deadline)).await {
                Ok(()) => {}
                Err(RpcError::Boinc { num, msg }) if num != PROJECT_DOWN => {
                    tracing::info!(batch = %b, "nothing to abort: {msg}");
                }
                Err(e) => return Err(auth.redact_in(&e.to_string())),
            }
            retire(&rpc, &auth, &b, deadline).await;
            Ok(())
        };
        self.run(ctx, work, move |act, r, _| {
            let pending = r.is_err();
            if let Err(e) = r {
                tracing::warn!(batch = %batch, "the abort did not reach the project yet, retrying later: {e}");
                act.aborts.insert(batch.clone());
            } else {
                act.aborts.remove(&batch);
                act.jobs.remove(&batch);
            }
            act.store.write("store an abort", move |c| {
                store::set_abort_pending(c, &batch, pending)?;
                if !pending {
                    store::set_retired(c, &batch)?;
                }
                Ok(())
            });
            if let Some(reply) = reply {
                let _ = reply.send(BlahResult::ok());
            }
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
        let renew: Vec<String> =
            self.jobs.iter().filter(|(_, j)| j.watched() && j.lease_until < now + lease / 2.0).map(|(b, _)| b.clone()).collect();
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
                match call(&rpc, Call::new(Script::SubmitRpcHandler, xml, reply::parse_success, Retry::Idempotent, deadline)).await {
                    Ok(()) => renewed.push(b),
                    Err(e) => tracing::info!(batch = %b, "can't renew the batch's lease: {}", auth.redact_in(&e.to_string())),
                }
            }
            renewed
        };
        self.run(ctx, leases, move |act, renewed, _| {
            act.upkeep_running = false;
            for b in renewed {
                if let Some(j) = act.jobs.get_mut(&b) {
                    j.lease_until = now + lease;
                }
                act.store.write("store a lease", move |c| store::set_lease(c, &b, now + lease));
            }
        });
    }
}

/// query_batch2 over `names`; a batch the server does not know (or that
/// another user owns) is dropped from the query and reported as gone.
/// Returns batch -> status of its job, and the gone ones with the reason.
async fn query_states(
    rpc: &Addr<RpcClient>,
    auth: &Authenticator,
    mut names: Vec<String>,
    deadline: Instant,
) -> Result<(HashMap<String, String>, Vec<(String, String)>), RpcError> {
    let mut gone = Vec::new();
    let mut states = HashMap::new();
    while !names.is_empty() {
        let xml = request::query_batch2(auth, 0.0, &names);
        match call(rpc, Call::new(Script::SubmitRpcHandler, xml, reply::parse_query_batch2, Retry::Idempotent, deadline)).await {
            Ok(reply) => {
                for (name, jobs) in names.into_iter().zip(reply.batches) {
                    match jobs.into_iter().find(|j| j.name == name) {
                        Some(j) => {
                            states.insert(name, j.status);
                        }
                        None => gone.push((name, "its batch has no such job".to_string())),
                    }
                }
                break;
            }
            Err(RpcError::Boinc { num, msg }) => {
                let named = msg.strip_prefix("no batch named ").or_else(|| msg.strip_prefix("not owner of ")).map(str::trim);
                let Some(i) = named.and_then(|n| names.iter().position(|b| b == n)) else {
                    return Err(RpcError::Boinc { num, msg });
                };
                gone.push((names.remove(i), msg));
            }
            Err(e) => return Err(e),
        }
    }
    Ok((states, gone))
}

async fn retire(rpc: &Addr<RpcClient>, auth: &Authenticator, batch: &str, deadline: Instant) {
    let xml = request::retire_batch(auth, batch);
    if let Err(e) = call(rpc, Call::new(Script::SubmitRpcHandler, xml, reply::parse_success, Retry::Idempotent, deadline)).await {
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

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Actor for BlahProject {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Nothing is handled before the project's HTTP client is known.
        let (projects, key) = (self.projects.clone(), self.key.clone());
        ctx.wait(
            async move {
                let tree = projects.send(TreeOf(key)).await.ok()?;
                tree.send(ClientOf).await.ok()
            }
            .into_actor(self)
            .map(|rpc, act, ctx| match rpc {
                Some(rpc) => act.rpc = Some(rpc),
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
    pub batch: String,
}

impl Handler<Track> for BlahProject {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Track, _: &mut Context<Self>) -> Self::Result {
        self.load(msg.batch)
    }
}

/// BLAH_JOB_STATUS of one of this project's jobs.
#[derive(Message)]
#[rtype(result = "BlahResult")]
pub struct Status {
    pub batch: String,
}

impl Handler<Status> for BlahProject {
    type Result = ResponseActFuture<Self, BlahResult>;
    fn handle(&mut self, msg: Status, _: &mut Context<Self>) -> Self::Result {
        if self.config.panic_on.as_ref() == Some(&msg.batch) {
            panic!("test hook: a status of {}", msg.batch);
        }
        let batch = msg.batch;
        Box::pin(self.load(batch.clone()).map(move |(), act, ctx| act.status(&batch, ctx)))
    }
}

/// BLAH_JOB_CANCEL: the state database already says cancelled. The
/// answer goes to `reply` once the abort was tried.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Cancel {
    pub batch: String,
    pub reply: oneshot::Sender<BlahResult>,
}

impl Handler<Cancel> for BlahProject {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Cancel, _: &mut Context<Self>) -> Self::Result {
        let Cancel { batch, reply } = msg;
        Box::pin(self.load(batch.clone()).map(move |(), act, ctx| {
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

/// The final status (3 or 4) of a job was queued: retire its batch.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Delivered {
    pub batch: String,
}

impl Handler<Delivered> for BlahProject {
    type Result = ();
    fn handle(&mut self, msg: Delivered, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(job) = self.jobs.get_mut(&msg.batch) else { return };
        if job.retired || !matches!(job.final_status, Some((job_status::REMOVED | job_status::COMPLETED, _))) {
            return;
        }
        job.retired = true;
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        let batch = msg.batch;
        let work = async move {
            retire(&rpc, &auth, &batch, deadline).await;
            batch
        };
        self.run(ctx, work, |act, batch, _| {
            // Answered from the state database if ever asked again.
            act.jobs.remove(&batch);
            act.store.write("store a retirement", move |c| store::set_retired(c, &batch));
        });
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
