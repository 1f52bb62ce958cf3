//! The largest upload a project takes, found by probing its PHP limits
//! without storing anything there.
//!
//! Each probe is an upload_files call with two file parts: the probe of N
//! zero bytes, then a part with an empty file name (a form's file input
//! left empty: PHP's `UPLOAD_ERR_NO_FILE`). job_file.php checks every part
//! before it stores any, so the call always fails, and how it fails says
//! what PHP did with the body:
//!
//! - `<empty> upload failed because: No file was uploaded.`: PHP took the
//!   probe (N ≤ upload_max_filesize, body ≤ post_max_size);
//! - `probe upload failed because: ... upload_max_filesize ...`: the body
//!   was taken, the probe file was too big;
//! - `can't parse request message:`: the body was over post_max_size and
//!   PHP dropped it whole.
//!
//! Sizes double until refused, then a bisection to [`RESOLUTION`] bytes.
//! One more call of 100 one-byte parts and an empty one learns
//! max_file_uploads from the count PHP kept.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use actix::Addr;
use gahp_project::rpc::{upload_body_len, Attachment, Rpc, RpcClient, RpcError};
use gahp_protocol::boinc::reply::{self, UploadRefusal};
use gahp_protocol::boinc::{request, Script};
use gahp_protocol::Authenticator;
use gahp_services::DaemonConfig;
use serde_json::json;

use super::{Level, Report};

/// Bisection stops when taken and refused sizes are this close.
const RESOLUTION: u64 = 1024;
/// The first size tried.
const FIRST: u64 = 64 << 10;
/// File parts of the count probe (more than any stock max_file_uploads).
const COUNT_PROBE_FILES: usize = 100;
/// Names in the probe requests; never stored (every probe fails).
const PROBE_NAME: &str = "boinc_gahp_check_probe";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// PHP took the body and the probe file.
    Taken,
    /// PHP took the body but not the file (upload_max_filesize).
    FileTooBig,
    /// PHP dropped the body (post_max_size).
    BodyDropped,
}

#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("the project stored the probe's files ({PROBE_NAME}_*): it took a file part with no name; ask its admins to delete them")]
    Stored,
    #[error("{0}")]
    Call(String),
    #[error("can't write the probe's files in {dir}: {source}")]
    Local { dir: PathBuf, source: std::io::Error },
}

struct Prober<'a> {
    rpc: &'a Addr<RpcClient>,
    auth: &'a Authenticator,
    dir: PathBuf,
    timeout: Duration,
    /// Answers so far: (file size, body length, answer).
    seen: Vec<(u64, u64, Answer)>,
}

impl Prober<'_> {
    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{PROBE_NAME}_{i}")).collect()
    }

    fn file(&self, name: &str, size: u64) -> Result<PathBuf, ProbeError> {
        let path = self.dir.join(name);
        let local = |source| ProbeError::Local { dir: self.dir.clone(), source };
        // Sparse: N zero bytes cost no disk.
        let f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&path).map_err(local)?;
        f.set_len(size).map_err(local)?;
        Ok(path)
    }

    async fn call(&self, xml: String, parts: Vec<Attachment>) -> Result<Result<(), (i64, String)>, ProbeError> {
        match self.rpc.once(Script::JobFile, xml, parts, reply::parse_upload_files, Instant::now() + self.timeout).await {
            Ok(()) => Ok(Ok(())),
            Err(RpcError::Boinc { num, msg }) => Ok(Err((num, msg))),
            Err(e) => Err(ProbeError::Call(self.auth.redact_in(&e.to_string()))),
        }
    }

    /// One probe of a file of `size` bytes.
    async fn ask(&mut self, size: u64) -> Result<Answer, ProbeError> {
        if let Some(&(_, _, a)) = self.seen.iter().find(|s| s.0 == size) {
            return Ok(a);
        }
        let parts = vec![
            Attachment { filename: "probe".into(), path: self.file("probe", size)?, size },
            Attachment { filename: String::new(), path: self.file("empty", 0)?, size: 0 },
        ];
        let xml = request::upload_files(self.auth, 0, &Self::names(2));
        let body = upload_body_len(&xml, &parts);
        let answer = match self.call(xml, parts).await? {
            Ok(()) => return Err(ProbeError::Stored),
            Err((num, msg)) => match reply::upload_refusal(num, &msg) {
                Some(UploadRefusal::BodyDropped) => Answer::BodyDropped,
                Some(UploadRefusal::FileTooBig { .. }) => Answer::FileTooBig,
                _ if msg.ends_with("upload failed because: No file was uploaded.") => Answer::Taken,
                _ => return Err(ProbeError::Call(format!("{num} {}", self.auth.redact_in(&msg)))),
            },
        };
        self.seen.push((size, body, answer));
        Ok(answer)
    }

    /// The largest file size (up to `cap`) for which `ok` holds, and the
    /// smallest for which it does not (`None`: up to `cap` all held).
    async fn largest(&mut self, start: u64, cap: u64, ok: fn(Answer) -> bool) -> Result<(u64, Option<u64>), ProbeError> {
        let (mut lo, mut hi) = (0u64, None);
        let mut size = start.clamp(1, cap);
        loop {
            if ok(self.ask(size).await?) {
                lo = size;
                if size >= cap {
                    break;
                }
                size = (size * 2).min(cap);
            } else {
                hi = Some(size);
                break;
            }
        }
        let Some(mut h) = hi else { return Ok((lo, None)) };
        while h - lo > RESOLUTION {
            let mid = lo + (h - lo) / 2;
            if ok(self.ask(mid).await?) {
                lo = mid;
            } else {
                h = mid;
            }
        }
        Ok((lo, Some(h)))
    }

    fn body_of(&self, size: u64) -> u64 {
        self.seen.iter().find(|s| s.0 == size).map_or(0, |s| s.1)
    }

    /// max_file_uploads: the count PHP kept of more parts than it takes;
    /// `None` if it kept them all.
    async fn max_files(&self) -> Result<Option<usize>, ProbeError> {
        let one = self.file("one", 1)?;
        let mut parts: Vec<Attachment> =
            (0..COUNT_PROBE_FILES).map(|i| Attachment { filename: format!("p{i}"), path: one.clone(), size: 1 }).collect();
        parts.push(Attachment { filename: String::new(), path: self.file("empty", 0)?, size: 0 });
        let xml = request::upload_files(self.auth, 0, &Self::names(parts.len()));
        match self.call(xml, parts).await? {
            Ok(()) => Err(ProbeError::Stored),
            Err((num, msg)) => match reply::upload_refusal(num, &msg) {
                Some(UploadRefusal::TooManyFiles { kept, .. }) => Ok(Some(kept)),
                _ if msg.ends_with("upload failed because: No file was uploaded.") => Ok(None),
                _ => Err(ProbeError::Call(format!("{num} {}", self.auth.redact_in(&msg)))),
            },
        }
    }
}

/// A byte count for people: `2097152 (2.0 MiB)`.
fn bytes(n: u64) -> String {
    format!("{n} bytes ({:.1} MiB)", n as f64 / (1u64 << 20) as f64)
}

/// The whole number of MiB in [taken, refused), if any: PHP limits are
/// nearly always written so (`8M`).
fn whole_mib(taken: u64, refused: Option<u64>) -> Option<u64> {
    let m = taken.div_ceil(1 << 20);
    (m > 0 && refused.is_some_and(|r| m << 20 < r)).then_some(m)
}

pub async fn check(
    config: &DaemonConfig,
    rpc: &Addr<RpcClient>,
    auth: &Authenticator,
    url: &str,
    cap: u64,
    timeout: Duration,
    report: &mut Report,
) {
    let dir = std::env::temp_dir().join(format!("boinc_gahp_check.{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        report.add(Level::Fail, "uploads", format!("can't make a directory for the probe's files ({}): {e}", dir.display()));
        return;
    }
    let mut prober = Prober { rpc, auth, dir: dir.clone(), timeout, seen: Vec::new() };
    let outcome = probe(&mut prober, cap).await;
    let _ = std::fs::remove_dir_all(&dir);
    let limits = config.upload_limits(url);
    let learnt = learnt_budget(&config.state_dir, url, limits.max_bytes);
    let mut detail = json!({
        "configured": { "upload_max_bytes": limits.max_bytes, "upload_chunk": limits.max_files },
        "learnt_upload_max_bytes": learnt,
    });
    match outcome {
        Err(e) => report.add(Level::Fail, "uploads", format!("the probe failed: {e}")),
        Ok(found) => {
            let file_mib = whole_mib(found.file.0, found.file.1);
            let body_mib = whole_mib(found.body.0, found.body.1);
            detail["largest_file"] = json!({ "taken": found.file.0, "refused": found.file.1, "php_upload_max_filesize_mib": file_mib });
            detail["largest_request"] = json!({ "taken": found.body.0, "refused": found.body.1, "php_post_max_size_mib": body_mib });
            detail["files_per_request"] = json!(found.files);
            let limit_text = |taken: u64, refused: Option<u64>, mib: Option<u64>, php: &str| match (refused, mib) {
                (None, _) => format!("at least {} (the probe's --probe-max-mib)", bytes(taken)),
                (Some(r), Some(m)) => format!("{} ({r} refused: PHP {php} = {m}M)", bytes(taken)),
                (Some(r), None) => format!("{} ({r} refused: PHP {php})", bytes(taken)),
            };
            report.add(
                Level::Ok,
                "uploads",
                format!("largest input file: {}", limit_text(found.file.0, found.file.1, file_mib, "upload_max_filesize")),
            );
            report.add(
                Level::Ok,
                "uploads",
                format!("largest upload request: {}", limit_text(found.body.0, found.body.1, body_mib, "post_max_size")),
            );
            match found.files {
                Some(n) => report.add(Level::Ok, "uploads", format!("files per upload request: {n} (PHP max_file_uploads)")),
                None => report.add(Level::Ok, "uploads", format!("files per upload request: more than {COUNT_PROBE_FILES}")),
            }
            let project_takes = body_mib.map_or(found.body.0, |m| m << 20).max(found.body.0);
            if found.body.1.is_some() && limits.max_bytes > project_takes {
                report.add(
                    Level::Warn,
                    "uploads",
                    format!(
                        "the daemon's upload budget ({} bytes) is over what the project takes: its first large uploads will be refused and split until it learns; set [projects.\"{url}\"] upload_max_bytes = {project_takes}",
                        limits.max_bytes
                    ),
                );
            }
            if found.files.is_some_and(|n| limits.max_files > n) {
                report.add(
                    Level::Warn,
                    "uploads",
                    format!(
                        "the daemon sends up to {} files per upload, the project takes {}: set [projects.\"{url}\"] upload_chunk = {}",
                        limits.max_files,
                        found.files.unwrap_or(0),
                        found.files.unwrap_or(0)
                    ),
                );
            }
        }
    }
    match learnt {
        Some(b) => report.add(Level::Ok, "uploads", format!("upload budget the daemon learnt for this project: {}", bytes(b))),
        None => report.add(Level::Ok, "uploads", "the daemon has learnt no smaller upload budget for this project".into()),
    }
    report.detail("uploads", detail);
}

struct Found {
    /// Largest file taken, smallest refused.
    file: (u64, Option<u64>),
    /// Largest request body taken, smallest dropped.
    body: (u64, Option<u64>),
    files: Option<usize>,
}

async fn probe(p: &mut Prober<'_>, cap: u64) -> Result<Found, ProbeError> {
    let file = p.largest(FIRST, cap, |a| a == Answer::Taken).await?;
    // The body search starts where the file search found bodies taken.
    let body_start = p.seen.iter().filter(|s| s.2 != Answer::BodyDropped).map(|s| s.0).max().unwrap_or(FIRST);
    let (lo, hi) = p.largest(body_start, cap, |a| a != Answer::BodyDropped).await?;
    let body = (p.body_of(lo), hi.map(|h| p.body_of(h)));
    let files = p.max_files().await?;
    Ok(Found { file, body, files })
}

/// The budget the daemon learnt for `url` under `configured`, from the
/// state database (read-only).
fn learnt_budget(state_dir: &Path, url: &str, configured: u64) -> Option<u64> {
    let summary = super::state::inspect(state_dir).ok().flatten()?;
    let url = url.trim_end_matches('/');
    summary.upload_budgets.iter().find(|(p, c, _)| p.trim_end_matches('/') == url && *c == configured).map(|(_, _, l)| *l)
}
