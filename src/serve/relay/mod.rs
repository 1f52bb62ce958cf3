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
//!
//! Here: the relay's state and its loop, lines each way, and replies
//! handed on in order. `link.rs` is the server's side (its lines and the
//! file commands), `up.rs` the requests that send files, `bring.rs` the
//! results that bring them, `resume.rs` the session resumed after a
//! reconnection.

mod bring;
mod link;
mod resume;
mod up;

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::path::PathBuf;
use std::rc::Rc;

use bytes::BytesMut;
use futures_util::StreamExt;
use gahp_protocol::gahp::{Frame, LineFramer};
use gahp_session::session::{GahpDecoder, MAX_LINE};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::FramedRead;

use super::dial::{Dialer, Stream};
use link::Link;

/// In a BLAH job's directory: where it says its files go locally.
const MANIFEST: &str = ".manifest";
/// A BLAH job's `Out` and `Err`, and remapped outputs, in its directory.
const STDOUT: &str = ".std/out";
const STDERR: &str = ".std/err";
const REMAPS: &str = ".remap";
/// A BOINC_FETCH_OUTPUT's stderr text, in its directory; `.stderr.<n>`
/// when it was sent again after the `n`th reconnection.
const FETCH_STDERR: &str = ".stderr";

/// Where a BLAH job's files go on the first tier, as its submit said.
#[derive(serde::Serialize, serde::Deserialize)]
struct Manifest {
    iwd: PathBuf,
    out: Option<PathBuf>,
    err: Option<PathBuf>,
    remaps: Vec<PathBuf>,
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
    let mut stdin = FramedRead::new(crate::stdin::stdin(), GahpDecoder(LineFramer::new(MAX_LINE)));
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
}
