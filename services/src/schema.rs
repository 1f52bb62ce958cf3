//! The state database's tables, every one of them: each step of the
//! schema, by the part of the daemon that keeps its rows (the module named
//! above each). The stores read and write these tables; only this file
//! makes or changes them, and `SCHEMA` is the whole, in the order
//! `StateDb::open` runs them by version.

/// One step of the schema: it takes a database from `PRAGMA user_version`
/// `version - 1` to `version`; `state_db` runs them in version order
/// without knowing whose tables they are. Append a step to change the schema, with the next free version; never
/// edit one that has shipped.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: usize,
    pub sql: &'static str,
}

// Rows kept by the file stager (`file_stager`).
/// The shared service's own table: the file stager's hash cache. Step 1
/// (with the BLAH tables) is the schema that existed before versioning,
/// hence IF NOT EXISTS: such a database is at version 0.
pub const STATE_DB: &[Migration] = &[Migration {
    version: 1,
    sql: "CREATE TABLE IF NOT EXISTS md5_cache (
         path BLOB PRIMARY KEY,
         size INTEGER NOT NULL,
         mtime_ns INTEGER NOT NULL,
         inode INTEGER NOT NULL,
         md5 TEXT NOT NULL
     );",
}];

// Rows kept by the BLAH front end (`gahp_blah::job_records`).
/// The BLAH tables. Step 1 (with the hash cache of `state_db`) is the
/// schema that existed before versioning, hence IF NOT EXISTS.
pub const BLAH_JOBS: &[Migration] = &[
    Migration {
        version: 1,
        sql: "CREATE TABLE IF NOT EXISTS blah_projects (
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
    },
    // Shared BOINC batches: the batch a BLAH job went into (NULL: the
    // batch of its own name, as every job had before).
    Migration {
        version: 2,
        sql: "ALTER TABLE blah_jobs ADD COLUMN boinc_batch TEXT;
     CREATE INDEX blah_jobs_by_boinc_batch ON blah_jobs (boinc_batch);",
    },
    // The highest attempt number of any job forgotten (pruned): a new
    // attempt is numbered above it, so a `JobDirectory` whose rows are gone
    // never gets a BOINC batch or job name again that the server may still
    // hold. Rows pruned before this version are not known; the highest
    // attempt still recorded stands in for them. The index finds the ended
    // jobs to prune without a scan of the table.
    Migration {
        version: 9,
        sql: "CREATE TABLE blah_forgotten (
         id INTEGER PRIMARY KEY CHECK (id = 0),
         max_attempt INTEGER NOT NULL
     );
     INSERT INTO blah_forgotten (id, max_attempt) SELECT 0, COALESCE(MAX(attempt), 0) FROM blah_jobs;
     CREATE INDEX blah_jobs_ended ON blah_jobs (updated) WHERE phase IN ('final', 'cancelled') AND abort_pending = 0;",
    },
    // BOINC batches this client shares with other clients of `serve` (one
    // account): retired only when every participant is done, which only
    // the running daemon knows; after a restart such a batch is left to
    // its lease. A row goes when no job of the batch is recorded any more.
    Migration { version: 12, sql: "CREATE TABLE blah_shared_batches (batch TEXT PRIMARY KEY);" },
    // The typed job (`gahp_blah::job`, JSON) a submit ad is read into once;
    // `ad` then stays empty. A row an older daemon made keeps its ad's
    // text in `ad` and NULL here: it is read into the typed job on load.
    Migration { version: 13, sql: "ALTER TABLE blah_jobs ADD COLUMN job TEXT;" },
];

// Rows kept by the broker (`gahp_broker::routes`).
/// Which project of a pool holds a batch, and which batch a job belongs to.
pub const BROKER_ROUTES: &[Migration] = &[Migration {
    version: 3,
    sql: "CREATE TABLE broker_batches (
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
}];

// Rows kept by work sequences (`gahp_sequences::store`).
const SEQUENCES_SQL: &str = "CREATE TABLE sequences (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         name TEXT NOT NULL,
         def TEXT NOT NULL,
         planned INTEGER NOT NULL,
         done INTEGER NOT NULL,
         phase TEXT NOT NULL,
         ended INTEGER NOT NULL,
         reason TEXT,
         relocations INTEGER NOT NULL,
         live_step INTEGER,
         live_attempt INTEGER,
         live_submitted REAL,
         live_first_in_progress REAL,
         PRIMARY KEY (project, account, name)
     );
     CREATE TABLE sequence_dead_branches (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         name TEXT NOT NULL,
         step INTEGER NOT NULL,
         attempt INTEGER NOT NULL,
         reason TEXT NOT NULL,
         submitted REAL NOT NULL,
         abandoned REAL NOT NULL,
         PRIMARY KEY (project, account, name, step, attempt)
     );
     CREATE TABLE sequence_files (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         name TEXT NOT NULL,
         step INTEGER NOT NULL,
         file TEXT NOT NULL,
         md5 TEXT NOT NULL,
         PRIMARY KEY (project, account, name, step, file)
     );";
/// Batches of finished steps that are to be retired on the server: kept
/// until the retire succeeded, so a daemon killed before it did retires
/// them when it resumes.
const RETIRES_SQL: &str = "CREATE TABLE sequence_retires (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         batch TEXT NOT NULL,
         PRIMARY KEY (project, account, batch)
     );";
/// Where a pool sequence went: a sequence that moves to another project of
/// its pool leaves this behind, so that a message for it (a BLAH job's
/// status, say) finds it through the pool.
const MOVES_SQL: &str = "CREATE TABLE sequence_moves (
         project TEXT NOT NULL,
         account TEXT NOT NULL,
         name TEXT NOT NULL,
         pool TEXT NOT NULL,
         PRIMARY KEY (project, account, name)
     );";
/// Work sequences: their records, dead branches and state files (4);
/// batches still to retire (6); pool sequences that moved (7).
pub const SEQUENCES: &[Migration] =
    &[Migration { version: 4, sql: SEQUENCES_SQL }, Migration { version: 6, sql: RETIRES_SQL }, Migration { version: 7, sql: MOVES_SQL }];

// Rows kept by the submit pipeline (`gahp_project::submit_records`).
pub const SUBMIT_RECORDS: &[Migration] = &[
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
];

// Rows kept by a served client's results (`result_queue`).
/// The results of a served client that no RESULTS has taken yet: `seq`
/// is the order they completed in.
pub const RESULT_QUEUE: &[Migration] = &[
    Migration {
        version: 10,
        sql: "CREATE TABLE unread_results (
         seq INTEGER PRIMARY KEY,
         reqid INTEGER NOT NULL,
         head BLOB NOT NULL,
         tail BLOB NOT NULL
     );",
    },
    Migration {
        version: 11,
        // The connection session (`boinc_gahp connect`'s id) that sent the
        // request: a resent request of that session is recognised after a
        // restart too.
        sql: "ALTER TABLE unread_results ADD COLUMN session TEXT;",
    },
];

/// The whole schema, for `StateDb::open`.
pub const SCHEMA: &[&[Migration]] = &[STATE_DB, BLAH_JOBS, BROKER_ROUTES, SEQUENCES, SUBMIT_RECORDS, RESULT_QUEUE];

#[cfg(test)]
mod tests {
    #[test]
    fn the_schema_has_every_version_once_from_1() {
        let mut versions: Vec<usize> = super::SCHEMA.iter().flat_map(|m| m.iter()).map(|m| m.version).collect();
        versions.sort();
        versions.dedup();
        assert_eq!(versions, (1..=versions.len()).collect::<Vec<_>>(), "a gap in the schema's versions");
    }
}
