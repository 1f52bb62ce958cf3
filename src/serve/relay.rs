//! `boinc_gahp connect`'s side of files over the connection
//! (docs/serve.md, "Files over the connection"). The gridmanager's lines
//! go up one at a time; those that name local files are rewritten to
//! names in the client's area on the serving host after the files went up
//! (`BOINC_SUBMIT`'s inputs, `BLAH_JOB_SUBMIT`'s ad, a
//! `BOINC_SEQUENCE_CREATE`'s state files and inputs), and results that
//! mean files are ready (a `BOINC_FETCH_OUTPUT`'s, a
//! `BOINC_SEQUENCE_FETCH`'s, a `BLAH_JOB_STATUS` of a completed job) are
//! handed on only once the files are where the gridmanager wants them.
//! Lines are parsed and written with the protocol crate, so escapes
//! survive the rewriting.
//!
//! When the link drops and the session is not over, `connect` dials again
//! (`Dialer::redial`) and resumes: it replays the state the gridmanager
//! set, the requests the server took whose results were not delivered
//! yet, and the lines that had no reply (docs/serve.md, "When the link
//! drops").
//!
//! It keeps nothing across its restarts: a restarted gridmanager asks
//! again, and what the server keeps (a BLAH job's own record of where its
//! outputs go) is enough to answer it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use bytes::BytesMut;
use futures_util::StreamExt;
use gahp_actors::blah::map::{dir_token, dir_token_of};
use gahp_actors::session::{GahpDecoder, MAX_LINE, POOL_PREFIX};
use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::escape::{join_args, split_args};
use gahp_protocol::gahp::sequence::{FetchSequence, SequenceCommand};
use gahp_protocol::gahp::{self, AsyncCommand, BlahCommand, BlahResult, CommandResult, Frame, InputFile, LineFramer, ReqId, Request};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;

use super::connect::{Dialer, Stream};
use super::files::{self, blah_job_dir, content_path, hex, job_outputs, sequence_outputs};

/// In a BLAH job's directory: where it says its files go locally.
const MANIFEST: &str = ".manifest";
/// A BLAH job's `Out` and `Err`, and remapped outputs, in its directory.
const STDOUT: &str = ".std/out";
const STDERR: &str = ".std/err";
const REMAPS: &str = ".remap";
/// A BOINC_FETCH_OUTPUT's stderr text, in its directory; `.stderr.<n>`
/// when it was sent again after the `n`th reconnection.
const FETCH_STDERR: &str = ".stderr";

/// Which sending a fetch's stderr file in the area is of (0: the first),
/// if it is one.
fn stderr_sending(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(FETCH_STDERR)?;
    if rest.is_empty() {
        return Some(0);
    }
    rest.strip_prefix('.')?.parse().ok()
}

/// Where a BLAH job's files go on the first tier, as its submit said.
#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    iwd: PathBuf,
    out: Option<PathBuf>,
    err: Option<PathBuf>,
    remaps: Vec<PathBuf>,
}

/// The server's side of the connection: its lines, and the answers to
/// file commands (other lines that come meanwhile are held, in order).
struct Link<R, W> {
    reader: R,
    writer: W,
    buf: BytesMut,
    held: VecDeque<Vec<u8>>,
    /// It failed or closed: every error since is the link's, not the request's.
    broken: bool,
    /// The server said why it ends the connection (`FILES BYE <why>`):
    /// not to be dialled again.
    bye: Option<String>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Link<R, W> {
    fn new(reader: R, writer: W, already: BytesMut) -> Self {
        Link { reader, writer, buf: already, held: VecDeque::new(), broken: false, bye: None }
    }

    /// The next line with its `\n`; None when the server closed. A
    /// `FILES BYE` line is noted, not returned.
    async fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let line = self.read_line().await;
        if !matches!(line, Ok(Some(_))) {
            self.broken = true;
        }
        if let Ok(Some(l)) = &line {
            if let Some(why) = bye_of(l) {
                self.bye = Some(why);
                self.broken = true;
                return Ok(None);
            }
        }
        line
    }

    async fn read_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                return Ok(Some(self.buf.split_to(end + 1).to_vec()));
            }
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                return Ok((!self.buf.is_empty()).then(|| self.buf.split().to_vec()));
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let sent = async {
            self.writer.write_all(bytes).await?;
            self.writer.flush().await
        }
        .await;
        self.broken |= sent.is_err();
        sent
    }

    /// A file command and its answer: `S`'s arguments, or `E`'s reason.
    async fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Result<Vec<Vec<u8>>, String>, String> {
        let mut line = join_args(args);
        line.push(b'\n');
        self.send(&line).await.map_err(|e| format!("the server: {e}"))?;
        self.answer().await
    }

    async fn answer(&mut self) -> Result<Result<Vec<Vec<u8>>, String>, String> {
        loop {
            let line = self.next_line().await.map_err(|e| format!("the server: {e}"))?.ok_or("the server closed the connection")?;
            let Some(rest) = line.strip_prefix(b"FILES ") else {
                self.held.push_back(line);
                continue;
            };
            let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
            let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
            let mut args = split_args(rest);
            let word = args.remove(0);
            return Ok(if word == b"S" {
                Ok(args)
            } else {
                Err(args.first().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default())
            });
        }
    }

    /// Exactly `size` bytes of the stream into `out` (all of them are read
    /// even if writing fails, so the stream stays in step).
    async fn body(&mut self, mut size: u64, out: &mut impl Write) -> Result<io::Result<()>, String> {
        let mut written = Ok(());
        while size > 0 {
            if self.buf.is_empty() && !matches!(self.reader.read_buf(&mut self.buf).await, Ok(n) if n > 0) {
                self.broken = true;
                return Err("the server closed the connection in a file".into());
            }
            let n = self.buf.len().min(usize::try_from(size).unwrap_or(usize::MAX));
            let chunk = self.buf.split_to(n);
            if written.is_ok() {
                written = out.write_all(&chunk);
            }
            size -= n as u64;
        }
        Ok(written)
    }

    /// Sends a local file (or bytes) unless the server has its content.
    async fn upload(&mut self, content: Content<'_>) -> Result<String, String> {
        let (sha, size) = content.digest()?;
        if self.command(&["HAVE".to_string(), sha.clone(), size.to_string()]).await?.is_ok() {
            return Ok(sha);
        }
        self.send(format!("PUT {sha} {size}\n").as_bytes()).await.map_err(|e| format!("the server: {e}"))?;
        let mut reader = content.open()?;
        let mut left = size;
        let mut chunk = vec![0u8; 64 << 10];
        while left > 0 {
            let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            // A file that shrank meanwhile is padded: the server then
            // refuses it by its digest, and the stream stays in step.
            let n = match reader.read(&mut chunk[..want]) {
                Ok(0) | Err(_) => {
                    chunk[..want].fill(0);
                    want
                }
                Ok(n) => n,
            };
            self.send(&chunk[..n]).await.map_err(|e| format!("the server: {e}"))?;
            left -= n as u64;
        }
        self.answer().await?.map_err(|why| format!("the server did not take {}: {why}", content.name()))?;
        Ok(sha)
    }

    /// `GET`: the file's bytes into `out`. Ok(Err) when the server has no
    /// such file.
    async fn get(&mut self, remote: &str, out: &mut impl Write) -> Result<Result<(), String>, String> {
        let size = match self.command(&["GET", remote]).await? {
            Ok(args) => args.first().and_then(|s| std::str::from_utf8(s).ok()?.parse::<u64>().ok()).ok_or("a GET answer without a size")?,
            Err(why) => return Ok(Err(why)),
        };
        Ok(self.body(size, out).await?.map_err(|e| e.to_string()))
    }

    /// `GET` into a local file, whole or not at all.
    async fn get_to(&mut self, remote: &str, dest: &Path) -> Result<(), String> {
        let mut tmp = gahp_actors::atomic_file::temp_beside(dest).map_err(|e| format!("can't write {}: {e}", dest.display()))?;
        self.get(remote, tmp.as_file_mut()).await?.map_err(|why| format!("can't fetch {remote}: {why}"))?;
        gahp_actors::atomic_file::persist(tmp, dest).map_err(|e| format!("can't write {}: {e}", dest.display()))
    }

    async fn list(&mut self, dir: &str) -> Result<Vec<String>, String> {
        let names = self.command(&["LIST", dir]).await?.map_err(|why| format!("can't list {dir}: {why}"))?;
        Ok(names.into_iter().map(|n| String::from_utf8_lossy(&n).into_owned()).collect())
    }
}

enum Content<'a> {
    File(&'a Path),
    Bytes(&'a [u8]),
}

impl Content<'_> {
    fn name(&self) -> String {
        match self {
            Content::File(p) => p.display().to_string(),
            Content::Bytes(_) => "a job's record".into(),
        }
    }

    fn open(&self) -> Result<Box<dyn Read + '_>, String> {
        Ok(match self {
            Content::File(p) => Box::new(std::fs::File::open(p).map_err(|e| format!("can't read {}: {e}", p.display()))?),
            Content::Bytes(b) => Box::new(*b),
        })
    }

    fn digest(&self) -> Result<(String, u64), String> {
        let mut hasher = Sha256::new();
        let mut reader = self.open()?;
        let mut chunk = vec![0u8; 64 << 10];
        let mut size = 0u64;
        loop {
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&chunk[..n]);
                    size += n as u64;
                }
                Err(e) => return Err(format!("can't read {}: {e}", self.name())),
            }
        }
        Ok((hex(&hasher.finalize()), size))
    }
}

/// What the reply to a forwarded command means for the lines after it.
#[derive(Clone)]
enum Expect {
    /// A request's `S` or `E`; with its request id (one the server took is
    /// outstanding until its result is handed on), and what its result
    /// means for files.
    Reply(Option<u32>, Option<Pending>),
    /// `RESPONSE_PREFIX`: lines after its reply carry the new prefix.
    Prefix(Vec<u8>),
    /// `RESULTS`: its reply is `S <n>`, then n result lines.
    Results,
    /// `BOINC_SELECT_PROJECT`: in force once answered `S`.
    Select,
    /// `ASYNC_MODE_ON` / `_OFF`.
    Async(bool),
    /// Not sent: refused here, its `E` handed on after the replies to the
    /// lines before it.
    Here,
}

/// A line sent to the server whose reply has not been handed on.
struct Sent {
    line: Vec<u8>,
    expect: Expect,
}

/// A request the server took whose result has not been handed on: sent
/// again after a reconnection (the server answers `S` and does not run
/// it again if it has it, runs it if it lost it), under the project
/// selection it was taken under.
struct Outstanding {
    order: u64,
    line: Vec<u8>,
    select: Option<Rc<Vec<u8>>>,
}

/// A request whose result line means files to bring.
#[derive(Clone)]
enum Pending {
    Fetch { remote: String, dir: PathBuf, stderr: PathBuf, dsts: Vec<PathBuf> },
    BlahStatus { job_id: String },
    SequenceFetch { remote: String, dir: PathBuf },
}

struct Relay<R, W> {
    link: Link<R, W>,
    stdout: tokio::io::Stdout,
    prefix: Vec<u8>,
    /// Lines sent, oldest first, until their reply is handed on.
    sent: VecDeque<Sent>,
    /// A RESULTS block being read: its lines (the header first) and how
    /// many are still to come.
    block: Option<(usize, Vec<Vec<u8>>)>,
    pending: HashMap<u32, Pending>,
    /// Fetches whose stderr text was appended to its file while their
    /// block was not yet handed on: the same result read again after a
    /// reconnection does not append it twice.
    appended: HashSet<u32>,
    outstanding: HashMap<u32, Outstanding>,
    taken: u64,
    /// The `BOINC_SELECT_PROJECT` line in force, and asynchronous mode.
    select: Option<Rc<Vec<u8>>>,
    async_mode: bool,
    /// A line from the gridmanager being handled, not yet sent.
    unsent: Option<Frame>,
    /// QUIT was sent: the session is over when the link closes.
    quit: bool,
    /// Reconnections so far.
    reconnections: u32,
}

enum Event {
    Up(Option<io::Result<Frame>>),
    Down(io::Result<Option<Vec<u8>>>),
}

/// `FILES BYE <why>`: the server ends this connection for good (the
/// token was revoked, or a newer connection of the client replaced it).
fn bye_of(line: &[u8]) -> Option<String> {
    let rest = line.strip_prefix(b"FILES BYE")?;
    let args = split_args(rest.trim_ascii());
    Some(args.first().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default())
}

/// The request id of a request that has one.
fn reqid_of(req: &Request) -> Option<u32> {
    match req {
        Request::Async { reqid, .. } | Request::Blah { reqid, .. } | Request::Sequence { reqid, .. } => Some(reqid.0),
        _ => None,
    }
}

/// Runs the connection after `AUTH` was answered `S`; `already` holds what
/// the server sent after that answer. Without `files`, requests go as
/// they are (their paths name files in the client's area there). When the
/// link drops before the session is over (QUIT, or stdin closed), it
/// dials again with `dialer` and resumes.
pub async fn relay(dialer: &Dialer, stream: Stream, already: BytesMut, files: bool) -> Result<(), String> {
    let (reader, writer) = tokio::io::split(stream);
    let mut relay = Relay {
        link: Link::new(reader, writer, already),
        stdout: tokio::io::stdout(),
        prefix: Vec::new(),
        sent: VecDeque::new(),
        block: None,
        pending: HashMap::new(),
        appended: HashSet::new(),
        outstanding: HashMap::new(),
        taken: 0,
        select: None,
        async_mode: false,
        unsent: None,
        quit: false,
        reconnections: 0,
    };
    let files = files && relay.negotiate(true).await?;
    let mut stdin = FramedRead::new(tokio::io::stdin(), GahpDecoder(LineFramer::new(MAX_LINE)));
    let mut stdin_open = true;
    let mut resuming = false;
    loop {
        let step = if resuming {
            relay.resume(files).await.map(|()| resuming = false)
        } else {
            relay.step(&mut stdin, &mut stdin_open, files).await
        };
        let Err(why) = step else { continue };
        if !relay.link.broken {
            return Err(why);
        }
        if let Some(bye) = relay.link.bye.take() {
            return Err(format!("the server ended the session: {bye}"));
        }
        // The session is over (or reconnecting is off): as before, the
        // link's close ends this.
        if relay.quit || !stdin_open || dialer.reconnect_for.is_zero() {
            return Ok(());
        }
        eprintln!("boinc_gahp connect: lost the connection ({why}); reconnecting for up to {} s", dialer.reconnect_for.as_secs());
        // stdin is not read meanwhile: the gridmanager waits on its pipe.
        let (stream, already) = dialer.redial().await?;
        let (reader, writer) = tokio::io::split(stream);
        relay.link = Link::new(reader, writer, already);
        relay.block = None;
        resuming = true;
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Relay<R, W> {
    /// One line from either side and what it leads to; Err when the link
    /// failed (`link.broken`) or something else ends this.
    async fn step<S>(&mut self, stdin: &mut S, stdin_open: &mut bool, files: bool) -> Result<(), String>
    where
        S: futures_util::Stream<Item = io::Result<Frame>> + Unpin,
    {
        while let Some(line) = self.link.held.pop_front() {
            self.down(line).await?;
        }
        // A line the link dropped under before it went (its files going up).
        if let Some(frame) = self.unsent.clone() {
            self.up(frame, files).await?;
            self.unsent = None;
            return Ok(());
        }
        let event = tokio::select! {
            up = stdin.next(), if *stdin_open => Event::Up(up),
            down = self.link.next_line() => Event::Down(down),
        };
        match event {
            Event::Up(Some(Ok(frame))) => {
                self.unsent = Some(frame.clone());
                self.up(frame, files).await?;
                self.unsent = None;
                Ok(())
            }
            Event::Up(_) => {
                // The server ends the session at EOF; its close ends this.
                *stdin_open = false;
                let _ = self.link.writer.shutdown().await;
                Ok(())
            }
            Event::Down(Ok(Some(line))) => self.down(line).await,
            Event::Down(Ok(None)) => Err("the server closed the connection".into()),
            Event::Down(Err(e)) => Err(format!("the server: {e}")),
        }
    }

    /// `FILES 1`: true when the server takes files. Its banner (and
    /// whatever else comes first) goes on to the gridmanager if `emit`
    /// (the first connection; a resumed one's is not the gridmanager's).
    async fn negotiate(&mut self, emit: bool) -> Result<bool, String> {
        self.link.send(b"FILES 1\n").await.map_err(|e| format!("the server: {e}"))?;
        loop {
            let line = self.link.next_line().await.map_err(|e| format!("the server: {e}"))?.ok_or("the server closed the connection")?;
            if line.starts_with(b"FILES S") {
                return Ok(true);
            }
            // A server without files answers the unknown command E.
            if line.starts_with(b"FILES ") || line.trim_ascii_end() == b"E" {
                eprintln!("boinc_gahp connect: the server does not take files; paths name files on the serving host");
                return Ok(false);
            }
            if emit {
                self.emit(&line).await?;
            }
        }
    }

    /// After a reconnection: the banner, then, in one go, the state the
    /// gridmanager set (prefix, asynchronous mode), every outstanding
    /// request under the selection it was taken under, the selection in
    /// force; their replies are read here (each must be `S`). Then the
    /// lines that had no reply are sent again, their replies handed on as
    /// usual.
    async fn resume(&mut self, files: bool) -> Result<(), String> {
        if files {
            if !self.negotiate(false).await? {
                return Err("the server no longer takes files".into());
            }
        } else {
            self.link.next_line().await.map_err(|e| format!("the server: {e}"))?.ok_or("the server closed the connection")?;
        }
        self.reconnections += 1;
        let mut lines: Vec<(Vec<u8>, Option<u32>)> = Vec::new();
        if !self.prefix.is_empty() {
            lines.push((gahp::request::format(&Request::ResponsePrefix(self.prefix.clone())), None));
        }
        if self.async_mode {
            lines.push((b"ASYNC_MODE_ON".to_vec(), None));
        }
        let mut again: Vec<(&u32, &Outstanding)> = self.outstanding.iter().collect();
        again.sort_by_key(|(_, o)| o.order);
        let mut selected: Option<&Rc<Vec<u8>>> = None;
        for (id, o) in again {
            if let Some(select) = o.select.as_ref().filter(|s| selected.is_none_or(|was| !Rc::ptr_eq(was, s))) {
                lines.push((select.to_vec(), None));
                selected = Some(select);
            }
            lines.push((self.sent_again(*id, &o.line), Some(*id)));
        }
        if let Some(select) = self.select.as_ref().filter(|s| selected.is_none_or(|was| !Rc::ptr_eq(was, s))) {
            lines.push((select.to_vec(), None));
        }
        let mut bytes = Vec::new();
        for (line, _) in &lines {
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
        }
        self.link.send(&bytes).await.map_err(|e| format!("the server: {e}"))?;
        let mut notified = false;
        for (line, reqid) in &lines {
            let reply = loop {
                let reply =
                    self.link.next_line().await.map_err(|e| format!("the server: {e}"))?.ok_or("the server closed the connection")?;
                if self.body(&reply) == b"R" {
                    notified = true;
                    continue;
                }
                break reply;
            };
            if self.body(&reply) == b"S" {
                continue;
            }
            let what = String::from_utf8_lossy(line.split(|&b| b == b' ').next().unwrap_or_default()).into_owned();
            match reqid {
                // Another sender holds the id now: its result is not ours.
                Some(id) => {
                    eprintln!(
                        "boinc_gahp connect: request {id} ({what}), sent again after the reconnection, was refused: it gets no result"
                    );
                    self.outstanding.remove(id);
                    self.pending.remove(id);
                    self.appended.remove(id);
                }
                None => return Err(format!("the server refused {what} after the reconnection")),
            }
        }
        eprintln!("boinc_gahp connect: reconnected; {} request(s) outstanding sent again", self.outstanding.len());
        if notified {
            self.reply_here(b"R").await?;
        }
        // The line whose files were going up stays to be sent after these
        // (`forward` clears it), and a drop among them keeps the rest.
        let unsent = self.unsent.take();
        let mut rest = std::mem::take(&mut self.sent);
        while let Some(sent) = rest.pop_front() {
            if let Expect::Here = sent.expect {
                self.sent.push_back(sent);
                continue;
            }
            if let Err(e) = self.forward(&sent.line, sent.expect).await {
                self.sent.extend(rest);
                self.unsent = unsent;
                return Err(e);
            }
        }
        self.unsent = unsent;
        Ok(())
    }

    /// An outstanding request's line as sent again. The server runs a
    /// request again whose result it had handed on (in a block the link
    /// dropped under), and a fetch run again appends its stderr text to
    /// the file it names: a file of its own then, so that the text is
    /// there once.
    fn sent_again(&self, id: u32, line: &[u8]) -> Vec<u8> {
        if !matches!(self.pending.get(&id), Some(Pending::Fetch { .. })) {
            return line.to_vec();
        }
        match gahp::request::parse(line) {
            Ok(Request::Async { reqid, command: AsyncCommand::FetchOutput(mut f) }) if f.stderr_file != Path::new("/dev/null") => {
                f.stderr_file = PathBuf::from(format!("{FETCH_STDERR}.{}", self.reconnections));
                gahp::request::format(&Request::Async { reqid, command: AsyncCommand::FetchOutput(f) })
            }
            _ => line.to_vec(),
        }
    }

    async fn emit(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stdout.write_all(bytes).await.map_err(|e| format!("stdout: {e}"))?;
        self.stdout.flush().await.map_err(|e| format!("stdout: {e}"))
    }

    /// A line of ours to the gridmanager, with the prefix in force.
    async fn reply_here(&mut self, body: &[u8]) -> Result<(), String> {
        let mut line = self.prefix.clone();
        line.extend_from_slice(body);
        line.push(b'\n');
        self.emit(&line).await
    }

    /// `E` for a line refused here, in its turn: the gridmanager reads
    /// the replies in the order of its lines.
    async fn refuse(&mut self) -> Result<(), String> {
        if self.sent.is_empty() {
            return self.reply_here(b"E").await;
        }
        self.sent.push_back(Sent { line: Vec::new(), expect: Expect::Here });
        Ok(())
    }

    /// The refusals whose turn came with the reply just handed on.
    async fn refusals(&mut self) -> Result<(), String> {
        while let Some(Sent { expect: Expect::Here, .. }) = self.sent.front() {
            self.sent.pop_front();
            self.reply_here(b"E").await?;
        }
        Ok(())
    }

    async fn forward(&mut self, line: &[u8], expect: Expect) -> Result<(), String> {
        self.quit |= line.trim_ascii() == b"QUIT";
        // Sent now or, if the link drops, again after the reconnection.
        self.unsent = None;
        self.sent.push_back(Sent { line: line.to_vec(), expect });
        let mut bytes = line.to_vec();
        bytes.push(b'\n');
        self.link.send(&bytes).await.map_err(|e| format!("the server: {e}"))
    }

    /// A request line from the gridmanager.
    async fn up(&mut self, frame: Frame, files: bool) -> Result<(), String> {
        let Frame::Line(line) = frame else {
            return self.refuse().await;
        };
        let word = line.split(|&b| b == b' ').next().unwrap_or_default();
        if files && files::COMMANDS.iter().any(|c| c.as_bytes() == word) {
            // Those words are the file protocol's on this connection.
            return self.refuse().await;
        }
        let req = gahp::request::parse(&line).ok();
        let reqid = req.as_ref().and_then(reqid_of);
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
            Some(Request::Async { reqid, command: AsyncCommand::Submit(mut s) }) => self
                .send_inputs(s.jobs.iter_mut().flat_map(|job| job.inputs.iter_mut()))
                .await
                .map(|()| (gahp::request::format(&Request::Async { reqid, command: AsyncCommand::Submit(s) }), None)),
            Some(Request::Async { reqid, command: AsyncCommand::FetchOutput(f) }) => {
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
            Some(Request::Blah { reqid, command: BlahCommand::JobSubmit { ad } }) => self
                .blah_inputs(ad)
                .await
                .map(|ad| (gahp::request::format(&Request::Blah { reqid, command: BlahCommand::JobSubmit { ad } }), None)),
            Some(Request::Blah { reqid: _, command: BlahCommand::JobStatus { job_id } }) => {
                Ok((line, Some(Pending::BlahStatus { job_id })))
            }
            Some(Request::Sequence { reqid, command: SequenceCommand::Create(mut c) }) => self
                .send_inputs(c.state_files.iter_mut().chain(c.inputs.iter_mut()))
                .await
                .map(|()| (gahp::request::format(&Request::Sequence { reqid, command: SequenceCommand::Create(c) }), None)),
            Some(Request::Sequence { reqid, command: SequenceCommand::Fetch(f) }) => {
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
        Ok((gahp::request::format(&Request::Async { reqid, command: AsyncCommand::FetchOutput(f) }), pending))
    }

    /// A sequence's fetch goes into a directory of its own in the area
    /// (one per request, so two fetches of a sequence don't share one);
    /// its result brings the files it names into the directory asked for.
    async fn sequence_fetch_into_area(&mut self, reqid: ReqId, mut f: FetchSequence) -> Result<(Vec<u8>, Pending), String> {
        let remote = sequence_outputs(&f.name, reqid.0);
        self.link.command(&["FRESH", remote.as_str()]).await?.map_err(|why| format!("can't prepare {remote}: {why}"))?;
        let pending = Pending::SequenceFetch { remote: remote.clone(), dir: absolute(&f.dir) };
        f.dir = PathBuf::from(remote);
        Ok((gahp::request::format(&Request::Sequence { reqid, command: SequenceCommand::Fetch(f) }), pending))
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

    /// A line from the server.
    async fn down(&mut self, line: Vec<u8>) -> Result<(), String> {
        if let Some((left, lines)) = &mut self.block {
            lines.push(line);
            *left -= 1;
            if *left == 0 {
                let (_, lines) = self.block.take().unwrap_or_default();
                return self.results(lines).await;
            }
            return Ok(());
        }
        let body = self.body(&line).to_vec();
        if body == b"R" {
            return self.emit(&line).await;
        }
        // A RESULTS stays sent until its whole block is handed on.
        if let Some(Sent { expect: Expect::Results, .. }) = self.sent.front() {
            let n = body.strip_prefix(b"S ").and_then(|n| std::str::from_utf8(n).ok()?.trim().parse::<usize>().ok()).unwrap_or(0);
            if n > 0 {
                self.block = Some((n, vec![line]));
                return Ok(());
            }
        }
        let Some(Sent { line: sent, expect }) = self.sent.pop_front() else {
            return self.emit(&line).await;
        };
        let ok = body == b"S";
        match expect {
            Expect::Prefix(p) if ok => self.prefix = p,
            Expect::Select if ok => self.select = Some(Rc::new(sent)),
            Expect::Async(on) if ok => self.async_mode = on,
            Expect::Reply(Some(reqid), pending) if ok => {
                if let Some(pending) = pending {
                    self.pending.insert(reqid, pending);
                }
                self.taken += 1;
                let select = self.select.clone();
                self.outstanding.insert(reqid, Outstanding { order: self.taken, line: sent, select });
            }
            _ => {}
        }
        self.emit(&line).await?;
        self.refusals().await
    }

    /// A line without the prefix and its terminator.
    fn body<'a>(&self, line: &'a [u8]) -> &'a [u8] {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.strip_prefix(self.prefix.as_slice()).unwrap_or(line)
    }

    /// A RESULTS block: files first, then the block as one write.
    async fn results(&mut self, mut lines: Vec<Vec<u8>>) -> Result<(), String> {
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
                gahp_actors::atomic_file::append_whole(&path, &text)
                    .map_err(|e| format!("can't open stderr output file {}: {e}", path.display()))?;
                self.appended.insert(reqid);
                continue;
            }
            let renamed = name.strip_prefix(".r").and_then(|i| i.parse::<usize>().ok()).and_then(|i| dsts.get(i));
            let dest = match renamed {
                Some(dst) => dir.join(dst),
                None if stays_below(Path::new(&name)) => {
                    let dest = dir.join(&name);
                    // Below the directory asked for: a zip's folders.
                    if name.contains('/') {
                        if let Some(parent) = dest.parent() {
                            std::fs::create_dir_all(parent).map_err(|e| format!("can't make {}: {e}", parent.display()))?;
                        }
                    }
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
            self.link.get_to(&format!("{remote}/{name}"), &dir.join(name.as_ref())).await?;
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
            } else if stays_below(Path::new(&name)) {
                Some(m.iwd.join(&name))
            } else {
                None
            };
            let Some(dest) = dest else { continue };
            let below_iwd = dest.strip_prefix(&m.iwd).is_ok_and(stays_below);
            if !below_iwd && Some(&dest) != m.out.as_ref() && Some(&dest) != m.err.as_ref() {
                return Err(format!("{} is not below the job's Iwd {}: not written", dest.display(), m.iwd.display()));
            }
            if below_iwd {
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("can't make {}: {e}", parent.display()))?;
                }
            }
            self.link.get_to(&format!("{remote}/{name}"), &dest).await?;
        }
        Ok(())
    }
}

/// A list attribute's entries, trimmed.
fn list(ad: &ClassAd, name: &str, sep: char) -> Vec<String> {
    ad.get_str(name).unwrap_or("").split(sep).map(str::trim).filter(|e| !e.is_empty()).map(String::from).collect()
}

/// A BLAH status result (`<reqid> <code> <error> <status> <ad>`) of a
/// completed job.
fn completed(args: &[Vec<u8>]) -> bool {
    args.get(1).is_some_and(|c| c == b"0") && args.get(3).is_some_and(|s| s == job_status::COMPLETED.to_string().as_bytes())
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

/// `rel` is relative and stays below where it starts.
fn stays_below(rel: &Path) -> bool {
    !rel.as_os_str().is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}
