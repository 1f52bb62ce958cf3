//! The command line on the simulated volunteer's host is cut where a real
//! one's is: the client's argv array, and for the runner BOINC's wrapper
//! (its 4,095 bytes and 254 words, its `boinc_resolve(` rewrite), so a job
//! the real server would spoil fails or shows the damage here too.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use boinc_sim::apps::{
    app_main_in, client_words, run_instance, wrapper_words, AppSpec, CLIENT_ARGV_WORDS, WRAPPER_ARGLIST_BYTES, WRAPPER_ARGV_WORDS,
};

fn words(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("w{i}")).collect()
}

#[test]
fn the_client_passes_as_many_words_as_its_argv_holds() {
    assert_eq!(CLIENT_ARGV_WORDS, 98);
    let kept = words(CLIENT_ARGV_WORDS);
    assert_eq!(client_words(&kept.join(" ")).unwrap(), kept);
    let e = client_words(&words(CLIENT_ARGV_WORDS + 1).join(" ")).unwrap_err();
    assert_eq!(e, "the command line has 99 words; the client's argv holds 98");
    // Counted after the unescape and the split, as the client counts.
    let grouped = vec!["&#39;two words&#39;"; CLIENT_ARGV_WORDS].join(" ");
    assert_eq!(client_words(&grouped).unwrap().len(), CLIENT_ARGV_WORDS);
}

#[actix_rt::test]
async fn an_app_with_more_words_than_the_client_passes_does_not_start() {
    let work = tempfile::tempdir().unwrap();
    let mut app = AppSpec::new("echo", &[], &[]);
    app.command = Some(vec!["/bin/echo".into()]);
    let long = Duration::from_secs(30);
    let run = run_instance(&app, Path::new("/x"), &words(CLIENT_ARGV_WORDS).join(" "), &[], &work.path().join("a"), long).await;
    assert_eq!(run.unwrap().exit_status, 0);
    let e = run_instance(&app, Path::new("/x"), &words(CLIENT_ARGV_WORDS + 1).join(" "), &[], &work.path().join("b"), long).await;
    assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn the_wrapper_keeps_4095_bytes_of_its_tasks_line() {
    // Each word is 99 bytes with its space before; the grouped one 1 + 9 + 2.
    let mut args = vec!["two words".to_string()];
    args.extend((0..40).map(|_| "x".repeat(98)));
    let used = 12 + 40 * 99;
    args.push("y".repeat(WRAPPER_ARGLIST_BYTES - used - 1));
    assert_eq!(wrapper_words(&args).unwrap(), args, "4,095 bytes pass whole");
    args.last_mut().unwrap().push('y');
    let task = wrapper_words(&args).unwrap();
    assert_eq!(task.len(), args.len());
    assert_eq!(task.last().unwrap().len() + 1, args.last().unwrap().len(), "the 4,096th byte is cut");
}

#[test]
fn the_wrapper_passes_254_words() {
    let kept = vec!["a".to_string(); WRAPPER_ARGV_WORDS];
    assert_eq!(wrapper_words(&kept).unwrap(), kept);
    let cut = vec!["a".to_string(); WRAPPER_ARGV_WORDS + 1];
    assert_eq!(wrapper_words(&cut).unwrap().len(), WRAPPER_ARGV_WORDS);
}

#[test]
fn the_wrapper_rewrites_boinc_resolve() {
    let given: Vec<String> =
        ["alpha", "boinc_resolve(condor_job.zip)", "pre-boinc_resolve(foo)-post", "two words"].map(String::from).into();
    // As the real server's wrapper did in a slot of copied files.
    assert_eq!(wrapper_words(&given).unwrap(), ["alpha", "condor_job.zip", "pre-foo-post", "two words"]);
    assert_eq!(wrapper_words(&["boinc_resolve(nope".to_string()]).unwrap_err(), "missing ')' after 'boinc_resolve('");
    // A name that is itself the mark is put in once (the real wrapper loops).
    assert_eq!(wrapper_words(&["boinc_resolve(boinc_resolve()".to_string()]).unwrap(), ["boinc_resolve("]);
}

/// The runner in a slot with a script that prints its arguments.
fn run_runner(args: &[&str]) -> (i32, String, String) {
    let d = tempfile::tempdir().unwrap();
    let exe = d.path().join("condor_exec.exe");
    std::fs::write(&exe, "#!/bin/sh\nfor a in \"$@\"; do echo \"arg:$a\"; done\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    z.start_file("note.txt", zip::write::SimpleFileOptions::default()).unwrap();
    z.write_all(b"hi\n").unwrap();
    std::fs::write(d.path().join("condor_job.zip"), z.finish().unwrap().into_inner()).unwrap();
    let mut argv: Vec<OsString> = vec!["runner".into()];
    argv.extend(args.iter().map(OsString::from));
    let mut log = Vec::new();
    let code = app_main_in(d.path(), &argv, &mut log);
    let stdout = std::fs::read_to_string(d.path().join("_condor_stdout")).unwrap_or_default();
    (code, stdout, String::from_utf8_lossy(&log).into_owned())
}

#[test]
fn the_runner_job_gets_what_the_wrapper_passes() {
    let (code, stdout, log) = run_runner(&["alpha", "pre-boinc_resolve(foo)-post", "two words"]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(stdout, "arg:alpha\narg:pre-foo-post\narg:two words\n");

    let (code, stdout, log) = run_runner(&["alpha", "boinc_resolve(nope"]);
    assert_eq!(code, 1, "the wrapper gives up: {log}");
    assert!(log.contains("missing ')' after 'boinc_resolve('"), "{log}");
    assert_eq!(stdout, "", "the job did not run");

    let long = "z".repeat(WRAPPER_ARGLIST_BYTES);
    let (code, stdout, log) = run_runner(&[&long]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(stdout, format!("arg:{}\n", &long[..WRAPPER_ARGLIST_BYTES - 1]), "exits 0 with its argument cut");
}
