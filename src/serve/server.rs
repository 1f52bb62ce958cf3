//! The listener of `boinc_gahp serve`: TLS (or plain TCP on loopback with
//! `--insecure-loopback`), the `AUTH` line, and per client a runtime kept
//! across its connections (docs/serve.md).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::prelude::*;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use gahp_blah::job_records::Gathering;
use gahp_broker::pool::Pool;
use gahp_protocol::gahp::escape::join_args;
use gahp_protocol::gahp::{Frame, LineFramer};
use gahp_services::result_queue::SessionId;
use gahp_services::DaemonConfig;
use gahp_session::runtime::{OpenedState, Runtime};
use gahp_session::session::{EndSession, GahpDecoder, Session};
use gahp_session::tenancy::Tenancy;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

use super::files::{self, Incoming, Outgoing, ServeDecoder, Transfer};
use super::tokens::{Client, Token, TokensFile};

/// How a connection is guarded; every field has a `serve` flag.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub auth_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_line: usize,
    /// Request lines per second a client may send (a burst of one second's
    /// worth); beyond it its lines are read later, not refused.
    pub commands_per_sec: u32,
    /// Bytes written to a client and not yet taken by it; a client that
    /// lets more pile up is disconnected (its results stay queued).
    pub max_unread_bytes: usize,
}

/// The longest `AUTH` line read.
const MAX_AUTH_LINE: usize = 1024;

pub struct Server {
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub tokens: PathBuf,
    pub base: DaemonConfig,
    pub limits: Limits,
    /// What the file protocol keeps (inputs, outputs not fetched) is
    /// deleted after this.
    pub keep_files: Duration,
}

/// One client: its runtime (results, batches, jobs), started at its first
/// connection and kept while serve runs, and its current session.
struct Tenant {
    runtime: Runtime,
    tenancy: Tenancy,
    session: Option<Addr<Session>>,
    /// Its current connection, if its client reconnects by itself
    /// (`boinc_gahp connect`): its session id, and where a last line to it
    /// goes that tells it not to come back.
    /// (Weak: the connection's writer ends when its own senders are gone.)
    resumable: Option<(SessionId, mpsc::WeakUnboundedSender<Outgoing>)>,
}

/// The last line to a connection that must not reconnect by itself.
fn bye(to: &mpsc::WeakUnboundedSender<Outgoing>, why: &str) {
    let Some(to) = to.upgrade() else { return };
    let mut line = join_args(&["FILES", "BYE", why]);
    line.push(b'\n');
    let _ = to.send(Outgoing::Answer(Bytes::from(line)));
}

struct Shared {
    server: Server,
    tenants: RefCell<HashMap<String, Tenant>>,
    /// Clients whose state is being opened.
    opening: RefCell<HashSet<String>>,
    open: Cell<usize>,
    /// The tokens file as last read, and when it was written then.
    tokens: RefCell<(Option<SystemTime>, Rc<TokensFile>)>,
    /// The BOINC batches gathering BLAH jobs, one for every client: jobs
    /// of clients on one account share batches (`blah::shared_batch`).
    gathering: Gathering,
}

/// The `S`/`E` answer to the `AUTH` line, with the reason in words.
fn answer(ok: bool, why: &str) -> Vec<u8> {
    let word = if ok { "S" } else { "E" };
    let mut line = if why.is_empty() { word.as_bytes().to_vec() } else { join_args(&[word, why]) };
    line.extend_from_slice(b"\r\n");
    line
}

impl Shared {
    /// The tokens file, read again when it changed: a revoked token fails
    /// at its next connection.
    fn tokens(&self) -> Rc<TokensFile> {
        let mtime = self.tokens_mtime();
        if self.tokens.borrow().0 != mtime {
            self.read_tokens(mtime);
        }
        self.tokens.borrow().1.clone()
    }

    fn tokens_mtime(&self) -> Option<SystemTime> {
        std::fs::metadata(&self.server.tokens).and_then(|m| m.modified()).ok()
    }

    /// Reads the tokens file (as it was at `mtime`). One that can't be read
    /// or parsed leaves the tokens read before in force, and is said once
    /// (until the file changes again): a half-edited file locks no one out.
    /// The number of clients, if it was read.
    fn read_tokens(&self, mtime: Option<SystemTime>) -> Option<usize> {
        let mut cached = self.tokens.borrow_mut();
        match TokensFile::load(&self.server.tokens, false) {
            Ok(file) => {
                let clients = file.clients.len();
                *cached = (mtime, Rc::new(file));
                Some(clients)
            }
            Err(e) => {
                tracing::error!("the tokens read before stay in force: {e}");
                cached.0 = mtime;
                None
            }
        }
    }

    /// SIGHUP (`systemctl reload`): the tokens file read now, whatever its
    /// time says, and the sessions of clients no longer in it ended.
    /// systemd is told when the reload begins and ends.
    fn reload(&self, local: SocketAddr) {
        #[cfg(unix)]
        super::systemd::notify(&super::systemd::reloading());
        if let Some(clients) = self.read_tokens(self.tokens_mtime()) {
            tracing::info!(clients, "reloaded the tokens file");
        }
        self.end_revoked();
        self.ready(local);
    }

    /// Tells systemd that serve takes connections, if systemd runs it.
    fn ready(&self, local: SocketAddr) {
        #[cfg(unix)]
        super::systemd::notify(&format!("READY=1\nSTATUS=listening on {local}; {} clients", self.tokens().clients.len()));
        #[cfg(not(unix))]
        let _ = local;
    }

    /// The client's tenant, started at its first connection. Its state is
    /// opened on a blocking thread (the SQLite file, its migrations, its
    /// unread results): other clients go on meanwhile.
    async fn tenant(&self, client: &Client) -> io::Result<(Runtime, Tenancy)> {
        // Another connection of the client is opening it: use that one.
        while self.opening.borrow().contains(&client.name) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some(t) = self.tenants.borrow_mut().get_mut(&client.name) {
            // The admin may have changed its projects since.
            t.tenancy.projects = projects_of(client);
            return Ok((t.runtime.clone(), t.tenancy.clone()));
        }
        let dir = self.server.base.state_dir.join("clients").join(&client.name);
        let files = dir.join("files");
        let mut config = self.server.base.clone();
        config.state_dir = dir.clone();
        // Its BLAH jobs use its first project, never a file of its choosing.
        let first = client.projects.first();
        config.blah.project_url = first.map(|p| p.url.clone());
        config.blah.authenticator_file = first.map(|p| p.authenticator_file.clone());
        config.blah.allow_project_override = false;
        // A pool it selects may name only its projects, with their keys;
        // so may the BLAH front end's admin-configured pool (checked below).
        let grants = projects_of(client);
        config.pool_grants = Some(grants.clone());
        // Its BLAH jobs' BOINC names are its own, and it has no others.
        config.blah.name_prefix = format!("{}{}", client.name, gahp_session::tenancy::NAME_SEPARATOR);
        config.blah.known_jobs_only = true;
        self.opening.borrow_mut().insert(client.name.clone());
        let (area, name) = (files.clone(), client.name.clone());
        let opened = tokio::task::spawn_blocking(move || {
            config.blah.pool = blah_pool(config.blah.pool.take(), &grants, &name);
            std::fs::create_dir_all(&area)?;
            owner_only(&dir)?;
            OpenedState::open_served(config)
        })
        .await;
        self.opening.borrow_mut().remove(&client.name);
        let runtime = Runtime::gathering_with(opened.map_err(io::Error::other)??, self.gathering.clone())?;
        let tenancy = Tenancy { client: client.name.clone(), projects: projects_of(client), files };
        tracing::info!(client = %client.name, "started the client's runtime");
        self.tenants
            .borrow_mut()
            .insert(client.name.clone(), Tenant { runtime: runtime.clone(), tenancy: tenancy.clone(), session: None, resumable: None });
        Ok((runtime, tenancy))
    }

    /// Ends the sessions of clients no longer in the tokens file.
    fn end_revoked(&self) {
        let file = self.tokens();
        for (name, t) in self.tenants.borrow_mut().iter_mut() {
            if file.client(name).is_none() {
                if let Some(s) = t.session.take() {
                    tracing::info!(client = %name, "token revoked: ending its session");
                    if let Some((_, to)) = t.resumable.take() {
                        bye(&to, "token revoked");
                    }
                    s.do_send(EndSession);
                }
            }
        }
    }
}

/// The BLAH front end's pool for a client: serve's `blah.pool` when every
/// project in it is one of the client's (used with the client's
/// authenticators) and it has no rank functions; else none, and its BLAH
/// jobs go to its first project. Said once, when its runtime starts.
fn blah_pool(pool: Option<PathBuf>, grants: &[(String, PathBuf)], client: &str) -> Option<PathBuf> {
    let path = pool?;
    match Pool::load_granted(&path, grants) {
        Ok(_) => {
            tracing::info!(client, pool = %path.display(), "the client's BLAH jobs are placed by the pool");
            Some(path)
        }
        Err(e) => {
            tracing::info!(client, pool = %path.display(), "the client's BLAH jobs go to its first project, not the pool: {e}");
            None
        }
    }
}

fn projects_of(client: &Client) -> Vec<(String, PathBuf)> {
    client.projects.iter().map(|p| (p.url.clone(), p.authenticator_file.clone())).collect()
}

#[cfg(unix)]
fn owner_only(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn owner_only(_: &Path) -> io::Result<()> {
    Ok(())
}

/// Accepts connections until the process ends; call inside the actix System.
pub async fn run(server: Server, listener: TcpListener) {
    let gathering = Gathering::new(server.base.blah.batch_window, server.base.blah.batch_max_jobs);
    let shared = Rc::new(Shared {
        server,
        tenants: RefCell::default(),
        opening: RefCell::default(),
        open: Cell::new(0),
        tokens: RefCell::new((None, Rc::new(TokensFile::default()))),
        gathering,
    });
    let (clients, keep) = (shared.server.base.state_dir.join("clients"), shared.server.keep_files);
    actix_rt::spawn(async move {
        loop {
            // A sweep reads every client's directories: not on the serving thread.
            let dir = clients.clone();
            let gone = tokio::task::spawn_blocking(move || files::sweep(&dir, keep)).await.unwrap_or(0);
            if gone > 0 {
                tracing::info!(entries = gone, "deleted transferred files kept longer than the retention");
            }
            tokio::time::sleep((keep / 24).clamp(Duration::from_millis(200), Duration::from_secs(3600))).await;
        }
    });
    let watcher = shared.clone();
    actix_rt::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            watcher.end_revoked();
        }
    });
    let local = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    // Taken before READY=1: a SIGHUP's default would end serve.
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hangups) => {
            let reloader = shared.clone();
            actix_rt::spawn(async move {
                while hangups.recv().await.is_some() {
                    reloader.reload(local);
                }
            });
        }
        Err(e) => tracing::warn!("SIGHUP will not reload the tokens file: {e}"),
    }
    // The listener is bound and listening: connections are taken from now.
    shared.ready(local);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors, most likely: wait for some to return.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if shared.open.get() >= shared.server.limits.max_connections {
            tracing::warn!(%peer, "refused a connection: {} open", shared.open.get());
            drop(tcp);
            continue;
        }
        let _ = tcp.set_nodelay(true);
        shared.open.set(shared.open.get() + 1);
        let conn = shared.clone();
        // The handshake and the AUTH line share one deadline.
        let deadline = tokio::time::Instant::now() + shared.server.limits.auth_timeout;
        actix_rt::spawn(async move {
            match conn.server.tls.clone() {
                Some(acceptor) => match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => connection(&conn, tls, peer, deadline).await,
                    Ok(Err(e)) => tracing::info!(%peer, "refused a connection: TLS handshake failed: {e}"),
                    Err(_) => tracing::info!(%peer, "refused a connection: no TLS handshake in time"),
                },
                None => connection(&conn, tcp, peer, deadline).await,
            }
            conn.open.set(conn.open.get() - 1);
        });
    }
}

/// Reads the `AUTH <token> [<session id>]` line: at most
/// [`MAX_AUTH_LINE`] bytes. A client that reconnects by itself presents
/// the same session id on each of its connections.
async fn auth_line(stream: &mut (impl AsyncRead + Unpin), rest: &mut BytesMut) -> Result<(Token, Option<SessionId>), &'static str> {
    loop {
        if let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let line = rest.split_to(end + 1);
            let line = std::str::from_utf8(&line).map_err(|_| "the first line must be AUTH <token>")?;
            let line = line.trim_end_matches(['\r', '\n']);
            let words: Vec<&str> = line.split(' ').collect();
            return match words.as_slice() {
                ["AUTH", token] if !token.is_empty() => Ok((Token::new(*token), None)),
                ["AUTH", token, session] if !token.is_empty() && session_id_ok(session) => {
                    Ok((Token::new(*token), Some(SessionId::from(*session))))
                }
                _ => Err("the first line must be AUTH <token>"),
            };
        }
        if rest.len() > MAX_AUTH_LINE {
            return Err("the first line must be AUTH <token>");
        }
        match stream.read_buf(rest).await {
            Ok(0) | Err(_) => return Err(""),
            Ok(_) => {}
        }
    }
}

/// 1 to 64 letters, digits, `-` or `_`.
fn session_id_ok(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

async fn connection<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    shared: &Rc<Shared>,
    mut stream: S,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
) {
    let limits = shared.server.limits.clone();
    let mut rest = BytesMut::new();
    let (token, session_id) = match tokio::time::timeout_at(deadline, auth_line(&mut stream, &mut rest)).await {
        Ok(Ok(t)) => t,
        Ok(Err(why)) => {
            tracing::info!(%peer, "refused a connection: {}", if why.is_empty() { "closed before AUTH" } else { why });
            if !why.is_empty() {
                let _ = stream.write_all(&answer(false, why)).await;
                let _ = stream.shutdown().await;
            }
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "refused a connection: no AUTH line in time");
            let _ = stream.write_all(&answer(false, "authentication timed out")).await;
            let _ = stream.shutdown().await;
            return;
        }
    };
    let client = shared.tokens().authenticate(&token).cloned();
    let Some(client) = client else {
        // Wrong and revoked tokens get the same answer.
        tracing::info!(%peer, "refused a connection: unknown token");
        gahp_services::metrics::global().auth_failed();
        let _ = stream.write_all(&answer(false, "token refused")).await;
        let _ = stream.shutdown().await;
        return;
    };
    let (runtime, tenancy) = match shared.tenant(&client).await {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(client = %client.name, "can't start the client's runtime: {e}");
            let _ = stream.write_all(&answer(false, "server error")).await;
            return;
        }
    };
    if stream.write_all(&answer(true, "")).await.is_err() {
        return;
    }
    tracing::info!(client = %client.name, %peer, "client connected");
    let _counted = gahp_services::metrics::global().connected(&client.name);

    let (reader, mut writer) = tokio::io::split(stream);
    let unread = Arc::new(AtomicUsize::new(0));
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Outgoing>();
    let transfer = Transfer::new(tenancy.clone(), out_tx.clone());
    let (in_tx, mut in_rx) = mpsc::channel::<io::Result<Frame>>(16);
    let resumable = session_id.clone().map(|id| (id, out_tx.downgrade()));
    let output = Box::new(ChannelWriter { buf: Vec::new(), tx: out_tx, unread: unread.clone(), max: limits.max_unread_bytes });
    let frames = futures_util::stream::poll_fn(move |cx| in_rx.poll_recv(cx));
    let session = match Session::attach(&runtime, frames, output, None, Some(tenancy), session_id.clone()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(client = %client.name, "can't start a session: {e}");
            return;
        }
    };
    let (previous, was) = match shared.tenants.borrow_mut().get_mut(&client.name) {
        Some(t) => (t.session.replace(session), std::mem::replace(&mut t.resumable, resumable)),
        None => (None, None),
    };
    if let Some(old) = previous {
        tracing::info!(client = %client.name, "a new connection replaces the client's open one");
        // Another session's connection must not come back and replace
        // this one in turn; the same session's is this one.
        if let Some((id, to)) = was.filter(|(id, _)| Some(id) != session_id.as_ref()) {
            tracing::info!(client = %client.name, session = %id, "telling the replaced connection not to reconnect");
            bye(&to, "replaced by a newer connection of this client");
        }
        old.do_send(EndSession);
    }

    let writing = actix_rt::spawn(async move {
        while let Some(out) = out_rx.recv().await {
            let written = match out {
                Outgoing::Bytes(chunk) => {
                    let written = writer.write_all(&chunk).await;
                    unread.fetch_sub(chunk.len(), Ordering::Relaxed);
                    written
                }
                Outgoing::Answer(line) => writer.write_all(&line).await,
                Outgoing::File { header, file, size } => files::send_file(&mut writer, &header, file, size).await,
            };
            if written.is_err() {
                break;
            }
        }
        let _ = writer.shutdown().await;
    });
    let name = client.name.clone();
    read_requests(reader, rest, in_tx, transfer, &limits, &name).await;
    let _ = writing.await;
    tracing::info!(client = %name, %peer, "connection closed");
}

/// Frames the client's lines into the session: no faster than its command
/// rate, ending when it is idle too long, closes, or the session ends.
async fn read_requests(
    reader: impl AsyncRead + Unpin,
    already: BytesMut,
    to_session: mpsc::Sender<io::Result<Frame>>,
    mut transfer: Transfer,
    limits: &Limits,
    client: &str,
) {
    let mut framed = FramedRead::new(reader, ServeDecoder::new(GahpDecoder(LineFramer::new(limits.max_line))));
    framed.read_buffer_mut().extend_from_slice(&already);
    let rate = f64::from(limits.commands_per_sec.max(1));
    let mut budget = rate;
    let mut last = Instant::now();
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout(limits.idle_timeout, framed.next()) => n,
            _ = to_session.closed() => return,
        };
        let frame = match next {
            // A file's bytes are not request lines.
            Ok(Some(Ok(body @ (Incoming::Body(_) | Incoming::BodyEnd)))) => {
                transfer.handle(body).await;
                continue;
            }
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(_) => {
                tracing::info!(client, "idle for {:?}: closing its connection", limits.idle_timeout);
                return;
            }
        };
        let now = Instant::now();
        budget = (budget + now.duration_since(last).as_secs_f64() * rate).min(rate);
        last = now;
        if budget < 1.0 {
            tokio::time::sleep(Duration::from_secs_f64((1.0 - budget) / rate)).await;
            budget = 1.0;
            last = Instant::now();
        }
        budget -= 1.0;
        let frame = match frame {
            Ok(Incoming::Gahp(Frame::Line(line))) => Ok(Frame::Line(transfer.observe(line).await)),
            Ok(Incoming::Gahp(frame)) => Ok(frame),
            Ok(file) => {
                transfer.handle(file).await;
                continue;
            }
            Err(e) => Err(e),
        };
        if to_session.send(frame).await.is_err() {
            return;
        }
    }
}

/// The session's output: each flush is one chunk for the connection's
/// writer task. Fails (ending the session) when the client has left more
/// than the limit unread.
struct ChannelWriter {
    buf: Vec<u8>,
    tx: mpsc::UnboundedSender<Outgoing>,
    unread: Arc<AtomicUsize>,
    max: usize,
}

impl Write for ChannelWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        let pending = self.unread.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len();
        if pending > self.max {
            return Err(io::Error::other(format!("the client left {pending} bytes unread")));
        }
        self.tx.send(Outgoing::Bytes(chunk)).map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "connection closed"))
    }
}

/// The TLS acceptor of a certificate chain and key in PEM files.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("can't read {}: {e}", p.display()));
    let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", cert.display()));
    }
    let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| format!("{}: {e}", key.display()))?
        .ok_or_else(|| format!("{}: no private key in it", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
