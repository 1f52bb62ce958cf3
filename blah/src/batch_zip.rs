//! The outputs of a shared BOINC batch in one download: the zip of every
//! canonical output of the batch (`get_output.php?cmd=batch_files`), when
//! it is worth it, streamed to a temporary file in the state directory,
//! then each job's outputs taken out of it. What the zip does not cover (a
//! missing, doubled or damaged entry) is fetched job by job as before.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use actix::prelude::*;
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::Authenticator;
use tempfile::NamedTempFile;
use zip::ZipArchive;

use gahp_project::rpc::{Rpc, RpcClient, RpcError};
use gahp_project::ProjectKey;
use gahp_services::atomic_file;
use gahp_services::digest::hex_md5;

/// The zip is fetched when the jobs waiting for their outputs are at least
/// 1/ZIP_SHARE of the batch's finished jobs (see [`worth_a_zip`]).
pub const ZIP_SHARE: usize = 4;
/// A larger zip is abandoned for job-by-job downloads.
pub const MAX_ZIP_BYTES: u64 = 1 << 30;
/// A zip listing more entries is refused (its directory is read whole).
pub const MAX_ENTRIES: usize = 500_000;
/// An entry claiming more is not extracted.
pub const MAX_ENTRY_BYTES: u64 = 1 << 30;

/// Whether `waiting` jobs of a batch that has `finished` jobs with
/// outputs (delivered ones included) should take their outputs from the
/// batch's zip: one request instead of one per output file. The zip holds
/// every finished job's outputs, also those delivered before, so it is
/// fetched only when the waiting jobs are at least a quarter of them:
/// each zip then carries at most 4 outputs per output it delivers, and the
/// bytes a batch costs stay within 4 times its outputs however slowly it
/// finishes (always fetching it would grow them with the square of the
/// batch). A lone job keeps its single download.
pub fn worth_a_zip(waiting: usize, finished: usize) -> bool {
    waiting >= 2 && waiting.saturating_mul(ZIP_SHARE) >= finished
}

/// The job and output index of a zip entry named by the output's physical
/// name, `<job>_<instance number>_r<random>_<output index>`; `None` for any
/// other name.
pub fn entry_owner(name: &str) -> Option<(&str, usize)> {
    let (rest, index) = name.rsplit_once('_')?;
    let index = number(index)?;
    let (rest, random) = rest.rsplit_once("_r")?;
    number(random)?;
    let (job, instance) = rest.rsplit_once('_')?;
    number(instance)?;
    (!job.is_empty()).then_some((job, index))
}

fn number(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A name a flat zip of physical names may hold: no path, nothing special.
fn plain_entry_name(raw: &[u8]) -> bool {
    !raw.is_empty() && !raw.iter().any(|b| matches!(b, b'/' | b'\\' | 0)) && !raw.windows(2).any(|w| w == b"..")
}

/// Why the batch's zip is not used (its jobs are fetched one by one).
#[derive(Debug, thiserror::Error)]
pub enum BatchZipError {
    #[error("can't learn the id of BOINC batch {batch}: {err}")]
    BatchId { batch: String, err: RpcError },
    #[error("can't download the batch's zip: {0}")]
    Download(RpcError),
    #[error("can't keep the batch's zip in {dir}: {err}")]
    Local { dir: PathBuf, err: io::Error },
    #[error("the batch's zip is unreadable: {0}")]
    Unreadable(String),
    #[error("the batch's zip lists {0} entries, more than {MAX_ENTRIES}")]
    TooManyEntries(usize),
    #[error("the batch's zip has an entry that is not a plain file name: {0:?}")]
    UnsafeEntry(String),
}

/// A batch zip shared by the deliveries that take from it (each extraction
/// runs on a blocking thread).
pub type SharedBatchZip = std::sync::Arc<std::sync::Mutex<BatchZip>>;

/// A downloaded batch zip, indexed for the jobs it was fetched for. The
/// temporary file goes when this is dropped.
pub struct BatchZip {
    archive: ZipArchive<File>,
    /// (job, output index) -> entry index.
    entries: HashMap<(String, usize), usize>,
    _file: NamedTempFile,
}

impl BatchZip {
    /// Reads the zip's directory: every entry must be a plain file name (a
    /// hostile one refuses the whole zip); the entries of `jobs` are
    /// indexed, and one named twice is left to the job-by-job path.
    pub fn open(file: NamedTempFile, jobs: &HashSet<String>) -> Result<BatchZip, BatchZipError> {
        let unreadable = |e: &dyn std::fmt::Display| BatchZipError::Unreadable(e.to_string());
        let mut f = file.reopen().map_err(|e| unreadable(&e))?;
        // Counted before the library reads every entry's record.
        let listed = gahp_services::unpack::entry_count(&mut f).map_err(|e| unreadable(&e))?;
        if listed > MAX_ENTRIES as u64 {
            return Err(BatchZipError::TooManyEntries(listed as usize));
        }
        let mut archive = ZipArchive::new(f).map_err(|e| unreadable(&e))?;
        // The library keeps one entry per name: one listed twice shows
        // only as a shorter list, and either copy could be the one kept.
        if archive.len() as u64 != listed {
            return Err(BatchZipError::Unreadable(format!("it lists {listed} entries under {} names", archive.len())));
        }
        let mut entries = HashMap::new();
        let mut twice = HashSet::new();
        for i in 0..archive.len() {
            let entry = archive.by_index_raw(i).map_err(|e| unreadable(&e))?;
            let raw = entry.name_raw();
            if !plain_entry_name(raw) || entry.is_dir() || entry.is_symlink() {
                return Err(BatchZipError::UnsafeEntry(String::from_utf8_lossy(raw).into_owned()));
            }
            let Some((job, index)) = std::str::from_utf8(raw).ok().and_then(entry_owner) else { continue };
            if jobs.contains(job) && entries.insert((job.to_string(), index), i).is_some() {
                twice.insert((job.to_string(), index));
            }
        }
        for key in twice {
            entries.remove(&key);
        }
        Ok(BatchZip { archive, entries, _file: file })
    }

    /// Writes output `index` of `job` to `dest`, whole or not at all (a
    /// temporary file beside it, then a rename). `Ok(false)`: the zip does
    /// not hold it.
    pub fn extract(&mut self, job: &str, index: usize, dest: &Path) -> Result<bool, String> {
        let Some(&i) = self.entries.get(&(job.to_string(), index)) else { return Ok(false) };
        let mut entry = self.archive.by_index(i).map_err(|e| e.to_string())?;
        let size = entry.size();
        if size > MAX_ENTRY_BYTES {
            return Err(format!("its entry claims {size} bytes, more than {MAX_ENTRY_BYTES}"));
        }
        atomic_file::write_whole(dest, |f| {
            // Never more than the entry claims; reading to its end checks
            // its CRC.
            let n = io::copy(&mut (&mut entry).take(size + 1), f)?;
            if n != size {
                return Err(io::Error::other(format!("its entry holds {n} bytes, not the {size} it claims")));
            }
            Ok(())
        })
        .map_err(|e| format!("can't write {}: {e}", dest.display()))?;
        Ok(true)
    }
}

/// The id of a BOINC batch, by name (the oldest of that name, as every
/// lookup by name answers): one query_batch.
pub async fn batch_id(rpc: &Addr<RpcClient>, auth: &Authenticator, batch: &str, deadline: Instant) -> Result<i64, BatchZipError> {
    let xml = request::query_batch_by_name(auth, batch);
    let failed = |err| BatchZipError::BatchId { batch: batch.to_string(), err };
    let info = rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batch, deadline).await.map_err(failed)?;
    if info.id <= 0 {
        return Err(failed(RpcError::Local("the reply has no batch id".into())));
    }
    Ok(info.id)
}

/// Downloads the zip of batch `batch_id` into the state directory and
/// indexes it for `jobs`. The URL carries a hash that grants the batch's
/// outputs: it is never logged.
pub async fn fetch(
    rpc: &Addr<RpcClient>,
    key: &ProjectKey,
    batch_id: i64,
    state_dir: &Path,
    jobs: HashSet<String>,
    deadline: Instant,
) -> Result<BatchZip, BatchZipError> {
    let auth_str = hex_md5(format!("{}{batch_id}", key.authenticator.expose()).as_bytes());
    let url = request::batch_files_url(&key.url, batch_id, &auth_str);
    let local = |err| BatchZipError::Local { dir: state_dir.to_path_buf(), err };
    std::fs::create_dir_all(state_dir).map_err(local)?;
    remove_stale(state_dir, STALE_AFTER);
    let tmp = tempfile::Builder::new().prefix(TEMP_PREFIX).suffix(".zip").tempfile_in(state_dir).map_err(local)?;
    rpc.download_at_most(url, tmp.path().to_path_buf(), MAX_ZIP_BYTES, deadline).await.map_err(BatchZipError::Download)?;
    tokio::task::spawn_blocking(move || BatchZip::open(tmp, &jobs))
        .await
        .unwrap_or_else(|e| Err(BatchZipError::Unreadable(format!("internal error: {e}"))))
}

const TEMP_PREFIX: &str = ".batch-outputs-";

/// A zip this old was left by a daemon that was killed while using it.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Removes the batch zips in `dir` older than `age` (a killed daemon leaves
/// its temporary files behind; one in use is never that old).
fn remove_stale(dir: &Path, age: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let ours = e.file_name().to_str().is_some_and(|n| n.starts_with(TEMP_PREFIX) && n.ends_with(".zip"));
        let old = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).is_some_and(|d| d >= age);
        if ours && old {
            if let Err(err) = std::fs::remove_file(e.path()) {
                tracing::info!("can't remove the stale {}: {err}", e.path().display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_testkit::zip_file;
    use std::io::Write;

    #[test]
    fn entry_names_map_to_their_job_and_output() {
        // As captured from a real server.
        assert_eq!(entry_owner("cap_job_091015_0_0_r47039241_0"), Some(("cap_job_091015_0", 0)));
        assert_eq!(entry_owner("blah#home_bl_x_3.0#1_0_r12_2"), Some(("blah#home_bl_x_3.0#1", 2)));
        assert_eq!(entry_owner("a_r_1_r5_10"), Some(("a_r", 10)));
        for other in ["", "out.txt", "job_0_r12", "job_0_rx_0", "job_a_r12_0", "_0_r1_0", "job_0_r1_", "job_0_12_0"] {
            assert_eq!(entry_owner(other), None, "{other}");
        }
    }

    #[test]
    fn the_rule_keeps_a_slow_batch_linear() {
        assert!(!worth_a_zip(1, 1), "a lone job keeps its single download");
        assert!(worth_a_zip(2, 2));
        assert!(worth_a_zip(250, 1000));
        assert!(!worth_a_zip(249, 1000));
        // A batch of 1,000 finishing 10 at a time: the zips fetched carry
        // at most 4 outputs per job they deliver.
        let (mut carried, mut finished) = (0, 0);
        for _ in 0..100 {
            finished += 10;
            if worth_a_zip(10, finished) {
                carried += finished;
            }
        }
        assert!(carried <= 4 * 1000, "{carried}");
    }

    #[test]
    fn the_auth_str_is_the_captured_one() {
        // captures/real-boinc/get_output_batch_files_zip.txt: batch 10.
        assert_eq!(hex_md5(b"888febac2c12d6e100ca4167792fa46610"), "cb38e0e4e4082767cbf77b211ba7eabc");
    }

    fn jobs(names: &[&str]) -> HashSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn extracts_the_outputs_of_the_jobs_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let z = zip_file(&[("a_0_r1_0", b"A0"), ("a_0_r1_1", b"A1"), ("b_0_r2_0", b"B0"), ("c_1_r3_0", b"C0")]);
        let mut zip = BatchZip::open(z, &jobs(&["a", "b"])).unwrap();
        let dest = dir.path().join("out");
        assert!(zip.extract("a", 1, &dest).unwrap());
        assert_eq!(std::fs::read(&dest).unwrap(), b"A1");
        assert!(zip.extract("b", 0, &dest).unwrap());
        assert_eq!(std::fs::read(&dest).unwrap(), b"B0");
        assert!(!zip.extract("b", 1, &dest).unwrap(), "not in the zip");
        assert!(!zip.extract("c", 0, &dest).unwrap(), "not asked for");
    }

    #[test]
    fn hostile_zips_are_refused_whole() {
        for bad in ["../a_0_r1_0", "x/a_0_r1_0", "x\\a_0_r1_0", "a..b", "a\0_0_r1_0"] {
            let z = zip_file(&[("a_0_r1_0", b"A"), (bad, b"evil")]);
            assert!(matches!(BatchZip::open(z, &jobs(&["a"])), Err(BatchZipError::UnsafeEntry(_))), "{bad:?}");
        }
        let garbage = NamedTempFile::new().unwrap();
        std::fs::write(garbage.path(), b"PK\x03\x04 not a zip").unwrap();
        assert!(matches!(BatchZip::open(garbage, &jobs(&["a"])), Err(BatchZipError::Unreadable(_))));
        // The real server's answer when nothing has finished: an empty file.
        let empty = NamedTempFile::new().unwrap();
        assert!(matches!(BatchZip::open(empty, &jobs(&["a"])), Err(BatchZipError::Unreadable(_))));
    }

    #[test]
    fn stale_zips_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for name in [".batch-outputs-x.zip", "state.sqlite3", ".batch-outputs-y.part"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        remove_stale(dir.path(), std::time::Duration::from_secs(3600));
        assert!(dir.path().join(".batch-outputs-x.zip").exists(), "a fresh one may be in use");
        remove_stale(dir.path(), std::time::Duration::ZERO);
        let mut left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        left.sort();
        assert_eq!(left, [".batch-outputs-y.part", "state.sqlite3"]);
    }

    #[test]
    fn a_doubled_entry_is_left_to_the_job_by_job_path() {
        let dir = tempfile::tempdir().unwrap();
        let z = zip_file(&[("a_0_r1_0", b"one"), ("a_1_r2_0", b"two"), ("b_0_r3_0", b"B")]);
        let mut zip = BatchZip::open(z, &jobs(&["a", "b"])).unwrap();
        assert!(!zip.extract("a", 0, &dir.path().join("x")).unwrap());
        assert!(zip.extract("b", 0, &dir.path().join("x")).unwrap());
    }

    #[test]
    fn a_damaged_entry_fails_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = NamedTempFile::new().unwrap();
        let mut w = zip::ZipWriter::new(tmp.reopen().unwrap());
        let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        w.start_file("a_0_r1_0", stored).unwrap();
        w.write_all(b"hello world").unwrap();
        w.finish().unwrap();
        let mut bytes = std::fs::read(tmp.path()).unwrap();
        let at = bytes.windows(11).position(|w| w == b"hello world").unwrap();
        bytes[at] = b'j';
        std::fs::write(tmp.path(), bytes).unwrap();
        let mut zip = BatchZip::open(tmp, &jobs(&["a"])).unwrap();
        let dest = dir.path().join("out");
        assert!(zip.extract("a", 0, &dest).is_err());
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing left behind");
    }
}
