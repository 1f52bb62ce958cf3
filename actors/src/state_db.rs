//! The daemon's durable state: one SQLite file in the state directory.
//! Calls block, so they are made from blocking threads (see FileStager).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, OptionalExtension};

/// What identifies an unchanged file without reading it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileStamp {
    pub path: Vec<u8>,
    pub size: u64,
    pub mtime_ns: i64,
    pub inode: u64,
}

/// The schema, one step per version: `MIGRATIONS[i]` takes a database from
/// `PRAGMA user_version` i to i + 1. Append a step to change the schema;
/// never edit one that has shipped. Step 1 is the schema that existed
/// before versioning (hence IF NOT EXISTS: such a database is at version 0).
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS md5_cache (
         path BLOB PRIMARY KEY,
         size INTEGER NOT NULL,
         mtime_ns INTEGER NOT NULL,
         inode INTEGER NOT NULL,
         md5 TEXT NOT NULL
     );
     CREATE TABLE IF NOT EXISTS blah_projects (
         key TEXT PRIMARY KEY,
         url TEXT NOT NULL,
         authenticator_file BLOB NOT NULL
     );
     CREATE TABLE IF NOT EXISTS blah_jobs (
         batch TEXT PRIMARY KEY,
         project TEXT NOT NULL,
         job_dir TEXT NOT NULL,
         attempt INTEGER NOT NULL,
         ad TEXT NOT NULL,
         phase TEXT NOT NULL,
         boinc_status TEXT,
         status INTEGER,
         final_ad TEXT,
         abort_pending INTEGER NOT NULL DEFAULT 0,
         retired INTEGER NOT NULL DEFAULT 0,
         lease_until REAL NOT NULL DEFAULT 0,
         updated REAL NOT NULL
     );
     CREATE INDEX IF NOT EXISTS blah_jobs_by_dir ON blah_jobs (job_dir, attempt);",
    // Shared BOINC batches: the batch a BLAH job went into (NULL: the
    // batch of its own name, as every job had before).
    "ALTER TABLE blah_jobs ADD COLUMN boinc_batch TEXT;
     CREATE INDEX blah_jobs_by_boinc_batch ON blah_jobs (boinc_batch);",
    // 3: the broker's routes: which project of a pool holds a batch, and
    // which batch a job belongs to.
    "CREATE TABLE broker_batches (
         pool TEXT NOT NULL,
         batch TEXT NOT NULL,
         project TEXT NOT NULL,
         PRIMARY KEY (pool, batch)
     );
     CREATE TABLE broker_jobs (
         pool TEXT NOT NULL,
         job TEXT NOT NULL,
         batch TEXT NOT NULL,
         PRIMARY KEY (pool, job)
     );",
    // 4: work sequences: their records, dead branches and state files.
    crate::sequences::store::MIGRATION,
    // 5: create_batch requests sent whose outcome is not known yet (the
    // submit pipeline waits for one to settle before creating again).
    "CREATE TABLE batch_creates (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         batch TEXT NOT NULL,
         sent_at REAL NOT NULL,
         PRIMARY KEY (project, account, batch)
     );",
    // 6: work-sequence batches still to retire.
    crate::sequences::store::RETIRE_MIGRATION,
    // 7: pool sequences that moved to another project of their pool.
    crate::sequences::store::MOVE_MIGRATION,
    // 8: upload byte budgets learnt from a project's refusals, with the
    // configured budget they were learnt under (a new one starts afresh).
    "CREATE TABLE upload_budgets (
         project TEXT PRIMARY KEY,
         configured INTEGER NOT NULL,
         learnt INTEGER NOT NULL
     );",
];

/// The schema version this daemon brings a state database to.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// A state database as found, read without changing it.
#[derive(Debug, Clone, PartialEq)]
pub struct StateDbSummary {
    /// `PRAGMA user_version`.
    pub schema_version: usize,
    /// Learnt upload budgets: (project URL, configured, learnt bytes).
    pub upload_budgets: Vec<(String, u64, u64)>,
}

/// Reads the state database of `dir` read-only (no migration, no WAL
/// set-up); `None` when there is none yet.
pub fn inspect(dir: &Path) -> rusqlite::Result<Option<StateDbSummary>> {
    let path = dir.join("state.sqlite3");
    if !path.exists() {
        return Ok(None);
    }
    let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let has_budgets: bool =
        conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'upload_budgets'", [], |r| r.get::<_, i64>(0))?
            > 0;
    let mut upload_budgets = Vec::new();
    if has_budgets {
        let mut stmt = conn.prepare("SELECT project, configured, learnt FROM upload_budgets ORDER BY project")?;
        let rows =
            stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64, r.get::<_, i64>(2)?.max(0) as u64)))?;
        for row in rows {
            upload_budgets.push(row?);
        }
    }
    Ok(Some(StateDbSummary { schema_version: version.max(0) as usize, upload_budgets }))
}

/// Brings the schema to the newest version, each step in a transaction of
/// its own. A database newer than this daemon is refused, not guessed at.
fn migrate(conn: &mut Connection) -> std::io::Result<()> {
    let sql = std::io::Error::other;
    let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)).map_err(sql)?.try_into().unwrap_or(usize::MAX);
    if version > MIGRATIONS.len() {
        return Err(std::io::Error::other(format!(
            "the state database has schema version {version}, newer than this daemon's {}; use a newer boinc_gahp or another --state-dir",
            MIGRATIONS.len()
        )));
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction().map_err(sql)?;
        tx.execute_batch(step).map_err(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64).map_err(sql)?;
        tx.commit().map_err(sql)?;
    }
    Ok(())
}

#[derive(Clone)]
pub struct StateDb {
    conn: Arc<Mutex<Connection>>,
    /// MD5s stored since the database was opened, and the count at which
    /// the cache is pruned next.
    md5_stores: Arc<AtomicU64>,
    md5_prune_at: Arc<AtomicU64>,
}

/// The MD5 cache drops the rows of files that no longer exist once per
/// this many new rows, or once per as many new rows as it kept the last
/// time if that is more (a stat per row stored, not per row held): every
/// HTCondor job brings input files of its own (its spool), deleted when
/// the job leaves the queue, and without this the cache grows by a row
/// per input file for as long as the state directory lives (the soak run
/// of BENCHMARKS.md measured it). A stat is far cheaper than the hashing
/// that stored the row.
pub const MD5_PRUNE_EVERY: u64 = 1000;

impl StateDb {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let conn = Connection::open(dir.join("state.sqlite3")).map_err(std::io::Error::other)?;
        Self::init(conn)
    }

    pub fn in_memory() -> std::io::Result<Self> {
        Self::init(Connection::open_in_memory().map_err(std::io::Error::other)?)
    }

    fn init(mut conn: Connection) -> std::io::Result<Self> {
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;")
            .map_err(std::io::Error::other)?;
        migrate(&mut conn)?;
        Ok(StateDb {
            conn: Arc::new(Mutex::new(conn)),
            md5_stores: Arc::new(AtomicU64::new(0)),
            md5_prune_at: Arc::new(AtomicU64::new(MD5_PRUNE_EVERY)),
        })
    }

    /// Runs `f` on the connection; call from a blocking thread (it waits
    /// for the lock and for SQLite). The BLAH tables are used this way.
    pub fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        // A panic elsewhere while holding the lock leaves SQLite consistent.
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut conn)
    }

    /// When a create_batch of `batch` was sent whose outcome is not known.
    pub fn create_sent_at(&self, project: &str, account: &str, batch: &str) -> rusqlite::Result<Option<f64>> {
        self.with_conn(|c| {
            c.query_row(
                "SELECT sent_at FROM batch_creates WHERE project = ?1 AND account = ?2 AND batch = ?3",
                params![project, account, batch],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// Records, before it is sent, that a create_batch of `batch` goes out.
    pub fn note_create_sent(&self, project: &str, account: &str, batch: &str, sent_at: f64) -> rusqlite::Result<()> {
        self.with_conn(|c| {
            c.execute(
                "INSERT OR REPLACE INTO batch_creates (project, account, batch, sent_at) VALUES (?1, ?2, ?3, ?4)",
                params![project, account, batch, sent_at],
            )
            .map(drop)
        })
    }

    /// The outcome of `batch`'s create is known now.
    pub fn forget_create(&self, project: &str, account: &str, batch: &str) -> rusqlite::Result<()> {
        self.with_conn(|c| {
            c.execute("DELETE FROM batch_creates WHERE project = ?1 AND account = ?2 AND batch = ?3", params![project, account, batch])
                .map(drop)
        })
    }

    /// The byte budget learnt for uploads to `project` while `configured`
    /// was its configured one.
    pub fn learnt_upload_budget(&self, project: &str, configured: u64) -> rusqlite::Result<Option<u64>> {
        self.with_conn(|c| {
            c.query_row(
                "SELECT learnt FROM upload_budgets WHERE project = ?1 AND configured = ?2",
                params![project, configured as i64],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|v| v.map(|b| b.max(0) as u64))
        })
    }

    /// Records a smaller byte budget for uploads to `project`.
    pub fn note_upload_budget(&self, project: &str, configured: u64, learnt: u64) -> rusqlite::Result<()> {
        self.with_conn(|c| {
            c.execute(
                "INSERT OR REPLACE INTO upload_budgets (project, configured, learnt) VALUES (?1, ?2, ?3)",
                params![project, configured as i64, learnt as i64],
            )
            .map(drop)
        })
    }

    /// The cached MD5 of a file, if the file is unchanged since it was hashed.
    pub fn cached_md5(&self, stamp: &FileStamp) -> Option<String> {
        let conn = self.conn.lock().ok()?;
        conn.query_row(
            "SELECT md5 FROM md5_cache WHERE path = ?1 AND size = ?2 AND mtime_ns = ?3 AND inode = ?4",
            params![stamp.path, stamp.size as i64, stamp.mtime_ns, stamp.inode as i64],
            |row| row.get(0),
        )
        .optional()
        .ok()
        .flatten()
    }

    pub fn store_md5(&self, stamp: &FileStamp, md5: &str) {
        let Ok(conn) = self.conn.lock() else { return };
        let r = conn.execute(
            "INSERT OR REPLACE INTO md5_cache (path, size, mtime_ns, inode, md5) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![stamp.path, stamp.size as i64, stamp.mtime_ns, stamp.inode as i64, md5],
        );
        if let Err(e) = r {
            tracing::warn!("can't store an MD5 in the cache: {e}");
        }
        // Under the connection's lock: one store at a time gets here.
        let stores = self.md5_stores.fetch_add(1, Ordering::Relaxed) + 1;
        if stores >= self.md5_prune_at.load(Ordering::Relaxed) {
            let kept = match prune_md5_cache(&conn) {
                Ok((gone, kept)) => {
                    tracing::debug!("MD5 cache: {gone} rows of files that no longer exist dropped, {kept} kept");
                    kept
                }
                Err(e) => {
                    tracing::warn!("can't prune the MD5 cache: {e}");
                    0
                }
            };
            self.md5_prune_at.store(stores + MD5_PRUNE_EVERY.max(kept), Ordering::Relaxed);
        }
    }
}

/// Deletes the MD5 cache's rows whose file is gone; returns how many went
/// and how many are left.
fn prune_md5_cache(conn: &Connection) -> rusqlite::Result<(u64, u64)> {
    let paths: Vec<Vec<u8>> = conn.prepare("SELECT path FROM md5_cache")?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    let total = paths.len() as u64;
    let mut gone = 0u64;
    for p in paths {
        let path = Path::new(std::ffi::OsStr::from_bytes(&p));
        if matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            gone += conn.execute("DELETE FROM md5_cache WHERE path = ?1", params![p])? as u64;
        }
    }
    Ok((gone, total - gone))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_md5_cache_forgets_files_that_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path()).unwrap();
        let stamp = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            use std::os::unix::fs::MetadataExt;
            FileStamp { path: p.as_os_str().as_bytes().to_vec(), size: m.len(), mtime_ns: m.mtime(), inode: m.ino() }
        };
        let kept = dir.path().join("kept");
        std::fs::write(&kept, "k").unwrap();
        db.store_md5(&stamp(&kept), "k5");
        // Files of jobs that came and went: one row each, until a prune.
        for i in 2..MD5_PRUNE_EVERY {
            let f = dir.path().join(format!("job{i}"));
            std::fs::write(&f, "j").unwrap();
            db.store_md5(&stamp(&f), "j5");
            std::fs::remove_file(&f).unwrap();
        }
        let rows = |db: &StateDb| db.with_conn(|c| c.query_row("SELECT count(*) FROM md5_cache", [], |r| r.get::<_, i64>(0))).unwrap();
        assert_eq!(rows(&db), MD5_PRUNE_EVERY as i64 - 1);
        // The store that makes it MD5_PRUNE_EVERY prunes the gone ones.
        let last = dir.path().join("last");
        std::fs::write(&last, "l").unwrap();
        db.store_md5(&stamp(&last), "l5");
        assert_eq!(rows(&db), 2);
        assert_eq!(db.cached_md5(&stamp(&kept)).as_deref(), Some("k5"));
        assert_eq!(db.cached_md5(&stamp(&last)).as_deref(), Some("l5"));
    }

    #[test]
    fn a_new_database_gets_every_step_and_an_old_one_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        // A database made before versioning: the tables, user_version 0.
        {
            let conn = Connection::open(dir.path().join("state.sqlite3")).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute("INSERT INTO md5_cache VALUES (x'61', 1, 2, 3, 'abc')", []).unwrap();
        }
        let db = StateDb::open(dir.path()).unwrap();
        let (version, kept): (i64, i64) = db
            .with_conn(|c| {
                Ok((
                    c.query_row("PRAGMA user_version", [], |r| r.get(0))?,
                    c.query_row("SELECT count(*) FROM md5_cache", [], |r| r.get(0))?,
                ))
            })
            .unwrap();
        assert_eq!(version as usize, MIGRATIONS.len());
        assert_eq!(kept, 1, "an upgrade keeps what the database held");
    }

    #[test]
    fn a_database_from_a_newer_daemon_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join("state.sqlite3")).unwrap();
            conn.pragma_update(None, "user_version", (MIGRATIONS.len() + 1) as i64).unwrap();
        }
        let err = StateDb::open(dir.path()).err().expect("refused");
        assert!(err.to_string().contains("newer than this daemon"), "{err}");
    }

    #[test]
    fn inspect_reads_the_version_and_budgets_without_migrating() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(inspect(dir.path()).unwrap(), None);
        {
            let db = StateDb::open(dir.path()).unwrap();
            db.note_upload_budget("http://p/", 8 << 20, 4 << 20).unwrap();
        }
        let s = inspect(dir.path()).unwrap().unwrap();
        assert_eq!(s.schema_version, SCHEMA_VERSION);
        assert_eq!(s.upload_budgets, [("http://p/".to_string(), 8 << 20, 4 << 20)]);
        let old = tempfile::tempdir().unwrap();
        Connection::open(old.path().join("state.sqlite3")).unwrap().execute_batch("PRAGMA user_version = 2; CREATE TABLE t (x);").unwrap();
        assert_eq!(inspect(old.path()).unwrap().unwrap(), StateDbSummary { schema_version: 2, upload_budgets: Vec::new() });
        let after: i64 =
            Connection::open(old.path().join("state.sqlite3")).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(after, 2, "inspecting must not migrate");
    }
}
