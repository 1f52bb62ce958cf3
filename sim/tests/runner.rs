//! The built-in `runner` app (docs/runner.md), run in-process on a work
//! directory laid out as a BOINC slot: `condor_exec.exe` and
//! `condor_job.zip`. The scripts it runs are the jobs' own (`#!/bin/sh`
//! started by the kernel); the runner itself uses no shell.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use boinc_sim::apps::{app_main_in, builtin_app};
use zip::write::SimpleFileOptions;

/// A zip of `(name, data)`; a name ending in `/` is a directory.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in entries {
        if name.ends_with('/') {
            w.add_directory(*name, SimpleFileOptions::default()).unwrap();
        } else {
            w.start_file(*name, SimpleFileOptions::default()).unwrap();
            w.write_all(data).unwrap();
        }
    }
    w.finish().unwrap().into_inner()
}

/// A slot with the job's executable and its zip, as BOINC copies them
/// (the executable without its modes).
fn slot(exe: &[u8], job_zip: &[u8]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("condor_exec.exe"), exe).unwrap();
    std::fs::set_permissions(d.path().join("condor_exec.exe"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(d.path().join("condor_job.zip"), job_zip).unwrap();
    d
}

/// Runs the runner in `dir` with the job's `args`: exit code and stderr.
fn run(dir: &Path, args: &[&str]) -> (i32, String) {
    let mut argv: Vec<OsString> = vec!["runner".into()];
    argv.extend(args.iter().map(OsString::from));
    let mut log = Vec::new();
    let code = app_main_in(dir, &argv, &mut log);
    (code, String::from_utf8_lossy(&log).into_owned())
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `condor_out.zip`: its entry names (in order) and their contents.
fn out_zip(dir: &Path) -> Vec<(String, String)> {
    let f = std::fs::File::open(dir.join("condor_out.zip")).unwrap();
    let mut z = zip::ZipArchive::new(f).unwrap();
    (0..z.len())
        .map(|i| {
            let mut e = z.by_index(i).unwrap();
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap();
            (e.name().to_string(), s)
        })
        .collect()
}

const SCRIPT: &[u8] = b"#!/bin/sh
echo \"FOO=$FOO\"
for a in \"$@\"; do echo \"arg:$a\"; done
read line
echo \"stdin:$line\"
echo made > result.txt
mkdir -p sub
echo deep > sub/new.txt
echo rewritten > input.txt
echo oops >&2
exit 3
";

#[test]
fn runner_runs_the_job_and_zips_what_it_made() {
    let job = zip_of(&[
        ("input.txt", b"given\n"),
        ("_condor_env", b"FOO=bar\n\nEMPTY=\nEQ=a=b\n"),
        ("_condor_stdin", b"hello stdin\nmore\n"),
        ("data/", b""),
        ("data/a.txt", b"a\n"),
    ]);
    let d = slot(SCRIPT, &job);
    // The runner takes no flags: `--fail 7` is the job's.
    let (code, log) = run(d.path(), &["one", "two words", "--fail", "7"]);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("runner: condor_exec.exe exited with code 3"), "{log}");
    assert!(log.trim_end().ends_with("called boinc_finish(0)"), "{log}");
    assert!(!d.path().join("condor_job.zip").exists(), "the job zip is deleted");
    assert_eq!(read(d.path(), "_condor_exit_code"), "3");
    let stdout = "FOO=bar\narg:one\narg:two words\narg:--fail\narg:7\nstdin:hello stdin\n";
    assert_eq!(read(d.path(), "_condor_stdout"), stdout);
    assert_eq!(read(d.path(), "data/a.txt"), "a\n", "unpacked with its directories");
    let out = out_zip(d.path());
    let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
    // New top-level files only, sorted, as BOINC's wrapper zips them: not
    // the inputs (even one the job rewrote), not the executable, not the
    // zip's own files, not a directory the job made.
    assert_eq!(names, ["_condor_exit_code", "_condor_stderr", "_condor_stdout", "result.txt"]);
    let get = |n: &str| out.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()).unwrap();
    assert_eq!(get("_condor_stdout"), stdout);
    assert_eq!(get("_condor_stderr"), "oops\n");
    assert_eq!(get("_condor_exit_code"), "3");
    assert_eq!(get("result.txt"), "made\n");

    // Same job, same zip bytes (fixed times): replicas agree.
    let first = std::fs::read(d.path().join("condor_out.zip")).unwrap();
    let d2 = slot(SCRIPT, &job);
    assert_eq!(run(d2.path(), &["one", "two words", "--fail", "7"]).0, 0);
    assert_eq!(std::fs::read(d2.path().join("condor_out.zip")).unwrap(), first);
}

#[test]
fn runner_without_stdin_or_env_and_a_job_ended_by_a_signal() {
    let d = slot(b"#!/bin/sh\ncat > got\necho \"[$FOO]\"\nkill -9 $$\n", &zip_of(&[]));
    let (code, log) = run(d.path(), &[]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read(d.path(), "_condor_exit_code"), "signal 9");
    assert!(log.contains("runner: condor_exec.exe ended: signal 9"), "{log}");
    let out = out_zip(d.path());
    let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["_condor_exit_code", "_condor_stderr", "_condor_stdout", "got"]);
    assert_eq!(out[3].1, "", "stdin is empty without _condor_stdin");
    assert_eq!(out[2].1, "[]\n");
}

#[test]
fn runner_fails_when_the_executable_is_not_one() {
    // Not a script, not a binary: the kernel refuses it, and no shell is
    // asked to try instead.
    let junk: Vec<u8> = (0..256u32).map(|i| (i.wrapping_mul(151) ^ 0x5a) as u8).collect();
    let d = slot(&junk, &zip_of(&[("in", b"x")]));
    let (code, log) = run(d.path(), &["a"]);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("runner: can't run condor_exec.exe: Exec format error"), "{log}");
    assert!(log.trim_end().ends_with("called boinc_finish(1)"), "{log}");
    assert!(!d.path().join("condor_out.zip").exists());
    assert!(!d.path().join("_condor_exit_code").exists());
}

#[test]
fn runner_refuses_entries_that_leave_the_directory_or_are_links() {
    let mut with_link = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    with_link.add_symlink("link", "/etc/passwd", SimpleFileOptions::default()).unwrap();
    let with_link = with_link.finish().unwrap().into_inner();
    for (job, want) in [
        (zip_of(&[("ok", b"1"), ("../x", b"escape")]), "refusing entry \"../x\": a `..` component"),
        (zip_of(&[("a/../../x", b"escape")]), "refusing entry \"a/../../x\": a `..` component"),
        (zip_of(&[("/tmp/x", b"abs")]), "refusing entry \"/tmp/x\": an absolute path"),
        (with_link, "refusing entry \"link\": a link"),
        (zip_of(&[("condor_exec.exe", b"#!/bin/sh\n")]), "refusing entry \"condor_exec.exe\": it would replace the runner's own file"),
    ] {
        let outer = tempfile::tempdir().unwrap();
        let d = outer.path().join("slot");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("condor_exec.exe"), b"#!/bin/sh\ntouch ran\n").unwrap();
        std::fs::write(d.join("condor_job.zip"), &job).unwrap();
        let (code, log) = run(&d, &[]);
        assert_eq!(code, 1, "{want}: {log}");
        assert!(log.contains(&format!("runner: condor_job.zip: {want}")), "{want}: {log}");
        assert!(!outer.path().join("x").exists(), "nothing written outside");
        assert!(!d.join("ran").exists(), "the job did not run");
    }
}

#[test]
fn runner_fails_clearly_without_its_inputs() {
    let d = tempfile::tempdir().unwrap();
    let (code, log) = run(d.path(), &[]);
    assert_eq!(code, 1);
    assert!(log.contains("runner: no condor_exec.exe in the work directory"), "{log}");

    let d = slot(b"#!/bin/sh\n", b"this is not a zip");
    let (code, log) = run(d.path(), &[]);
    assert_eq!(code, 1);
    assert!(log.contains("runner: condor_job.zip is damaged: "), "{log}");

    let d = slot(b"#!/bin/sh\n", &zip_of(&[("_condor_env", b"A=1\nSECRET\n")]));
    let (code, log) = run(d.path(), &[]);
    assert_eq!(code, 1);
    assert!(log.contains("runner: _condor_env line 2: no '=' (want NAME=VALUE)"), "{log}");
}

#[test]
fn runner_template_leaves_the_bounds_to_the_job() {
    let r = builtin_app("runner").unwrap();
    assert_eq!(r.inputs, ["condor_exec.exe", "condor_job.zip"]);
    assert_eq!(r.outputs, ["condor_out.zip"]);
    assert!(r.job_bounds && r.template_bounds().is_none());
    let t = r.input_template();
    for tag in ["rsc_fpops_bound", "rsc_memory_bound", "rsc_disk_bound"] {
        assert!(!t.contains(tag), "{tag}: {t}");
    }
    assert!(t.contains("<rsc_fpops_est>1e9</rsc_fpops_est>\n        <delay_bound>86400</delay_bound>"), "{t}");
    assert!(t.contains("<file_number>1</file_number>\n            <open_name>condor_job.zip</open_name>"), "{t}");
    let up = builtin_app("uppercase").unwrap();
    assert!(!up.job_bounds);
    assert!(up.input_template().contains("<rsc_memory_bound>1e8</rsc_memory_bound>"));
    // A config without the field still loads, with the template's bounds.
    let cfg = boinc_sim::SimConfig::from_toml(
        "[[apps]]\nname = \"a\"\ninputs = []\noutputs = []\nfpops_est = 1e9\ndelay_bound = 10.0\nmin_quorum = 1\ntarget_nresults = 1\nmax_error_results = 1\nmax_total_results = 1\nmax_success_results = 1\n",
    )
    .unwrap();
    assert!(!cfg.apps[0].job_bounds);
}
