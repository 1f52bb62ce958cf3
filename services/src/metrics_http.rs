//! The `/metrics` endpoint: a GET-only HTTP/1 responder on a TCP listener,
//! strict about what it reads (one request per connection, its head at
//! most [`MAX_HEAD`] bytes and whole within [`READ_TIMEOUT`], the one path,
//! a few connections at a time), since a scrape port is open to whoever
//! reaches the address. The daemon builds no HTTP server otherwise (the
//! packaged one has no actix-web), and Prometheus needs no more.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::metrics::{self, Metrics};

/// The longest request head read (Prometheus sends about 300 bytes).
const MAX_HEAD: usize = 8 << 10;
/// A request's head must be whole, and the answer taken, within this.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("metrics: {0} is not a loopback address (the daemon serves its metrics on loopback only)")]
    NotLoopback(SocketAddr),
    #[error("metrics: can't listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// Listens on `addr` (`loopback_only`: the stdio daemon's rule) and
/// returns the address taken; the serving runs on the current actix
/// system until it stops.
pub async fn start(addr: SocketAddr, loopback_only: bool) -> Result<SocketAddr, ListenError> {
    if loopback_only && !addr.ip().is_loopback() {
        return Err(ListenError::NotLoopback(addr));
    }
    let listener = TcpListener::bind(addr).await.map_err(|source| ListenError::Bind { addr, source })?;
    let local = listener.local_addr().map_err(|source| ListenError::Bind { addr, source })?;
    actix_rt::spawn(serve(listener, metrics::global()));
    Ok(local)
}

/// Answers scrapes on `listener` from `metrics`, forever.
pub async fn serve(listener: TcpListener, metrics: &'static Metrics) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                tracing::warn!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        actix_rt::spawn(async move {
            let _permit = permit;
            if tokio::time::timeout(READ_TIMEOUT, answer(stream, metrics)).await.is_err() {
                tracing::debug!("metrics: a scrape did not finish within {READ_TIMEOUT:?}");
            }
        });
    }
}

/// Reads one request head and answers it; the connection then closes.
async fn answer(mut stream: TcpStream, metrics: &Metrics) {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let response = loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if let Some(end) = find(&head, b"\r\n\r\n") {
            break respond(&head[..end], metrics);
        }
        if head.len() > MAX_HEAD {
            break plain("431 Request Header Fields Too Large", "request head too large\n");
        }
    };
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The answer to a request head (without its blank line).
fn respond(head: &[u8], metrics: &Metrics) -> Vec<u8> {
    let Some(line) = head.split(|b| *b == b'\n').next().and_then(|l| std::str::from_utf8(l).ok()) else {
        return plain("400 Bad Request", "bad request\n");
    };
    let mut words = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) = (words.next(), words.next(), words.next(), words.next()) else {
        return plain("400 Bad Request", "bad request\n");
    };
    if !version.starts_with("HTTP/1.") {
        return plain("400 Bad Request", "bad request\n");
    }
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return plain("404 Not Found", "not found; the metrics are at /metrics\n");
    }
    match method {
        "GET" => response("200 OK", metrics::CONTENT_TYPE, metrics.encode().as_bytes(), true),
        "HEAD" => response("200 OK", metrics::CONTENT_TYPE, metrics.encode().as_bytes(), false),
        _ => plain("405 Method Not Allowed", "only GET\n"),
    }
}

fn plain(status: &str, body: &str) -> Vec<u8> {
    response(status, "text/plain; charset=utf-8", body.as_bytes(), true)
}

fn response(status: &str, content_type: &str, body: &[u8], with_body: bool) -> Vec<u8> {
    let mut out =
        format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
            .into_bytes();
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `request` to a fresh endpoint and returns the whole answer.
    fn exchange(request: &[u8]) -> String {
        let request = request.to_vec();
        actix_rt::System::new().block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let metrics: &'static Metrics = Box::leak(Box::new(Metrics::new()));
            metrics.uploaded("http://p/", 42);
            actix_rt::spawn(serve(listener, metrics));
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&request).await.unwrap();
            let mut out = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
            String::from_utf8(out).unwrap()
        })
    }

    #[test]
    fn a_get_of_metrics_gets_the_text() {
        let out = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("Content-Type: text/plain; version=0.0.4"), "{out}");
        assert!(out.contains("boinc_gahp_uploaded_bytes_total{project=\"http://p/\"} 42\n"), "{out}");
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        let length: usize = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().parse().unwrap();
        assert_eq!(length, body.len());
    }

    #[test]
    fn other_paths_methods_and_garbage_are_refused() {
        assert!(exchange(b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(exchange(b"GET /metricsx HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(exchange(b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        assert!(exchange(b"GET /metrics\r\n\r\n").starts_with("HTTP/1.1 400 "));
        assert!(exchange(b"\xff\xfe\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let head = exchange(b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 ") && head.ends_with("\r\n\r\n"), "{head}");
    }

    #[test]
    fn a_head_past_its_bound_is_refused_without_reading_on() {
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        assert!(exchange(&long).starts_with("HTTP/1.1 431 "));
    }

    #[test]
    fn the_stdio_daemon_listens_on_loopback_only() {
        let e = actix_rt::System::new().block_on(start("192.0.2.1:9631".parse().unwrap(), true)).unwrap_err();
        assert!(matches!(e, ListenError::NotLoopback(_)), "{e}");
    }

    #[test]
    fn a_slow_client_is_dropped_at_the_timeout() {
        actix_rt::System::new().block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let metrics: &'static Metrics = Box::leak(Box::new(Metrics::new()));
            actix_rt::spawn(serve(listener, metrics));
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /metr").await.unwrap();
            let mut out = Vec::new();
            let read = tokio::time::timeout(READ_TIMEOUT + Duration::from_secs(5), s.read_to_end(&mut out)).await;
            assert!(matches!(read, Ok(Ok(0))), "the connection is closed with nothing written");
        });
    }
}
