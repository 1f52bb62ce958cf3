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

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use gahp_protocol::gahp::escape::{join_args, split_args};
use gahp_protocol::gahp::{self, AsyncCommand, Command, Frame, Request};
use gahp_session::session::GahpDecoder;
use gahp_session::tenancy::Tenancy;
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
            // Bounded chunks: each is one message to the upload's writer.
            let n = src.len().min(UPLOAD_CHUNK).min(usize::try_from(self.body_left).unwrap_or(usize::MAX));
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

/// The most bytes of an upload one chunk carries to its writer.
pub const UPLOAD_CHUNK: usize = 64 << 10;

/// Chunks of an upload on their way to its writer: with [`UPLOAD_CHUNK`],
/// at most 1 MiB of a client's upload waits, and as much is being written;
/// a disk slower than the client leaves its socket unread (TCP pushes
/// back), not its bytes in memory.
const UPLOAD_CHUNKS_IN_FLIGHT: usize = 16;

/// One connection's file commands, in the client's area. The serving
/// thread only parses them: whatever touches the disk (an upload's writes,
/// its digest, sync and rename, copies, listings, opening a file to send)
/// runs on a blocking thread, and the connection's next line waits for it,
/// so one client's slow disk or large file stalls no other client.
pub struct Transfer {
    area: Arc<Area>,
    out: mpsc::UnboundedSender<Outgoing>,
    upload: Option<Upload>,
    on: bool,
}

/// The client's area, for the blocking threads.
struct Area {
    root: PathBuf,
    tenancy: Tenancy,
}

/// The `PUT` whose bytes are coming.
enum Upload {
    /// Refused already: its bytes are read and dropped, then this answered.
    Refused(String),
    /// Its bytes go to `chunks`; `done` stores the file once they stop.
    Writing { chunks: mpsc::Sender<Bytes>, done: tokio::task::JoinHandle<Result<(), String>> },
}

/// An upload's temporary file and what came so far, moved to a blocking
/// thread for each write and back.
struct Sink {
    tmp: tempfile::NamedTempFile,
    hasher: Sha256,
    got: u64,
}

impl Sink {
    fn create(dest: &Path) -> Result<Sink, String> {
        let tmp = dest
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| gahp_services::atomic_file::temp_beside(dest))
            .map_err(|e| format!("can't store it: {e}"))?;
        Ok(Sink { tmp, hasher: Sha256::new(), got: 0 })
    }

    fn write(mut self, batch: Vec<Bytes>) -> Result<Sink, String> {
        for chunk in batch {
            self.got += chunk.len() as u64;
            self.hasher.update(&chunk);
            self.tmp.as_file_mut().write_all(&chunk).map_err(|e| format!("can't store it: {e}"))?;
        }
        Ok(self)
    }
}

/// `f` on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| format!("can't store it: {e}"))?
}

/// A file command done: its `FILES S` arguments, or a file to send.
enum Done {
    Answer(Vec<Vec<u8>>),
    File { file: std::fs::File, size: u64 },
}

#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("{0}")]
    Usage(&'static str),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Path(#[from] gahp_session::tenancy::Refusal),
}

fn arg(args: &[Vec<u8>], i: usize) -> Result<&[u8], Refused> {
    args.get(i).map(Vec::as_slice).ok_or(Refused::Usage("missing arguments"))
}

fn text(args: &[Vec<u8>], i: usize) -> Result<&str, Refused> {
    std::str::from_utf8(arg(args, i)?).map_err(|_| Refused::Usage("not UTF-8"))
}

impl Transfer {
    pub fn new(tenancy: Tenancy, out: mpsc::UnboundedSender<Outgoing>) -> Self {
        Transfer { area: Arc::new(Area { root: tenancy.files.clone(), tenancy }), out, upload: None, on: false }
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

    /// A file command, an upload's bytes or its end. Returns once what it
    /// asked of the disk is done (and answered).
    pub async fn handle(&mut self, item: Incoming) {
        match item {
            Incoming::Gahp(_) => {}
            Incoming::File(line) => {
                let args = split_args(&line);
                let word = String::from_utf8_lossy(args.first().map(Vec::as_slice).unwrap_or_default()).into_owned();
                if let Err(e) = self.command(args).await {
                    tracing::info!(client = %self.area.tenancy.client, "refused a file command {word}: {e}");
                    self.refuse(&e.to_string());
                }
            }
            Incoming::Body(bytes) => {
                if let Some(Upload::Writing { chunks, .. }) = &self.upload {
                    // A writer that failed took no more: its answer says why.
                    let _ = chunks.send(bytes).await;
                }
            }
            Incoming::BodyEnd => match self.upload.take() {
                Some(Upload::Refused(why)) => self.refuse(&why),
                Some(Upload::Writing { chunks, done }) => {
                    drop(chunks);
                    match done.await {
                        Ok(Ok(())) => self.answer(true, &[]),
                        Ok(Err(why)) => self.refuse(&why),
                        Err(e) => self.refuse(&format!("can't store it: {e}")),
                    }
                }
                None => {}
            },
        }
    }

    async fn command(&mut self, args: Vec<Vec<u8>>) -> Result<(), Refused> {
        match arg(&args, 0)? {
            b"FILES" => {
                self.on = arg(&args, 1)? == b"1";
                if !self.on {
                    return Err(Refused::Usage("only version 1 is spoken"));
                }
                self.answer(true, &[]);
            }
            b"PUT" => {
                let sha = text(&args, 1)?.to_string();
                let size = text(&args, 2)?.parse::<u64>().map_err(|_| Refused::Usage("bad size"))?;
                // The answer comes after the body (BodyEnd).
                self.upload = Some(if is_sha256(&sha) {
                    let (chunks, rx) = mpsc::channel(UPLOAD_CHUNKS_IN_FLIGHT);
                    let area = self.area.clone();
                    let done = actix_rt::spawn(area.receive(sha, size, rx));
                    Upload::Writing { chunks, done }
                } else {
                    Upload::Refused("bad SHA-256".into())
                });
            }
            _ => {
                let area = self.area.clone();
                let done = tokio::task::spawn_blocking(move || area.command(&args)).await.map_err(io::Error::other)??;
                match done {
                    Done::Answer(args) => self.answer(true, &args),
                    Done::File { file, size } => {
                        let header = Bytes::from(format!("FILES S {size}\n"));
                        let _ = self.out.send(Outgoing::File { header, file, size });
                    }
                }
            }
        }
        Ok(())
    }

    /// A GAHP line the session is about to get: a submit's jobs are noted
    /// under their batch, and a retire deletes the outputs of its jobs (on
    /// a blocking thread; the line comes back to go on to the session).
    pub async fn observe(&self, line: Vec<u8>) -> Vec<u8> {
        if !self.on {
            return line;
        }
        let word = line.split(|&b| b == b' ').next().unwrap_or_default();
        let wanted = word.eq_ignore_ascii_case(b"BOINC_SUBMIT") || word.eq_ignore_ascii_case(b"BOINC_RETIRE_BATCH");
        if !wanted {
            return line;
        }
        let line = Arc::new(line);
        let (area, seen) = (self.area.clone(), line.clone());
        let _ = tokio::task::spawn_blocking(move || area.observe(&seen)).await;
        // The blocking side's copy is gone once it returned (or panicked).
        Arc::try_unwrap(line).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl Area {
    /// A path of the client's, in its area (relative, no `..`).
    fn path(&self, p: &[u8]) -> Result<PathBuf, Refused> {
        use std::os::unix::ffi::OsStrExt;
        Ok(self.tenancy.path(Path::new(std::ffi::OsStr::from_bytes(p)))?)
    }

    /// A file command other than `FILES` and `PUT`, on a blocking thread.
    fn command(&self, args: &[Vec<u8>]) -> Result<Done, Refused> {
        let ok = Ok(Done::Answer(Vec::new()));
        match arg(args, 0)? {
            b"HAVE" => {
                let (sha, size) = (text(args, 1)?, text(args, 2)?.parse::<u64>().map_err(|_| Refused::Usage("bad size"))?);
                if !is_sha256(sha) {
                    return Err(Refused::Usage("bad SHA-256"));
                }
                let path = self.root.join(content_path(sha));
                match std::fs::metadata(&path) {
                    Ok(m) if m.is_file() && m.len() == size => {
                        // Used again: it stays for another retention.
                        let _ = std::fs::File::options().append(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
                        ok
                    }
                    _ => Err(Refused::Usage("not here")),
                }
            }
            b"STAGE" => {
                let sha = text(args, 1)?;
                if !is_sha256(sha) {
                    return Err(Refused::Usage("bad SHA-256"));
                }
                let to = self.path(arg(args, 2)?)?;
                let from = self.root.join(content_path(sha));
                if let Some(dir) = to.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                // A copy, not a link: the job may not change the stored content.
                gahp_services::atomic_file::copy_whole(&from, &to)?;
                ok
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
                ok
            }
            b"MKDIR" => {
                for a in &args[1..] {
                    std::fs::create_dir_all(self.path(a)?)?;
                }
                ok
            }
            b"LIST" => {
                let dir = self.path(arg(args, 1)?)?;
                let mut found = Vec::new();
                list(&dir, Path::new(""), &mut found)?;
                found.sort();
                Ok(Done::Answer(found))
            }
            b"GET" => {
                let path = self.path(arg(args, 1)?)?;
                let meta = std::fs::symlink_metadata(&path)?;
                if !meta.is_file() {
                    return Err(Refused::Usage("not a regular file"));
                }
                let file = std::fs::File::open(&path)?;
                let size = file.metadata()?.len();
                Ok(Done::File { file, size })
            }
            _ => Err(Refused::Usage("unknown file command")),
        }
    }

    /// An upload's bytes as they come, into a temporary file; once they
    /// stop, checked against the size and SHA-256 announced and renamed
    /// to its content name (whole or not at all). The disk work runs on
    /// blocking threads, one batch of chunks at a time; waiting for the
    /// client's bytes holds none (a client that stops mid-upload costs a
    /// task and its buffers until its connection ends).
    async fn receive(self: Arc<Self>, sha256: String, size: u64, mut chunks: mpsc::Receiver<Bytes>) -> Result<(), String> {
        let dest = self.root.join(content_path(&sha256));
        let to = dest.clone();
        let mut sink = blocking(move || Sink::create(&to)).await?;
        while let Some(first) = chunks.recv().await {
            // Whatever else is queued goes in the same call.
            let mut batch = vec![first];
            while let Ok(more) = chunks.try_recv() {
                batch.push(more);
            }
            sink = blocking(move || sink.write(batch)).await?;
        }
        let area = self.clone();
        blocking(move || {
            let Sink { tmp, hasher, got } = sink;
            if got != size {
                return Err(format!("{got} bytes came, {size} were announced"));
            }
            let digest = hex(&hasher.finalize());
            if digest != sha256 {
                return Err(format!("the content's SHA-256 is {digest}, not {sha256}"));
            }
            gahp_services::atomic_file::persist(tmp, &dest).map_err(|e| format!("can't store it: {e}"))?;
            tracing::info!(client = %area.tenancy.client, sha256, bytes = size, "stored an uploaded input");
            Ok(())
        })
        .await
    }

    fn observe(&self, line: &[u8]) {
        let done = match gahp::request::parse(line) {
            Ok(Request::Command { command: Command::Boinc(AsyncCommand::Submit(s)), .. }) => {
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
            Ok(Request::Command { command: Command::Boinc(AsyncCommand::RetireBatch { batch }), .. }) => self.retire(&batch),
            _ => Ok(()),
        };
        if let Err(e) = done {
            tracing::warn!(client = %self.tenancy.client, "can't keep the outputs' index: {e}");
        }
    }

    fn batch_index(&self, batch: &str) -> PathBuf {
        self.root.join(DIR).join("batches").join(key(batch))
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
            if std::fs::remove_dir_all(self.root.join(DIR).join("out").join(job)).is_ok() {
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

/// The names in `.transfer/in/` (content names) of the inputs and pool
/// files of the client's sequences that may still run a step, from its
/// state database.
fn sequence_inputs(client_dir: &Path) -> io::Result<HashSet<std::ffi::OsString>> {
    let Some(conn) = gahp_services::state_db::open_read_only(client_dir).map_err(io::Error::other)? else { return Ok(HashSet::new()) };
    let paths = gahp_sequences::store::inputs_in_use(&conn).map_err(io::Error::other)?;
    Ok(paths.iter().filter_map(|p| p.file_name().map(|n| n.to_os_string())).collect())
}

/// The names in `.transfer/blah/` of the client's BLAH jobs still to be
/// submitted or watched, from its state database.
fn live_blah_dirs(client_dir: &Path) -> io::Result<HashSet<std::ffi::OsString>> {
    let Some(conn) = gahp_services::state_db::open_read_only(client_dir).map_err(io::Error::other)? else { return Ok(HashSet::new()) };
    let dirs = gahp_blah::job_records::live_job_dirs(&conn).map_err(io::Error::other)?;
    Ok(dirs.iter().map(|d| gahp_blah::map::dir_token(d).into()).collect())
}

/// A file being written (atomic_file's `.<name>.<random>.part`).
fn is_part(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.starts_with('.') && n.ends_with(".part"))
}

/// Deletes what the file protocol kept in each client's area longer than
/// `keep` ago: inputs not used since, outputs not fetched, BLAH job
/// directories, batch indexes. An input a work sequence reads at each of
/// its steps stays while the sequence may run one, and a BLAH job's
/// directory while the job is being submitted or watched (a sequence job
/// reads its inputs there at every step). Returns how many entries went.
pub fn sweep(clients: &Path, keep: Duration) -> usize {
    let Some(before) = SystemTime::now().checked_sub(keep) else { return 0 };
    let Ok(entries) = std::fs::read_dir(clients) else { return 0 };
    let mut removed = 0;
    for client in entries.flatten() {
        for kind in ["in", "out", "blah", "batches"] {
            let in_use = match kind {
                "in" => sequence_inputs(&client.path()),
                "blah" => live_blah_dirs(&client.path()),
                _ => Ok(HashSet::new()),
            };
            let in_use = match in_use {
                Ok(names) => names,
                Err(e) => {
                    tracing::warn!(client = ?client.file_name(), "{kind} kept: can't read which are in use: {e}");
                    continue;
                }
            };
            let Ok(items) = std::fs::read_dir(client.path().join("files").join(DIR).join(kind)) else { continue };
            for item in items.flatten() {
                let old = item.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < before);
                if !old || in_use.contains(&item.file_name()) {
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
