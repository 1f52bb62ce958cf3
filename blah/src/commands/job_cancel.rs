//! `BLAH_JOB_CANCEL`: the attempt marked cancelled, then aborted on BOINC
//! by its project (`ProjectJobs`).

use actix::prelude::*;
use gahp_protocol::gahp::{BlahCommand, BlahResult};
use tokio::sync::oneshot;

use super::{forward, ready};
use crate::job_records;
use crate::jobs::{BlahJobs, Work};
use crate::map::{JobId, UNCONFIGURED};
use crate::project_jobs::Cancel;

impl BlahJobs {
    /// Marks the attempt cancelled (before anything else, so a resubmit of
    /// its JobDirectory makes a new attempt) and aborts it on BOINC. Code
    /// 0 for ids that are not ours or never reached a project: gone.
    pub(crate) fn cancel(&mut self, job_id: &str, ctx: &Context<Self>) -> Work {
        let Some(id) = JobId::parse(job_id) else {
            tracing::info!("BLAH_JOB_CANCEL of an id that is not ours: {job_id}");
            return ready(BlahResult::ok());
        };
        if self.config.blah.known_jobs_only {
            return self.if_known(id, ctx, BlahCommand::JobCancel { job_id: job_id.into() }, BlahResult::ok());
        }
        self.cancel_known(id)
    }

    pub(crate) fn cancel_known(&mut self, id: JobId) -> Work {
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
