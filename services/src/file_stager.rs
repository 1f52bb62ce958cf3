//! FileStager: turns local input paths into BOINC physical names
//! (`<md5 of content><extension of the path>`, `docs/spec/boinc-rpc.md` §8.2).
//! Hashing runs on blocking threads, at most `hash_threads` at once; a
//! persistent cache keyed by (path, size, mtime, inode) means an unchanged
//! file is hashed once; concurrent submits of one file share one hash.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::prelude::*;
use futures_util::future::{FutureExt, LocalBoxFuture, Shared};
use md5::{Digest, Md5};
use tokio::sync::Semaphore;

use crate::state_db::{FileStamp, StateDb};

/// A local input file and its name on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedFile {
    pub path: PathBuf,
    pub phys_name: String,
    pub size: u64,
    /// The MD5 came from the cache: the file was not read.
    pub from_cache: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StageError(pub String);

type HashJob = Shared<LocalBoxFuture<'static, Result<StagedFile, StageError>>>;

pub struct FileStager {
    db: StateDb,
    threads: Arc<Semaphore>,
    in_flight: HashMap<PathBuf, HashJob>,
}

impl FileStager {
    pub fn new(db: StateDb, hash_threads: usize) -> Self {
        FileStager { db, threads: Arc::new(Semaphore::new(hash_threads.max(1))), in_flight: HashMap::new() }
    }
}

impl Actor for FileStager {
    type Context = Context<Self>;
}

/// Stage these distinct paths; the reply is in the same order.
#[derive(Message)]
#[rtype(result = "Result<Vec<StagedFile>, StageError>")]
pub struct Stage(pub Vec<PathBuf>);

impl Handler<Stage> for FileStager {
    type Result = ResponseActFuture<Self, Result<Vec<StagedFile>, StageError>>;

    fn handle(&mut self, msg: Stage, _: &mut Context<Self>) -> Self::Result {
        let jobs: Vec<HashJob> = msg
            .0
            .into_iter()
            .map(|path| {
                self.in_flight
                    .entry(path.clone())
                    .or_insert_with(|| {
                        let (db, threads) = (self.db.clone(), self.threads.clone());
                        async move {
                            let _permit = threads.acquire_owned().await.map_err(|_| StageError("stager closed".into()))?;
                            tokio::task::spawn_blocking(move || stage_one(&db, &path))
                                .await
                                .unwrap_or_else(|e| Err(StageError(format!("hashing failed: {e}"))))
                        }
                        .boxed_local()
                        .shared()
                    })
                    .clone()
            })
            .collect();
        Box::pin(futures_util::future::join_all(jobs).into_actor(self).map(move |results, act, _| {
            // Finished jobs leave the in-flight map; the cache remembers them.
            act.in_flight.retain(|_, job| job.peek().is_none());
            results.into_iter().collect()
        }))
    }
}

/// Hashes one file unless the cache knows it unchanged.
fn stage_one(db: &StateDb, path: &Path) -> Result<StagedFile, StageError> {
    let err = |e: std::io::Error| StageError(format!("can't read input file {}: {e}", path.display()));
    let meta = std::fs::metadata(path).map_err(err)?;
    if !meta.is_file() {
        return Err(StageError(format!("input file {} is not a regular file", path.display())));
    }
    let stamp = FileStamp {
        path: path.as_os_str().as_bytes().to_vec(),
        size: meta.len(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        inode: meta.ino(),
    };
    let (md5, from_cache) = match db.cached_md5(&stamp) {
        Some(md5) => (md5, true),
        None => {
            let md5 = md5_file(path).map_err(err)?;
            db.store_md5(&stamp, &md5);
            (md5, false)
        }
    };
    let phys_name = format!("{md5}{}", extension(path));
    if !gahp_protocol::boinc::request::phys_name_ok(&phys_name) {
        return Err(StageError(format!(
            "input file {} has an extension the server refuses in file names (allowed: letters, digits, _ . - and space)",
            path.display()
        )));
    }
    Ok(StagedFile { path: path.to_path_buf(), phys_name, size: meta.len(), from_cache })
}

/// Lowercase hex MD5 of a file's content.
pub fn md5_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The extension of the last path component, dot included (`.gz` for
/// `input.tar.gz`, `.profile` for `.profile`); empty if there is none.
pub fn extension(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match name.rfind('.') {
        Some(i) => name[i..].to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_as_the_reference_names_them() {
        assert_eq!(extension(Path::new("/data/run1/input.tar.gz")), ".gz");
        assert_eq!(extension(Path::new("/x/.profile")), ".profile");
        assert_eq!(extension(Path::new("/x.d/noext")), "");
    }

    #[test]
    fn md5_of_hello() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.dat");
        std::fs::write(&p, b"hello\n").unwrap();
        assert_eq!(md5_file(&p).unwrap(), "b1946ac92492d2347c6235b4d2611184");
        let db = StateDb::in_memory(&[crate::schema::STATE_DB]).unwrap();
        let staged = stage_one(&db, &p).unwrap();
        assert_eq!(staged.phys_name, "b1946ac92492d2347c6235b4d2611184.dat");
    }
}
