//! Files over a served client's connection, the server's side
//! (docs/serve.md, "Files over the connection"). After `FILES 1`, a few
//! words are file commands rather than GAHP: `HAVE`, `PUT` (followed by
//! exactly its size in raw bytes), `STAGE`, `FRESH`, `MKDIR`, `LIST` and
//! `GET`.
//! Each is answered by one line starting `FILES ` (`GET`'s then by the
//! file's bytes), which no GAHP line of the session starts with.
//!
//! Everything lives under `.transfer/` in the client's area: inputs by
//! content (`in/<sha256>`), BOINC_FETCH_OUTPUT directories by job
//! (`out/<key>`) and BOINC_SEQUENCE_FETCH's (`out/seq-<key>`), BLAH job
//! directories (`blah/<token>`), and which jobs a batch has
//! (`batches/<key>`, so a retire deletes their outputs).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use gahp_actors::session::GahpDecoder;
use gahp_actors::tenancy::Tenancy;
use gahp_protocol::gahp::escape::{join_args, split_args};
use gahp_protocol::gahp::{self, AsyncCommand, Frame, Request};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;

/// The file protocol's directory in a client's area.
pub const DIR: &str = ".transfer";

/// The words that are file commands once `FILES 1` was sent.
pub const COMMANDS: [&str; 8] = ["FILES", "HAVE", "PUT", "STAGE", "FRESH", "MKDIR", "LIST", "GET"];

/// Where an input of this content is kept, relative to the area.
pub fn content_path(sha256: &str) -> String {
    format!("{DIR}/in/{sha256}")
}

/// The directory a job's BOINC_FETCH_OUTPUT lands in, relative to the area.
pub fn job_outputs(job: &str) -> String {
    format!("{DIR}/out/{}", key(job))
}

/// The directory a BOINC_SEQUENCE_FETCH lands in, relative to the area:
/// one per sequence and request id (`seq-`: no job's key looks like it).
pub fn sequence_outputs(sequence: &str, reqid: u32) -> String {
    // A sequence name has no control character: the pair is unambiguous.
    format!("{DIR}/out/seq-{}", key(&format!("{sequence}\n{reqid}")))
}

/// A BLAH job's directory (its `Iwd` on this host), by its
/// `JobDirectory` token (`blah::map::dir_token`).
pub fn blah_job_dir(token: &str) -> String {
    format!("{DIR}/blah/{token}")
}

/// A name of the client's (job, batch) as a file name: 32 hex digits.
pub fn key(name: &str) -> String {
    hex(&Sha256::digest(name.as_bytes()))[..32].to_string()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// What comes from a client: GAHP for the session, or the file protocol.
#[derive(Debug)]
pub enum Incoming {
    Gahp(Frame),
    /// A file command line (escapes intact).
    File(Vec<u8>),
    /// Bytes of the `PUT` in progress, then its end.
    Body(Bytes),
    BodyEnd,
}

/// The GAHP framer, and after a `PUT` line its raw bytes.
pub struct ServeDecoder {
    lines: GahpDecoder,
    on: bool,
    body_left: u64,
    end_pending: bool,
}

impl ServeDecoder {
    pub fn new(lines: GahpDecoder) -> Self {
        ServeDecoder { lines, on: false, body_left: 0, end_pending: false }
    }

    fn classify(&mut self, line: Vec<u8>) -> Incoming {
        let args = split_args(&line);
        let word = args.first().map(Vec::as_slice).unwrap_or_default();
        if word == b"FILES" {
            self.on = args.get(1).is_some_and(|v| v == b"1");
            return Incoming::File(line);
        }
        if !self.on || !COMMANDS.iter().any(|c| c.as_bytes() == word) {
            return Incoming::Gahp(Frame::Line(line));
        }
        if word == b"PUT" {
            // A size that does not parse carries no body: the answer is E.
            let size = args.get(2).and_then(|s| std::str::from_utf8(s).ok()).and_then(|s| s.parse::<u64>().ok());
            if let Some(size) = size {
                self.body_left = size;
                self.end_pending = size == 0;
            }
        }
        Incoming::File(line)
    }
}

impl Decoder for ServeDecoder {
    type Item = Incoming;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Incoming>> {
        if self.body_left > 0 {
            if src.is_empty() {
                return Ok(None);
            }
            let n = src.len().min(usize::try_from(self.body_left).unwrap_or(usize::MAX));
            self.body_left -= n as u64;
            self.end_pending = self.body_left == 0;
            return Ok(Some(Incoming::Body(src.split_to(n).freeze())));
        }
        if self.end_pending {
            self.end_pending = false;
            return Ok(Some(Incoming::BodyEnd));
        }
        Ok(match self.lines.decode(src)? {
            Some(Frame::Line(line)) => Some(self.classify(line)),
            other => other.map(Incoming::Gahp),
        })
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> io::Result<Option<Incoming>> {
        if self.body_left > 0 || self.end_pending {
            return self.decode(src);
        }
        Ok(match self.lines.decode_eof(src)? {
            Some(Frame::Line(line)) => Some(self.classify(line)),
            other => other.map(Incoming::Gahp),
        })
    }
}

/// What the connection's writer sends: the session's bytes, or a file
/// (its answer line, then exactly `size` bytes of it).
pub enum Outgoing {
    /// The session's output (counted as unread until written).
    Bytes(Bytes),
    /// A file command's answer line.
    Answer(Bytes),
    File {
        header: Bytes,
        file: std::fs::File,
        size: u64,
    },
}

/// Writes an [`Outgoing::File`]: the header, then `size` bytes of the file.
/// A file that shrank meanwhile cannot be framed: the connection must end.
pub async fn send_file(w: &mut (impl tokio::io::AsyncWrite + Unpin), header: &[u8], file: std::fs::File, size: u64) -> io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    w.write_all(header).await?;
    let mut from = tokio::fs::File::from_std(file).take(size);
    let sent = tokio::io::copy(&mut from, w).await?;
    if sent != size {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while it was sent"));
    }
    Ok(())
}

/// One connection's file commands, in the client's area.
pub struct Transfer {
    area: PathBuf,
    tenancy: Tenancy,
    out: mpsc::UnboundedSender<Outgoing>,
    upload: Option<Upload>,
    on: bool,
}

struct Upload {
    sha256: String,
    size: u64,
    got: u64,
    hasher: Sha256,
    tmp: Option<tempfile::NamedTempFile>,
    failed: Option<String>,
}

#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("{0}")]
    Usage(&'static str),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Path(#[from] gahp_actors::tenancy::Refusal),
}

impl Transfer {
    pub fn new(tenancy: Tenancy, out: mpsc::UnboundedSender<Outgoing>) -> Self {
        Transfer { area: tenancy.files.clone(), tenancy, out, upload: None, on: false }
    }

    fn answer(&self, ok: bool, args: &[Vec<u8>]) {
        let mut line = b"FILES ".to_vec();
        line.extend_from_slice(if ok { b"S" } else { b"E" });
        for a in args {
            line.push(b' ');
            line.extend_from_slice(&join_args(&[a]));
        }
        line.push(b'\n');
        let _ = self.out.send(Outgoing::Answer(Bytes::from(line)));
    }

    fn refuse(&self, why: &str) {
        self.answer(false, &[why.as_bytes().to_vec()]);
    }

    /// A path of the client's, in its area (relative, no `..`).
    fn path(&self, p: &[u8]) -> Result<PathBuf, Refused> {
        use std::os::unix::ffi::OsStrExt;
        Ok(self.tenancy.path(Path::new(std::ffi::OsStr::from_bytes(p)))?)
    }

    pub fn handle(&mut self, item: Incoming) {
        match item {
            Incoming::Gahp(_) => {}
            Incoming::File(line) => {
                let args = split_args(&line);
                if let Err(e) = self.command(&args) {
                    let word = String::from_utf8_lossy(args.first().map(Vec::as_slice).unwrap_or_default()).into_owned();
                    tracing::info!(client = %self.tenancy.client, "refused a file command {word}: {e}");
                    self.refuse(&e.to_string());
                }
            }
            Incoming::Body(bytes) => {
                if let Some(up) = &mut self.upload {
                    up.got += bytes.len() as u64;
                    up.hasher.update(&bytes);
                    if let (Some(tmp), None) = (&mut up.tmp, &up.failed) {
                        if let Err(e) = tmp.as_file_mut().write_all(&bytes) {
                            up.failed = Some(format!("can't store it: {e}"));
                        }
                    }
                }
            }
            Incoming::BodyEnd => {
                if let Some(up) = self.upload.take() {
                    match self.finish(up) {
                        Ok(()) => self.answer(true, &[]),
                        Err(e) => self.refuse(&e),
                    }
                }
            }
        }
    }

    fn command(&mut self, args: &[Vec<u8>]) -> Result<(), Refused> {
        let arg = |i: usize| args.get(i).map(Vec::as_slice).ok_or(Refused::Usage("missing arguments"));
        let text = |i: usize| -> Result<&str, Refused> { std::str::from_utf8(arg(i)?).map_err(|_| Refused::Usage("not UTF-8")) };
        match args[0].as_slice() {
            b"FILES" => {
                self.on = arg(1)? == b"1";
                if !self.on {
                    return Err(Refused::Usage("only version 1 is spoken"));
                }
                self.answer(true, &[]);
            }
            b"HAVE" => {
                let (sha, size) = (text(1)?, text(2)?.parse::<u64>().map_err(|_| Refused::Usage("bad size"))?);
                if !is_sha256(sha) {
                    return Err(Refused::Usage("bad SHA-256"));
                }
                let path = self.area.join(content_path(sha));
                match std::fs::metadata(&path) {
                    Ok(m) if m.is_file() && m.len() == size => {
                        // Used again: it stays for another retention.
                        let _ = std::fs::File::options().append(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
                        self.answer(true, &[]);
                    }
                    _ => self.refuse("not here"),
                }
            }
            b"PUT" => {
                let sha = text(1)?.to_string();
                let size = text(2)?.parse::<u64>().map_err(|_| Refused::Usage("bad size"))?;
                let mut up = Upload { sha256: sha, size, got: 0, hasher: Sha256::new(), tmp: None, failed: None };
                if !is_sha256(&up.sha256) {
                    up.failed = Some("bad SHA-256".into());
                } else {
                    let dest = self.area.join(content_path(&up.sha256));
                    match dest.parent().map(std::fs::create_dir_all).transpose().and_then(|_| gahp_actors::atomic_file::temp_beside(&dest))
                    {
                        Ok(tmp) => up.tmp = Some(tmp),
                        Err(e) => up.failed = Some(format!("can't store it: {e}")),
                    }
                }
                // The answer comes after the body (BodyEnd).
                self.upload = Some(up);
            }
            b"STAGE" => {
                let sha = text(1)?;
                if !is_sha256(sha) {
                    return Err(Refused::Usage("bad SHA-256"));
                }
                let to = self.path(arg(2)?)?;
                let from = self.area.join(content_path(sha));
                if let Some(dir) = to.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                // A copy, not a link: the job may not change the stored content.
                gahp_actors::atomic_file::copy_whole(&from, &to)?;
                self.answer(true, &[]);
            }
            b"FRESH" => {
                for a in &args[1..] {
                    let dir = self.path(a)?;
                    match std::fs::remove_dir_all(&dir) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e.into()),
                    }
                    std::fs::create_dir_all(&dir)?;
                }
                self.answer(true, &[]);
            }
            b"MKDIR" => {
                for a in &args[1..] {
                    std::fs::create_dir_all(self.path(a)?)?;
                }
                self.answer(true, &[]);
            }
            b"LIST" => {
                let dir = self.path(arg(1)?)?;
                let mut found = Vec::new();
                list(&dir, Path::new(""), &mut found)?;
                found.sort();
                self.answer(true, &found);
            }
            b"GET" => {
                let path = self.path(arg(1)?)?;
                let meta = std::fs::symlink_metadata(&path)?;
                if !meta.is_file() {
                    return Err(Refused::Usage("not a regular file"));
                }
                let file = std::fs::File::open(&path)?;
                let size = file.metadata()?.len();
                let header = Bytes::from(format!("FILES S {size}\n"));
                let _ = self.out.send(Outgoing::File { header, file, size });
            }
            _ => return Err(Refused::Usage("unknown file command")),
        }
        Ok(())
    }

    /// A whole upload: its size and SHA-256 as announced, then renamed to
    /// its content name.
    fn finish(&self, mut up: Upload) -> Result<(), String> {
        if let Some(e) = up.failed.take() {
            return Err(e);
        }
        if up.got != up.size {
            return Err(format!("{} bytes came, {} were announced", up.got, up.size));
        }
        let got = hex(&up.hasher.finalize());
        if got != up.sha256 {
            return Err(format!("the content's SHA-256 is {got}, not {}", up.sha256));
        }
        let dest = self.area.join(content_path(&up.sha256));
        let tmp = up.tmp.take().ok_or("can't store it")?;
        gahp_actors::atomic_file::persist(tmp, &dest).map_err(|e| format!("can't store it: {e}"))?;
        tracing::info!(client = %self.tenancy.client, sha256 = %up.sha256, bytes = up.size, "stored an uploaded input");
        Ok(())
    }

    /// A GAHP line the session is about to get: a submit's jobs are noted
    /// under their batch, and a retire deletes the outputs of its jobs.
    pub fn observe(&self, line: &[u8]) {
        if !self.on {
            return;
        }
        let word = line.split(|&b| b == b' ').next().unwrap_or_default();
        let wanted = word.eq_ignore_ascii_case(b"BOINC_SUBMIT") || word.eq_ignore_ascii_case(b"BOINC_RETIRE_BATCH");
        if !wanted {
            return;
        }
        let done = match gahp::request::parse(line) {
            Ok(Request::Async { command: AsyncCommand::Submit(s), .. }) => {
                let index = self.batch_index(&s.batch_name);
                let mut text = String::with_capacity(s.jobs.len() * 33);
                for job in &s.jobs {
                    text.push_str(&key(&job.name));
                    text.push('\n');
                }
                index.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| {
                    let mut f = std::fs::File::options().create(true).append(true).open(&index)?;
                    f.write_all(text.as_bytes())
                })
            }
            Ok(Request::Async { command: AsyncCommand::RetireBatch { batch }, .. }) => self.retire(&batch),
            _ => Ok(()),
        };
        if let Err(e) = done {
            tracing::warn!(client = %self.tenancy.client, "can't keep the outputs' index: {e}");
        }
    }

    fn batch_index(&self, batch: &str) -> PathBuf {
        self.area.join(DIR).join("batches").join(key(batch))
    }

    fn retire(&self, batch: &str) -> io::Result<()> {
        let index = self.batch_index(batch);
        let mut text = String::new();
        match std::fs::File::open(&index) {
            Ok(mut f) => f.read_to_string(&mut text)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut removed = 0;
        for job in text.lines().filter(|k| k.len() == 32 && k.bytes().all(|b| b.is_ascii_hexdigit())) {
            if std::fs::remove_dir_all(self.area.join(DIR).join("out").join(job)).is_ok() {
                removed += 1;
            }
        }
        std::fs::remove_file(&index)?;
        tracing::info!(client = %self.tenancy.client, jobs = removed, "deleted a retired batch's outputs");
        Ok(())
    }
}

/// The regular files below `dir`, as paths relative to it (symbolic links
/// are neither listed nor followed).
fn list(dir: &Path, rel: &Path, found: &mut Vec<Vec<u8>>) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    for entry in std::fs::read_dir(dir.join(rel))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = rel.join(entry.file_name());
        if kind.is_dir() {
            list(dir, &path, found)?;
        } else if kind.is_file() && !is_part(&entry.file_name()) {
            found.push(path.as_os_str().as_bytes().to_vec());
        }
    }
    Ok(())
}

/// A file being written (atomic_file's `.<name>.<random>.part`).
fn is_part(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.starts_with('.') && n.ends_with(".part"))
}

/// Deletes what the file protocol kept in each client's area longer than
/// `keep` ago: inputs not used since, outputs not fetched, BLAH job
/// directories, batch indexes. Returns how many entries went.
pub fn sweep(clients: &Path, keep: Duration) -> usize {
    let Some(before) = SystemTime::now().checked_sub(keep) else { return 0 };
    let Ok(entries) = std::fs::read_dir(clients) else { return 0 };
    let mut removed = 0;
    for client in entries.flatten() {
        for kind in ["in", "out", "blah", "batches"] {
            let Ok(items) = std::fs::read_dir(client.path().join("files").join(DIR).join(kind)) else { continue };
            for item in items.flatten() {
                let old = item.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < before);
                if !old {
                    continue;
                }
                let path = item.path();
                let gone =
                    if item.file_type().is_ok_and(|t| t.is_dir()) { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
                if gone.is_ok() {
                    removed += 1;
                }
            }
        }
    }
    removed
}
