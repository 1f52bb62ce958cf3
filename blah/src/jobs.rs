//! BlahJobs: the `BLAH_*` front end (`grid_resource = batch boinc`). The
//! one dispatch (the session's) hands it each accepted `BLAH_*` command
//! and makes its answer the request's one result (shaped as its command's
//! result must be, also when a project's actor dies or the work hangs).
//!
//! It decides which attempt a submit is (the state database remembers each
//! `JobDirectory`'s attempts), finds the project of a job id (the config's,
//! or one a job named, remembered by key), and hands the job to that
//! project's `ProjectJobs`.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::future::LocalBoxFuture;
use gahp_protocol::gahp::{BlahCommand, BlahResult};

use crate::job_records::{self, JobRecords};
use crate::map::{self, JobId, UNCONFIGURED};
use crate::project_jobs::{Delivered, ProjectJobs, Track};
use gahp_broker::pools::Pools;
use gahp_broker::registry::Registry;
use gahp_project::ProjectKey;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;

pub struct BlahJobs {
    pub(crate) config: Arc<DaemonConfig>,
    pub(crate) projects: Addr<Registry>,
    pub(crate) stager: Addr<FileStager>,
    pub(crate) store: JobRecords,
    pub(crate) pools: Addr<Pools>,
    /// Projects jobs were submitted to: key -> (URL, authenticator file).
    pub(crate) known: HashMap<String, (String, PathBuf)>,
    pub(crate) running: HashMap<String, Addr<ProjectJobs>>,
    /// Project key -> its URL and account: jobs of one account (whatever
    /// file holds its key, whichever client of `serve` submits them) share
    /// batches.
    pub(crate) accounts: HashMap<String, String>,
    /// Submits and statuses in progress (a trace of the pacing).
    waiting: Waiting,
}

impl BlahJobs {
    pub fn new(
        config: Arc<DaemonConfig>,
        projects: Addr<Registry>,
        stager: Addr<FileStager>,
        store: JobRecords,
        pools: Addr<Pools>,
    ) -> Self {
        BlahJobs {
            config,
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
    pub(crate) fn project(&mut self, pkey: &str) -> Result<Addr<ProjectJobs>, String> {
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

    /// Records a project a job was placed on (by key) and starts its actor;
    /// the hold reason if it can't be used, and the project's URL and
    /// account (the scope of the batches its jobs may share).
    pub(crate) fn learn(&mut self, url: String, authenticator_file: PathBuf) -> (String, Option<String>, String) {
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
pub(crate) type Work = LocalBoxFuture<'static, BlahResult>;

/// How many submits and statuses (those with a place, see
/// `Session::dispatch`) are between their dispatch and their result,
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

/// An accepted `BLAH_*` command, from the one dispatch (which makes its
/// answer the request's result, whatever happens to it).
#[derive(Message)]
#[rtype(result = "BlahResult")]
pub struct RunBlah {
    pub command: BlahCommand,
    /// It holds a place among those in progress (see the session's
    /// pacing): counted while it runs.
    pub paced: bool,
}

impl Handler<RunBlah> for BlahJobs {
    type Result = ResponseFuture<BlahResult>;

    fn handle(&mut self, RunBlah { command, paced }: RunBlah, ctx: &mut Context<Self>) -> Self::Result {
        // The command (a submit's parsed ad is about 1 KB) is not kept by
        // the work: 100,000 submits may wait for the state database.
        let work = self.work(&command, ctx);
        self.waiting.count(paced, work)
    }
}

/// A job's final status was queued for the gridmanager: its project may
/// retire the job's batch now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FinalStatusQueued {
    pub job_id: String,
}

impl Handler<FinalStatusQueued> for BlahJobs {
    type Result = ();
    fn handle(&mut self, msg: FinalStatusQueued, _: &mut Context<Self>) {
        if let Some(id) = JobId::parse(&msg.job_id) {
            if let Some(project) = self.running.get(&id.project) {
                project.do_send(Delivered { id });
            }
        }
    }
}

/// A project the pool chose for a job: record it (see `BlahJobs::learn`).
#[derive(Message)]
#[rtype(result = "(String, Option<String>, String)")]
pub(crate) struct Learn(pub(crate) String, pub(crate) PathBuf);

impl Handler<Learn> for BlahJobs {
    type Result = MessageResult<Learn>;
    fn handle(&mut self, msg: Learn, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.learn(msg.0, msg.1))
    }
}

/// A status or cancel of a job the state database has a record of.
#[derive(Message)]
#[rtype(result = "BlahResult")]
pub(crate) struct KnownJob {
    pub(crate) id: JobId,
    pub(crate) command: BlahCommand,
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
pub(crate) struct Claimed(pub(crate) JobId);

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
