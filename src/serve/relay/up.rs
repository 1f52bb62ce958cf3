//! Requests going up: those that name local files are rewritten to names
//! in the client's area on the serving host once the files went up
//! (`BOINC_SUBMIT`'s inputs, a pool file, `BLAH_JOB_SUBMIT`'s ad, a
//! `BOINC_SEQUENCE_CREATE`'s state files and inputs); a fetch is pointed
//! into the area, and what its result means is noted (`Pending`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gahp_blah::map::dir_token;
use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::sequence_commands::{FetchSequence, SequenceCommand};
use gahp_protocol::gahp::{self, AsyncCommand, BlahCommand, Command, Frame, InputFile, ReqId, Request};
use gahp_session::session::POOL_PREFIX;
use tokio::io::{AsyncRead, AsyncWrite};

use super::link::Content;
use super::{Expect, Manifest, Pending, Relay, FETCH_STDERR, MANIFEST, REMAPS, STDERR, STDOUT};
use crate::serve::files::{self, blah_job_dir, content_path, job_outputs, sequence_outputs};

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Relay<R, W> {
    /// A request line from the gridmanager.
    pub(super) async fn up(&mut self, frame: Frame, files: bool) -> Result<(), String> {
        let Frame::Line(line) = frame else {
            return self.refuse().await;
        };
        let word = line.split(|&b| b == b' ').next().unwrap_or_default();
        if files && files::COMMANDS.iter().any(|c| c.as_bytes() == word) {
            // Those words are the file protocol's on this connection.
            return self.refuse().await;
        }
        let req = gahp::request::parse(&line).ok();
        let reqid = req.as_ref().and_then(Request::reqid).map(|r| r.0);
        if let Some(id) = reqid {
            // Pending here: the server would take it for this request sent
            // again after a reconnection.
            let in_flight = self.sent.iter().any(|s| matches!(s.expect, Expect::Reply(Some(i), _) if i == id));
            if self.outstanding.contains_key(&id) || in_flight {
                return self.refuse().await;
            }
        }
        let req = match req {
            Some(Request::ResponsePrefix(p)) => return self.forward(&line, Expect::Prefix(p)).await,
            Some(Request::Results) => return self.forward(&line, Expect::Results).await,
            Some(Request::AsyncModeOn) => return self.forward(&line, Expect::Async(true)).await,
            Some(Request::AsyncModeOff) => return self.forward(&line, Expect::Async(false)).await,
            Some(Request::SelectProject { .. }) if !files => return self.forward(&line, Expect::Select).await,
            req if files => req,
            _ => return self.forward(&line, Expect::Reply(reqid, None)).await,
        };
        let select = matches!(req, Some(Request::SelectProject { .. }));
        // A request whose result means files is noted once the server
        // took it (`S`): one it refused leaves another's of that id alone.
        let rewritten = match req {
            Some(Request::Command { reqid, command: Command::Boinc(AsyncCommand::Submit(mut s)) }) => self
                .send_inputs(s.jobs.iter_mut().flat_map(|job| job.inputs.iter_mut()))
                .await
                .map(|()| (gahp::request::format(&Request::Command { reqid, command: Command::Boinc(AsyncCommand::Submit(s)) }), None)),
            Some(Request::Command { reqid, command: Command::Boinc(AsyncCommand::FetchOutput(f)) }) => {
                self.fetch_into_area(reqid, f).await.map(|(line, p)| (line, Some(p)))
            }
            // A pool file goes up as an input does and is named by content.
            Some(Request::SelectProject { url, authenticator }) if url.starts_with(POOL_PREFIX) => {
                let local = PathBuf::from(&url[POOL_PREFIX.len()..]);
                self.link.upload(Content::File(&local)).await.map(|sha| {
                    let url = format!("{POOL_PREFIX}{}", content_path(&sha));
                    (gahp::request::format(&Request::SelectProject { url, authenticator }), None)
                })
            }
            Some(Request::Command { reqid, command: Command::Blah(BlahCommand::JobSubmit { ad }) }) => {
                self.blah_inputs(ad).await.map(|ad| {
                    (gahp::request::format(&Request::Command { reqid, command: Command::Blah(BlahCommand::JobSubmit { ad }) }), None)
                })
            }
            Some(Request::Command { reqid: _, command: Command::Blah(BlahCommand::JobStatus { job_id }) }) => {
                Ok((line, Some(Pending::BlahStatus { job_id })))
            }
            Some(Request::Command { reqid, command: Command::Sequence(SequenceCommand::Create(mut c)) }) => {
                self.send_inputs(c.state_files.iter_mut().chain(c.inputs.iter_mut())).await.map(|()| {
                    (gahp::request::format(&Request::Command { reqid, command: Command::Sequence(SequenceCommand::Create(c)) }), None)
                })
            }
            Some(Request::Command { reqid, command: Command::Sequence(SequenceCommand::Fetch(f)) }) => {
                self.sequence_fetch_into_area(reqid, f).await.map(|(line, p)| (line, Some(p)))
            }
            _ => Ok((line, None)),
        };
        match rewritten {
            Ok((line, _)) if select => self.forward(&line, Expect::Select).await,
            Ok((line, pending)) => self.forward(&line, Expect::Reply(reqid, pending)).await,
            // The link dropped under it: it is handled again after the reconnection.
            Err(why) if self.link.broken => Err(why),
            Err(why) => {
                eprintln!("boinc_gahp connect: refused a request: {why}");
                self.refuse().await
            }
        }
    }

    /// Each input (a submit's, a sequence's state files and inputs) goes
    /// up once per content and is named by its content.
    async fn send_inputs(&mut self, inputs: impl Iterator<Item = &mut InputFile>) -> Result<(), String> {
        let mut sent: HashMap<PathBuf, String> = HashMap::new();
        for input in inputs {
            let sha = match sent.get(&input.src) {
                Some(sha) => sha.clone(),
                None => {
                    let sha = self.link.upload(Content::File(&input.src)).await?;
                    sent.insert(input.src.clone(), sha.clone());
                    sha
                }
            };
            input.src = PathBuf::from(content_path(&sha));
        }
        Ok(())
    }

    /// The fetch goes into the job's directory in the area (emptied
    /// first); its result brings the files to where they were asked for.
    async fn fetch_into_area(&mut self, reqid: ReqId, mut f: gahp::FetchOutput) -> Result<(Vec<u8>, Pending), String> {
        let remote = job_outputs(&f.job_name);
        self.link.command(&["FRESH", remote.as_str()]).await?.map_err(|why| format!("can't prepare {remote}: {why}"))?;
        let discard = Path::new("/dev/null");
        let pending = Pending::Fetch {
            remote: remote.clone(),
            dir: absolute(&f.dir),
            stderr: f.stderr_file.clone(),
            dsts: f.specs.iter().map(|s| s.dst.clone()).collect(),
        };
        f.dir = PathBuf::from(&remote);
        if f.stderr_file != discard {
            f.stderr_file = PathBuf::from(FETCH_STDERR);
        }
        for (i, spec) in f.specs.iter_mut().enumerate() {
            if spec.src.as_bytes() != spec.dst.as_os_str().as_encoded_bytes() {
                spec.dst = PathBuf::from(format!(".r{i}"));
            }
        }
        Ok((gahp::request::format(&Request::Command { reqid, command: Command::Boinc(AsyncCommand::FetchOutput(f)) }), pending))
    }

    /// A sequence's fetch goes into a directory of its own in the area
    /// (one per request, so two fetches of a sequence don't share one);
    /// its result brings the files it names into the directory asked for.
    async fn sequence_fetch_into_area(&mut self, reqid: ReqId, mut f: FetchSequence) -> Result<(Vec<u8>, Pending), String> {
        let remote = sequence_outputs(&f.name, reqid.0);
        self.link.command(&["FRESH", remote.as_str()]).await?.map_err(|why| format!("can't prepare {remote}: {why}"))?;
        let pending = Pending::SequenceFetch { remote: remote.clone(), dir: absolute(&f.dir) };
        f.dir = PathBuf::from(remote);
        Ok((gahp::request::format(&Request::Command { reqid, command: Command::Sequence(SequenceCommand::Fetch(f)) }), pending))
    }

    /// A BLAH job's inputs go up into its directory in the area; its ad
    /// then names that directory, and its outputs there; where they go
    /// here is kept beside them.
    async fn blah_inputs(&mut self, mut ad: ClassAd) -> Result<ClassAd, String> {
        let (Some(iwd), Some(job_dir)) = (ad.get_str("Iwd"), ad.get_str("JobDirectory").map(str::trim).filter(|d| !d.is_empty())) else {
            // The server says what is missing.
            return Ok(ad);
        };
        let iwd = absolute(Path::new(iwd.trim()));
        let remote = blah_job_dir(&dir_token(job_dir));
        // Not emptied: a resubmit after a lost result gets the attempt
        // that completed, whose outputs are there.
        let dirs = [format!("{remote}/{REMAPS}"), format!("{remote}/.std")];
        self.link.command(&["MKDIR", dirs[0].as_str(), dirs[1].as_str()]).await?.map_err(|why| format!("can't prepare {remote}: {why}"))?;

        let mut inputs = Vec::new();
        for (i, entry) in list(&ad, "TransferInput", ',').into_iter().enumerate() {
            if entry.contains("://") || entry.ends_with('/') {
                // Refused with a hold reason that says why.
                inputs.push(entry);
                continue;
            }
            inputs.push(self.stage(&remote, &format!("in/{i}"), &under(&iwd, &entry)).await?);
        }
        if !inputs.is_empty() {
            ad.insert("TransferInput", Value::Str(inputs.join(",")));
        }
        let stream = |name: &str| ad.get_str(name).map(str::trim).filter(|p| !p.is_empty() && *p != "/dev/null").map(|p| under(&iwd, p));
        let (stdin, out, err) = (stream("In"), stream("Out"), stream("Err"));
        let remap_list = list(&ad, "TransferOutputRemaps", ';');
        if let Some(stdin) = stdin {
            let staged = self.stage(&remote, "in/stdin", &stdin).await?;
            ad.insert("In", Value::Str(staged));
        }
        if out.is_some() {
            ad.insert("Out", Value::Str(STDOUT.into()));
        }
        if let Some(e) = &err {
            let same = out.as_ref() == Some(e);
            ad.insert("Err", Value::Str(if same { STDOUT } else { STDERR }.into()));
        }
        let mut remaps = Vec::new();
        let mut entries = Vec::new();
        for entry in remap_list {
            match entry.split_once('=') {
                Some((from, to)) if !to.trim().is_empty() => {
                    entries.push(format!("{}={REMAPS}/{}", from.trim(), remaps.len()));
                    remaps.push(under(&iwd, to.trim()));
                }
                _ => entries.push(entry),
            }
        }
        if !entries.is_empty() {
            ad.insert("TransferOutputRemaps", Value::Str(entries.join(";")));
        }
        let manifest = serde_json::to_vec(&Manifest { iwd, out, err, remaps }).map_err(|e| e.to_string())?;
        let sha = self.link.upload(Content::Bytes(&manifest)).await?;
        let at = format!("{remote}/{MANIFEST}");
        self.link.command(&["STAGE", sha.as_str(), at.as_str()]).await?.map_err(|why| format!("can't record the job: {why}"))?;
        ad.insert("Iwd", Value::Str(remote));
        Ok(ad)
    }

    /// Sends `local` and places it at `<remote>/<sub>/<its name>`; the
    /// path relative to the job's directory. A file that can't be read is
    /// left out: the job is held with the reason.
    async fn stage(&mut self, remote: &str, sub: &str, local: &Path) -> Result<String, String> {
        let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "input".into());
        let rel = format!("{sub}/{name}");
        match self.link.upload(Content::File(local)).await {
            Ok(sha) => {
                let at = format!("{remote}/{rel}");
                self.link.command(&["STAGE", sha.as_str(), at.as_str()]).await?.map_err(|why| format!("can't place {name}: {why}"))?;
            }
            Err(why) if std::fs::metadata(local).is_err() => eprintln!("boinc_gahp connect: {why}"),
            Err(why) => return Err(why),
        }
        Ok(rel)
    }
}

/// A list attribute's entries, trimmed.
fn list(ad: &ClassAd, name: &str, sep: char) -> Vec<String> {
    ad.get_str(name).unwrap_or("").split(sep).map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect()
}

/// `p` made absolute against the working directory.
fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}

/// `p` if absolute, else under `dir`.
fn under(dir: &Path, p: &str) -> PathBuf {
    dir.join(p)
}
