//! What a submit pipeline keeps in the state database: the create_batch
//! requests sent whose outcome is not known yet (a later submit of the
//! same batch waits for one to settle before creating again), and the
//! upload byte budgets learnt from a project's refusals.

use rusqlite::{params, Connection, OptionalExtension};

use gahp_services::state_db::{self, StateDb};

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
    fn learnt_budgets_are_read_as_found() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[gahp_services::schema::SUBMIT_RECORDS]).unwrap();
        note_upload_budget(&db, "http://p/", 8 << 20, 4 << 20).unwrap();
        let conn = state_db::open_read_only(dir.path()).unwrap().unwrap();
        assert_eq!(learnt_budgets(&conn).unwrap(), [("http://p/".to_string(), 8 << 20, 4 << 20)]);
    }
}
