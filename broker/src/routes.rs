//! The broker's durable routes in the state database: batch -> project
//! and job -> batch, per pool. Every command after a submit (query, fetch,
//! abort, retire, lease) finds its project here, also after a restart.
//! Calls block: make them from a blocking thread.

use rusqlite::{params, OptionalExtension};

use gahp_services::state_db::StateDb;

#[derive(Clone)]
pub struct Routes {
    db: StateDb,
}

impl Routes {
    pub fn new(db: StateDb) -> Self {
        Routes { db }
    }

    /// The project that holds (or is being given) `batch`.
    pub fn project_of_batch(&self, pool: &str, batch: &str) -> rusqlite::Result<Option<String>> {
        self.db.with_conn(|c| {
            c.query_row("SELECT project FROM broker_batches WHERE pool = ?1 AND batch = ?2", params![pool, batch], |r| r.get(0)).optional()
        })
    }

    /// The batch and project of `job`.
    pub fn route_of_job(&self, pool: &str, job: &str) -> rusqlite::Result<Option<(String, String)>> {
        self.db.with_conn(|c| {
            c.query_row(
                "SELECT j.batch, b.project FROM broker_jobs j JOIN broker_batches b ON b.pool = j.pool AND b.batch = j.batch
                 WHERE j.pool = ?1 AND j.job = ?2",
                params![pool, job],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
        })
    }

    /// Records that `batch` (with these jobs) goes to `project`, before
    /// anything is created there, so a daemon that dies mid-submit sends
    /// the resubmit to the same project.
    pub fn bind(&self, pool: &str, batch: &str, project: &str, jobs: &[String]) -> rusqlite::Result<()> {
        self.db.with_conn(|c| {
            let tx = c.transaction()?;
            tx.execute("INSERT OR REPLACE INTO broker_batches (pool, batch, project) VALUES (?1, ?2, ?3)", params![pool, batch, project])?;
            {
                let mut insert = tx.prepare("INSERT OR REPLACE INTO broker_jobs (pool, job, batch) VALUES (?1, ?2, ?3)")?;
                for job in jobs {
                    insert.execute(params![pool, job, batch])?;
                }
            }
            tx.commit()
        })
    }

    /// Forgets a binding whose project turned out not to have the batch.
    pub fn unbind(&self, pool: &str, batch: &str) -> rusqlite::Result<()> {
        self.db.with_conn(|c| {
            let tx = c.transaction()?;
            tx.execute("DELETE FROM broker_jobs WHERE pool = ?1 AND batch = ?2", params![pool, batch])?;
            tx.execute("DELETE FROM broker_batches WHERE pool = ?1 AND batch = ?2", params![pool, batch])?;
            tx.commit()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_survive_reopening_and_unbind_forgets() {
        let dir = tempfile::tempdir().unwrap();
        {
            let r = Routes::new(StateDb::open(dir.path(), &[gahp_services::schema::BROKER_ROUTES]).unwrap());
            r.bind("p", "b1", "alpha", &["b1#0".into(), "b1#1".into()]).unwrap();
            r.bind("p", "b2", "beta", &["b2#0".into()]).unwrap();
            r.bind("q", "b1", "gamma", &["b1#0".into()]).unwrap();
            r.unbind("p", "b2").unwrap();
        }
        let r = Routes::new(StateDb::open(dir.path(), &[gahp_services::schema::BROKER_ROUTES]).unwrap());
        assert_eq!(r.project_of_batch("p", "b1").unwrap().as_deref(), Some("alpha"));
        assert_eq!(r.project_of_batch("q", "b1").unwrap().as_deref(), Some("gamma"));
        assert_eq!(r.route_of_job("p", "b1#1").unwrap(), Some(("b1".into(), "alpha".into())));
        assert_eq!(r.project_of_batch("p", "b2").unwrap(), None);
        assert_eq!(r.route_of_job("p", "b2#0").unwrap(), None);
    }
}
