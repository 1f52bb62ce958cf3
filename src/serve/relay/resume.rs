//! When the link drops and the session is not over: after `Dialer::redial`
//! the state the gridmanager set is replayed, the requests the server took
//! whose results were not handed on are sent again, and the lines that had
//! no reply follow (docs/serve.md, "When the link drops").

use std::path::{Path, PathBuf};
use std::rc::Rc;

use gahp_protocol::gahp::{self, AsyncCommand, Command, Request};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Expect, Outstanding, Pending, Relay, FETCH_STDERR};

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Relay<R, W> {
    /// After a reconnection: the banner, then, in one go, the state the
    /// gridmanager set (prefix, asynchronous mode), every outstanding
    /// request under the selection it was taken under, the selection in
    /// force; their replies are read here (each must be `S`). Then the
    /// lines that had no reply are sent again, their replies handed on as
    /// usual.
    pub(super) async fn resume(&mut self, files: bool) -> Result<(), String> {
        if files {
            if !self.negotiate(false).await? {
                return Err("the server no longer takes files".into());
            }
        } else {
            self.link.next_line().await.map_err(|e| format!("the server: {e}"))?.ok_or("the server closed the connection")?;
        }
        self.reconnections += 1;
        let mut lines: Vec<(Vec<u8>, Option<u32>)> = Vec::new();
        if !self.prefix.is_empty() {
            lines.push((gahp::request::format(&Request::ResponsePrefix(self.prefix.clone())), None));
        }
        if self.async_mode {
            lines.push((b"ASYNC_MODE_ON".to_vec(), None));
        }
        let mut again: Vec<(&u32, &Outstanding)> = self.outstanding.iter().collect();
        again.sort_by_key(|(_, o)| o.order);
        let mut selected: Option<&Rc<Vec<u8>>> = None;
        for (id, o) in again {
            if let Some(select) = o.select.as_ref().filter(|s| selected.is_none_or(|was| !Rc::ptr_eq(was, s))) {
                lines.push((select.to_vec(), None));
                selected = Some(select);
            }
            lines.push((self.sent_again(*id, &o.line), Some(*id)));
        }
        if let Some(select) = self.select.as_ref().filter(|s| selected.is_none_or(|was| !Rc::ptr_eq(was, s))) {
            lines.push((select.to_vec(), None));
        }
        let mut bytes = Vec::new();
        for (line, _) in &lines {
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
        }
        self.link.send(&bytes).await.map_err(|e| format!("the server: {e}"))?;
        let mut notified = false;
        for (line, reqid) in &lines {
            let reply = loop {
                let reply =
                    self.link.next_line().await.map_err(|e| format!("the server: {e}"))?.ok_or("the server closed the connection")?;
                if self.body(&reply) == b"R" {
                    notified = true;
                    continue;
                }
                break reply;
            };
            if self.body(&reply) == b"S" {
                continue;
            }
            let what = String::from_utf8_lossy(line.split(|&b| b == b' ').next().unwrap_or_default()).into_owned();
            match reqid {
                // Another sender holds the id now: its result is not ours.
                Some(id) => {
                    eprintln!(
                        "boinc_gahp connect: request {id} ({what}), sent again after the reconnection, was refused: it gets no result"
                    );
                    self.outstanding.remove(id);
                    self.pending.remove(id);
                    self.appended.remove(id);
                }
                None => return Err(format!("the server refused {what} after the reconnection")),
            }
        }
        eprintln!("boinc_gahp connect: reconnected; {} request(s) outstanding sent again", self.outstanding.len());
        if notified {
            self.reply_here(b"R").await?;
        }
        // The line whose files were going up stays to be sent after these
        // (`forward` clears it), and a drop among them keeps the rest.
        let unsent = self.unsent.take();
        let mut rest = std::mem::take(&mut self.sent);
        while let Some(sent) = rest.pop_front() {
            if let Expect::Here = sent.expect {
                self.sent.push_back(sent);
                continue;
            }
            if let Err(e) = self.forward(&sent.line, sent.expect).await {
                self.sent.extend(rest);
                self.unsent = unsent;
                return Err(e);
            }
        }
        self.unsent = unsent;
        Ok(())
    }

    /// An outstanding request's line as sent again. The server runs a
    /// request again whose result it had handed on (in a block the link
    /// dropped under), and a fetch run again appends its stderr text to
    /// the file it names: a file of its own then, so that the text is
    /// there once.
    fn sent_again(&self, id: u32, line: &[u8]) -> Vec<u8> {
        if !matches!(self.pending.get(&id), Some(Pending::Fetch { .. })) {
            return line.to_vec();
        }
        match gahp::request::parse(line) {
            Ok(Request::Command { reqid, command: Command::Boinc(AsyncCommand::FetchOutput(mut f)) })
                if f.stderr_file != Path::new("/dev/null") =>
            {
                f.stderr_file = PathBuf::from(format!("{FETCH_STDERR}.{}", self.reconnections));
                gahp::request::format(&Request::Command { reqid, command: Command::Boinc(AsyncCommand::FetchOutput(f)) })
            }
            _ => line.to_vec(),
        }
    }
}
