//! Bytes from stdin -> logical request lines (`docs/spec/gahp-protocol.md` §2).
//!
//! "Check, then parse", as in mini-redis: the caller appends whatever it
//! read to a `BytesMut` and calls [`LineFramer::next_frame`] until it
//! returns `None`. The framer remembers how far it has scanned and whether
//! the last byte seen was an escaping backslash, so every byte is looked at
//! once however the input is chunked (O(n) overall).
//!
//! A logical line ends at the first LF that is not escaped by a backslash
//! (`\` LF is an escaped newline inside an argument; `\\` LF ends the line).
//! The terminator, and an unescaped CR right before it, are removed; all
//! escapes are left for [`super::escape::split_args`].

use bytes::BytesMut;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// One logical line without its terminator, escapes intact.
    Line(Vec<u8>),
    /// A line longer than the limit; its bytes were discarded as they came.
    TooLong,
}

#[derive(Debug, Clone)]
pub struct LineFramer {
    max_line: usize,
    /// Bytes of `buf` already scanned (all belong to the current line).
    scanned: usize,
    /// The last scanned byte was a backslash that escapes the next one.
    escaped: bool,
    /// The last scanned byte was an unescaped CR (dropped if LF follows).
    unescaped_cr: bool,
    /// The current line is over the limit: drop it and report `TooLong`.
    discarding: bool,
}

impl LineFramer {
    /// `max_line` is the longest line accepted, in raw bytes (escapes
    /// counted, terminator not counted).
    pub fn new(max_line: usize) -> Self {
        LineFramer { max_line, scanned: 0, escaped: false, unescaped_cr: false, discarding: false }
    }

    /// The next complete frame, removing its bytes from `buf`; `None` when
    /// more input is needed. Bytes of an over-long line are removed from
    /// `buf` as they arrive, so memory stays bounded by about `max_line`
    /// plus one read.
    pub fn next_frame(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        let start = self.scanned.min(buf.len());
        let mut end = None;
        for (i, &b) in buf.iter().enumerate().skip(start) {
            if self.escaped {
                self.escaped = false;
                self.unescaped_cr = false;
                continue;
            }
            match b {
                b'\n' => {
                    end = Some(i);
                    break;
                }
                b'\\' => self.escaped = true,
                _ => {}
            }
            self.unescaped_cr = b == b'\r';
        }

        let Some(lf) = end else {
            self.scanned = buf.len();
            // More than max_line + 1 bytes (one may be a droppable CR): too
            // long whatever comes next, so stop keeping it.
            if self.discarding || buf.len() > self.max_line.saturating_add(1) {
                self.discarding = true;
                buf.clear();
                self.scanned = 0;
            }
            return None;
        };

        let mut line = buf.split_to(lf + 1);
        line.truncate(lf);
        if self.unescaped_cr {
            line.truncate(lf.saturating_sub(1));
        }
        let too_long = self.discarding || line.len() > self.max_line;
        self.reset();
        Some(if too_long { Frame::TooLong } else { Frame::Line(line.to_vec()) })
    }

    /// At end of input: like [`next_frame`](Self::next_frame), but an
    /// unterminated last line counts as terminated (an unescaped CR at its
    /// end is dropped too). Returns it as a `Line` if any bytes of it were
    /// left (or `TooLong`). Call until it returns `None`.
    pub fn finish(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if let Some(frame) = self.next_frame(buf) {
            return Some(frame);
        }
        if self.discarding {
            self.reset();
            buf.clear();
            return Some(Frame::TooLong);
        }
        if buf.is_empty() {
            return None;
        }
        let mut line = buf.split();
        if self.unescaped_cr {
            line.truncate(line.len().saturating_sub(1));
        }
        self.reset();
        Some(if line.len() > self.max_line { Frame::TooLong } else { Frame::Line(line.to_vec()) })
    }

    fn reset(&mut self) {
        *self = LineFramer::new(self.max_line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(framer: &mut LineFramer, input: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = framer.next_frame(&mut buf) {
            out.push(f);
        }
        while let Some(f) = framer.finish(&mut buf) {
            out.push(f);
        }
        out
    }

    fn line(s: &[u8]) -> Frame {
        Frame::Line(s.to_vec())
    }

    #[test]
    fn lf_and_crlf() {
        let mut f = LineFramer::new(100);
        assert_eq!(frames(&mut f, b"VERSION\nCOMMANDS\r\n\r\n\n"), vec![line(b"VERSION"), line(b"COMMANDS"), line(b""), line(b"")]);
    }

    #[test]
    fn escaped_lf_continues_the_line() {
        let mut f = LineFramer::new(100);
        assert_eq!(frames(&mut f, b"a\\\nb\nc\\\\\nd\n"), vec![line(b"a\\\nb"), line(b"c\\\\"), line(b"d")]);
    }

    #[test]
    fn only_an_unescaped_cr_is_dropped() {
        let mut f = LineFramer::new(100);
        assert_eq!(frames(&mut f, b"a\\\r\nb\\\\\r\nc\rd\n"), vec![line(b"a\\\r"), line(b"b\\\\"), line(b"c\rd")]);
    }

    #[test]
    fn incremental_keeps_escape_state_across_chunks() {
        let mut f = LineFramer::new(100);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"PING x\\");
        assert_eq!(f.next_frame(&mut buf), None);
        buf.extend_from_slice(b"\ny\r");
        assert_eq!(f.next_frame(&mut buf), None);
        buf.extend_from_slice(b"\nNEXT");
        assert_eq!(f.next_frame(&mut buf), Some(line(b"PING x\\\ny")));
        assert_eq!(f.next_frame(&mut buf), None);
        assert_eq!(&buf[..], b"NEXT");
        assert_eq!(f.finish(&mut buf), Some(line(b"NEXT")));
        assert_eq!(f.finish(&mut buf), None);
    }

    #[test]
    fn too_long_is_discarded_while_streaming() {
        let mut f = LineFramer::new(4);
        let mut buf = BytesMut::new();
        for _ in 0..100 {
            buf.extend_from_slice(b"0123456789");
            assert_eq!(f.next_frame(&mut buf), None);
            assert!(buf.len() <= 10);
        }
        buf.extend_from_slice(b"\nabcd\r\nabcde\n");
        assert_eq!(f.next_frame(&mut buf), Some(Frame::TooLong));
        assert_eq!(f.next_frame(&mut buf), Some(line(b"abcd")));
        assert_eq!(f.next_frame(&mut buf), Some(Frame::TooLong));
        assert_eq!(f.next_frame(&mut buf), None);
    }

    #[test]
    fn exact_limit_with_crlf_arriving_late() {
        let mut f = LineFramer::new(4);
        let mut buf = BytesMut::from(&b"abcd\r"[..]);
        assert_eq!(f.next_frame(&mut buf), None);
        buf.extend_from_slice(b"\n");
        assert_eq!(f.next_frame(&mut buf), Some(line(b"abcd")));
    }

    #[test]
    fn finish_reports_unterminated_lines() {
        let mut f = LineFramer::new(4);
        assert_eq!(frames(&mut f, b"ab\r"), vec![line(b"ab")]);
        assert_eq!(frames(&mut f, b"ab\\"), vec![line(b"ab\\")]);
        assert_eq!(frames(&mut f, b"abcdefgh"), vec![Frame::TooLong]);
        assert_eq!(frames(&mut f, b"abcde"), vec![Frame::TooLong]);
        assert_eq!(frames(&mut f, b""), vec![]);
    }
}
