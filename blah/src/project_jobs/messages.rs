//! The actor's API: what the BLAH dispatcher sends it.

use actix::prelude::*;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::{AsyncCommand, BlahResult, CommandResult};
use tokio::sync::oneshot;

use super::*;
use crate::job_records::{self, Phase};
use crate::map::JobId;
use gahp_broker::registry::TreeOf;
use gahp_project::tree::Run;

/// Make sure a job is loaded (and its submission running).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Track {
    pub id: JobId,
}

impl Handler<Track> for ProjectJobs {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Track, _: &mut Context<Self>) -> Self::Result {
        // A job watched (or held) by its id alone, its record lost with
        // the state database, has just been submitted again and recorded
        // (a condor_release): it is loaded again from its new record, and
        // its submission adopts the BOINC job of its name.
        if self.jobs.get(msg.id.job.as_str()).is_some_and(|j| !j.recorded && !j.busy) {
            self.jobs.remove(msg.id.job.as_str());
        }
        self.load(msg.id)
    }
}

/// BLAH_JOB_STATUS of one of this project's jobs.
#[derive(Message)]
#[rtype(result = "BlahResult")]
pub struct Status {
    pub id: JobId,
}

impl Handler<Status> for ProjectJobs {
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

impl Handler<Cancel> for ProjectJobs {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, msg: Cancel, _: &mut Context<Self>) -> Self::Result {
        let Cancel { id, reply } = msg;
        let batch = id.job.clone();
        Box::pin(self.load(id).map(move |(), act, ctx| {
            let Some(job) = act.jobs.get_mut(batch.as_str()) else { return };
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

impl Handler<Delivered> for ProjectJobs {
    type Result = ();
    fn handle(&mut self, msg: Delivered, ctx: &mut Context<Self>) {
        let name = msg.id.job;
        let Some(job) = self.jobs.get_mut(name.as_str()) else { return };
        if job.retired || !matches!(job.final_status(), Some((job_status::REMOVED | job_status::COMPLETED, _))) {
            return;
        }
        job.retired = true;
        let batch = job.batch.to_string();
        let is_sequence = job.is_sequence();
        // Answered from the state database if ever asked again.
        self.jobs.remove(name.as_str());
        self.store.write("store a delivery", move |c| job_records::set_retired(c, &name));
        if !is_sequence {
            self.retire_if_done(batch, ctx);
        }
    }
}

/// BLAH_PING: the project's ping_server, as BOINC_PING does it.
#[derive(Message)]
#[rtype(result = "BlahResult")]
pub struct Ping;

impl Handler<Ping> for ProjectJobs {
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
