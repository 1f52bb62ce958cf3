//! The built-in `runner` app end to end (docs/runner.md): a job's own
//! script and its zip staged and submitted over HTTP, run by a simulated
//! host, `condor_out.zip` fetched through get_output.php; the job's bounds
//! (the runner's template has none) and the time limit they set.

use std::io::{Read, Write};
use std::time::Duration;

use boinc_sim::config::CompletedJobMode;

use crate::common::*;

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in entries {
        w.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// `submit_batch` of runner jobs (name, command line) that all bring `exe`
/// and `job_zip`, with the batch's `rsc_fpops_bound`, `rsc_memory_bound`
/// and `rsc_disk_bound`.
async fn submit_runner(sim: &TestSim, batch_name: &str, exe: &[u8], job_zip: &[u8], jobs: &[(&str, &str)], bounds: (f64, f64, f64)) -> i64 {
    let id = sim.create_batch(batch_name, 0.0).await;
    let names = sim.stage(id, &[exe, job_zip]).await;
    let list: Vec<(String, String, Vec<String>)> = jobs.iter().map(|(n, c)| (n.to_string(), c.to_string(), names.clone())).collect();
    let xml = submit_xml(&sim.auth, id, "runner", &list)
        .replace("<rsc_fpops_bound>0.000000<", &format!("<rsc_fpops_bound>{:.6}<", bounds.0))
        .replace("<rsc_memory_bound>0.000000<", &format!("<rsc_memory_bound>{:.6}<", bounds.1))
        .replace("<rsc_disk_bound>0.000000<", &format!("<rsc_disk_bound>{:.6}<", bounds.2));
    let body = sim.rpc(&xml).await;
    assert!(body.contains("<batch_id>"), "{body}");
    id
}

async fn completed(sim: &TestSim, job: &str) -> String {
    sim.rpc(&format!(
        "<query_completed_job>\n<authenticator>{}</authenticator>\n<job_name>{job}</job_name>\n</query_completed_job>\n",
        sim.auth
    ))
    .await
}

pub async fn runner_job_end_to_end() {
    let sim = TestSim::start(|o| {
        // The errored instance's stderr in query_completed_job.
        o.config.quirks.query_completed_job = CompletedJobMode::Intended;
        // One failed instance ends a job.
        for a in o.config.apps.iter_mut().filter(|a| a.name == "runner") {
            a.max_error_results = 0;
        }
    })
    .await;
    let body =
        sim.rpc(&format!("<get_templates><authenticator>{}</authenticator><app_name>runner</app_name></get_templates>", sim.auth)).await;
    assert!(body.contains("<open_name>condor_exec.exe</open_name>"), "{body}");
    assert!(body.contains("<open_name>condor_out.zip</open_name>"), "{body}");
    assert!(!body.contains("rsc_memory_bound") && !body.contains("rsc_fpops_bound"), "{body}");

    let script = b"#!/bin/sh\necho \"FOO=$FOO\"\nfor a in \"$@\"; do echo \"arg:$a\"; done\nread line\necho \"stdin:$line\"\necho made > result.txt\nexit 3\n";
    let job_zip = zip_of(&[("_condor_env", b"FOO=bar\n"), ("_condor_stdin", b"hello\n"), ("input.txt", b"in\n")]);
    // The command line as stored by the daemon: quotes escaped twice.
    let id = submit_runner(&sim, "rn", script, &job_zip, &[("rn_0", "one &amp;#39;two words&amp;#39;")], (5e10, 2e8, 3e8)).await;
    let body = sim.wait_final("rn", Duration::from_secs(30)).await;
    assert!(body.contains("<status>DONE</status>"), "the job's exit code 3 is no app failure: {body}");
    let (status, _, data) = sim.get(&format!("get_output.php?cmd=workunit_file&auth_str={}&wu_name=rn_0&file_num=0", sim.auth)).await;
    assert_eq!(status, 200);
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(data)).unwrap_or_else(|e| panic!("condor_out.zip: {e}"));
    let names: Vec<String> = z.file_names().map(str::to_string).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, ["_condor_exit_code", "_condor_stderr", "_condor_stdout", "result.txt"]);
    let mut get = |n: &str| {
        let mut s = String::new();
        z.by_name(n).unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert_eq!(get("_condor_stdout"), "FOO=bar\narg:one\narg:two words\nstdin:hello\n");
    assert_eq!(get("_condor_exit_code"), "3");
    assert_eq!(get("result.txt"), "made\n");
    assert_eq!(get("_condor_stderr"), "");
    let body = completed(&sim, "rn_0").await;
    assert!(body.contains("<exit_status>0</exit_status>"), "{body}");
    assert!(body.contains("runner: condor_exec.exe exited with code 3"), "{body}");
    // The job's bounds, not a template's.
    let st = sim.state_of(id).await;
    let j = job(&st, "rn_0");
    assert_eq!(
        (j["rsc_fpops_bound"].as_f64(), j["rsc_memory_bound"].as_f64(), j["rsc_disk_bound"].as_f64()),
        (Some(5e10), Some(2e8), Some(3e8))
    );

    // rsc_fpops_bound / flops = 0.5 s: a job that runs longer is killed.
    let sleeper = b"#!/bin/sh\necho started\nsleep 30\necho never\n";
    let t0 = std::time::Instant::now();
    submit_runner(&sim, "tl", sleeper, &zip_of(&[]), &[("tl_0", "")], (5e9, 0.0, 0.0)).await;
    let body = sim.wait_final("tl", Duration::from_secs(20)).await;
    assert!(body.contains("<status>ERROR</status>"), "{body}");
    assert!(t0.elapsed() < Duration::from_secs(15), "killed at the limit, not at the end: {:?}", t0.elapsed());
    let body = completed(&sim, "tl_0").await;
    assert!(body.contains("<exit_status>197</exit_status>"), "EXIT_TIME_LIMIT_EXCEEDED: {body}");
    assert!(body.contains("exceeded elapsed time limit 0.50 (5.00G/10.00G)"), "{body}");
    // Below rsc_fpops_est (1e9 in the template): over the limit as planned.
    let tp = submit_runner(&sim, "tp", script, &job_zip, &[("tp_0", "")], (5e8, 0.0, 0.0)).await;
    sim.wait_final("tp", Duration::from_secs(20)).await;
    let body = completed(&sim, "tp_0").await;
    assert!(body.contains("<exit_status>197</exit_status>"), "{body}");
    assert!(body.contains("exceeded elapsed time limit 0.05 (0.50G/10.00G)"), "{body}");
    // No bounds given: create_work's defaults.
    let j = job(&sim.state_of(tp).await, "tp_0").clone();
    assert_eq!((j["rsc_memory_bound"].as_f64(), j["rsc_disk_bound"].as_f64()), (Some(5e8), Some(1e9)));
    sim.stop().await;
}
