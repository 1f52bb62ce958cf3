//! The daemon's durable state: one SQLite file in the state directory.
//! Calls block, so they are made from blocking threads (see FileStager).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::schema::Migration;
use rusqlite::{params, Connection, OptionalExtension};

/// What identifies an unchanged file without reading it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileStamp {
    pub path: Vec<u8>,
    pub size: u64,
    pub mtime_ns: i64,
    pub inode: u64,
}

/// The schema's newest version.
pub fn newest_version(schema: &[&[Migration]]) -> usize {
    schema.iter().flat_map(|m| m.iter()).map(|m| m.version).max().unwrap_or(0)
}

/// The state database of `dir` as found, opened read-only: no migration,
/// no WAL set-up (for `boinc_gahp check`). `None` when there is none yet.
pub fn open_read_only(dir: &Path) -> rusqlite::Result<Option<Connection>> {
    let path = dir.join("state.sqlite3");
    if !path.exists() {
        return Ok(None);
    }
    Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map(Some)
}

/// A database's schema version (`PRAGMA user_version`).
pub fn schema_version(conn: &Connection) -> rusqlite::Result<usize> {
    conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)).map(|v| v.max(0) as usize)
}

/// Whether the database has table `name` (an older one may not).
pub fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| r.get::<_, i64>(0)).map(|n| n > 0)
}

/// Brings the schema to the newest version, each version's steps in a
/// transaction of their own. A database newer than this daemon is refused,
/// not guessed at.
fn migrate(conn: &mut Connection, schema: &[&[Migration]]) -> std::io::Result<()> {
    let sql = std::io::Error::other;
    let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)).map_err(sql)?.try_into().unwrap_or(usize::MAX);
    let newest = newest_version(schema);
    if version > newest {
        return Err(std::io::Error::other(format!(
            "the state database has schema version {version}, newer than this daemon's {newest}; use a newer boinc_gahp or another --state-dir"
        )));
    }
    let mut steps: Vec<Migration> = schema.iter().flat_map(|m| m.iter().copied()).filter(|m| m.version > version).collect();
    // Stable: a version's steps run in the order the schema lists them.
    steps.sort_by_key(|m| m.version);
    for group in steps.chunk_by(|a, b| a.version == b.version) {
        let tx = conn.transaction().map_err(sql)?;
        for step in group {
            tx.execute_batch(step.sql).map_err(sql)?;
        }
        tx.pragma_update(None, "user_version", group[0].version as i64).map_err(sql)?;
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

/// The database's file in the state directory.
pub const DB_FILE: &str = "state.sqlite3";

/// Why a state database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Not a database, or one whose pages do not hold together (garbled,
    /// truncated): moved aside, never half-read.
    #[error("{0}")]
    Unreadable(String),
    #[error(transparent)]
    Other(#[from] std::io::Error),
}

impl From<rusqlite::Error> for OpenError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
        match e.sqlite_error_code() {
            Some(NotADatabase | DatabaseCorrupt) => OpenError::Unreadable(e.to_string()),
            _ => OpenError::Other(std::io::Error::other(e)),
        }
    }
}

impl StateDb {
    /// The database of the state directory, brought to `schema`. One that
    /// is unreadable (garbled, truncated) is moved aside, with a line on
    /// stderr and in the log that says where, and an empty one takes its
    /// place: the daemon starts, and what the old one held is lost
    /// (docs/blah.md says what that costs). Any other failure (permissions,
    /// a newer schema, a full disk) is an error: those files are kept.
    pub fn open(dir: &Path, schema: &[&[Migration]]) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(DB_FILE);
        let why = match Self::open_checked(&path, schema) {
            Ok(db) => return Ok(db),
            Err(OpenError::Other(e)) => return Err(e),
            Err(OpenError::Unreadable(why)) => why,
        };
        let aside = move_aside(&path)?;
        let line = format!(
            "the state database {} can't be read ({why}): moved aside to {}; starting with an empty one",
            path.display(),
            aside.display()
        );
        eprintln!("boinc_gahp: {line}");
        tracing::error!("{line}");
        Self::open_checked(&path, schema).map_err(|e| match e {
            OpenError::Other(e) => e,
            e => std::io::Error::other(e.to_string()),
        })
    }

    /// Opens `path` and checks every page of it before anything is read
    /// (`PRAGMA quick_check`: the b-trees hold together), then migrates.
    fn open_checked(path: &Path, schema: &[&[Migration]]) -> Result<Self, OpenError> {
        if let Some(why) = cut_short(path)? {
            return Err(OpenError::Unreadable(why));
        }
        let conn = Connection::open(path)?;
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if check != "ok" {
            return Err(OpenError::Unreadable(format!("its check found: {check}")));
        }
        Ok(Self::init(conn, schema)?)
    }

    pub fn in_memory(schema: &[&[Migration]]) -> std::io::Result<Self> {
        Self::init(Connection::open_in_memory().map_err(std::io::Error::other)?, schema)
    }

    fn init(mut conn: Connection, schema: &[&[Migration]]) -> std::io::Result<Self> {
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;")
            .map_err(std::io::Error::other)?;
        migrate(&mut conn, schema)?;
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

/// Why the database file `path` is cut short, if it is: SQLite opens a
/// file cut to a byte as an empty database that passes its own check
/// (gahp-chaos found it), and refuses other cuts only when it reads that
/// far; this judges the file before SQLite reads any of it. A database
/// file is whole pages, at least as many
/// as its header counts when that count is valid (file format: the page
/// size at offset 16, the page count at 28, valid when the change counter
/// at 24 equals the version at 92). An absent or empty file is a new
/// database; a file that is not SQLite's is left to SQLite to refuse.
fn cut_short(path: &Path) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let mut header = [0u8; 100];
    let mut got = 0;
    while got < header.len() {
        match file.read(&mut header[got..])? {
            0 => break,
            n => got += n,
        }
    }
    if got < header.len() {
        return Ok(Some(format!("cut short: {len} bytes, less than SQLite's 100-byte header")));
    }
    if &header[..16] != b"SQLite format 3\0" {
        return Ok(None);
    }
    let be32 = |at: usize| u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
    let page = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536,
        n => u64::from(n),
    };
    if page < 512 || !page.is_power_of_two() {
        return Ok(None);
    }
    if len % page != 0 {
        return Ok(Some(format!("cut short: {len} bytes, not a whole number of its {page}-byte pages")));
    }
    let pages = u64::from(be32(28));
    if pages != 0 && be32(24) == be32(92) && len < pages * page {
        return Ok(Some(format!("cut short: {len} bytes, its header counts {pages} pages of {page}")));
    }
    Ok(None)
}

/// Renames the database `path` (and its write-ahead log and shared-memory
/// index, which belong to it: an old log replayed into a new database
/// would half-restore the old one) to `<path>.unreadable-<unix time>`;
/// returns the new name.
fn move_aside(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".unreadable-{secs}"));
    let mut aside = std::path::PathBuf::from(name);
    for n in 1.. {
        if !aside.exists() {
            break;
        }
        let mut again = aside.as_os_str().to_owned();
        again.push(format!(".{n}"));
        aside = again.into();
    }
    std::fs::rename(path, &aside)?;
    for suffix in ["-wal", "-shm"] {
        let (mut from, mut to) = (path.as_os_str().to_owned(), aside.as_os_str().to_owned());
        from.push(suffix);
        to.push(suffix);
        match std::fs::rename(&from, &to) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(aside)
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
        let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB]).unwrap();
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

    /// Two modules' steps, one version shared (as step 1 is).
    const OTHER: &[Migration] = &[
        Migration { version: 1, sql: "CREATE TABLE IF NOT EXISTS one (a)" },
        Migration { version: 2, sql: "CREATE TABLE two (b)" },
        Migration { version: 3, sql: "ALTER TABLE two ADD COLUMN c" },
    ];

    fn version_and_tables(db: &StateDb) -> (usize, Vec<String>) {
        db.with_conn(|c| {
            let v: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            let t: rusqlite::Result<Vec<String>> = c
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
                .query_map([], |r| r.get::<_, String>(0))?
                .collect();
            Ok((v as usize, t?))
        })
        .unwrap()
    }

    #[test]
    fn a_new_database_gets_every_step_and_an_old_one_is_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        // A database made before versioning: the tables, user_version 0.
        {
            let conn = Connection::open(dir.path().join("state.sqlite3")).unwrap();
            conn.execute_batch(crate::schema::STATE_DB[0].sql).unwrap();
            conn.execute("INSERT INTO md5_cache VALUES (x'61', 1, 2, 3, 'abc')", []).unwrap();
        }
        let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB, &OTHER[..2]]).unwrap();
        assert_eq!(version_and_tables(&db), (2, vec!["md5_cache".into(), "one".into(), "two".into()]));
        let kept: i64 = db.with_conn(|c| c.query_row("SELECT count(*) FROM md5_cache", [], |r| r.get(0))).unwrap();
        assert_eq!(kept, 1, "an upgrade keeps what the database held");
        drop(db);
        // A daemon with a newer step runs only that one.
        let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB, OTHER]).unwrap();
        assert_eq!(version_and_tables(&db).0, 3);
        db.with_conn(|c| c.execute("INSERT INTO two (b, c) VALUES (1, 2)", [])).unwrap();
    }

    #[test]
    fn a_database_from_a_newer_daemon_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join("state.sqlite3")).unwrap();
            conn.pragma_update(None, "user_version", 4).unwrap();
        }
        let err = StateDb::open(dir.path(), &[crate::schema::STATE_DB, OTHER]).err().expect("refused");
        assert!(err.to_string().contains("newer than this daemon's 3"), "{err}");
    }

    /// A database with `rows` rows of 1 KB: many pages.
    fn database_of(dir: &Path, rows: usize) -> std::path::PathBuf {
        let db = StateDb::open(dir, &[crate::schema::STATE_DB]).unwrap();
        db.with_conn(|c| {
            for i in 0..rows {
                c.execute("INSERT INTO md5_cache VALUES (?1, 1, 2, 3, ?2)", params![format!("/f{i}").into_bytes(), "x".repeat(1000)])?;
            }
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        })
        .unwrap();
        drop(db);
        dir.join(DB_FILE)
    }

    fn moved_aside(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".unreadable-"))
            .collect();
        names.sort();
        names
    }

    fn rows(db: &StateDb) -> i64 {
        db.with_conn(|c| c.query_row("SELECT count(*) FROM md5_cache", [], |r| r.get(0))).unwrap()
    }

    #[test]
    fn a_garbled_database_is_moved_aside_and_an_empty_one_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = database_of(dir.path(), 10);
        let garbage: Vec<u8> = (0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        std::fs::write(&path, &garbage).unwrap();
        let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB]).unwrap();
        assert_eq!(rows(&db), 0, "an empty database");
        let aside = moved_aside(dir.path());
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(std::fs::read(dir.path().join(&aside[0])).unwrap(), garbage, "the old file is kept as it was");
    }

    #[test]
    fn a_truncated_database_is_moved_aside_not_half_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = database_of(dir.path(), 400);
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
        let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB]).unwrap();
        assert_eq!(rows(&db), 0, "none of the old rows: the old file is not half-read");
        assert_eq!(moved_aside(dir.path()).len(), 1);
        // The new one is a good database: a restart keeps it.
        db.with_conn(|c| c.execute("INSERT INTO md5_cache VALUES (x'61', 1, 2, 3, 'abc')", [])).unwrap();
        drop(db);
        let again = StateDb::open(dir.path(), &[crate::schema::STATE_DB]).unwrap();
        assert_eq!(rows(&again), 1);
        assert_eq!(moved_aside(dir.path()).len(), 1, "a good database stays");
    }

    /// Cuts of the file: to one byte, which SQLite opens as an empty
    /// database that passes its check (what gahp-chaos found), and inside
    /// the header, inside the first page, one whole page short of what the
    /// header counts, which it refuses only once it reads that far.
    #[test]
    fn a_database_cut_short_is_moved_aside_before_sqlite_reads_it() {
        for cut in [CutAt::Bytes(1), CutAt::Bytes(50), CutAt::Bytes(1000), CutAt::OnePageShort] {
            let dir = tempfile::tempdir().unwrap();
            let path = database_of(dir.path(), 400);
            let len = std::fs::metadata(&path).unwrap().len();
            let new_len = match cut {
                CutAt::Bytes(n) => n,
                CutAt::OnePageShort => len - 4096,
            };
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(new_len).unwrap();
            let why = cut_short(&path).unwrap();
            assert!(why.as_deref().is_some_and(|w| w.starts_with("cut short")), "{cut:?}: {why:?}");
            let db = StateDb::open(dir.path(), &[crate::schema::STATE_DB]).unwrap();
            assert_eq!(rows(&db), 0, "{cut:?}");
            assert_eq!(moved_aside(dir.path()).len(), 1, "{cut:?}");
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum CutAt {
        Bytes(u64),
        OnePageShort,
    }

    #[test]
    fn a_whole_database_is_not_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let path = database_of(dir.path(), 400);
        assert_eq!(cut_short(&path).unwrap(), None);
        assert_eq!(cut_short(&dir.path().join("absent")).unwrap(), None);
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        assert_eq!(cut_short(&dir.path().join("empty")).unwrap(), None, "an empty file is a new database");
    }

    #[test]
    fn an_unreadable_file_for_another_reason_is_left_alone() {
        // A directory where the database should be: an error, not moved.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(DB_FILE)).unwrap();
        assert!(StateDb::open(dir.path(), &[crate::schema::STATE_DB]).is_err());
        assert!(moved_aside(dir.path()).is_empty());
    }

    #[test]
    fn a_read_only_look_migrates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open_read_only(dir.path()).unwrap().is_none());
        Connection::open(dir.path().join("state.sqlite3")).unwrap().execute_batch("PRAGMA user_version = 2; CREATE TABLE t (x);").unwrap();
        let conn = open_read_only(dir.path()).unwrap().unwrap();
        assert_eq!(schema_version(&conn).unwrap(), 2);
        assert!(has_table(&conn, "t").unwrap() && !has_table(&conn, "md5_cache").unwrap());
        assert!(conn.execute_batch("CREATE TABLE u (y)").is_err(), "read-only");
        drop(conn);
        let after = schema_version(&Connection::open(dir.path().join("state.sqlite3")).unwrap()).unwrap();
        assert_eq!(after, 2, "looking must not migrate");
    }
}
