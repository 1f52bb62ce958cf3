//! `boinc_gahp connect`: stdin/stdout to a `boinc_gahp serve` over TLS.
//! It proves the token, then relays GAHP both ways, so the gridmanager
//! speaks to the remote second tier as to a local daemon; the files its
//! requests name travel over the same connection (`relay`, docs/serve.md).
//! When the link drops it dials again, for `--reconnect-for`, presenting
//! the same session id, so the gridmanager sees nothing of it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use gahp_protocol::gahp::escape::split_args;
use rand::{Rng, RngCore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The server, `host:port`.
    pub addr: String,
    /// A file whose first word is this client's token.
    #[arg(long)]
    pub token_file: PathBuf,
    /// Trust roots for the server's certificate (PEM; default: the web's).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Plain TCP instead of TLS, to a serve on a loopback address.
    #[arg(long)]
    pub insecure_loopback: bool,
    /// Send no files: paths in requests name files in this client's area
    /// on the serving host (put there by other means).
    #[arg(long)]
    pub remote_paths: bool,
    /// When the link to the server drops, dial again for up to this many
    /// seconds (backing off from 0.2 s to 30 s) and carry on; 0: end, as
    /// the link did.
    #[arg(long, default_value_t = 3600, value_name = "SECS")]
    pub reconnect_for: u64,
}

/// A connection to the server, TLS or plain.
pub trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}
pub type Stream = Box<dyn Io>;

/// The first wait before dialling again, and the longest.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const LAST_BACKOFF: Duration = Duration::from_secs(30);
/// One attempt (TCP, TLS, AUTH's answer) gives up after this.
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a dial failed: the server's refusal is final, the rest is tried again.
enum DialError {
    Refused(String),
    Failed(String),
}

/// Opens authenticated connections to the server, the first and those
/// after a dropped link, all with one session id.
pub struct Dialer {
    addr: String,
    /// `AUTH <token> <session id>`: the token never leaves this line.
    auth: String,
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
    pub reconnect_for: Duration,
}

impl Dialer {
    fn new(args: &ConnectArgs) -> Result<Dialer, String> {
        let text = std::fs::read_to_string(&args.token_file).map_err(|e| format!("can't read {}: {e}", args.token_file.display()))?;
        let token = text.split_whitespace().next().ok_or_else(|| format!("{} is empty", args.token_file.display()))?;
        // 128 random bits: this process's requests, whichever connection
        // carries them.
        let mut id = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut id);
        let session = super::files::hex(&id);
        let tls = if args.insecure_loopback {
            None
        } else {
            let host = args.addr.rsplit_once(':').map_or(args.addr.as_str(), |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
            Some((tokio_rustls::TlsConnector::from(Arc::new(client_config(args)?)), name))
        };
        Ok(Dialer {
            addr: args.addr.clone(),
            auth: format!("AUTH {token} {session}\r\n"),
            tls,
            reconnect_for: Duration::from_secs(args.reconnect_for),
        })
    }

    /// One connection, authenticated: the stream and what the server sent
    /// after its `S`.
    async fn dial(&self) -> Result<(Stream, BytesMut), DialError> {
        let failed = DialError::Failed;
        let tcp = tokio::net::TcpStream::connect(&self.addr).await.map_err(|e| failed(format!("can't connect to {}: {e}", self.addr)))?;
        let _ = tcp.set_nodelay(true);
        let stream: Stream = match &self.tls {
            None => {
                let peer = tcp.peer_addr().map_err(|e| failed(e.to_string()))?;
                if !peer.ip().is_loopback() {
                    return Err(DialError::Refused(format!("--insecure-loopback: {peer} is not a loopback address")));
                }
                Box::new(tcp)
            }
            Some((connector, name)) => {
                Box::new(connector.connect(name.clone(), tcp).await.map_err(|e| failed(format!("TLS with {}: {e}", self.addr)))?)
            }
        };
        authenticate(stream, &self.auth).await
    }

    /// Dials until it gets through, backing off (jittered, doubling from
    /// [`FIRST_BACKOFF`] to [`LAST_BACKOFF`]) for at most `reconnect_for`;
    /// a refusal (a revoked token) ends it at once.
    pub async fn redial(&self) -> Result<(Stream, BytesMut), String> {
        let deadline = tokio::time::Instant::now() + self.reconnect_for;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(backoff.mul_f64(rand::thread_rng().gen_range(0.5..=1.0)).min(left)).await;
            let why = match tokio::time::timeout(DIAL_TIMEOUT.min(left.max(FIRST_BACKOFF)), self.dial()).await {
                Ok(Ok(connected)) => {
                    eprintln!("boinc_gahp connect: reconnected to {}", self.addr);
                    return Ok(connected);
                }
                Ok(Err(DialError::Refused(why))) => return Err(why),
                Ok(Err(DialError::Failed(why))) => why,
                Err(_) => format!("no answer from {} in time", self.addr),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("gave up reconnecting after {} s: {why}", self.reconnect_for.as_secs()));
            }
            backoff = (backoff * 2).min(LAST_BACKOFF);
        }
    }
}

pub fn run(args: &ConnectArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("boinc_gahp connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    let done = rt.block_on(connect(args));
    // stdin's reader thread may be blocked in a read: don't wait for it.
    rt.shutdown_background();
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("boinc_gahp connect: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(args: &ConnectArgs) -> Result<(), String> {
    let dialer = Dialer::new(args)?;
    let (stream, already) = dialer.dial().await.map_err(|(DialError::Refused(e) | DialError::Failed(e))| e)?;
    super::relay::relay(&dialer, stream, already, !args.remote_paths).await
}

fn client_config(args: &ConnectArgs) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &args.ca {
        Some(ca) => {
            let pem = std::fs::read(ca).map_err(|e| format!("can't read {}: {e}", ca.display()))?;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                roots.add(cert.map_err(|e| format!("{}: {e}", ca.display()))?).map_err(|e| format!("{}: {e}", ca.display()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// `AUTH`, and its answer: the stream and what came after the `S`.
async fn authenticate(mut stream: Stream, auth: &str) -> Result<(Stream, BytesMut), DialError> {
    // A server over its connection limit closes at once: say so, however
    // the close shows (EOF or a reset).
    let closed = |e: std::io::Error| DialError::Failed(format!("the server closed the connection before answering AUTH ({e})"));
    stream.write_all(auth.as_bytes()).await.map_err(closed)?;
    let mut buf = BytesMut::with_capacity(4096);
    let line = loop {
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            break buf.split_to(end + 1);
        }
        if buf.len() > 1024 || stream.read_buf(&mut buf).await.map_err(closed)? == 0 {
            return Err(DialError::Failed("the server closed the connection before answering AUTH".into()));
        }
    };
    let line = String::from_utf8_lossy(&line).trim_end().to_string();
    if line != "S" {
        let args = split_args(line.as_bytes());
        let why = match args.as_slice() {
            [word, why] if word == b"E" => String::from_utf8_lossy(why).into_owned(),
            _ => line.clone(),
        };
        // A refused token is final; a busy or failing server is not.
        let busy = why == "authentication timed out" || why == "server error";
        let why = format!("the server refused: {why}");
        return Err(if busy { DialError::Failed(why) } else { DialError::Refused(why) });
    }
    Ok((stream, buf))
}
