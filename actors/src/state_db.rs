//! The daemon's durable state: one SQLite file in the state directory.
//! Calls block, so they are made from blocking threads (see FileStager).

use std::path::Path;
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

#[derive(Clone)]
pub struct StateDb {
    conn: Arc<Mutex<Connection>>,
}

impl StateDb {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let conn = Connection::open(dir.join("state.sqlite3")).map_err(std::io::Error::other)?;
        Self::init(conn)
    }

    pub fn in_memory() -> std::io::Result<Self> {
        Self::init(Connection::open_in_memory().map_err(std::io::Error::other)?)
    }

    fn init(conn: Connection) -> std::io::Result<Self> {
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             PRAGMA busy_timeout=5000;
             CREATE TABLE IF NOT EXISTS md5_cache (
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
        )
        .map_err(std::io::Error::other)?;
        Ok(StateDb { conn: Arc::new(Mutex::new(conn)) })
    }

    /// Runs `f` on the connection; call from a blocking thread (it waits
    /// for the lock and for SQLite). The BLAH tables are used this way.
    pub fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        // A panic elsewhere while holding the lock leaves SQLite consistent.
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut conn)
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
    }
}
