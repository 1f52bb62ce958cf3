//! Tests of the simulated BOINC project, against a sim started in-process
//! on 127.0.0.1:0 and spoken to over HTTP with awc, as the daemon does.
//!
//! Own harness (`harness = false`): this binary is also the executable the
//! sim runs the built-in apps with (`argv[1] == __boinc_sim_app`), and it
//! runs the `boinc-sim` command line when `BOINC_SIM_TEST_CLI` is set.
//! Arguments: substrings to select tests; `--skip SUBSTRING`; `--test-threads N`.

mod common;
mod t_cli;
mod t_files;
mod t_jobs;
mod t_lifecycle;
mod t_perf;
mod t_runner;
mod t_steps;
mod t_wire;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

type TestFn = fn() -> Pin<Box<dyn Future<Output = ()>>>;

macro_rules! tests {
    ($($m:ident :: $f:ident),* $(,)?) => {
        vec![$((
            concat!(stringify!($m), "::", stringify!($f)),
            (|| Box::pin($m::$f()) as Pin<Box<dyn Future<Output = ()>>>) as TestFn,
        )),*]
    };
}

fn all_tests() -> Vec<(&'static str, TestFn)> {
    tests![
        t_wire::error_replies_match_captures,
        t_wire::unparsable_requests,
        t_wire::templates_match_capture,
        t_wire::urlencoded_requests,
        t_wire::permissions,
        t_wire::batch_lifecycle_replies,
        t_wire::duplicate_batch_names_resolve_to_oldest,
        t_wire::job_names_are_unique,
        t_wire::command_line_through_create_work,
        t_wire::faults_and_introspection,
        t_files::query_and_upload,
        t_files::duplicate_association_is_fatal,
        t_files::query_files_answers_alike_for_every_account,
        t_files::upload_limit_of_20_files,
        t_files::upload_max_filesize_refuses_a_file_as_captured,
        t_files::post_max_size_drops_the_body_as_captured,
        t_jobs::uppercase_batch_done_and_downloadable,
        t_jobs::completed_job_without_canonical_modes,
        t_jobs::replication_picks_canonical,
        t_jobs::deadline_timeout_and_reissue,
        t_jobs::too_many_errors_ends_in_error,
        t_jobs::min_mod_time_semantics,
        t_jobs::batch_files_zip_like_the_capture,
        t_lifecycle::retire_and_expiry_delete_files,
        t_lifecycle::restart_keeps_state,
        t_runner::runner_job_end_to_end,
        t_steps::stepper_jobs_end_to_end,
        t_steps::jobs_go_only_to_their_target,
        t_steps::stalled_hosts_hold_their_work,
        t_steps::targets_survive_a_restart,
        t_perf::big_batch,
        t_cli::ready_line_and_stdin_close,
    ]
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a.as_os_str()) == Some(std::ffi::OsStr::new(boinc_sim::apps::APP_ENTRY_ARG)) {
        std::process::exit(boinc_sim::apps::app_main(&args[2..]));
    }
    if std::env::var_os("BOINC_SIM_TEST_CLI").is_some() {
        return boinc_sim::cli_main();
    }

    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut threads = 3usize;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--test-threads" {
            threads = it.next().and_then(|v| v.parse().ok()).unwrap_or(threads).max(1);
        } else if let Some(v) = a.strip_prefix("--test-threads=") {
            threads = v.parse().unwrap_or(threads).max(1);
        } else if a == "--skip" {
            skips.extend(it.next());
        } else if !a.starts_with('-') {
            filters.push(a);
        }
    }
    let all = all_tests();
    let total = all.len();
    let selected: Vec<_> = all
        .into_iter()
        .filter(|(n, _)| filters.is_empty() || filters.iter().any(|f| n.contains(f.as_str())))
        .filter(|(n, _)| !skips.iter().any(|s| n.contains(s.as_str())))
        .collect();
    let filtered_out = total - selected.len();
    println!("\nrunning {} tests", selected.len());

    let start = Instant::now();
    let queue = Arc::new(selected);
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let passed = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (queue, next, failed, passed) = (queue.clone(), next.clone(), failed.clone(), passed.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some((name, f)) = queue.get(i).copied() else { break };
                let t0 = Instant::now();
                let res = std::thread::Builder::new()
                    .name(name.to_string())
                    .spawn(move || actix_rt::System::new().block_on(f()))
                    .expect("spawn test thread")
                    .join();
                let secs = t0.elapsed().as_secs_f64();
                match res {
                    Ok(()) => {
                        passed.fetch_add(1, Ordering::SeqCst);
                        println!("test {name} ... ok ({secs:.1}s)");
                    }
                    Err(_) => {
                        failed.lock().unwrap().push(name.to_string());
                        println!("test {name} ... FAILED ({secs:.1}s)");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let failed = failed.lock().unwrap().clone();
    let passed = passed.load(Ordering::SeqCst);
    if !failed.is_empty() {
        println!("\nfailures:");
        for f in &failed {
            println!("    {f}");
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {} failed; 0 ignored; 0 measured; {filtered_out} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len(),
        start.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}
