//! Script jobs (docs/runner.md) end to end: the real daemon over pipes, as
//! a 23.9 gridmanager drives it, against the simulated project, whose
//! built-in `runner` app really runs the job's script on loopback as a
//! volunteer host running BOINC's wrapper would.

use crate::common::blah::{blah, str_value, submit, wait_final};
use crate::common::script::ScriptWorld;
use crate::common::*;
use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::BlahCommand;
use std::path::{Path, PathBuf};

/// A world whose daemon config adds `extra` to a short batch window.
fn world(extra: &str) -> ScriptWorld {
    ScriptWorld::new(&format!("batch_window_secs = 0.5\n{extra}"))
}

/// A job directory with `analyze.sh` and `in`.
fn job_dir(w: &ScriptWorld, name: &str, script: &str) -> PathBuf {
    w.job_dir(name, "analyze.sh", script, "input of")
}

/// `executable = analyze.sh` in `iwd`, then `attrs`.
fn script_job(iwd: &Path, attrs: &[(&str, Value)]) -> ClassAd {
    crate::common::script::script_job(iwd, "analyze.sh", attrs)
}

/// The final status ad of a job (asserting its status).
fn final_ad(g: &mut GahpClient, id: &str, status: &str) -> ClassAd {
    let r = wait_final(g, id, WAIT);
    assert_eq!((r[0].as_str(), r[2].as_str()), ("0", status), "{r:?}");
    ClassAd::parse(&r[3]).unwrap()
}

const SCRIPT: &str = "#!/bin/sh\n\
echo \"FOO=$FOO\"\n\
for a in \"$@\"; do echo \"arg:$a\"; done\n\
tr a-z A-Z < in > out.txt\n\
read line; echo \"stdin:$line\"\n\
echo extra > extra.txt\n\
echo to-stderr >&2\n\
exit 3\n";

#[test]
fn a_script_job_runs_its_script_with_its_arguments_environment_and_inputs_and_ends_with_its_exit_code() {
    let w = world("runner_app = \"runner\"\n");
    let mut g = w.start();
    let iwd = job_dir(&w, "j1", SCRIPT);
    std::fs::write(iwd.join("stdin.txt"), "from stdin\n").unwrap();
    let ad = script_job(
        &iwd,
        &[
            ("Arguments", str_value("one 'two words' 'it''s'")),
            ("Environment", str_value("FOO=bar' 'baz")),
            ("TransferInput", str_value("in")),
            ("In", str_value("stdin.txt")),
            ("TransferOutput", str_value("out.txt")),
            ("TransferOutputRemaps", str_value("out.txt=result.txt")),
            ("Out", str_value("job.out")),
            ("Err", str_value("job.err")),
            ("RequestMemory", Value::Int(64)),
            ("RequestDisk", Value::Int(2048)),
            ("BatchRuntime", Value::Int(600)),
        ],
    );
    let id = submit(&mut g, ad);
    let done = final_ad(&mut g, &id, "4");
    assert_eq!(done.get_int("ExitCode"), Some(3), "{done}");
    assert_eq!(done.get_bool("ExitBySignal"), Some(false));
    let out = std::fs::read_to_string(iwd.join("job.out")).unwrap();
    assert_eq!(out, "FOO=bar baz\narg:one\narg:two words\narg:it's\nstdin:from stdin\n");
    assert_eq!(std::fs::read_to_string(iwd.join("job.err")).unwrap(), "to-stderr\n");
    assert_eq!(std::fs::read_to_string(iwd.join("result.txt")).unwrap(), "INPUT OF J1\n");
    assert!(!iwd.join("extra.txt").exists(), "only what transfer_output_files names comes back");
    assert!(!iwd.join("_condor_exit_code").exists() && !iwd.join("condor_out.zip").exists());
    // The requests reached the BOINC job as its bounds.
    let name = id.rsplit('/').next().unwrap();
    let job = w.sim.state()["jobs"].as_array().unwrap().iter().find(|j| j["name"] == name).cloned().unwrap();
    assert_eq!(job["rsc_disk_bound"].as_f64(), Some(2048.0 * 1024.0), "{job}");
    assert_eq!(job["rsc_memory_bound"].as_f64(), Some(64.0 * 1048576.0), "{job}");
    assert_eq!(job["rsc_fpops_bound"].as_f64(), Some(600.0 * 1e10), "{job}");
}

#[test]
fn without_transfer_output_files_every_file_the_script_made_comes_back_and_jobs_of_one_script_send_it_once() {
    let w = world("runner_app = \"runner\"\n");
    let mut g = w.start();
    // A directory the script makes does not come back (BOINC's wrapper
    // returns files: docs/runner.md), a file does.
    let script = "#!/bin/sh\nmkdir -p res\ncp in res/copy\ncp in copy.txt\necho made > made.txt\necho \"$1\"\n";
    let dirs: Vec<PathBuf> = (0..2).map(|i| job_dir(&w, &format!("k{i}"), script)).collect();
    // One script, written twice: the same content is one upload.
    let ids: Vec<String> = dirs
        .iter()
        .map(|iwd| {
            let ad = script_job(iwd, &[("Arguments", str_value("hello")), ("TransferInput", str_value("in")), ("Out", str_value("o"))]);
            submit(&mut g, ad)
        })
        .collect();
    for (iwd, id) in dirs.iter().zip(&ids) {
        let done = final_ad(&mut g, id, "4");
        assert_eq!(done.get_int("ExitCode"), Some(0), "{done}");
        assert_eq!(std::fs::read_to_string(iwd.join("made.txt")).unwrap(), "made\n");
        let name = iwd.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(std::fs::read_to_string(iwd.join("copy.txt")).unwrap(), format!("input of {name}\n"));
        assert_eq!(std::fs::read_to_string(iwd.join("o")).unwrap(), "hello\n");
        let mut names: Vec<String> = std::fs::read_dir(iwd).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["analyze.sh", "copy.txt", "in", "made.txt", "o"], "nothing of the runner's or BOINC's");
    }
    // The script once, and one archive per job (their inputs differ).
    assert_eq!(w.project_files(), 3, "{}", w.sim.state()["files"]);
}

/// What a volunteer's host returns is a stranger's (issue 45): a script
/// that plays one, making dot-files, a folder tree, a folder named like a
/// link the submitter keeps in `Iwd`, and a file named like the submit
/// file, gets only its plain top-level files back, nothing through the
/// link, and the submit file is never replaced.
#[test]
fn a_hosts_dot_files_folders_and_links_never_reach_the_jobs_directory_or_past_it() {
    let w = world("runner_app = \"runner\"\n");
    let mut g = w.start();
    let elsewhere = w.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let script = "#!/bin/sh\n\
echo evil > .bashrc\n\
mkdir -p .ssh sub/dir data\n\
echo key > .ssh/authorized_keys\n\
echo deep > sub/dir/deep.txt\n\
echo through > data/x\n\
echo ok > ok.txt\n";
    let iwd = job_dir(&w, "hostile1", script);
    std::os::unix::fs::symlink(&elsewhere, iwd.join("data")).unwrap();
    let id = submit(&mut g, script_job(&iwd, &[("TransferInput", str_value("in")), ("Out", str_value("o"))]));
    let done = final_ad(&mut g, &id, "4");
    assert_eq!(done.get_int("ExitCode"), Some(0), "{done}");
    let mut names: Vec<String> = std::fs::read_dir(&iwd).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["analyze.sh", "data", "in", "o", "ok.txt"], "only the plain top-level file came back");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");

    // A file named like the submit file already in Iwd: held, the submit
    // file as it was, and nothing else of that run placed.
    let iwd = job_dir(&w, "hostile2", "#!/bin/sh\necho queue 1000 > job.sub\necho ok > ok.txt\n");
    std::fs::write(iwd.join("job.sub"), "executable = analyze.sh\nqueue\n").unwrap();
    let id = submit(&mut g, script_job(&iwd, &[("TransferInput", str_value("in")), ("JobDirectory", str_value("home_bl_hostile2"))]));
    let held = final_ad(&mut g, &id, "5");
    let reason = held.get_str("HoldReason").unwrap();
    assert!(reason.contains("job.sub") && reason.contains("submit file or log"), "{reason}");
    assert_eq!(std::fs::read_to_string(iwd.join("job.sub")).unwrap(), "executable = analyze.sh\nqueue\n");
    assert!(!iwd.join("ok.txt").exists(), "nothing of a refused run is placed");
}

#[test]
fn a_job_whose_executable_cant_run_is_held_saying_why_never_run_as_another_app() {
    // The job: default_app set, no runner, a sent script.
    let w = world("default_app = \"uppercase\"\n");
    let mut g = w.start();
    let iwd = job_dir(&w, "h1", "#!/bin/sh\nexit 0\n");
    let ad = script_job(&iwd, &[("TransferInput", str_value("in")), ("Environment", str_value("FOO=bar"))]);
    let id = submit(&mut g, ad);
    let held = final_ad(&mut g, &id, "5");
    let reason = held.get_str("HoldReason").unwrap();
    assert!(reason.contains("sends its own executable") && reason.contains("analyze.sh") && reason.contains("runner_app"), "{reason}");
    assert!(w.sim.state()["jobs"].as_array().unwrap().is_empty(), "nothing made on the project");

    // Not sent: the executable's base name would be the app; default_app
    // is the site's choice for such jobs.
    let not_sent = script_job(
        &iwd,
        &[("TransferExecutable", Value::Bool(false)), ("TransferInput", str_value("in")), ("JobDirectory", str_value("home_bl_h2"))],
    );
    let id = submit(&mut g, not_sent);
    let done = final_ad(&mut g, &id, "4");
    assert_eq!(done.get_int("ExitCode"), Some(0), "{done}");

    // An environment at an app that can't take it.
    let env = script_job(
        &iwd,
        &[("BoincApp", str_value("uppercase")), ("Environment", str_value("FOO=bar")), ("JobDirectory", str_value("home_bl_h3"))],
    );
    let id = submit(&mut g, env);
    let reason = final_ad(&mut g, &id, "5").get_str("HoldReason").unwrap().to_string();
    assert!(reason.contains("can't give the job its environment (FOO)"), "{reason}");
}

#[test]
fn requests_a_runner_does_not_provide_are_held_and_a_configured_app_takes_them() {
    let w = world("runner_app = \"runner\"\n[blah.apps.runner]\ncpus = 4\n");
    let mut g = w.start();
    let iwd = job_dir(&w, "r1", "#!/bin/sh\necho ok\n");
    let cases = [
        ("home_bl_r8", vec![("RequestCpus", Value::Int(8))], Some("asks for 8 cpus, and app runner provides 4")),
        ("home_bl_rg", vec![("GPUNumber", Value::Int(1))], Some("asks for 1 gpus, and app runner provides 0")),
        ("home_bl_r4", vec![("RequestCpus", Value::Int(4))], None),
    ];
    for (dir, attrs, held) in cases {
        let mut ad = script_job(&iwd, &attrs);
        ad.insert("JobDirectory", str_value(dir));
        let id = submit(&mut g, ad);
        match held {
            Some(want) => {
                let reason = final_ad(&mut g, &id, "5").get_str("HoldReason").unwrap().to_string();
                assert!(reason.contains(want), "{reason}");
            }
            None => assert_eq!(final_ad(&mut g, &id, "4").get_int("ExitCode"), Some(0)),
        }
    }
    let r = blah(&mut g, BlahCommand::Ping { batch_type: "boinc".into() });
    assert_eq!(r, ["0", "No error"], "the daemon goes on");
}

#[test]
fn a_container_job_runs_only_at_a_container_runner() {
    // No container runner: held, naming the image; the plain runner never
    // runs it outside its container.
    let w = world("runner_app = \"runner\"\n");
    let mut g = w.start();
    let iwd = job_dir(&w, "c1", "#!/bin/sh\necho in-container\n");
    let image = ("ContainerImage", str_value("docker://python:3.12"));
    let id = submit(&mut g, script_job(&iwd, std::slice::from_ref(&image)));
    let reason = final_ad(&mut g, &id, "5").get_str("HoldReason").unwrap().to_string();
    assert!(reason.contains("container image docker://python:3.12") && reason.contains("container_runner_app"), "{reason}");
    let mut named = script_job(&iwd, &[image, ("BoincApp", str_value("runner"))]);
    named.insert("JobDirectory", str_value("home_bl_c2"));
    let id = submit(&mut g, named);
    let reason = final_ad(&mut g, &id, "5").get_str("HoldReason").unwrap().to_string();
    assert!(reason.contains("app runner can't run the job in its container image"), "{reason}");
    assert!(w.sim.state()["jobs"].as_array().unwrap().is_empty(), "nothing made on the project");
}
