//! `BLAH_JOB_SUBMIT`: the job's attempt recorded (held saying why if it
//! can't go anywhere) and its id answered at once; its project's
//! `ProjectJobs` submits it in the background.

use actix::prelude::*;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::BlahResult;

use super::ready;
use crate::job::BlahJob;
use crate::job_records::{self, JobRecords};
use crate::jobs::{BlahJobs, Claimed, Learn, Work};
use crate::map::{self, JobId, MapError, UNCONFIGURED};
use crate::outputs::held_ad;
use crate::placement::pool_placement;
use crate::shared_batch;

impl BlahJobs {
    /// Records the attempt and answers its id at once; the project actor
    /// submits it in the background. A job that can't go anywhere still
    /// gets an id: its status then says why it is held. The ad is read
    /// here, once, into the typed job that is recorded (`crate::job`).
    pub(crate) fn submit(&mut self, ad: &ClassAd, ctx: &Context<Self>) -> Work {
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
