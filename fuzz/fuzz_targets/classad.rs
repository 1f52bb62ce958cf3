//! Arbitrary text through the BLAH-side parsers: `ClassAd::parse`, the V2
//! argument and environment parsers, and a `BLAH_JOB_SUBMIT` line carrying
//! the text as its ad. Checks that nothing panics and that whatever parses
//! survives display/format -> parse unchanged.

#![no_main]

use gahp_protocol::classad::{format_args_v2, format_env_v2, parse_args_v2, parse_env_v2, ClassAd};
use gahp_protocol::gahp::escape::escape_into;
use gahp_protocol::gahp::request::{format, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);

    if let Ok(ad) = ClassAd::parse(&text) {
        let shown = ad.to_string();
        assert_eq!(ClassAd::parse(&shown), Ok(ad), "display/parse mismatch: {shown:?}");
    }
    if let Ok(args) = parse_args_v2(&text) {
        assert_eq!(parse_args_v2(&format_args_v2(&args)), Ok(args), "args round trip");
    }
    if let Ok(env) = parse_env_v2(&text) {
        assert_eq!(parse_env_v2(&format_env_v2(&env)), Ok(env), "env round trip");
    }

    // The raw bytes as the ad field of a request line.
    let mut line = b"BLAH_JOB_SUBMIT 7 ".to_vec();
    escape_into(data, &mut line);
    if let Ok(request) = parse(&line) {
        assert_eq!(parse(&format(&request)), Ok(request), "format/parse mismatch");
    }
});
