//! The durable record of the sequences of one project account: rows in the
//! state database (migration 4) and state files in a content store
//! (`<state dir>/sequence-files/<md5>`), so that a file whose content did
//! not change is one file however many steps carry it. Calls block: make
//! them from a blocking thread.
//!
//! `files` is the content store: state files by MD5 content name, each
//! step's files, and the sweep of what a killed daemon left.

mod files;

use std::io::{self};
use std::path::{Path, PathBuf};

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use gahp_protocol::gahp::sequence_commands::{DeadBranch, SequenceStatus};

use crate::decide::{LiveAttempt, ServerState};
use gahp_services::state_db::StateDb;

pub use files::sweep_leftovers;

/// What the owner asked for; fixed at create (but the plan, by extend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequenceDef {
    pub name: String,
    pub app_name: String,
    pub max_step_time: u32,
    pub max_attempts: u32,
    pub end_marker: Option<String>,
    /// The state files' names, in the order of the initial files.
    pub state_names: Vec<String>,
    pub args: Vec<String>,
    /// Inputs of every step besides the state: (local path, name).
    pub inputs: Vec<(PathBuf, String)>,
    /// The pool it was placed by (its file's canonical path): a step that
    /// is relocated goes to the pool's next-best project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// Where a sequence is; `Stopped` is resumable (its live step was aborted
/// by the owner's stop, e.g. a held HTCondor job); `Purged` was stopped too
/// long and is gone for good (its files deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    Stopped,
    Completed,
    Failed,
    Aborted,
    Purged,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Running => "RUNNING",
            Phase::Stopped => "STOPPED",
            Phase::Completed => "COMPLETED",
            Phase::Failed => "FAILED",
            Phase::Aborted => "ABORTED",
            Phase::Purged => "PURGED",
        }
    }

    fn parse(s: &str) -> Phase {
        match s {
            "STOPPED" => Phase::Stopped,
            "COMPLETED" => Phase::Completed,
            "FAILED" => Phase::Failed,
            "ABORTED" => Phase::Aborted,
            "PURGED" => Phase::Purged,
            _ => Phase::Running,
        }
    }

    /// As `BOINC_SEQUENCE_QUERY` reports it (a stopped sequence is still
    /// running as far as the owner can tell: it resumes).
    pub fn status(self) -> SequenceStatus {
        match self {
            Phase::Running | Phase::Stopped => SequenceStatus::Running,
            Phase::Completed => SequenceStatus::Completed,
            Phase::Failed => SequenceStatus::Failed,
            Phase::Aborted | Phase::Purged => SequenceStatus::Aborted,
        }
    }

    pub fn finished(self) -> bool {
        matches!(self, Phase::Completed | Phase::Failed | Phase::Aborted | Phase::Purged)
    }
}

/// One sequence as the daemon holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceRecord {
    pub def: SequenceDef,
    pub planned: u32,
    pub done: u32,
    pub phase: Phase,
    /// The owner ended it: no step after the current one.
    pub ended: bool,
    pub reason: Option<String>,
    pub relocations: u32,
    /// The attempt on the server (or being submitted), if any.
    pub live: Option<LiveAttempt>,
    pub dead: Vec<DeadBranch>,
}

/// One file of a completed step: its name and content name.
#[derive(Debug, Clone, PartialEq)]
pub struct StepFile {
    pub name: String,
    pub md5: String,
}

/// The content store, under the state directory.
const CONTENT_DIR: &str = "sequence-files";

/// The sequences of one project account. `account` identifies the
/// authenticator without holding it (its MD5).
#[derive(Clone)]
pub struct SequenceStore {
    db: StateDb,
    project: String,
    account: String,
    files: PathBuf,
}

/// The inputs and pool files of every sequence that may still run a step
/// (running, or stopped and resumable; a relocated step reads its pool
/// again), of any project, in a state database opened as found: what a
/// sweep of old files must not delete from under it.
pub fn inputs_in_use(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<PathBuf>> {
    let mut stmt = conn.prepare("SELECT def FROM sequences WHERE phase IN (?1, ?2)")?;
    let defs = stmt.query_map(params![Phase::Running.as_str(), Phase::Stopped.as_str()], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for def in defs {
        match serde_json::from_str::<SequenceDef>(&def?) {
            Ok(def) => out.extend(def.inputs.into_iter().map(|(path, _)| path).chain(def.pool.map(PathBuf::from))),
            // Not known to be free: the caller must keep everything.
            Err(e) => return Err(rusqlite::Error::ToSqlConversionFailure(Box::new(e))),
        }
    }
    Ok(out)
}

fn sql(e: rusqlite::Error) -> io::Error {
    io::Error::other(e)
}

impl SequenceStore {
    pub fn db(&self) -> &StateDb {
        &self.db
    }

    pub fn new(db: StateDb, state_dir: &Path, project: &str, account: &str) -> Self {
        SequenceStore { db, project: project.into(), account: account.into(), files: state_dir.join(CONTENT_DIR) }
    }

    pub fn load_all(&self) -> io::Result<Vec<SequenceRecord>> {
        self.load_where(None)
    }

    /// The sequence named `name`, if this account holds it.
    pub fn load(&self, name: &str) -> io::Result<Option<SequenceRecord>> {
        Ok(self.load_where(Some(name))?.pop())
    }

    fn load_where(&self, name: Option<&str>) -> io::Result<Vec<SequenceRecord>> {
        self.db
            .with_conn(|c| {
                let mut stmt = c.prepare(
                    "SELECT def, planned, done, phase, ended, reason, relocations, live_step, live_attempt, live_submitted, live_first_in_progress
                     FROM sequences WHERE project = ?1 AND account = ?2 AND (?3 IS NULL OR name = ?3)",
                )?;
                let rows = stmt.query_map(params![self.project, self.account, name], |r| {
                    let def: String = r.get(0)?;
                    let live = match (r.get::<_, Option<u32>>(7)?, r.get::<_, Option<u32>>(8)?) {
                        (Some(step), Some(attempt)) => Some(LiveAttempt {
                            step,
                            attempt,
                            submitted: r.get::<_, Option<f64>>(9)?.unwrap_or(0.0),
                            first_in_progress: r.get(10)?,
                            server: ServerState::Unknown,
                        }),
                        _ => None,
                    };
                    Ok((def, r.get(1)?, r.get(2)?, r.get::<_, String>(3)?, r.get(4)?, r.get(5)?, r.get(6)?, live))
                })?;
                let mut out = Vec::new();
                for row in rows {
                    let (def, planned, done, phase, ended, reason, relocations, live) = row?;
                    let Ok(def) = serde_json::from_str::<SequenceDef>(&def) else {
                        tracing::error!("skipping a sequence whose definition cannot be read");
                        continue;
                    };
                    out.push(SequenceRecord {
                        def,
                        planned,
                        done,
                        phase: Phase::parse(&phase),
                        ended,
                        reason,
                        relocations,
                        live,
                        dead: Vec::new(),
                    });
                }
                for rec in &mut out {
                    let mut stmt = c.prepare(
                        "SELECT step, attempt, reason, submitted, abandoned FROM sequence_dead_branches
                         WHERE project = ?1 AND account = ?2 AND name = ?3 ORDER BY step, attempt",
                    )?;
                    let dead = stmt.query_map(params![self.project, self.account, rec.def.name], |r| {
                        Ok(DeadBranch { step: r.get(0)?, attempt: r.get(1)?, reason: r.get(2)?, submitted: r.get(3)?, abandoned: r.get(4)? })
                    })?;
                    rec.dead = dead.collect::<Result<_, _>>()?;
                }
                Ok(out)
            })
            .map_err(sql)
    }

    /// Writes the sequence's row (everything but dead branches and files).
    pub fn save(&self, rec: &SequenceRecord) -> io::Result<()> {
        let def = serde_json::to_string(&rec.def).map_err(io::Error::other)?;
        let live = rec.live.as_ref();
        self.db
            .with_conn(|c| {
                c.execute(
                    "INSERT OR REPLACE INTO sequences VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                    params![
                        self.project,
                        self.account,
                        rec.def.name,
                        def,
                        rec.planned,
                        rec.done,
                        rec.phase.as_str(),
                        rec.ended,
                        rec.reason,
                        rec.relocations,
                        live.map(|l| l.step),
                        live.map(|l| l.attempt),
                        live.map(|l| l.submitted),
                        live.and_then(|l| l.first_in_progress),
                    ],
                )
                .map(drop)
            })
            .map_err(sql)
    }

    /// Records a dead branch and the sequence's new row in one transaction.
    pub fn bury(&self, rec: &SequenceRecord, branch: &DeadBranch) -> io::Result<()> {
        self.db
            .with_conn(|c| {
                c.execute(
                    "INSERT OR REPLACE INTO sequence_dead_branches VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        self.project,
                        self.account,
                        rec.def.name,
                        branch.step,
                        branch.attempt,
                        branch.reason,
                        branch.submitted,
                        branch.abandoned
                    ],
                )
                .map(drop)
            })
            .map_err(sql)?;
        self.save(rec)
    }

    /// Moves sequence `name` with its dead branches and files to `to` (a
    /// store of another project of `pool`), in one transaction, and leaves
    /// a note of the move here. Refused if `to` holds a sequence of that
    /// name.
    pub fn move_to(&self, to: &SequenceStore, name: &str, pool: &str) -> io::Result<()> {
        let moved = self
            .db
            .with_conn(|c| {
                let tx = c.transaction()?;
                let taken: bool = tx.query_row(
                    "SELECT EXISTS (SELECT 1 FROM sequences WHERE project = ?1 AND account = ?2 AND name = ?3)",
                    params![to.project, to.account, name],
                    |r| r.get(0),
                )?;
                if taken {
                    return Ok(false);
                }
                for table in ["sequences", "sequence_dead_branches", "sequence_files"] {
                    tx.execute(
                        &format!("UPDATE {table} SET project = ?1, account = ?2 WHERE project = ?3 AND account = ?4 AND name = ?5"),
                        params![to.project, to.account, self.project, self.account, name],
                    )?;
                }
                tx.execute(
                    "DELETE FROM sequence_moves WHERE project = ?1 AND account = ?2 AND name = ?3",
                    params![to.project, to.account, name],
                )?;
                tx.execute(
                    "INSERT OR REPLACE INTO sequence_moves VALUES (?1, ?2, ?3, ?4)",
                    params![self.project, self.account, name, pool],
                )?;
                tx.commit()?;
                Ok(true)
            })
            .map_err(sql)?;
        if moved {
            Ok(())
        } else {
            Err(io::Error::other(format!("the other project already holds a sequence named {name}")))
        }
    }

    /// The pool of a sequence that moved away from here.
    pub fn moved_away(&self, name: &str) -> io::Result<Option<String>> {
        self.db
            .with_conn(|c| {
                c.query_row(
                    "SELECT pool FROM sequence_moves WHERE project = ?1 AND account = ?2 AND name = ?3",
                    params![self.project, self.account, name],
                    |r| r.get(0),
                )
                .optional()
            })
            .map_err(sql)
    }

    /// Whether this account holds sequence `name` of `pool`.
    pub fn holds_pool_sequence(&self, name: &str, pool: &str) -> io::Result<bool> {
        Ok(self.load(name)?.is_some_and(|r| r.def.pool.as_deref() == Some(pool)))
    }

    /// Whether this account holds an unfinished sequence of `pool`.
    pub fn has_pool_work(&self, pool: &str) -> io::Result<bool> {
        Ok(self.load_all()?.iter().any(|r| !r.phase.finished() && r.def.pool.as_deref() == Some(pool)))
    }

    /// Batches to retire (see [`RETIRES`]).
    pub fn queue_retires(&self, batches: &[String]) -> io::Result<()> {
        self.db
            .with_conn(|c| {
                let tx = c.transaction()?;
                for b in batches {
                    tx.execute("INSERT OR IGNORE INTO sequence_retires VALUES (?1, ?2, ?3)", params![self.project, self.account, b])?;
                }
                tx.commit()
            })
            .map_err(sql)
    }

    /// `batch` is retired (or gone): no longer to do.
    pub fn retire_done(&self, batch: &str) -> io::Result<()> {
        self.db
            .with_conn(|c| {
                c.execute(
                    "DELETE FROM sequence_retires WHERE project = ?1 AND account = ?2 AND batch = ?3",
                    params![self.project, self.account, batch],
                )
                .map(drop)
            })
            .map_err(sql)
    }

    pub fn retires_due(&self) -> io::Result<Vec<String>> {
        self.db
            .with_conn(|c| {
                let mut q = c.prepare("SELECT batch FROM sequence_retires WHERE project = ?1 AND account = ?2 ORDER BY batch")?;
                let rows = q.query_map(params![self.project, self.account], |r| r.get(0))?;
                rows.collect()
            })
            .map_err(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_services::atomic_file;

    fn def() -> SequenceDef {
        SequenceDef {
            name: "s".into(),
            app_name: "stepper".into(),
            max_step_time: 60,
            max_attempts: 3,
            end_marker: Some("DONE".into()),
            state_names: vec!["state".into()],
            args: vec!["--sleep-ms".into(), "5".into()],
            inputs: vec![],
            pool: None,
        }
    }

    #[test]
    fn a_record_and_its_dead_branches_survive_a_reopen_and_state_carries_over_heartbeats() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SequenceStore::new(StateDb::open(dir.path(), &[gahp_services::schema::SEQUENCES]).unwrap(), dir.path(), "http://p/", "acct");
        let mut rec = SequenceRecord {
            def: def(),
            planned: 5,
            done: 2,
            phase: Phase::Running,
            ended: false,
            reason: None,
            relocations: 1,
            live: Some(LiveAttempt { step: 3, attempt: 2, submitted: 10.0, first_in_progress: Some(12.0), server: ServerState::Unknown }),
            dead: vec![],
        };
        let branch = DeadBranch { step: 3, attempt: 1, reason: "deadline missed".into(), submitted: 1.0, abandoned: 9.0 };
        rec.dead.push(branch.clone());
        store.bury(&rec, &branch).unwrap();
        let src = dir.path().join("init");
        std::fs::write(&src, b"counter 0\n").unwrap();
        let md5 = store.keep(&src).unwrap();
        assert_eq!(std::fs::read(store.content_path(&md5)).unwrap(), b"counter 0\n");
        store.put_files("s", 0, &[StepFile { name: "state".into(), md5: md5.clone() }]).unwrap();
        store.put_files("s", 1, &[StepFile { name: "log".into(), md5: "x".into() }]).unwrap();

        let again =
            SequenceStore::new(StateDb::open(dir.path(), &[gahp_services::schema::SEQUENCES]).unwrap(), dir.path(), "http://p/", "acct");
        assert_eq!(again.load_all().unwrap(), vec![rec]);
        assert_eq!(again.state_before("s", 3, &["state".into()]).unwrap(), vec![StepFile { name: "state".into(), md5 }]);
        let other =
            SequenceStore::new(StateDb::open(dir.path(), &[gahp_services::schema::SEQUENCES]).unwrap(), dir.path(), "http://p/", "another");
        assert!(other.load_all().unwrap().is_empty(), "another account sees none of them");
    }

    #[test]
    fn a_move_carries_everything_leaves_a_note_and_is_refused_onto_a_name_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[gahp_services::schema::SEQUENCES]).unwrap();
        let (a, b) =
            (SequenceStore::new(db.clone(), dir.path(), "http://a/", "x"), SequenceStore::new(db.clone(), dir.path(), "http://b/", "y"));
        let mut rec = SequenceRecord {
            def: SequenceDef { pool: Some("/p.toml".into()), ..def() },
            planned: 4,
            done: 1,
            phase: Phase::Running,
            ended: false,
            reason: None,
            relocations: 1,
            live: None,
            dead: vec![],
        };
        let branch = DeadBranch { step: 2, attempt: 1, reason: "deadline missed".into(), submitted: 1.0, abandoned: 2.0 };
        rec.dead.push(branch.clone());
        a.bury(&rec, &branch).unwrap();
        a.put_files("s", 1, &[StepFile { name: "state".into(), md5: "m1".into() }]).unwrap();

        a.move_to(&b, "s", "/p.toml").unwrap();
        assert_eq!(a.load("s").unwrap(), None);
        assert_eq!(a.moved_away("s").unwrap().as_deref(), Some("/p.toml"));
        assert_eq!(b.load("s").unwrap(), Some(rec.clone()));
        assert!(b.holds_pool_sequence("s", "/p.toml").unwrap() && !b.holds_pool_sequence("s", "/q.toml").unwrap());
        assert!(b.has_pool_work("/p.toml").unwrap());
        assert_eq!(b.state_before("s", 2, &["state".into()]).unwrap(), vec![StepFile { name: "state".into(), md5: "m1".into() }]);
        assert_eq!(b.moved_away("s").unwrap(), None);

        // Back again: the note is where it left from now.
        b.move_to(&a, "s", "/p.toml").unwrap();
        assert_eq!(a.moved_away("s").unwrap(), None);
        assert_eq!(b.moved_away("s").unwrap().as_deref(), Some("/p.toml"));
        // Onto a store that holds a sequence of that name: refused, nothing moves.
        b.save(&SequenceRecord { def: def(), ..rec.clone() }).unwrap();
        assert!(a.move_to(&b, "s", "/p.toml").is_err());
        assert_eq!(a.load("s").unwrap(), Some(rec));
    }

    #[test]
    fn the_inputs_in_use_are_those_of_sequences_that_may_run_a_step() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), &[gahp_services::schema::SEQUENCES]).unwrap();
        let (a, b) = (SequenceStore::new(db.clone(), dir.path(), "http://a/", "x"), SequenceStore::new(db, dir.path(), "http://b/", "y"));
        let rec = |name: &str, input: &str, phase| SequenceRecord {
            def: SequenceDef {
                name: name.into(),
                inputs: vec![(input.into(), "params".into())],
                pool: Some(format!("{input}.pool")),
                ..def()
            },
            planned: 2,
            done: 1,
            phase,
            ended: false,
            reason: None,
            relocations: 0,
            live: None,
            dead: vec![],
        };
        a.save(&rec("run", "/in/1", Phase::Running)).unwrap();
        b.save(&rec("stop", "/in/2", Phase::Stopped)).unwrap();
        for (name, phase) in [("c", Phase::Completed), ("f", Phase::Failed), ("ab", Phase::Aborted), ("p", Phase::Purged)] {
            a.save(&rec(name, "/in/done", phase)).unwrap();
        }
        let conn = gahp_services::state_db::open_read_only(dir.path()).unwrap().unwrap();
        let mut used = inputs_in_use(&conn).unwrap();
        used.sort();
        assert_eq!(used, ["/in/1", "/in/1.pool", "/in/2", "/in/2.pool"].map(PathBuf::from));
    }

    #[test]
    fn leftovers_of_a_killed_daemon_are_swept_and_kept_files_stay() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(sweep_leftovers(dir.path()).unwrap(), 0, "no content store yet");
        let store =
            SequenceStore::new(StateDb::open(dir.path(), &[gahp_services::schema::SEQUENCES]).unwrap(), dir.path(), "http://p/", "acct");
        let src = dir.path().join("init");
        std::fs::write(&src, b"counter 0\n").unwrap();
        let md5 = store.keep(&src).unwrap();
        // What a kill -9 mid-download leaves: the temporary file, not persisted.
        let tmp = atomic_file::temp_beside(&store.content_path("incoming")).unwrap();
        let (_, left) = tmp.keep().unwrap();
        assert!(left.exists());
        assert_eq!(sweep_leftovers(dir.path()).unwrap(), 1);
        assert!(!left.exists());
        let names: Vec<String> = std::fs::read_dir(dir.path().join(CONTENT_DIR))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![md5]);
    }
}
