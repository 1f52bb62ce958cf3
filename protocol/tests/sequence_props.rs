//! Property tests of the `BOINC_SEQUENCE_*` grammar: the parser never
//! panics, and `format` is its inverse.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use proptest::prelude::*;

use gahp_protocol::gahp::escape::join_args;
use gahp_protocol::gahp::sequence_commands::{format, parse, CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use gahp_protocol::gahp::{InputFile, ReqId};

fn plausible_token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "2",
            "3",
            "4294967295",
            "4294967296",
            "-1",
            "NULL",
            "LATEST",
            "DONE",
            "",
            "\\",
            "a/b",
            "/tmp/a b"
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..6),
    ]
}

fn plausible_line() -> impl Strategy<Value = Vec<u8>> {
    let code = prop::sample::select(vec![
        "BOINC_SEQUENCE_CREATE",
        "boinc_sequence_create",
        "BOINC_SEQUENCE_EXTEND",
        "BOINC_SEQUENCE_END",
        "BOINC_SEQUENCE_QUERY",
        "BOINC_SEQUENCE_FETCH",
        "BOINC_SEQUENCE_ABORT",
        "BOINC_SEQUENCE_BOGUS",
    ]);
    (code, prop::collection::vec(plausible_token(), 0..24)).prop_map(|(code, tokens)| {
        let mut args = vec![code.as_bytes().to_vec()];
        args.extend(tokens);
        join_args(&args)
    })
}

fn check_roundtrip(line: &[u8]) -> Result<(), TestCaseError> {
    if let Some(Ok((id, command))) = parse(line) {
        prop_assert_eq!(parse(&format(id, &command)), Some(Ok((id, command))));
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

fn files(min: usize) -> impl Strategy<Value = Vec<InputFile>> {
    prop::collection::vec((path(), name()).prop_map(|(src, dst_name)| InputFile { src, dst_name }), min..4)
}

fn positive() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..100, Just(u32::MAX)]
}

fn end_marker() -> impl Strategy<Value = Option<String>> {
    prop::option::of("[A-Za-z0-9._-]{1,10}".prop_filter("NULL means none", |m| m != "NULL"))
}

fn command() -> impl Strategy<Value = SequenceCommand> {
    let create =
        (name(), name(), positive(), positive(), positive(), end_marker(), files(1), prop::collection::vec(name(), 0..4), files(0))
            .prop_map(|(name, app_name, steps, max_step_time, max_attempts, end_marker, state_files, args, inputs)| {
                SequenceCommand::Create(CreateSequence {
                    name,
                    app_name,
                    steps,
                    max_step_time,
                    max_attempts,
                    end_marker,
                    state_files,
                    args,
                    inputs,
                })
            });
    let step = prop_oneof![Just(StepSelector::Latest), positive().prop_map(StepSelector::Step)];
    prop_oneof![
        create,
        (name(), positive()).prop_map(|(name, steps)| SequenceCommand::Extend { name, steps }),
        name().prop_map(|name| SequenceCommand::End { name }),
        name().prop_map(|name| SequenceCommand::Query { name }),
        name().prop_map(|name| SequenceCommand::Abort { name }),
        (name(), step, path()).prop_map(|(name, step, dir)| SequenceCommand::Fetch(FetchSequence { name, step, dir })),
    ]
}

proptest! {
    #[test]
    fn parse_inverts_format(id in 1u32.., command in command()) {
        let line = format(ReqId(id), &command);
        prop_assert_eq!(parse(&line), Some(Ok((ReqId(id), command))));
    }
}
