//! Session: owns stdin and stdout. Reads request lines, answers each with its
//! return line at once, hands asynchronous commands to `Projects`, and is the
//! only writer of stdout (every line gets the response prefix in force when
//! it is written).

use std::io::{self, Write};
use std::sync::Arc;

use actix::prelude::*;
use bytes::BytesMut;
use gahp_protocol::gahp::{self, Frame, LineFramer, ReqId, Request, ReturnLine};
use tokio::io::AsyncRead;
use tokio_util::codec::{Decoder, FramedRead};

use crate::blah::jobs::{BlahDispatch, BlahJobs};
use crate::blah::store::{BlahStore, Gathering};
use crate::broker::pools::{PoolDispatch, Pools};
use crate::broker::sequences::PoolDispatchSequence;
use crate::config::DaemonConfig;
use crate::file_stager::FileStager;
use crate::project::ProjectKey;
use crate::projects::{Dispatch, DispatchSequence, Projects, SetPools};
use crate::result_queue::{Accept, Drain, Notify, ResultQueue, SetAsync, SetSession};
use crate::sequences::relocator::PoolLink;
use crate::state_db::StateDb;

/// Request lines longer than this are refused with `E` without being kept
/// in memory (a 100,000-job BOINC_SUBMIT is about 15 MB).
pub const MAX_LINE: usize = 256 << 20;

/// `BOINC_SELECT_PROJECT pool:<path> -` selects the pool in that file.
pub const POOL_PREFIX: &str = "pool:";

pub struct Session {
    out: Box<dyn Write>,
    prefix: Vec<u8>,
    current: Option<ProjectKey>,
    /// A pool selected with `BOINC_SELECT_PROJECT pool:<path> -`.
    pool: Option<std::path::PathBuf>,
    pools: Addr<Pools>,
    queue: Addr<ResultQueue>,
    projects: Addr<Projects>,
    blah: Addr<BlahJobs>,
}

impl Actor for Session {
    type Context = Context<Self>;
}

impl Session {
    /// Writes whole lines, each with the prefix (a line is its parts in
    /// turn: shared bodies are written from where they are, not copied
    /// into one buffer); nothing else writes in between, this actor being
    /// the only writer. A client that went away ends the daemon like EOF.
    fn write_lines<'a>(&mut self, lines: impl IntoIterator<Item = [&'a [u8]; 2]>) {
        let write = || -> io::Result<()> {
            for [head, tail] in lines {
                self.out.write_all(&self.prefix)?;
                self.out.write_all(head)?;
                self.out.write_all(tail)?;
                self.out.write_all(b"\n")?;
            }
            self.out.flush()
        };
        if let Err(e) = write() {
            tracing::info!("stdout closed ({e}); exiting");
            exit_now();
        }
    }

    fn reply(&mut self, line: ReturnLine) {
        let bytes = line.encode();
        self.write_lines([[bytes.as_slice(), &[]]]);
    }

    fn handle_request(&mut self, req: Request, ctx: &mut Context<Self>) {
        match req {
            Request::Commands => self.reply(ReturnLine::Commands),
            Request::Version => self.reply(ReturnLine::Version),
            Request::Quit => {
                self.reply(ReturnLine::Success);
                exit_now();
            }
            Request::Results => {
                // Nothing else is read or written until the block is out, so
                // an `R` can never land inside it.
                ctx.wait(self.queue.send(Drain).into_actor(self).map(|lines, act, _| {
                    let lines = lines.unwrap_or_default();
                    let header = ReturnLine::ResultsHeader(lines.len()).encode();
                    let lines = lines.iter().map(|l| [l.head.as_slice(), &l.tail[..]]);
                    act.write_lines(std::iter::once([header.as_slice(), &[][..]]).chain(lines));
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
            Request::SelectProject { url, authenticator } => {
                match url.strip_prefix(POOL_PREFIX) {
                    Some(path) => {
                        self.current = None;
                        self.pool = Some(path.into());
                    }
                    None => {
                        self.pool = None;
                        self.current = Some(ProjectKey::new(&url, authenticator));
                    }
                }
                self.reply(ReturnLine::Success);
            }
            Request::Async { reqid, command } => {
                // Bind the command to the project selected now (invariant 4).
                if let Some(pool) = self.pool.clone() {
                    self.accept(reqid, ctx, move |act| act.pools.do_send(PoolDispatch { reqid, pool, command }));
                    return;
                }
                let project = self.current.clone();
                self.accept(reqid, ctx, move |act| act.projects.do_send(Dispatch { reqid, project, command }));
            }
            Request::Blah { reqid, command } => self.accept(reqid, ctx, move |act| act.blah.do_send(BlahDispatch { reqid, command })),
            Request::Sequence { reqid, command } => {
                if let Some(pool) = self.pool.clone() {
                    self.accept(reqid, ctx, move |act| act.pools.do_send(PoolDispatchSequence { reqid, pool, command }));
                    return;
                }
                let project = self.current.clone();
                self.accept(reqid, ctx, move |act| act.projects.do_send(DispatchSequence { reqid, project, command }));
            }
        }
    }

    /// Registers the request id: `S` and `dispatch` if it is new, else `E`.
    fn accept(&mut self, reqid: ReqId, ctx: &mut Context<Self>, dispatch: impl FnOnce(&mut Self) + 'static) {
        ctx.wait(self.queue.send(Accept(reqid)).into_actor(self).map(move |accepted, act, _| {
            if accepted.unwrap_or(false) {
                act.reply(ReturnLine::Success);
                dispatch(act);
            } else {
                tracing::warn!(reqid = reqid.0, "request id already pending");
                act.reply(ReturnLine::Error);
            }
        }));
    }
}

impl StreamHandler<io::Result<Frame>> for Session {
    fn handle(&mut self, item: io::Result<Frame>, ctx: &mut Context<Self>) {
        match item {
            Ok(Frame::Line(line)) => match gahp::request::parse(&line) {
                Ok(req) => self.handle_request(req, ctx),
                Err(e) => {
                    tracing::warn!("refused request line: {e}");
                    self.reply(ReturnLine::Error);
                }
            },
            Ok(Frame::TooLong) => {
                tracing::warn!("refused a request line longer than {MAX_LINE} bytes");
                self.reply(ReturnLine::Error);
            }
            Err(e) => {
                tracing::info!("stdin failed ({e}); exiting");
                exit_now();
            }
        }
    }

    fn finished(&mut self, _: &mut Context<Self>) {
        // EOF on stdin: like QUIT, without a reply; in-flight work is abandoned.
        tracing::info!("stdin closed; exiting");
        exit_now();
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

/// Frames stdin into logical lines with the protocol crate's framer.
struct GahpDecoder(LineFramer);

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
    pub projects: Addr<Projects>,
}

/// Starts the actor system's daemon side; call inside a running actix System.
/// Writes the banner first, as the gridmanager expects before anything else.
pub fn start_daemon(
    config: DaemonConfig,
    input: impl AsyncRead + Unpin + 'static,
    mut output: Box<dyn Write>,
    initial_project: Option<ProjectKey>,
) -> io::Result<DaemonHandles> {
    let config = Arc::new(config);
    output.write_all(gahp::BANNER.as_bytes())?;
    output.write_all(b"\n")?;
    output.flush()?;

    let db = StateDb::open(&config.state_dir, crate::SCHEMA)?;
    match crate::sequences::store::sweep_leftovers(&config.state_dir) {
        Ok(0) => {}
        Ok(n) => tracing::info!(files = n, "removed temporary files a killed daemon left in the sequence content store"),
        Err(e) => tracing::warn!("can't sweep the sequence content store: {e}"),
    }
    let stager = FileStager::new(db.clone(), config.hash_threads).start();
    let queue = ResultQueue::default().start();
    let projects = Projects::new(config.clone(), queue.clone(), stager.clone(), db.clone()).start();
    let pools = Pools::new(config.clone(), queue.clone(), projects.clone(), stager.clone(), db.clone()).start();
    projects.do_send(SetPools(PoolLink::to(pools.clone())));
    let gathering = Gathering::new(config.blah.batch_window, config.blah.batch_max_jobs);
    let blah =
        BlahJobs::new(config.clone(), queue.clone(), projects.clone(), stager, BlahStore::new(db, gathering)?, pools.clone()).start();
    let session = Session::create(|ctx| {
        ctx.add_stream(FramedRead::new(input, GahpDecoder(LineFramer::new(MAX_LINE))));
        Session {
            out: output,
            prefix: Vec::new(),
            current: initial_project,
            pool: None,
            pools,
            queue: queue.clone(),
            projects: projects.clone(),
            blah,
        }
    });
    queue.do_send(SetSession(session.clone().recipient()));
    Ok(DaemonHandles { session, queue, projects })
}
