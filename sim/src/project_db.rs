//! The project database: SQLite with the tables of a BOINC project that the
//! remote-submission scripts touch (user, user_submit, user_submit_app, app,
//! batch, workunit, result, job_file, batch_file_assoc) plus a key/value
//! `meta` table for the sim's own state. One connection behind a mutex;
//! callers run it on blocking threads.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension, Row};

#[derive(Debug, thiserror::Error)]
pub enum ProjectDbError {
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("file store: {0}")]
    Io(#[from] std::io::Error),
}

pub type Res<T> = Result<T, ProjectDbError>;

// Batch states.
pub const BATCH_INIT: i64 = 0;
pub const BATCH_IN_PROGRESS: i64 = 1;
pub const BATCH_COMPLETE: i64 = 2;
pub const BATCH_ABORTED: i64 = 3;
pub const BATCH_RETIRED: i64 = 4;

// Result server states and outcomes.
pub const RS_UNSENT: i64 = 2;
pub const RS_IN_PROGRESS: i64 = 4;
pub const RS_OVER: i64 = 5;
pub const OUTCOME_SUCCESS: i64 = 1;
pub const OUTCOME_CLIENT_ERROR: i64 = 3;
pub const OUTCOME_NO_REPLY: i64 = 4;
pub const OUTCOME_DIDNT_NEED: i64 = 5;
pub const OUTCOME_VALIDATE_ERROR: i64 = 6;
// Validate states.
pub const VALIDATE_INIT: i64 = 0;
pub const VALIDATE_VALID: i64 = 1;
pub const VALIDATE_INVALID: i64 = 2;
pub const VALIDATE_INCONCLUSIVE: i64 = 4;
// Workunit error mask bits.
pub const WU_ERROR_TOO_MANY_ERRORS: i64 = 2;
pub const WU_ERROR_TOO_MANY_SUCCESS: i64 = 4;
pub const WU_ERROR_TOO_MANY_TOTAL: i64 = 8;
pub const WU_ERROR_CANCELLED: i64 = 16;

/// "Never" for `transition_time`.
pub const NEVER: f64 = 1e18;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS user (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    authenticator TEXT NOT NULL UNIQUE,
    create_time INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS user_submit (
    user_id INTEGER PRIMARY KEY,
    submit_all INTEGER NOT NULL DEFAULT 0,
    manage_all INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS user_submit_app (
    user_id INTEGER NOT NULL,
    app_id INTEGER NOT NULL,
    manage INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, app_id)
);
CREATE TABLE IF NOT EXISTS app (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS batch (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL,
    create_time INTEGER NOT NULL,
    name TEXT NOT NULL,
    app_id INTEGER NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    njobs INTEGER NOT NULL DEFAULT 0,
    nerror_jobs INTEGER NOT NULL DEFAULT 0,
    fraction_done REAL NOT NULL DEFAULT 0,
    completion_time REAL NOT NULL DEFAULT 0,
    expire_time REAL NOT NULL DEFAULT 0,
    est_completion_time REAL NOT NULL DEFAULT 0,
    credit_estimate REAL NOT NULL DEFAULT 0,
    credit_canonical REAL NOT NULL DEFAULT 0,
    -- 1 = retired, its files are still to be deleted
    files_pending INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batch_name ON batch (name);
CREATE INDEX IF NOT EXISTS batch_user ON batch (user_id);
CREATE TABLE IF NOT EXISTS workunit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    appid INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    create_time REAL NOT NULL,
    -- whole seconds, like MySQL's TIMESTAMP
    mod_time INTEGER NOT NULL,
    canonical_resultid INTEGER NOT NULL DEFAULT 0,
    error_mask INTEGER NOT NULL DEFAULT 0,
    -- 1 once an instance was sent (status IN_PROGRESS)
    ever_sent INTEGER NOT NULL DEFAULT 0,
    transition_time REAL NOT NULL,
    rsc_fpops_est REAL NOT NULL,
    rsc_fpops_bound REAL NOT NULL,
    rsc_memory_bound REAL NOT NULL,
    rsc_disk_bound REAL NOT NULL,
    delay_bound REAL NOT NULL,
    app_version_num INTEGER NOT NULL DEFAULT 0,
    priority INTEGER NOT NULL DEFAULT 0,
    command_line TEXT NOT NULL DEFAULT '',
    -- physical names, LF-separated, in template order
    input_files TEXT NOT NULL DEFAULT '',
    min_quorum INTEGER NOT NULL,
    target_nresults INTEGER NOT NULL,
    max_error_results INTEGER NOT NULL,
    max_total_results INTEGER NOT NULL,
    max_success_results INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS wu_batch ON workunit (batch);
CREATE INDEX IF NOT EXISTS wu_batch_mod ON workunit (batch, mod_time);
CREATE INDEX IF NOT EXISTS wu_transition ON workunit (transition_time);
CREATE TABLE IF NOT EXISTS result (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    workunitid INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    server_state INTEGER NOT NULL,
    outcome INTEGER NOT NULL DEFAULT 0,
    validate_state INTEGER NOT NULL DEFAULT 0,
    host_id INTEGER NOT NULL DEFAULT 0,
    host_name TEXT NOT NULL DEFAULT '',
    sent_time REAL NOT NULL DEFAULT 0,
    report_deadline REAL NOT NULL DEFAULT 0,
    received_time REAL NOT NULL DEFAULT 0,
    exit_status INTEGER NOT NULL DEFAULT 0,
    elapsed_time REAL NOT NULL DEFAULT 0,
    cpu_time REAL NOT NULL DEFAULT 0,
    stderr_out TEXT NOT NULL DEFAULT '',
    -- physical names in the upload store, LF-separated, by output index
    output_files TEXT NOT NULL DEFAULT '',
    output_hash TEXT NOT NULL DEFAULT '',
    granted_credit REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS result_wu ON result (workunitid);
CREATE INDEX IF NOT EXISTS result_state ON result (server_state, report_deadline);
CREATE INDEX IF NOT EXISTS result_queue ON result (server_state, id);
CREATE INDEX IF NOT EXISTS result_batch ON result (batch);
CREATE TABLE IF NOT EXISTS job_file (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    create_time REAL NOT NULL,
    delete_time REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS batch_file_assoc (
    job_file_id INTEGER NOT NULL,
    batch_id INTEGER NOT NULL,
    UNIQUE (job_file_id, batch_id)
);
CREATE INDEX IF NOT EXISTS bfa_batch ON batch_file_assoc (batch_id);
-- Jobs targeted at a host or a user (create_work --target_host/--target_user):
-- the transitioner makes no instances for them; the scheduler makes one when
-- a matching host asks for work.
CREATE TABLE IF NOT EXISTS assignment (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    create_time REAL NOT NULL,
    target_type INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    workunitid INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS assignment_wu ON assignment (workunitid);
CREATE INDEX IF NOT EXISTS assignment_target ON assignment (target_type, target_id);
";

/// The database behind its mutex.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) the database at `path`, WAL mode.
    pub fn open(path: &Path) -> Res<Store> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.pragma_update(None, "cache_size", -64_000)?;
        conn.execute_batch(SCHEMA)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Store { conn: Mutex::new(conn) })
    }

    /// The connection; a poisoned lock is taken over (SQLite keeps its own
    /// consistency, and a panic in one request must not stop the sim).
    pub fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whole seconds of a sim time, as a TIMESTAMP column stores it.
pub fn secs(t: f64) -> i64 {
    t.floor() as i64
}

pub fn meta_get(c: &Connection, key: &str) -> Res<Option<String>> {
    Ok(c.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0)).optional()?)
}

pub fn meta_set(c: &Connection, key: &str, value: &str) -> Res<()> {
    c.prepare_cached("INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?
        .execute(params![key, value])?;
    Ok(())
}

// ---------------------------------------------------------------- users

#[derive(Debug, Clone)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub authenticator: String,
}

fn user_row(r: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User { id: r.get(0)?, name: r.get(1)?, authenticator: r.get(2)? })
}

pub fn user_by_auth(c: &Connection, auth: &str) -> Res<Option<User>> {
    Ok(c.prepare_cached("SELECT id, name, authenticator FROM user WHERE authenticator = ?1")?.query_row([auth], user_row).optional()?)
}

pub fn user_by_id(c: &Connection, id: i64) -> Res<Option<User>> {
    Ok(c.prepare_cached("SELECT id, name, authenticator FROM user WHERE id = ?1")?.query_row([id], user_row).optional()?)
}

pub fn user_by_name(c: &Connection, name: &str) -> Res<Option<User>> {
    Ok(c.prepare_cached("SELECT id, name, authenticator FROM user WHERE name = ?1 ORDER BY id LIMIT 1")?
        .query_row([name], user_row)
        .optional()?)
}

/// The user's `user_submit.submit_all`, or `None` without a record.
pub fn user_submit_all(c: &Connection, user_id: i64) -> Res<Option<bool>> {
    Ok(c.prepare_cached("SELECT submit_all FROM user_submit WHERE user_id = ?1")?
        .query_row([user_id], |r| r.get::<_, i64>(0))
        .optional()?
        .map(|v| v != 0))
}

pub fn user_submit_app(c: &Connection, user_id: i64, app_id: i64) -> Res<bool> {
    Ok(c.prepare_cached("SELECT 1 FROM user_submit_app WHERE user_id = ?1 AND app_id = ?2")?
        .query_row([user_id, app_id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Creates a user; `submit` = `None` for no `user_submit` record, else
/// (`submit_all`, per-app rights).
pub fn create_user(c: &Connection, name: &str, auth: &str, now: f64, submit: Option<(bool, &[i64])>) -> Res<i64> {
    c.execute("INSERT INTO user (name, authenticator, create_time) VALUES (?1, ?2, ?3)", params![name, auth, secs(now)])?;
    let id = c.last_insert_rowid();
    if let Some((all, apps)) = submit {
        c.execute("INSERT INTO user_submit (user_id, submit_all) VALUES (?1, ?2)", params![id, all as i64])?;
        for app in apps {
            c.execute("INSERT OR IGNORE INTO user_submit_app (user_id, app_id) VALUES (?1, ?2)", params![id, app])?;
        }
    }
    Ok(id)
}

// ---------------------------------------------------------------- apps

/// The app's id, creating the row on first sight (ids stay stable across
/// restarts).
pub fn ensure_app(c: &Connection, name: &str) -> Res<i64> {
    c.execute("INSERT OR IGNORE INTO app (name) VALUES (?1)", [name])?;
    Ok(c.query_row("SELECT id FROM app WHERE name = ?1", [name], |r| r.get(0))?)
}

// ---------------------------------------------------------------- batches

#[derive(Debug, Clone)]
pub struct Batch {
    pub id: i64,
    pub user_id: i64,
    pub create_time: i64,
    pub name: String,
    pub app_id: i64,
    pub state: i64,
    pub njobs: i64,
    pub nerror_jobs: i64,
    pub fraction_done: f64,
    pub completion_time: f64,
    pub expire_time: f64,
    pub est_completion_time: f64,
    pub credit_estimate: f64,
    pub credit_canonical: f64,
}

const BATCH_COLS: &str = "id, user_id, create_time, name, app_id, state, njobs, nerror_jobs, \
    fraction_done, completion_time, expire_time, est_completion_time, credit_estimate, credit_canonical";

fn batch_row(r: &Row<'_>) -> rusqlite::Result<Batch> {
    Ok(Batch {
        id: r.get(0)?,
        user_id: r.get(1)?,
        create_time: r.get(2)?,
        name: r.get(3)?,
        app_id: r.get(4)?,
        state: r.get(5)?,
        njobs: r.get(6)?,
        nerror_jobs: r.get(7)?,
        fraction_done: r.get(8)?,
        completion_time: r.get(9)?,
        expire_time: r.get(10)?,
        est_completion_time: r.get(11)?,
        credit_estimate: r.get(12)?,
        credit_canonical: r.get(13)?,
    })
}

pub fn batch_by_id(c: &Connection, id: i64) -> Res<Option<Batch>> {
    Ok(c.prepare_cached(&format!("SELECT {BATCH_COLS} FROM batch WHERE id = ?1"))?.query_row([id], batch_row).optional()?)
}

/// The oldest batch of that name (MySQL returns the first row by id when
/// no order is asked for).
pub fn batch_by_name(c: &Connection, name: &str) -> Res<Option<Batch>> {
    Ok(c.prepare_cached(&format!("SELECT {BATCH_COLS} FROM batch WHERE name = ?1 ORDER BY id LIMIT 1"))?
        .query_row([name], batch_row)
        .optional()?)
}

pub fn batches_of_user(c: &Connection, user_id: i64) -> Res<Vec<Batch>> {
    let mut st = c.prepare_cached(&format!("SELECT {BATCH_COLS} FROM batch WHERE user_id = ?1 ORDER BY id"))?;
    let rows = st.query_map([user_id], batch_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn all_batches(c: &Connection) -> Res<Vec<Batch>> {
    let mut st = c.prepare_cached(&format!("SELECT {BATCH_COLS} FROM batch ORDER BY id"))?;
    let rows = st.query_map([], batch_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn insert_batch(c: &Connection, user_id: i64, app_id: i64, name: &str, now: f64, expire_time: f64, njobs: i64) -> Res<i64> {
    c.prepare_cached(
        "INSERT INTO batch (user_id, create_time, name, app_id, state, njobs, expire_time) \
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6)",
    )?
    .execute(params![user_id, secs(now), name, app_id, njobs, expire_time])?;
    Ok(c.last_insert_rowid())
}

/// `get_batch_params()`: recomputes fraction done, error jobs, canonical
/// credit; a batch in progress whose jobs are all done or failed becomes
/// complete. Returns the batch as updated.
pub fn recompute_batch(c: &Connection, mut b: Batch, now: f64) -> Res<Batch> {
    let (n, fp_total, fp_done, nerr, unfinished): (i64, f64, f64, i64, i64) = c
        .prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(rsc_fpops_est), 0), \
             COALESCE(SUM(CASE WHEN canonical_resultid != 0 OR error_mask != 0 THEN rsc_fpops_est ELSE 0 END), 0), \
             COALESCE(SUM(CASE WHEN canonical_resultid = 0 AND error_mask != 0 THEN 1 ELSE 0 END), 0), \
             COALESCE(SUM(CASE WHEN canonical_resultid = 0 AND error_mask = 0 THEN 1 ELSE 0 END), 0) \
             FROM workunit WHERE batch = ?1",
        )?
        .query_row([b.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?;
    let credit: f64 = c
        .prepare_cached(
            "SELECT COALESCE(SUM(r.granted_credit), 0) FROM workunit w JOIN result r \
             ON r.id = w.canonical_resultid WHERE w.batch = ?1 AND w.canonical_resultid != 0",
        )?
        .query_row([b.id], |r| r.get(0))?;
    let _ = n;
    b.fraction_done = if fp_total > 0.0 { fp_done / fp_total } else { 0.0 };
    b.nerror_jobs = nerr;
    b.credit_canonical = credit;
    if unfinished == 0 && b.state == BATCH_IN_PROGRESS {
        b.state = BATCH_COMPLETE;
        b.completion_time = secs(now) as f64;
    }
    c.prepare_cached(
        "UPDATE batch SET fraction_done = ?1, nerror_jobs = ?2, credit_canonical = ?3, \
         state = ?4, completion_time = ?5 WHERE id = ?6",
    )?
    .execute(params![b.fraction_done, b.nerror_jobs, b.credit_canonical, b.state, b.completion_time, b.id])?;
    Ok(b)
}

/// Total CPU time of a batch's instances.
pub fn batch_cpu_time(c: &Connection, batch_id: i64) -> Res<f64> {
    Ok(c.prepare_cached("SELECT COALESCE(SUM(cpu_time), 0) FROM result WHERE batch = ?1")?.query_row([batch_id], |r| r.get(0))?)
}

// ---------------------------------------------------------------- jobs

#[derive(Debug, Clone)]
pub struct Workunit {
    pub id: i64,
    pub name: String,
    pub appid: i64,
    pub batch: i64,
    pub mod_time: i64,
    pub canonical_resultid: i64,
    pub error_mask: i64,
    pub ever_sent: bool,
    pub transition_time: f64,
    pub rsc_fpops_est: f64,
    /// An instance that runs past `rsc_fpops_bound / flops` is killed.
    pub rsc_fpops_bound: f64,
    /// Recorded only: the sim's hosts have no memory or disk to run out of.
    pub rsc_memory_bound: f64,
    pub rsc_disk_bound: f64,
    pub delay_bound: f64,
    pub command_line: String,
    pub input_files: Vec<String>,
    pub min_quorum: i64,
    pub target_nresults: i64,
    pub max_error_results: i64,
    pub max_total_results: i64,
    pub max_success_results: i64,
}

const WU_COLS: &str = "id, name, appid, batch, mod_time, canonical_resultid, error_mask, ever_sent, \
    transition_time, rsc_fpops_est, delay_bound, command_line, input_files, min_quorum, \
    target_nresults, max_error_results, max_total_results, max_success_results, \
    rsc_fpops_bound, rsc_memory_bound, rsc_disk_bound";

fn split_lines(s: String) -> Vec<String> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split('\n').map(str::to_string).collect()
    }
}

fn wu_row(r: &Row<'_>) -> rusqlite::Result<Workunit> {
    Ok(Workunit {
        id: r.get(0)?,
        name: r.get(1)?,
        appid: r.get(2)?,
        batch: r.get(3)?,
        mod_time: r.get(4)?,
        canonical_resultid: r.get(5)?,
        error_mask: r.get(6)?,
        ever_sent: r.get::<_, i64>(7)? != 0,
        transition_time: r.get(8)?,
        rsc_fpops_est: r.get(9)?,
        delay_bound: r.get(10)?,
        command_line: r.get(11)?,
        input_files: split_lines(r.get(12)?),
        min_quorum: r.get(13)?,
        target_nresults: r.get(14)?,
        max_error_results: r.get(15)?,
        max_total_results: r.get(16)?,
        max_success_results: r.get(17)?,
        rsc_fpops_bound: r.get(18)?,
        rsc_memory_bound: r.get(19)?,
        rsc_disk_bound: r.get(20)?,
    })
}

pub fn wu_by_name(c: &Connection, name: &str) -> Res<Option<Workunit>> {
    Ok(c.prepare_cached(&format!("SELECT {WU_COLS} FROM workunit WHERE name = ?1"))?.query_row([name], wu_row).optional()?)
}

pub fn wu_by_id(c: &Connection, id: i64) -> Res<Option<Workunit>> {
    Ok(c.prepare_cached(&format!("SELECT {WU_COLS} FROM workunit WHERE id = ?1"))?.query_row([id], wu_row).optional()?)
}

pub fn wus_of_batch(c: &Connection, batch: i64) -> Res<Vec<Workunit>> {
    let mut st = c.prepare_cached(&format!("SELECT {WU_COLS} FROM workunit WHERE batch = ?1 ORDER BY id"))?;
    let rows = st.query_map([batch], wu_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Jobs due for the transitioner, oldest due first.
pub fn wus_due(c: &Connection, now: f64, limit: usize) -> Res<Vec<Workunit>> {
    let mut st =
        c.prepare_cached(&format!("SELECT {WU_COLS} FROM workunit WHERE transition_time <= ?1 ORDER BY transition_time, id LIMIT ?2"))?;
    let rows = st.query_map(params![now, limit as i64], wu_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A job's new fields; `mod_time` is bumped only when one of them changes
/// value, as MySQL's `ON UPDATE CURRENT_TIMESTAMP` does.
pub fn set_wu_outcome(c: &Connection, wu: &Workunit, canonical: i64, error_mask: i64, now: f64) -> Res<()> {
    if canonical == wu.canonical_resultid && error_mask == wu.error_mask {
        return Ok(());
    }
    c.prepare_cached("UPDATE workunit SET canonical_resultid = ?1, error_mask = ?2, mod_time = ?3 WHERE id = ?4")?.execute(params![
        canonical,
        error_mask,
        secs(now),
        wu.id
    ])?;
    Ok(())
}

pub fn set_transition_time(c: &Connection, wu_id: i64, t: f64) -> Res<()> {
    c.prepare_cached("UPDATE workunit SET transition_time = ?1 WHERE id = ?2")?.execute(params![t, wu_id])?;
    Ok(())
}

/// `abort_workunit()`: unsent instances become "didn't need", the job gets
/// the cancelled bit.
pub fn abort_wu(c: &Connection, wu: &Workunit, now: f64) -> Res<()> {
    c.prepare_cached("UPDATE result SET server_state = 5, outcome = 5 WHERE workunitid = ?1 AND server_state = 2")?.execute([wu.id])?;
    set_wu_outcome(c, wu, wu.canonical_resultid, wu.error_mask | WU_ERROR_CANCELLED, now)?;
    set_transition_time(c, wu.id, now)
}

// ---------------------------------------------------------------- instances

#[derive(Debug, Clone)]
pub struct Instance {
    pub id: i64,
    pub name: String,
    pub workunitid: i64,
    pub batch: i64,
    pub server_state: i64,
    pub outcome: i64,
    pub validate_state: i64,
    pub host_id: i64,
    pub host_name: String,
    pub sent_time: f64,
    pub report_deadline: f64,
    pub received_time: f64,
    pub exit_status: i64,
    pub elapsed_time: f64,
    pub cpu_time: f64,
    pub stderr_out: String,
    pub output_files: Vec<String>,
    pub output_hash: String,
    pub granted_credit: f64,
}

const RESULT_COLS: &str = "id, name, workunitid, batch, server_state, outcome, validate_state, \
    host_id, host_name, sent_time, report_deadline, received_time, exit_status, elapsed_time, \
    cpu_time, stderr_out, output_files, output_hash, granted_credit";

fn result_row(r: &Row<'_>) -> rusqlite::Result<Instance> {
    Ok(Instance {
        id: r.get(0)?,
        name: r.get(1)?,
        workunitid: r.get(2)?,
        batch: r.get(3)?,
        server_state: r.get(4)?,
        outcome: r.get(5)?,
        validate_state: r.get(6)?,
        host_id: r.get(7)?,
        host_name: r.get(8)?,
        sent_time: r.get(9)?,
        report_deadline: r.get(10)?,
        received_time: r.get(11)?,
        exit_status: r.get(12)?,
        elapsed_time: r.get(13)?,
        cpu_time: r.get(14)?,
        stderr_out: r.get(15)?,
        output_files: split_lines(r.get(16)?),
        output_hash: r.get(17)?,
        granted_credit: r.get(18)?,
    })
}

pub fn result_by_id(c: &Connection, id: i64) -> Res<Option<Instance>> {
    Ok(c.prepare_cached(&format!("SELECT {RESULT_COLS} FROM result WHERE id = ?1"))?.query_row([id], result_row).optional()?)
}

pub fn result_by_name(c: &Connection, name: &str) -> Res<Option<Instance>> {
    Ok(c.prepare_cached(&format!("SELECT {RESULT_COLS} FROM result WHERE name = ?1 LIMIT 1"))?.query_row([name], result_row).optional()?)
}

/// A job's target as `(target_type, target_id)`, if it has one.
pub fn wu_target(c: &Connection, wu_id: i64) -> Res<Option<(i64, i64)>> {
    Ok(c.prepare_cached("SELECT target_type, target_id FROM assignment WHERE workunitid = ?1 ORDER BY id LIMIT 1")?
        .query_row([wu_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

pub fn results_of_wu(c: &Connection, wu_id: i64) -> Res<Vec<Instance>> {
    let mut st = c.prepare_cached(&format!("SELECT {RESULT_COLS} FROM result WHERE workunitid = ?1 ORDER BY id"))?;
    let rows = st.query_map([wu_id], result_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn results_of_batch(c: &Connection, batch: i64) -> Res<Vec<Instance>> {
    let mut st = c.prepare_cached(&format!("SELECT {RESULT_COLS} FROM result WHERE batch = ?1 ORDER BY id"))?;
    let rows = st.query_map([batch], result_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

// ---------------------------------------------------------------- files

#[derive(Debug, Clone)]
pub struct JobFile {
    pub id: i64,
    pub name: String,
    pub create_time: f64,
    pub delete_time: f64,
}

fn jf_row(r: &Row<'_>) -> rusqlite::Result<JobFile> {
    Ok(JobFile { id: r.get(0)?, name: r.get(1)?, create_time: r.get(2)?, delete_time: r.get(3)? })
}

pub fn job_file_by_name(c: &Connection, name: &str) -> Res<Option<JobFile>> {
    Ok(c.prepare_cached("SELECT id, name, create_time, delete_time FROM job_file WHERE name = ?1")?.query_row([name], jf_row).optional()?)
}

pub fn all_job_files(c: &Connection) -> Res<Vec<JobFile>> {
    let mut st = c.prepare_cached("SELECT id, name, create_time, delete_time FROM job_file ORDER BY id")?;
    let rows = st.query_map([], jf_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Inserts a job_file record; `Ok(None)` if the name exists (the insert
/// hits the unique key).
pub fn insert_job_file(c: &Connection, name: &str, now: f64, delete_time: f64) -> Res<Option<i64>> {
    let n = c.prepare_cached("INSERT OR IGNORE INTO job_file (name, create_time, delete_time) VALUES (?1, ?2, ?3)")?.execute(params![
        name,
        secs(now),
        delete_time
    ])?;
    Ok((n == 1).then(|| c.last_insert_rowid()))
}

pub fn delete_job_file(c: &Connection, id: i64) -> Res<()> {
    c.prepare_cached("DELETE FROM job_file WHERE id = ?1")?.execute([id])?;
    c.prepare_cached("DELETE FROM batch_file_assoc WHERE job_file_id = ?1")?.execute([id])?;
    Ok(())
}

/// Records a (file, batch) association; `false` if it already exists
/// (a duplicate key on a real server).
pub fn insert_assoc(c: &Connection, job_file_id: i64, batch_id: i64) -> Res<bool> {
    let n = c
        .prepare_cached("INSERT OR IGNORE INTO batch_file_assoc (job_file_id, batch_id) VALUES (?1, ?2)")?
        .execute([job_file_id, batch_id])?;
    Ok(n == 1)
}

pub fn assoc_batches(c: &Connection, job_file_id: i64) -> Res<Vec<i64>> {
    let mut st = c.prepare_cached("SELECT batch_id FROM batch_file_assoc WHERE job_file_id = ?1 ORDER BY batch_id")?;
    let rows = st.query_map([job_file_id], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
