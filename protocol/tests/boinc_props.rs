//! Properties of the BOINC codecs: no reply makes a parser panic, a torn
//! reply never passes for a different answer, escaping round-trips.

use std::sync::OnceLock;

use gahp_protocol::boinc::reply::*;
use gahp_protocol::boinc::xml::{decode_entities, escape};
use gahp_protocol::boinc::{BatchStates, JobState, ReplyError};
use proptest::prelude::*;
use proptest::sample::Index;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../captures/real-boinc");

/// The reply bodies of all RPC captures (see `boinc_captures.rs`), read once.
fn capture_bodies() -> &'static [Vec<u8>] {
    static BODIES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BODIES.get_or_init(read_capture_bodies)
}

fn read_capture_bodies() -> Vec<Vec<u8>> {
    const MARKER: &[u8] = b"### response body (verbatim):\n";
    let mut bodies = Vec::new();
    for entry in std::fs::read_dir(DIR).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        if let Some(at) = data.windows(MARKER.len()).position(|w| w == MARKER) {
            let body = &data[at + MARKER.len()..];
            let body = body.strip_suffix(b"\n### (no trailing newline)\n").unwrap_or(body);
            bodies.push(body.to_vec());
        }
    }
    bodies.sort();
    assert!(bodies.len() >= 45, "{} capture bodies", bodies.len());
    bodies
}

/// Every parser's answer, as text.
fn parse_all(body: &[u8]) -> Vec<String> {
    let download = download_error(body);
    assert!(download.len() <= 300, "{download}");
    let answers = vec![
        format!("{:?}", parse_ping(body)),
        format!("{:?}", parse_success(body)),
        format!("{:?}", parse_upload_files(body)),
        format!("{:?}", parse_templates(body)),
        format!("{:?}", parse_create_batch(body)),
        format!("{:?}", parse_submit_batch(body)),
        format!("{:?}", parse_query_files(body)),
        format!("{:?}", parse_query_batch2(body)),
        format!("{:?}", parse_query_completed_job(body)),
        format!("{:?}", parse_query_batch(body)),
        format!("{:?}", parse_query_batches(body)),
    ];
    // Messages stay bounded whatever the server sends.
    for answer in &answers {
        assert!(answer.len() < 2000 || answer.starts_with("Ok("), "{answer}");
    }
    answers
}

/// `full` cut short at `cut`: every parser either fails on it or gives the
/// answer it gave on `full` (`whole`, from [`parse_all`]).
fn assert_torn_never_differs(full: &[u8], whole: &[String], cut: usize) {
    for (i, torn) in parse_all(&full[..cut]).into_iter().enumerate() {
        if torn.starts_with("Ok(") {
            assert_eq!(torn, whole[i], "parser {i} on {:?} cut at {cut}", String::from_utf8_lossy(full));
        }
    }
}

/// Pieces of replies, to build inputs that reach deep into the parsers.
const FRAGMENTS: &[&str] = &[
    "<",
    ">",
    "</",
    "/>",
    " ",
    "\n",
    "x",
    "1",
    "-1",
    "0",
    "0x1",
    "1e3",
    "é",
    "&amp;",
    "&#x",
    "&#",
    ";",
    "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n",
    "<!--",
    "-->",
    "<![CDATA[",
    "]]>",
    "<error>",
    "</error>",
    "<error_num>",
    "</error_num>",
    "<error_msg>",
    "</error_msg>",
    "<success>",
    "</success>",
    "<success/>",
    "<aborted a b>",
    "<batch_id>",
    "</batch_id>",
    "<query_batch2>",
    "</query_batch2>",
    "<server_time>",
    "</server_time>",
    "<batch_size>",
    "</batch_size>",
    "<job>",
    "</job>",
    "<job_name>",
    "</job_name>",
    "<status>",
    "</status>",
    "<absent_files>",
    "</absent_files>",
    "<absent_files/>",
    "<file>",
    "</file>",
    "<completed_job>",
    "</completed_job>",
    "<stderr_out>",
    "</stderr_out>",
    "<exit_status>",
    "<templates>",
    "</templates>",
    "<input_template>",
    "</input_template>",
    "<output_template>",
    "<open_name>",
    "</open_name>",
    "<batch>",
    "</batch>",
    "<query_batches>",
    "</query_batches>",
    "</query_batch>",
    "<name>",
    "</name>",
    "<id>",
    "</id>",
    "<br />",
    "<b>Fatal error</b>:",
    "\nFatal error: ",
    "ERROR: ",
];

fn xmlish() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..80).prop_map(|p| p.concat().into_bytes())
}

/// A `query_batch2` reply byte for byte as the server writes it.
fn render_query_batch2(states: &BatchStates) -> Vec<u8> {
    let mut s =
        format!("<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<query_batch2>\n<server_time>{}</server_time>\n", states.server_time);
    for jobs in &states.batches {
        s += &format!("   <batch_size>{}</batch_size>\n", jobs.len());
        for job in jobs {
            s += &format!("    <job>\n        <job_name>{}</job_name>\n        <status>{}</status>\n    </job>\n", job.name, job.status);
        }
    }
    s += "</query_batch2>\n";
    s.into_bytes()
}

fn batch_states() -> impl Strategy<Value = BatchStates> {
    let job = ("[a-z0-9_#.]{1,12}", prop::sample::select(&["DONE", "ERROR", "IN_PROGRESS", "UNSENT"][..]))
        .prop_map(|(name, status)| JobState { name, status: status.to_string() });
    let batches = prop::collection::vec(prop::collection::vec(job, 0..4), 0..4);
    (0u64..20_000_000_000_000, batches).prop_map(|(t, batches)| BatchStates { server_time: t as f64 / 10_000.0, batches })
}

fn render_query_files(absent: &[usize]) -> Vec<u8> {
    let mut s = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<query_files>\n<absent_files>\n".to_string();
    for i in absent {
        s += &format!("<file>{i}</file>\n");
    }
    s += "</absent_files>\n        </query_files>\n    ";
    s.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn no_panic_on_bytes(body in prop::collection::vec(any::<u8>(), 0..1500)) {
        parse_all(&body);
    }

    #[test]
    fn no_panic_on_reply_fragments(body in xmlish()) {
        parse_all(&body);
    }

    #[test]
    fn no_panic_on_mutated_captures(
        which in any::<Index>(),
        edits in prop::collection::vec((any::<Index>(), any::<u8>(), 0u8..3), 0..10),
    ) {
        let bodies = capture_bodies();
        let mut body = bodies[which.index(bodies.len())].clone();
        for (at, byte, kind) in edits {
            let i = at.index(body.len() + 1);
            match kind {
                0 => body.insert(i, byte),
                1 if i < body.len() => body[i] = byte,
                _ if i < body.len() => { body.remove(i); }
                _ => {}
            }
        }
        parse_all(&body);
    }

    #[test]
    fn torn_captures_never_pass_for_another_answer(which in any::<Index>(), cut in any::<Index>()) {
        let bodies = capture_bodies();
        let body = &bodies[which.index(bodies.len())];
        assert_torn_never_differs(body, &parse_all(body), cut.index(body.len()));
    }

    #[test]
    fn escape_round_trips(text in any::<String>()) {
        let escaped = escape(&text);
        prop_assert!(!escaped.contains(['<', '>', '"', '\'']));
        prop_assert_eq!(decode_entities(&escaped), text);
    }

    #[test]
    fn escape_round_trips_entity_like_text(text in "[&#;a-zA-Z0-9x<>\"' ]{0,40}") {
        prop_assert_eq!(decode_entities(&escape(&text)), text);
    }

    #[test]
    fn text_without_ampersand_decodes_to_itself(text in "[^&]{0,60}") {
        prop_assert_eq!(decode_entities(&text), text);
    }
}

proptest! {
    // Every cut of every case: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn query_batch2_round_trips_and_detects_tearing(states in batch_states()) {
        let body = render_query_batch2(&states);
        prop_assert_eq!(parse_query_batch2(&body), Ok(states.clone()));
        for cut in 0..body.len() {
            if let Ok(torn) = parse_query_batch2(&body[..cut]) {
                // Only the final newline may be missing.
                prop_assert_eq!(&torn, &states, "cut at {}", cut);
            }
        }
    }

    #[test]
    fn query_files_round_trips_and_detects_tearing(absent in prop::collection::vec(0usize..100_000, 0..6)) {
        let body = render_query_files(&absent);
        prop_assert_eq!(parse_query_files(&body), Ok(absent.clone()));
        for cut in 0..body.len() {
            if let Ok(torn) = parse_query_files(&body[..cut]) {
                prop_assert_eq!(&torn, &absent, "cut at {}", cut);
            }
        }
    }
}

/// The torn-reply property over every cut of the RPC captures that carry
/// data the GAHP acts on.
#[test]
fn every_cut_of_small_captures() {
    for body in capture_bodies().iter().filter(|b| b.len() <= 700) {
        let whole = parse_all(body);
        for cut in 0..body.len() {
            assert_torn_never_differs(body, &whole, cut);
        }
    }
}

/// Every call a query_batch2 reader makes, and its answer, as text.
#[derive(Default)]
struct Calls(Vec<String>);

impl QueryBatch2Sink for Calls {
    fn group(&mut self, size: usize) {
        self.0.push(format!("group {size}"));
    }
    fn job(&mut self, name: &str, status: &str) {
        self.0.push(format!("job {name:?} {status:?}"));
    }
}

fn read_whole(body: &[u8]) -> String {
    let mut calls = Calls::default();
    let answer = read_query_batch2(body, &mut calls);
    format!("{answer:?} {:?}", answer.is_ok().then_some(calls.0))
}

fn read_streamed(body: &[u8], piece: usize) -> String {
    let mut reader = QueryBatch2Reader::new(Calls::default());
    for chunk in body.chunks(piece.max(1)) {
        reader.feed(chunk);
    }
    match reader.finish() {
        Ok((calls, t)) => format!("{:?} {:?}", Ok::<f64, ReplyError>(t), Some(calls.0)),
        Err(e) => format!("{:?} {:?}", Err::<f64, ReplyError>(e), None::<Vec<String>>),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Read as it arrives, in pieces of any size, a reply reads as it does
    /// whole: the same answer or the same error, whatever junk is in it.
    #[test]
    fn query_batch2_streamed_reads_as_whole(
        states in batch_states(),
        junk in xmlish(),
        at in any::<Index>(),
        cut in any::<Index>(),
        piece in 1usize..200,
    ) {
        let mut body = render_query_batch2(&states);
        let at = at.index(body.len() + 1);
        body.splice(at..at, junk);
        let body = &body[..cut.index(body.len() + 1).max(at)];
        prop_assert_eq!(read_streamed(body, piece), read_whole(body));
    }

    #[test]
    fn query_batch2_streamed_reads_captures_as_whole(which in any::<Index>(), piece in 1usize..5000) {
        let body = &capture_bodies()[which.index(capture_bodies().len())];
        prop_assert_eq!(read_streamed(body, piece), read_whole(body));
    }
}
