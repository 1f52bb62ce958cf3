//! The daemon's standard input as the runtime reads it.
//!
//! The gridmanager talks over a pipe: that is read without blocking, on
//! the runtime's own thread when epoll says there is something to read.
//! tokio's `stdin()` reads on its blocking pool instead, a thread hand-off
//! and back for every read, which was a good part of what a command such
//! as `BOINC_PING` cost the daemon. Anything else (a terminal, a file, a
//! socket) is read the tokio way: a terminal's flags are the shell's too,
//! and a file cannot be waited on with epoll.

use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::unix::pipe;

pub enum Stdin {
    Pipe(pipe::Receiver),
    Other(tokio::io::Stdin),
}

/// Standard input: a pipe read from the runtime's thread, anything else
/// through tokio's blocking pool. Call inside the runtime.
pub fn stdin() -> Stdin {
    // A second descriptor of the same pipe (made non-blocking, which the
    // first shares): tokio owns and closes it, and fd 0 stays as it was.
    let pipe = io::stdin().as_fd().try_clone_to_owned().and_then(pipe::Receiver::from_owned_fd);
    match pipe {
        Ok(p) => Stdin::Pipe(p),
        Err(_not_a_pipe) => Stdin::Other(tokio::io::stdin()),
    }
}

impl AsyncRead for Stdin {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stdin::Pipe(p) => Pin::new(p).poll_read(cx, buf),
            Stdin::Other(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}
