//! Arbitrary bytes as a BOINC server's reply body through every reply
//! parser the daemon uses (they read what the network sends: a hostile or
//! broken server must get an error, never a panic), and through the text
//! helpers under them. Checks that escaping for XML and decoding entities
//! round-trip.

#![no_main]

use gahp_protocol::boinc::{reply, xml};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = reply::parse_ping(data);
    let _ = reply::parse_success(data);
    let _ = reply::parse_upload_files(data);
    let _ = reply::parse_templates(data);
    let _ = reply::parse_create_batch(data);
    let _ = reply::parse_submit_batch(data);
    let _ = reply::parse_query_files(data);
    let _ = reply::parse_query_batch2(data);
    let _ = reply::parse_query_completed_job(data);
    let _ = reply::parse_query_batch(data);
    let _ = reply::parse_query_batch_details(data);
    let _ = reply::parse_query_batches(data);
    let _ = reply::download_error(data);

    let text = String::from_utf8_lossy(data);
    let _ = xml::parse_int(&text);
    let _ = xml::parse_double(&text);
    let _ = xml::text_value(data);
    let _ = xml::strip_tags(data);
    let mut cut = text.to_string();
    xml::truncate_at(&mut cut, data.first().copied().unwrap_or(0) as usize);
    assert_eq!(xml::decode_entities(&xml::escape(&text)), text, "escape/decode mismatch");
});
