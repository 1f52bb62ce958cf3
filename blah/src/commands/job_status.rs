//! `BLAH_JOB_STATUS`: answered by the job's project (`ProjectJobs`), or
//! from its record when no project can answer for it.

use actix::prelude::*;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::{BlahCommand, BlahResult};

use super::{forward, ready};
use crate::job_records;
use crate::jobs::{BlahJobs, Work};
use crate::map::{JobId, MapError, UNCONFIGURED};
use crate::outputs::held_ad;
use crate::project_jobs::Status;

impl BlahJobs {
    pub(crate) fn status(&mut self, job_id: &str, ctx: &Context<Self>) -> Work {
        let Some(id) = JobId::parse(job_id) else {
            return ready(not_ours(job_id));
        };
        if self.config.blah.known_jobs_only {
            return self.if_known(id, ctx, BlahCommand::JobStatus { job_id: job_id.into() }, not_ours(job_id));
        }
        self.status_known(id)
    }

    pub(crate) fn status_known(&mut self, id: JobId) -> Work {
        if id.project == UNCONFIGURED {
            let reason = MapError::NoProject { config: crate::map_error::config_name(&self.config.blah) }.hold_reason();
            return self.recorded_status(id.job, reason);
        }
        match self.project(&id.project) {
            Ok(p) => forward(p.send(Status { id }), "BLAH_JOB_STATUS"),
            Err(reason) => self.recorded_status(id.job, reason),
        }
    }

    /// A job no project actor can answer for: its recorded final status,
    /// else held with `reason`.
    pub(crate) fn recorded_status(&mut self, batch: String, reason: String) -> Work {
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
}

fn not_ours(job_id: &str) -> BlahResult {
    let error = format!("{job_id} is not a job id of this BOINC GAHP");
    BlahResult::Status { code: 1, error, status: 0, ad: None }
}
