//! The real C `boinc_gahp` transcripts: every request line it was sent must
//! parse as the reference understood it (apart from the two bogus ones),
//! and every line it wrote back must be what our encoders write for the
//! same content.

use std::collections::HashMap;
use std::time::Instant;

use bytes::BytesMut;
use gahp_protocol::gahp::escape::split_args;
use gahp_protocol::gahp::request::{format, parse};
use gahp_protocol::gahp::{AsyncCommand, Command, CommandResult, Frame, LineFramer, ParseError, ReqId, Request, ReturnLine, COMMANDS};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../captures/real-boinc");

/// One direction-tagged line of a transcript; a `<` line whose text ends
/// in an escaping backslash continues on the next `<` line (an escaped LF
/// that the recorder split).
enum Entry {
    Sent(String),
    Received(String),
}

fn read_transcript(name: &str) -> Vec<Entry> {
    let path = format!("{DIR}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut entries: Vec<Entry> = Vec::new();
    let mut continues = false;
    for raw in text.lines() {
        // `[   4.00] > BOINC_PING 1`
        let Some((_, rest)) = raw.split_once("] ") else {
            continue;
        };
        if let Some(sent) = rest.strip_prefix("> ") {
            entries.push(Entry::Sent(sent.to_string()));
        } else if let Some(got) = rest.strip_prefix("< ") {
            match entries.last_mut() {
                Some(Entry::Received(prev)) if continues => {
                    prev.push('\n');
                    prev.push_str(got);
                }
                _ => entries.push(Entry::Received(got.to_string())),
            }
            continues = ends_in_escape(got);
        }
    }
    entries
}

fn ends_in_escape(s: &str) -> bool {
    s.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

fn transcripts() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(DIR)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("c-gahp-transcript") && n.ends_with(".txt"))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "{names:?}");
    names
}

#[test]
fn every_request_line_of_the_main_transcript_parses() {
    let mut parsed = 0;
    for entry in read_transcript("c-gahp-transcript.txt") {
        let Entry::Sent(line) = entry else { continue };
        let result = parse(line.as_bytes());
        if line.starts_with("BOINC_BOGUS") || line.starts_with("NOT_A_COMMAND") {
            assert!(matches!(result, Err(ParseError::UnknownCommand(_))), "{line}: {result:?}");
            continue;
        }
        let request = result.unwrap_or_else(|e| panic!("{line}: {e}"));
        // These lines have no escapes, so formatting gives them back (the
        // reference's client sent no job parameters; we always write six).
        let mut expected = line.clone();
        if line.starts_with("BOINC_SUBMIT") {
            expected.push_str(" NULL NULL NULL NULL NULL NULL");
        }
        assert_eq!(String::from_utf8(format(&request)).unwrap(), expected);
        assert_eq!(parse(&format(&request)), Ok(request));
        parsed += 1;
    }
    assert!(parsed > 40, "{parsed}");
}

#[test]
fn specific_requests_of_the_main_transcript() {
    let r = parse(b"BOINC_SUBMIT 2 gbatch_091246 uppercase 2 gjob_091246_a 0 1 /home/condor/work/inputs/in1.txt in gjob_091246_b 2 -cpu_time 1 1 /home/condor/work/inputs/in2.txt in").unwrap();
    let Request::Command { reqid: ReqId(2), command: Command::Boinc(AsyncCommand::Submit(batch)) } = r else { panic!("{r:?}") };
    assert_eq!(batch.jobs.len(), 2);
    assert!(batch.jobs[0].args.is_empty());
    assert_eq!(batch.jobs[1].args, vec!["-cpu_time", "1"]);
    assert_eq!(batch.jobs[1].inputs[0].dst_name, "in");

    let r = parse(b"BOINC_QUERY_BATCHES 33 1795252367 1 gbatch_091246").unwrap();
    assert_eq!(
        r,
        Request::Command {
            reqid: ReqId(33),
            command: Command::Boinc(AsyncCommand::QueryBatches { min_mod_time: 1795252367.0, batches: vec!["gbatch_091246".into()] })
        }
    );
}

/// Rebuilds the `CommandResult` a `<` result line stands for (knowing the
/// request it answers) so that encoding it can be compared with the line.
fn result_of(line: &str, request: &AsyncCommand) -> (ReqId, CommandResult) {
    let args: Vec<String> = split_args(line.as_bytes()).into_iter().map(|a| String::from_utf8(a).unwrap()).collect();
    let reqid = ReqId(args[0].parse().unwrap());
    if args[1] != "NULL" {
        assert_eq!(args.len(), 2, "{line}");
        return (reqid, CommandResult::Error(args[1].clone()));
    }
    let result = match request {
        AsyncCommand::QueryBatches { batches, .. } => {
            let mut rest = args[3..].iter();
            let groups = batches
                .iter()
                .map(|_| {
                    let n: usize = rest.next().unwrap().parse().unwrap();
                    (0..n).map(|_| (rest.next().unwrap().clone(), rest.next().unwrap().clone())).collect()
                })
                .collect();
            assert!(rest.next().is_none(), "{line}");
            CommandResult::Batches { server_time: args[2].parse().unwrap(), groups }
        }
        AsyncCommand::FetchOutput(_) => CommandResult::Output {
            exit_status: args[2].parse().unwrap(),
            elapsed_time: args[3].parse().unwrap(),
            cpu_time: args[4].parse().unwrap(),
        },
        _ => {
            assert_eq!(args.len(), 2, "{line}");
            CommandResult::Ok
        }
    };
    (reqid, result)
}

#[test]
fn our_encoders_write_what_the_reference_wrote() {
    let mut checked = 0;
    for name in transcripts() {
        // Request ids are reused across runs: the latest request wins.
        let mut requests: HashMap<u32, AsyncCommand> = HashMap::new();
        for entry in read_transcript(&name) {
            match entry {
                Entry::Sent(line) => match parse(line.as_bytes()) {
                    Ok(Request::Command { reqid, command: Command::Boinc(command) }) => {
                        requests.insert(reqid.0, command);
                    }
                    Ok(_) => {}
                    Err(_) => assert!(line.contains("BOGUS") || line.contains("NOT_A")),
                },
                Entry::Received(line) => {
                    let expected = line.as_bytes();
                    if line.starts_with(|c: char| c.is_ascii_digit()) {
                        let id: u32 = line.split(' ').next().unwrap().parse().unwrap();
                        let (reqid, result) = result_of(&line, &requests[&id]);
                        assert_eq!(String::from_utf8_lossy(&result.encode(reqid)), line, "{name}");
                    } else if line == "S" {
                        assert_eq!(ReturnLine::Success.encode(), expected);
                    } else if line == "E" {
                        assert_eq!(ReturnLine::Error.encode(), expected);
                    } else if line == "R" {
                        assert_eq!(ReturnLine::Notify.encode(), expected);
                    } else if let Some(n) = line.strip_prefix("S ").and_then(|n| n.parse().ok()) {
                        assert_eq!(ReturnLine::ResultsHeader(n).encode(), expected);
                    } else if line.starts_with("S ASYNC_MODE_OFF") {
                        // Ours is the reference list plus RESPONSE_PREFIX,
                        // the BLAH_* and the BOINC_SEQUENCE_* commands.
                        let mut theirs: Vec<&str> = line.split(' ').skip(1).collect();
                        theirs.push("RESPONSE_PREFIX");
                        theirs.sort();
                        let ours: Vec<&str> =
                            COMMANDS.iter().copied().filter(|c| !c.starts_with("BLAH_") && !c.starts_with("BOINC_SEQUENCE_")).collect();
                        assert_eq!(theirs, ours);
                    } else {
                        // The banner names the other implementation.
                        assert!(line.contains("$GahpVersion: 1.0.2 "), "{line}");
                        continue;
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 200, "{checked}");
}

#[test]
fn examples_from_the_brief() {
    let batches = CommandResult::Batches {
        server_time: 1795252374.6364,
        groups: vec![vec![("gjob_091246_a".into(), "UNSENT".into()), ("gjob_091246_b".into(), "UNSENT".into())]],
    };
    assert_eq!(batches.encode(ReqId(3)), b"3 NULL 1795252374.636400 2 gjob_091246_a UNSENT gjob_091246_b UNSENT");
    let output = CommandResult::Output { exit_status: 0, elapsed_time: 22.033256, cpu_time: 20.06679 };
    assert_eq!(output.encode(ReqId(31)), b"31 NULL 0 22.033256 20.066790");
    let error = CommandResult::error("error querying batch: -1 no batch named nosuchbatch_091246");
    assert_eq!(error.encode(ReqId(10)), &b"10 error\\ querying\\ batch:\\ -1\\ no\\ batch\\ named\\ nosuchbatch_091246"[..]);
}

#[test]
fn a_hundred_thousand_job_submit_parses() {
    let jobs = 100_000;
    let mut line = format!("BOINC_SUBMIT 7 condor#s#worker#1716400000 worker {jobs}");
    for i in 0..jobs {
        line.push_str(&format!(" condor#s#worker#1716400000#{i}.0 2 -n {i} 1 /home/ann/my\\ run/in{i}.dat in.dat"));
    }
    line.push_str(" 1000000000000 NULL NULL NULL 3600 3");

    // Through the framer too, as it arrives: in 64 KiB reads, with CRLF.
    let start = Instant::now();
    let mut framer = LineFramer::new(64 << 20);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in line.as_bytes().chunks(64 * 1024).chain([&b"\r\n"[..]]) {
        buf.extend_from_slice(chunk);
        frames.extend(std::iter::from_fn(|| framer.next_frame(&mut buf)));
    }
    let framed = start.elapsed();
    assert_eq!(frames.len(), 1);
    assert!(frames[0] == Frame::Line(line.as_bytes().to_vec()));

    let start = Instant::now();
    let request = parse(line.as_bytes()).unwrap();
    let parsed = start.elapsed();
    println!("{jobs}-job BOINC_SUBMIT, {} bytes: framed in {framed:?}, parsed in {parsed:?}", line.len());

    let Request::Command { command: Command::Boinc(AsyncCommand::Submit(batch)), .. } = &request else { panic!() };
    assert_eq!(batch.jobs.len(), jobs);
    assert_eq!(batch.jobs[99_999].args[1], "99999");
    assert_eq!(batch.jobs[5].inputs[0].src.to_str(), Some("/home/ann/my run/in5.dat"));
    // Not assert_eq!: a failure would print megabytes.
    assert!(format(&request) == line.as_bytes());
}
