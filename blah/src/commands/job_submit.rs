//! `BLAH_JOB_SUBMIT`: the job's attempt recorded (held saying why if it
//! can't go anywhere) and its id answered at once; its project's
//! `ProjectJobs` submits it in the background.

use actix::prelude::*;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::BlahResult;

use super::ready;
use crate::job_records::{self, JobRecords};
use crate::jobs::{BlahJobs, Claimed, Learn, Work};
use crate::map::{self, JobId, MapError, UNCONFIGURED};
use crate::outputs::held_ad;
use crate::placement::pool_placement;
use crate::sequence_ad;
use crate::shared_batch;

impl BlahJobs {
    /// Records the attempt and answers its id at once; the project actor
    /// submits it in the background. A job that can't go anywhere still
    /// gets an id: its status then says why it is held.
    pub(crate) fn submit(&mut self, ad: &ClassAd, ctx: &Context<Self>) -> Work {
        let Some(job_dir) = ad.get_str("JobDirectory").map(str::trim).filter(|d| !d.is_empty()).map(String::from) else {
            return ready(BlahResult::Submit { code: 1, error: MapError::Missing("JobDirectory").to_string(), job_id: None });
        };
        // A bad sequence value is refused here, before there is a job to hold.
        let sequence = match sequence_ad::settings(ad) {
            Ok(s) => s.is_some(),
            Err(e) => {
                let error = format!("this work sequence can't be submitted: {e}");
                return ready(BlahResult::Submit { code: 1, error, job_id: None });
            }
        };
        // Jobs of one project, app and requests may share a batch (the
        // bounds are batch-wide in submit_batch); a sequence is one job of
        // its own.
        let gather_key = map::gather_key(ad, &self.config.blah).filter(|_| !sequence);
        let job = Submitted { job_dir, text: ad.to_string(), gather_key, prefix: self.config.blah.name_prefix.clone() };
        // A job that names no project goes where the pool's matchmaking puts it.
        if let Some(place) = pool_placement(ad, &self.config.blah) {
            let (pools, store, me) = (self.pools.clone(), self.store.clone(), ctx.address());
            return Box::pin(async move {
                let (pkey, held, account) = match pools.send(place).await {
                    Ok(Ok(choice)) => me.send(Learn(choice.url, choice.authenticator_file)).await.unwrap_or_else(|_| {
                        (UNCONFIGURED.to_string(), Some("internal error: the BLAH front end stopped".into()), String::new())
                    }),
                    Ok(Err(reason)) => (UNCONFIGURED.to_string(), Some(reason), String::new()),
                    Err(_) => (UNCONFIGURED.to_string(), Some("internal error: the broker stopped".into()), String::new()),
                };
                claim(store, me, job, pkey, account, held).await
            });
        }
        let (pkey, held, account) = match map::choose_project(ad, &self.config.blah) {
            Ok(choice) => self.learn(choice.url, choice.authenticator_file),
            Err(e) => (UNCONFIGURED.to_string(), Some(e.hold_reason()), String::new()),
        };
        Box::pin(claim(self.store.clone(), ctx.address(), job, pkey, account, held))
    }
}

/// A submitted job as its attempt is recorded: its `JobDirectory`, its ad,
/// the key of the batches it may share, its BOINC names' prefix.
struct Submitted {
    job_dir: String,
    text: String,
    gather_key: Option<String>,
    prefix: String,
}

/// Records the job's attempt on project `pkey` (held with `held` if set;
/// else joining the open BOINC batch of its gathering key on `account`, the
/// project's URL and account, if any) and answers its id.
async fn claim(store: JobRecords, me: Addr<BlahJobs>, job: Submitted, pkey: String, account: String, held: Option<String>) -> BlahResult {
    let Submitted { job_dir, text, gather_key, prefix } = job;
    let gathering = store.gathering.clone();
    let held_reason = held.clone();
    let condor_job = map::condor_job_id_of_dir(&job_dir).unwrap_or_else(|| "unknown".into());
    let claimed = store
        .read(move |c| {
            let hold = held.map(|reason| move |batch: &str| held_ad(batch, &reason).to_string());
            let key = gather_key.map(|k| format!("{account}\n{k}"));
            let participant = shared_batch::participant(&prefix, &pkey);
            let gather = key.as_deref().map(|k| (&gathering, k, participant.as_str()));
            job_records::claim_attempt(c, &job_dir, &pkey, &text, hold.as_ref().map(|f| f as &dyn Fn(&str) -> String), gather, &prefix)
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
