//! The fault proxy between the daemon and the project: it listens on
//! loopback, serves the project under two lanes (`/a/` and `/b/`, two
//! project URLs for the daemon, one project and account behind them), and
//! injects the seeded plan's fault into each request. Every decision is
//! recorded (never the request's body or query: they hold the
//! authenticator).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::http1::{read_message, send, Message, Upstream};
use crate::plan::{Fault, Plan};

/// The lanes: each is a project URL of its own for the daemon.
pub const LANES: [&str; 2] = ["a", "b"];

/// One decision of the proxy.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// Order of arrival at the proxy.
    pub seq: u64,
    pub lane: String,
    pub endpoint: String,
    /// Call number of this endpoint (from 1): with the seed, it decides.
    pub n: u64,
    pub fault: Fault,
    /// Whether the request reached the server.
    pub forwarded: bool,
    /// The server's status, when the request was forwarded and answered.
    pub upstream_status: Option<u16>,
    /// Milliseconds since the proxy started.
    pub at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// How long a stalled or dripping reply held the daemon's connection:
    /// the daemon's whole-reply deadline at work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<u64>,
}

struct Shared {
    upstream: Upstream,
    plan: Plan,
    counts: Mutex<HashMap<String, u64>>,
    log: Mutex<Vec<Decision>>,
    started: std::time::Instant,
}

/// A running proxy; dropping it stops it.
pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    pub fn start(upstream: Upstream, plan: Plan) -> std::io::Result<Proxy> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            plan,
            counts: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            started: std::time::Instant::now(),
        });
        let s = shared.clone();
        runtime.spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else { continue };
                tokio::spawn(serve(s.clone(), conn));
            }
        });
        Ok(Proxy { addr, shared, runtime: Some(runtime) })
    }

    /// The project URL of `lane` as the daemon sees it.
    pub fn lane_url(&self, lane: &str) -> String {
        format!("http://{}/{lane}/", self.addr)
    }

    /// Every decision so far, in arrival order.
    pub fn decisions(&self) -> Vec<Decision> {
        self.shared.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_millis(100));
        }
    }
}

/// The longest a stalled or dripping reply holds the daemon's connection
/// when the daemon never gives up (it must: that is the test).
const MAX_HOLD: Duration = Duration::from_secs(600);

/// Waits until the peer closes its end (or sends anything, or `MAX_HOLD`
/// passes): a stalled reply holds the connection no longer than the
/// daemon does.
async fn until_peer_leaves(conn: &mut TcpStream) -> Option<String> {
    let mut buf = [0u8; 512];
    match tokio::time::timeout(MAX_HOLD, conn.read(&mut buf)).await {
        Err(_) => Some(format!("the daemon held a stalled reply for {} s", MAX_HOLD.as_secs())),
        Ok(_) => None,
    }
}

/// `script:rpc` of a request, as the simulated project names its counters.
pub fn endpoint_of(rel_path: &str, body: &[u8]) -> String {
    let (path, query) = rel_path.split_once('?').unwrap_or((rel_path, ""));
    let script = path.rsplit('/').next().unwrap_or(path);
    if let Some(cmd) = query.split('&').find_map(|kv| kv.strip_prefix("cmd=")) {
        return format!("{script}:{cmd}");
    }
    // The request XML's root element, after the `request` form field.
    let from = find(body, b"name=\"request\"").unwrap_or(0);
    let mut i = from;
    while let Some(lt) = body[i..].iter().position(|b| *b == b'<').map(|p| p + i) {
        let name: String = body[lt + 1..].iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').map(|b| *b as char).collect();
        if !name.is_empty() {
            return format!("{script}:{name}");
        }
        i = lt + 1;
    }
    script.to_string()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The error page of Apache in front of PHP.
fn status_page(code: u16, retry_after: Option<u32>) -> Vec<u8> {
    let (reason, text) = match code {
        503 => (
            "Service Unavailable",
            "The server is temporarily unable to service your\nrequest due to maintenance downtime or capacity\nproblems. Please try again later.",
        ),
        _ => ("Internal Server Error", "The server encountered an internal error or\nmisconfiguration and was unable to complete\nyour request."),
    };
    let body = format!(
        "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n<html><head>\n<title>{code} {reason}</title>\n</head><body>\n<h1>{reason}</h1>\n<p>{text}</p>\n<hr>\n<address>Apache/2.4 Server</address>\n</body></html>\n"
    );
    let mut head = format!("HTTP/1.1 {code} {reason}\r\nContent-Type: text/html; charset=iso-8859-1\r\n");
    if let Some(s) = retry_after {
        head.push_str(&format!("Retry-After: {s}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()));
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// What PHP 8.2 prints for an uncaught database exception, after whatever
/// the script had printed (the XML declaration and the root element line).
fn php_fatal_body(reply: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if reply.starts_with(b"<?xml") {
        for line in reply.split_inclusive(|b| *b == b'\n').take(2) {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(
        b"<br />\n<b>Fatal error</b>:  Uncaught mysqli_sql_exception: Lost connection to MySQL server during query in \
/home/boincadm/projects/boinctest/html/inc/db_conn.inc:67\nStack trace:\n#0 /home/boincadm/projects/boinctest/html/inc/db_conn.inc(67): \
mysqli-&gt;query()\n#1 {main}\n  thrown in <b>/home/boincadm/projects/boinctest/html/inc/db_conn.inc</b> on line <b>67</b><br />\n",
    );
    out
}

async fn serve(shared: Arc<Shared>, mut conn: TcpStream) {
    let Ok(Ok(req)) = tokio::time::timeout(Duration::from_secs(60), read_message(&mut conn, true)).await else {
        return;
    };
    let mut parts = req.start.splitn(3, ' ');
    let (method, target) = (parts.next().unwrap_or("GET").to_string(), parts.next().unwrap_or("/").to_string());
    let Some((lane, rel)) = target.strip_prefix('/').and_then(|t| t.split_once('/')).filter(|(l, _)| LANES.contains(l)) else {
        let _ = send(&mut conn, &status_page(500, None)).await;
        return;
    };
    let (lane, rel) = (lane.to_string(), rel.to_string());
    let endpoint = endpoint_of(&rel, &req.body);
    let n = {
        let mut counts = shared.counts.lock().unwrap_or_else(|e| e.into_inner());
        let c = counts.entry(endpoint.clone()).or_insert(0);
        *c += 1;
        *c
    };
    let fault = shared.plan.decide(&endpoint, n);
    let at_ms = shared.started.elapsed().as_millis() as u64;
    let (upstream_status, note) = act(&shared, &mut conn, &method, &rel, &req, &fault).await;
    let held_ms = matches!(fault, Fault::StallBody { .. } | Fault::DripBody { .. })
        .then(|| (shared.started.elapsed().as_millis() as u64).saturating_sub(at_ms));
    let mut log = shared.log.lock().unwrap_or_else(|e| e.into_inner());
    let seq = log.len() as u64 + 1;
    let forwarded = fault.forwards() && upstream_status.is_some();
    log.push(Decision { seq, lane, endpoint, n, fault, forwarded, upstream_status, at_ms, note, held_ms });
}

/// Carries out one decision; returns the server's status and a note.
async fn act(
    shared: &Shared,
    conn: &mut TcpStream,
    method: &str,
    rel: &str,
    req: &Message,
    fault: &Fault,
) -> (Option<u16>, Option<String>) {
    match fault {
        Fault::Status { code, retry_after } => {
            let _ = send(conn, &status_page(*code, *retry_after)).await;
            return (None, None);
        }
        Fault::Reset => return (None, None),
        Fault::Hang { ms } => {
            tokio::time::sleep(Duration::from_millis(*ms)).await;
            return (None, None);
        }
        Fault::Delay { ms } => tokio::time::sleep(Duration::from_millis(*ms)).await,
        _ => {}
    }
    let reply = match shared.upstream.exchange(method, rel, &req.headers, &req.body, Duration::from_secs(600)).await {
        Ok(r) => r,
        Err(e) => {
            let _ = send(conn, &status_page(500, None)).await;
            return (None, Some(format!("upstream: {e}")));
        }
    };
    let status = Some(reply.status());
    match fault {
        Fault::LoseReply => {}
        Fault::Torn { keep_permille } => {
            let keep =
                if reply.body.is_empty() { 0 } else { (reply.body.len() * *keep_permille as usize / 1000).min(reply.body.len() - 1) };
            let mut out = reply.head_bytes(reply.body.len());
            out.extend_from_slice(&reply.body[..keep]);
            let _ = send(conn, &out).await;
            // A moment for the bytes to leave before the connection dies.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        Fault::Trickle { chunk, pause_ms } => {
            let _ = send(conn, &reply.head_bytes(reply.body.len())).await;
            // At most about three seconds of trickling.
            let chunk = (*chunk).max(reply.body.len() / (3000 / (*pause_ms).max(1) as usize).max(1));
            for part in reply.body.chunks(chunk.max(1)) {
                if send(conn, part).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(*pause_ms)).await;
            }
        }
        Fault::StallBody { keep_permille } => {
            let keep =
                if reply.body.is_empty() { 0 } else { (reply.body.len() * *keep_permille as usize / 1000).min(reply.body.len() - 1) };
            // An empty body is announced one byte long, so that it stalls too.
            let mut out = reply.head_bytes(reply.body.len().max(1));
            out.extend_from_slice(&reply.body[..keep]);
            if send(conn, &out).await.is_ok() {
                return (status, until_peer_leaves(conn).await);
            }
        }
        Fault::DripBody { pause_ms } => {
            let started = std::time::Instant::now();
            if send(conn, &reply.head_bytes(reply.body.len())).await.is_ok() {
                for byte in reply.body.chunks(1) {
                    tokio::time::sleep(Duration::from_millis(*pause_ms)).await;
                    // A write fails once the daemon has closed its end.
                    if started.elapsed() > MAX_HOLD || send(conn, byte).await.is_err() {
                        break;
                    }
                }
            }
        }
        Fault::PhpFatal => {
            let body = php_fatal_body(&reply.body);
            let ct = reply.header("content-type").unwrap_or("text/html; charset=UTF-8");
            let mut out = format!("HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
                .into_bytes();
            out.extend_from_slice(&body);
            let _ = send(conn, &out).await;
        }
        _ => {
            let mut out = reply.head_bytes(reply.body.len());
            out.extend_from_slice(&reply.body);
            let _ = send(conn, &out).await;
        }
    }
    (status, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_named_as_the_simulated_project_counts_them() {
        let body = b"--x\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n<create_batch>\n<authenticator>k</authenticator>\n";
        assert_eq!(endpoint_of("submit_rpc_handler.php", body), "submit_rpc_handler.php:create_batch");
        assert_eq!(endpoint_of("get_output.php?cmd=workunit_file&auth_str=k&wu_name=j", b""), "get_output.php:workunit_file");
        let xml = b"--x\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n<?xml version=\"1.0\"?>\n<query_files>";
        assert_eq!(endpoint_of("job_file.php", xml), "job_file.php:query_files");
    }

    #[tokio::test]
    async fn a_stalled_reply_holds_its_connection_until_the_daemon_leaves() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (mut conn, _) = listener.accept().await.unwrap();
        let held = tokio::spawn(async move { until_peer_leaves(&mut conn).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!held.is_finished(), "held while the daemon waits");
        drop(client);
        let note = tokio::time::timeout(Duration::from_secs(5), held).await.expect("freed once the daemon left").unwrap();
        assert_eq!(note, None);
    }

    #[test]
    fn a_php_fatal_keeps_what_php_had_printed() {
        let body =
            php_fatal_body(b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<create_batch>\n<batch_id>7</batch_id>\n</create_batch>\n");
        let text = String::from_utf8(body).unwrap();
        assert!(text.starts_with("<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<create_batch>\n<br />\n<b>Fatal error</b>"), "{text}");
        assert!(!text.contains("batch_id"));
    }
}
