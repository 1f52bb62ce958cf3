//! A finished job's files placed before its status turns final, from
//! the batch's zip or one download each.

use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::blah::job_status;

use super::*;
use crate::batch_zip::{self, SharedBatchZip};
use crate::map;
use crate::outputs::{deliver_done, deliver_runner_done, held_ad, resolve_error};
use gahp_project::output_fetcher::completed_job;
use gahp_project::rpc::RpcClient;
use gahp_project::ProjectKey;

impl ProjectJobs {
    /// Places a DONE job's files, then makes its status 4.
    pub(super) fn deliver(&mut self, batch: String, ctx: &mut Context<Self>) {
        if self.rpc.is_none() || !self.claim(&batch) {
            return;
        }
        self.read_jobs(ctx, vec![batch], |act, jobs, ctx| {
            for (batch, submitted) in jobs {
                act.deliver_with(batch, submitted, ctx);
            }
        });
    }

    /// Marks a job busy (its typed job is being read for it); false if it
    /// is not in memory.
    fn claim(&mut self, job: &str) -> bool {
        self.jobs.get_mut(job).map(|j| j.busy = true).is_some()
    }

    fn deliver_with(&mut self, batch: String, submitted: Option<BlahJob>, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(delivery) = self.delivery(&batch, submitted, ctx) else { return };
        let key = self.key.clone();
        let deadline = Instant::now() + self.config.command_timeout;
        let work = async move { delivery.run(&rpc, &key, None, deadline).await };
        self.run(ctx, work, move |act, r, _| act.settled(&batch, r));
    }

    /// Places the files of several DONE jobs of one BOINC batch from the
    /// batch's zip (one download), each job's status then 4; what the zip
    /// does not cover, or all of it if the zip can't be had, is downloaded
    /// job by job.
    pub(super) fn deliver_from_zip(&mut self, boinc_batch: String, jobs: Vec<String>, ctx: &mut Context<Self>) {
        if self.rpc.is_none() {
            return;
        }
        let jobs: Vec<String> = jobs.into_iter().filter(|j| self.claim(j)).collect();
        self.read_jobs(ctx, jobs, move |act, jobs, ctx| act.deliver_from_zip_with(boinc_batch, jobs, ctx));
    }

    fn deliver_from_zip_with(&mut self, boinc_batch: String, jobs: Vec<(String, Option<BlahJob>)>, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let deliveries: Vec<Delivery> = jobs.into_iter().filter_map(|(j, submitted)| self.delivery(&j, submitted, ctx)).collect();
        if deliveries.is_empty() {
            return;
        }
        let key = self.key.clone();
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
            let (rpc, key, zip) = (&rpc, &key, zip.as_ref());
            let results: Vec<(String, DeliveryOutcome)> = futures_util::stream::iter(deliveries)
                .map(|d| async move {
                    let r = d.run(rpc, key, zip, deadline).await;
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

    /// What delivering a DONE job needs, with its typed job as read; the
    /// job is then busy. A job without its record is held (nothing says
    /// where its files go), with a reason that says what a release does.
    pub(super) fn delivery(&mut self, batch: &str, submitted: Option<BlahJob>, ctx: &mut Context<Self>) -> Option<Delivery> {
        let job = self.jobs.get_mut(batch)?;
        let Some(submitted) = submitted else {
            // Nothing is in flight for it: a resubmit may take it over.
            job.busy = false;
            self.hold_unrecorded(batch.to_string(), ctx);
            return None;
        };
        job.busy = true;
        let templates = submitted.app.as_ref().ok().and_then(|app| self.templates(&app.name));
        let limits = map::unpack_limits(&submitted, self.config.unpack);
        Some(Delivery { job: batch.to_string(), submitted, templates, completed: self.completed.clone(), limits })
    }

    /// Holds a DONE job the state database has no record of. A release
    /// submits it again: when its record was lost with the database (not
    /// forgotten), under this job's own name (`lost_record_claims_again`),
    /// so the submission finds this BOINC job by name and adopts it, and
    /// its outputs are delivered; else a new BOINC job runs.
    fn hold_unrecorded(&mut self, batch: String, ctx: &mut Context<Self>) {
        let store = self.store.clone();
        let attempt = batch.rsplit_once('#').and_then(|(_, n)| n.parse::<i64>().ok());
        let work = async move {
            let Some(n) = attempt else { return false };
            store.read(move |c| job_records::lost_record_claims_again(c, n)).await.unwrap_or_else(|e| {
                tracing::warn!("can't read the forgotten attempts from the state database: {e}");
                false
            })
        };
        self.run(ctx, work, move |act, adopted, _| {
            let reason = if adopted {
                format!(
                    "the daemon has no record of this job (its state database was lost), so its outputs have nowhere to go; \
                     condor_release the job: the daemon then adopts BOINC job {batch}, still on the project, and delivers \
                     its outputs without running it again"
                )
            } else {
                format!("{}, so its outputs have nowhere to go; condor_release the job to run it again as a new BOINC job", act.no_record())
            };
            act.finish(&batch, job_status::HELD, held_ad(&batch, &reason));
        });
    }

    /// Finds out why an ERROR job failed: status 4 with its exit code, or 3.
    pub(super) fn resolve(&mut self, batch: String, ctx: &mut Context<Self>) {
        if self.rpc.is_none() || !self.claim(&batch) {
            return;
        }
        self.read_jobs(ctx, vec![batch], |act, jobs, ctx| {
            for (batch, submitted) in jobs {
                act.resolve_with(batch, submitted, ctx);
            }
        });
    }

    fn resolve_with(&mut self, batch: String, submitted: Option<BlahJob>, ctx: &mut Context<Self>) {
        let Some(rpc) = self.rpc.clone() else { return };
        let Some(job) = self.jobs.get_mut(batch.as_str()) else { return };
        job.busy = true;
        let (key, boinc_batch) = (self.key.clone(), job.batch.to_string());
        let deadline = Instant::now() + self.config.command_timeout;
        let b = batch.clone();
        let work = async move { resolve_error(&rpc, &key, &boinc_batch, &b, submitted.as_ref(), deadline).await };
        self.run(ctx, work, move |act, r, _| act.settled(&batch, r));
    }

    /// A delivery or failure lookup ended: final, or retried at the next
    /// refresh until `output_fetch_attempts` failures hold the job.
    pub(super) fn settled(&mut self, batch: &str, r: Result<(i32, ClassAd), String>) {
        let attempts = self.config.blah.output_fetch_attempts.max(1);
        let Some(job) = self.jobs.get_mut(batch) else { return };
        job.busy = false;
        match r {
            Ok((status, ad)) => self.finish(batch, status, ad),
            Err(e) => {
                let failures = job.failed();
                let e = self.key.authenticator.redact_in(&e);
                tracing::info!(batch, failures, "finishing the job failed: {e}");
                if failures >= attempts {
                    let reason = format!("can't finish BOINC job {batch}: {e}; condor_release the job to run it again");
                    self.finish(batch, job_status::HELD, held_ad(batch, &reason));
                }
            }
        }
    }
}

impl Delivery {
    pub(super) async fn run(
        &self,
        rpc: &Addr<RpcClient>,
        key: &ProjectKey,
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
        let done = if templates.is_runner() {
            deliver_runner_done(rpc, key, &self.job, &self.submitted, &templates, &completed, zip, self.limits, deadline).await?
        } else {
            deliver_done(rpc, key, &self.job, &self.submitted, &templates, &completed, zip, self.limits, deadline).await?
        };
        Ok((job_status::COMPLETED, done))
    }
}
