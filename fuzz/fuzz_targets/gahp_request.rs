//! Arbitrary bytes through the whole input path: `LineFramer` (fed in
//! chunks whose sizes come from the input itself) and `parse`. Checks that
//! nothing panics, that framing does not depend on chunking, and that
//! every parsed request survives `format` -> `parse` unchanged.

#![no_main]

use bytes::BytesMut;
use gahp_protocol::gahp::request::{format, parse};
use gahp_protocol::gahp::{Frame, LineFramer};
use libfuzzer_sys::fuzz_target;

/// Small, so over-long lines are exercised too.
const MAX_LINE: usize = 4096;

fn frames(data: &[u8], chunk_sizes: &[u8]) -> Vec<Frame> {
    let mut framer = LineFramer::new(MAX_LINE);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut rest = data;
    let mut sizes = chunk_sizes.iter().cycle();
    while !rest.is_empty() {
        // No sizes: everything in one chunk.
        let size = sizes.next().map_or(rest.len(), |&s| usize::from(s).max(1));
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        buf.extend_from_slice(chunk);
        while let Some(frame) = framer.next_frame(&mut buf) {
            out.push(frame);
        }
        assert!(buf.len() <= MAX_LINE + 1, "framer kept {} bytes", buf.len());
    }
    while let Some(frame) = framer.finish(&mut buf) {
        out.push(frame);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // The first byte says how many of the next bytes are chunk sizes.
    let (head, body) = data.split_at(data.len().min(1));
    let n = usize::from(head.first().copied().unwrap_or(0) % 16);
    let (sizes, input) = body.split_at(body.len().min(n));

    let whole = frames(input, &[]);
    assert_eq!(frames(input, sizes), whole, "framing depends on chunking");

    for frame in whole {
        let Frame::Line(line) = frame else { continue };
        if let Ok(request) = parse(&line) {
            let again = format(&request);
            assert_eq!(parse(&again), Ok(request), "format/parse mismatch");
        }
    }
});
