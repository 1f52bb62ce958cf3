//! One BOINC batch for the BLAH jobs of several participants: the clients
//! of one `boinc_gahp serve` (and projects of one daemon) that submit to
//! the same project with the same account, app and batch-wide parameters
//! within one `batch_window` (the shared [`Gathering`] puts their jobs in
//! one batch, named after its first job). A participant is one client's
//! `ProjectJobs`; each keeps its own records, and each hands its mapped
//! members here when the window closes. Once every participant was heard
//! (or a window after the first), one SubmitPipeline submits them all,
//! and each participant learns the outcome for its members.
//!
//! A participant that comes too late, or after a restart (this registry is
//! in memory only), submits alone and never makes a job twice: the batch's
//! opener runs the pipeline under the batch's name as before (found by
//! name, so a retry makes nothing twice); anyone else looks the batch up
//! and, if it holds none of its jobs, submits them into a batch of its own
//! whose name is derived from the batch and the participant (found by
//! name too). Only "some but not all of them there" is an error.
//!
//! All participants run on one thread (every client of `serve` does), so
//! the registry is thread-local, as `project::shared_calls` is.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script, Templates};
use gahp_protocol::gahp::SubmitBatch;
use tokio::sync::oneshot;

use crate::job_records::Gathering;
use gahp_project::rpc::{Rpc, RpcClient, RpcError};
use gahp_project::submit_pipeline::{CompactBatch, RunPipeline, SubmitError, SubmitPipeline};
use gahp_project::ProjectKey;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::state_db::StateDb;

/// Who a job belongs to: its client (its names' prefix) and project key.
pub fn participant(prefix: &str, pkey: &str) -> String {
    format!("{prefix}\n{pkey}")
}

/// The batch a participant's jobs go into when the shared batch `batch`
/// was submitted without them: only this participant ever makes it.
fn own_batch_name(batch: &str, participant: &str) -> String {
    let (prefix, pkey) = participant.split_once('\n').unwrap_or(("", participant));
    format!("{prefix}{pkey}#{batch}")
}

/// What a participant submits with: its project's HTTP client, its file
/// stager and state database, its deadline.
#[derive(Clone)]
pub struct Submitter {
    pub key: ProjectKey,
    pub config: Arc<DaemonConfig>,
    pub rpc: Addr<RpcClient>,
    pub stager: Addr<FileStager>,
    pub db: StateDb,
    pub deadline: Instant,
}

impl Submitter {
    async fn run(&self, spec: SubmitBatch, templates: Templates) -> Result<(), SubmitError> {
        let (key, config, rpc, stager, db) =
            (self.key.clone(), self.config.clone(), self.rpc.clone(), self.stager.clone(), self.db.clone());
        let pipeline =
            SubmitPipeline::new(key, config, rpc, stager, db, CompactBatch::of(spec), self.deadline).with_templates(templates).start();
        pipeline.send(RunPipeline).await.unwrap_or(Err(SubmitError::Internal("the submit pipeline stopped")))
    }
}

/// One participant's members of a batch, mapped.
pub struct Part {
    pub participant: String,
    /// The batch is named after one of this participant's jobs.
    pub owner: bool,
    /// Named as the batch; its app and parameters are every part's.
    pub spec: SubmitBatch,
    pub templates: Templates,
    pub submitter: Submitter,
}

/// The batch the members went into, or why they did not.
pub type Outcome = Result<String, Arc<SubmitError>>;

struct Waiting {
    part: Part,
    reply: oneshot::Sender<Outcome>,
}

enum Entry {
    /// Parts are coming in.
    Gathering { expected: Vec<String>, heard: HashSet<String>, parts: Vec<Waiting> },
    /// Submitted for several participants: those whose members still need
    /// it (it is retired when none does).
    Submitted { needing: HashSet<String>, since: Instant },
}

thread_local! {
    static BATCHES: RefCell<HashMap<String, Entry>> = RefCell::default();
}

/// Submits a participant's members of `part.spec.batch_name`: with the
/// other participants' if the batch is still gathering in this process,
/// else alone.
pub async fn submit(gathering: &Gathering, window: Duration, part: Part) -> Outcome {
    let batch = part.spec.batch_name.clone();
    let Some(expected) = gathering.participants(&batch).filter(|p| p.contains(&part.participant)) else {
        return alone(part).await.map_err(Arc::new);
    };
    let (reply, answer) = oneshot::channel();
    let participant = part.participant.clone();
    hear(gathering, window, &batch, expected, &participant, Some(Waiting { part, reply }));
    answer.await.unwrap_or_else(|_| Err(Arc::new(SubmitError::Internal("the shared submission stopped"))))
}

/// A participant has no members to submit in `batch` (all cancelled or
/// refused): the others need not wait for it.
pub fn withdraw(gathering: &Gathering, window: Duration, batch: &str, participant: &str) {
    if let Some(expected) = gathering.participants(batch) {
        hear(gathering, window, batch, expected, participant, None);
    }
}

/// A participant is done with a batch (every member of its delivered or
/// removed): whether it may be retired now, i.e. no other participant
/// needs it. A batch this process did not submit for several (after a
/// restart) is never retired here but left to its lease.
pub fn done_with(batch: &str, participant: &str) -> bool {
    BATCHES.with(|b| {
        let mut b = b.borrow_mut();
        let Some(Entry::Submitted { needing, .. }) = b.get_mut(batch) else { return false };
        needing.remove(participant);
        let last = needing.is_empty();
        if last {
            b.remove(batch);
        }
        last
    })
}

fn hear(gathering: &Gathering, window: Duration, batch: &str, expected: Vec<String>, participant: &str, part: Option<Waiting>) {
    let (first, complete) = BATCHES.with(|b| {
        let mut b = b.borrow_mut();
        let first = !b.contains_key(batch);
        let entry = b.entry(batch.to_string()).or_insert_with(|| Entry::Gathering { expected, heard: HashSet::new(), parts: Vec::new() });
        // Not gathering: its submission began (a part dropped here is told so).
        let Entry::Gathering { expected, heard, parts } = entry else { return (false, false) };
        heard.insert(participant.to_string());
        parts.extend(part);
        (first, expected.iter().all(|p| heard.contains(p)))
    });
    let (g, b) = (gathering.clone(), batch.to_string());
    if complete {
        actix_rt::spawn(async move { run(g, b).await });
    } else if first {
        // A participant that never comes (its client's runtime stopped)
        // does not keep the others waiting more than a window.
        actix_rt::spawn(async move {
            actix_rt::time::sleep(window.max(Duration::from_millis(100))).await;
            run(g, b).await
        });
    }
}

/// Submits the parts heard so far, as one batch.
async fn run(gathering: Gathering, batch: String) {
    let parts = BATCHES.with(|b| {
        let mut b = b.borrow_mut();
        match b.remove(&batch) {
            Some(Entry::Gathering { parts, .. }) => Some(parts),
            Some(other) => {
                b.insert(batch.clone(), other);
                None
            }
            None => None,
        }
    });
    let Some(mut parts) = parts else { return };
    gathering.started(&batch);
    // The opener's database records the create in flight (after a restart
    // only the opener creates a batch of this name).
    parts.sort_by_key(|w| !w.part.owner);
    let mut replies = Vec::with_capacity(parts.len());
    let mut needing = HashSet::new();
    let mut spec: Option<SubmitBatch> = None;
    let mut with = None;
    for Waiting { part, reply } in parts {
        replies.push(reply);
        needing.insert(part.participant);
        match spec.as_mut() {
            Some(s) => s.jobs.extend(part.spec.jobs),
            None => {
                spec = Some(part.spec);
                with = Some((part.submitter, part.templates));
            }
        }
    }
    let (Some(spec), Some((submitter, templates))) = (spec, with) else { return };
    if needing.len() > 1 {
        tracing::info!(batch = %batch, participants = needing.len(), jobs = spec.jobs.len(), "submitting a batch shared by several clients");
        let lease = submitter.config.blah.lease;
        BATCHES.with(|b| {
            let mut b = b.borrow_mut();
            // One that no participant finished with (held jobs) goes with its lease.
            b.retain(|_, e| !matches!(e, Entry::Submitted { since, .. } if since.elapsed() > lease));
            b.insert(batch.clone(), Entry::Submitted { needing, since: Instant::now() });
        });
    }
    let outcome = submitter.run(spec, templates).await.map(|()| batch.clone()).map_err(Arc::new);
    if outcome.is_err() {
        BATCHES.with(|b| b.borrow_mut().remove(&batch));
    }
    for reply in replies {
        let _ = reply.send(outcome.clone());
    }
}

/// Submits one participant's members on its own (see the module's text).
async fn alone(part: Part) -> Result<String, SubmitError> {
    let Part { participant, owner, spec, templates, submitter } = part;
    let batch = spec.batch_name.clone();
    if owner {
        match submitter.run(spec.clone(), templates.clone()).await {
            Err(SubmitError::NameTaken(_)) => {}
            done => return done.map(|()| batch),
        }
    }
    // Not ours to make or fill: it holds all of our members, or none.
    let auth = &submitter.key.authenticator;
    let found = submitter
        .rpc
        .idempotent(Script::SubmitRpcHandler, request::query_batch_by_name(auth, &batch), reply::parse_query_batch, submitter.deadline)
        .await;
    let there: HashSet<String> = match found {
        Ok(info) => info.jobs.into_iter().collect(),
        Err(RpcError::Boinc { ref msg, .. }) if msg == "no such batch" => HashSet::new(),
        Err(e) => return Err(SubmitError::CreateBatch(e)),
    };
    let ours = spec.jobs.iter().filter(|j| there.contains(&j.name)).count();
    if ours > 0 && ours == spec.jobs.len() {
        return Ok(batch);
    }
    if ours > 0 {
        return Err(SubmitError::NameTaken(batch));
    }
    let own = own_batch_name(&batch, &participant);
    tracing::info!(batch = %batch, own = %own, "the shared batch holds none of these jobs; submitting them in a batch of their own");
    submitter.run(SubmitBatch { batch_name: own.clone(), ..spec }, templates).await.map(|()| own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_participant_is_done_with_a_shared_batch_only_after_the_others() {
        BATCHES.with(|b| {
            b.borrow_mut().insert("x".into(), Entry::Submitted { needing: ["a".into(), "b".into()].into(), since: Instant::now() })
        });
        assert!(!done_with("x", "a"), "b still needs it");
        assert!(!done_with("x", "a"), "asking again changes nothing");
        assert!(done_with("x", "b"), "the last one retires it");
        assert!(!done_with("x", "b"), "forgotten: not retired twice");
        assert!(!done_with("unknown", "a"), "a batch not submitted for several here is left to its lease");
    }

    #[test]
    fn a_shared_batch_names_no_client_and_is_a_name_a_job_id_may_hold() {
        use crate::job_records::shared_batch_name;
        use crate::map::JobId;
        let name = shared_batch_name("alice~blah#home_bl_a_1.0_1#1", &participant("alice~", "0123456789ab"));
        assert!(name.starts_with("blah#shared-") && !name.contains("alice"), "{name}");
        // As a client sends it back (its own prefix added): still an id.
        let id = format!("boinc/0123456789ab/bob~{name}/bob~blah#home_bl_b_1.0_1#1");
        assert!(JobId::parse(&id).is_some(), "{id}");
        // The stdio daemon's batches keep their first job's name.
        assert_eq!(shared_batch_name("blah#d#1", &participant("", "0123456789ab")), "blah#d#1");
    }

    #[test]
    fn a_participants_own_batch_name_is_its_own() {
        let a = own_batch_name("alice~blah#d#1", &participant("bob~", "0123456789ab"));
        assert_eq!(a, "bob~0123456789ab#alice~blah#d#1");
        assert_ne!(a, own_batch_name("alice~blah#d#1", &participant("carol~", "0123456789ab")));
        assert_eq!(own_batch_name("blah#d#1", &participant("", "k")), "k#blah#d#1");
    }
}
