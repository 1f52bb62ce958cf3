//! The server's side of `connect`'s connection: its lines (a `FILES BYE`
//! noted), and the file commands with their answers (`HAVE`, `PUT`,
//! `GET`, `LIST`, ...), other lines that come meanwhile held in order.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::path::Path;

use bytes::BytesMut;
use gahp_protocol::gahp::escape::{join_args, split_args};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::serve::files::hex;

/// The server's side of the connection: its lines, and the answers to
/// file commands (other lines that come meanwhile are held, in order).
pub(super) struct Link<R, W> {
    pub(super) reader: R,
    pub(super) writer: W,
    pub(super) buf: BytesMut,
    pub(super) held: VecDeque<Vec<u8>>,
    /// It failed or closed: every error since is the link's, not the request's.
    pub(super) broken: bool,
    /// The server said why it ends the connection (`FILES BYE <why>`):
    /// not to be dialled again.
    pub(super) bye: Option<String>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Link<R, W> {
    pub(super) fn new(reader: R, writer: W, already: BytesMut) -> Self {
        Link { reader, writer, buf: already, held: VecDeque::new(), broken: false, bye: None }
    }

    /// The next line with its `\n`; None when the server closed. A
    /// `FILES BYE` line is noted, not returned.
    pub(super) async fn next_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let line = self.read_line().await;
        if !matches!(line, Ok(Some(_))) {
            self.broken = true;
        }
        if let Ok(Some(l)) = &line {
            if let Some(why) = bye_of(l) {
                self.bye = Some(why);
                self.broken = true;
                return Ok(None);
            }
        }
        line
    }

    async fn read_line(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                return Ok(Some(self.buf.split_to(end + 1).to_vec()));
            }
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                return Ok((!self.buf.is_empty()).then(|| self.buf.split().to_vec()));
            }
        }
    }

    pub(super) async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let sent = async {
            self.writer.write_all(bytes).await?;
            self.writer.flush().await
        }
        .await;
        self.broken |= sent.is_err();
        sent
    }

    /// A file command and its answer: `S`'s arguments, or `E`'s reason.
    pub(super) async fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Result<Vec<Vec<u8>>, String>, String> {
        let mut line = join_args(args);
        line.push(b'\n');
        self.send(&line).await.map_err(|e| format!("the server: {e}"))?;
        self.answer().await
    }

    async fn answer(&mut self) -> Result<Result<Vec<Vec<u8>>, String>, String> {
        loop {
            let line = self.next_line().await.map_err(|e| format!("the server: {e}"))?.ok_or("the server closed the connection")?;
            let Some(rest) = line.strip_prefix(b"FILES ") else {
                self.held.push_back(line);
                continue;
            };
            let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
            let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
            let mut args = split_args(rest);
            let word = args.remove(0);
            return Ok(if word == b"S" {
                Ok(args)
            } else {
                Err(args.first().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default())
            });
        }
    }

    /// Exactly `size` bytes of the stream into `out` (all of them are read
    /// even if writing fails, so the stream stays in step).
    async fn body(&mut self, mut size: u64, out: &mut impl Write) -> Result<io::Result<()>, String> {
        let mut written = Ok(());
        while size > 0 {
            if self.buf.is_empty() && !matches!(self.reader.read_buf(&mut self.buf).await, Ok(n) if n > 0) {
                self.broken = true;
                return Err("the server closed the connection in a file".into());
            }
            let n = self.buf.len().min(usize::try_from(size).unwrap_or(usize::MAX));
            let chunk = self.buf.split_to(n);
            if written.is_ok() {
                written = out.write_all(&chunk);
            }
            size -= n as u64;
        }
        Ok(written)
    }

    /// Sends a local file (or bytes) unless the server has its content.
    pub(super) async fn upload(&mut self, content: Content<'_>) -> Result<String, String> {
        let (sha, size) = content.digest()?;
        if self.command(&["HAVE".to_string(), sha.clone(), size.to_string()]).await?.is_ok() {
            return Ok(sha);
        }
        self.send(format!("PUT {sha} {size}\n").as_bytes()).await.map_err(|e| format!("the server: {e}"))?;
        let mut reader = content.open()?;
        let mut left = size;
        let mut chunk = vec![0u8; 64 << 10];
        while left > 0 {
            let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            // A file that shrank meanwhile is padded: the server then
            // refuses it by its digest, and the stream stays in step.
            let n = match reader.read(&mut chunk[..want]) {
                Ok(0) | Err(_) => {
                    chunk[..want].fill(0);
                    want
                }
                Ok(n) => n,
            };
            self.send(&chunk[..n]).await.map_err(|e| format!("the server: {e}"))?;
            left -= n as u64;
        }
        self.answer().await?.map_err(|why| format!("the server did not take {}: {why}", content.name()))?;
        Ok(sha)
    }

    /// `GET`: the file's bytes into `out`. Ok(Err) when the server has no
    /// such file.
    pub(super) async fn get(&mut self, remote: &str, out: &mut impl Write) -> Result<Result<(), String>, String> {
        let size = match self.command(&["GET", remote]).await? {
            Ok(args) => args.first().and_then(|s| std::str::from_utf8(s).ok()?.parse::<u64>().ok()).ok_or("a GET answer without a size")?,
            Err(why) => return Ok(Err(why)),
        };
        Ok(self.body(size, out).await?.map_err(|e| e.to_string()))
    }

    /// `GET` into a local file, whole or not at all.
    pub(super) async fn get_to(&mut self, remote: &str, dest: &Path) -> Result<(), String> {
        let mut tmp = gahp_services::atomic_file::temp_beside(dest).map_err(|e| format!("can't write {}: {e}", dest.display()))?;
        self.get(remote, tmp.as_file_mut()).await?.map_err(|why| format!("can't fetch {remote}: {why}"))?;
        gahp_services::atomic_file::persist(tmp, dest).map_err(|e| format!("can't write {}: {e}", dest.display()))
    }

    pub(super) async fn list(&mut self, dir: &str) -> Result<Vec<String>, String> {
        let names = self.command(&["LIST", dir]).await?.map_err(|why| format!("can't list {dir}: {why}"))?;
        Ok(names.into_iter().map(|n| String::from_utf8_lossy(&n).into_owned()).collect())
    }
}

pub(super) enum Content<'a> {
    File(&'a Path),
    Bytes(&'a [u8]),
}

impl Content<'_> {
    fn name(&self) -> String {
        match self {
            Content::File(p) => p.display().to_string(),
            Content::Bytes(_) => "a job's record".into(),
        }
    }

    fn open(&self) -> Result<Box<dyn Read + '_>, String> {
        Ok(match self {
            Content::File(p) => Box::new(std::fs::File::open(p).map_err(|e| format!("can't read {}: {e}", p.display()))?),
            Content::Bytes(b) => Box::new(*b),
        })
    }

    fn digest(&self) -> Result<(String, u64), String> {
        let mut hasher = Sha256::new();
        let mut reader = self.open()?;
        let mut chunk = vec![0u8; 64 << 10];
        let mut size = 0u64;
        loop {
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&chunk[..n]);
                    size += n as u64;
                }
                Err(e) => return Err(format!("can't read {}: {e}", self.name())),
            }
        }
        Ok((hex(&hasher.finalize()), size))
    }
}

/// `FILES BYE <why>`: the server ends this connection for good (the
/// token was revoked, or a newer connection of the client replaced it).
fn bye_of(line: &[u8]) -> Option<String> {
    let rest = line.strip_prefix(b"FILES BYE")?;
    let args = split_args(rest.trim_ascii());
    Some(args.first().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default())
}
