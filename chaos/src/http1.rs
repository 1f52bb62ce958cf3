//! Just enough HTTP/1.1 for the proxy and the auditor: one exchange per
//! connection, bodies by `Content-Length`, chunked or to end of stream;
//! upstream over TCP or rustls (the daemon's own trust roots).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest head or body accepted (outputs of test jobs are small).
const MAX_BODY: usize = 256 * 1024 * 1024;
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("bad HTTP message: {0}")]
    Bad(String),
    #[error("bad URL {0}")]
    Url(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("timed out")]
    Timeout,
}

/// A parsed message: the first line, the headers in order, the body.
#[derive(Debug, Clone)]
pub struct Message {
    pub start: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Message {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The status code of a response.
    pub fn status(&self) -> u16 {
        self.start.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
    }

    /// Head bytes with these headers, a `Content-Length` for `body_len`
    /// and `Connection: close`.
    pub fn head_bytes(&self, body_len: usize) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (n, v) in &self.headers {
            if ["content-length", "transfer-encoding", "connection", "keep-alive"].iter().any(|h| n.eq_ignore_ascii_case(h)) {
                continue;
            }
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str(&format!("Content-Length: {body_len}\r\nConnection: close\r\n\r\n"));
        out.into_bytes()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads one message. `response_to_head`: a reply to HEAD has no body.
pub async fn read_message<S: AsyncRead + Unpin>(s: &mut S, is_request: bool) -> Result<Message, HttpError> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(HttpError::Bad("head too long".into()));
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(HttpError::Bad("connection closed before the head ended".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut rest = buf.split_off(head_end + 4);
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_string(), v.trim().to_string())).collect();
    let msg = Message { start, headers, body: Vec::new() };
    let chunked = msg.header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let length = msg.header("content-length").map(|v| v.parse::<usize>().map_err(|_| HttpError::Bad(format!("Content-Length {v}"))));
    let body = if chunked {
        read_chunked(s, rest).await?
    } else if let Some(len) = length {
        let len = len?;
        if len > MAX_BODY {
            return Err(HttpError::Bad("body too large".into()));
        }
        while rest.len() < len {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Err(HttpError::Bad(format!("body cut at {} of {len} bytes", rest.len())));
            }
            rest.extend_from_slice(&chunk[..n]);
        }
        rest.truncate(len);
        rest
    } else if is_request {
        Vec::new()
    } else {
        loop {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                break rest;
            }
            rest.extend_from_slice(&chunk[..n]);
            if rest.len() > MAX_BODY {
                return Err(HttpError::Bad("body too large".into()));
            }
        }
    };
    Ok(Message { body, ..msg })
}

async fn read_chunked<S: AsyncRead + Unpin>(s: &mut S, mut buf: Vec<u8>) -> Result<Vec<u8>, HttpError> {
    let mut body = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut pos = 0;
    loop {
        // Need a size line.
        let line_end = loop {
            if let Some(i) = find(&buf[pos..], b"\r\n") {
                break pos + i;
            }
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Err(HttpError::Bad("chunked body cut".into()));
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let size_text = String::from_utf8_lossy(&buf[pos..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| HttpError::Bad(format!("chunk size {size_text:?}")))?;
        pos = line_end + 2;
        if size == 0 {
            return Ok(body);
        }
        while buf.len() < pos + size + 2 {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Err(HttpError::Bad("chunked body cut".into()));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        if body.len() > MAX_BODY {
            return Err(HttpError::Bad("body too large".into()));
        }
        pos += size + 2;
    }
}

/// Where the real project is: scheme, host:port, path prefix ending in `/`.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub host: String,
    pub port: u16,
    pub base_path: String,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Upstream {
    /// `http://host[:port]/path/` or `https://...`; `ca_files` are added to
    /// the web roots, as the daemon does with HTCondor's CA files.
    pub fn parse(url: &str, ca_files: &[std::path::PathBuf]) -> Result<Upstream, HttpError> {
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(HttpError::Url(url.to_string()));
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                (h.trim_matches(['[', ']']).to_string(), p.parse().map_err(|_| HttpError::Url(url.to_string()))?)
            }
            _ => (authority.to_string(), if https { 443 } else { 80 }),
        };
        if host.is_empty() {
            return Err(HttpError::Url(url.to_string()));
        }
        let mut base_path = format!("/{path}");
        if !base_path.ends_with('/') {
            base_path.push('/');
        }
        let tls = if https { Some(Arc::new(gahp_project::rpc::tls_config(ca_files).map_err(HttpError::Tls)?)) } else { None };
        Ok(Upstream { host, port, base_path, tls })
    }

    /// One exchange: `method path_and_query` (relative to the project's
    /// base path) with these headers and body; the whole reply.
    pub async fn exchange(
        &self,
        method: &str,
        rel: &str,
        headers: &[(String, String)],
        body: &[u8],
        timeout: Duration,
    ) -> Result<Message, HttpError> {
        let mut head = format!("{method} {}{rel} HTTP/1.1\r\nHost: {}\r\n", self.base_path, self.host);
        for (n, v) in headers {
            if ["host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding"]
                .iter()
                .any(|h| n.eq_ignore_ascii_case(h))
            {
                continue;
            }
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()));
        let work = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
            match &self.tls {
                Some(cfg) => {
                    let name = rustls::pki_types::ServerName::try_from(self.host.clone()).map_err(|e| HttpError::Tls(e.to_string()))?;
                    let mut s = tokio_rustls::TlsConnector::from(cfg.clone()).connect(name, tcp).await?;
                    s.write_all(head.as_bytes()).await?;
                    s.write_all(body).await?;
                    s.flush().await?;
                    read_message(&mut s, false).await
                }
                None => {
                    let mut s = tcp;
                    s.write_all(head.as_bytes()).await?;
                    s.write_all(body).await?;
                    s.flush().await?;
                    read_message(&mut s, false).await
                }
            }
        };
        tokio::time::timeout(timeout, work).await.map_err(|_| HttpError::Timeout)?
    }
}

/// Writes raw bytes and flushes.
pub async fn send<S: AsyncWrite + Unpin>(s: &mut S, bytes: &[u8]) -> std::io::Result<()> {
    s.write_all(bytes).await?;
    s.flush().await
}
