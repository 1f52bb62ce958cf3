//! The BOINC codecs against what a real BOINC server (8.3.0, PHP 8.2) really
//! sent and received: every capture in `captures/real-boinc/` (but
//! the C GAHP's stdio transcripts) is checked here, and a new capture fails
//! this test until it is given an expectation.

use std::panic::{catch_unwind, AssertUnwindSafe};

use gahp_protocol::boinc::reply::*;
use gahp_protocol::boinc::request;
use gahp_protocol::boinc::{BatchInfo, JobState, ReplyError, SubmitJob, SubmitParams, Templates};
use gahp_protocol::Authenticator;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../captures/real-boinc");
const AUTH: &str = "888febac2c12d6e100ca4167792fa466";
const FILE: &str = "1c9478264b7baff41c8f2103d1c1a1bc.txt";

fn auth() -> Authenticator {
    Authenticator::new(AUTH)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(format!("{DIR}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn after<'a>(data: &'a [u8], marker: &str) -> Option<&'a [u8]> {
    let m = marker.as_bytes();
    let at = data.windows(m.len()).position(|w| w == m)?;
    Some(&data[at + m.len()..])
}

/// The reply body of an RPC capture: everything after the marker line, less
/// the recorder's `### (no trailing newline)` note and the newline before it.
fn body(name: &str) -> Vec<u8> {
    let data = read(name);
    let body = after(&data, "### response body (verbatim):\n").unwrap_or_else(|| panic!("{name}: no response body"));
    let body =
        body.strip_suffix(b"\n### (no trailing newline)\n").or_else(|| body.strip_suffix(b"\n### (no trailing newline)")).unwrap_or(body);
    body.to_vec()
}

/// The request XML of an RPC capture (the C client ends it with a newline).
fn request_xml(name: &str) -> String {
    let data = read(name);
    let rest = after(&data, "### POST form field 'request' (multipart/form-data):\n").unwrap_or_else(|| panic!("{name}: no request"));
    let text = String::from_utf8(rest.to_vec()).unwrap();
    let end = text.find("\n### ").unwrap();
    format!("{}\n", &text[..end])
}

/// Headers and body of a `get_output*.php` capture.
fn http_response(name: &str) -> (String, Vec<u8>) {
    let data = read(name);
    let raw = after(&data, "### raw HTTP response (headers + body):\n").unwrap_or_else(|| panic!("{name}: no HTTP response"));
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    (String::from_utf8_lossy(&raw[..split]).into_owned(), raw[split + 4..].to_vec())
}

fn get_url(name: &str) -> String {
    let data = String::from_utf8_lossy(&read(name)).into_owned();
    let line = data.lines().next().unwrap();
    line.strip_prefix("### GET ").unwrap().to_string()
}

fn boinc(msg: &str) -> ReplyError {
    ReplyError::Boinc { num: -1, msg: msg.to_string() }
}

fn fatal_message(e: ReplyError) -> String {
    match e {
        ReplyError::PhpFatal { message } => message,
        other => panic!("not a PHP fatal error: {other:?}"),
    }
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn job(name: &str, status: &str) -> JobState {
    JobState { name: name.into(), status: status.into() }
}

fn uppercase_templates() -> Templates {
    Templates { inputs: names(&["in"]), outputs: names(&["out"]) }
}

fn submit_one(batch_id: i64, job_name: &str, files: Vec<&str>) -> String {
    let jobs = [SubmitJob { name: job_name, args: &[], files }];
    request::submit_batch(&auth(), batch_id, "uppercase", &SubmitParams::default(), &jobs)
}

fn submit_one_with_args(args: &[String]) -> String {
    let jobs = [SubmitJob { name: "j", args, files: vec![FILE] }];
    request::submit_batch(&auth(), 1, "stepper", &SubmitParams::default(), &jobs)
}

/// Batch 10 as `query_batch`/`query_batches` show it while its job runs.
fn batch_10(state: i64, expire_time: f64, jobs: &[&str]) -> BatchInfo {
    BatchInfo {
        id: 10,
        name: "cap_batch_091015".into(),
        app_name: "uppercase".into(),
        state,
        njobs: 1,
        create_time: 1795252215.0,
        expire_time,
        completion_time: 0.0,
        fraction_done: 0.0,
        nerror_jobs: 0,
        jobs: names(jobs),
    }
}

/// Asserts what the codecs make of one capture.
fn check(name: &str) {
    let a = auth();
    let same_request = |built: String| assert_eq!(built, request_xml(name), "request of {name}");
    match name {
        "ping.txt" => {
            assert_eq!(parse_ping(&body(name)), Ok(()));
            same_request(request::ping());
        }
        "ping_empty_element_quirk.txt" => {
            assert_eq!(parse_ping(&body(name)), Err(boinc("can't parse request message: <ping/>")));
            assert_ne!(request::ping(), request_xml(name));
        }
        "bad_command.txt" => {
            for parse in [parse_ping, parse_success, parse_upload_files] {
                assert_eq!(parse(&body(name)), Err(boinc("bad command")));
            }
            assert_eq!(parse_query_batch2(&body(name)), Err(boinc("bad command")));
        }
        "unparseable_request.txt" => {
            assert_eq!(parse_create_batch(&body(name)), Err(boinc("can't parse request message: this is not xml")));
        }

        "get_templates.txt" => {
            assert_eq!(parse_templates(&body(name)), Ok(uppercase_templates()));
            same_request(request::get_templates_for_app(&a, "uppercase"));
        }
        "done_get_templates_by_job_name.txt" => {
            assert_eq!(parse_templates(&body(name)), Ok(uppercase_templates()));
            same_request(request::get_templates_for_job(&a, "cap_job_091015_0"));
        }
        "get_templates_bad_app.txt" => {
            assert_eq!(parse_templates(&body(name)), Err(boinc("app not found: nosuchapp")));
            same_request(request::get_templates_for_app(&a, "nosuchapp"));
        }
        "get_templates_bad_auth.txt" => {
            assert_eq!(parse_templates(&body(name)), Err(boinc("bad authenticator")));
        }
        "get_templates_no_submit_access.txt" => {
            assert_eq!(parse_templates(&body(name)), Err(boinc("no submit access")));
        }

        "create_batch.txt" => {
            assert_eq!(parse_create_batch(&body(name)), Ok(10));
            same_request(request::create_batch(&a, "cap_batch_091015", "uppercase", 1795255815.552967));
        }
        "create_batch_2.txt" => {
            assert_eq!(parse_create_batch(&body(name)), Ok(11));
            same_request(request::create_batch(&a, "cap_abort_091015", "uppercase", 1795255815.552967));
        }
        "create_batch_no_submit_access.txt" => {
            assert_eq!(parse_create_batch(&body(name)), Err(boinc("no submit access")));
        }

        "query_files.txt" => {
            assert_eq!(parse_query_files(&body(name)), Ok(vec![0]));
            same_request(request::query_files(&a, Some(10), &names(&[FILE])));
        }
        "query_files_present_no_batch.txt" => {
            assert_eq!(parse_query_files(&body(name)), Ok(vec![1]));
            let files = names(&[FILE, "00000000000000000000000000000000.txt"]);
            same_request(request::query_files(&a, None, &files));
        }
        "query_files_after_upload.txt" => {
            let e = parse_query_files(&body(name)).unwrap_err();
            assert!(e.is_duplicate_entry(), "{e:?}");
            assert_eq!(
                fatal_message(e),
                "Uncaught mysqli_sql_exception: Duplicate entry '7-10' for key 'job_file_id' in \
                 /home/boincadm/projects/boinctest/html/inc/db_conn.inc:67"
            );
            same_request(request::query_files(&a, Some(10), &names(&[FILE])));
        }
        "query_files_bad_filename.txt" => {
            assert_eq!(parse_query_files(&body(name)), Err(boinc("bad filename")));
            assert!(!request::phys_name_ok("../etc/passwd"));
            same_request(request::query_files(&a, None, &names(&["../etc/passwd"])));
        }

        "upload_files.txt" => {
            assert_eq!(parse_upload_files(&body(name)), Ok(()));
            assert!(request::phys_name_ok(FILE));
            same_request(request::upload_files(&a, 10, &names(&[FILE])));
        }
        "upload_files_already_present.txt" => {
            let e = parse_upload_files(&body(name)).unwrap_err();
            assert!(e.is_duplicate_entry(), "{e:?}");
            assert!(fatal_message(e).contains(&format!("Duplicate entry '{FILE}' for key 'jf_name'")));
            same_request(request::upload_files(&a, 0, &names(&[FILE])));
        }
        "upload_files_count_mismatch.txt" => {
            assert_eq!(parse_upload_files(&body(name)), Err(boinc("# of uploaded files (1) doesn't agree with request (2)")));
            same_request(request::upload_files(&a, 0, &names(&[FILE, &format!("x{FILE}")])));
        }
        // PHP's limits (issue 19): nothing stored, the daemon can tell which.
        "upload_files_upload_max_filesize.txt" => {
            let msg = "big.txt upload failed because: The uploaded file exceeds upload_max_filesize of php.ini.";
            assert_eq!(parse_upload_files(&body(name)), Err(boinc(msg)));
            assert_eq!(upload_refusal(-1, msg), Some(UploadRefusal::FileTooBig { filename: "big.txt".into() }));
            same_request(request::upload_files(&a, 0, &names(&["ee16026ec72e444903bd59cef4713c3c.txt"])));
        }
        "upload_files_post_max_size.txt" | "upload_files_post_max_size_plus_one.txt" => {
            // The body dropped whole: warnings, then the script's "no request".
            let e = parse_upload_files(&body(name)).unwrap_err();
            assert_eq!(e, boinc("can't parse request message:"));
            let ReplyError::Boinc { num, msg } = e else { unreachable!() };
            assert_eq!(upload_refusal(num, &msg), Some(UploadRefusal::BodyDropped));
        }
        "upload_files_post_max_size_exactly.txt" => {
            assert_eq!(parse_upload_files(&body(name)), Ok(()));
        }
        "upload_files_max_file_uploads.txt" => {
            let msg = "# of uploaded files (20) doesn't agree with request (21)";
            assert_eq!(parse_upload_files(&body(name)), Err(boinc(msg)));
            assert_eq!(upload_refusal(-1, msg), Some(UploadRefusal::TooManyFiles { kept: 20, sent: 21 }));
            assert_eq!(request_xml(name).matches("<phys_name>").count(), 21);
        }
        "upload_files_immutability_violation.txt" => {
            assert_eq!(parse_upload_files(&body(name)), Err(boinc(&format!("file immutability violation for {FILE}"))));
        }

        "submit_batch.txt" => {
            assert_eq!(parse_submit_batch(&body(name)), Ok(10));
            same_request(submit_one(10, "cap_job_091015_0", vec![FILE]));
        }
        "submit_batch_2.txt" => {
            assert_eq!(parse_submit_batch(&body(name)), Ok(11));
            same_request(submit_one(11, "cap_abortjob_091015_0", vec![FILE]));
        }
        "submit_batch_not_owner_or_bad_batch.txt" => {
            assert_eq!(parse_submit_batch(&body(name)), Err(boinc("no batch 999999")));
        }
        "submit_batch_raw_single_quote.txt" => {
            // create_work's unescaped SQL insert of xml_doc.
            let Err(ReplyError::Boinc { num: -1, msg }) = parse_submit_batch(&body(name)) else { panic!("not a BOINC error") };
            assert!(msg.starts_with("create_work failed: Database error: You have an error in your SQL syntax"), "{msg}");
            assert!(msg.contains("near 'two words' gamma\n</command_line>\n"), "{msg}");
        }
        "submit_batch_raw_double_quote.txt" => {
            // The `"` ended the PHP's wrapper: `two` was read as an input.
            let Err(ReplyError::Boinc { num: -1, msg }) = parse_submit_batch(&body(name)) else { panic!("not a BOINC error") };
            assert!(msg.starts_with("create_work failed: md5_file: can't open ") && msg.contains("/two\n"), "{msg}");
        }
        "submit_batch_raw_backslash.txt" => assert_eq!(parse_submit_batch(&body(name)), Ok(7)),
        "submit_batch_char_refs.txt" => {
            assert_eq!(parse_submit_batch(&body(name)), Ok(9));
            // The daemon writes these arguments as the request that worked
            // did (it ends with two probes of what cannot be carried).
            let args: Vec<String> = [
                "alpha",
                "two words",
                "it's here",
                "tab\there",
                "line\nbreak",
                "na\u{ef}ve \u{65e5}\u{672c}",
                "back\\slash",
                "amp&er",
                "lt<",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            let words = gahp_protocol::boinc::command_line::quote_args(&args).unwrap();
            let built = submit_one_with_args(&words);
            let line = |xml: &str| xml.split("<command_line>").nth(1).unwrap().split("</command_line>").next().unwrap().to_string();
            let (built, sent) = (line(&built), line(&request_xml(name)));
            assert!(sent.starts_with(&format!("{built} ")), "{built}\n{sent}");
        }
        "submit_batch_wrong_nfiles.txt" => {
            assert_eq!(parse_submit_batch(&body(name)), Err(boinc("wrong # of input files for job 0: need 1, got 0")));
            same_request(submit_one(0, "cap_job_091015_0", vec![]));
        }

        "query_batch2.txt" => {
            let s = parse_query_batch2(&body(name)).unwrap();
            assert_eq!(s.server_time, 1795252215.6335);
            assert_eq!(s.batches, [vec![job("cap_job_091015_0", "UNSENT")]]);
            same_request(request::query_batch2(&a, 0.0, &names(&["cap_batch_091015"])));
        }
        "done_query_batch2.txt" => {
            let s = parse_query_batch2(&body(name)).unwrap();
            assert_eq!(s.server_time, 1795252357.6514);
            assert_eq!(s.batches, [vec![job("cap_job_091015_0", "DONE")]]);
            same_request(request::query_batch2(&a, 0.0, &names(&["cap_batch_091015"])));
        }
        "query_batch2_after_abort.txt" => {
            let s = parse_query_batch2(&body(name)).unwrap();
            assert_eq!(s.server_time, 1795252215.6818);
            assert_eq!(s.batches, [vec![job("cap_abortjob_091015_0", "ERROR")]]);
            same_request(request::query_batch2(&a, 0.0, &names(&["cap_abort_091015"])));
        }
        "query_batch2_no_such.txt" => {
            assert_eq!(parse_query_batch2(&body(name)), Err(boinc("no batch named nosuchbatch")));
            same_request(request::query_batch2(&a, 0.0, &names(&["nosuchbatch"])));
        }

        "done_query_completed_job.txt" => {
            let j = parse_query_completed_job(&body(name)).unwrap();
            assert_eq!((j.error_mask, j.canonical_resultid, j.error_resultid, j.exit_status), (0, 5, 0, 0));
            assert_eq!((j.elapsed_time, j.cpu_time), (22.048841, 20.04153));
            assert!(j.stderr_out.starts_with("<core_client_version>7.20.5</core_client_version>\n<![CDATA[\n<stderr_txt>\n"));
            assert!(j.stderr_out.contains("called boinc_finish(0)"));
            assert!(j.stderr_out.ends_with("</stderr_txt>\n]]>"), "{:?}", j.stderr_out);
            same_request(request::query_completed_job(&a, "cap_job_091015_0"));
        }
        "query_completed_job_not_done.txt" | "query_completed_job_aborted.txt" => {
            let e = parse_query_completed_job(&body(name)).unwrap_err();
            assert!(!e.is_duplicate_entry());
            let msg = fatal_message(e);
            assert!(msg.starts_with("Uncaught mysqli_sql_exception: You have an error in your SQL syntax"), "{msg}");
        }
        "query_completed_job_char_refs.txt" => {
            // What the app of submit_batch_char_refs.txt saw as its argv.
            let job = parse_query_completed_job(&body(name)).unwrap();
            for want in
                ["argv[2]=two words\n", "argv[3]=it's here\n", "argv[4]=tab\there\n", "argv[5]=line\nbreak\n", "argv[7]=back\\slash\n"]
            {
                assert!(job.stderr_out.contains(want), "{want:?} in {}", job.stderr_out);
            }
            assert!(job.stderr_out.contains("argv[8]=amp&er\nargv[9]=lt<\n"), "{}", job.stderr_out);
            // `''` did not close: one word to the end of the line.
            assert!(job.stderr_out.contains("argv[10]=' x\u{7f}y \n"), "{}", job.stderr_out);
        }
        "query_completed_job_no_such.txt" => {
            assert_eq!(parse_query_completed_job(&body(name)), Err(boinc("no such job")));
            same_request(request::query_completed_job(&a, "nosuchjob"));
        }

        "abort_jobs.txt" => {
            assert_eq!(parse_success(&body(name)), Ok(()));
            same_request(request::abort_jobs(&a, &names(&["cap_abortjob_091015_0"])));
        }
        "abort_jobs_no_such.txt" => {
            assert_eq!(parse_success(&body(name)), Err(boinc("no job nosuchjob")));
            same_request(request::abort_jobs(&a, &names(&["nosuchjob"])));
        }
        "retire_batch.txt" => {
            assert_eq!(parse_success(&body(name)), Ok(()));
            same_request(request::retire_batch(&a, "cap_abort_091015"));
        }
        "retire_batch_no_such.txt" => {
            assert_eq!(parse_success(&body(name)), Err(boinc("no such batch")));
            same_request(request::retire_batch(&a, "nosuchbatch"));
        }
        "set_expire_time.txt" => {
            assert_eq!(parse_success(&body(name)), Ok(()));
            same_request(request::set_expire_time(&a, "cap_batch_091015", 1795263015.552967));
        }
        "set_expire_time_no_such.txt" => {
            assert_eq!(parse_success(&body(name)), Err(boinc("no such batch")));
        }

        "query_batch.txt" => {
            let b = parse_query_batch(&body(name)).unwrap();
            assert_eq!(b, batch_10(1, 1795255815.553, &["cap_job_091015_0"]));
        }
        "query_batch_by_name.txt" => {
            let b = parse_query_batch(&body(name)).unwrap();
            assert_eq!(b, batch_10(1, 1795255815.553, &["cap_job_091015_0"]));
            same_request(request::query_batch_by_name(&a, "cap_batch_091015"));
        }
        "done_query_batch.txt" => {
            let b = parse_query_batch(&body(name)).unwrap();
            let done =
                BatchInfo { completion_time: 1795252357.0, fraction_done: 1.0, ..batch_10(2, 1795263015.553, &["cap_job_091015_0"]) };
            assert_eq!(b, done);
        }
        "query_batch_no_such.txt" => {
            assert_eq!(parse_query_batch(&body(name)), Err(boinc("no such batch")));
            same_request(request::query_batch_by_id(&a, 999999));
        }

        "query_batches.txt" | "query_batches_after_retire.txt" | "query_batches_get_cpu_time.txt" | "done_query_batches.txt" => {
            let batches = parse_query_batches(&body(name)).unwrap();
            let first = &batches[0];
            assert_eq!(
                (first.id, first.name.as_str(), first.app_name.as_str(), first.state, first.njobs),
                (1, "cap_batch_090446", "uppercase", 0, 0)
            );
            assert_eq!((first.create_time, first.expire_time), (1795251887.0, 1795262687.0341));
            assert!(batches.iter().all(|b| b.id > 0 && b.jobs.is_empty()));
            if name != "query_batches_get_cpu_time.txt" {
                same_request(request::query_batches(&a));
            }
            let ids: Vec<i64> = batches.iter().map(|b| b.id).collect();
            let expected: &[i64] = match name {
                "done_query_batches.txt" => &[1, 3, 5, 9, 10, 14],
                _ => &[1, 3, 5, 9, 10],
            };
            assert_eq!(ids, expected);
            assert_eq!(batches[4].name, "cap_batch_091015");
        }
        "query_batches_no_authenticator.txt" => {
            assert_eq!(parse_query_batches(&body(name)), Err(boinc("no authenticator")));
        }
        "query_batches_no_file_access.txt" => {
            assert_eq!(parse_query_batches(&body(name)), Err(boinc("no file access")));
        }

        // RPCs the GAHP does not use: nothing in them passes for a success.
        "query_job.txt" | "done_query_job.txt" | "estimate_batch.txt" => {
            assert!(matches!(parse_success(&body(name)), Err(ReplyError::Malformed(_))));
            assert!(matches!(parse_submit_batch(&body(name)), Err(ReplyError::Malformed(_))));
        }

        // get_output.php?cmd=workunit_file, the GAHP's download.
        "get_output_workunit_file.txt" => {
            let (headers, file) = http_response(name);
            assert!(headers.contains("\r\nContent-Disposition: attachment;"));
            assert_eq!(file, b"HELLO BOINC 091015\n");
            // The capture was made with curl and a raw job name; the C client
            // escapes all but letters and digits.
            let url = request::output_url("http://127.0.0.1/boinctest/", &a, "cap_job_091015_0", 0);
            assert_eq!(url.replace("%5F", "_"), get_url(name));
        }
        "get_output_workunit_file_bad_auth.txt" => {
            let (headers, page) = http_response(name);
            assert!(!headers.contains("Content-Disposition"));
            assert_eq!(download_error(&page), "ERROR: bad authenticator");
        }
        "get_output_no_such_wu.txt" => {
            assert_eq!(download_error(&http_response(name).1), "ERROR: no workunit nosuch");
        }
        "get_output_workunit_file_bad_num.txt" => {
            // Content-Disposition and all, but PHP warnings instead of a file.
            let msg = download_error(&http_response(name).1);
            assert!(msg.starts_with("unexpected reply: Warning: Undefined array key 5 in "), "{msg}");
            assert!(msg.len() <= 300);
        }
        // Other download scripts and commands (not used by the GAHP).
        "get_output_result_file.txt" | "get_output3_with_auth_cookie.txt" => {
            let (headers, file) = http_response(name);
            assert!(headers.contains("\r\nContent-Disposition: attachment;"));
            assert_eq!(file, b"HELLO BOINC 091015\n");
        }
        "get_output_batch_files_zip.txt" | "get_output_workunit_files_zip.txt" | "get_output3_batch_zip.txt" => {
            let (_, zip) = http_response(name);
            assert!(zip.starts_with(b"PK"));
            assert_eq!(download_error(&zip), format!("unexpected reply of {} bytes", zip.len()));
        }
        "get_output3_no_cookie.txt" => {
            assert_eq!(download_error(&http_response(name).1), "empty reply");
        }
        "get_output3_with_auth_cookie_show.txt" => {
            assert_eq!(download_error(&http_response(name).1), "unexpected reply: HELLO BOINC 091015");
        }

        _ => panic!("no expectation for this capture"),
    }
}

#[test]
fn every_capture() {
    let mut files: Vec<String> = std::fs::read_dir(DIR)
        .unwrap_or_else(|e| panic!("{DIR}: {e}"))
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| !name.starts_with("c-gahp"))
        .collect();
    files.sort();
    assert!(files.len() >= 60, "only {} captures found", files.len());
    let failed: Vec<String> = files.iter().filter(|name| catch_unwind(AssertUnwindSafe(|| check(name))).is_err()).cloned().collect();
    assert!(failed.is_empty(), "failed captures: {failed:?}");
}

/// The C GAHP's own requests, as the server logged them: ours are the same
/// but for the trailing space the C GAHP leaves in `<command_line>`.
#[test]
fn c_gahp_submit_with_arguments() {
    let log = String::from_utf8(read("c-gahp-server-side-requests.log")).unwrap();
    let start = log.find("<submit_batch>").unwrap();
    let end = start + log[start..].find("</submit_batch>\n").unwrap() + "</submit_batch>\n".len();
    let c_request = &log[start..end];

    let args = names(&["-cpu_time", "1"]);
    let jobs = [
        SubmitJob { name: "gjob_091246_a", args: &[], files: vec!["3be0d1389528fb49d022c144c4e96ef6.txt"] },
        SubmitJob { name: "gjob_091246_b", args: &args, files: vec!["6395eb8cd57adb4fcabd813d652756d8.txt"] },
    ];
    let ours = request::submit_batch(&auth(), 15, "uppercase", &SubmitParams::default(), &jobs);
    assert_eq!(ours, c_request.replace("-cpu_time 1 </command_line>", "-cpu_time 1</command_line>"));
}

#[test]
fn c_gahp_requests_match() {
    let log = String::from_utf8(read("c-gahp-server-side-requests.log")).unwrap();
    let a = auth();
    for built in [
        request::create_batch(&a, "gbatch_091246", "uppercase", 1795255973.0),
        request::abort_jobs(&a, &names(&["gabortjob_091246"])),
        request::get_templates_for_job(&a, "gabortjob_091246"),
        request::query_completed_job(&a, "gjob_091246_b"),
        request::retire_batch(&a, "gabort_091246"),
        request::set_expire_time(&a, "gbatch_091246", 1795259566.0),
        request::query_batch2(&a, 1795252367.0, &names(&["gbatch_091246"])),
    ] {
        assert!(log.contains(&format!(">\n{built}\n</submit_rpc_handler>")), "not in the log:\n{built}");
    }
}
