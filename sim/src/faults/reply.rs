//! How a drawn fault shows to the client: before the handler runs (an
//! error page, a reset, a hang, a delay) or in its reply (torn, malformed,
//! lost, stalled or dripping); and the watch on the client's connection
//! that frees a held reply once the client has gone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::plan::{FaultKind, MAX_DURATION_MS};

/// How long a `stall_body` or `drip_body` holds its connection at most
/// when the client never goes away (one hour): the connection is freed
/// as soon as the client disconnects.
pub const MAX_HOLD: Duration = Duration::from_millis(MAX_DURATION_MS);
/// How often a stalled reply looks whether its client is still there.
const PEER_POLL: Duration = Duration::from_millis(100);

/// The client's end of a connection, as a held reply watches it: a
/// duplicate of the connection's socket, taken when it was accepted. A
/// stalled reply writes nothing, so only this tells it that its client
/// has gone (the server itself keeps a half-closed connection open while
/// a reply is under way, so that a request still runs to its end after
/// its client left, as a PHP script does).
#[derive(Clone, Debug)]
pub struct Peer(Arc<std::net::TcpStream>);

impl Peer {
    /// For `HttpServer::on_connect`: lets the held replies of this
    /// connection see their client leave (plain TCP only; over TLS a
    /// stalled reply holds on until [`MAX_HOLD`]).
    pub fn on_connect(conn: &dyn std::any::Any, ext: &mut actix_web::dev::Extensions) {
        use std::os::fd::AsFd;
        let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() else { return };
        match tcp.as_fd().try_clone_to_owned() {
            Ok(fd) => {
                let dup = std::net::TcpStream::from(fd);
                // Shares the socket's (already non-blocking) file status.
                if dup.set_nonblocking(true).is_ok() {
                    ext.insert(Peer(Arc::new(dup)));
                }
            }
            Err(e) => tracing::warn!("no watch on a client connection: {e}"),
        }
    }

    /// The watch of the connection `req` came on, if any.
    pub fn of(req: &actix_web::HttpRequest) -> Option<Peer> {
        req.conn_data::<Peer>().cloned()
    }

    /// Returns once the client has closed or reset its end.
    async fn gone(&self) {
        let mut probe = [0u8; 1];
        loop {
            actix_rt::time::sleep(PEER_POLL).await;
            match self.0.peek(&mut probe) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => {}
                Err(_) => return,
            }
        }
    }
}

/// The decision for one call. `Fault::default()` (or [`Fault::none`]) is
/// "no fault".
#[derive(Debug, Clone, Default)]
pub struct Fault {
    pub kind: Option<FaultKind>,
    pub delay: Option<Duration>,
    pub(super) hang: Duration,
    pub(super) drip: Duration,
    pub(super) cut: u64,
    /// The injector's count of held connections.
    pub(super) held: Option<Arc<AtomicU64>>,
    /// The client, for a stalled reply to see it leave.
    pub(super) peer: Option<Peer>,
}

const HTML_500: &str = "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n\
<html><head>\n\
<title>500 Internal Server Error</title>\n\
</head><body>\n\
<h1>Internal Server Error</h1>\n\
<p>The server encountered an internal error or\n\
misconfiguration and was unable to complete\n\
your request.</p>\n\
<p>Please contact the server administrator at \n \
webmaster@localhost to inform them of the time this error occurred,\n \
and the actions you performed just before this error.</p>\n\
<p>More information about this error may be available\n\
in the server error log.</p>\n\
<hr>\n\
<address>Apache/2.4 Server at 127.0.0.1</address>\n\
</body></html>\n";

const HTML_503: &str = "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n\
<html><head>\n\
<title>503 Service Unavailable</title>\n\
</head><body>\n\
<h1>Service Unavailable</h1>\n\
<p>The server is temporarily unable to service your\n\
request due to maintenance downtime or capacity\n\
problems. Please try again later.</p>\n\
<hr>\n\
<address>Apache/2.4 Server at 127.0.0.1</address>\n\
</body></html>\n";

const HTML_CONTENT_TYPE: &str = "text/html; charset=iso-8859-1";

const PHP_FATAL: &str = "<br />\n\
<b>Fatal error</b>:  Uncaught mysqli_sql_exception: Lost connection to MySQL server during query \
in /home/boincadm/projects/sim/html/inc/db_conn.inc:67\n\
Stack trace:\n\
#0 /home/boincadm/projects/sim/html/inc/db_conn.inc(67): mysqli-&gt;query()\n\
#1 {main}\n  \
thrown in <b>/home/boincadm/projects/sim/html/inc/db_conn.inc</b> on line <b>67</b><br />\n";

const PROXY_PAGE: &str = "<html>\r\n\
<head><title>502 Bad Gateway</title></head>\r\n\
<body>\r\n\
<center><h1>502 Bad Gateway</h1></center>\r\n\
<hr><center>nginx</center>\r\n\
</body>\r\n\
</html>\r\n";

/// A response whose body fails on its first poll: actix-web drops the
/// connection before flushing anything (the head is still in its write
/// buffer), so the client sees the connection close with no response.
fn connection_dies() -> HttpResponse {
    let stream = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected fault: connection dropped"))
    });
    HttpResponse::Ok().streaming(stream)
}

impl Fault {
    /// No fault.
    pub fn none() -> Self {
        Fault::default()
    }

    /// Watches `peer` (see [`Peer::of`]) while a `StallBody` holds its
    /// connection: the reply is dropped as soon as the client leaves.
    pub fn watching(mut self, peer: Option<Peer>) -> Self {
        self.peer = peer;
        self
    }

    /// How long a `Hang` lasts before the connection dies.
    pub fn hang_duration(&self) -> Duration {
        self.hang
    }

    /// Whether the handler should act on the request (false for the kinds
    /// [`before`](Self::before) answers).
    pub fn acts(&self) -> bool {
        !matches!(self.kind, Some(k) if !k.acts())
    }

    /// Before the handler acts. Sleeps the delay if any. For `Http500`,
    /// `Http503`, `Reset` and `Hang` returns the response to give instead:
    /// the request must then NOT be acted on. `Hang` first sleeps its hang
    /// time, then behaves as `Reset`.
    pub async fn before(&self) -> Option<HttpResponse> {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        match self.kind? {
            FaultKind::Http500 => Some(HttpResponse::InternalServerError().content_type(HTML_CONTENT_TYPE).body(HTML_500)),
            FaultKind::Http503 => Some(HttpResponse::ServiceUnavailable().content_type(HTML_CONTENT_TYPE).body(HTML_503)),
            FaultKind::Reset => Some(connection_dies()),
            FaultKind::Hang => {
                tokio::time::sleep(self.hang).await;
                Some(connection_dies())
            }
            FaultKind::Truncate
            | FaultKind::Malformed
            | FaultKind::LoseReply
            | FaultKind::StallBody
            | FaultKind::DripBody
            | FaultKind::PhpFatal => None,
        }
    }

    /// After the handler acted: turns its reply into what the client gets.
    ///
    /// * no fault (or a kind `before` handles): `status`, `content_type`,
    ///   `extra_headers` and `body` as given;
    /// * `Truncate`: the same, but the body is cut at a seeded point strictly
    ///   before its end (an empty body stays empty); `Content-Length` is that
    ///   of the cut body, so the client sees a complete but short reply;
    /// * `Malformed`: HTTP 200 with garbage instead (seeded choice among a
    ///   PHP fatal error after the reply's first line, a proxy's HTML error
    ///   page, or binary bytes), without `extra_headers`;
    /// * `LoseReply`: the connection dies with no response;
    /// * `StallBody`: the normal headers with the full `Content-Length`
    ///   (none for an empty body: chunked), the body up to a seeded point
    ///   strictly before its end, then nothing until the client goes away
    ///   (or [`MAX_HOLD`]);
    /// * `DripBody`: the normal headers, then the body one byte per
    ///   `drip_ms` (an empty body comes at once).
    ///
    /// A `Content-Length` in `extra_headers` is ignored (actix computes it);
    /// an invalid header name or value is skipped with a warning.
    pub fn after(&self, status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
        match self.kind {
            Some(FaultKind::LoseReply) => connection_dies(),
            Some(FaultKind::Truncate) => {
                let cut = if body.is_empty() { 0 } else { (self.cut % body.len() as u64) as usize };
                if extra_headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-disposition")) {
                    // A file download torn in transit: the promised length,
                    // then the connection dies, as a real network cut looks.
                    torn(status, content_type, body, cut, extra_headers)
                } else {
                    build(status, content_type, body.slice(..cut), extra_headers)
                }
            }
            Some(FaultKind::Malformed) => self.malformed(content_type, &body),
            Some(FaultKind::PhpFatal) => fatal_page(content_type, &body),
            Some(FaultKind::StallBody) => self.stalled(status, content_type, body, extra_headers),
            Some(FaultKind::DripBody) => self.dripping(status, content_type, body, extra_headers),
            _ => build(status, content_type, body, extra_headers),
        }
    }

    /// A count of this reply in [`Faults::held_bodies`] until it is dropped:
    /// actix drops a response's body when its client goes away.
    fn hold(&self) -> Held {
        let count = self.held.clone().unwrap_or_default();
        count.fetch_add(1, Ordering::SeqCst);
        Held(count)
    }

    fn stalled(&self, status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
        use futures_util::StreamExt;
        let (held, peer) = (self.hold(), self.peer.clone());
        let cut = if body.is_empty() { 0 } else { (self.cut % body.len() as u64) as usize };
        let first = futures_util::stream::once(std::future::ready(Ok::<Bytes, std::io::Error>(body.slice(..cut))));
        let stall = futures_util::stream::once(async move {
            let _held = held;
            let gone = async {
                match &peer {
                    Some(p) => p.gone().await,
                    None => std::future::pending().await,
                }
            };
            // Either way the connection dies here, and `held` with it.
            let why = match tokio::time::timeout(MAX_HOLD, gone).await {
                Ok(()) => "injected fault: the client of a stalled body left",
                Err(_) => "injected fault: stalled body given up",
            };
            Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why))
        });
        let stream = first.chain(stall);
        let r = build(status, content_type, Bytes::new(), extra_headers);
        if body.is_empty() {
            r.set_body(actix_web::body::BoxBody::new(actix_web::body::BodyStream::new(stream)))
        } else {
            r.set_body(actix_web::body::BoxBody::new(actix_web::body::SizedStream::new(body.len() as u64, stream)))
        }
    }

    fn dripping(&self, status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
        let (held, pause, started) = (self.hold(), self.drip, std::time::Instant::now());
        let full = body.len() as u64;
        // One byte per pause; a write to a client that has gone fails and
        // actix drops the stream, and with it `held`.
        let stream = futures_util::stream::unfold((body, held), move |(rest, held)| async move {
            if rest.is_empty() {
                return None;
            }
            if started.elapsed() > MAX_HOLD {
                let gone = std::io::Error::new(std::io::ErrorKind::TimedOut, "injected fault: dripping body given up");
                return Some((Err(gone), (Bytes::new(), held)));
            }
            actix_rt::time::sleep(pause).await;
            Some((Ok::<Bytes, std::io::Error>(rest.slice(..1)), (rest.slice(1..), held)))
        });
        let r = build(status, content_type, Bytes::new(), extra_headers);
        r.set_body(actix_web::body::BoxBody::new(actix_web::body::SizedStream::new(full, stream)))
    }

    fn malformed(&self, content_type: &str, body: &Bytes) -> HttpResponse {
        match self.cut % 3 {
            0 => fatal_page(content_type, body),
            1 => build(StatusCode::OK, "text/html", Bytes::from_static(PROXY_PAGE.as_bytes()), &[]),
            _ => {
                let mut rng = StdRng::seed_from_u64(self.cut);
                let n = rng.gen_range(16..256);
                // Binary noise that is not valid UTF-8 nor XML: starts with 0xFF.
                let mut out = vec![0xFFu8];
                out.extend((0..n).map(|_| rng.gen::<u8>()));
                build(StatusCode::OK, content_type, Bytes::from(out), &[])
            }
        }
    }
}

/// Counted in [`Faults::held_bodies`] while alive.
struct Held(Arc<AtomicU64>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A PHP fatal error after whatever the script had printed: for an XML
/// reply, its declaration and root element line.
fn fatal_page(content_type: &str, body: &Bytes) -> HttpResponse {
    let mut out = Vec::new();
    if body.starts_with(b"<?xml") {
        let mut lines = body.split_inclusive(|b| *b == b'\n');
        for _ in 0..2 {
            if let Some(l) = lines.next() {
                out.extend_from_slice(l);
            }
        }
    }
    out.extend_from_slice(PHP_FATAL.as_bytes());
    build(StatusCode::OK, content_type, Bytes::from(out), &[])
}

/// Headers with the full Content-Length, the first `cut` bytes, then a
/// dropped connection.
fn torn(status: StatusCode, content_type: &str, body: Bytes, cut: usize, extra_headers: &[(&str, String)]) -> HttpResponse {
    use futures_util::StreamExt;
    let full = body.len() as u64;
    let head = futures_util::stream::once(std::future::ready(Ok::<Bytes, std::io::Error>(body.slice(..cut))));
    // A moment for the first bytes to leave before the connection dies.
    let cut_off = futures_util::stream::once(async {
        actix_rt::time::sleep(Duration::from_millis(50)).await;
        Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected fault: download torn"))
    });
    let r = build(status, content_type, Bytes::new(), extra_headers);
    r.set_body(actix_web::body::BoxBody::new(actix_web::body::SizedStream::new(full, head.chain(cut_off))))
}

fn build(status: StatusCode, content_type: &str, body: Bytes, extra_headers: &[(&str, String)]) -> HttpResponse {
    let mut b = HttpResponse::build(status);
    match HeaderValue::from_str(content_type) {
        Ok(v) => {
            b.insert_header((actix_web::http::header::CONTENT_TYPE, v));
        }
        Err(_) => tracing::warn!(content_type, "invalid content type skipped"),
    }
    for (name, value) in extra_headers {
        let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) else {
            tracing::warn!(header = name, "invalid header skipped");
            continue;
        };
        if n == actix_web::http::header::CONTENT_LENGTH {
            continue;
        }
        b.append_header((n, v));
    }
    b.body(body)
}
