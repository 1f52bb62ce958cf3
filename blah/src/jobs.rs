//! BlahJobs: the `BLAH_*` front end (`grid_resource = batch boinc`). Like
//! `Registry` for the BOINC_* commands, it is the edge where each accepted
//! request becomes exactly one result in the ResultQueue, shaped as its
//! command's result must be (submit 4 fields, status 5, the rest 3), also
//! when a project's actor dies or the work hangs.
//!
//! It decides which attempt a submit is (the state database remembers each
//! `JobDirectory`'s attempts), finds the project of a job id (the config's,
//! or one a job named, remembered by key), and hands the job to that
//! project's `ProjectJobs`.

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::{BlahCommand, BlahResult, CommandResult, ReqId};
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use crate::job::BlahJob;
use crate::job_records::{self, JobRecords};
use crate::map::{self, JobId, MapError, UNCONFIGURED};
use crate::outputs::held_ad;
use crate::placement::pool_placement;
use crate::project_jobs::{Cancel, Delivered, Ping, ProjectJobs, Status, Track};
use crate::shared_batch;
use gahp_broker::pools::Pools;
use gahp_broker::registry::Registry;
use gahp_project::ProjectKey;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::result_queue::{Complete, ResultQueue};

pub struct BlahJobs {
    config: Arc<DaemonConfig>,
    queue: Addr<ResultQueue>,
    projects: Addr<Registry>,
    stager: Addr<FileStager>,
    store: JobRecords,
    pools: Addr<Pools>,
    /// Projects jobs were submitted to: key -> (URL, authenticator file).
    known: HashMap<String, (String, PathBuf)>,
    running: HashMap<String, Addr<ProjectJobs>>,
    /// Project key -> its URL and account: jobs of one account (whatever
    /// file holds its key, whichever client of `serve` submits them) share
    /// batches.
    accounts: HashMap<String, String>,
    /// Submits and statuses in progress (a trace of the pacing).
    waiting: Waiting,
}

impl BlahJobs {
    pub fn new(
        config: Arc<DaemonConfig>,
        queue: Addr<ResultQueue>,
        projects: Addr<Registry>,
        stager: Addr<FileStager>,
        store: JobRecords,
        pools: Addr<Pools>,
    ) -> Self {
        BlahJobs {
            config,
            queue,
            projects,
            stager,
            store,
            pools,
            known: HashMap::new(),
            running: HashMap::new(),
            accounts: HashMap::new(),
            waiting: Waiting::default(),
        }
    }

    /// The actor of a project key, started on first use. Err: a hold
    /// reason (unknown key, unreadable authenticator file).
    fn project(&mut self, pkey: &str) -> Result<Addr<ProjectJobs>, String> {
        if let Some(addr) = self.running.get(pkey).filter(|a| a.connected()) {
            return Ok(addr.clone());
        }
        let cfg = &self.config.blah;
        let default = match (&cfg.project_url, &cfg.authenticator_file) {
            (Some(url), Some(file)) if map::project_key(url, file) == pkey => Some((map::normalize_url(url), file.clone())),
            _ => None,
        };
        let Some((url, file)) = self.known.get(pkey).cloned().or(default) else {
            return Err(format!(
                "this daemon does not know the BOINC project of this job (key {pkey}): its state database was lost or \
                 another one is in use; condor_release the job to submit it again"
            ));
        };
        let auth = gahp_services::config::read_authenticator_file(&file)
            .map_err(|e| format!("{e}: put the BOINC account key in it, then condor_release the job"))?;
        let key = ProjectKey::new(&url, auth);
        self.accounts.insert(pkey.to_string(), format!("{}\n{}", key.url, key.account()));
        let actor = ProjectJobs::new(
            pkey.to_string(),
            key,
            file,
            self.config.clone(),
            self.projects.clone(),
            self.stager.clone(),
            self.store.clone(),
        );
        let addr = actor.start();
        self.running.insert(pkey.to_string(), addr.clone());
        Ok(addr)
    }

    fn work(&mut self, command: &BlahCommand, ctx: &Context<Self>) -> Work {
        match command {
            BlahCommand::Ping { .. } => self.ping(),
            BlahCommand::JobSubmit { ad } => self.submit(ad, ctx),
            BlahCommand::JobStatus { job_id } => self.status(job_id, ctx),
            BlahCommand::JobCancel { job_id } => self.cancel(job_id, ctx),
            // BOINC has no proxies to renew.
            BlahCommand::JobRefreshProxy { .. } => ready(BlahResult::ok()),
        }
    }

    /// Pings the default project. Config problems answer 0: a failed ping
    /// makes jobs wait silently, a held job says what is wrong.
    fn ping(&mut self) -> Work {
        let cfg = &self.config.blah;
        let (Some(url), Some(file)) = (&cfg.project_url, &cfg.authenticator_file) else {
            return ready(BlahResult::ok());
        };
        match self.project(&map::project_key(url, file)) {
            Ok(p) => forward(p.send(Ping), "BLAH_PING"),
            Err(e) => {
                tracing::warn!("BLAH_PING: {e}");
                ready(BlahResult::ok())
            }
        }
    }

    /// Records the attempt and answers its id at once; the project actor
    /// submits it in the background. A job that can't go anywhere still
    /// gets an id: its status then says why it is held. The ad is read
    /// here, once, into the typed job that is recorded (`crate::job`).
    fn submit(&mut self, ad: &ClassAd, ctx: &Context<Self>) -> Work {
        // A job with no JobDirectory, or a bad sequence value, is refused
        // here, before there is a job to hold.
        let job = match BlahJob::parse(ad, &self.config.blah) {
            Ok(job) => job,
            Err(e) => return ready(BlahResult::Submit { code: 1, error: e.to_string(), job_id: None }),
        };
        // Jobs of one project, app and requests may share a batch (the
        // bounds are batch-wide in submit_batch); a sequence is one job of
        // its own.
        let gather_key = map::gather_key(&job).filter(|_| !job.is_sequence());
        let place = pool_placement(&job, &self.config.blah);
        let project = job.project.clone();
        let submitted =
            Submitted { job_dir: job.job_dir.clone(), json: job.to_json(), gather_key, prefix: self.config.blah.name_prefix.clone() };
        // A job that names no project goes where the pool's matchmaking puts it.
        if let Some(place) = place {
            let (pools, store, me) = (self.pools.clone(), self.store.clone(), ctx.address());
            return Box::pin(async move {
                let (pkey, held, account) = match pools.send(place).await {
                    Ok(Ok(choice)) => me.send(Learn(choice.url, choice.authenticator_file)).await.unwrap_or_else(|_| {
                        (UNCONFIGURED.to_string(), Some("internal error: the BLAH front end stopped".into()), String::new())
                    }),
                    Ok(Err(reason)) => (UNCONFIGURED.to_string(), Some(reason), String::new()),
                    Err(_) => (UNCONFIGURED.to_string(), Some("internal error: the broker stopped".into()), String::new()),
                };
                claim(store, me, submitted, pkey, account, held).await
            });
        }
        let (pkey, held, account) = match project {
            Ok(choice) => self.learn(choice.url, choice.authenticator_file),
            Err(e) => (UNCONFIGURED.to_string(), Some(MapError::InAd(e).hold_reason()), String::new()),
        };
        Box::pin(claim(self.store.clone(), ctx.address(), submitted, pkey, account, held))
    }

    /// Records a project a job was placed on (by key) and starts its actor;
    /// the hold reason if it can't be used, and the project's URL and
    /// account (the scope of the batches its jobs may share).
    fn learn(&mut self, url: String, authenticator_file: PathBuf) -> (String, Option<String>, String) {
        let pkey = map::project_key(&url, &authenticator_file);
        if !self.known.contains_key(&pkey) {
            let (k, u, f) = (pkey.clone(), url.clone(), authenticator_file.clone());
            self.store.write("record a project", move |c| job_records::add_project(c, &k, &u, &f));
            self.known.insert(pkey.clone(), (url, authenticator_file));
        }
        let held = self.project(&pkey).err();
        let account = self.accounts.get(&pkey).cloned().unwrap_or_else(|| pkey.clone());
        (pkey, held, account)
    }

    fn status(&mut self, job_id: &str, ctx: &Context<Self>) -> Work {
        let Some(id) = JobId::parse(job_id) else {
            return ready(not_ours(job_id));
        };
        if self.config.blah.known_jobs_only {
            return self.if_known(id, ctx, BlahCommand::JobStatus { job_id: job_id.into() }, not_ours(job_id));
        }
        self.status_known(id)
    }

    fn status_known(&mut self, id: JobId) -> Work {
        if id.project == UNCONFIGURED {
            let reason = MapError::NoProject { config: config_name(&self.config) }.hold_reason();
            return self.recorded_status(id.job, reason);
        }
        match self.project(&id.project) {
            Ok(p) => forward(p.send(Status { id }), "BLAH_JOB_STATUS"),
            Err(reason) => self.recorded_status(id.job, reason),
        }
    }

    /// With `known_jobs_only`: `command` if the state database has a
    /// record of its job, else `otherwise`, asking the project nothing.
    fn if_known(&self, id: JobId, ctx: &Context<Self>, command: BlahCommand, otherwise: BlahResult) -> Work {
        let (store, me, job) = (self.store.clone(), ctx.address(), id.job.clone());
        Box::pin(async move {
            match store.read(move |c| job_records::load(c, &job)).await {
                Ok(Some(_)) => {
                    let failed = command.failure("internal error: the BLAH front end stopped");
                    me.send(KnownJob { id, command }).await.unwrap_or(failed)
                }
                _ => {
                    tracing::info!("{} of an id this client has no job of: {id}", command.code());
                    otherwise
                }
            }
        })
    }

    /// A job no project actor can answer for: its recorded final status,
    /// else held with `reason`.
    fn recorded_status(&mut self, batch: String, reason: String) -> Work {
        let store = self.store.clone();
        Box::pin(async move {
            let b = batch.clone();
            let rec = store.read(move |c| job_records::load(c, &b)).await.ok().flatten();
            match rec.and_then(|r| r.status.zip(r.final_ad.and_then(|t| ClassAd::parse(&t).ok()))) {
                Some((status, ad)) => BlahResult::status(status, ad),
                None => BlahResult::status(job_status::HELD, held_ad(&batch, &reason)),
            }
        })
    }

    /// Marks the attempt cancelled (before anything else, so a resubmit of
    /// its JobDirectory makes a new attempt) and aborts it on BOINC. Code
    /// 0 for ids that are not ours or never reached a project: gone.
    fn cancel(&mut self, job_id: &str, ctx: &Context<Self>) -> Work {
        let Some(id) = JobId::parse(job_id) else {
            tracing::info!("BLAH_JOB_CANCEL of an id that is not ours: {job_id}");
            return ready(BlahResult::ok());
        };
        if self.config.blah.known_jobs_only {
            return self.if_known(id, ctx, BlahCommand::JobCancel { job_id: job_id.into() }, BlahResult::ok());
        }
        self.cancel_known(id)
    }

    fn cancel_known(&mut self, id: JobId) -> Work {
        let j = id.job.clone();
        self.store.write("mark a job cancelled", move |c| job_records::mark_cancelled(c, &j));
        if id.project == UNCONFIGURED {
            return ready(BlahResult::ok());
        }
        match self.project(&id.project) {
            Ok(p) => {
                let (reply, answer) = oneshot::channel();
                p.do_send(Cancel { id, reply });
                // A dropped reply (the actor died) is an error of the right shape.
                forward(async move { answer.await.map_err(|_| MailboxError::Closed) }, "BLAH_JOB_CANCEL")
            }
            Err(reason) => ready(BlahResult::Simple { code: 1, error: format!("can't abort BOINC job {}: {reason}", id.job) }),
        }
    }
}

impl BlahJobs {
    /// Deletes the records of jobs that ended more than the retention ago.
    fn forget_ended_jobs(&self) {
        let retention = self.config.blah.forget_finished_after.as_secs_f64();
        self.store.write("forget old jobs", move |c| {
            let gone = job_records::prune(c, retention)?;
            if gone > 0 {
                tracing::debug!(jobs = gone, "forgot the records of jobs that ended more than {retention} s ago");
            }
            Ok(())
        });
    }
}

/// How often ended jobs are looked for: every 24th of the retention (a
/// record outlives it by at most that much), at least hourly, and no more
/// than 10 times a second (for the retentions of seconds that tests use).
fn prune_period(retention: Duration) -> Duration {
    (retention / 24).clamp(Duration::from_millis(100), Duration::from_secs(3600))
}

/// The work of one command, run as a task of its own.
type Work = LocalBoxFuture<'static, BlahResult>;

/// How many submits and statuses (those with a place, see
/// `Session::dispatch_blah`) are between their dispatch and their result,
/// and the most there have been: a debug line at each new most, which tests read
/// to see the session's pacing hold.
#[derive(Default, Clone)]
struct Waiting(Rc<Cell<(usize, usize)>>);

impl Waiting {
    /// `work`, counted while it runs (and until it is dropped) if `counted`.
    fn count(&self, counted: bool, work: Work) -> Work {
        if !counted {
            return work;
        }
        let (now, most) = self.0.get();
        let now = now + 1;
        if now > most {
            tracing::debug!(in_progress = now, "BLAH commands in progress: the most yet");
        }
        self.0.set((now, most.max(now)));
        let counted = WaitingOne(self.0.clone());
        Box::pin(async move {
            let result = work.await;
            drop(counted);
            result
        })
    }
}

/// One counted submit: uncounted when dropped (a timed-out one too).
struct WaitingOne(Rc<Cell<(usize, usize)>>);

impl Drop for WaitingOne {
    fn drop(&mut self) {
        let (now, most) = self.0.get();
        self.0.set((now.saturating_sub(1), most));
    }
}

/// A submitted job as its attempt is recorded: its `JobDirectory`, its
/// typed job (JSON), the key of the batches it may share, its BOINC names'
/// prefix.
struct Submitted {
    job_dir: String,
    json: String,
    gather_key: Option<String>,
    prefix: String,
}

/// Records the job's attempt on project `pkey` (held with `held` if set;
/// else joining the open BOINC batch of its gathering key on `account`, the
/// project's URL and account, if any) and answers its id.
async fn claim(store: JobRecords, me: Addr<BlahJobs>, job: Submitted, pkey: String, account: String, held: Option<String>) -> BlahResult {
    let Submitted { job_dir, json, gather_key, prefix } = job;
    let gathering = store.gathering.clone();
    let held_reason = held.clone();
    let condor_job = map::condor_job_id_of_dir(&job_dir).unwrap_or_else(|| "unknown".into());
    let claimed = store
        .read(move |c| {
            let hold = held.map(|reason| move |batch: &str| held_ad(batch, &reason).to_string());
            let key = gather_key.map(|k| format!("{account}\n{k}"));
            let participant = shared_batch::participant(&prefix, &pkey);
            let gather = key.as_deref().map(|k| (&gathering, k, participant.as_str()));
            job_records::claim_attempt(c, &job_dir, &pkey, &json, hold.as_ref().map(|f| f as &dyn Fn(&str) -> String), gather, &prefix)
        })
        .await;
    match claimed {
        Ok((project, batch, job)) => {
            if let Some(reason) = held_reason {
                tracing::warn!(condor_job = %condor_job, boinc_batch = %batch, boinc_job = %job, "job held at submission: {reason}");
            }
            let id = JobId { project, batch, job };
            let text = id.to_string();
            me.do_send(Claimed(id));
            BlahResult::submitted(text)
        }
        Err(e) => BlahResult::Submit { code: 1, error: format!("boinc-gahp can't record the job: {e}"), job_id: None },
    }
}

fn not_ours(job_id: &str) -> BlahResult {
    let error = format!("{job_id} is not a job id of this BOINC GAHP");
    BlahResult::Status { code: 1, error, status: 0, ad: None }
}

fn ready(r: BlahResult) -> Work {
    Box::pin(std::future::ready(r))
}

/// The reply of a project actor; if it died, an error of the right shape.
fn forward(reply: impl Future<Output = Result<BlahResult, MailboxError>> + 'static, code: &'static str) -> Work {
    Box::pin(async move {
        reply.await.unwrap_or_else(|_| {
            let error = format!("{code} failed: internal error (the project's BLAH worker stopped); try again");
            match code {
                "BLAH_JOB_STATUS" => BlahResult::Status { code: 1, error, status: 0, ad: None },
                _ => BlahResult::Simple { code: 1, error },
            }
        })
    })
}

fn config_name(config: &DaemonConfig) -> String {
    config.blah.config_file.as_ref().map_or_else(|| "~/.config/boinc-gahp/config.toml".into(), |p| p.display().to_string())
}

impl Actor for BlahJobs {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Ended jobs are forgotten after the retention, at start and then
        // while the daemon runs: a daemon up for months keeps no more.
        self.forget_ended_jobs();
        ctx.run_interval(prune_period(self.config.blah.forget_finished_after), |act, _| act.forget_ended_jobs());
        let store = self.store.clone();
        // Known projects are loaded before the first command is handled.
        ctx.wait(async move { store.read(job_records::projects).await }.into_actor(self).map(|r, act, _| match r {
            Ok(rows) => act.known.extend(rows.into_iter().map(|(k, u, f)| (k, (u, f)))),
            Err(e) => tracing::warn!("can't read the known BOINC projects: {e}"),
        }));
    }
}

/// An accepted `BLAH_*` request.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BlahDispatch {
    pub reqid: ReqId,
    pub command: BlahCommand,
    /// A submit's or status's place among those in progress (see
    /// `Session::dispatch_blah`), given back once its result is queued.
    pub place: Option<OwnedSemaphorePermit>,
}

impl Handler<BlahDispatch> for BlahJobs {
    type Result = ();

    fn handle(&mut self, msg: BlahDispatch, ctx: &mut Context<Self>) {
        let BlahDispatch { reqid, command, place } = msg;
        // The project actors bound their own work; this is the net under
        // it, so that a result comes even if something hangs.
        let limit = self.config.command_timeout + Duration::from_secs(15);
        // Who retires the batch once its final status is queued.
        let retire = match &command {
            BlahCommand::JobStatus { job_id } => JobId::parse(job_id).and_then(|id| Some((self.running.get(&id.project)?.clone(), id))),
            _ => None,
        };
        let work = self.work(&command, ctx);
        let work = self.waiting.count(place.is_some(), work);
        // The task keeps only the command's kind, for a failure's shape: a
        // submit's parsed ad is about 1 KB, held by each of 100,000
        // submits waiting for the state database.
        let command = match command {
            BlahCommand::JobSubmit { .. } => BlahCommand::JobSubmit { ad: ClassAd::default() },
            other => other,
        };
        let queue = self.queue.clone();
        // A task of its own, not a future in this actor's context (which
        // actix polls whenever any of them wakes: O(in flight) each).
        actix_rt::spawn(async move {
            let result = tokio::time::timeout(limit, work)
                .await
                .unwrap_or_else(|_| command.failure(format!("{} timed out after {} s", command.code(), limit.as_secs())));
            let ended = matches!(result, BlahResult::Status { code: 0, status: job_status::REMOVED | job_status::COMPLETED, .. });
            queue.do_send(Complete { reqid, result: CommandResult::Blah(result) });
            drop(place);
            if let Some((project, id)) = retire.filter(|_| ended) {
                project.do_send(Delivered { id });
            }
        });
    }
}

/// A project the pool chose for a job: record it (see `BlahJobs::learn`).
#[derive(Message)]
#[rtype(result = "(String, Option<String>, String)")]
struct Learn(String, PathBuf);

impl Handler<Learn> for BlahJobs {
    type Result = MessageResult<Learn>;
    fn handle(&mut self, msg: Learn, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.learn(msg.0, msg.1))
    }
}

/// A status or cancel of a job the state database has a record of.
#[derive(Message)]
#[rtype(result = "BlahResult")]
struct KnownJob {
    id: JobId,
    command: BlahCommand,
}

impl Handler<KnownJob> for BlahJobs {
    type Result = ResponseFuture<BlahResult>;
    fn handle(&mut self, KnownJob { id, command }: KnownJob, _: &mut Context<Self>) -> Self::Result {
        match command {
            BlahCommand::JobCancel { .. } => self.cancel_known(id),
            _ => self.status_known(id),
        }
    }
}

/// A submit's attempt is recorded: its project actor takes it on.
#[derive(Message)]
#[rtype(result = "()")]
struct Claimed(JobId);

impl Handler<Claimed> for BlahJobs {
    type Result = ();
    fn handle(&mut self, Claimed(id): Claimed, _: &mut Context<Self>) {
        if id.project != UNCONFIGURED {
            if let Ok(p) = self.project(&id.project) {
                p.do_send(Track { id });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_jobs_are_looked_for_every_24th_of_the_retention_within_bounds() {
        let day = Duration::from_secs(86_400);
        assert_eq!(prune_period(day), Duration::from_secs(3600));
        assert_eq!(prune_period(90 * day), Duration::from_secs(3600), "at least hourly");
        assert_eq!(prune_period(Duration::from_secs(120)), Duration::from_secs(5));
        assert_eq!(prune_period(Duration::from_secs(1)), Duration::from_millis(100));
    }
}
