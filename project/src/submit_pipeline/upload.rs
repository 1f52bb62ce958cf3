//! The upload step of a submit: the files the server lacks, in calls
//! bounded by count and bytes (the project's PHP limits), a refused call
//! split and sent again, the byte budget learnt per project.

use std::collections::{HashMap, HashSet, VecDeque};

use gahp_protocol::boinc::reply::UploadRefusal;
use gahp_protocol::boinc::{reply, request, Script};

use super::*;
use crate::rpc::{Attachment, Rpc, RpcError};
use crate::submit_records;
use gahp_services::config::UploadLimits;
use gahp_services::file_stager::StagedFile;

impl Run {
    /// Uploads the absent files in calls bounded by count and by bytes. A
    /// call PHP refused for its limits is split and sent again (a smaller
    /// byte budget learnt for the project); after a refusal, a lost reply or
    /// a duplicate, the server is asked what it has before anything is sent
    /// again, so nothing is stored or associated twice.
    pub(super) async fn upload(&self, batch_id: i64, absent: Vec<String>, files: &HashMap<&str, &StagedFile>) -> Step<()> {
        if absent.is_empty() {
            return Ok(());
        }
        let auth = &self.key.authenticator;
        let mut limits = self.config.upload_limits(&self.key.url);
        let configured = limits.max_bytes;
        limits.max_bytes = limits.max_bytes.min(self.learnt_budget(configured).await.unwrap_or(u64::MAX));
        let mut parts: HashMap<String, Attachment> = HashMap::with_capacity(absent.len());
        for name in &absent {
            let f = files[name.as_str()];
            // Opened here so that an unreadable file fails now, as a local
            // error; its content is streamed when the call is sent.
            let cant_read = |e: std::io::Error| SubmitError::LocalFile(format!("can't read input file {}: {e}", f.path.display()));
            let size = tokio::fs::File::open(&f.path).await.map_err(cant_read)?.metadata().await.map_err(cant_read)?.len();
            let filename = f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            parts.insert(name.clone(), Attachment { filename, path: f.path.clone(), size });
        }
        let base = BODY_FRAMING + auth.expose().len() as u64;
        let cost = |name: &String| part_cost(name, &parts[name]);
        let mut calls: VecDeque<Vec<String>> = plan_calls(&absent, base, limits, cost).into();
        let mut lost = 0;
        while let Some(call) = calls.pop_front() {
            let attachments = call.iter().map(|n| parts[n].clone()).collect();
            let xml = request::upload_files(auth, batch_id, &call);
            let e = match self.rpc.once(Script::JobFile, xml, attachments, reply::parse_upload_files, self.deadline).await {
                Ok(()) => {
                    lost = 0;
                    continue;
                }
                Err(e) => e,
            };
            let too_big = |name: &String, limit: PhpLimit| {
                let p = &parts[name];
                SubmitError::TooBig { path: p.path.display().to_string(), size: p.size, limit }
            };
            // Files that go back in calls of their own.
            let mut isolate = Vec::new();
            let refusal = match &e {
                RpcError::Boinc { num, msg } => reply::upload_refusal(*num, msg),
                _ => None,
            };
            match refusal {
                Some(UploadRefusal::BodyDropped) if call.len() > 1 => {
                    let body = base + call.iter().map(cost).sum::<u64>();
                    limits.max_bytes = limits.max_bytes.min(body / 2);
                    tracing::info!(project = %self.key.url, body, budget = limits.max_bytes, "the server dropped an upload over its post_max_size; splitting");
                    self.learn_budget(configured, limits.max_bytes).await;
                }
                Some(UploadRefusal::BodyDropped) => return Err(too_big(&call[0], PhpLimit::PostMaxSize)),
                Some(UploadRefusal::FileTooBig { filename }) => {
                    let named: Vec<String> = call.iter().filter(|n| parts[*n].filename == filename).cloned().collect();
                    if named.len() == 1 || call.len() == 1 {
                        return Err(too_big(named.first().unwrap_or(&call[0]), PhpLimit::UploadMaxFilesize));
                    }
                    // Several files of that name: each alone says which.
                    isolate = if named.is_empty() { call.clone() } else { named };
                }
                Some(UploadRefusal::TooManyFiles { kept, .. }) if kept > 0 => {
                    tracing::info!(project = %self.key.url, kept, "the server takes fewer files per call; splitting");
                    limits.max_files = limits.max_files.min(kept);
                }
                // Lost reply, or another submit uploaded the same file first.
                _ if e.outcome_unknown() || e.is_duplicate_entry() => {
                    if e.outcome_unknown() {
                        lost += 1;
                        self.pause(lost, e, SubmitError::Files).await?;
                    }
                }
                _ => return Err(SubmitError::Files(e)),
            }
            let missing = self.still_absent(batch_id, call).await?;
            let (alone, rest): (Vec<String>, Vec<String>) = missing.into_iter().partition(|n| isolate.contains(n));
            let again = plan_calls(&rest, base, limits, cost).into_iter().chain(alone.into_iter().map(|n| vec![n]));
            for c in again.rev() {
                calls.push_front(c);
            }
        }
        Ok(())
    }

    /// Which of `names` the server still lacks, after a call whose outcome
    /// is unknown or refused: asked without a batch (no side effect); those
    /// it has (stored by the lost call, or by someone else) are tied to the
    /// batch one by one, and any that vanished meanwhile count as missing.
    pub(super) async fn still_absent(&self, batch_id: i64, names: Vec<String>) -> Step<Vec<String>> {
        let xml = request::query_files(&self.key.authenticator, None, &names);
        let absent = self.idempotent(Script::JobFile, xml, reply::parse_query_files).await.map_err(SubmitError::Files)?;
        let absent: HashSet<usize> = absent.into_iter().collect();
        let (mut missing, mut present) = (Vec::new(), Vec::new());
        for (i, name) in names.into_iter().enumerate() {
            if absent.contains(&i) {
                missing.push(name)
            } else {
                present.push(name)
            }
        }
        missing.extend(self.associate_each(batch_id, &present).await?);
        Ok(missing)
    }

    /// The byte budget learnt for this project under `configured`, if any.
    pub(super) async fn learnt_budget(&self, configured: u64) -> Option<u64> {
        let (db, project) = (self.db.clone(), self.key.url.clone());
        match tokio::task::spawn_blocking(move || submit_records::learnt_upload_budget(&db, &project, configured)).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::warn!("can't read the learnt upload budget: {e}");
                None
            }
            Err(_) => None,
        }
    }

    /// Keeps a smaller byte budget for later uploads to this project.
    pub(super) async fn learn_budget(&self, configured: u64, learnt: u64) {
        let (db, project) = (self.db.clone(), self.key.url.clone());
        match tokio::task::spawn_blocking(move || submit_records::note_upload_budget(&db, &project, configured, learnt)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("can't store the learnt upload budget: {e}"),
            Err(_) => tracing::warn!("can't store the learnt upload budget: task failed"),
        }
    }
}

/// Bytes of an upload_files body besides its files (the request part and
/// the closing boundary, the authenticator's length apart), and per file
/// (its part's head and its `<phys_name>`, the two names apart): upper
/// bounds of what `rpc::multipart` and `request::upload_files` write.
const BODY_FRAMING: u64 = 1024;
const PART_FRAMING: u64 = 256;

/// What a file adds to an upload_files body, at most.
pub(super) fn part_cost(phys_name: &str, a: &Attachment) -> u64 {
    a.size + PART_FRAMING + (a.filename.len() + phys_name.len()) as u64
}

/// Groups `names` into upload calls, in order: at most `limits.max_files`
/// a call, and at most `limits.max_bytes` of body (`base` plus each file's
/// `cost`); a file over the budget goes alone (a server with larger limits
/// may still take it).
pub(super) fn plan_calls(names: &[String], base: u64, limits: UploadLimits, cost: impl Fn(&String) -> u64) -> Vec<Vec<String>> {
    let mut calls: Vec<Vec<String>> = Vec::new();
    let mut body = base;
    for name in names {
        let c = cost(name);
        match calls.last_mut() {
            Some(call) if call.len() < limits.max_files.max(1) && body.saturating_add(c) <= limits.max_bytes => {
                call.push(name.clone());
                body += c;
            }
            _ => {
                calls.push(vec![name.clone()]);
                body = base.saturating_add(c);
            }
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(sizes: &[u64], max_files: usize, max_bytes: u64) -> Vec<Vec<u64>> {
        let names: Vec<String> = (0..sizes.len()).map(|i| i.to_string()).collect();
        let calls = plan_calls(&names, 100, UploadLimits { max_files, max_bytes }, |n| sizes[n.parse::<usize>().unwrap()]);
        calls.iter().map(|c| c.iter().map(|n| sizes[n.parse::<usize>().unwrap()]).collect()).collect()
    }

    #[test]
    fn calls_are_bounded_by_count_and_bytes_and_a_big_file_goes_alone() {
        assert_eq!(plan(&[1; 5], 2, 1000), [vec![1, 1], vec![1, 1], vec![1]]);
        assert_eq!(plan(&[400, 400, 400, 200], 20, 1000), [vec![400, 400], vec![400, 200]]);
        assert_eq!(plan(&[400, 5000, 400], 20, 1000), [vec![400], vec![5000], vec![400]]);
        assert_eq!(plan(&[900], 20, 1000), [vec![900]]);
        assert!(plan(&[], 20, 1000).is_empty());
    }

    #[test]
    fn the_too_big_error_names_file_size_and_setting() {
        let e = SubmitError::TooBig { path: "/data/big.in".into(), size: 3145728, limit: PhpLimit::UploadMaxFilesize };
        assert_eq!(
            e.to_string(),
            "error processing input files: -1 input file /data/big.in (3145728 bytes) is over the project's PHP upload_max_filesize, the largest file it accepts"
        );
    }
}
