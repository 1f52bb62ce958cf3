//! Results coming down that mean files (a `BOINC_FETCH_OUTPUT`'s, a
//! `BOINC_SEQUENCE_FETCH`'s, a `BLAH_JOB_STATUS` of a completed job): the
//! files are brought from the client's area to where the gridmanager
//! wants them before the RESULTS block is handed on; a failure to bring
//! them becomes the result.

use std::path::{Component, Path, PathBuf};

use gahp_blah::map::dir_token_of;
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::escape::split_args;
use gahp_protocol::gahp::{BlahResult, CommandResult, ReqId};
use gahp_services::unpack;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Expect, Manifest, Pending, Relay, Sent, FETCH_STDERR, MANIFEST, REMAPS, STDERR, STDOUT};
use crate::serve::files::blah_job_dir;

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Relay<R, W> {
    /// A RESULTS block: files first, then the block as one write.
    pub(super) async fn results(&mut self, mut lines: Vec<Vec<u8>>) -> Result<(), String> {
        for line in lines.iter_mut().skip(1) {
            let args = split_args(self.body(line));
            let Some(reqid) = args.first().and_then(|a| std::str::from_utf8(a).ok()?.parse::<u32>().ok()) else { continue };
            // Kept until the block is handed on: if the link drops first,
            // the request is sent again and its result means files again.
            let Some(pending) = self.pending.get(&reqid).cloned() else { continue };
            let failure = match pending {
                Pending::Fetch { remote, dir, stderr, dsts } if args.get(1).is_some_and(|a| a == b"NULL") => self
                    .bring_fetched(reqid, &remote, &dir, &stderr, &dsts)
                    .await
                    .err()
                    .map(|why| CommandResult::error(why).encode(ReqId(reqid))),
                Pending::SequenceFetch { remote, dir } if args.get(1).is_some_and(|a| a == b"NULL") => self
                    .bring_sequence(&remote, &dir, &args)
                    .await
                    .err()
                    .map(|why| CommandResult::error(format!("BOINC_SEQUENCE_FETCH failed: {why}")).encode(ReqId(reqid))),
                Pending::BlahStatus { job_id } if completed(&args) => self
                    .bring_blah(&job_id)
                    .await
                    .err()
                    .map(|why| BlahResult::Status { code: 1, error: why, status: 0, ad: None }.encode(ReqId(reqid))),
                _ => None,
            };
            if self.link.broken {
                // Not handed on: each of its requests is sent again.
                return Err("the server closed the connection while its outputs came".into());
            }
            if let Some(body) = failure {
                let mut rewritten = self.prefix.clone();
                rewritten.extend_from_slice(&body);
                rewritten.push(b'\n');
                *line = rewritten;
            }
        }
        self.emit(&lines.concat()).await?;
        for line in lines.iter().skip(1) {
            let args = split_args(self.body(line));
            if let Some(reqid) = args.first().and_then(|a| std::str::from_utf8(a).ok()?.parse::<u32>().ok()) {
                self.pending.remove(&reqid);
                self.appended.remove(&reqid);
                self.outstanding.remove(&reqid);
            }
        }
        if let Some(Sent { expect: Expect::Results, .. }) = self.sent.front() {
            self.sent.pop_front();
        }
        self.refusals().await
    }

    /// A fetch's files, from its directory in the area to the ones asked
    /// for; Err: the result becomes this failure.
    async fn bring_fetched(&mut self, reqid: u32, remote: &str, dir: &Path, stderr: &Path, dsts: &[PathBuf]) -> Result<(), String> {
        let names = self.link.list(remote).await?;
        // The stderr of its last sending (each has the whole text).
        let last = names.iter().filter_map(|n| stderr_sending(n)).max();
        for name in names {
            let from = format!("{remote}/{name}");
            if let Some(sending) = stderr_sending(&name) {
                // Appended to, as the daemon does, once per result.
                if Some(sending) != last || stderr == Path::new("/dev/null") || self.appended.contains(&reqid) {
                    continue;
                }
                let mut text = Vec::new();
                self.link.get(&from, &mut text).await?.map_err(|why| format!("can't fetch {from}: {why}"))?;
                let path = dir.join(stderr);
                gahp_services::atomic_file::append_whole(&path, &text)
                    .map_err(|e| format!("can't open stderr output file {}: {e}", path.display()))?;
                self.appended.insert(reqid);
                continue;
            }
            let renamed = name.strip_prefix(".r").and_then(|i| i.parse::<usize>().ok()).and_then(|i| dsts.get(i));
            let dest = match renamed {
                // As the daemon's own rename: no folder is made for it.
                Some(dst) => {
                    let dest = dir.join(dst);
                    unpack::check_dest(dir, &dest).map_err(|e| e.to_string())?;
                    dest
                }
                // Below the directory asked for (a zip's folders, made),
                // and no dot-file: as the daemon itself places them.
                None if stays_below(Path::new(&name)) && !hidden(&name) => {
                    let dest = dir.join(&name);
                    unpack::prepare_dest(dir, &dest).map_err(|e| e.to_string())?;
                    dest
                }
                None => continue,
            };
            self.link.get_to(&from, &dest).await?;
        }
        Ok(())
    }

    /// A sequence fetch's files, those its result names
    /// (`<reqid> NULL <step> <n> <name>...`), from its directory in the
    /// area into the one asked for; Err: the result becomes this failure.
    /// Its copy there is emptied then, brought or not: the sequence's own
    /// store keeps the content, so a fetch asked again is made again.
    async fn bring_sequence(&mut self, remote: &str, dir: &Path, args: &[Vec<u8>]) -> Result<(), String> {
        let count = args.get(3).and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok());
        let brought = match (count, args.get(4..)) {
            (Some(n), Some(names)) if names.len() == n => self.bring_named(remote, dir, names).await,
            _ => Err("its result does not say which files it wrote".into()),
        };
        if let Err(why) = self.link.command(&["FRESH", remote]).await? {
            eprintln!("boinc_gahp connect: can't empty {remote}: {why}");
        }
        brought
    }

    /// Each of `names` from `remote` to the same name below `dir`.
    async fn bring_named(&mut self, remote: &str, dir: &Path, names: &[Vec<u8>]) -> Result<(), String> {
        for name in names {
            let name = String::from_utf8_lossy(name);
            if !stays_below(Path::new(name.as_ref())) {
                return Err(format!("{name} is not below {}: not written", dir.display()));
            }
            let dest = dir.join(name.as_ref());
            unpack::prepare_dest(dir, &dest).map_err(|e| e.to_string())?;
            self.link.get_to(&format!("{remote}/{name}"), &dest).await?;
        }
        Ok(())
    }

    /// A completed BLAH job's outputs, from its directory in the area to
    /// where its submit said, only ever below its `Iwd` or to its
    /// `Out`/`Err`; Err: the status becomes this failure (asked again).
    async fn bring_blah(&mut self, job_id: &str) -> Result<(), String> {
        let Some(token) = dir_token_of(job_id) else { return Ok(()) };
        let remote = blah_job_dir(token);
        let mut text = Vec::new();
        if self.link.get(&format!("{remote}/{MANIFEST}"), &mut text).await?.is_err() {
            // Not submitted through a connect: its files stay there.
            return Ok(());
        }
        let m: Manifest = serde_json::from_slice(&text).map_err(|e| format!("the job's record in {remote} is damaged: {e}"))?;
        // Every destination is checked before one file is brought.
        let mut brought = Vec::new();
        for name in self.link.list(&remote).await? {
            if name == MANIFEST || name.starts_with("in/") {
                continue;
            }
            let dest = if name == STDOUT {
                m.out.clone()
            } else if name == STDERR {
                m.err.clone()
            } else if let Some(i) = name.strip_prefix(REMAPS).and_then(|r| r.strip_prefix('/')) {
                i.parse::<usize>().ok().and_then(|i| m.remaps.get(i).cloned())
            } else if stays_below(Path::new(&name)) && !hidden(&name) {
                Some(m.iwd.join(&name))
            } else {
                None
            };
            let Some(dest) = dest else { continue };
            let below_iwd = dest.strip_prefix(&m.iwd).is_ok_and(stays_below);
            if !below_iwd && Some(&dest) != m.out.as_ref() && Some(&dest) != m.err.as_ref() {
                return Err(format!("{} is not below the job's Iwd {}: not written", dest.display(), m.iwd.display()));
            }
            unpack::check_dest(&m.iwd, &dest).map_err(|e| e.to_string())?;
            brought.push((name, dest));
        }
        for (name, dest) in brought {
            unpack::prepare_dest(&m.iwd, &dest).map_err(|e| e.to_string())?;
            self.link.get_to(&format!("{remote}/{name}"), &dest).await?;
        }
        Ok(())
    }
}

/// Which sending a fetch's stderr file in the area is of (0: the first),
/// if it is one.
fn stderr_sending(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(FETCH_STDERR)?;
    if rest.is_empty() {
        return Some(0);
    }
    rest.strip_prefix('.')?.parse().ok()
}

/// A BLAH status result (`<reqid> <code> <error> <status> <ad>`) of a
/// completed job.
fn completed(args: &[Vec<u8>]) -> bool {
    args.get(1).is_some_and(|c| c == b"0") && args.get(3).is_some_and(|s| s == job_status::COMPLETED.to_string().as_bytes())
}

/// A path with a dot-file or dot-folder in it (a host must not plant
/// `.bashrc` in a home directory).
fn hidden(rel: &str) -> bool {
    rel.split('/').any(|part| part.starts_with('.'))
}

/// `rel` is relative and stays below where it starts.
fn stays_below(rel: &Path) -> bool {
    !rel.as_os_str().is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}
