//! Every BOINC_* command end to end: the real daemon over pipes against
//! the simulated project on loopback.

use crate::common::*;
use std::path::PathBuf;

#[test]
fn a_batch_goes_through_submit_query_fetch_retire() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);

    let files = inputs(dir.path(), 3, "flow");
    let mut batch = uppercase_batch("condor#sub#uppercase#1", &files);
    // The six trailing parameters, as the gridmanager sends them (strings).
    batch.params.rsc_fpops_est = ParamValue::Value(1e9);
    batch.params.delay_bound = ParamValue::Value(3600.0);
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    let r = g
        .call(|id| async_cmd(id, AsyncCommand::SetLease { batch: "condor#sub#uppercase#1".into(), lease_time: 4_102_444_800.0 }), WAIT)
        .unwrap();
    assert_eq!(r, ["NULL"]);

    // First query: every job, with a server time that parses back.
    let r = g
        .call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["condor#sub#uppercase#1".into()] }), WAIT)
        .unwrap();
    assert_eq!(r[0], "NULL");
    let server_time: f64 = r[1].parse().unwrap();
    assert!(r[1].split_once('.').unwrap().1.len() == 6, "server_time as %f: {}", r[1]);
    assert_eq!(r[2], "3");
    let jobs = wait_finished(&mut g, "condor#sub#uppercase#1");
    assert!(jobs.iter().all(|(_, s)| s == "DONE"), "{jobs:?}");

    // A partial query from a time after everything changed reports nothing new.
    let later = server_time + 3600.0 * 24.0;
    let r = g
        .call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: later, batches: vec!["condor#sub#uppercase#1".into()] }), WAIT)
        .unwrap();
    assert_eq!(&r[0], "NULL");
    assert_eq!(&r[2], "0", "{r:?}");

    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // ALL: every output under its logical name; stderr appended.
    std::fs::write(out.join("err0"), "before\n").unwrap();
    let fetch = FetchOutput {
        job_name: "condor#sub#uppercase#1#0.0".into(),
        dir: out.clone(),
        stderr_file: PathBuf::from("err0"),
        mode: FetchMode::All,
        specs: vec![],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r.len(), 4, "NULL exit elapsed cpu: {r:?}");
    assert_eq!(r[0], "NULL");
    assert_eq!(r[1], "0");
    r[2].parse::<f64>().unwrap();
    r[3].parse::<f64>().unwrap();
    assert_eq!(std::fs::read_to_string(out.join("out")).unwrap(), "INPUT 0 OF FLOW\n");
    let err = std::fs::read_to_string(out.join("err0")).unwrap();
    assert!(err.starts_with("before\n") && err.contains("<stderr_txt>"), "{err}");

    // SOME with a rename to a relative and to an absolute destination.
    let abs = dir.path().join("abs_out.txt");
    for (i, dst) in [(1, PathBuf::from("renamed.txt")), (2, abs.clone())] {
        let fetch = FetchOutput {
            job_name: format!("condor#sub#uppercase#1#{i}.0"),
            dir: out.clone(),
            stderr_file: PathBuf::from("/dev/null"),
            mode: FetchMode::Some,
            specs: vec![OutputSpec { src: "out".into(), dst }],
        };
        let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
        assert_eq!(r[0], "NULL", "{r:?}");
    }
    assert_eq!(std::fs::read_to_string(out.join("renamed.txt")).unwrap(), "INPUT 1 OF FLOW\n");
    assert_eq!(std::fs::read_to_string(&abs).unwrap(), "INPUT 2 OF FLOW\n");
    assert!(std::fs::read_dir(&out).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().ends_with(".part")), "no temp files left");

    // SOME naming more files than the template has.
    let fetch = FetchOutput {
        job_name: "condor#sub#uppercase#1#1.0".into(),
        dir: out.clone(),
        stderr_file: PathBuf::from("/dev/null"),
        mode: FetchMode::Some,
        specs: vec![OutputSpec { src: "out".into(), dst: "a".into() }, OutputSpec { src: "x".into(), dst: "b".into() }],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r, ["too many output files specified submit:1 template:1"]);

    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "condor#sub#uppercase#1".into() }), WAIT).unwrap(), ["NULL"]);
}

#[test]
fn a_zip_output_is_extracted_safely() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 1, "zip");
    let mut batch = uppercase_batch("zipbatch", &files);
    batch.app_name = "zipper".into();
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    wait_finished(&mut g, "zipbatch");
    let out = dir.path().join("zipout");
    std::fs::create_dir_all(&out).unwrap();
    let fetch = FetchOutput {
        job_name: "zipbatch#0.0".into(),
        dir: out.clone(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::All,
        specs: vec![],
    };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r[0], "NULL", "{r:?}");
    let names: Vec<String> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(names.len() >= 2, "entries extracted: {names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".zip")), "the zip is removed: {names:?}");
}

#[test]
fn abort_errors_and_boinc_errors_are_reported_in_the_result() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 1, "abort");
    let mut batch = uppercase_batch("abortme", &files);
    batch.jobs[0].args = vec!["--sleep-ms".into(), "600000".into()];
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::AbortJobs { jobs: vec!["abortme#0.0".into()] }), WAIT).unwrap(), ["NULL"]);
    let jobs = wait_finished(&mut g, "abortme");
    assert_eq!(jobs, [("abortme#0.0".to_string(), "ERROR".to_string())]);

    let r = g.call(|id| async_cmd(id, AsyncCommand::AbortJobs { jobs: vec!["nosuchjob".into()] }), WAIT).unwrap();
    assert_eq!(r, ["abort_jobs() returned -1 no job nosuchjob"]);
    let r = g.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "nosuchbatch".into() }), WAIT).unwrap();
    assert_eq!(r, ["retire_batch() returned -1 no such batch"]);
    let r = g.call(|id| async_cmd(id, AsyncCommand::SetLease { batch: "nosuchbatch".into(), lease_time: 1.0 }), WAIT).unwrap();
    assert_eq!(r, ["set_lease() returned -1 no such batch"]);
    let r = g
        .call(
            |id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["abortme".into(), "nosuchbatch".into()] }),
            WAIT,
        )
        .unwrap();
    assert_eq!(r, ["error querying batch: -1 no batch named nosuchbatch"]);
    let mut bad_app = uppercase_batch("badapp", &files);
    bad_app.app_name = "nosuchapp".into();
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(bad_app)), WAIT).unwrap();
    assert_eq!(r, ["error getting templates: -1 app not found: nosuchapp"]);
    let fetch =
        FetchOutput { job_name: "nosuchjob".into(), dir: dir.path().into(), stderr_file: "x".into(), mode: FetchMode::All, specs: vec![] };
    let r = g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap();
    assert_eq!(r, ["error getting templates: -1 job not found: nosuchjob"]);
    // Nothing is retried after a BOINC error.
    assert_eq!(sim.calls("submit_rpc_handler.php:retire_batch"), 1);
    // One log line per failed job, with the HTCondor id its name carries.
    let log = log_text(dir.path());
    assert!(
        log.contains("submission failed: error getting templates: -1 app not found: nosuchapp condor_job=0.0 boinc_batch=badapp boinc_job=badapp#0.0"),
        "{log}"
    );
    assert!(
        log.contains("fetching the job's outputs failed: error getting templates: -1 job not found: nosuchjob condor_job=unknown boinc_job=nosuchjob"),
        "{log}"
    );
}

#[test]
fn submit_input_errors_are_clear() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let mut batch = uppercase_batch("missing", &[dir.path().join("does-not-exist.txt")]);
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(batch.clone())), WAIT).unwrap();
    assert!(r[0].starts_with("error processing input files: -108 can't read input file") && r[0].contains("does-not-exist.txt"), "{r:?}");
    assert!(sim.batches_named("missing").is_empty(), "no empty batch left behind");

    let files = inputs(dir.path(), 1, "param");
    batch = uppercase_batch("badparam", &files);
    batch.params.rsc_memory_bound = ParamValue::Invalid("lots".into());
    let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap();
    assert_eq!(r, ["invalid job parameter rsc_memory_bound: 'lots' is not a number"]);

    let empty = SubmitBatch { batch_name: "empty".into(), app_name: "uppercase".into(), jobs: vec![], params: JobParams::default() };
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(empty)), WAIT).unwrap(), ["no jobs"]);
}

#[test]
fn a_hundred_new_input_files_go_up_in_calls_of_twenty() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 100, "many");
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("many", &files))), WAIT).unwrap(), ["NULL"]);
    assert_eq!(sim.calls("job_file.php:upload_files"), 5);
    assert_eq!(sim.calls("job_file.php:query_files"), 1);
    let b = &sim.batches_named("many")[0];
    assert_eq!(sim.jobs_of(b["id"].as_i64().unwrap()).len(), 100);
    // Same content under another path and name: deduplicated by content name.
    let copy = dir.path().join("copy_of_0.txt");
    std::fs::copy(&files[0], &copy).unwrap();
    assert_eq!(
        g.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("again", &[files[0].clone(), copy]))), WAIT).unwrap(),
        ["NULL"]
    );
    assert_eq!(sim.calls("job_file.php:upload_files"), 5, "nothing new to upload");
    // The app's templates were asked for once: the second submit, within
    // the period, used the first one's get_templates.
    assert_eq!(sim.calls("submit_rpc_handler.php:get_templates"), 1);
}

#[test]
fn a_huge_submit_line_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    // Its submit_batch request is ~15 MB: a stock PHP (post_max_size 8M)
    // would drop it.
    let sim = Sim::start_without_php_limits(dir.path());
    let mut g = ready_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 1, "huge");
    let mut batch = uppercase_batch("huge", &files);
    let job = batch.jobs[0].clone();
    batch.jobs = (0..100_000).map(|i| JobSpec { name: format!("huge#{i}.0"), ..job.clone() }).collect();
    let line = gahp_protocol::gahp::request::format(&async_cmd(2, AsyncCommand::Submit(batch)));
    assert!(line.len() > 5_000_000);
    let t = std::time::Instant::now();
    assert_eq!(g.command_line(&line).unwrap(), ["S"]);
    eprintln!("return line for a {} byte submit after {:?}", line.len(), t.elapsed());
    let r = g.wait_result(2, std::time::Duration::from_secs(240)).unwrap();
    assert_eq!(r, ["NULL"]);
    eprintln!("100,000-job batch submitted in {:?}", t.elapsed());
}

/// A ping is how the gridmanager probes a resource: a project that refuses
/// connections is reported down in seconds, not after the retries (and
/// the 270 s deadline) of an ordinary command.
#[test]
fn a_ping_of_a_refused_port_is_answered_at_once() {
    // A loopback port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut g = gahp(dir.path());
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let select = Request::SelectProject { url: format!("http://127.0.0.1:{port}/"), authenticator: Authenticator::new("k") };
    assert_eq!(g.command(&select).unwrap(), ["S"]);
    let started = std::time::Instant::now();
    let r = g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap();
    let took = started.elapsed();
    assert!(r[0].starts_with("ping_server returned -184"), "{r:?}");
    assert!(r[0].contains("1 attempt"), "one attempt only: {r:?}");
    assert!(took < std::time::Duration::from_secs(10), "answered after {took:?}");
}

/// Arguments reach the app as the gridmanager sent them (the app logs its
/// argv to stderr), or the submit is refused before anything is created.
#[test]
fn arguments_arrive_exactly_or_the_submit_is_refused() {
    const ARGS: &[&str] = &[
        "one",
        "two words",
        "it's",
        "it's here",
        "say \"hi\"",
        "back\\slash",
        "a&b<c>",
        "tab\there",
        "line\nbreak",
        "na\u{ef}ve \u{65e5}\u{672c}",
    ];
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 1, "args");
    let mut batch = uppercase_batch("args", &files);
    batch.jobs[0].args = ARGS.iter().map(|a| a.to_string()).collect();
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);
    // Stored as a real server stored it: quotes, backslash and XML's
    // specials as character references, which the client unescapes.
    assert_eq!(
        sim.jobs_of(sim.batches_named("args")[0]["id"].as_i64().unwrap())[0]["command_line"],
        "one &#39;two words&#39; it&#39;s &#34;it&#39;s here&#34; &#39;say &#34;hi&#34;&#39; back&#92;slash a&amp;b&lt;c&gt; \
         &#39;tab&#9;here&#39; &#39;line&#10;break&#39; &#39;na\u{ef}ve \u{65e5}\u{672c}&#39;"
    );
    assert_eq!(wait_finished(&mut g, "args"), [("args#0.0".to_string(), "DONE".to_string())]);
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let fetch = FetchOutput {
        job_name: "args#0.0".into(),
        dir: out.clone(),
        stderr_file: PathBuf::from("err"),
        mode: FetchMode::All,
        specs: vec![],
    };
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap()[0], "NULL");
    let err = std::fs::read_to_string(out.join("err")).unwrap();
    assert!(err.contains(&format!("argc {}", ARGS.len() + 1)), "{err}");
    for a in ARGS {
        assert!(err.contains(&format!("ignoring unknown argument {a:?}\n")), "{a:?} arrived whole: {err}");
    }

    // What BOINC cannot group: an error result naming the argument; no batch.
    for (args, why) in [
        (vec!["alpha", "it's \"here\""], "argument 2 (\"it's \\\"here\\\"\") can't be passed to a BOINC app: it must be quoted"),
        (vec!["alpha", ""], "argument 2 (\"\") can't be passed to a BOINC app: it is empty"),
    ] {
        let mut batch = uppercase_batch("refused", &files);
        batch.jobs[0].args = args.iter().map(|a| a.to_string()).collect();
        let r = g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].starts_with(&format!("error submitting jobs: job refused#0.0: {why}")), "{r:?}");
    }
    assert!(sim.batches_named("refused").is_empty(), "nothing was created");
}

/// A status line of many chunks (the daemon renders it 64 KiB at a time as
/// it writes it) is, byte for byte, the line of its fields encoded whole:
/// every job in order, nothing doubled or lost at a chunk's edge.
#[test]
fn a_large_status_line_is_written_whole_and_exact() {
    use gahp_protocol::gahp::escape::split_args;
    use gahp_protocol::gahp::CommandResult;
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let input = inputs(dir.path(), 1, "big").remove(0);
    let names: Vec<String> = (0..8000).map(|k| format!("streamed#status#{k}.0")).collect();
    let batch = SubmitBatch {
        batch_name: "streamed".into(),
        app_name: "uppercase".into(),
        jobs: names
            .iter()
            .map(|n| JobSpec { name: n.clone(), args: vec![], inputs: vec![InputFile { src: input.clone(), dst_name: "in".into() }] })
            .collect(),
        params: JobParams::default(),
    };
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap(), ["NULL"]);

    let id = g.reqid();
    g.submit_async(&async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec!["streamed".into()] })).unwrap();
    let until = std::time::Instant::now() + WAIT;
    while g.read_line_within(WAIT).unwrap() != b"R" {
        assert!(std::time::Instant::now() < until);
    }
    g.send_raw(b"RESULTS\r\n").unwrap();
    assert_eq!(g.read_line().unwrap(), b"S 1");
    let line = g.read_line_within(WAIT).unwrap();
    assert!(line.len() > 3 * (64 << 10), "{} bytes: not several chunks", line.len());

    let fields: Vec<String> = split_args(&line).into_iter().map(|f| String::from_utf8(f).unwrap()).collect();
    assert_eq!(fields[0], id.to_string());
    assert_eq!(fields[1], "NULL");
    assert_eq!(fields[3], "8000");
    let jobs: Vec<(String, String)> = fields[4..].chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
    assert_eq!(jobs.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), names);
    assert!(jobs.iter().all(|(_, s)| ["UNSENT", "IN_PROGRESS", "DONE", "ERROR"].contains(&s.as_str())), "{jobs:?}");
    let whole = CommandResult::Batches { server_time: fields[2].parse().unwrap(), groups: vec![jobs] }.encode(ReqId(id));
    assert_eq!(line, whole);
}
