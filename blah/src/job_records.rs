//! The durable side of BLAH jobs, in the daemon's SQLite file: each
//! attempt's typed job (`crate::job`, as JSON) and phase (so a restarted daemon resumes it and
//! knows where its outputs go), and the projects jobs named themselves.
//!
//! Every statement runs on one thread in the order it was queued, off the
//! actor threads: a read sees every write queued before it, whichever
//! actor queued it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use crate::map::batch_name;
use gahp_services::clock::unix_now;
use gahp_services::state_db::StateDb;

type Op = Box<dyn FnOnce(&mut Connection) + Send>;

#[derive(Clone)]
pub struct JobRecords {
    ops: mpsc::Sender<Op>,
    /// For callers that write in their own tables (the submit pipeline).
    db: StateDb,
    /// The shared BOINC batches still taking jobs (used in store ops).
    pub gathering: Gathering,
}

impl JobRecords {
    pub fn new(db: StateDb, gathering: Gathering) -> std::io::Result<Self> {
        let (ops, rx) = mpsc::channel::<Op>();
        let shared = db.clone();
        std::thread::Builder::new().name("blah-store".into()).spawn(move || {
            for op in rx {
                let _ = db.with_conn(|c| {
                    op(c);
                    Ok(())
                });
            }
        })?;
        Ok(JobRecords { ops, db: shared, gathering })
    }

    pub fn db(&self) -> &StateDb {
        &self.db
    }

    /// Queues a write; a failure is logged, not returned.
    pub fn write(&self, what: &'static str, f: impl FnOnce(&mut Connection) -> rusqlite::Result<()> + Send + 'static) {
        let op: Op = Box::new(move |c| {
            if let Err(e) = f(c) {
                tracing::warn!("state database: can't {what}: {e}");
            }
        });
        if self.ops.send(op).is_err() {
            tracing::error!("state database thread is gone; can't {what}");
        }
    }

    /// Queues one write of many rows (a batch's members, a refresh's
    /// statuses), in one transaction: a row whose write fails is logged
    /// and the others are written.
    pub fn write_rows<T: Send + 'static>(
        &self,
        what: &'static str,
        rows: Vec<T>,
        f: impl Fn(&Connection, &T) -> rusqlite::Result<()> + Send + 'static,
    ) {
        if rows.is_empty() {
            return;
        }
        self.write(what, move |c| {
            let tx = c.transaction()?;
            for row in &rows {
                if let Err(e) = f(&tx, row) {
                    tracing::warn!("state database: can't {what}: {e}");
                }
            }
            tx.commit()
        });
    }

    /// Runs a query after every write queued so far.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = oneshot::channel();
        let op: Op = Box::new(move |c| {
            let _ = tx.send(f(c).map_err(|e| e.to_string()));
        });
        self.ops.send(op).map_err(|_| "state database thread is gone".to_string())?;
        rx.await.unwrap_or_else(|_| Err("state database thread is gone".into()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The submission has not reached BOINC yet.
    Submitting,
    /// On the server; watched.
    Active,
    /// A status (3, 4 or 5) and its ad are final.
    Final,
    /// The gridmanager cancelled it.
    Cancelled,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Submitting => "submitting",
            Phase::Active => "active",
            Phase::Final => "final",
            Phase::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Phase {
        match s {
            "submitting" => Phase::Submitting,
            "active" => Phase::Active,
            "final" => Phase::Final,
            _ => Phase::Cancelled,
        }
    }
}

/// The BOINC batches still gathering jobs, per gathering key (project
/// account, app and batch-wide parameters), and who takes part in each.
/// Only store threads touch it, in the order of their operations: a batch
/// is closed (`close_batch`) before its members are read, so no job joins
/// a batch whose submission began. One is shared by every client of
/// `boinc_gahp serve` (each client's store thread joins it), so jobs of
/// several clients on one account gather into one BOINC batch; each
/// client still records only its own jobs (`blah::shared_batch` submits
/// the batch once for all of them).
#[derive(Clone)]
pub struct Gathering {
    open: Arc<Mutex<Open>>,
    window: Duration,
    max_jobs: usize,
}

#[derive(Default)]
struct Open {
    by_key: HashMap<String, OpenBatch>,
    /// The participants (see `blah::shared_batch::participant`) of each
    /// batch gathered by this process, the opener first, until its
    /// submission starts.
    participants: HashMap<String, Vec<String>>,
}

struct OpenBatch {
    batch: String,
    opened: Instant,
    jobs: usize,
}

impl Gathering {
    pub fn new(window: Duration, max_jobs: usize) -> Self {
        Gathering { open: Arc::default(), window, max_jobs: max_jobs.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The batch a new job named `job` of `participant` goes into: the
    /// open one of its key, else a new one named after the job.
    fn join(&self, key: &str, job: &str, participant: &str) -> String {
        let mut open = self.lock();
        let Open { by_key, participants } = &mut *open;
        match by_key.get_mut(key) {
            Some(b) if b.opened.elapsed() < self.window && b.jobs < self.max_jobs => {
                b.jobs += 1;
                let taking = participants.entry(b.batch.clone()).or_default();
                if !taking.iter().any(|p| p == participant) {
                    taking.push(participant.to_string());
                }
                b.batch.clone()
            }
            _ if self.max_jobs == 1 || self.window.is_zero() => job.to_string(),
            _ => {
                let batch = shared_batch_name(job, participant);
                by_key.insert(key.to_string(), OpenBatch { batch: batch.clone(), opened: Instant::now(), jobs: 1 });
                participants.insert(batch.clone(), vec![participant.to_string()]);
                batch
            }
        }
    }

    fn close(&self, batch: &str) {
        self.lock().by_key.retain(|_, b| b.batch != batch);
    }

    /// Who has jobs in `batch`, if it gathered in this process and its
    /// submission has not started.
    pub fn participants(&self, batch: &str) -> Option<Vec<String>> {
        self.lock().participants.get(batch).cloned()
    }

    /// The batch's submission starts: a participant that comes later
    /// submits its jobs on its own (`blah::shared_batch`).
    pub fn started(&self, batch: &str) {
        self.lock().participants.remove(batch);
    }
}

/// The name of a batch opened by `job`: the job's own, except for a client
/// of `serve` (a participant whose names have a prefix), where other
/// clients' jobs may join it and see its name in their ids: there it
/// names no client (`blah#shared-` and the job name's MD5, a name a job id
/// may hold; a client's names all begin with its prefix, so none can
/// take it).
pub fn shared_batch_name(job: &str, participant: &str) -> String {
    use md5::{Digest, Md5};
    if participant.starts_with('\n') || !participant.contains('\n') {
        return job.to_string();
    }
    let hex: String = Md5::digest(job.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!("{}shared-{hex}", crate::map::BATCH_PREFIX)
}

/// One attempt of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// The BOINC job's name (`blah#<JobDirectory>#<attempt>`).
    pub batch: String,
    /// The BOINC batch it went into.
    pub boinc_batch: String,
    pub project: String,
    /// The typed job, as JSON (`None`: a record an older daemon made, or
    /// a retired one).
    pub job: Option<String>,
    /// The submit ClassAd's text, in a record an older daemon made (read
    /// into the typed job on load); else empty.
    pub ad: String,
    pub phase: Phase,
    pub boinc_status: Option<String>,
    /// Final status and its ad (text).
    pub status: Option<i32>,
    pub final_ad: Option<String>,
    pub abort_pending: bool,
    pub retired: bool,
    /// The batch's expiry as last set on the server (0: unknown).
    pub lease_until: f64,
}

/// What a submit of `job_dir` gets: the attempt that is still alive
/// (submitting, on the server, or completed: a resubmit after a lost
/// result), else a new attempt recorded now, numbered above every earlier
/// attempt of `job_dir` and every forgotten one (see `prune`). `held` records the new
/// attempt as already final (status 5, the ad it makes of the job name);
/// else a new attempt joins the open batch of `gather` (a gathering key),
/// or is a batch of its own; `gather` also names the participant (the
/// client and project) the job belongs to. Returns (project, BOINC batch,
/// job).
pub fn claim_attempt(
    c: &mut Connection,
    job_dir: &str,
    project: &str,
    typed_job: &str,
    held: Option<&dyn Fn(&str) -> String>,
    gather: Option<(&Gathering, &str, &str)>,
    name_prefix: &str,
) -> rusqlite::Result<(String, String, String)> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    type Last = (String, String, Option<String>, i64, String, Option<i32>);
    let last: Option<Last> = tx
        .query_row(
            "SELECT project, batch, boinc_batch, attempt, phase, status FROM blah_jobs WHERE job_dir = ?1 \
             ORDER BY attempt DESC LIMIT 1",
            [job_dir],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
        )
        .optional()?;
    let last_attempt = match last {
        Some((project, job, boinc_batch, _, phase, status))
            if matches!(Phase::parse(&phase), Phase::Submitting | Phase::Active)
                || (Phase::parse(&phase) == Phase::Final && status == Some(4)) =>
        {
            let batch = boinc_batch.unwrap_or_else(|| job.clone());
            return Ok((project, batch, job));
        }
        Some((_, _, _, attempt, ..)) => attempt,
        None => 0,
    };
    let attempt = last_attempt.max(forgotten_attempts(&tx)?) + 1;
    let job = batch_name(name_prefix, job_dir, u32::try_from(attempt).unwrap_or(u32::MAX));
    let (phase, status) = if held.is_some() { (Phase::Final, Some(5)) } else { (Phase::Submitting, None) };
    let held = held.map(|f| f(&job));
    let batch = match gather {
        Some((g, key, participant)) if held.is_none() => g.join(key, &job, participant),
        _ => job.clone(),
    };
    tx.execute(
        "INSERT OR REPLACE INTO blah_jobs (batch, project, job_dir, attempt, ad, job, phase, status, final_ad, updated, boinc_batch) \
         VALUES (?1, ?2, ?3, ?4, '', ?5, ?6, ?7, ?8, ?9, ?10)",
        params![job, project, job_dir, attempt, typed_job, phase.as_str(), status, held, unix_now(), (batch != job).then_some(&batch)],
    )?;
    tx.commit()?;
    Ok((project.to_string(), batch, job))
}

/// The `JobDirectory`s of the jobs still to be submitted or watched, in a
/// state database opened as found: a served client's job directories the
/// retention sweep must keep (a work sequence job reads its own inputs
/// there at every step, and every job's outputs land there).
pub fn live_job_dirs(c: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut s = c.prepare("SELECT DISTINCT job_dir FROM blah_jobs WHERE phase IN (?1, ?2)")?;
    let rows = s.query_map(params![Phase::Submitting.as_str(), Phase::Active.as_str()], |r| r.get(0))?;
    rows.collect()
}

/// Closes a gathering batch and returns the members to submit in it; a
/// batch that other participants take part in is recorded as shared.
pub fn close_batch(c: &mut Connection, gathering: &Gathering, batch: &str) -> rusqlite::Result<Vec<JobRecord>> {
    gathering.close(batch);
    if gathering.participants(batch).is_some_and(|p| p.len() > 1) {
        c.prepare_cached("INSERT OR IGNORE INTO blah_shared_batches (batch) VALUES (?1)")?.execute([batch])?;
    }
    let mut s = c.prepare_cached(&format!("{SELECT_JOB} WHERE COALESCE(boinc_batch, batch) = ?1 AND phase = 'submitting'"))?;
    let rows = s.query_map([batch], job_record)?;
    rows.collect()
}

/// Whether a batch is still needed: a member is being submitted or
/// watched, its final status (3 or 4) has not gone out, or an abort is
/// owed. Held members do not keep it (a release makes a new attempt).
pub fn batch_needed(c: &mut Connection, batch: &str) -> rusqlite::Result<bool> {
    c.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM blah_jobs WHERE COALESCE(boinc_batch, batch) = ?1 AND \
         (phase IN ('submitting', 'active') OR abort_pending = 1 OR (phase = 'final' AND status IN (3, 4) AND retired = 0)))",
    )?
    .query_row([batch], |r| r.get(0))
}

/// Whether `batch` was shared with other participants (see `close_batch`).
pub fn batch_shared(c: &mut Connection, batch: &str) -> rusqlite::Result<bool> {
    c.prepare_cached("SELECT EXISTS (SELECT 1 FROM blah_shared_batches WHERE batch = ?1)")?.query_row([batch], |r| r.get(0))
}

/// Whether `participant` (of project `project` here) opened `batch`: one
/// of its jobs in it gave the batch its name.
pub fn opened_batch(c: &mut Connection, batch: &str, project: &str, participant: &str) -> rusqlite::Result<bool> {
    let mut s = c.prepare_cached("SELECT batch FROM blah_jobs WHERE COALESCE(boinc_batch, batch) = ?1 AND project = ?2")?;
    let names = s.query_map([batch, project], |r| r.get::<_, String>(0))?;
    for name in names {
        if shared_batch_name(&name?, participant) == batch {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The jobs of `jobs` now in the BOINC batch `batch` (their shared batch
/// was submitted without them, so they went into one of their own).
pub fn set_boinc_batch(c: &Connection, job: &str, batch: &str) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE blah_jobs SET boinc_batch = ?2 WHERE batch = ?1")?.execute([job, batch])?;
    Ok(())
}

const SELECT_JOB: &str = "SELECT batch, project, ad, phase, boinc_status, status, final_ad, abort_pending, retired, lease_until, \
     COALESCE(boinc_batch, batch), job FROM blah_jobs";

fn job_record(r: &rusqlite::Row) -> rusqlite::Result<JobRecord> {
    Ok(JobRecord {
        batch: r.get(0)?,
        project: r.get(1)?,
        ad: r.get(2)?,
        phase: Phase::parse(&r.get::<_, String>(3)?),
        boinc_status: r.get(4)?,
        status: r.get(5)?,
        final_ad: r.get(6)?,
        abort_pending: r.get(7)?,
        retired: r.get(8)?,
        lease_until: r.get(9)?,
        boinc_batch: r.get(10)?,
        job: r.get(11)?,
    })
}

/// The record of the job named `job`.
pub fn load(c: &mut Connection, job: &str) -> rusqlite::Result<Option<JobRecord>> {
    c.prepare_cached(&format!("{SELECT_JOB} WHERE batch = ?1"))?.query_row([job], job_record).optional()
}

/// What is recorded of a job as submitted: its typed job (JSON), else the
/// submit ad's text of a record an older daemon made.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedJob {
    pub json: Option<String>,
    pub ad: String,
}

/// The recorded jobs of `jobs`, in order (None: no record, or one that
/// keeps neither). A job in memory keeps its typed job here only.
pub fn load_jobs(c: &mut Connection, jobs: &[String]) -> rusqlite::Result<Vec<Option<RecordedJob>>> {
    let mut q = c.prepare_cached("SELECT job, ad FROM blah_jobs WHERE batch = ?1")?;
    jobs.iter()
        .map(|j| {
            let rec = q.query_row([j], |r| Ok(RecordedJob { json: r.get(0)?, ad: r.get(1)? })).optional()?;
            Ok(rec.filter(|r| r.json.as_deref().is_some_and(|j| !j.is_empty()) || !r.ad.is_empty()))
        })
        .collect()
}

/// Moves a job on; a cancelled job stays cancelled (a late submission or
/// delivery must not revive it).
pub fn set_phase(c: &Connection, batch: &str, phase: Phase, status: Option<i32>, final_ad: Option<String>) -> rusqlite::Result<()> {
    c.prepare_cached(
        "UPDATE blah_jobs SET phase = ?2, status = ?3, final_ad = ?4, updated = ?5 WHERE batch = ?1 AND phase != 'cancelled'",
    )?
    .execute(params![batch, phase.as_str(), status, final_ad, unix_now()])?;
    Ok(())
}

pub fn set_boinc_status(c: &Connection, batch: &str, status: &str) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE blah_jobs SET boinc_status = ?2 WHERE batch = ?1")?.execute(params![batch, status])?;
    Ok(())
}

pub fn set_lease(c: &Connection, batch: &str, until: f64) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE blah_jobs SET lease_until = ?2 WHERE batch = ?1")?.execute(params![batch, until])?;
    Ok(())
}

pub fn mark_cancelled(c: &mut Connection, batch: &str) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE blah_jobs SET phase = 'cancelled', updated = ?2 WHERE batch = ?1")?.execute(params![batch, unix_now()])?;
    Ok(())
}

pub fn set_abort_pending(c: &mut Connection, batch: &str, pending: bool) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE blah_jobs SET abort_pending = ?2 WHERE batch = ?1")?.execute(params![batch, pending])?;
    Ok(())
}

/// The job's final status went out (or its abort landed): what is kept
/// from now on answers a repeated status (phase, final status and ad) and
/// a resubmit (attempt, phase); the typed job (or an older record's submit
/// ad), the bulk of a row, is read only to submit and deliver, so it goes.
pub fn set_retired(c: &mut Connection, batch: &str) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE blah_jobs SET retired = 1, ad = '', job = NULL, boinc_status = NULL WHERE batch = ?1")?.execute([batch])?;
    Ok(())
}

/// Aborts a restarted daemon still owes the server.
pub fn pending_aborts(c: &mut Connection, project: &str) -> rusqlite::Result<Vec<String>> {
    let mut s = c.prepare_cached("SELECT batch FROM blah_jobs WHERE project = ?1 AND abort_pending = 1")?;
    let rows = s.query_map([project], |r| r.get(0))?;
    rows.collect()
}

/// Projects named by jobs: key -> (URL, authenticator file).
pub fn projects(c: &mut Connection) -> rusqlite::Result<Vec<(String, String, PathBuf)>> {
    let mut s = c.prepare("SELECT key, url, authenticator_file FROM blah_projects")?;
    let rows = s.query_map([], |r| {
        let file: Vec<u8> = r.get(2)?;
        Ok((r.get(0)?, r.get(1)?, PathBuf::from(String::from_utf8_lossy(&file).into_owned())))
    })?;
    rows.collect()
}

pub fn add_project(c: &mut Connection, key: &str, url: &str, file: &std::path::Path) -> rusqlite::Result<()> {
    c.execute(
        "INSERT OR IGNORE INTO blah_projects (key, url, authenticator_file) VALUES (?1, ?2, ?3)",
        params![key, url, file.as_os_str().as_encoded_bytes()],
    )?;
    Ok(())
}

/// Forgets jobs that ended more than `older_than_secs` ago (their ids are
/// no longer asked for), raising the forgotten attempts' high-water mark
/// first, in the same transaction. Returns how many went.
pub fn prune(c: &mut Connection, older_than_secs: f64) -> rusqlite::Result<usize> {
    const ENDED: &str = "phase IN ('final', 'cancelled') AND abort_pending = 0 AND updated < ?1";
    let cutoff = unix_now() - older_than_secs;
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute(
        &format!(
            "UPDATE blah_forgotten SET max_attempt = max(max_attempt, \
             COALESCE((SELECT MAX(attempt) FROM blah_jobs WHERE {ENDED}), 0)) WHERE id = 0"
        ),
        [cutoff],
    )?;
    let gone = tx.execute(&format!("DELETE FROM blah_jobs WHERE {ENDED}"), [cutoff])?;
    tx.execute(
        "DELETE FROM blah_shared_batches WHERE \
         NOT EXISTS (SELECT 1 FROM blah_jobs WHERE boinc_batch = blah_shared_batches.batch) AND \
         NOT EXISTS (SELECT 1 FROM blah_jobs WHERE batch = blah_shared_batches.batch)",
        [],
    )?;
    tx.commit()?;
    Ok(gone)
}

/// For a job the database has no record of, named with `attempt`:
/// whether its record was lost (with the database) rather than forgotten
/// (`prune`). If lost, every attempt below it is counted as forgotten, so
/// that the next submit of its `JobDirectory` (a `condor_release`) claims
/// `attempt` itself, finds the BOINC job by that name and adopts it; the
/// lower numbers are never given again (the project may hold them).
pub(crate) fn lost_record_claims_again(c: &mut Connection, attempt: i64) -> rusqlite::Result<bool> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    if attempt <= forgotten_attempts(&tx)? {
        return Ok(false);
    }
    tx.execute(
        "INSERT INTO blah_forgotten (id, max_attempt) VALUES (0, ?1) \
         ON CONFLICT (id) DO UPDATE SET max_attempt = max(max_attempt, excluded.max_attempt)",
        [attempt - 1],
    )?;
    tx.commit()?;
    Ok(true)
}

/// The highest attempt number of any forgotten job (0: none).
pub(crate) fn forgotten_attempts(c: &Connection) -> rusqlite::Result<i64> {
    Ok(c.query_row("SELECT max_attempt FROM blah_forgotten WHERE id = 0", [], |r| r.get(0)).optional()?.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_written_together_are_all_written_and_a_failed_row_does_not_stop_the_others() {
        let db = StateDb::in_memory(&[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap();
        let store = JobRecords::new(db, Gathering::new(Duration::ZERO, 1)).unwrap();
        actix_rt::System::new().block_on(async {
            let jobs = store
                .read(|c| (0..3).map(|i| claim_attempt(c, &format!("d{i}"), "k", "[ ]", None, None, "").map(|(_, _, j)| j)).collect())
                .await
                .unwrap();
            let jobs: Vec<String> = jobs;
            let mut rows: Vec<(String, &'static str)> = jobs.iter().map(|j| (j.clone(), "IN_PROGRESS")).collect();
            rows.insert(1, ("no such job".into(), "FAIL"));
            store.write_rows("store statuses", rows, |c, (j, s)| {
                if *s == "FAIL" {
                    return Err(rusqlite::Error::QueryReturnedNoRows);
                }
                set_boinc_status(c, j, s)
            });
            for job in jobs {
                let rec = store.read(move |c| load(c, &job)).await.unwrap().unwrap();
                assert_eq!(rec.boinc_status.as_deref(), Some("IN_PROGRESS"), "{}", rec.batch);
            }
        });
    }

    #[test]
    fn attempts_are_reused_while_alive_and_renewed_after_cancel() {
        let db = StateDb::in_memory(&[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap();
        db.with_conn(|c| {
            check_attempts(c);
            Ok(())
        })
        .unwrap();
    }

    fn check_attempts(c: &mut Connection) {
        let claim = |c: &mut Connection, dir: &str, p: &str| {
            let (p, b, j) = claim_attempt(c, dir, p, "[ ]", None, None, "").unwrap();
            assert_eq!(b, j, "no gathering: a batch of its own");
            (p, j)
        };
        let (p, b1) = claim(c, "dir", "k");
        assert_eq!((p.as_str(), b1.as_str()), ("k", "blah#dir#1"));
        // A resubmit after a lost result: the same attempt, even on another project.
        assert_eq!(claim(c, "dir", "other"), ("k".into(), b1.clone()));
        set_phase(c, &b1, Phase::Active, None, None).unwrap();
        mark_cancelled(c, &b1).unwrap();
        // A late delivery does not revive a cancelled job.
        set_phase(c, &b1, Phase::Final, Some(4), Some("[ ]".into())).unwrap();
        assert_eq!(load(c, &b1).unwrap().unwrap().phase, Phase::Cancelled);
        let (_, b2) = claim(c, "dir", "k");
        assert_eq!(b2, "blah#dir#2");
        // Held at once: final; the next submit is a new attempt.
        let (_, _, b3) = claim_attempt(c, "held", "k", "[ ]", Some(&|b: &str| format!("[ B = \"{b}\" ]")), None, "").unwrap();
        let r = load(c, &b3).unwrap().unwrap();
        assert_eq!((r.phase, r.status, r.final_ad.as_deref()), (Phase::Final, Some(5), Some("[ B = \"blah#held#1\" ]")));
        assert_eq!(claim(c, "held", "k").1, "blah#held#2");
        // Completed: a resubmit gets the completed attempt.
        set_phase(c, &b2, Phase::Final, Some(4), Some("[ ]".into())).unwrap();
        assert_eq!(claim(c, "dir", "k").1, b2);
    }

    #[test]
    fn a_job_whose_record_was_lost_is_claimed_again_by_its_own_name() {
        let db = StateDb::in_memory(&[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap();
        let names = db.with_conn(|c| {
            // A lost database: nothing recorded; the job was attempt 3.
            assert!(lost_record_claims_again(c, 3)?);
            let (_, _, again) = claim_attempt(c, "lost", "k", "[ ]", None, None, "")?;
            // A forgotten attempt (at or below the mark) is not claimed again.
            assert!(!lost_record_claims_again(c, 2)?);
            let (_, _, other) = claim_attempt(c, "new", "k", "[ ]", None, None, "")?;
            Ok((again, other))
        });
        assert_eq!(names.unwrap(), (batch_name("", "lost", 3), batch_name("", "new", 3)));
    }

    #[test]
    fn ended_jobs_are_forgotten_and_their_names_never_come_back() {
        let db = StateDb::in_memory(&[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap();
        db.with_conn(|c| {
            let claim = |c: &mut Connection, dir: &str| claim_attempt(c, dir, "k", "[ A = 1 ]", None, None, "").unwrap().2;
            let age = |c: &mut Connection, job: &str, secs: f64| {
                c.execute("UPDATE blah_jobs SET updated = ?2 WHERE batch = ?1", params![job, unix_now() - secs]).unwrap();
            };
            // a: completed and delivered; b: cancelled twice (attempt 2);
            // c: still running; d: cancelled, its abort owed; e: ended lately.
            let a = claim(c, "a");
            set_phase(c, &a, Phase::Final, Some(4), Some("[ JobStatus = 4; ExitCode = 0 ]".into()))?;
            set_retired(c, &a)?;
            let kept = load(c, &a)?.unwrap();
            assert_eq!((kept.ad.as_str(), kept.job, kept.boinc_status), ("", None, None), "a delivered job's record keeps no job");
            assert_eq!((kept.status, kept.final_ad.as_deref()), (Some(4), Some("[ JobStatus = 4; ExitCode = 0 ]")));
            let b1 = claim(c, "b");
            mark_cancelled(c, &b1)?;
            let b2 = claim(c, "b");
            assert_eq!(b2, "blah#b#2");
            mark_cancelled(c, &b2)?;
            let running = claim(c, "c");
            set_phase(c, &running, Phase::Active, None, None)?;
            let owed = claim(c, "d");
            mark_cancelled(c, &owed)?;
            set_abort_pending(c, &owed, true)?;
            let lately = claim(c, "e");
            mark_cancelled(c, &lately)?;
            for job in [a.as_str(), "blah#b#1", &b2, &running, &owed] {
                age(c, job, 1000.0);
            }
            age(c, &lately, 10.0);

            assert_eq!(prune(c, 100.0)?, 3, "a and both attempts of b");
            for (job, kept) in [(a.as_str(), false), ("blah#b#1", false), (&b2, false), (&running, true), (&owed, true), (&lately, true)] {
                assert_eq!(load(c, job)?.is_some(), kept, "{job}");
            }
            assert_eq!(forgotten_attempts(c)?, 2);
            // Forgotten: a new attempt is numbered above every forgotten
            // one, so the server's batches blah#a#1, blah#b#1 and
            // blah#b#2 are never asked for or made again.
            assert_eq!(claim(c, "a"), "blah#a#3");
            assert_eq!(claim(c, "b"), "blah#b#3");
            assert_eq!(claim(c, "new"), "blah#new#3");
            // Still recorded: numbered from its own attempts as before.
            assert_eq!(claim(c, "e"), "blah#e#3");
            mark_cancelled(c, "blah#e#3")?;
            assert_eq!(claim(c, "e"), "blah#e#4");
            // Nothing more has ended that long ago; the mark stays.
            assert_eq!(prune(c, 100.0)?, 0);
            assert_eq!(forgotten_attempts(c)?, 2);
            // The ended jobs are found by the index, not a scan.
            let plan: String = c.query_row(
                "EXPLAIN QUERY PLAN SELECT 1 FROM blah_jobs WHERE phase IN ('final', 'cancelled') AND abort_pending = 0 AND updated < 0",
                [],
                |r| r.get(3),
            )?;
            assert!(plan.contains("blah_jobs_ended"), "{plan}");
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn the_forgotten_mark_starts_at_the_highest_attempt_recorded_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let before = StateDb::open(dir.path(), &[gahp_services::schema::STATE_DB, &gahp_services::schema::BLAH_JOBS[..2]]).unwrap();
        before
            .with_conn(|c| {
                for attempt in [1, 4, 2] {
                    c.execute(
                        "INSERT INTO blah_jobs (batch, project, job_dir, attempt, ad, phase, updated) VALUES (?1, 'k', 'd', ?2, '', 'final', 0)",
                        params![format!("blah#d#{attempt}"), attempt],
                    )?;
                }
                Ok(())
            })
            .unwrap();
        drop(before);
        let after = StateDb::open(dir.path(), &[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap();
        after
            .with_conn(|c| {
                assert_eq!(forgotten_attempts(c)?, 4);
                assert_eq!(claim_attempt(c, "other", "k", "[ ]", None, None, "")?.2, "blah#other#5");
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_record_an_older_daemon_made_keeps_its_ad_and_is_read_into_the_same_typed_job() {
        use crate::job::BlahJob;
        use gahp_protocol::classad::ClassAd;
        let schema = gahp_services::schema::BLAH_JOBS;
        let dir = tempfile::tempdir().unwrap();
        let text = "[ JobDirectory = \"old\"; Iwd = \"/w\"; BoincApp = \"u\"; Arguments = \"a 'b c'\"; RequestMemory = 64 ]";
        // The schema before the typed job's column, and a row as its daemon wrote it.
        let before = StateDb::open(dir.path(), &[gahp_services::schema::STATE_DB, &schema[..schema.len() - 1]]).unwrap();
        before
            .with_conn(|c| {
                c.execute(
                    "INSERT INTO blah_jobs (batch, project, job_dir, attempt, ad, phase, updated) \
                     VALUES ('blah#old#1', 'k', 'old', 1, ?1, 'active', 0)",
                    [text],
                )?;
                Ok(())
            })
            .unwrap();
        drop(before);
        let after = StateDb::open(dir.path(), &[gahp_services::schema::STATE_DB, schema]).unwrap();
        let cfg = gahp_services::config::BlahConfig::default();
        let expected = BlahJob::parse(&ClassAd::parse(text).unwrap(), &cfg).unwrap();
        after
            .with_conn(|c| {
                let rec = load(c, "blah#old#1")?.unwrap();
                assert_eq!((rec.job.as_deref(), rec.ad.as_str(), rec.phase), (None, text, Phase::Active));
                assert_eq!(BlahJob::from_record(rec.job.as_deref(), &rec.ad, &cfg).unwrap().as_ref(), Some(&expected));
                let recorded = load_jobs(c, &["blah#old#1".to_string()])?.pop().flatten().unwrap();
                assert_eq!(BlahJob::from_record(recorded.json.as_deref(), &recorded.ad, &cfg).unwrap(), Some(expected.clone()));
                // A new attempt keeps its typed job, not the ad.
                let (_, _, job) = claim_attempt(c, "new", "k", &expected.to_json(), None, None, "")?;
                let rec = load(c, &job)?.unwrap();
                assert_eq!((rec.job, rec.ad.as_str()), (Some(expected.to_json()), ""));
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn participants_of_one_account_gather_together_and_a_shared_batch_is_remembered_until_its_jobs_go() {
        // Two clients' databases, one gathering (as under serve).
        let (a, b) = (
            StateDb::in_memory(&[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap(),
            StateDb::in_memory(&[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap(),
        );
        let g = Gathering::new(Duration::from_secs(3600), 10);
        let (pa, pb) = ("alice~\nk1", "bob~\nk2");
        let claim = |db: &StateDb, dir: &str, prefix: &str, p: &str| {
            let mut out = None;
            db.with_conn(|c| {
                out = Some(claim_attempt(c, dir, "k", "[ ]", None, Some((&g, "acct\napp", p)), prefix)?);
                Ok(())
            })
            .unwrap();
            out.unwrap()
        };
        let (_, batch, first) = claim(&a, "d1", "alice~", pa);
        assert_eq!(batch, shared_batch_name(&first, pa));
        assert!(batch.starts_with("blah#shared-") && !batch.contains("alice"), "{batch}");
        assert_eq!(claim(&b, "d2", "bob~", pb).1, batch, "bob's job joins alice's batch");
        assert_eq!(claim(&a, "d3", "alice~", pa).1, batch);
        assert_eq!(g.participants(&batch), Some(vec![pa.to_string(), pb.to_string()]), "the opener first, each once");
        b.with_conn(|c| {
            let members = close_batch(c, &g, &batch)?;
            assert_eq!(members.len(), 1, "bob reads only his own");
            assert!(batch_shared(c, &batch)?);
            assert!(!opened_batch(c, &batch, "k", pb)?, "bob did not open it");
            Ok(())
        })
        .unwrap();
        a.with_conn(|c| {
            assert_eq!(close_batch(c, &g, &batch)?.len(), 2);
            assert!(opened_batch(c, &batch, "k", pa)?, "alice's first job named it");
            Ok(())
        })
        .unwrap();
        // Closed: the next job opens another; once started, no participants.
        assert_ne!(claim(&b, "d4", "bob~", pb).1, batch);
        g.started(&batch);
        assert_eq!(g.participants(&batch), None);
        // The row goes with the last job of the batch.
        b.with_conn(|c| {
            let bobs = "bob~blah#d2#1";
            set_phase(c, bobs, Phase::Final, Some(4), Some("[ ]".into()))?;
            c.execute("UPDATE blah_jobs SET updated = 0 WHERE batch = ?1", [bobs])?;
            prune(c, 100.0)?;
            assert!(!batch_shared(c, &batch)?);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn jobs_gather_into_one_batch_until_it_closes_or_fills() {
        let db = StateDb::in_memory(&[gahp_services::schema::STATE_DB, gahp_services::schema::BLAH_JOBS]).unwrap();
        let g = Gathering::new(Duration::from_secs(3600), 3);
        db.with_conn(|c| {
            let mut claim = |dir: &str, key: &str| claim_attempt(c, dir, "k", "[ ]", None, Some((&g, key, "p")), "").unwrap();
            let (_, b, j) = claim("a", "app1");
            assert_eq!((b.as_str(), j.as_str()), ("blah#a#1", "blah#a#1"), "named after its first job");
            assert_eq!(claim("b", "app1").1, "blah#a#1");
            assert_eq!(claim("x", "app2").1, "blah#x#1", "another app: another batch");
            // A resubmit of a member: the same batch and job, not a new member.
            assert_eq!(claim("b", "app1"), ("k".into(), "blah#a#1".into(), "blah#b#1".into()));
            assert_eq!(claim("c", "app1").1, "blah#a#1");
            assert_eq!(claim("d", "app1").1, "blah#d#1", "the cap opens a new batch");
            Ok(())
        })
        .unwrap();
        db.with_conn(|c| {
            mark_cancelled(c, "blah#c#1")?;
            let members: Vec<String> = close_batch(c, &g, "blah#a#1")?.into_iter().map(|r| r.batch).collect();
            assert_eq!(members, ["blah#a#1", "blah#b#1"], "cancelled members stay out");
            assert_eq!(load(c, "blah#b#1")?.unwrap().boinc_batch, "blah#a#1");
            // Closed: the next job of its key opens a new batch.
            let (_, _, e) = claim_attempt(c, "e", "k", "[ ]", None, Some((&g, "app1", "p")), "")?;
            assert_eq!(load(c, &e)?.unwrap().boinc_batch, "blah#d#1", "the open one of the key");
            close_batch(c, &g, "blah#d#1")?;
            let (_, b, _) = claim_attempt(c, "f", "k", "[ ]", None, Some((&g, "app1", "p")), "")?;
            assert_eq!(b, "blah#f#1");
            // Needed while a member is active or undelivered; not once all went out.
            assert!(batch_needed(c, "blah#a#1")?);
            for m in ["blah#a#1", "blah#b#1"] {
                set_phase(c, m, Phase::Final, Some(4), Some("[ ]".into()))?;
            }
            assert!(batch_needed(c, "blah#a#1")?);
            set_retired(c, "blah#a#1")?;
            assert!(batch_needed(c, "blah#a#1")?);
            set_retired(c, "blah#b#1")?;
            assert!(!batch_needed(c, "blah#a#1")?);
            Ok(())
        })
        .unwrap();
    }
}
