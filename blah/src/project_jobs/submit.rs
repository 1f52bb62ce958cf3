//! Jobs gathered into shared BOINC batches and submitted through the
//! project's SubmitPipeline; an app's templates fetched once per period.

use std::path::Path;
use std::time::{Duration, Instant};

use actix::prelude::*;
use gahp_protocol::boinc::Templates;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::SubmitBatch;

use super::*;
use crate::input_files;
use crate::job::BlahJob;
use crate::job_records::{self, JobRecord, Phase};
use crate::map;
use crate::outputs::held_ad;
use crate::runner;
use crate::shared_batch;
use crate::url_inputs::{self, UrlInputs};
use gahp_services::clock::unix_now;
use gahp_services::config::BlahConfig;

impl ProjectJobs {
    /// Lets a batch gather jobs for the window, then submits it.
    pub(super) fn gather(&mut self, batch: String, ctx: &mut Context<Self>) {
        if self.submitting.insert(batch.clone()) {
            ctx.run_later(self.config.blah.batch_window, move |act, ctx| act.close(batch, ctx));
        }
    }

    /// The app's templates: one get_templates per cache period, shared by
    /// every submission and delivery that wants them meanwhile.
    pub(super) fn templates(&mut self, app: &str) -> Option<TemplatesCall> {
        let rpc = self.rpc.clone()?;
        let deadline = Instant::now() + self.config.command_timeout;
        Some(gahp_project::templates::templates_of(&self.key, &rpc, app, deadline))
    }

    /// Closes a gathering batch and submits its members in the background:
    /// the mapping of each, then one SubmitPipeline (as BOINC_SUBMIT's, with
    /// a long deadline: it retries transient failures, and after a lost
    /// reply or a restart finds what it began by the batch's name).
    pub(super) fn close(&mut self, batch: String, ctx: &mut Context<Self>) {
        let (store, gathering, b, pkey) = (self.store.clone(), self.store.gathering.clone(), batch.clone(), self.pkey.clone());
        let participant = shared_batch::participant(&self.config.blah.name_prefix, &self.pkey);
        let members = async move {
            store
                .read(move |c| Ok((job_records::close_batch(c, &gathering, &b)?, job_records::opened_batch(c, &b, &pkey, &participant)?)))
                .await
        };
        self.run(ctx, members, move |act, members, ctx| match members {
            Ok((members, owner)) => act.submit(batch, members, owner, ctx),
            Err(e) => {
                tracing::warn!(batch = %batch, "can't read the batch's jobs ({e}); trying again later");
                ctx.run_later(act.config.blah.status_refresh.max(Duration::from_secs(1)), move |act, ctx| act.close(batch, ctx));
            }
        });
    }

    /// `owner`: the batch is named after one of this project's jobs.
    pub(super) fn submit(&mut self, batch: String, records: Vec<JobRecord>, owner: bool, ctx: &mut Context<Self>) {
        let mut members = Vec::new();
        for rec in records {
            let name = rec.batch.clone();
            // The typed job comes with the record (a job in memory keeps none).
            let submitted = match self.jobs.get(name.as_str()) {
                Some(job) if job.recorded => BlahJob::from_record(rec.job.as_deref(), &rec.ad, &self.config.blah).ok().flatten(),
                Some(_) => None,
                None => {
                    let (job, submitted) = Job::from_record_with_job(rec, &mut self.batch_names, &self.config.blah);
                    self.jobs.insert(&name, job);
                    submitted
                }
            };
            let Some(job) = self.jobs.get_mut(name.as_str()) else { continue };
            // Cancelled since the database said otherwise.
            if job.phase == Phase::Submitting {
                job.busy = true;
                job.submitting();
                members.push((name, submitted));
            }
        }
        // A sequence job is never gathered with others: it is alone.
        if let [(name, Some(submitted))] = members.as_slice() {
            if submitted.is_sequence() {
                let (name, submitted) = (name.clone(), submitted.clone());
                return self.submit_sequence(batch, name, submitted, ctx);
            }
        }
        let participant = shared_batch::participant(&self.config.blah.name_prefix, &self.pkey);
        let (gathering, window) = (self.store.gathering.clone(), self.config.blah.batch_window);
        let Some(rpc) = self.rpc.clone().filter(|_| !members.is_empty()) else {
            shared_batch::withdraw(&gathering, window, &batch, &participant);
            self.submitting.remove(&batch);
            return;
        };
        let cfg = self.config.blah.clone();
        let daemon = self.config.clone();
        let state_dir = self.config.state_dir.clone();
        // Every member has the app of the batch's gathering key.
        let app = members.iter().find_map(|(_, job)| job.as_ref()?.app.as_ref().ok()).cloned();
        let templates = app.as_ref().and_then(|app| self.templates(&app.name));
        let deadline = Instant::now() + cfg.submit_timeout;
        let (key, config, stager) = (self.key.clone(), self.pipeline_config.clone(), self.stager.clone());
        let db = self.store.db().clone();
        let file = self.authenticator_file.display().to_string();
        let b = batch.clone();
        let withdraw = {
            let (gathering, batch, participant) = (gathering.clone(), batch.clone(), participant.clone());
            move || shared_batch::withdraw(&gathering, window, &batch, &participant)
        };
        let work = async move {
            let mut refused = Vec::new();
            let (Some(app), Some(templates)) = (app, templates) else {
                // No member has an app (or a record).
                for (name, job) in members {
                    let why = match job.as_ref().map(BlahJob::app) {
                        Some(Err(e)) => SubmitFailure::Map(e),
                        _ => SubmitFailure::Lost("the submit ad of this job was lost; condor_release the job"),
                    };
                    refused.push((name, why));
                }
                withdraw();
                return (BatchOutcome { refused, result: Ok(vec![]) }, None);
            };
            let all: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
            let templates = match templates.await {
                Ok(t) => t,
                Err(e) => {
                    let reason = templates_error(&e, &key.url, &file, &app.name, app.source.as_str());
                    withdraw();
                    return (BatchOutcome { refused, result: Err((all, SubmitFailure::Templates(reason, e))) }, None);
                }
            };
            let scratch = runner::scratch_dir(&state_dir, &b);
            // The members' URL inputs, each fetched once for the batch.
            let entries = members.iter().filter_map(|(_, job)| job.as_ref()).flat_map(|job| job.inputs.iter().map(String::as_str));
            let urls = url_inputs::urls_of(entries);
            let urls = if urls.is_empty() {
                UrlInputs::fetched(Default::default())
            } else if !cfg.name_prefix.is_empty() {
                // serve's host would fetch them, with its network access.
                UrlInputs::refused("is a URL, and a client of boinc_gahp serve sends local files only: give local files")
            } else {
                UrlInputs::fetched(url_inputs::fetch_all(urls, &scratch.join("urls"), &daemon).await)
            };
            // Off the actors' thread: a runner job's archive reads its inputs.
            let templates2 = templates.clone();
            let (app2, b2, scratch2) = (app.name.clone(), b.clone(), scratch.clone());
            let mapped = tokio::task::spawn_blocking(move || map_members(members, &b2, &app2, &templates, &cfg, &scratch2, &urls)).await;
            let (spec, included, mut more) = match mapped {
                Ok(m) => m,
                Err(e) => {
                    runner::remove_scratch(&scratch);
                    withdraw();
                    return (BatchOutcome { refused, result: Err((all, SubmitFailure::Internal(e.to_string()))) }, None);
                }
            };
            refused.append(&mut more);
            if included.is_empty() {
                runner::remove_scratch(&scratch);
                withdraw();
                return (BatchOutcome { refused, result: Ok(vec![]) }, None);
            }
            // With the other participants of the batch, if any (one pipeline).
            let submitter = shared_batch::Submitter { key, config, rpc, stager, db, deadline };
            let part = shared_batch::Part { participant, owner, spec, templates: templates2, submitter };
            let submitted = shared_batch::submit(&gathering, window, part).await;
            runner::remove_scratch(&scratch);
            match submitted {
                Ok(into) => (BatchOutcome { refused, result: Ok(included) }, Some(into).filter(|into| *into != b)),
                Err(e) => (BatchOutcome { refused, result: Err((included, SubmitFailure::Pipeline(e))) }, None),
            }
        };
        self.run(ctx, work, move |act, (outcome, moved_to), ctx| {
            if let (Some(own), Ok(members)) = (moved_to, &outcome.result) {
                act.moved(members, own);
            }
            act.submitted(batch, outcome, ctx)
        });
    }

    pub(super) fn submitted(&mut self, batch: String, outcome: BatchOutcome, ctx: &mut Context<Self>) {
        for (name, why) in outcome.refused {
            let reason = self.auth().redact_in(&why.to_string());
            self.member_failed(&name, &reason, ctx);
        }
        match outcome.result {
            Ok(members) => {
                self.submitting.remove(&batch);
                let until = unix_now() + self.config.blah.lease.as_secs_f64();
                let mut submitted = Vec::with_capacity(members.len());
                for name in members {
                    let Some(job) = self.jobs.get_mut(name.as_str()) else { continue };
                    job.busy = false;
                    if job.phase == Phase::Cancelled {
                        // Cancelled while it was being submitted: abort it now.
                        self.abort(name, ctx, None);
                        continue;
                    }
                    job.phase = Phase::Active;
                    // Created with the lease as its expiry (see pipeline_config).
                    job.lease_until = until;
                    job.submitted();
                    submitted.push(name);
                }
                self.store.write_rows("store a submission", submitted, move |c, j| {
                    job_records::set_phase(c, j, Phase::Active, None, None)?;
                    job_records::set_lease(c, j, until)
                });
                tracing::info!(batch = %batch, project = %self.key.url, "submitted to BOINC");
            }
            Err((members, why)) => {
                let timeout = self.config.blah.submit_timeout;
                let waiting = members.iter().filter_map(|n| self.jobs.get(n.as_str())).filter_map(Job::submitting_since).min();
                if why.project_down() && waiting.is_some_and(|t| t.elapsed() < timeout) {
                    tracing::info!(batch = %batch, "the project is down for maintenance; submitting again later: {}", self.auth().redact_in(&why.to_string()));
                    for name in &members {
                        if let Some(job) = self.jobs.get_mut(name.as_str()) {
                            job.busy = false;
                        }
                    }
                    ctx.run_later(self.config.blah.status_refresh.max(Duration::from_secs(1)), move |act, ctx| act.close(batch, ctx));
                    return;
                }
                self.submitting.remove(&batch);
                // The edge: the typed failure becomes the hold reason here.
                let reason = self.auth().redact_in(&why.to_string());
                for name in members {
                    self.member_failed(&name, &reason, ctx);
                }
            }
        }
    }

    /// The shared batch was submitted without these members: they went
    /// into a batch of their own (`blah::shared_batch`).
    fn moved(&mut self, members: &[String], own: String) {
        let name = self.batch_names.share(&own);
        for m in members {
            if let Some(job) = self.jobs.get_mut(m.as_str()) {
                job.batch = name.clone();
            }
        }
        self.store.write_rows("store a job's own batch", members.to_vec(), move |c, j| job_records::set_boinc_batch(c, j, &own));
    }

    /// A member that did not go in: held with `reason` (aborted if
    /// cancelled meanwhile: an earlier attempt may have made it).
    pub(super) fn member_failed(&mut self, name: &str, reason: &str, ctx: &mut Context<Self>) {
        let Some(job) = self.jobs.get_mut(name) else { return };
        job.busy = false;
        if job.phase == Phase::Cancelled {
            return self.abort(name.to_string(), ctx, None);
        }
        self.finish(name, job_status::HELD, held_ad(name, reason));
    }
}

/// Maps each member onto the batch (a runner job's archive written into
/// `scratch`; its URL inputs are the files of `urls`): the batch, the
/// members in it, and those refused. Each member's inputs are staged (the
/// IO, `input_files`) after its pure mapping (`map`).
fn map_members(
    members: Vec<(String, Option<BlahJob>)>,
    batch: &str,
    app: &str,
    templates: &Templates,
    cfg: &BlahConfig,
    scratch: &Path,
    urls: &UrlInputs,
) -> (SubmitBatch, Vec<String>, Vec<(String, SubmitFailure)>) {
    let mut spec = SubmitBatch { batch_name: batch.to_string(), app_name: app.to_string(), jobs: Vec::new(), params: Default::default() };
    let (mut included, mut refused) = (Vec::new(), Vec::new());
    let is_runner = templates.is_runner();
    for (name, job) in members {
        let Some(job) = job else {
            refused.push((name, SubmitFailure::Lost("the submit ad of this job was lost; condor_release the job")));
            continue;
        };
        let mapped = job.app().and_then(|a| {
            let mapped = map::submit_batch_with_urls(&job, &name, templates, cfg, urls)?;
            let one = input_files::stage(mapped, Some(scratch))?;
            // Where its files will go can be told now (a runner's outputs
            // are only known once the job has run).
            if is_runner {
                map::runner_placement(&job)?;
            } else {
                map::output_plan(&job, &a.name, &templates.outputs)?;
            }
            Ok((a.name.clone(), one))
        });
        match mapped {
            Ok((a, _)) if a != app => {
                refused.push((name, SubmitFailure::Lost("its app changed while it waited for its batch; condor_release the job")))
            }
            Ok((_, one)) => {
                // The batch takes the first member's batch-wide parameters
                // (its gathering key makes them the same for all).
                if spec.jobs.is_empty() {
                    spec.params = one.params;
                }
                spec.jobs.extend(one.jobs);
                included.push(name);
            }
            Err(e) => refused.push((name, SubmitFailure::Map(e))),
        }
    }
    (spec, included, refused)
}
