//! Property tests of the BLAH codecs: ClassAds survive display -> parse,
//! the parsers never panic, V2 arguments and environments round-trip, and
//! `format` is the inverse of `parse` for BLAH request lines.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use proptest::prelude::*;

use gahp_protocol::classad::{format_args_v2, format_env_v2, parse_args_v1, parse_args_v2, parse_env_v2, ClassAd, Value};
use gahp_protocol::gahp::escape::{join_args, split_args};
use gahp_protocol::gahp::request::{format, parse};
use gahp_protocol::gahp::{BlahCommand, BlahResult, Command, ReqId, Request};

// ---- ClassAds ------------------------------------------------------------

/// Any text but NUL, which no ClassAd string can hold.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[ -~]{0,12}",
        1 => prop::collection::vec(any::<char>().prop_filter("no NUL", |c| *c != '\0'), 0..12).prop_map(|v| v.into_iter().collect()),
        1 => prop::sample::select(vec!["\"", "\\", "\\\"", "'", ";", "]", "[", "\n\t\r", "\u{1}\u{7f}", "é€", "\\0"]).prop_map(str::to_string),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z_][A-Za-z0-9_]{0,10}",
        // Quoted names: reserved words, odd characters.
        1 => prop::sample::select(vec!["true", "Error", "is", "isnt", "a b", "x'y", "\\", "1x", "é"]).prop_map(str::to_string),
        1 => text().prop_filter("non-empty", |s| !s.is_empty()),
    ]
}

/// Valid expressions that are not single literals.
fn expr() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "BoincPlatform == \"x86_64-pc-linux-gnu\"",
        "A && (B || !C)",
        "{ 1, \"two;]\", { 3 } }",
        "[ a = 1; b = [ c = \"]\" ] ]",
        "strcat(\"a\", 'odd;name')",
        "- 5",
        "64M",
        "x.y[0]",
        "\"a\" + \"b\"",
        "real(\"INF\")",
    ])
    .prop_map(str::to_string)
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => text().prop_map(Value::Str),
        2 => any::<i64>().prop_map(Value::Int),
        2 => any::<f64>().prop_filter("finite", |r| r.is_finite()).prop_map(Value::Real),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => Just(Value::Undefined),
        1 => Just(Value::Error),
        2 => expr().prop_map(Value::Expr),
    ]
}

fn classad() -> impl Strategy<Value = ClassAd> {
    prop::collection::vec((name(), value()), 0..10).prop_map(|attrs| {
        let mut ad = ClassAd::new();
        for (n, v) in attrs {
            ad.insert(n, v);
        }
        ad
    })
}

/// Characters the ClassAd scanner cares about, and a few others.
fn classad_ish() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "[",
        "]",
        "[ ",
        " ]",
        ";",
        "; ",
        "=",
        " = ",
        "\"",
        "'",
        "\\",
        "\\\"",
        "{",
        "}",
        "(",
        ")",
        "A",
        "b_1",
        "true",
        "undefined",
        "0x1f",
        "017",
        "-",
        "1",
        "2.5",
        "e",
        "E+3",
        ".",
        " ",
        "\t",
        "\n",
        "\\0",
        "\\101",
        "é",
        "\0",
    ]);
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

fn check_classad(text: &str) -> Result<(), TestCaseError> {
    if let Ok(ad) = ClassAd::parse(text) {
        let shown = ad.to_string();
        prop_assert_eq!(ClassAd::parse(&shown), Ok(ad), "{:?} -> {:?}", text, shown);
    }
    Ok(())
}

proptest! {
    #[test]
    fn classad_display_parses_back(ad in classad()) {
        let shown = ad.to_string();
        prop_assert_eq!(ClassAd::parse(&shown), Ok(ad), "{}", shown);
    }

    #[test]
    fn classad_parse_never_panics(text in any::<String>()) {
        check_classad(&text)?;
    }

    #[test]
    fn classad_parse_never_panics_on_plausible_text(text in classad_ish()) {
        check_classad(&text)?;
        check_classad(&format!("[ A = {text} ]"))?;
    }
}

// ---- arguments and environment -----------------------------------------

proptest! {
    #[test]
    fn args_v2_round_trip(args in prop::collection::vec(text(), 0..6)) {
        let joined = format_args_v2(&args);
        prop_assert_eq!(parse_args_v2(&joined), Ok(args), "{:?}", joined);
    }

    #[test]
    fn args_parsers_never_panic(s in "[a' \t\r\n\"\\\\]{0,20}") {
        if let Ok(args) = parse_args_v2(&s) {
            prop_assert_eq!(parse_args_v2(&format_args_v2(&args)), Ok(args));
        }
        let v1 = parse_args_v1(&s);
        prop_assert!(v1.iter().all(|a| !a.is_empty()));
        if let Ok(env) = parse_env_v2(&s) {
            prop_assert_eq!(parse_env_v2(&format_env_v2(&env)), Ok(env));
        }
    }

    #[test]
    fn env_v2_round_trip(env in prop::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,6}", text(), 0..5)) {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let joined = format_env_v2(&env);
        prop_assert_eq!(parse_env_v2(&joined), Ok(env), "{:?}", joined);
    }
}

// ---- request lines --------------------------------------------------------

fn command() -> impl Strategy<Value = BlahCommand> {
    let raw_path = prop::collection::vec(any::<u8>(), 0..12).prop_map(|b| PathBuf::from(OsString::from_vec(b)));
    prop_oneof![
        text().prop_map(|batch_type| BlahCommand::Ping { batch_type }),
        classad().prop_map(|ad| BlahCommand::JobSubmit { ad }),
        text().prop_map(|job_id| BlahCommand::JobStatus { job_id }),
        text().prop_map(|job_id| BlahCommand::JobCancel { job_id }),
        (text(), raw_path).prop_map(|(job_id, proxy)| BlahCommand::JobRefreshProxy { job_id, proxy }),
    ]
}

fn plausible_blah_line() -> impl Strategy<Value = Vec<u8>> {
    let code = prop::sample::select(vec![
        "BLAH_PING",
        "BLAH_JOB_SUBMIT",
        "blah_job_submit",
        "BLAH_JOB_STATUS",
        "BLAH_JOB_CANCEL",
        "BLAH_JOB_REFRESH_PROXY",
        "BLAH_JOB_STATUS_ALL",
    ]);
    let token = prop_oneof![
        Just(b"3".to_vec()),
        Just(b"0".to_vec()),
        classad_ish().prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..6),
    ];
    (code, prop::collection::vec(token, 0..4)).prop_map(|(code, tokens)| {
        let mut args = vec![code.as_bytes().to_vec()];
        args.extend(tokens);
        join_args(&args)
    })
}

proptest! {
    #[test]
    fn blah_format_is_the_inverse_of_parse(reqid in 1u32.., command in command()) {
        let request = Request::Command { reqid: ReqId(reqid), command: Command::Blah(command) };
        prop_assert_eq!(parse(&format(&request)), Ok(request));
    }

    #[test]
    fn blah_lines_parse_without_panic_and_round_trip(line in plausible_blah_line()) {
        if let Ok(request) = parse(&line) {
            prop_assert_eq!(parse(&format(&request)), Ok(request));
        }
    }

    #[test]
    fn result_lines_have_fixed_field_counts(
        code in any::<i32>(),
        error in text(),
        job_id in prop::option::of(text()),
        status in any::<i32>(),
        ad in prop::option::of(classad()),
    ) {
        let count = |r: &BlahResult| split_args(&r.encode(ReqId(1))).len();
        prop_assert_eq!(count(&BlahResult::Submit { code, error: error.clone(), job_id }), 4);
        prop_assert_eq!(count(&BlahResult::Status { code, error: error.clone(), status, ad: ad.clone() }), 5);
        prop_assert_eq!(count(&BlahResult::Simple { code, error }), 3);
        if let Some(ad) = ad {
            // The ad field unescapes to the ad.
            let line = BlahResult::status(4, ad.clone()).encode(ReqId(1));
            let fields = split_args(&line);
            prop_assert_eq!(ClassAd::parse(&String::from_utf8_lossy(&fields[4])), Ok(ad));
        }
    }
}
