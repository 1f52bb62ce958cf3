//! The real gridmanager conversations (HTCondor 23.9.6, `batch boinc`): every line
//! the gridmanager sent must parse into the expected typed values and
//! format back byte for byte, and every result line the fake GAHP wrote
//! must be what our encoders write for the same content.

use std::path::PathBuf;

use gahp_protocol::classad::{parse_args_v2, parse_env_v2, ClassAd, Value};
use gahp_protocol::gahp::blah::job_status;
use gahp_protocol::gahp::escape::split_args;
use gahp_protocol::gahp::request::{format, parse};
use gahp_protocol::gahp::{BlahCommand, BlahResult, Command, CommandResult, ParseError, ReqId, Request};

/// Every request line the gridmanager sent in the recorded conversations.
const REQUESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../captures/blah-gridmanager-requests.txt");

const PING: &str = "BLAH_PING 2 boinc";

const SUBMIT_1: &str = r#"BLAH_JOB_SUBMIT 3 [\ In\ =\ "stdin.txt";\ Cmd\ =\ "/home/boincuser/t1/job.sh";\ Err\ =\ "job1.err";\ Iwd\ =\ "/home/boincuser/t1";\ Out\ =\ "job1.out";\ gridtype\ =\ "boinc";\ Arguments\ =\ "one\ two'\ 'words\ three";\ Environment\ =\ "BAR=bar'\ 'with'\ 'space\ FOO=foo1";\ GridResource\ =\ "batch\ boinc";\ JobDirectory\ =\ "home_bl_127.0.0.1_9618_vm_2.0_1795253890";\ RequestMemory\ =\ 64;\ TransferInput\ =\ "input.txt";\ TransferOutput\ =\ "out.dat"\ ]"#;

const SUBMIT_2: &str = r#"BLAH_JOB_SUBMIT 4 [\ In\ =\ "/dev/null";\ Cmd\ =\ "/bin/echo";\ Err\ =\ "job3.out";\ Iwd\ =\ "/home/boincuser/t3";\ Out\ =\ "job3.out";\ Queue\ =\ "uppercase_app";\ BoincApp\ =\ "uppercase";\ gridtype\ =\ "boinc";\ Arguments\ =\ "has\ \\"double\\"\ quotes\ and\ single'\ 'quoted\ and\ 8.0";\ GPUNumber\ =\ 1;\ Environment\ =\ "OLD1=a\ OLD2=b";\ BatchProject\ =\ "myproject";\ BatchRuntime\ =\ 3600;\ GridResource\ =\ "batch\ boinc";\ JobDirectory\ =\ "home_bl_127.0.0.1_9618_vm_8.0_1795253953";\ RequestMemory\ =\ 512;\ CERequirements\ =\ BoincPlatform\ ==\ "x86_64-pc-linux-gnu";\ BatchExtraSubmitArgs\ =\ "--foo\ bar";\ TransferOutputRemaps\ =\ "a.txt=b.txt"\ ]"#;

fn blah(line: &str) -> (ReqId, BlahCommand) {
    match parse(line.as_bytes()) {
        Ok(Request::Command { reqid, command: Command::Blah(command) }) => (reqid, command),
        other => panic!("{line}: {other:?}"),
    }
}

fn submitted_ad(line: &str) -> ClassAd {
    match blah(line).1 {
        BlahCommand::JobSubmit { ad } => ad,
        other => panic!("{other:?}"),
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn ping() {
    assert_eq!(blah(PING), (ReqId(2), BlahCommand::Ping { batch_type: "boinc".into() }));
    assert_eq!(format(&parse(PING.as_bytes()).unwrap()), PING.as_bytes());
}

#[test]
fn first_submit() {
    let (reqid, _) = blah(SUBMIT_1);
    assert_eq!(reqid, ReqId(3));
    let ad = submitted_ad(SUBMIT_1);
    assert_eq!(ad.len(), 13);
    assert_eq!(ad.get_str("In"), Some("stdin.txt"));
    assert_eq!(ad.get_str("cmd"), Some("/home/boincuser/t1/job.sh"));
    assert_eq!(ad.get_str("ERR"), Some("job1.err"));
    assert_eq!(ad.get_str("Iwd"), Some("/home/boincuser/t1"));
    assert_eq!(ad.get_str("Out"), Some("job1.out"));
    assert_eq!(ad.get_str("GridType"), Some("boinc"));
    assert_eq!(ad.get_str("GridResource"), Some("batch boinc"));
    assert_eq!(ad.get_str("JobDirectory"), Some("home_bl_127.0.0.1_9618_vm_2.0_1795253890"));
    assert_eq!(ad.get_int("RequestMemory"), Some(64));
    assert_eq!(ad.get_str("TransferInput"), Some("input.txt"));
    assert_eq!(ad.get_str("TransferOutput"), Some("out.dat"));
    assert_eq!(parse_args_v2(ad.get_str("Arguments").unwrap()).unwrap(), s(&["one", "two words", "three"]));
    let env = parse_env_v2(ad.get_str("Environment").unwrap()).unwrap();
    assert_eq!(env, vec![("BAR".to_string(), "bar with space".to_string()), ("FOO".to_string(), "foo1".to_string())]);
    // Order as sent.
    let names: Vec<&str> = ad.iter().map(|(n, _)| n).collect();
    assert_eq!(names[..3], ["In", "Cmd", "Err"]);
    assert_eq!(format(&parse(SUBMIT_1.as_bytes()).unwrap()), SUBMIT_1.as_bytes());
}

#[test]
fn second_submit() {
    let ad = submitted_ad(SUBMIT_2);
    assert_eq!(ad.len(), 19);
    assert_eq!(ad.get_str("Cmd"), Some("/bin/echo"));
    assert_eq!(ad.get_str("In"), Some("/dev/null"));
    assert_eq!(ad.get_str("Out"), ad.get_str("Err"));
    assert_eq!(ad.get_str("Queue"), Some("uppercase_app"));
    assert_eq!(ad.get_str("BoincApp"), Some("uppercase"));
    assert_eq!(ad.get_int("GPUNumber"), Some(1));
    assert_eq!(ad.get_int("BatchRuntime"), Some(3600));
    assert_eq!(ad.get_int("RequestMemory"), Some(512));
    assert_eq!(ad.get_str("BatchProject"), Some("myproject"));
    assert_eq!(ad.get_str("BatchExtraSubmitArgs"), Some("--foo bar"));
    assert_eq!(ad.get_str("TransferOutputRemaps"), Some("a.txt=b.txt"));
    assert_eq!(ad.get("CERequirements"), Some(&Value::Expr(r#"BoincPlatform == "x86_64-pc-linux-gnu""#.into())));
    // `\\"` on the wire: a GAHP-escaped backslash before `"`, i.e. the
    // ClassAd escape `\"`, i.e. a plain `"` in the value.
    let arguments = ad.get_str("Arguments").unwrap();
    assert_eq!(arguments, r#"has "double" quotes and single' 'quoted and 8.0"#);
    assert_eq!(parse_args_v2(arguments).unwrap(), s(&["has", "\"double\"", "quotes", "and", "single quoted", "and", "8.0"]));
    let env = parse_env_v2(ad.get_str("Environment").unwrap()).unwrap();
    assert_eq!(env, vec![("OLD1".to_string(), "a".to_string()), ("OLD2".to_string(), "b".to_string())]);
    assert_eq!(format(&parse(SUBMIT_2.as_bytes()).unwrap()), SUBMIT_2.as_bytes());
}

#[test]
fn status_cancel_refresh() {
    assert_eq!(
        blah("BLAH_JOB_STATUS 4 boinc/20261121/53899527028"),
        (ReqId(4), BlahCommand::JobStatus { job_id: "boinc/20261121/53899527028".into() })
    );
    assert_eq!(
        blah("BLAH_JOB_CANCEL 13 boinc/20261121/53958069184"),
        (ReqId(13), BlahCommand::JobCancel { job_id: "boinc/20261121/53958069184".into() })
    );
    // Not in the recordings (§7.5 [src]).
    assert_eq!(
        blah("BLAH_JOB_REFRESH_PROXY 7 boinc/x/1 /tmp/x509\\ up"),
        (ReqId(7), BlahCommand::JobRefreshProxy { job_id: "boinc/x/1".into(), proxy: PathBuf::from("/tmp/x509 up") })
    );
    assert_eq!(blah("blah_job_status 5 a").1, BlahCommand::JobStatus { job_id: "a".into() });
}

#[test]
fn syntax_errors() {
    for line in [
        "BLAH_PING",
        "BLAH_PING 2",
        "BLAH_PING 0 boinc",
        "BLAH_PING 2 boinc extra",
        "BLAH_JOB_SUBMIT 3",
        "BLAH_JOB_SUBMIT 3 [\\ A\\ =\\ 1\\ ] extra",
        "BLAH_JOB_SUBMIT 3 [\\ A\\ =\\ \\ ]",
        "BLAH_JOB_SUBMIT 3 [\\ A\\ =\\ \"x\\ ]",
        "BLAH_JOB_SUBMIT 3 A\\ =\\ 1",
        "BLAH_JOB_SUBMIT 3 [ A = 1 ]",
        "BLAH_JOB_STATUS 4",
        "BLAH_JOB_STATUS 4 a b",
        "BLAH_JOB_STATUS x a",
        "BLAH_JOB_CANCEL 13",
        "BLAH_JOB_CANCEL 13 a b",
        "BLAH_JOB_REFRESH_PROXY 7 a",
        "BLAH_JOB_REFRESH_PROXY 7 a b c",
    ] {
        assert!(matches!(parse(line.as_bytes()), Err(ParseError::Malformed { .. })), "{line}");
    }
    // Never sent, and not described by the spec: unknown.
    assert!(matches!(parse(b"BLAH_JOB_STATUS_ALL 5"), Err(ParseError::UnknownCommand(_))));
    // Stray bytes are left for the result line, not refused.
    assert_eq!(parse(b"BLAH_JOB_STATUS 4 a\xff").map(|r| format(&r)), Ok("BLAH_JOB_STATUS 4 a\u{FFFD}".as_bytes().to_vec()));
}

fn status_ad(pairs: Vec<(&str, Value)>) -> ClassAd {
    let mut ad = ClassAd::new();
    for (name, value) in pairs {
        ad.insert(name, value);
    }
    ad
}

fn line(result: &BlahResult, reqid: u32) -> String {
    // Through CommandResult, as the daemon writes them.
    String::from_utf8(CommandResult::Blah(result.clone()).encode(ReqId(reqid))).unwrap()
}

#[test]
fn result_lines() {
    assert_eq!(line(&BlahResult::Simple { code: 0, error: "No Error".into() }, 2), r"2 0 No\ Error");
    assert_eq!(line(&BlahResult::submitted("boinc/20261121/53899527028"), 3), r"3 0 No\ error boinc/20261121/53899527028");
    assert_eq!(line(&BlahResult::ok(), 13), r"13 0 No\ error");

    let status = |status, ad| BlahResult::Status { code: 0, error: "No Error".into(), status, ad: Some(ad) };
    let idle = status_ad(vec![("BatchjobId", Value::Str("53899527028".into())), ("JobStatus", Value::Int(1))]);
    assert_eq!(line(&status(job_status::IDLE, idle), 4), r#"4 0 No\ Error 1 [\ BatchjobId\ =\ "53899527028";\ JobStatus\ =\ 1\ ]"#);
    let running = status_ad(vec![
        ("BatchjobId", Value::Str("53899527028".into())),
        ("JobStatus", Value::Int(2)),
        ("WorkerNode", Value::Str("fake-boinc-host".into())),
    ]);
    assert_eq!(
        line(&status(job_status::RUNNING, running), 5),
        r#"5 0 No\ Error 2 [\ BatchjobId\ =\ "53899527028";\ JobStatus\ =\ 2;\ WorkerNode\ =\ "fake-boinc-host"\ ]"#
    );
    let done = status_ad(vec![
        ("BatchjobId", Value::Str("53899527028".into())),
        ("JobStatus", Value::Int(4)),
        ("ExitCode", Value::Int(7)),
        ("WorkerNode", Value::Str("fake-boinc-host".into())),
        ("RemoteWallClockTime", Value::Int(15)),
        ("ExitReason", Value::Str("BOINC fake: exited normally".into())),
    ]);
    assert_eq!(
        line(&status(job_status::COMPLETED, done), 8),
        r#"8 0 No\ Error 4 [\ BatchjobId\ =\ "53899527028";\ JobStatus\ =\ 4;\ ExitCode\ =\ 7;\ WorkerNode\ =\ "fake-boinc-host";\ RemoteWallClockTime\ =\ 15;\ ExitReason\ =\ "BOINC\ fake:\ exited\ normally"\ ]"#
    );

    let refused = BlahResult::Submit { code: 1, error: "fake: submission refused".into(), job_id: None };
    assert_eq!(line(&refused, 3), r"3 1 fake:\ submission\ refused N/A");
    let lookup = BlahCommand::JobStatus { job_id: "boinc/…".into() }.failure("fake: status lookup failed for boinc/…");
    assert_eq!(line(&lookup, 24), r"24 1 fake:\ status\ lookup\ failed\ for\ boinc/… 0 N/A");
}

#[test]
fn status_ads_read_back() {
    let wire = r#"8 0 No\ Error 4 [\ BatchjobId\ =\ "53899527028";\ JobStatus\ =\ 4;\ ExitCode\ =\ 7;\ WorkerNode\ =\ "fake-boinc-host";\ RemoteWallClockTime\ =\ 15;\ ExitReason\ =\ "BOINC\ fake:\ exited\ normally"\ ]"#;
    let fields = split_args(wire.as_bytes());
    assert_eq!(fields.len(), 5);
    let ad = ClassAd::parse(std::str::from_utf8(&fields[4]).unwrap()).unwrap();
    assert_eq!(ad.get_int("jobstatus"), Some(4));
    assert_eq!(ad.get_int("ExitCode"), Some(7));
    assert_eq!(ad.get_str("ExitReason"), Some("BOINC fake: exited normally"));
}

/// Each must parse and format back byte for byte.
#[test]
fn every_request_line_the_gridmanager_sent() {
    let text = std::fs::read_to_string(REQUESTS).expect("the recorded requests are in the repository");
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut blah_lines = 0;
    for line in &lines {
        let request = parse(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        if matches!(request, Request::Command { command: Command::Blah(_), .. }) {
            blah_lines += 1;
        }
        assert_eq!(String::from_utf8(format(&request)).unwrap(), *line);
    }
    assert!(lines.iter().any(|l| l == SUBMIT_1) && lines.iter().any(|l| l == SUBMIT_2), "{lines:#?}");
    assert!(blah_lines >= 8, "{lines:#?}");
}
