//! The content store of work sequences: state and output files kept once
//! by MD5 content name in the state directory, the files of each step,
//! and the sweep of temporary files a killed daemon left.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use md5::{Digest, Md5};
use rusqlite::{params, OptionalExtension};

use super::*;
use gahp_services::atomic_file;

/// Removes the temporary files (`.<name>.<random>.part`) that a daemon
/// killed while writing into the content store left there; returns how
/// many. Called at start, so that they go even if nothing is written there
/// again (see [`atomic_file::sweep_abandoned`]).
pub fn sweep_leftovers(state_dir: &Path) -> io::Result<usize> {
    Ok(atomic_file::sweep_abandoned(&state_dir.join(CONTENT_DIR), std::time::SystemTime::now()))
}

impl SequenceStore {
    /// The content store's copy of a file.
    pub fn content_path(&self, md5: &str) -> PathBuf {
        self.files.join(md5)
    }

    /// Streams `src` into the content store; returns its content name.
    pub fn keep(&self, src: &Path) -> io::Result<String> {
        std::fs::create_dir_all(&self.files)?;
        let mut input = File::open(src)?;
        let mut tmp = atomic_file::temp_beside(&self.files.join("incoming"))?;
        let mut hasher = Md5::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n])?;
        }
        let md5: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let dest = self.content_path(&md5);
        if !dest.exists() {
            atomic_file::persist(tmp, &dest)?;
        }
        Ok(md5)
    }

    /// Forgets the files of sequence `name` (a purged one) and deletes
    /// every content file that no sequence names any more and that is older
    /// than `settled` (a younger one may be a new sequence's, kept but not
    /// yet recorded); returns how many were deleted.
    pub fn purge_files(&self, name: &str, settled: std::time::Duration) -> io::Result<usize> {
        let kept: std::collections::HashSet<String> = self
            .db
            .with_conn(|c| {
                c.execute(
                    "DELETE FROM sequence_files WHERE project = ?1 AND account = ?2 AND name = ?3",
                    params![self.project, self.account, name],
                )?;
                let mut q = c.prepare("SELECT DISTINCT md5 FROM sequence_files")?;
                let rows = q.query_map([], |r| r.get(0))?;
                rows.collect()
            })
            .map_err(sql)?;
        let entries = match std::fs::read_dir(&self.files) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let now = std::time::SystemTime::now();
        let mut deleted = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // Content names only: temporary files are atomic_file's to sweep.
            if name.len() != 32 || !name.bytes().all(|b| b.is_ascii_hexdigit()) || kept.contains(&name) {
                continue;
            }
            let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= settled);
            if old && std::fs::remove_file(entry.path()).is_ok() {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    /// Records a completed step's files (step 0: the initial state).
    pub fn put_files(&self, name: &str, step: u32, files: &[StepFile]) -> io::Result<()> {
        self.db
            .with_conn(|c| {
                let tx = c.transaction()?;
                for f in files {
                    tx.execute(
                        "INSERT OR REPLACE INTO sequence_files VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        params![self.project, self.account, name, step, f.name, f.md5],
                    )?;
                }
                tx.commit()
            })
            .map_err(sql)
    }

    pub fn files(&self, name: &str, step: u32) -> io::Result<Vec<StepFile>> {
        self.db
            .with_conn(|c| {
                let mut stmt = c.prepare(
                    "SELECT file, md5 FROM sequence_files WHERE project = ?1 AND account = ?2 AND name = ?3 AND step = ?4 ORDER BY file",
                )?;
                let rows =
                    stmt.query_map(params![self.project, self.account, name, step], |r| Ok(StepFile { name: r.get(0)?, md5: r.get(1)? }))?;
                rows.collect()
            })
            .map_err(sql)
    }

    /// The state a step starts from: each state file as the last step
    /// that wrote it left it (a heartbeat step writes none).
    pub fn state_before(&self, name: &str, step: u32, state_names: &[String]) -> io::Result<Vec<StepFile>> {
        self.db
            .with_conn(|c| {
                let mut out = Vec::new();
                for file in state_names {
                    let md5: Option<String> = c
                        .query_row(
                            "SELECT md5 FROM sequence_files WHERE project = ?1 AND account = ?2 AND name = ?3 AND file = ?4 AND step < ?5
                             ORDER BY step DESC LIMIT 1",
                            params![self.project, self.account, name, file, step],
                            |r| r.get(0),
                        )
                        .optional()?;
                    if let Some(md5) = md5 {
                        out.push(StepFile { name: file.clone(), md5 });
                    }
                }
                Ok(out)
            })
            .map_err(sql)
    }
}
