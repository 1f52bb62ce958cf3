//! Arguments that a BOINC client or a runner's wrapper would cut or rewrite
//! on the volunteer's host (docs/arguments.md) are refused in both
//! dialects, saying the limit; up to the limit they reach the job whole.
//! The simulated project's client and wrapper cut where the real ones do,
//! so a job one past a limit that got through would show it here.

use crate::common::blah::{str_value, submit, wait_final};
use crate::common::script::{script_job, ScriptWorld};
use crate::common::*;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::{AsyncCommand, FetchMode, FetchOutput, InputFile, JobParams, JobSpec, SubmitBatch};

const SCRIPT: &str = "#!/bin/sh\nfor a in \"$@\"; do echo \"arg:$a\"; done\n";

/// `n` words `w1 w2 ...`.
fn words(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("w{i}")).collect()
}

/// Plain words whose command line at BOINC's wrapper (a space before
/// each) is `bytes` long.
fn wrapper_line_of(bytes: usize) -> Vec<String> {
    let mut args: Vec<String> = (0..bytes / 100 - 1).map(|_| "x".repeat(99)).collect();
    args.push("y".repeat(bytes - args.len() * 100 - 1));
    args
}

/// The job's status fields once it has ended: (status, ad).
fn ended(g: &mut GahpClient, id: &str) -> (String, ClassAd) {
    let r = wait_final(g, id, WAIT);
    (r[2].clone(), ClassAd::parse(&r[3]).unwrap())
}

#[test]
fn batch_boinc_holds_arguments_a_client_or_a_runners_wrapper_would_cut_and_runs_the_longest_that_fit() {
    let w = ScriptWorld::new("batch_window_secs = 0.5\nrunner_app = \"runner\"\n");
    let mut g = w.start();
    let script_at = |name: &str, args: &[String]| {
        let iwd = w.job_dir(name, "show.sh", SCRIPT, "input of");
        let ad = script_job(&iwd, "show.sh", &[("Arguments", str_value(&args.join(" "))), ("Out", str_value("job.out"))]);
        (iwd, ad)
    };

    // One byte past the wrapper's line, a `boinc_resolve(`: held, saying so.
    let (_, over) = script_at("over", &wrapper_line_of(4096));
    let id = submit(&mut g, over);
    let (status, ad) = ended(&mut g, &id);
    let reason = ad.get_str("HoldReason").unwrap_or_default();
    assert_eq!(status, "5", "{ad}");
    assert!(
        reason.contains("the arguments are 4,096 bytes on the command line of BOINC's wrapper (the app is a runner), which keeps 4,095")
            && reason.contains("change the submit file's arguments"),
        "{reason}"
    );
    let (_, resolve) = script_at("resolve", &["alpha".into(), "pre-boinc_resolve(foo)-post".into()]);
    let id = submit(&mut g, resolve);
    let (status, ad) = ended(&mut g, &id);
    let reason = ad.get_str("HoldReason").unwrap_or_default();
    assert_eq!(status, "5", "{ad}");
    assert!(reason.contains("argument 2 (\"pre-boinc_resolve(foo)-post\") holds \"boinc_resolve(\""), "{reason}");
    // Any app: one word more than any client passes.
    let iwd = w.dir.path().join("many");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("in"), "x\n").unwrap();
    let mut many = gahp_testkit::blah_job_ad(&iwd, "home_bl_many", &[]);
    many.insert("BoincApp", str_value("uppercase"));
    many.insert("TransferInput", str_value("in"));
    many.insert("Arguments", str_value(&words(97).join(" ")));
    let id = submit(&mut g, many);
    let (status, ad) = ended(&mut g, &id);
    let reason = ad.get_str("HoldReason").unwrap_or_default();
    assert_eq!(status, "5", "{ad}");
    assert!(reason.contains("the job has 97 arguments, and a BOINC client passes an app at most 96"), "{reason}");
    assert!(w.sim.state()["jobs"].as_array().unwrap().is_empty(), "nothing was created");

    // At the limits the job gets every argument whole.
    for (name, args) in [("fits", wrapper_line_of(4095)), ("most", words(96))] {
        let (iwd, ad) = script_at(name, &args);
        let id = submit(&mut g, ad);
        let (status, ad) = ended(&mut g, &id);
        assert_eq!((status.as_str(), ad.get_int("ExitCode")), ("4", Some(0)), "{name}: {ad}");
        let out = std::fs::read_to_string(iwd.join("job.out")).unwrap();
        let expect: String = args.iter().map(|a| format!("arg:{a}\n")).collect();
        assert!(out == expect, "{name}: the job got {} bytes of {}", out.len(), expect.len());
    }
}

#[test]
fn boinc_submit_refuses_arguments_a_client_or_a_runners_wrapper_would_cut() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut g = ready_gahp(&sim, dir.path());
    let files = inputs(dir.path(), 1, "lim");
    let submit = |g: &mut GahpClient, batch: SubmitBatch| g.call(|id| async_cmd(id, AsyncCommand::Submit(batch)), WAIT).unwrap();

    let mut batch = uppercase_batch("many", &files);
    batch.jobs[0].args = words(97);
    let r = submit(&mut g, batch);
    assert!(
        r[0].starts_with("error submitting jobs: job many#0.0: the job has 97 arguments, and a BOINC client passes an app at most 96"),
        "{r:?}"
    );

    // A runner's wrapper rewrites `boinc_resolve(`: refused once the
    // templates show the app is a runner, before anything is created.
    let exe = dir.path().join("show.sh");
    std::fs::write(&exe, SCRIPT).unwrap();
    let zip = dir.path().join("job.zip");
    std::fs::write(&zip, b"not looked at").unwrap();
    let runner = SubmitBatch {
        batch_name: "resolve".into(),
        app_name: "runner".into(),
        jobs: vec![JobSpec {
            name: "resolve#0.0".into(),
            args: vec!["alpha".into(), "boinc_resolve(x)".into()],
            inputs: vec![
                InputFile { src: exe, dst_name: "condor_exec.exe".into() },
                InputFile { src: zip, dst_name: "condor_job.zip".into() },
            ],
        }],
        params: JobParams::default(),
    };
    let r = submit(&mut g, runner);
    assert!(
        r[0].starts_with(
            "error submitting jobs: job resolve#0.0: argument 2 (\"boinc_resolve(x)\") holds \"boinc_resolve(\", \
             which BOINC's wrapper (the app is a runner)"
        ),
        "{r:?}"
    );
    assert!(sim.batches_named("many").is_empty() && sim.batches_named("resolve").is_empty(), "nothing was created");

    // Any other app takes the word as it is, and 96 arguments reach it.
    let mut args = words(95);
    args.push("boinc_resolve(x)".into());
    let mut batch = uppercase_batch("most", &files);
    batch.jobs[0].args = args.clone();
    assert_eq!(submit(&mut g, batch), ["NULL"]);
    assert_eq!(wait_finished(&mut g, "most"), [("most#0.0".to_string(), "DONE".to_string())]);
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let fetch =
        FetchOutput { job_name: "most#0.0".into(), dir: out.clone(), stderr_file: "err".into(), mode: FetchMode::All, specs: vec![] };
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::FetchOutput(fetch)), WAIT).unwrap()[0], "NULL");
    let err = std::fs::read_to_string(out.join("err")).unwrap();
    assert!(err.contains("argc 97"), "{err}");
    for a in &args {
        assert!(err.contains(&format!("ignoring unknown argument {a:?}\n")), "{a:?} arrived whole: {err}");
    }
}
