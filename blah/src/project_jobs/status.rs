//! BLAH_JOB_STATUS from the cache, and the cache's refresh: one
//! query_batch2 over every watched batch per period.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::BlahResult;
use gahp_protocol::Authenticator;

use super::*;
use crate::batch_zip;
use crate::job_records::{self, Phase};
use crate::outputs::{held_ad, status_ad};
use gahp_project::rpc::{Rpc, RpcClient, RpcError, StreamedReply};
use gahp_sequences::relocator::QueryStarted;

impl ProjectJobs {
    pub(super) fn status(&mut self, batch: &str, ctx: &mut Context<Self>) -> BlahResult {
        // `batch` is the job's name, which its status ad calls BatchjobId.
        let Some(job) = self.jobs.get(batch) else {
            return BlahResult::Status { code: 1, error: "internal error: job not loaded".into(), status: 0, ad: None };
        };
        let status = match (job.final_status(), job.phase, job.boinc()) {
            (Some((status, ad)), ..) => {
                let r = BlahResult::status(*status, ad.clone());
                // A delivered job was loaded from the state database only
                // to answer this: nothing is left to watch, and kept in
                // memory it would stay there for the daemon's lifetime (a
                // job each, the gridmanager asks after every one).
                if job.retired {
                    self.jobs.remove(batch);
                }
                return r;
            }
            (None, Phase::Cancelled, _) => job_status::REMOVED,
            (None, Phase::Active, Some("IN_PROGRESS" | "DONE" | "ERROR")) => job_status::RUNNING,
            (None, Phase::Active, None) if !job.recorded => {
                self.refresh(ctx);
                let error = format!("the state of BOINC job {batch} is not known yet; asked {}", self.key.url);
                return BlahResult::Status { code: 1, error, status: 0, ad: None };
            }
            _ => job_status::IDLE,
        };
        BlahResult::status(status, status_ad(batch, status))
    }

    /// A status: a running sequence job's from its sequence, else `status`.
    pub(super) fn answer(&mut self, job: String, ctx: &mut Context<Self>) -> ResponseActFuture<Self, BlahResult> {
        let name = self.jobs.get(job.as_str()).filter(|j| j.watched()).and_then(Job::sequence_name);
        match (name, self.sequences.clone()) {
            (Some(name), Some(relocator)) => Box::pin(
                async move { relocator.send(QueryStarted { name }).await }
                    .into_actor(self)
                    .map(move |r, act, ctx| act.sequence_status(&job, r, ctx)),
            ),
            _ => Box::pin(fut::ready(self.status(&job, ctx))),
        }
    }

    /// One query_batch2 over every watched batch; coalesced.
    pub(super) fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing {
            self.refresh_again = true;
            return;
        }
        let Some(rpc) = self.rpc.clone() else { return };
        let names = batches_of(self.jobs.values().filter(|j| j.watched() && !j.is_sequence()));
        if names.is_empty() {
            return;
        }
        self.refreshing = true;
        let auth = self.auth().clone();
        let deadline = Instant::now() + self.config.rpc_timeout;
        self.run(ctx, async move { query_states(&rpc, &auth, names, deadline).await }, |act, r, ctx| {
            act.refreshing = false;
            match r {
                Ok(states) => act.refreshed(states, ctx),
                Err(e) => tracing::info!(project = %act.key.url, "status refresh failed, reporting the last known states: {}", act.auth().redact_in(&e.to_string())),
            }
            if std::mem::take(&mut act.refresh_again) {
                act.refresh(ctx);
            }
        });
    }

    pub(super) fn refreshed(&mut self, states: BatchStates, ctx: &mut Context<Self>) {
        let BatchStates { states, answered, finished, gone } = states;
        let gone: HashMap<String, String> = gone.into_iter().collect();
        let mut lost = Vec::new();
        for (name, job) in self.jobs.iter_mut().filter(|(_, j)| j.watched() && !j.is_sequence()) {
            match states.get(name) {
                Some(status) if job.boinc() != Some(status.as_str()) => {
                    job.set_boinc(status);
                    job.boinc_unsaved = true;
                }
                Some(_) => {}
                None => match gone.get(&*job.batch) {
                    Some(why) => lost.push((Box::<str>::from(name), format!("its batch {} is not there: {why}", job.batch))),
                    None if answered.contains(&*job.batch) => {
                        lost.push((Box::<str>::from(name), format!("its batch {} has no such job", job.batch)))
                    }
                    // Not asked about (it was submitted while the query was out).
                    None => {}
                },
            }
        }
        self.save_statuses(ctx);
        for (name, why) in lost {
            let url = &self.key.url;
            let reason = if self.jobs.get(&name).is_some_and(|j| !j.recorded) {
                format!("BOINC job {name} is not on {url} ({why}), and {}; condor_release the job to submit it again", self.no_record())
            } else {
                format!(
                    "BOINC job {name} is not on {url} ({why}): it was never created (the daemon stopped while submitting it?) \
                     or was removed there; condor_release the job to submit it again"
                )
            };
            self.finish(&name, job_status::HELD, held_ad(&name, &reason));
        }
        // Only the jobs with something to do now (not every job in flight).
        let todo: Vec<(String, String)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.watched() && !j.busy)
            .filter_map(|(b, j)| j.boinc().map(|s| (b, s)))
            .filter(|(_, s)| matches!(*s, "DONE" | "ERROR"))
            .map(|(b, s)| (b.to_string(), s.to_string()))
            .collect();
        // DONE jobs by BOINC batch: several of one batch may share its zip.
        let mut done: HashMap<String, Vec<String>> = HashMap::new();
        for (job, status) in todo {
            match status.as_str() {
                "DONE" => match self.jobs.get(job.as_str()) {
                    Some(j) if j.recorded => done.entry(j.batch.to_string()).or_default().push(job),
                    _ => self.deliver(job, ctx),
                },
                "ERROR" => self.resolve(job, ctx),
                _ => {}
            }
        }
        for (batch, jobs) in done {
            if batch_zip::worth_a_zip(jobs.len(), finished.get(&batch).copied().unwrap_or(0)) {
                self.deliver_from_zip(batch, jobs, ctx);
            } else {
                for job in jobs {
                    self.deliver(job, ctx);
                }
            }
        }
    }

    /// Writes the BOINC statuses a refresh changed, a piece at a time: the
    /// next piece is copied out once the last is written, not all 100,000
    /// at once (3 MB at the peak of the memory bench).
    pub(super) fn save_statuses(&mut self, ctx: &mut Context<Self>) {
        if self.saving_statuses {
            return;
        }
        let mut piece = Vec::new();
        for (name, job) in self.jobs.iter_mut().filter(|(_, j)| j.boinc_unsaved) {
            job.boinc_unsaved = false;
            if let Some(status) = job.boinc() {
                piece.push((Box::<str>::from(name), Box::<str>::from(status)));
            }
            if piece.len() == STATUSES_AT_ONCE {
                break;
            }
        }
        if piece.is_empty() {
            return;
        }
        self.saving_statuses = true;
        self.store.write_rows("store a BOINC status", piece, |c, (j, s)| job_records::set_boinc_status(c, j, s));
        // A read runs after the writes queued before it.
        let store = self.store.clone();
        self.run(ctx, async move { store.read(|_| Ok(())).await }, |act, _, ctx| {
            act.saving_statuses = false;
            act.save_statuses(ctx);
        });
    }

    /// Records a job's final status (3, 4 or 5); it is answered from now on.
    pub(super) fn finish(&mut self, batch: &str, status: i32, ad: ClassAd) {
        self.completed.borrow_mut().remove(batch);
        let Some(job) = self.jobs.get_mut(batch) else { return };
        if job.phase == Phase::Cancelled {
            return;
        }
        if status == job_status::HELD {
            // The one line an admin greps for: which HTCondor job, which
            // BOINC batch and job, and why.
            let condor_job = job.condor_job();
            tracing::warn!(
                condor_job = %condor_job,
                boinc_batch = %job.batch,
                boinc_job = %batch,
                "job held: {}",
                ad.get_str("HoldReason").unwrap_or("")
            );
        }
        gahp_services::metrics::global().job_finished(gahp_services::metrics::client_of(&self.config), &self.key.url, status);
        let (b, text) = (batch.to_string(), ad.to_string());
        self.store.write("store a final status", move |c| job_records::set_phase(c, &b, Phase::Final, Some(status), Some(text)));
        job.phase = Phase::Final;
        job.set_final_status(status, ad);
    }

    pub(super) fn final_status(&self, job: &str) -> BlahResult {
        match self.jobs.get(job).and_then(|j| j.final_status().cloned()) {
            Some((status, ad)) => BlahResult::status(status, ad),
            None => BlahResult::Status { code: 1, error: "internal error: no final status".into(), status: 0, ad: None },
        }
    }
}

/// Changed BOINC statuses written in one transaction (see `save_statuses`).
const STATUSES_AT_ONCE: usize = 4096;

/// A query_batch2 reply as the refresh uses it, read as it arrives.
#[derive(Default)]
struct StatesReply {
    states: JobStates,
    /// Per batch asked, in order: how many of its jobs are DONE.
    done: Vec<usize>,
}

impl reply::QueryBatch2Sink for StatesReply {
    fn group(&mut self, batch_size: usize) {
        self.done.push(0);
        self.states.reserve(batch_size.min(1 << 20));
    }
    fn job(&mut self, name: &str, status: &str) {
        if status == "DONE" {
            if let Some(d) = self.done.last_mut() {
                *d += 1;
            }
        }
        self.states.push(name, status);
    }
}

/// The statuses of a query_batch2 reply by job name, compactly: the names
/// in one buffer, a status a byte, found by binary search (about 40 bytes
/// a job, where a map of `String`s took about 110).
#[derive(Default)]
pub(super) struct JobStates {
    names: String,
    /// Where each job's name ends in `names`.
    ends: Vec<u32>,
    /// Each job's status: its index in [`BoincStatus::KNOWN`], or
    /// [`JobStates::OTHER`] with its text in `others`.
    statuses: Vec<u8>,
    /// (job, text) of the statuses this daemon does not know, by job.
    others: Vec<(u32, Box<str>)>,
    /// The jobs by name (see [`JobStates::index`]).
    order: Vec<u32>,
}

impl JobStates {
    const OTHER: u8 = u8::MAX;

    fn reserve(&mut self, jobs: usize) {
        self.ends.reserve(jobs);
        self.statuses.reserve(jobs);
    }

    fn push(&mut self, name: &str, status: &str) {
        // A reply is at most MAX_REPLY (256 MB) long: its names fit.
        let (Ok(job), Ok(end)) = (u32::try_from(self.ends.len()), u32::try_from(self.names.len() + name.len())) else { return };
        self.names.push_str(name);
        self.ends.push(end);
        match BoincStatus::KNOWN.iter().position(|k| *k == status) {
            Some(i) => self.statuses.push(i as u8),
            None => {
                self.statuses.push(JobStates::OTHER);
                self.others.push((job, status.into()));
            }
        }
    }

    fn name(&self, job: u32) -> &str {
        let job = job as usize;
        let start = if job == 0 { 0 } else { self.ends[job - 1] as usize };
        &self.names[start..self.ends[job] as usize]
    }

    /// Sorts the jobs by name for [`JobStates::get`]; done once, when the
    /// reply is whole.
    fn index(&mut self) {
        let mut order: Vec<u32> = (0..self.ends.len() as u32).collect();
        // Stable: of two jobs of one name the later is found, as a map would keep it.
        order.sort_by(|a, b| self.name(*a).cmp(self.name(*b)));
        self.order = order;
        self.names.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.statuses.shrink_to_fit();
    }

    pub(super) fn get(&self, name: &str) -> Option<BoincStatus> {
        let after = self.order.partition_point(|j| self.name(*j) <= name);
        let job = *self.order.get(after.checked_sub(1)?)?;
        if self.name(job) != name {
            return None;
        }
        match self.statuses[job as usize] {
            JobStates::OTHER => {
                let at = self.others.binary_search_by_key(&job, |(j, _)| *j).ok()?;
                Some(BoincStatus::Other(Box::new(self.others[at].1.clone())))
            }
            known => BoincStatus::KNOWN.get(usize::from(known)).map(|_| BoincStatus::Known(known)),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.ends.len()
    }
}

/// Reads a query_batch2 reply as it arrives.
fn read_states() -> Box<dyn StreamedReply<Output = (StatesReply, f64)>> {
    Box::new(reply::QueryBatch2Reader::new(StatesReply::default()))
}

/// query_batch2 over `names`; a batch the server does not know (or that
/// another user owns) is dropped from the query and reported as gone.
pub(super) async fn query_states(
    rpc: &Addr<RpcClient>,
    auth: &Authenticator,
    mut names: Vec<String>,
    deadline: Instant,
) -> Result<BatchStates, RpcError> {
    let mut out = BatchStates { states: JobStates::default(), answered: HashSet::new(), finished: HashMap::new(), gone: Vec::new() };
    while !names.is_empty() {
        let xml = request::query_batch2(auth, 0.0, &names);
        match rpc.idempotent_streamed(Script::SubmitRpcHandler, xml, read_states, deadline).await {
            Ok((mut reply, _)) => {
                reply.states.index();
                for (name, done) in names.into_iter().zip(reply.done) {
                    out.finished.insert(name.clone(), done);
                    out.answered.insert(name);
                }
                out.states = reply.states;
                break;
            }
            Err(RpcError::Boinc { num, msg }) => {
                let named = msg.strip_prefix("no batch named ").or_else(|| msg.strip_prefix("not owner of ")).map(str::trim);
                let Some(i) = named.and_then(|n| names.iter().position(|b| b == n)) else {
                    return Err(RpcError::Boinc { num, msg });
                };
                out.gone.push((names.remove(i), msg));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_states(body: &[u8], piece: usize) -> Result<StatesReply, gahp_protocol::boinc::ReplyError> {
        let mut reader = read_states();
        for chunk in body.chunks(piece) {
            reader.feed(chunk);
        }
        let (mut reply, _) = reader.finish()?;
        reply.states.index();
        Ok(reply)
    }

    #[test]
    fn a_status_reply_is_read_into_states_and_done_counts() {
        let body = b"<query_batch2>\n<server_time>100.5</server_time>\n\
             <batch_size>3</batch_size>\n<job><job_name>a</job_name><status>DONE</status></job>\n\
             <job><job_name>b</job_name><status>NEW_ONE</status></job>\n<job><job_name>a</job_name><status>ERROR</status></job>\n\
             <batch_size>0</batch_size>\n\
             <batch_size>2</batch_size>\n<job><job_name>c</job_name><status>DONE</status></job>\n\
             <job><job_name>bb</job_name><status>UNSENT</status></job>\n\
             </query_batch2>\n";
        for piece in [1, 7, 64, body.len()] {
            let r = parse_states(body, piece).unwrap();
            assert_eq!(r.done, [1, 0, 1]);
            assert_eq!(r.states.len(), 5);
            assert_eq!(r.states.get("a"), Some(BoincStatus::of("ERROR")), "the later of one name, as a map keeps it");
            assert_eq!(r.states.get("b").map(|s| s.as_str().to_string()).as_deref(), Some("NEW_ONE"));
            assert_eq!(r.states.get("bb"), Some(BoincStatus::of("UNSENT")));
            assert_eq!(r.states.get("c"), Some(BoincStatus::of("DONE")));
            assert_eq!((r.states.get(""), r.states.get("d"), r.states.get("0")), (None, None, None));
        }
        // Torn, or an error after statuses: no states at all.
        assert!(parse_states(b"<query_batch2>\n<batch_size>2</batch_size>\n", 4).is_err());
        let mut errs = body.to_vec();
        let at = errs.len() - "</query_batch2>\n".len();
        errs.splice(at..at, b"<error><error_num>-1</error_num><error_msg>x</error_msg></error>".iter().copied());
        assert!(parse_states(&errs, 16).is_err());
    }
}
