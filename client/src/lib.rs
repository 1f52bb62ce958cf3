//! A GAHP client that drives the daemon over pipes the way HTCondor's
//! gridmanager does: it spawns the binary, reads the banner, writes
//! CRLF-terminated request lines and reads return lines, skipping `R`
//! notifications, and collects result lines with RESULTS. Used by the demo
//! (`boinc_gahp demo`), and through gahp-testkit by the end-to-end tests,
//! the benchmarks and the chaos harness. A crate of its own so that the
//! demo does not make the test kit a dependency of the daemon's package.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use gahp_protocol::gahp::escape::split_args;
use gahp_protocol::gahp::request::format;
use gahp_protocol::gahp::{Frame, LineFramer, Request};

/// How long any awaited line may take (the gridmanager's own limit).
pub const LINE_TIMEOUT: Duration = Duration::from_secs(20);

pub struct GahpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    pub banner: String,
    /// The response prefix to strip (set by [`GahpClient::set_prefix`]).
    prefix: Vec<u8>,
    /// Results read by RESULTS but not yet claimed, by request id.
    stash: HashMap<u32, Vec<String>>,
    /// `R` lines seen.
    pub notifications: usize,
    next_id: u32,
    /// Until when the stdout reader stops reading (a stalled gridmanager).
    stalled_until: Arc<Mutex<Option<Instant>>>,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl GahpClient {
    /// Starts `exe args...` in `cwd` with `env` added and reads its banner.
    pub fn spawn(exe: &Path, args: &[&str], env: &[(&str, &str)], cwd: &Path) -> io::Result<GahpClient> {
        Self::spawn_with_stderr(exe, args, env, cwd, Stdio::null())
    }

    /// As [`GahpClient::spawn`], the daemon's stderr going to `stderr`
    /// (a file, for tests of what it says there).
    pub fn spawn_with_stderr(exe: &Path, args: &[&str], env: &[(&str, &str)], cwd: &Path, stderr: Stdio) -> io::Result<GahpClient> {
        let mut cmd = Command::new(exe);
        cmd.args(args).current_dir(cwd).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| bad("no stdin"))?;
        let mut stdout = child.stdout.take().ok_or_else(|| bad("no stdout"))?;
        let (tx, lines) = mpsc::channel();
        let stalled_until = Arc::new(Mutex::new(None::<Instant>));
        let stall = stalled_until.clone();
        std::thread::spawn(move || {
            let mut framer = LineFramer::new(usize::MAX);
            let mut buf = BytesMut::new();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                let until = *stall.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(left) = until.and_then(|u| u.checked_duration_since(Instant::now())) {
                    std::thread::sleep(left.min(Duration::from_millis(50)));
                    continue;
                }
                match stdout.read(&mut chunk) {
                    Ok(0) | Err(_) => {
                        while let Some(Frame::Line(l)) = framer.finish(&mut buf) {
                            let _ = tx.send(l);
                        }
                        return;
                    }
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(frame) = framer.next_frame(&mut buf) {
                            if let Frame::Line(l) = frame {
                                if tx.send(l).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
        });
        let mut client = GahpClient {
            child,
            stdin: Some(stdin),
            lines,
            banner: String::new(),
            prefix: Vec::new(),
            stash: HashMap::new(),
            notifications: 0,
            next_id: 1,
            stalled_until,
        };
        let banner = client.read_line()?;
        client.banner = String::from_utf8_lossy(&banner).into_owned();
        Ok(client)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The daemon's peak resident set so far (VmHWM in /proc), in MiB; NaN
    /// where it can't be read.
    pub fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }

    /// The next logical line as written (prefix included), raw.
    pub fn read_line(&mut self) -> io::Result<Vec<u8>> {
        self.read_line_within(LINE_TIMEOUT)
    }

    pub fn read_line_within(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => Ok(l),
            Err(RecvTimeoutError::Timeout) => Err(io::Error::new(io::ErrorKind::TimedOut, "no line from the GAHP")),
            Err(RecvTimeoutError::Disconnected) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the GAHP closed stdout")),
        }
    }

    /// Writes raw bytes (for malformed-input tests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin closed"))?;
        stdin.write_all(bytes)?;
        stdin.flush()
    }

    /// Closes stdin (EOF) and waits for the process to exit.
    pub fn close(mut self, timeout: Duration) -> io::Result<std::process::ExitStatus> {
        drop(self.stdin.take());
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                return Err(io::Error::new(io::ErrorKind::TimedOut, "the GAHP did not exit on EOF"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops reading the daemon's stdout for `d` (its writes block once the
    /// pipe is full), as a gridmanager busy elsewhere does.
    pub fn stall_reader(&self, d: Duration) {
        *self.stalled_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + d);
    }

    /// Closes stdin without waiting: the daemon sees EOF.
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<std::process::ExitStatus>> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() > until {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Request ids go on from `next` (the gridmanager's ids keep growing
    /// across a restart of the daemon).
    pub fn set_next_reqid(&mut self, next: u32) {
        self.next_id = next.max(self.next_id);
    }

    pub fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Strips the prefix from a line; lines without it are discarded, as the
    /// gridmanager does once a prefix is in force.
    fn unprefixed(&self, line: &[u8]) -> Option<Vec<u8>> {
        line.strip_prefix(self.prefix.as_slice()).map(<[u8]>::to_vec)
    }

    /// The next return line's arguments, skipping `R` lines.
    pub fn read_reply(&mut self) -> io::Result<Vec<String>> {
        loop {
            let line = self.read_line()?;
            let Some(line) = self.unprefixed(&line) else { continue };
            let args: Vec<String> = split_args(&line).into_iter().map(|a| String::from_utf8_lossy(&a).into_owned()).collect();
            if args.len() == 1 && args[0] == "R" {
                self.notifications += 1;
                continue;
            }
            return Ok(args);
        }
    }

    /// Sends one request line (CRLF, as the gridmanager does) and returns
    /// its return line's arguments.
    pub fn command_line(&mut self, line: &[u8]) -> io::Result<Vec<String>> {
        let mut bytes = line.to_vec();
        bytes.extend_from_slice(b"\r\n");
        self.send_raw(&bytes)?;
        self.read_reply()
    }

    pub fn command(&mut self, req: &Request) -> io::Result<Vec<String>> {
        self.command_line(&format(req))
    }

    /// RESPONSE_PREFIX: the reply comes with the old prefix, the rest with the new.
    pub fn set_prefix(&mut self, prefix: &str) -> io::Result<Vec<String>> {
        let reply = self.command(&Request::ResponsePrefix(prefix.as_bytes().to_vec()))?;
        self.prefix = prefix.as_bytes().to_vec();
        Ok(reply)
    }

    /// A fresh request id.
    pub fn reqid(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends an asynchronous request; the return line must be `S`.
    pub fn submit_async(&mut self, req: &Request) -> io::Result<()> {
        let reply = self.command(req)?;
        if reply.first().map(String::as_str) != Some("S") {
            return Err(bad(format!("return line {reply:?} for an asynchronous command")));
        }
        Ok(())
    }

    /// One RESULTS: every result line's arguments, in the order written.
    pub fn results(&mut self) -> io::Result<Vec<Vec<String>>> {
        self.command_line(b"RESULTS").and_then(|header| {
            let n: usize = match header.as_slice() {
                [s, n] if s == "S" => n.parse().map_err(|_| bad(format!("bad RESULTS header {header:?}")))?,
                _ => return Err(bad(format!("bad RESULTS header {header:?}"))),
            };
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let line = self.read_line()?;
                let line = self.unprefixed(&line).ok_or_else(|| bad("result line without the prefix"))?;
                out.push(split_args(&line).into_iter().map(|a| String::from_utf8_lossy(&a).into_owned()).collect());
            }
            Ok(out)
        })
    }

    /// Polls RESULTS until the result of `reqid` arrives; returns its
    /// arguments after the request id. Other results are kept for later.
    pub fn wait_result(&mut self, reqid: u32, timeout: Duration) -> io::Result<Vec<String>> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(r) = self.stash.remove(&reqid) {
                return Ok(r);
            }
            self.collect()?;
            if let Some(r) = self.stash.remove(&reqid) {
                return Ok(r);
            }
            if Instant::now() > until {
                return Err(io::Error::new(io::ErrorKind::TimedOut, format!("no result for request {reqid}")));
            }
            self.await_notification(Duration::from_millis(20))?;
        }
    }

    /// Every result there is, as (request id, arguments after it), waiting
    /// for at least one (as a gridmanager that reads results as each `R`
    /// comes).
    pub fn wait_any(&mut self, timeout: Duration) -> io::Result<Vec<(u32, Vec<String>)>> {
        let until = Instant::now() + timeout;
        loop {
            self.collect()?;
            if !self.stash.is_empty() {
                return Ok(self.stash.drain().collect());
            }
            if Instant::now() > until {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no result"));
            }
            self.await_notification(Duration::from_millis(20))?;
        }
    }

    /// One RESULTS into the stash.
    fn collect(&mut self) -> io::Result<()> {
        for mut line in self.results()? {
            if line.is_empty() {
                return Err(bad("empty result line"));
            }
            let id: u32 = line[0].parse().map_err(|_| bad(format!("bad result line {line:?}")))?;
            let rest = line.split_off(1);
            if self.stash.insert(id, rest).is_some() {
                return Err(bad(format!("two results for request {id}")));
            }
        }
        Ok(())
    }

    /// Waits up to `within` for an `R` line (async mode says a result is
    /// ready with one), so a result is collected as soon as it is written,
    /// not at the next poll. Nothing else may arrive between commands.
    fn await_notification(&mut self, within: Duration) -> io::Result<()> {
        match self.read_line_within(within) {
            Ok(line) => match self.unprefixed(&line) {
                Some(l) if l == b"R" => {
                    self.notifications += 1;
                    Ok(())
                }
                // Lines without the prefix are discarded, as by the gridmanager.
                None => Ok(()),
                Some(_) => Err(bad(format!("unexpected line between commands: {:?}", String::from_utf8_lossy(&line)))),
            },
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sends an asynchronous command and waits for its result.
    pub fn call(&mut self, make: impl FnOnce(u32) -> Request, timeout: Duration) -> io::Result<Vec<String>> {
        let id = self.reqid();
        self.submit_async(&make(id))?;
        self.wait_result(id, timeout)
    }
}

impl Drop for GahpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
