//! What a submit pipeline keeps in the state database: the create_batch
//! requests sent whose outcome is not known yet (a later submit of the
//! same batch waits for one to settle before creating again), the batch
//! names this state has created (a later submit of one looks it up by name
//! first; a name with no record of either kind is created without a
//! look-up), and the upload byte budgets learnt from a project's refusals.

use rusqlite::{params, Connection, OptionalExtension};

use crate::state_db::{self, Migration, StateDb};

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 5,
        sql: "CREATE TABLE batch_creates (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         batch TEXT NOT NULL,
         sent_at REAL NOT NULL,
         PRIMARY KEY (project, account, batch)
     );",
    },
    // With the configured budget they were learnt under (a new one starts
    // afresh).
    Migration {
        version: 8,
        sql: "CREATE TABLE upload_budgets (
         project TEXT PRIMARY KEY,
         configured INTEGER NOT NULL,
         learnt INTEGER NOT NULL
     );",
    },
    // The names created, kept `CREATED_KEPT_SECS` or until retired.
    Migration {
        version: 13,
        sql: "CREATE TABLE batches_created (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         batch TEXT NOT NULL,
         created_at REAL NOT NULL,
         PRIMARY KEY (project, account, batch)
     );
     CREATE INDEX batches_created_at ON batches_created (created_at);",
    },
];

/// How long a created batch's name is remembered if it is not retired
/// through this daemon first: a submit of that name within this time looks
/// the batch up before anything else; one later is taken for a new batch.
/// A gridmanager submits a batch again only while it waits for that
/// submit's result (a lost result, a restarted daemon or gridmanager).
pub const CREATED_KEPT_SECS: f64 = 30.0 * 86400.0;

/// Whether this state may create `batch` without looking it up first: it
/// has no record of a create of that name, neither in flight nor done.
/// If so, the create is recorded as in flight (sent at `at`) in the same
/// transaction, so that two submits of one name never both skip the
/// look-up.
pub fn claim_first_create(db: &StateDb, project: &str, account: &str, batch: &str, at: f64) -> rusqlite::Result<bool> {
    db.with_conn(|c| {
        let tx = c.transaction()?;
        let known: i64 = tx.query_row(
            "SELECT (SELECT count(*) FROM batch_creates WHERE project = ?1 AND account = ?2 AND batch = ?3)
                  + (SELECT count(*) FROM batches_created WHERE project = ?1 AND account = ?2 AND batch = ?3)",
            params![project, account, batch],
            |r| r.get(0),
        )?;
        if known > 0 {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO batch_creates (project, account, batch, sent_at) VALUES (?1, ?2, ?3, ?4)",
            params![project, account, batch, at],
        )?;
        tx.commit()?;
        Ok(true)
    })
}

/// `batch` exists on the server (created, or found by name): its create
/// is no longer in flight, and a later submit of the name looks it up.
/// Names older than `CREATED_KEPT_SECS` are dropped on the way.
pub fn note_created(db: &StateDb, project: &str, account: &str, batch: &str, at: f64) -> rusqlite::Result<()> {
    db.with_conn(|c| {
        let tx = c.transaction()?;
        tx.execute("DELETE FROM batch_creates WHERE project = ?1 AND account = ?2 AND batch = ?3", params![project, account, batch])?;
        tx.execute(
            "INSERT OR REPLACE INTO batches_created (project, account, batch, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![project, account, batch, at],
        )?;
        tx.execute("DELETE FROM batches_created WHERE created_at < ?1", params![at - CREATED_KEPT_SECS])?;
        tx.commit()
    })
}

/// `batch` was retired: the gridmanager is done with the name.
pub fn forget_created(db: &StateDb, project: &str, account: &str, batch: &str) -> rusqlite::Result<()> {
    db.with_conn(|c| {
        c.execute("DELETE FROM batches_created WHERE project = ?1 AND account = ?2 AND batch = ?3", params![project, account, batch])
            .map(drop)
    })
}

/// When a create_batch of `batch` was sent whose outcome is not known.
pub fn create_sent_at(db: &StateDb, project: &str, account: &str, batch: &str) -> rusqlite::Result<Option<f64>> {
    db.with_conn(|c| {
        c.query_row(
            "SELECT sent_at FROM batch_creates WHERE project = ?1 AND account = ?2 AND batch = ?3",
            params![project, account, batch],
            |r| r.get(0),
        )
        .optional()
    })
}

/// Records, before it is sent, that a create_batch of `batch` goes out.
pub fn note_create_sent(db: &StateDb, project: &str, account: &str, batch: &str, sent_at: f64) -> rusqlite::Result<()> {
    db.with_conn(|c| {
        c.execute(
            "INSERT OR REPLACE INTO batch_creates (project, account, batch, sent_at) VALUES (?1, ?2, ?3, ?4)",
            params![project, account, batch, sent_at],
        )
        .map(drop)
    })
}

/// The outcome of `batch`'s create is known now.
pub fn forget_create(db: &StateDb, project: &str, account: &str, batch: &str) -> rusqlite::Result<()> {
    db.with_conn(|c| {
        c.execute("DELETE FROM batch_creates WHERE project = ?1 AND account = ?2 AND batch = ?3", params![project, account, batch])
            .map(drop)
    })
}

/// The byte budget learnt for uploads to `project` while `configured`
/// was its configured one.
pub fn learnt_upload_budget(db: &StateDb, project: &str, configured: u64) -> rusqlite::Result<Option<u64>> {
    db.with_conn(|c| {
        c.query_row("SELECT learnt FROM upload_budgets WHERE project = ?1 AND configured = ?2", params![project, configured as i64], |r| {
            r.get::<_, i64>(0)
        })
        .optional()
        .map(|v| v.map(|b| b.max(0) as u64))
    })
}

/// Records a smaller byte budget for uploads to `project`.
pub fn note_upload_budget(db: &StateDb, project: &str, configured: u64, learnt: u64) -> rusqlite::Result<()> {
    db.with_conn(|c| {
        c.execute(
            "INSERT OR REPLACE INTO upload_budgets (project, configured, learnt) VALUES (?1, ?2, ?3)",
            params![project, configured as i64, learnt as i64],
        )
        .map(drop)
    })
}

/// Every learnt budget, (project URL, configured, learnt bytes), from a
/// database opened as found (`state_db::open_read_only`; one older than
/// version 8 has none).
pub fn learnt_budgets(conn: &Connection) -> rusqlite::Result<Vec<(String, u64, u64)>> {
    if !state_db::has_table(conn, "upload_budgets")? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare("SELECT project, configured, learnt FROM upload_budgets ORDER BY project")?;
    let rows =
        stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64, r.get::<_, i64>(2)?.max(0) as u64)))?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_name_never_created_here_skips_the_look_up() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[MIGRATIONS]).unwrap();
        let claim = |b: &str| claim_first_create(&db, "http://p/", "a", b, 1000.0).unwrap();
        assert!(claim("b1"), "a new name");
        assert!(!claim("b1"), "its create is in flight");
        assert_eq!(create_sent_at(&db, "http://p/", "a", "b1").unwrap(), Some(1000.0));
        note_created(&db, "http://p/", "a", "b1", 1001.0).unwrap();
        assert_eq!(create_sent_at(&db, "http://p/", "a", "b1").unwrap(), None);
        assert!(!claim("b1"), "created here before");
        assert!(claim_first_create(&db, "http://p/", "other", "b1", 1000.0).unwrap(), "another account's name");
        forget_created(&db, "http://p/", "a", "b1").unwrap();
        assert!(claim("b1"), "retired: forgotten");
        // A failed create forgets its record: the name is new again.
        forget_create(&db, "http://p/", "a", "b1").unwrap();
        assert!(claim("b1"));
    }

    #[test]
    fn created_names_are_kept_for_a_while_only() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[MIGRATIONS]).unwrap();
        note_created(&db, "http://p/", "a", "old", 1000.0).unwrap();
        note_created(&db, "http://p/", "a", "new", 1000.0 + CREATED_KEPT_SECS + 1.0).unwrap();
        assert!(claim_first_create(&db, "http://p/", "a", "old", 0.0).unwrap());
        assert!(!claim_first_create(&db, "http://p/", "a", "new", 0.0).unwrap());
    }

    #[test]
    fn learnt_budgets_are_read_as_found() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[MIGRATIONS]).unwrap();
        note_upload_budget(&db, "http://p/", 8 << 20, 4 << 20).unwrap();
        let conn = state_db::open_read_only(dir.path()).unwrap().unwrap();
        assert_eq!(learnt_budgets(&conn).unwrap(), [("http://p/".to_string(), 8 << 20, 4 << 20)]);
    }
}
