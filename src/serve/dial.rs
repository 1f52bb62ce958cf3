//! Dialling a `boinc_gahp serve`: TCP, TLS (or plain on loopback), and
//! `AUTH` with the token and this process's session id; and dialling again
//! after a dropped link, backing off. `connect` dials first, `relay`
//! again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use gahp_protocol::gahp::escape::split_args;
use rand::{Rng, RngCore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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
pub enum DialError {
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
    /// To `addr` (`host:port`) with the token in `token_file`; TLS trusting
    /// `ca` (else the web's roots) unless `insecure_loopback`.
    pub fn new(
        addr: &str,
        token_file: &Path,
        ca: Option<&Path>,
        insecure_loopback: bool,
        reconnect_for: Duration,
    ) -> Result<Dialer, String> {
        let text = std::fs::read_to_string(token_file).map_err(|e| format!("can't read {}: {e}", token_file.display()))?;
        let token = text.split_whitespace().next().ok_or_else(|| format!("{} is empty", token_file.display()))?;
        // 128 random bits: this process's requests, whichever connection
        // carries them.
        let mut id = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut id);
        let session = super::files::hex(&id);
        let tls = if insecure_loopback {
            None
        } else {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
            Some((tokio_rustls::TlsConnector::from(Arc::new(client_config(ca)?)), name))
        };
        Ok(Dialer { addr: addr.to_string(), auth: format!("AUTH {token} {session}\r\n"), tls, reconnect_for })
    }

    /// One connection, authenticated: the stream and what the server sent
    /// after its `S`.
    pub async fn dial(&self) -> Result<(Stream, BytesMut), DialError> {
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

fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
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
