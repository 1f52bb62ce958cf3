//! Session: owns stdin and stdout. Reads request lines, answers each with its
//! return line at once, hands every command to the one dispatch, and is the
//! only writer of stdout (every line gets the response prefix in force when
//! it is written).

use std::io::{self, Write};
use std::sync::Arc;

use actix::prelude::*;
use bytes::BytesMut;
use futures_util::Stream;
use gahp_protocol::gahp::{self, BlahCommand, Command, Frame, LineFramer, ReqId, Request, ReturnLine};
use tokio::io::AsyncRead;
use tokio::sync::Semaphore;
use tokio_util::codec::{Decoder, FramedRead};

use crate::dispatch::{Dispatch, Target};
use crate::runtime::Runtime;
use crate::tenancy::Tenancy;
use gahp_blah::placement::placed_by_pool;
use gahp_broker::pool::Pool;
use gahp_broker::registry::Registry;
use gahp_project::ProjectKey;
use gahp_services::config::DaemonConfig;
use gahp_services::result_queue::{Accept, Accepted, Drain, Notify, ResultQueue, SessionId, SetAsync, SetSession, Tail};

/// Request lines longer than this are refused with `E` without being kept
/// in memory (a 100,000-job BOINC_SUBMIT is about 15 MB).
pub const MAX_LINE: usize = 256 << 20;

/// `BOINC_SELECT_PROJECT pool:<path> -` selects the pool in that file.
pub const POOL_PREFIX: &str = "pool:";

pub struct Session {
    out: Box<dyn Write>,
    prefix: Vec<u8>,
    /// The project or pool selected (`BOINC_SELECT_PROJECT`).
    selected: Target,
    queue: Addr<ResultQueue>,
    /// Every command's one way down.
    dispatch: Dispatch,
    /// A place for each `BLAH_JOB_SUBMIT` and `BLAH_JOB_STATUS` until its
    /// result is queued (`[blah] max_commands_in_progress`): with none
    /// free, nothing more is read.
    blah_places: Arc<Semaphore>,
    /// Paced commands read with every place taken (at most one while the
    /// reading is paused), and the most there have been: a debug line at
    /// each new most, which tests read to see the reading pause.
    blah_read_unplaced: (usize, usize),
    /// The `[blah]` settings: which submits a pool places.
    blah_config: Arc<DaemonConfig>,
    /// A client of `boinc_gahp serve`: what it may do (None: stdio).
    tenancy: Option<Tenancy>,
    /// The id a reconnecting client presents on each of its connections:
    /// a request it sends again is not run twice.
    resumable: Option<SessionId>,
    /// Itself, to end itself where no context is at hand.
    me: Option<Addr<Session>>,
    /// Ended (a served client went away): nothing more is written.
    ended: bool,
}

impl Actor for Session {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        if let Some(t) = &self.tenancy {
            tracing::info!(client = %t.client, "session ended");
        }
    }
}

/// Ends a served session (its client went away, was replaced by a new
/// connection, or was revoked); the stdio daemon exits instead.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndSession;

impl Handler<EndSession> for Session {
    type Result = ();
    fn handle(&mut self, _: EndSession, ctx: &mut Context<Self>) {
        self.ended = true;
        self.me = None;
        ctx.stop();
    }
}

impl Session {
    /// Writes whole lines, each with the prefix (a line is its parts in
    /// turn: shared bodies are written from where they are, not copied
    /// into one buffer); nothing else writes in between, this actor being
    /// the only writer. A client that went away ends the daemon like EOF.
    /// A served client's lines name its batches and jobs as it does.
    fn write_lines<'a>(&mut self, lines: impl IntoIterator<Item = (&'a [u8], Option<&'a Tail>)>) {
        if self.ended {
            return;
        }
        let write = || -> io::Result<()> {
            for (head, tail) in lines {
                write_line(&mut self.out, &self.prefix, head, tail, self.tenancy.as_ref())?;
            }
            self.out.flush()
        };
        if let Err(e) = write() {
            self.end(&format!("output closed ({e})"));
        }
    }

    /// EOF, QUIT, a failed read or write: the stdio daemon exits; a served
    /// client's session ends, its runtime and results stay for its return.
    fn end(&mut self, why: &str) {
        if self.tenancy.is_none() {
            tracing::info!("{why}; exiting");
            exit_now();
        }
        if !self.ended {
            tracing::info!("{why}; ending the session");
            self.ended = true;
        }
        if let Some(me) = self.me.take() {
            me.do_send(EndSession);
        }
    }

    /// The request as this host runs it (see `Tenancy::rewrite`).
    fn for_client(&self, req: Request) -> Result<Request, crate::tenancy::Refusal> {
        match &self.tenancy {
            Some(t) => t.rewrite(req),
            None => Ok(req),
        }
    }

    /// BOINC_SELECT_PROJECT of a served client: one of its projects, with
    /// the authenticator its token was given (whatever it sent), or a pool
    /// file in its area whose projects are all its own.
    fn select_for_client(&self, url: &str) -> Result<Target, String> {
        let Some(t) = &self.tenancy else { return Err("no tenancy".into()) };
        if let Some(path) = url.strip_prefix(POOL_PREFIX) {
            let path = t.path(std::path::Path::new(path)).map_err(|e| e.to_string())?;
            // Checked now, so that a pool naming a project of someone
            // else's is refused at once; its runtime checks it again when
            // it loads it.
            Pool::load_granted(&path, &t.projects).map_err(|e| e.to_string())?;
            return Ok(Target::Pool(path));
        }
        let file = t.authenticator_file(url).map_err(|e| e.to_string())?;
        // The client learns nothing of the serving host's files: the
        // details are for its admin, in the log.
        let key = gahp_services::config::read_authenticator_file(file).map_err(|e| {
            tracing::warn!(url, "a client's project has no usable authenticator: {e}");
            format!("the authenticator of {url} can't be read on the serving host; ask its admin")
        })?;
        Ok(Target::Project(ProjectKey::new(url, key)))
    }

    fn reply(&mut self, line: ReturnLine) {
        let bytes = line.encode();
        self.write_lines([(bytes.as_slice(), None)]);
    }

    fn handle_request(&mut self, req: Request, ctx: &mut Context<Self>) {
        match req {
            Request::Commands => self.reply(ReturnLine::Commands),
            Request::Version => self.reply(ReturnLine::Version),
            Request::Quit => {
                self.reply(ReturnLine::Success);
                self.end("QUIT");
            }
            Request::Results => {
                // Nothing else is read or written until the block is out, so
                // an `R` can never land inside it.
                ctx.wait(self.queue.send(Drain).into_actor(self).map(|lines, act, _| {
                    let lines = lines.unwrap_or_default();
                    let header = ReturnLine::ResultsHeader(lines.len()).encode();
                    act.write_lines(std::iter::once((header.as_slice(), None)).chain(lines.iter()));
                }));
            }
            Request::AsyncModeOn | Request::AsyncModeOff => {
                self.reply(ReturnLine::Success);
                self.queue.do_send(SetAsync(matches!(req, Request::AsyncModeOn)));
            }
            Request::ResponsePrefix(prefix) => {
                // Its own return line still carries the old prefix.
                self.reply(ReturnLine::Success);
                self.prefix = prefix;
            }
            Request::SelectProject { url, .. } if self.tenancy.is_some() => match self.select_for_client(&url) {
                Ok(selected) => {
                    self.selected = selected;
                    self.reply(ReturnLine::Success);
                }
                Err(e) => {
                    tracing::warn!("refused BOINC_SELECT_PROJECT: {e}");
                    self.reply(ReturnLine::Error);
                }
            },
            Request::SelectProject { url, authenticator } => {
                self.selected = match url.strip_prefix(POOL_PREFIX) {
                    Some(path) => Target::Pool(path.into()),
                    None => Target::Project(ProjectKey::new(&url, authenticator)),
                };
                self.reply(ReturnLine::Success);
            }
            Request::Command { reqid, command } => {
                // Bound to what is selected now (invariant 4).
                let to = self.selected.clone();
                self.accept(reqid, ctx, move |act, ctx| act.dispatch(reqid, to, command, ctx));
            }
        }
    }

    /// Registers the request id: `S` and `dispatch` if it is new; `S` only
    /// if this session sent it before (again after a dropped link); else `E`.
    fn accept(&mut self, reqid: ReqId, ctx: &mut Context<Self>, dispatch: impl FnOnce(&mut Self, &mut Context<Self>) + 'static) {
        let accept = Accept { reqid, session: self.resumable.clone() };
        ctx.wait(self.queue.send(accept).into_actor(self).map(move |accepted, act, ctx| match accepted.unwrap_or(Accepted::Busy) {
            Accepted::New => {
                act.reply(ReturnLine::Success);
                dispatch(act, ctx);
            }
            Accepted::Again => {
                tracing::info!(reqid = reqid.0, "request sent again after a reconnection: already accepted, not run again");
                act.reply(ReturnLine::Success);
            }
            Accepted::Busy => {
                tracing::warn!(reqid = reqid.0, "request id already pending");
                act.reply(ReturnLine::Error);
            }
        }));
    }
}

impl Session {
    /// Hands an accepted command to the one dispatch. A `BLAH_*` submit
    /// or status takes a place among those in progress first. With every
    /// place taken, the session waits for one before it reads anything
    /// more: a flood of them is paced by the state database (each submit in
    /// progress holds its task, its ad's text and its queued write; each
    /// status its task), the rest waits in the gridmanager's pipe. Both
    /// wait for nothing but the database and the status cache (never for
    /// the project), so a place frees within milliseconds whatever else is
    /// going on, and what is behind them (RESULTS, pings, cancels) is read
    /// then. Every other command, and the submits a pool places (which may
    /// wait for the projects), takes no place.
    fn dispatch(&mut self, reqid: ReqId, to: Target, command: Command, ctx: &mut Context<Self>) {
        let paced = match &command {
            Command::Blah(BlahCommand::JobSubmit { ad }) => !placed_by_pool(ad, &self.blah_config.blah),
            Command::Blah(BlahCommand::JobStatus { .. }) => true,
            _ => false,
        };
        if !paced {
            self.dispatch.send(reqid, to, command, None);
            return;
        }
        if let Ok(place) = self.blah_places.clone().try_acquire_owned() {
            self.dispatch.send(reqid, to, command, Some(place));
            return;
        }
        let places_max = self.blah_config.blah.max_commands_in_progress;
        tracing::debug!(places = places_max, "reading paused: every place of a BLAH_JOB_SUBMIT or BLAH_JOB_STATUS is taken");
        let (now, most) = self.blah_read_unplaced;
        if now + 1 > most {
            tracing::debug!(read = now + 1, "BLAH commands read with every place taken: the most yet");
        }
        self.blah_read_unplaced = (now + 1, most.max(now + 1));
        let places = self.blah_places.clone();
        // The semaphore is never closed: `None` only if that changes.
        ctx.wait(async move { places.acquire_owned().await.ok() }.into_actor(self).map(move |place, act, _| {
            act.blah_read_unplaced.0 -= 1;
            act.dispatch.send(reqid, to, command, place);
        }));
    }
}

/// One line: prefix, head, tail, newline. A status answer's tail is
/// rendered a chunk at a time ([`gahp_services::result_queue::TAIL_CHUNK`]), each written and flushed
/// as it is produced, so its line is never whole in memory. A served
/// client's head and tail are each unnamed as a whole would be (its
/// unnamer's pieces add up to that, a prefix cut across two chunks
/// included).
fn write_line(out: &mut dyn Write, prefix: &[u8], head: &[u8], tail: Option<&Tail>, tenancy: Option<&Tenancy>) -> io::Result<()> {
    out.write_all(prefix)?;
    match tenancy {
        None => out.write_all(head)?,
        Some(t) => out.write_all(&t.unname(head))?,
    }
    if let Some(tail) = tail {
        let streamed = matches!(tail, Tail::Answer(_));
        let mut unnamer = tenancy.map(Tenancy::unnamer);
        let mut unnamed = Vec::new();
        let mut chunks = tail.chunks();
        while let Some(chunk) = chunks.next_chunk() {
            match &mut unnamer {
                None => out.write_all(chunk)?,
                Some(u) => {
                    unnamed.clear();
                    u.feed(chunk, &mut unnamed);
                    out.write_all(&unnamed)?;
                }
            }
            if streamed {
                out.flush()?;
            }
        }
        if let Some(u) = unnamer {
            unnamed.clear();
            u.finish(&mut unnamed);
            out.write_all(&unnamed)?;
        }
    }
    out.write_all(b"\n")
}

impl StreamHandler<io::Result<Frame>> for Session {
    fn handle(&mut self, item: io::Result<Frame>, ctx: &mut Context<Self>) {
        match item {
            Ok(Frame::Line(line)) => match gahp::request::parse(&line) {
                Ok(req) => match self.for_client(req) {
                    Ok(req) => self.handle_request(req, ctx),
                    Err(e) => {
                        tracing::warn!("refused request: {e}");
                        self.reply(ReturnLine::Error);
                    }
                },
                Err(e) => {
                    tracing::warn!("refused request line: {e}");
                    self.reply(ReturnLine::Error);
                }
            },
            Ok(Frame::TooLong) => {
                tracing::warn!("refused a request line longer than the limit");
                self.reply(ReturnLine::Error);
            }
            Err(e) => self.end(&format!("input failed ({e})")),
        }
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        // EOF: like QUIT, without a reply; the stdio daemon abandons
        // in-flight work, a served client's runtime goes on with it.
        self.end("input closed");
    }
}

impl Handler<Notify> for Session {
    type Result = ();
    fn handle(&mut self, _: Notify, _: &mut Context<Self>) {
        self.reply(ReturnLine::Notify);
    }
}

/// Ends the process at once. Waiting for in-flight HTTP requests or for the
/// runtime's blocked stdin reader would delay the exit the spec asks for.
fn exit_now() -> ! {
    let _ = io::stdout().flush();
    std::process::exit(0)
}

/// Frames input into logical lines with the protocol crate's framer.
pub struct GahpDecoder(pub LineFramer);

impl Decoder for GahpDecoder {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Frame>> {
        Ok(self.0.next_frame(src))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> io::Result<Option<Frame>> {
        Ok(self.0.finish(src))
    }
}

pub struct DaemonHandles {
    pub session: Addr<Session>,
    pub queue: Addr<ResultQueue>,
    pub projects: Addr<Registry>,
}

/// Starts the stdio daemon: a runtime and its session on `input`/`output`;
/// call inside a running actix System. EOF or QUIT ends the process.
pub fn start_daemon(
    config: DaemonConfig,
    input: impl AsyncRead + Unpin + 'static,
    output: Box<dyn Write>,
    initial_project: Option<ProjectKey>,
) -> io::Result<DaemonHandles> {
    let runtime = Runtime::start(config)?;
    let frames = FramedRead::new(input, GahpDecoder(LineFramer::new(MAX_LINE)));
    let session = Session::attach(&runtime, frames, output, initial_project, None, None)?;
    Ok(DaemonHandles { session, queue: runtime.queue, projects: runtime.projects })
}

impl Session {
    /// A session on `frames` and `output` for `runtime`, which then writes
    /// its notifications to it. The banner is written first, as the
    /// gridmanager expects before anything else. With a tenancy (`serve`),
    /// EOF, QUIT or a failed write end this session only; `resumable` is
    /// the id its client presents on each of its connections, if any.
    pub fn attach(
        runtime: &Runtime,
        frames: impl Stream<Item = io::Result<Frame>> + 'static,
        mut output: Box<dyn Write>,
        initial_project: Option<ProjectKey>,
        tenancy: Option<Tenancy>,
        resumable: Option<SessionId>,
    ) -> io::Result<Addr<Session>> {
        output.write_all(gahp::BANNER.as_bytes())?;
        output.write_all(b"\n")?;
        output.flush()?;
        let tenancy_some = tenancy.is_some();
        let session = Session::create(|ctx| {
            ctx.add_stream(frames);
            Session {
                out: output,
                prefix: Vec::new(),
                selected: initial_project.map_or(Target::Nothing, Target::Project),
                queue: runtime.queue.clone(),
                dispatch: Dispatch::new(runtime),
                blah_places: Arc::new(Semaphore::new(runtime.config.blah.max_commands_in_progress)),
                blah_read_unplaced: (0, 0),
                blah_config: runtime.config.clone(),
                tenancy,
                resumable,
                me: tenancy_some.then(|| ctx.address()),
                ended: false,
            }
        });
        runtime.queue.do_send(SetSession(session.clone().recipient()));
        Ok(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_protocol::gahp::{CommandResult, QueryAnswer};
    use gahp_services::result_queue::TAIL_CHUNK;

    /// Keeps what is written and the largest single write.
    #[derive(Default)]
    struct Recorder {
        bytes: Vec<u8>,
        largest: usize,
        flushes: usize,
    }

    impl Write for Recorder {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.largest = self.largest.max(b.len());
            self.bytes.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.flushes += 1;
            Ok(())
        }
    }

    /// 20,000 jobs named as a served client's are on the project, some
    /// needing escapes: a 0.5 MB line.
    fn groups(prefix: &str) -> Vec<Vec<(String, String)>> {
        (0..4).map(|b| (0..5000).map(|k| (format!("{prefix}b{b} job\\{k}"), "IN_PROGRESS".to_string())).collect()).collect()
    }

    #[test]
    fn a_status_answer_is_written_in_bounded_chunks_as_the_line_it_always_was() {
        let groups = groups("");
        let answer = Arc::new(QueryAnswer::from_groups(1795000000.25, &groups));
        let whole = CommandResult::Batches { server_time: 1795000000.25, groups }.encode(ReqId(42));
        assert!(whole.len() > 6 * TAIL_CHUNK, "{}", whole.len());
        let mut out = Recorder::default();
        write_line(&mut out, b"PFX ", b"42", Some(&Tail::Answer(answer)), None).unwrap();
        assert_eq!(out.bytes, [&b"PFX "[..], &whole, b"\n"].concat());
        assert!(out.largest <= TAIL_CHUNK + 100, "a write of {} bytes", out.largest);
        assert!(out.flushes > 6, "each chunk goes out as it is produced: {} flushes", out.flushes);
    }

    #[test]
    fn a_served_clients_status_answer_never_shows_its_prefix_or_area_whatever_the_chunks() {
        let t = Tenancy { client: "alice".into(), projects: vec![], files: "/srv/clients/alice/files".into() };
        let mut groups = groups("alice~");
        // The area in a name too (it can't come from a real reply: a name
        // is the client's own, prefixed).
        groups[1][7].0 = "/srv/clients/alice/files/x".into();
        let answer = Arc::new(QueryAnswer::from_groups(1.5, &groups));
        let whole = CommandResult::Batches { server_time: 1.5, groups }.encode(ReqId(9));
        let mut out = Recorder::default();
        write_line(&mut out, b"", b"9", Some(&Tail::Answer(answer)), Some(&t)).unwrap();
        let mut expected = t.unname(&whole);
        expected.push(b'\n');
        assert_eq!(out.bytes, expected);
        let text = String::from_utf8(out.bytes).unwrap();
        assert!(!text.contains("alice~") && !text.contains("/srv/"));
        assert_eq!(text.matches(" b1\\ job").count(), 4999);
        assert!(out.largest <= TAIL_CHUNK + 100, "a write of {} bytes", out.largest);
    }
}
