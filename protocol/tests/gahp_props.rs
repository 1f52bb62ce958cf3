//! Property tests of the GAHP line codec: escaping round-trips, framing is
//! independent of how input is chunked, the parser never panics, and
//! `format` is the inverse of `parse`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use bytes::BytesMut;
use proptest::prelude::*;

use gahp_protocol::gahp::escape::{join_args, split_args};
use gahp_protocol::gahp::request::{format, parse};
use gahp_protocol::gahp::{
    AsyncCommand, Command, CommandResult, FetchMode, FetchOutput, Frame, InputFile, JobParams, JobSpec, LineFramer, OutputSpec, ParamValue,
    ReqId, Request, SubmitBatch,
};
use gahp_protocol::Authenticator;

// ---- escaping ----------------------------------------------------------

proptest! {
    #[test]
    fn split_inverts_join(args in prop::collection::vec(prop::collection::vec(any::<u8>().prop_filter("NUL becomes ?", |b| *b != 0), 0..12), 1..8)) {
        prop_assert_eq!(split_args(&join_args(&args)), args);
    }

    #[test]
    fn joined_line_has_no_raw_newline(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..8)) {
        let line = join_args(&args);
        // Every LF/CR is escaped and there is no NUL.
        prop_assert!(!line.contains(&0));
        let mut escaped = false;
        for &b in &line {
            if !escaped {
                prop_assert!(b != b'\n' && b != b'\r');
            }
            escaped = !escaped && b == b'\\';
        }
    }
}

// ---- framing -----------------------------------------------------------

/// Bytes biased toward the ones framing cares about.
fn framing_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => Just(b'a'),
        2 => Just(b'\\'),
        2 => Just(b'\n'),
        2 => Just(b'\r'),
        1 => Just(b' '),
        1 => any::<u8>(),
    ]
}

/// All frames of `input` fed as the given chunks, then EOF.
fn frame_all(max_line: usize, input: &[u8], cuts: &[usize]) -> Vec<Frame> {
    let mut framer = LineFramer::new(max_line);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut start = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort();
    cuts.push(input.len());
    for cut in cuts {
        buf.extend_from_slice(&input[start..cut.max(start)]);
        start = cut.max(start);
        while let Some(f) = framer.next_frame(&mut buf) {
            frames.push(f);
        }
        // Whatever is left is at most one line's worth: memory stays
        // bounded while a line is too long.
        assert!(buf.len() <= max_line.saturating_add(1));
    }
    while let Some(f) = framer.finish(&mut buf) {
        frames.push(f);
    }
    frames
}

/// A straightforward, non-incremental model of the framing rules.
fn model(max_line: usize, input: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut line = Vec::new();
    let mut escaped = false;
    let mut last_unescaped_cr = false;
    let mut emit = |line: &mut Vec<u8>, cr: bool| {
        if cr {
            line.pop();
        }
        let l = std::mem::take(line);
        frames.push(if l.len() > max_line { Frame::TooLong } else { Frame::Line(l) });
    };
    for &b in input {
        if escaped {
            escaped = false;
            last_unescaped_cr = false;
            line.push(b);
            continue;
        }
        if b == b'\n' {
            emit(&mut line, last_unescaped_cr);
            last_unescaped_cr = false;
            continue;
        }
        escaped = b == b'\\';
        last_unescaped_cr = b == b'\r';
        line.push(b);
    }
    if !line.is_empty() {
        emit(&mut line, last_unescaped_cr);
    }
    frames
}

proptest! {
    #[test]
    fn framing_ignores_chunking(
        input in prop::collection::vec(framing_byte(), 0..200),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
        max_line in prop_oneof![Just(usize::MAX), Just(1000), 0usize..12],
    ) {
        let whole = frame_all(max_line, &input, &[]);
        prop_assert_eq!(&whole, &model(max_line, &input));
        prop_assert_eq!(&frame_all(max_line, &input, &cuts), &whole);
        let byte_by_byte: Vec<usize> = (0..input.len()).collect();
        prop_assert_eq!(&frame_all(max_line, &input, &byte_by_byte), &whole);
    }

    #[test]
    fn framing_returns_joined_lines(
        lines in prop::collection::vec(prop::collection::vec(prop::collection::vec(framing_byte(), 0..8), 1..5), 0..6),
        crlf in prop::collection::vec(any::<bool>(), 6),
        cuts in prop::collection::vec(any::<usize>(), 0..10),
    ) {
        // Lines of escaped arguments (which may hold LF and CR), each ended
        // by LF or CRLF, come back one per line and split into the same
        // arguments.
        let lines: Vec<Vec<Vec<u8>>> = lines
            .into_iter()
            .map(|args| args.into_iter().map(|a| a.into_iter().filter(|&b| b != 0).collect()).collect())
            .collect();
        let mut input = Vec::new();
        for (i, args) in lines.iter().enumerate() {
            input.extend_from_slice(&join_args(args));
            input.extend_from_slice(if crlf[i] { b"\r\n" } else { b"\n" });
        }
        let frames = frame_all(usize::MAX, &input, &cuts);
        let got: Vec<Vec<Vec<u8>>> = frames
            .into_iter()
            .map(|f| match f {
                Frame::Line(l) => split_args(&l),
                Frame::TooLong => unreachable!(),
            })
            .collect();
        prop_assert_eq!(got, lines);
    }
}

#[test]
fn framing_memory_is_bounded() {
    let mut framer = LineFramer::new(100);
    let mut buf = BytesMut::new();
    for _ in 0..10_000 {
        buf.extend_from_slice(b"0123456789\\\n");
        assert_eq!(framer.next_frame(&mut buf), None);
        assert!(buf.len() <= 112);
    }
    buf.extend_from_slice(b"\nok\n");
    assert_eq!(framer.next_frame(&mut buf), Some(Frame::TooLong));
    assert_eq!(framer.next_frame(&mut buf), Some(Frame::Line(b"ok".to_vec())));
}

// ---- parsing never panics ----------------------------------------------

/// Tokens that steer the parser into its deeper branches.
fn plausible_token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "2",
            "3",
            "6",
            "4000000000",
            "4294967295",
            "4294967296",
            "99999999999999999999",
            "-1",
            "NULL",
            "null",
            "ALL",
            "SOME",
            "1e12",
            "1.5E9",
            "3.0",
            "inf",
            "NaN",
            "",
            " ",
            "\\",
            "x y",
            "0.5",
            ".",
            "1.",
            "/tmp/a b",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..6),
    ]
}

fn plausible_line() -> impl Strategy<Value = Vec<u8>> {
    let code = prop::sample::select(vec![
        "COMMANDS",
        "VERSION",
        "QUIT",
        "RESULTS",
        "ASYNC_MODE_ON",
        "ASYNC_MODE_OFF",
        "RESPONSE_PREFIX",
        "BOINC_SELECT_PROJECT",
        "BOINC_PING",
        "BOINC_SUBMIT",
        "boinc_submit",
        "BOINC_QUERY_BATCHES",
        "BOINC_FETCH_OUTPUT",
        "BOINC_ABORT_JOBS",
        "BOINC_RETIRE_BATCH",
        "BOINC_SET_LEASE",
        "BOINC_BOGUS",
    ]);
    (code, prop::collection::vec(plausible_token(), 0..30)).prop_map(|(code, tokens)| {
        let mut args = vec![code.as_bytes().to_vec()];
        args.extend(tokens);
        join_args(&args)
    })
}

fn check_roundtrip(line: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(request) = parse(line) {
        prop_assert_eq!(parse(&format(&request)), Ok(request));
    }
    Ok(())
}

proptest! {
    #[test]
    fn parse_never_panics_on_bytes(line in prop::collection::vec(any::<u8>(), 0..300)) {
        check_roundtrip(&line)?;
    }

    #[test]
    fn parse_never_panics_on_plausible_lines(line in plausible_line()) {
        check_roundtrip(&line)?;
    }
}

// ---- format is the inverse of parse -----------------------------------

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9#._-]{0,12}",
        1 => any::<String>(),
        1 => Just("a b\\c\nd\re".to_string()),
    ]
}

fn path() -> impl Strategy<Value = PathBuf> {
    prop::collection::vec(any::<u8>(), 0..16).prop_map(|b| PathBuf::from(OsString::from_vec(b)))
}

/// Finite, any sign: Display writes these so that they parse back exactly.
fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![any::<f64>().prop_filter("finite", |v| v.is_finite()), (0u32..2_000_000_000).prop_map(f64::from), Just(1e12), Just(0.0),]
}

fn non_negative() -> impl Strategy<Value = f64> {
    finite().prop_map(f64::abs)
}

fn param_f64() -> impl Strategy<Value = ParamValue<f64>> {
    prop_oneof![
        Just(ParamValue::Unset),
        finite().prop_map(ParamValue::Value),
        name()
            .prop_filter("not NULL, not a number", |s| { s != "NULL" && s.parse::<f64>().map_or(true, |v| !v.is_finite()) })
            .prop_map(ParamValue::Invalid),
    ]
}

fn param_i64() -> impl Strategy<Value = ParamValue<i64>> {
    prop_oneof![
        Just(ParamValue::Unset),
        any::<i64>().prop_map(ParamValue::Value),
        name().prop_filter("not NULL, not an integer", |s| s != "NULL" && s.parse::<i64>().is_err()).prop_map(ParamValue::Invalid),
    ]
}

fn job_params() -> impl Strategy<Value = JobParams> {
    (param_f64(), param_f64(), param_f64(), param_f64(), param_f64(), param_i64()).prop_map(|(a, b, c, d, e, v)| JobParams {
        rsc_fpops_est: a,
        rsc_fpops_bound: b,
        rsc_memory_bound: c,
        rsc_disk_bound: d,
        delay_bound: e,
        app_version_num: v,
    })
}

fn job() -> impl Strategy<Value = JobSpec> {
    (
        name(),
        prop::collection::vec(name(), 0..4),
        prop::collection::vec((path(), name()).prop_map(|(src, dst_name)| InputFile { src, dst_name }), 0..3),
    )
        .prop_map(|(name, args, inputs)| JobSpec { name, args, inputs })
}

fn async_command() -> impl Strategy<Value = AsyncCommand> {
    prop_oneof![
        Just(AsyncCommand::Ping),
        (name(), name(), prop::collection::vec(job(), 0..4), job_params())
            .prop_map(|(batch_name, app_name, jobs, params)| AsyncCommand::Submit(SubmitBatch { batch_name, app_name, jobs, params })),
        (non_negative(), prop::collection::vec(name(), 0..4))
            .prop_map(|(min_mod_time, batches)| AsyncCommand::QueryBatches { min_mod_time, batches }),
        (
            name(),
            path(),
            path(),
            prop_oneof![Just(FetchMode::All), Just(FetchMode::Some)],
            prop::collection::vec((name(), path()).prop_map(|(src, dst)| OutputSpec { src, dst }), 0..4),
        )
            .prop_map(|(job_name, dir, stderr_file, mode, specs)| {
                AsyncCommand::FetchOutput(FetchOutput { job_name, dir, stderr_file, mode, specs })
            }),
        prop::collection::vec(name(), 1..4).prop_map(|jobs| AsyncCommand::AbortJobs { jobs }),
        name().prop_map(|batch| AsyncCommand::RetireBatch { batch }),
        (name(), finite()).prop_map(|(batch, lease_time)| AsyncCommand::SetLease { batch, lease_time }),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        Just(Request::Commands),
        Just(Request::Version),
        Just(Request::Quit),
        Just(Request::Results),
        Just(Request::AsyncModeOn),
        Just(Request::AsyncModeOff),
        prop::collection::vec(any::<u8>(), 0..10).prop_map(Request::ResponsePrefix),
        (name(), name()).prop_map(|(url, a)| Request::SelectProject { url, authenticator: Authenticator::new(a) }),
        (1u32.., async_command()).prop_map(|(id, command)| Request::Command { reqid: ReqId(id), command: Command::Boinc(command) }),
    ]
}

proptest! {
    #[test]
    fn parse_inverts_format(req in request()) {
        let line = format(&req);
        prop_assert_eq!(parse(&line), Ok(req.clone()));
        // And the line survives framing as one line.
        let mut input = line.clone();
        input.extend_from_slice(b"\r\n");
        let mut framer = LineFramer::new(usize::MAX);
        let mut buf = BytesMut::from(&input[..]);
        prop_assert_eq!(framer.next_frame(&mut buf), Some(Frame::Line(line)));
        prop_assert!(buf.is_empty());
    }
}

// ---- a status answer rendered in chunks ---------------------------------

/// Names and statuses biased toward what escaping changes.
fn field() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![4 => Just('a'), 2 => Just(' '), 2 => Just('\\'), 1 => Just('\n'), 1 => Just('\0'), 1 => Just('é'), 1 => any::<char>()],
        0..12,
    )
    .prop_map(|c| c.into_iter().collect())
}

proptest! {
    /// The compact answer's chunks, of any size, concatenate to exactly
    /// the line the answer encoded whole has always been, and none is
    /// larger than the size asked plus one job's fields.
    #[test]
    fn a_query_answer_in_chunks_is_the_whole_line(
        groups in prop::collection::vec(prop::collection::vec((field(), prop_oneof![Just("DONE".to_string()), Just("IN_PROGRESS".to_string()), field()]), 0..20), 0..6),
        server_time in prop_oneof![Just(0.0), Just(1795000000.25), any::<f64>()],
        size in 1usize..300,
    ) {
        use gahp_protocol::gahp::QueryAnswer;
        let whole = CommandResult::Batches { server_time, groups: groups.clone() }.encode(ReqId(7));
        let answer = QueryAnswer::from_groups(server_time, &groups);
        let mut line = b"7".to_vec();
        let mut chunks = answer.chunks(size);
        // The head, then at most one job's fields or one batch's size past `size`.
        let head = format!(" NULL {:.6}", if server_time.is_finite() { server_time } else { 0.0 }).len();
        let widest = groups.iter().flatten().map(|(j, s)| 2 + 2 * (j.len() + s.len())).max().unwrap_or(0).max(21);
        while let Some(chunk) = chunks.next_chunk() {
            prop_assert!(!chunk.is_empty());
            prop_assert!(chunk.len() < size + head + widest, "{} bytes for {}", chunk.len(), size);
            line.extend_from_slice(chunk);
        }
        prop_assert_eq!(&line, &whole);
        prop_assert_eq!(answer.groups(), Some(groups));
    }
}
