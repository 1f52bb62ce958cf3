//! The `BLAH_*` commands, a file each: what BlahJobs does for each (the
//! one dispatch hands it every `BLAH_*` command as `RunBlah`). Most go on
//! to the job's project, its `ProjectJobs`.

use std::future::Future;

use actix::prelude::*;
use gahp_protocol::gahp::{BlahCommand, BlahResult};

use crate::job_records;
use crate::jobs::{BlahJobs, KnownJob, Work};
use crate::map::JobId;

mod job_cancel;
mod job_refresh_proxy;
mod job_status;
mod job_submit;
mod ping;

impl BlahJobs {
    /// The work of one command (run as a task of its own).
    pub(crate) fn work(&mut self, command: &BlahCommand, ctx: &Context<Self>) -> Work {
        match command {
            BlahCommand::Ping { .. } => self.ping(),
            BlahCommand::JobSubmit { ad } => self.submit(ad, ctx),
            BlahCommand::JobStatus { job_id } => self.status(job_id, ctx),
            BlahCommand::JobCancel { job_id } => self.cancel(job_id, ctx),
            BlahCommand::JobRefreshProxy { .. } => job_refresh_proxy::run(),
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
}

pub(crate) fn ready(r: BlahResult) -> Work {
    Box::pin(std::future::ready(r))
}

/// The reply of a project actor; if it died, an error of the right shape.
pub(crate) fn forward(reply: impl Future<Output = Result<BlahResult, MailboxError>> + 'static, code: &'static str) -> Work {
    Box::pin(async move {
        reply.await.unwrap_or_else(|_| {
            BlahResult::failure_of(code, format!("{code} failed: internal error (the project's BLAH worker stopped); try again"))
        })
    })
}
