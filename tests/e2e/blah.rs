//! The BLAH_* dialect end to end (`grid_resource = batch boinc`, HTCondor
//! 10.0 and later): the real daemon over pipes, driven as a 23.9
//! gridmanager drives it, against the simulated project on loopback.
//! Every result line's field count is checked: a wrong one crashes the
//! gridmanager.

use crate::common::*;
use gahp_protocol::classad::{format_args_v2, ClassAd, Value};
use gahp_protocol::gahp::{BlahCommand, Command};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A daemon config with the sim as the default project, status refreshed
/// every 0.3 s unless `extra` says otherwise; returns its path.
fn write_config(sim: &Sim, dir: &Path, extra: &str) -> PathBuf {
    std::fs::write(dir.join("boinc.auth"), format!("{}\n", sim.auth)).unwrap();
    let path = dir.join("config.toml");
    let text = format!(
        "[blah]\nproject_url = \"{}\"\nauthenticator_file = \"boinc.auth\"\n{}{extra}",
        sim.url,
        if extra.contains("status_refresh_secs") { "" } else { "status_refresh_secs = 0.3\n" }
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A simulated project and a directory holding a daemon config for it.
struct World {
    sim: Sim,
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl World {
    fn new(extra: &str) -> World {
        let sim = Sim::start();
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(&sim, dir.path(), extra);
        World { sim, dir, config }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A daemon on this config, started as the gridmanager starts it.
    fn start(&self) -> GahpClient {
        start(self.path(), Some(&self.config))
    }
}

/// An uppercase job of `<iwd>/in` (written with `text`) run with `args`.
fn uppercase_job(iwd: &Path, job_dir: &str, text: &str, args: &str) -> ClassAd {
    std::fs::write(iwd.join("in"), text).unwrap();
    job_ad(iwd, job_dir, &[("BoincApp", str_value("uppercase")), ("Arguments", str_value(args)), ("TransferInput", str_value("in"))])
}

/// A daemon started as a 23.9 gridmanager starts it: COMMANDS, then
/// RESPONSE_PREFIX (as we list it; its own reply unprefixed), ASYNC_MODE_ON,
/// BLAH_PING 2 boinc.
fn start(dir: &Path, config: Option<&Path>) -> GahpClient {
    let mut args = vec![];
    if let Some(c) = config {
        args = vec!["--config", c.to_str().unwrap()];
    }
    let mut g = gahp_with(dir, &args, &[]);
    assert!(g.banner.starts_with("$GahpVersion: "), "{}", g.banner);
    let commands = g.command_line(b"COMMANDS").unwrap();
    for c in ["ASYNC_MODE_ON", "BLAH_JOB_CANCEL", "BLAH_JOB_REFRESH_PROXY", "BLAH_JOB_STATUS", "BLAH_JOB_SUBMIT", "BLAH_PING"] {
        assert!(commands.iter().any(|x| x == c), "{c} in {commands:?}");
    }
    if commands.iter().any(|c| c == "RESPONSE_PREFIX") {
        assert_eq!(g.set_prefix("GAHP:").unwrap(), ["S"]);
    }
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    let r = blah(&mut g, BlahCommand::Ping { batch_type: "boinc".into() });
    assert_eq!(r, ["0", "No error"]);
    g
}

/// Sends a BLAH command and returns its result fields after the request
/// id, checking their count (submit 4, status 5, the others 3 in all).
fn blah(g: &mut GahpClient, command: BlahCommand) -> Vec<String> {
    let fields = match command {
        BlahCommand::JobSubmit { .. } => 4,
        BlahCommand::JobStatus { .. } => 5,
        _ => 3,
    };
    let r = g.call(|reqid| Request::Command { reqid: ReqId(reqid), command: Command::Blah(command) }, WAIT).unwrap();
    assert_eq!(r.len() + 1, fields, "result fields of a BLAH command: {r:?}");
    assert!(r.iter().all(|f| !f.is_empty()), "no empty field: {r:?}");
    r
}

/// A submit ad as HTCondor 23.9's gridmanager writes it.
use gahp_testkit::blah_job_ad as job_ad;

/// A job that names no app and does not send its executable: it runs
/// `default_app` (docs/runner.md).
fn default_app_job(iwd: &Path, job_dir: &str, attrs: &[(&str, Value)]) -> ClassAd {
    let mut ad = job_ad(iwd, job_dir, attrs);
    ad.insert("TransferExecutable", Value::Bool(false));
    ad
}

fn str_value(v: &str) -> Value {
    Value::Str(v.into())
}

fn submit(g: &mut GahpClient, ad: ClassAd) -> String {
    let r = blah(g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    assert!(r[2].starts_with("boinc/"), "{r:?}");
    r[2].clone()
}

fn status(g: &mut GahpClient, id: &str) -> (i32, ClassAd, Vec<String>) {
    let r = blah(g, BlahCommand::JobStatus { job_id: id.into() });
    let ad = if r[0] == "0" { ClassAd::parse(&r[3]).unwrap_or_else(|e| panic!("status ad {r:?}: {e}")) } else { ClassAd::new() };
    (r[2].parse().unwrap(), ad, r)
}

/// Polls the status until it is `want` (any final status ends the wait);
/// returns the statuses seen and the last ad.
fn wait_status(g: &mut GahpClient, id: &str, want: i32) -> (Vec<i32>, ClassAd) {
    wait_status_within(g, id, want, WAIT)
}

fn wait_status_within(g: &mut GahpClient, id: &str, want: i32, within: Duration) -> (Vec<i32>, ClassAd) {
    let until = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let (s, ad, r) = status(g, id);
        assert!(r[0] == "0" || s == 0, "{r:?}");
        if r[0] == "0" {
            if seen.last() != Some(&s) {
                seen.push(s);
            }
            if s == want || s >= 3 {
                assert_eq!(s, want, "statuses {seen:?}, last {r:?}");
                assert_eq!(ad.get_int("JobStatus"), Some(s.into()));
                return (seen, ad);
            }
        }
        assert!(Instant::now() < until, "status {want} not reached: {seen:?} {r:?}");
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// The sim's job of this BLAH id (batch = job name).
fn sim_job(sim: &Sim, id: &str) -> serde_json::Value {
    let name = id.rsplit('/').next().unwrap();
    let state = sim.state();
    state["jobs"].as_array().unwrap().iter().find(|j| j["name"] == name).cloned().unwrap_or_else(|| panic!("no sim job {name}"))
}

fn sim_batch_state(sim: &Sim, id: &str) -> i64 {
    let name = id.rsplit('/').next().unwrap();
    sim.batches_named(name)[0]["state"].as_i64().unwrap()
}

fn sim_calls(sim: &Sim, endpoint: &str) -> u64 {
    sim.state()["rpc_counts"][endpoint].as_u64().unwrap_or(0)
}

/// POSTs to the sim's introspection endpoint.
fn sim_post(sim: &Sim, what: &str, json: &str) {
    let rest = sim.url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    http(addr, "POST", &format!("/{path}__sim/{what}"), Some(json));
}

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + WAIT;
    while !ok() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Arguments BOINC can carry: spaces, quotes, a backslash, XML's specials,
/// a tab, non-ASCII.
const ARGS: &[&str] =
    &["one", "two words", "it's", "it's here", "say \"hi\"", "back\\slash", "a&b<c", "tab\there", "na\u{ef}ve \u{65e5}\u{672c}", "three"];

#[test]
fn arguments_boinc_cannot_group_are_held_and_the_reason_outlives_cancel_and_restart() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.to_path_buf();
    let cases = [
        ("home_bl_bq", vec!["alpha", "it's \"hi\""], "argument 2 (\"it's \\\"hi\\\"\") can't be passed to a BOINC app: it must be quoted"),
        ("home_bl_lq", vec!["'a\"b"], "argument 1 (\"'a\\\"b\") can't be passed to a BOINC app: it must be quoted"),
    ];
    let mut held = Vec::new();
    for (job_dir, args, expect) in cases {
        let id = submit(&mut g, uppercase_job(&iwd, job_dir, "x\n", &format_args_v2(&args)));
        let (_, ad) = wait_status(&mut g, &id, 5);
        let reason = ad.get_str("HoldReason").unwrap().to_string();
        assert!(reason.contains(expect), "{job_dir}: {reason}");
        // The gridmanager cancels a held job; the reason stays.
        assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: id.clone() })[0], "0");
        let (st, ad, _) = status(&mut g, &id);
        assert_eq!((st, ad.get_str("HoldReason")), (5, Some(reason.as_str())));
        held.push((id, reason));
    }
    assert!(sim.state()["jobs"].as_array().unwrap().is_empty(), "nothing was created");
    // A restarted gridmanager asks again: same hold, same reason.
    g.kill();
    let mut g = w.start();
    for (id, reason) in held {
        let (st, ad, _) = status(&mut g, &id);
        assert_eq!((st, ad.get_str("HoldReason")), (5, Some(reason.as_str())), "{id}");
    }
}

/// A long server error holds the job with one line of at most 300
/// characters; the log has all of it.
#[test]
fn a_long_server_error_is_a_one_line_hold_reason() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.to_path_buf();
    std::fs::write(iwd.join("in"), "x\n").unwrap();
    // The server echoes an unknown app's name; so does the hold reason.
    let app = format!("no_such_app_{}_end", "x".repeat(600));
    let id = submit(&mut g, job_ad(&iwd, "home_long_err", &[("BoincApp", str_value(&app)), ("TransferInput", str_value("in"))]));
    let (_, ad) = wait_status(&mut g, &id, 5);
    let reason = ad.get_str("HoldReason").unwrap();
    assert!(reason.chars().count() <= 300 && !reason.contains('\n'), "{} chars: {reason}", reason.chars().count());
    assert!(
        reason.starts_with("boinc-gahp: ") && reason.contains("has no app named no_such_app_xxx") && reason.ends_with("..."),
        "{reason}"
    );
    assert!(log_text(dir).contains(&format!("{app}_end")) || log_text(dir).contains(&app), "the whole error is logged");
    assert!(sim.state()["jobs"].as_array().unwrap().is_empty());
}

/// A held job gets one log line an admin can grep for: the HTCondor job
/// id (from the gridmanager's JobDirectory), the BOINC batch and job, and
/// the reason.
#[test]
fn a_held_job_is_logged_with_its_condor_id_boinc_names_and_reason() {
    let w = World::new("");
    let dir = w.path();
    let mut g = w.start();
    let iwd = dir.to_path_buf();
    std::fs::write(iwd.join("in"), "x\n").unwrap();
    let job_dir = "home_bl_127.0.0.1_9618_vm_17.0_1795253890";
    let id = submit(&mut g, job_ad(&iwd, job_dir, &[("BoincApp", str_value("no_such_app")), ("TransferInput", str_value("in"))]));
    let (_, ad) = wait_status(&mut g, &id, 5);
    let reason = ad.get_str("HoldReason").unwrap().to_string();
    let log = log_text(dir);
    let line = log.lines().find(|l| l.contains("job held:")).unwrap_or_else(|| panic!("no held line in:\n{log}"));
    assert!(line.contains(" WARN "), "{line}");
    assert!(line.contains(&reason), "{line}");
    assert!(line.contains("condor_job=17.0"), "{line}");
    assert!(line.contains(&format!("boinc_batch=blah#{job_dir}#1")) && line.contains(&format!("boinc_job=blah#{job_dir}#1")), "{line}");
    assert_eq!(log.matches("job held:").count(), 1, "one line per held job");
}

#[test]
fn a_job_with_arguments_an_input_and_two_outputs_completes_with_its_files() {
    // The job's environment is dropped at wordcount, as the admin says.
    let w = World::new("[blah.apps.wordcount]\nenvironment = \"ignore\"\n");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.join("submit");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("input.txt"), "b a b\nc b\n").unwrap();

    let ad = job_ad(
        &iwd,
        "home_bl_127.0.0.1_9618_vm_2.0_1795253890",
        &[
            ("Arguments", str_value(&format_args_v2(ARGS))),
            ("Environment", str_value("FOO=foo1")),
            ("Out", str_value("job.out")),
            ("Err", str_value("job.err")),
            ("TransferInput", str_value("input.txt")),
            ("TransferOutput", str_value("counts,summary")),
            ("TransferOutputRemaps", str_value("summary=summary.txt")),
            ("RequestMemory", Value::Int(64)),
            ("BoincApp", str_value("wordcount")),
        ],
    );
    let id = submit(&mut g, ad);
    assert!(id.ends_with("/blah#home_bl_127.0.0.1_9618_vm_2.0_1795253890#1"), "{id}");
    let (seen, ad) = wait_status(&mut g, &id, 4);
    assert!(seen[..seen.len() - 1].iter().all(|s| *s == 1 || *s == 2), "{seen:?}");
    assert_eq!(ad.get_int("ExitCode"), Some(0), "{ad}");
    assert_eq!(ad.get_bool("ExitBySignal"), Some(false));
    assert!(matches!(ad.get("RemoteWallClockTime"), Some(Value::Real(_))), "{ad}");
    assert!(matches!(ad.get("RemoteUserCpu"), Some(Value::Real(_))), "{ad}");

    // The files are in place before status 4.
    assert_eq!(std::fs::read_to_string(iwd.join("counts")).unwrap(), "a 1\nb 3\nc 1\n");
    assert!(!std::fs::read_to_string(iwd.join("summary.txt")).unwrap().is_empty());
    assert!(!iwd.join("summary").exists(), "remapped");
    assert_eq!(std::fs::read(iwd.join("job.out")).unwrap(), b"", "wordcount has no stdout output: empty Out");
    // The app logs its argv: every argument arrived exactly.
    let err = std::fs::read_to_string(iwd.join("job.err")).unwrap();
    assert!(err.contains(&format!("argc {}", ARGS.len() + 1)), "{err}");
    for a in ARGS {
        assert!(err.contains(&format!("ignoring unknown argument {a:?}\n")), "{a:?} arrived whole: {err}");
    }

    // The BOINC job: one batch, one job, its command line quoted for BOINC.
    let job = sim_job(sim, &id);
    assert_eq!(
        job["command_line"],
        "one &#39;two words&#39; it&#39;s &#34;it&#39;s here&#34; &#39;say &#34;hi&#34;&#39; back&#92;slash a&amp;b&lt;c \
         &#39;tab&#9;here&#39; &#39;na\u{ef}ve \u{65e5}\u{672c}&#39; three"
    );
    assert_eq!(job["status"], "DONE");
    // The batch is retired once status 4 went out; status stays 4.
    eventually("the batch is retired", || sim_batch_state(sim, &id) == 4);
    assert_eq!(status(&mut g, &id).0, 4);

    // Proxy refresh is accepted (BOINC has no proxies).
    let r = blah(&mut g, BlahCommand::JobRefreshProxy { job_id: id.clone(), proxy: "/tmp/x509".into() });
    assert_eq!(r[0], "0");
    // Not one of our ids: a status error, a cancel that succeeds.
    let (_, _, r) = status(&mut g, "lsf/20261121/123");
    assert_eq!((r[0].as_str(), r[2].as_str(), r[3].as_str()), ("1", "0", "N/A"));
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: "lsf/20261121/123".into() })[0], "0");
    assert!(!log_text(dir).contains(&sim.auth), "the authenticator never reaches the log");
}

#[test]
fn a_job_that_asks_gets_its_apps_zip_outputs_unpacked_into_its_directory() {
    let w = World::new("");
    let mut g = w.start();
    let iwd = w.path().join("zipjob");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("in"), "zip me\n").unwrap();
    let files = |unzip: bool| {
        let mut attrs = vec![
            ("BoincApp", str_value("zipper")),
            ("TransferInput", str_value("in")),
            ("TransferOutput", str_value("upper.txt, count.txt")),
            ("TransferOutputRemaps", str_value("count.txt=summary.txt")),
        ];
        if unzip {
            attrs.push(("BoincUnzipOutputs", Value::Bool(true)));
        }
        attrs
    };
    let id = submit(&mut g, job_ad(&iwd, "home_zip_1", &files(true)));
    let (_, ad) = wait_status(&mut g, &id, 4);
    assert_eq!(ad.get_int("ExitCode"), Some(0), "{ad}");
    assert_eq!(std::fs::read_to_string(iwd.join("upper.txt")).unwrap(), "ZIP ME\n");
    assert!(std::fs::read_to_string(iwd.join("summary.txt")).unwrap().contains("words 2"), "remaps apply to unpacked files");
    let mut names: Vec<String> = std::fs::read_dir(&iwd).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["in", "summary.txt", "upper.txt"], "the archive the job did not name and every temporary file are gone");

    // Without asking, a job that names files the app does not output is
    // held before anything is created, saying which.
    let r = blah(&mut g, BlahCommand::JobSubmit { ad: job_ad(&iwd, "home_zip_2", &files(false)) });
    let id = r[2].clone();
    let (_, ad) = wait_status(&mut g, &id, 5);
    let reason = ad.get_str("HoldReason").unwrap_or_default();
    assert!(reason.contains("upper.txt"), "{reason}");
}

#[test]
fn cancel_aborts_the_running_boinc_job_and_a_release_resubmits_a_new_attempt() {
    let w = World::new("default_app = \"uppercase\"\n");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.to_path_buf();
    std::fs::write(iwd.join("in"), "hello\n").unwrap();
    let ad = |args: &str| {
        default_app_job(
            &iwd,
            "home_bl_hold_1.0",
            &[("Arguments", str_value(args)), ("TransferInput", str_value("in")), ("Out", str_value("o"))],
        )
    };

    let first = submit(&mut g, ad("--sleep-ms 30000"));
    wait_status(&mut g, &first, 2);
    // A resubmit after a lost result: the same job, not a second one.
    assert_eq!(submit(&mut g, ad("--sleep-ms 30000")), first);

    // condor_hold: the BOINC job is aborted and its batch retired.
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: first.clone() }), ["0", "No error"]);
    let job = sim_job(sim, &first);
    assert_eq!(job["status"], "ERROR");
    assert_ne!(job["error_mask"].as_i64().unwrap() & 16, 0, "cancelled: {job}");
    eventually("the cancelled batch is retired", || sim_batch_state(sim, &first) == 4);
    // Cancelling again (or something already gone) is fine.
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: first.clone() })[0], "0");

    // condor_release: the same JobDirectory, a new attempt under a fresh name.
    let second = submit(&mut g, ad(""));
    assert!(second.ends_with("/blah#home_bl_hold_1.0#2"), "{second}");
    let (_, done) = wait_status(&mut g, &second, 4);
    assert_eq!(done.get_int("ExitCode"), Some(0));
    assert_eq!(std::fs::read_to_string(iwd.join("out")).unwrap(), "HELLO\n");
    assert_eq!(sim.batches_named("blah#home_bl_hold_1.0#1").len(), 1);
    assert_eq!(sim.batches_named("blah#home_bl_hold_1.0#2").len(), 1);
    // A resubmit of a completed job (its result lost) gets the completed job.
    assert_eq!(submit(&mut g, ad("")), second);
}

/// The submitted job (its typed job, else an older record's ad) a job's
/// record in the daemon's state database keeps (None: no record), read
/// beside the running daemon.
fn recorded_ad(dir: &Path, job: &str) -> Option<String> {
    use rusqlite::{Connection, OpenFlags, OptionalExtension};
    let c = Connection::open_with_flags(dir.join("state/state.sqlite3"), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.busy_timeout(Duration::from_secs(5)).unwrap();
    c.query_row("SELECT COALESCE(job, ad) FROM blah_jobs WHERE batch = ?1", [job], |r| r.get(0)).optional().unwrap()
}

/// A finished job is kept `forget_finished_jobs_after_secs` (without its
/// submit ad once its completion went out), then forgotten while the
/// daemon runs; its id is then answered as held (the gridmanager holds
/// the job with the reason and cancels it), and a release of it gets a
/// BOINC name no batch on the server has: a real server would make a
/// second batch of the old name, and the lookup by name that keeps a
/// submission exactly-once would take the old batch for the new job.
#[test]
fn a_finished_job_is_forgotten_after_the_retention_while_the_daemon_runs_and_no_name_comes_back() {
    let w = World::new("default_app = \"uppercase\"\nforget_finished_jobs_after_secs = 4\n");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let job_dir = "home_bl_forget_1.0";
    let first = submit(&mut g, uppercase_job(dir, job_dir, "hello\n", ""));
    let old_name = format!("blah#{job_dir}#1");
    assert!(first.ends_with(&format!("/{old_name}")), "{first}");
    wait_status(&mut g, &first, 4);

    // Kept for the gridmanager's questions, without the submit ad.
    eventually("the delivered job's record drops its submit ad", || recorded_ad(dir, &old_name).as_deref() == Some(""));
    let (s, again, r) = status(&mut g, &first);
    assert_eq!((s, again.get_int("ExitCode")), (4, Some(0)), "a repeated status is still answered: {r:?}");

    // Forgotten once the retention has passed, the daemon still running.
    let forgotten = Instant::now();
    eventually("the record is forgotten", || recorded_ad(dir, &old_name).is_none());
    assert!(forgotten.elapsed() < Duration::from_secs(8), "forgotten {:?} after it was seen", forgotten.elapsed());
    let (_, held) = wait_status(&mut g, &first, 5);
    let reason = held.get_str("HoldReason").unwrap_or_default().to_string();
    assert!(reason.contains("no record of this job") && reason.contains("forget_finished_jobs_after_secs = 4"), "{reason}");
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: first.clone() }), ["0", "No error"]);

    // condor_release: a new attempt under a name the server never had.
    std::fs::remove_file(dir.join("out")).unwrap();
    let second = submit(&mut g, uppercase_job(dir, job_dir, "again\n", ""));
    assert!(second.ends_with(&format!("/blah#{job_dir}#2")), "{second}");
    let (_, done) = wait_status(&mut g, &second, 4);
    assert_eq!(done.get_int("ExitCode"), Some(0));
    assert_eq!(std::fs::read_to_string(dir.join("out")).unwrap(), "AGAIN\n", "the new job ran, not the old one");
    assert_eq!(sim.batches_named(&old_name).len(), 1, "no second batch of the forgotten job's name");
    assert_eq!(sim.batches_named(&format!("blah#{job_dir}#2")).len(), 1);
}

#[test]
fn a_failing_job_completes_with_its_exit_code() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.to_path_buf();
    std::fs::write(iwd.join("stdin.txt"), "x\n").unwrap();
    let ad = job_ad(
        &iwd,
        "home_bl_fail_3.0",
        &[
            ("Queue", str_value("uppercase")),
            ("Arguments", str_value("--fail 3")),
            ("In", str_value("stdin.txt")),
            ("Out", str_value("f.out")),
            ("Err", str_value("f.err")),
        ],
    );
    let id = submit(&mut g, ad);
    let (_, ad) = wait_status(&mut g, &id, 4);
    assert_eq!(ad.get_int("ExitCode"), Some(3), "{ad}");
    assert_eq!(ad.get_bool("ExitBySignal"), Some(false));
    let reason = ad.get_str("ExitReason").unwrap();
    assert!(reason.contains("too_many_error_results") && reason.contains("exit status 3"), "{reason}");
    assert!(iwd.join("f.out").exists() && iwd.join("f.err").exists());
    assert_eq!(sim_job(sim, &id)["status"], "ERROR");
}

#[test]
fn jobs_a_person_must_fix_are_held_with_a_reason_that_says_what_to_do() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.to_path_buf();
    std::fs::write(iwd.join("in"), "x\n").unwrap();
    let cases = [
        ("home_bl_noapp", vec![("BoincApp", str_value("nosuchapp")), ("TransferInput", str_value("in"))], "has no app named nosuchapp"),
        ("home_bl_noinput", vec![("BoincApp", str_value("uppercase")), ("TransferInput", str_value("missing.txt"))], "can't be read"),
        ("home_bl_unbound", vec![("BoincApp", str_value("concat")), ("TransferInput", str_value("in"))], "no input name matches"),
        ("home_bl_chooseapp", vec![("TransferInput", str_value("in"))], "+remote_BoincApp"),
        (
            "home_bl_badauth",
            vec![
                ("BoincApp", str_value("uppercase")),
                ("TransferInput", str_value("in")),
                ("BoincAuthenticatorFile", str_value("wrong.auth")),
            ],
            "refused the account key",
        ),
    ];
    std::fs::write(iwd.join("wrong.auth"), "0123456789abcdef\n").unwrap();
    for (job_dir, attrs, expect) in cases {
        let id = submit(&mut g, job_ad(&iwd, job_dir, &attrs));
        let (_, ad) = wait_status(&mut g, &id, 5);
        let reason = ad.get_str("HoldReason").unwrap();
        assert!(reason.contains(expect), "{job_dir}: {reason}");
        assert!(reason.ends_with("condor_release the job"), "{reason}");
        // After a remote hold the gridmanager cancels: that succeeds.
        assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: id })[0], "0");
    }
    // Nothing was created on the server for any of them.
    assert!(sim.state()["jobs"].as_array().unwrap().is_empty());
    // A submit ad without JobDirectory is refused: 4 fields, an error, no id.
    let mut ad = job_ad(&iwd, "x", &[]);
    ad.remove("JobDirectory");
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!((r[0].as_str(), r[2].as_str()), ("1", "N/A"), "{r:?}");
}

#[test]
fn without_a_configured_project_jobs_are_held_and_ping_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut g = start(dir, None);
    let id = submit(&mut g, job_ad(dir, "home_bl_noproject", &[("BoincApp", str_value("uppercase"))]));
    assert!(id.starts_with("boinc/none/"), "{id}");
    let (_, ad) = wait_status(&mut g, &id, 5);
    assert!(ad.get_str("HoldReason").unwrap().contains("project_url"), "{ad}");
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: id })[0], "0");
}

#[test]
fn a_killed_daemon_is_replaced_and_picks_its_job_up_by_id() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.join("w");
    std::fs::create_dir_all(&iwd).unwrap();
    let mut ad = uppercase_job(&iwd, "home_bl_restart_7.0", "restart me\n", "--sleep-ms 3000");
    ad.insert("TransferOutput", str_value("out"));
    ad.insert("TransferOutputRemaps", str_value("out=result.txt"));
    let id = submit(&mut g, ad.clone());
    wait_status(&mut g, &id, 2);
    g.kill();

    // The gridmanager starts a fresh GAHP and asks for the same id.
    let mut g = w.start();
    let (_, done) = wait_status(&mut g, &id, 4);
    assert_eq!(done.get_int("ExitCode"), Some(0));
    assert_eq!(std::fs::read_to_string(iwd.join("result.txt")).unwrap(), "RESTART ME\n");
    // A resubmit of it (its submit result lost) makes no second job.
    assert_eq!(submit(&mut g, ad), id);
    assert_eq!(sim.state()["jobs"].as_array().unwrap().len(), 1);
}

#[test]
fn a_status_storm_costs_no_extra_rpc_and_an_outage_keeps_the_last_status() {
    let w = World::new("status_refresh_secs = 2\n");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(submit(&mut g, uppercase_job(dir, &format!("home_bl_storm_{i}"), "x\n", "--sleep-ms 8000")));
    }
    for id in &ids {
        wait_status(&mut g, id, 2);
    }
    let before = sim_calls(sim, "submit_rpc_handler.php:query_batch2");
    let started = Instant::now();
    for _ in 0..30 {
        for id in &ids {
            assert_eq!(status(&mut g, id).0, 2);
        }
    }
    // One refresh per 2 s period (plus one that may straddle the window).
    let periods = started.elapsed().as_secs() / 2 + 2;
    let calls = sim_calls(sim, "submit_rpc_handler.php:query_batch2") - before;
    assert!(calls <= periods, "{calls} query_batch2 calls for 90 status queries; at most {periods} periods");

    // The project goes down: the last known status, not errors.
    sim_post(sim, "web", r#"{"stopped": true}"#);
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(5) {
        let (s, _, r) = status(&mut g, &ids[0]);
        assert_eq!((r[0].as_str(), s), ("0", 2), "{r:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    sim_post(sim, "web", r#"{"stopped": false}"#);
    for id in &ids {
        wait_status(&mut g, id, 4);
    }
}

#[test]
fn with_its_state_lost_a_job_is_still_watched_and_cancelled_by_its_id() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let id = submit(&mut g, uppercase_job(dir, "home_bl_lost_1.0", "x\n", "--sleep-ms 30000"));
    wait_status(&mut g, &id, 2);
    g.kill();
    std::fs::remove_dir_all(dir.join("state")).unwrap();

    let mut g = w.start();
    // The first answer may be "not known yet" (an error the gridmanager
    // retries); then the state comes from the server, by the id alone.
    wait_status(&mut g, &id, 2);
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: id.clone() }), ["0", "No error"]);
    assert_ne!(sim_job(sim, &id)["error_mask"].as_i64().unwrap() & 16, 0, "aborted");
}

/// The state directory lost while a job runs, the job finishing while no
/// daemon is up: the new daemon holds it (its outputs have nowhere to go)
/// with a reason that says what a release does, and the release adopts
/// the BOINC job, delivering its outputs without running it again.
#[test]
fn with_its_state_lost_a_job_that_finished_meanwhile_is_adopted_on_release() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let ad = uppercase_job(dir, "home_bl_adopt_1.0", "adopt me\n", "--sleep-ms 1500");
    let id = submit(&mut g, ad.clone());
    wait_status(&mut g, &id, 2);
    g.kill();
    std::fs::remove_dir_all(dir.join("state")).unwrap();
    eventually("the job finished on the project", || sim_job(sim, &id)["status"] == "DONE");

    let mut g = w.start();
    let (_, held) = wait_status(&mut g, &id, 5);
    let reason = held.get_str("HoldReason").unwrap_or_default().to_string();
    let name = id.rsplit('/').next().unwrap();
    assert!(reason.contains("state database was lost") && reason.contains(&format!("adopts BOINC job {name}")), "{reason}");
    assert!(!dir.join("out").exists(), "nothing delivered while held");

    // condor_release: the gridmanager submits the same ad again.
    let again = submit(&mut g, ad);
    assert_eq!(again, id, "the same job, adopted");
    let (_, done) = wait_status(&mut g, &again, 4);
    assert_eq!(done.get_int("ExitCode"), Some(0));
    assert_eq!(std::fs::read_to_string(dir.join("out")).unwrap(), "ADOPT ME\n");
    let batches = sim.batches_named(name);
    assert_eq!(batches.len(), 1, "no second batch: {batches:?}");
    assert_eq!(sim.jobs_of(batches[0]["id"].as_i64().unwrap()).len(), 1, "no second job");
}

#[test]
fn a_job_that_names_its_own_project_is_found_again_after_a_restart() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let iwd = dir.join("w");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("mine.auth"), format!("{}  trailing words are ignored\n", sim.auth)).unwrap();
    let mut ad = uppercase_job(&iwd, "home_bl_own_1.0", "own project\n", "--sleep-ms 2000");
    ad.insert("BoincProjectUrl", str_value(sim.url.trim_end_matches('/')));
    ad.insert("BoincAuthenticatorFile", str_value("mine.auth"));
    let id = submit(&mut g, ad);
    let default_key = submit(&mut g, job_ad(&iwd, "home_bl_default", &[("BoincApp", str_value("nosuchapp"))]));
    assert_ne!(id.split('/').nth(1), default_key.split('/').nth(1), "its own project key: {id}");
    wait_status(&mut g, &id, 2);
    g.kill();

    // No default project any more: the job's project comes from the state database.
    let mut g = start(dir, None);
    wait_status(&mut g, &id, 4);
    assert_eq!(std::fs::read_to_string(iwd.join("out")).unwrap(), "OWN PROJECT\n");
}

#[test]
fn a_panicking_project_actor_still_yields_one_result_of_the_right_shape() {
    let w = World::new("default_app = \"uppercase\"\n");
    let dir = w.path();
    let mut g = gahp_with(dir, &["--config", w.config.to_str().unwrap()], &[("BOINC_GAHP_PANIC_ON", "blah#home_bl_doomed#1")]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    std::fs::write(dir.join("in"), "x\n").unwrap();
    let ad = |d: &str| default_app_job(dir, d, &[("TransferInput", str_value("in"))]);
    let doomed = submit(&mut g, ad("home_bl_doomed"));
    let (_, _, r) = status(&mut g, &doomed);
    assert_eq!(r[0], "1", "{r:?}");
    assert!(r[1].contains("internal error"), "{r:?}");
    // The project's actor was replaced: other jobs go on.
    let fine = submit(&mut g, ad("home_bl_fine"));
    wait_status(&mut g, &fine, 4);
    assert!(log_text(dir).contains("panic"));

    // A request id already pending is refused with E, as for BOINC_* commands.
    let line = gahp_protocol::gahp::request::format(&Request::Command {
        reqid: ReqId(900),
        command: Command::Blah(BlahCommand::JobStatus { job_id: fine.clone() }),
    });
    assert_eq!(g.command_line(&line).unwrap(), ["S"]);
    assert_eq!(g.command_line(&line).unwrap(), ["E"], "in flight or queued: pending either way");
    assert_eq!(g.wait_result(900, WAIT).unwrap().len(), 4);
}

#[test]
fn the_example_config_file_is_valid() {
    use clap::Parser;
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/boinc-gahp.config.toml.example");
    let cli = boinc_gahp::cli::Cli::parse_from(["boinc_gahp", "--config", example]);
    let blah = boinc_gahp::settings::settings(&cli.flags).unwrap().daemon.blah;
    assert_eq!(blah.project_url.as_deref(), Some("https://boinc.example.org/myproject/"));
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap());
    assert_eq!(blah.authenticator_file, Some(home.join(".boinc/myproject.auth")));
    assert_eq!(blah.status_refresh, Duration::from_secs(30));
}

#[test]
fn a_job_submitted_during_maintenance_waits_for_the_project() {
    let w = World::new("");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    sim_post(sim, "web", r#"{"stopped": true}"#);
    let id = submit(&mut g, uppercase_job(dir, "home_bl_maintenance", "later\n", ""));
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(2) {
        assert_eq!(status(&mut g, &id).0, 1, "waiting, not held");
        std::thread::sleep(Duration::from_millis(200));
    }
    sim_post(sim, "web", r#"{"stopped": false}"#);
    wait_status(&mut g, &id, 4);
    assert_eq!(std::fs::read_to_string(dir.join("out")).unwrap(), "LATER\n");
}

/// Sends every command at once (as a gridmanager does with a burst of
/// jobs), then collects their results, in order of `commands`.
fn blah_burst(g: &mut GahpClient, commands: Vec<BlahCommand>, timeout: Duration) -> Vec<Vec<String>> {
    let mut ids = Vec::with_capacity(commands.len());
    for command in commands {
        let reqid = g.reqid();
        g.submit_async(&Request::Command { reqid: ReqId(reqid), command: Command::Blah(command) }).unwrap();
        ids.push(reqid);
    }
    ids.into_iter().map(|id| g.wait_result(id, timeout).unwrap()).collect()
}

/// The BOINC batch and job of a BLAH id (`.../<batch>/<job>` or `.../<job>`).
fn batch_and_job(id: &str) -> (String, String) {
    let mut parts = id.rsplit('/');
    let job = parts.next().unwrap().to_string();
    let batch = parts.next().filter(|p| p.starts_with("blah#")).map_or_else(|| job.clone(), String::from);
    (batch, job)
}

#[test]
fn jobs_submitted_together_share_a_batch_and_a_cancel_aborts_only_its_job() {
    let w = World::new("default_app = \"uppercase\"\nbatch_window_secs = 2\n");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    let ad = |i: usize, args: &str| {
        let iwd = dir.join(format!("job{i}"));
        std::fs::create_dir_all(&iwd).unwrap();
        std::fs::write(iwd.join("in"), format!("job {i}\n")).unwrap();
        default_app_job(&iwd, &format!("home_bl_share_{i}.0"), &[("Arguments", str_value(args)), ("TransferInput", str_value("in"))])
    };
    let submits: Vec<BlahCommand> =
        (0..20).map(|i| BlahCommand::JobSubmit { ad: ad(i, if i == 7 { "--sleep-ms 60000" } else { "" }) }).collect();
    let ids: Vec<String> = blah_burst(&mut g, submits, WAIT)
        .into_iter()
        .map(|r| {
            assert_eq!(r[..2], ["0", "No error"], "{r:?}");
            r[2].clone()
        })
        .collect();
    // One batch, named after its first job; every id names it and its job.
    let (batch, first) = batch_and_job(&ids[0]);
    assert_eq!(batch, first);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(batch_and_job(id), (batch.clone(), format!("blah#home_bl_share_{i}.0#1")), "{id}");
    }
    // A resubmit of a member (its result lost): the same id.
    assert_eq!(submit(&mut g, ad(3, "")), ids[3]);
    eventually("the batch is created after its window", || !sim.batches_named(&batch).is_empty());
    eventually("the batch holds the 20 jobs", || sim.jobs_of(sim.batches_named(&batch)[0]["id"].as_i64().unwrap()).len() == 20);

    // condor_rm of one job aborts that job alone.
    wait_status(&mut g, &ids[7], 2);
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: ids[7].clone() }), ["0", "No error"]);
    let cancelled = sim_job(sim, &ids[7]);
    assert_ne!(cancelled["error_mask"].as_i64().unwrap() & 16, 0, "cancelled: {cancelled}");
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| *i != 7) {
        let (_, done) = wait_status(&mut g, id, 4);
        assert_eq!(done.get_int("ExitCode"), Some(0));
        assert_eq!(std::fs::read_to_string(dir.join(format!("job{i}/out"))).unwrap(), format!("JOB {i}\n"));
    }
    // Every job delivered or removed: the batch is retired, once.
    eventually("the shared batch is retired", || sim_batch_state(sim, &ids[0]) == 4);
    assert_eq!(sim_calls(sim, "submit_rpc_handler.php:create_batch"), 1);
    assert_eq!(sim_calls(sim, "submit_rpc_handler.php:submit_batch"), 1);
    assert_eq!(sim_calls(sim, "submit_rpc_handler.php:retire_batch"), 1);
    assert_eq!(sim_calls(sim, "submit_rpc_handler.php:get_templates"), 1, "templates once, for submit and delivery");
    assert_eq!(sim.batches_named(&batch).len(), 1);
}

/// The RPC bill of `batch boinc` at scale: every RPC the project served,
/// per job, from the submits to the retirement, for 2,000 jobs (about
/// 10 s here; BLAH_SCALE_JOBS sets another count). The project's web is
/// down while the jobs run, so that the daemon finds them all finished at
/// once (as after a night's run), whatever the machine's speed: each
/// batch's outputs then come in one zip, and the bill is one
/// query_completed_job per job and a few calls per batch. (Jobs that
/// finish a few at a time are fetched one by one: see docs/blah.md.)
#[test]
fn many_jobs_cost_at_most_one_and_an_eighth_rpcs_each() {
    let n: usize = std::env::var("BLAH_SCALE_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let sim_dir = tempfile::tempdir().unwrap();
    let sim_config = sim_dir.path().join("sim.toml");
    std::fs::write(&sim_config, "tick_ms = 50\nmax_parallel_runs = 8\n[[hosts]]\nname = \"h\"\ncount = 64\nflops = 1e11\n").unwrap();
    let sim = Sim::start_with(&["--config", sim_config.to_str().unwrap()]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&sim, dir.path(), "default_app = \"uppercase\"\nstatus_refresh_secs = 2\nbatch_window_secs = 1\n");
    let mut g = start(dir.path(), Some(&config));
    let iwd = |i: usize| dir.path().join(format!("j{i}"));
    let submits = (0..n)
        .map(|i| {
            std::fs::create_dir_all(iwd(i)).unwrap();
            std::fs::write(iwd(i).join("in"), format!("scale job {i}\n")).unwrap();
            BlahCommand::JobSubmit { ad: default_app_job(&iwd(i), &format!("home_bl_scale_{i}.0"), &[("TransferInput", str_value("in"))]) }
        })
        .collect();
    let ids: Vec<String> = blah_burst(&mut g, submits, WAIT).into_iter().map(|r| r[2].clone()).collect();
    let shared: std::collections::HashSet<String> = ids.iter().map(|id| batch_and_job(id).0).collect();
    eventually("every job is on the project", || sim.state()["jobs"].as_array().unwrap().len() == n);
    // The web site is stopped while the jobs run, so that the daemon finds
    // them all DONE at once. Its refreshes in that time are refused and
    // counted; how many there are depends on how long the hosts take (the
    // machine's load), not on the jobs, so they are left out of the budget.
    let total_rpcs = || -> u64 { sim.state()["rpc_counts"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum() };
    let before_stop = total_rpcs();
    sim_post(&sim, "web", r#"{"stopped": true}"#);
    let all_done = || sim.state()["jobs"].as_array().unwrap().iter().all(|j| j["status"] == "DONE");
    let until = Instant::now() + Duration::from_secs(600);
    while !all_done() {
        assert!(Instant::now() < until, "the jobs did not finish on the project");
        std::thread::sleep(Duration::from_millis(500));
    }
    sim_post(&sim, "web", r#"{"stopped": false}"#);
    let while_stopped = total_rpcs() - before_stop;

    // Poll as the gridmanager does: every job's status, in bursts.
    let until = Instant::now() + Duration::from_secs(600);
    let mut pending: Vec<usize> = (0..n).collect();
    while !pending.is_empty() {
        assert!(Instant::now() < until, "{} jobs not completed", pending.len());
        std::thread::sleep(Duration::from_secs(1));
        let asks = pending.iter().map(|&i| BlahCommand::JobStatus { job_id: ids[i].clone() }).collect();
        let answers = blah_burst(&mut g, asks, WAIT);
        let mut still = Vec::new();
        for (&i, r) in pending.iter().zip(answers) {
            assert_eq!(r[0], "0", "{r:?}");
            match r[2].parse::<i32>().unwrap() {
                4 => assert_eq!(std::fs::read_to_string(iwd(i).join("out")).unwrap(), format!("SCALE JOB {i}\n")),
                s @ (3 | 5) => panic!("job {i} ended with status {s}: {r:?}"),
                _ => still.push(i),
            }
        }
        pending = still;
    }
    eventually("every batch is retired", || {
        let state = sim.state();
        let batches = state["batches"].as_array().unwrap();
        shared.iter().all(|name| batches.iter().any(|b| b["name"] == name.as_str() && b["state"] == 4))
    });
    let state = sim.state();
    let counts = state["rpc_counts"].as_object().unwrap();
    let total: u64 = counts.values().map(|v| v.as_u64().unwrap()).sum::<u64>() - while_stopped;
    let per_job = total as f64 / n as f64;
    println!(
        "{n} jobs in {} batches: {total} RPCs ({while_stopped} more while the web site was stopped), {per_job:.3} per job: {counts:?}",
        shared.len()
    );
    assert!(per_job <= 1.125, "{per_job:.3} RPCs per job: {counts:?}");
    assert!(counts["get_output.php:batch_files"].as_u64().unwrap() >= shared.len() as u64, "{counts:?}");
}

/// Exactly once per job in a shared batch: the create_batch reply is lost,
/// the daemon is killed while submit_batch hangs, and the next daemon
/// (asked for the same ids, and given a resubmit) finishes the batch: one
/// batch, each job once, every output right.
#[test]
fn a_shared_batch_survives_a_lost_reply_and_a_daemon_killed_mid_submit() {
    let w = World::new("default_app = \"uppercase\"\nbatch_window_secs = 1\n");
    let (sim, dir) = (&w.sim, w.path());
    sim.set_faults(serde_json::json!({"seed": 1, "script": [
        {"endpoint": "submit_rpc_handler.php:create_batch", "nth": 1, "kind": "lose_reply"},
        {"endpoint": "submit_rpc_handler.php:submit_batch", "nth": 1, "kind": "hang"},
    ]}));
    let mut g = w.start();
    let ad = |i: usize| {
        let iwd = dir.join(format!("k{i}"));
        std::fs::create_dir_all(&iwd).unwrap();
        std::fs::write(iwd.join("in"), format!("kill {i}\n")).unwrap();
        default_app_job(&iwd, &format!("home_bl_kill_{i}.0"), &[("TransferInput", str_value("in"))])
    };
    let ids: Vec<String> = blah_burst(&mut g, (0..5).map(|i| BlahCommand::JobSubmit { ad: ad(i) }).collect(), WAIT)
        .into_iter()
        .map(|r| r[2].clone())
        .collect();
    let (batch, _) = batch_and_job(&ids[0]);
    assert!(ids.iter().all(|id| batch_and_job(id).0 == batch), "{ids:?}");
    eventually("submit_batch is under way", || sim_calls(sim, "submit_rpc_handler.php:submit_batch") >= 1);
    g.kill();

    let mut g = w.start();
    // A resubmit of a member after the restart: the same job.
    assert_eq!(submit(&mut g, ad(2)), ids[2]);
    for (i, id) in ids.iter().enumerate() {
        let (_, done) = wait_status(&mut g, id, 4);
        assert_eq!(done.get_int("ExitCode"), Some(0));
        assert_eq!(std::fs::read_to_string(dir.join(format!("k{i}/out"))).unwrap(), format!("KILL {i}\n"));
    }
    let batches = sim.batches_named(&batch);
    assert_eq!(batches.len(), 1, "one batch of its name: {batches:?}");
    let jobs = sim.jobs_of(batches[0]["id"].as_i64().unwrap());
    assert_eq!(jobs.len(), 5, "each job once: {jobs:?}");
    assert_eq!(sim.state()["jobs"].as_array().unwrap().len(), 5);
    // The batch made once (found by name after the lost reply), submitted
    // by the second daemon after the first one's call hung.
    assert_eq!(sim_calls(sim, "submit_rpc_handler.php:create_batch"), 1);
    assert_eq!(sim_calls(sim, "submit_rpc_handler.php:submit_batch"), 2);
}

/// BLAH_PING of a project that refuses connections: an error in seconds.
#[test]
fn a_blah_ping_of_a_refused_port_is_answered_at_once() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("boinc.auth"), "k\n").unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[blah]\nproject_url = \"http://127.0.0.1:{port}/\"\nauthenticator_file = \"boinc.auth\"\n")).unwrap();
    let mut g = gahp_with(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let started = Instant::now();
    let r = blah(&mut g, BlahCommand::Ping { batch_type: "boinc".into() });
    assert_eq!(r[0], "1", "{r:?}");
    assert!(r[1].contains("-184"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "answered after {:?}", started.elapsed());
}

/// A batch zip that is hostile or damaged (an entry leaving the directory,
/// a CRC error, a missing entry, not a zip at all) is not trusted: what it
/// does not cover comes job by job, every job completes with the right
/// outputs, and nothing lands outside the jobs' directories.
#[test]
fn a_spoiled_batch_zip_falls_back_to_job_by_job_downloads() {
    let w = World::new("default_app = \"uppercase\"\nbatch_window_secs = 1\n");
    let (sim, dir) = (&w.sim, w.path());
    let mut g = w.start();
    // (spoil, downloads job by job for the round's 4 jobs)
    for (round, (spoil, alone)) in [("escape", 4), ("corrupt", 1), ("drop_first", 1), ("garbage", 4), ("null", 0)].into_iter().enumerate() {
        let spoil_json = if spoil == "null" { "null".to_string() } else { format!("\"{spoil}\"") };
        sim_post(sim, "batch_zip", &format!("{{\"spoil\": {spoil_json}}}"));
        let ad = |i: usize| {
            let iwd = dir.join(format!("r{round}/j{i}"));
            std::fs::create_dir_all(&iwd).unwrap();
            std::fs::write(iwd.join("in"), format!("round {round} job {i}\n")).unwrap();
            default_app_job(&iwd, &format!("home_bl_spoil_{round}_{i}.0"), &[("TransferInput", str_value("in"))])
        };
        let ids: Vec<String> = blah_burst(&mut g, (0..4).map(|i| BlahCommand::JobSubmit { ad: ad(i) }).collect(), WAIT)
            .into_iter()
            .map(|r| r[2].clone())
            .collect();
        let (batch, _) = batch_and_job(&ids[0]);
        // Finished while the daemon can't look: found all at once.
        eventually("the round's batch is on the project", || {
            sim.batches_named(&batch).first().is_some_and(|b| sim.jobs_of(b["id"].as_i64().unwrap()).len() == 4)
        });
        sim_post(sim, "web", r#"{"stopped": true}"#);
        let id = sim.batches_named(&batch)[0]["id"].as_i64().unwrap();
        eventually("the round's jobs finish", || sim.jobs_of(id).iter().all(|j| j["status"] == "DONE"));
        let (zips, singles) = (sim_calls(sim, "get_output.php:batch_files"), sim_calls(sim, "get_output.php:workunit_file"));
        sim_post(sim, "web", r#"{"stopped": false}"#);
        for (i, id) in ids.iter().enumerate() {
            let (_, done) = wait_status(&mut g, id, 4);
            assert_eq!(done.get_int("ExitCode"), Some(0), "{spoil}: {done}");
            let out = std::fs::read_to_string(dir.join(format!("r{round}/j{i}/out"))).unwrap();
            assert_eq!(out, format!("ROUND {round} JOB {i}\n"), "{spoil}");
        }
        assert_eq!(sim_calls(sim, "get_output.php:batch_files"), zips + 1, "{spoil}: one zip for the round");
        assert_eq!(sim_calls(sim, "get_output.php:workunit_file"), singles + alone, "{spoil}: job by job for what the zip lacked");
    }
    let escaped: Vec<_> = gahp_testkit::files_under(dir).into_iter().filter(|p| p.file_name().is_some_and(|n| n == "escaped")).collect();
    assert!(escaped.is_empty(), "{escaped:?}");
    let left: Vec<_> = gahp_testkit::files_under(dir).into_iter().filter(|p| p.to_string_lossy().contains(".batch-outputs-")).collect();
    assert!(left.is_empty(), "no zip left in the state directory: {left:?}");
    let log = log_text(dir);
    assert!(log.contains("fetching the outputs job by job"), "the refusals are logged");
    assert!(!log.contains("auth_str") && !log.contains(&sim.auth), "neither the URL nor the authenticator is logged");
}

/// How long a sequence job may take: its steps run one after another.
const SEQUENCE_WAIT: Duration = Duration::from_secs(180);

/// A `World` whose daemon polls its work sequences every 200 ms.
fn sequence_world() -> World {
    let w = World::new("");
    let text = std::fs::read_to_string(&w.config).unwrap();
    std::fs::write(&w.config, format!("sequence_poll_ms = 200\n{text}")).unwrap();
    w
}

/// A `stepper` work sequence job of `steps` steps from an empty `state`
/// (its state file), with `extra` as its other input, in `iwd`.
fn sequence_job(iwd: &Path, job_dir: &str, steps: i64, args: &str) -> ClassAd {
    std::fs::create_dir_all(iwd).unwrap();
    std::fs::write(iwd.join("state"), "").unwrap();
    std::fs::write(iwd.join("extra"), format!("extra of {job_dir}\n")).unwrap();
    default_app_job(
        iwd,
        job_dir,
        &[
            ("BoincApp", str_value("stepper")),
            ("Arguments", str_value(args)),
            ("TransferInput", str_value("state, extra")),
            ("Out", str_value("seq.out")),
            ("Err", str_value("seq.err")),
            ("BoincSequenceSteps", Value::Int(steps)),
            ("BoincStateFiles", str_value("state")),
            ("BoincMaxStepTime", Value::Int(60)),
            ("BoincEndMarker", str_value("DONE")),
        ],
    )
}

/// The stepper's state after `n` steps of the job of `job_dir`, computed
/// here: it proves every step ran once, in order, on the right state.
fn expected_stepper_state(job_dir: &str, n: u32) -> String {
    let extra = format!("extra of {job_dir}\n");
    let mut state = String::new();
    for _ in 0..n {
        state = boinc_sim::apps::stepper_next(&state, extra.as_bytes()).unwrap();
    }
    state
}

/// The sim's jobs of a sequence job's steps: (step, attempt, status, error_mask).
fn sim_steps(sim: &Sim, job_dir: &str) -> Vec<(u32, u32, String, i64)> {
    let prefix = format!("blah-{job_dir}#");
    let mut steps: Vec<_> = sim.state()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| {
            let (step, attempt) = j["name"].as_str()?.strip_prefix(&prefix)?.split_once('#')?;
            Some((
                step.parse().ok()?,
                attempt.parse().ok()?,
                j["status"].as_str().unwrap_or("").to_string(),
                j["error_mask"].as_i64().unwrap_or(0),
            ))
        })
        .collect();
    steps.sort();
    steps
}

fn int(ad: &ClassAd, name: &str) -> i64 {
    ad.get_int(name).unwrap_or_else(|| panic!("no {name} in {ad}"))
}

#[test]
fn a_ten_step_sequence_job_is_one_job_that_completes_with_its_final_state() {
    let w = sequence_world();
    let (sim, iwd) = (&w.sim, w.path().join("job"));
    let mut g = w.start();
    let id = submit(&mut g, sequence_job(&iwd, "home_bl_seq_1.0", 10, ""));
    let (seen, done) = wait_status_within(&mut g, &id, 4, SEQUENCE_WAIT);
    assert_eq!(seen.first(), Some(&1), "idle first: {seen:?}");
    assert!(seen.contains(&2), "then running: {seen:?}");
    assert_eq!(int(&done, "ExitCode"), 0, "{done}");
    assert_eq!(int(&done, "BoincStepsDone"), 10, "{done}");
    // The final state and the last step's outputs are in Iwd; Out and Err too.
    assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), expected_stepper_state("home_bl_seq_1.0", 10));
    assert!(!iwd.join("DONE").exists(), "the marker only comes with a step that writes it");
    assert_eq!(std::fs::read(iwd.join("seq.out")).unwrap(), b"");
    assert_eq!(std::fs::read(iwd.join("seq.err")).unwrap(), b"");
    // One BOINC job per step and relocation, all done, none in a BLAH batch.
    let steps = sim_steps(sim, "home_bl_seq_1.0");
    let relocations = int(&done, "BoincRelocations") as usize;
    assert_eq!(steps.len(), 10 + relocations, "{steps:?}");
    assert_eq!(steps.iter().filter(|s| s.2 == "DONE").count(), 10, "{steps:?}");
    assert!(sim.batches_named("blah#home_bl_seq_1.0#1").is_empty());
    // A resubmit of the completed job (its result lost) gets the same job.
    assert_eq!(submit(&mut g, sequence_job(&iwd, "home_bl_seq_1.0", 10, "")), id);
}

#[test]
fn a_cancelled_sequence_job_stops_and_a_release_resumes_from_the_last_completed_step() {
    let w = sequence_world();
    let (sim, iwd) = (&w.sim, w.path().join("job"));
    let mut g = w.start();
    let dir = "home_bl_seqhold_1.0";
    let ad = || sequence_job(&iwd, dir, 8, "--sleep-ms 400");
    let first = submit(&mut g, ad());
    let until = Instant::now() + SEQUENCE_WAIT;
    loop {
        let (s, a, r) = status(&mut g, &first);
        assert!(s == 1 || s == 2, "{r:?}");
        if a.get_int("BoincStepsDone").is_some_and(|n| n >= 2) {
            break;
        }
        assert!(Instant::now() < until, "two steps not done: {r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // condor_hold (or condor_rm): the live step is aborted on the server.
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: first.clone() }), ["0", "No error"]);
    eventually("the live step is aborted", || sim_steps(sim, dir).iter().any(|s| s.2 == "ERROR" && s.3 & 16 != 0));
    let stopped = sim_steps(sim, dir);
    // A step is submitted once the one before it was collected: so every
    // step before the last one submitted was complete at the hold (a step
    // done on the server but not yet collected may run again).
    let done_at_hold = stopped.iter().map(|s| s.0).max().unwrap() - 1;
    assert!((2..8).contains(&done_at_hold), "{stopped:?}");
    // Nothing runs on the server while the job is held.
    std::thread::sleep(Duration::from_millis(1500));
    let later = sim_steps(sim, dir);
    assert_eq!(later.len(), stopped.len(), "no step submitted while held: {later:?}");
    assert!(later.iter().all(|s| s.2 == "DONE" || s.2 == "ERROR"), "{later:?}");
    assert_eq!(status(&mut g, &first).0, 3, "the cancelled attempt is removed");

    // condor_release: the same ad again, a new BLAH attempt of the same sequence.
    let second = submit(&mut g, ad());
    assert!(second.ends_with(&format!("/blah#{dir}#2")), "{second}");
    // The daemon killed mid-chain is replaced and picks the job up by id.
    std::thread::sleep(Duration::from_millis(700));
    g.kill();
    let mut g = w.start();
    let (_, done) = wait_status_within(&mut g, &second, 4, SEQUENCE_WAIT);
    assert_eq!(int(&done, "BoincStepsDone"), 8, "{done}");
    assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), expected_stepper_state(dir, 8));
    // Steps completed before the hold ran once: none of them again.
    let steps = sim_steps(sim, dir);
    for step in 1..=done_at_hold {
        let runs: Vec<_> = steps.iter().filter(|s| s.0 == step).collect();
        assert_eq!(runs.len(), 1, "step {step} ran once: {steps:?}");
    }
    for step in 1..=8 {
        assert!(steps.iter().any(|s| s.0 == step && s.2 == "DONE"), "step {step} done: {steps:?}");
    }
}

#[test]
fn a_sequence_job_with_bad_values_is_refused_at_submit_saying_why() {
    let w = sequence_world();
    let iwd = w.path().join("job");
    let mut g = w.start();
    let with = |attr: &str, v: Value| {
        let mut ad = sequence_job(&iwd, "home_bl_bad_1.0", 5, "");
        ad.insert(attr, v);
        ad
    };
    for (ad, says) in [
        (with("BoincSequenceSteps", Value::Int(0)), "+remote_BoincSequenceSteps must be a whole number"),
        (with("BoincSequenceSteps", Value::Real(2.5)), "+remote_BoincSequenceSteps must be a whole number"),
        (with("BoincStateFiles", str_value("state ckpt")), "state file ckpt is not among the job's transfer_input_files"),
        (with("BoincEndMarker", str_value("out/DONE")), "+remote_BoincEndMarker must be a plain file name"),
    ] {
        let r = blah(&mut g, BlahCommand::JobSubmit { ad });
        assert_eq!(r[0], "1", "{r:?}");
        assert!(r[1].contains(says), "{r:?}");
    }
    // A state file the app never writes: held with the reason.
    let id = submit(&mut g, with("BoincStateFiles", str_value("extra")));
    let (_, held) = wait_status(&mut g, &id, 5);
    let reason = held.get_str("HoldReason").unwrap();
    assert!(reason.contains("state file extra is not an output of app stepper"), "{reason}");
}

#[test]
fn a_failed_sequence_job_completes_as_a_failed_boinc_job_with_the_reason() {
    let w = sequence_world();
    let iwd = w.path().join("job");
    let mut g = w.start();
    // Every step fails; one attempt per step.
    let mut ad = sequence_job(&iwd, "home_bl_seqfail_1.0", 4, "--fail 3");
    ad.insert("BoincMaxAttempts", Value::Int(1));
    let id = submit(&mut g, ad);
    let (_, done) = wait_status_within(&mut g, &id, 4, SEQUENCE_WAIT);
    assert_eq!(int(&done, "ExitCode"), 1, "{done}");
    assert_eq!(int(&done, "BoincStepsDone"), 0, "{done}");
    let reason = done.get_str("ExitReason").unwrap();
    assert!(reason.starts_with("BOINC work sequence failed: ") && reason.contains("step 1"), "{reason}");
    assert_eq!(std::fs::read(iwd.join("seq.out")).unwrap(), b"");
    let err = std::fs::read_to_string(iwd.join("seq.err")).unwrap();
    assert!(err.contains(reason), "{err}");
    // The initial state is left as it was.
    assert_eq!(std::fs::read(iwd.join("state")).unwrap(), b"");
}

/// `[blah] pool`: a sequence job the pool placed is relocated to the pool's
/// other project when its step stalls; its status, a hold and a release
/// follow it there, and it completes with the right final state.
#[test]
fn a_sequence_job_placed_by_a_pool_moves_on_when_its_step_stalls_and_follows_through_hold_and_release() {
    let (a, b) = (Sim::start(), Sim::start());
    let dir = tempfile::tempdir().unwrap();
    // a is first in the pool; every host of a keeps its instance for ever.
    for id in 1..=4 {
        a.set_host(&format!("{{\"id\": {id}, \"straggler_rate\": 1.0, \"straggler_factor\": 1e9}}"));
    }
    pool_file(dir.path(), &[("a", &a), ("b", &b)], "");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "sequence_poll_ms = 200\n[blah]\npool = \"pool.toml\"\nstatus_refresh_secs = 0.3\n").unwrap();
    let mut g = start(dir.path(), Some(&config));
    let (iwd, job_dir) = (dir.path().join("job"), "home_bl_roam_1.0");
    let ad = || {
        let mut ad = sequence_job(&iwd, job_dir, 6, "--sleep-ms 300");
        ad.insert("BoincMaxStepTime", Value::Int(2));
        ad
    };
    let first = submit(&mut g, ad());
    eventually("step 1 is submitted to a", || !sim_steps(&a, job_dir).is_empty());
    // Moved to b, where two steps complete; the status still comes (it is
    // asked of a's side, which forwards it).
    let until = Instant::now() + SEQUENCE_WAIT;
    loop {
        let (s, st, r) = status(&mut g, &first);
        assert!(s == 1 || s == 2, "{r:?}");
        if st.get_int("BoincStepsDone").is_some_and(|n| n >= 2) {
            assert_eq!(int(&st, "BoincRelocations"), 1, "{st}");
            break;
        }
        assert!(Instant::now() < until, "two steps not done on b: {r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sim_steps(&a, job_dir).len(), 1, "step 1's one attempt on a");
    // condor_hold: the live step on b is aborted; condor_release: the same
    // ad again goes to b, where the sequence is, and resumes there.
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: first.clone() }), ["0", "No error"]);
    eventually("the live step on b is aborted", || sim_steps(&b, job_dir).iter().any(|s| s.2 == "ERROR" && s.3 & 16 != 0));
    let done_at_hold = sim_steps(&b, job_dir).iter().filter(|s| s.2 == "DONE").count();
    let second = submit(&mut g, ad());
    let (_, done) = wait_status_within(&mut g, &second, 4, SEQUENCE_WAIT);
    assert_eq!(int(&done, "BoincStepsDone"), 6, "{done}");
    assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), expected_stepper_state(job_dir, 6));
    let on_b = sim_steps(&b, job_dir);
    for step in 1..=6 {
        let done = on_b.iter().filter(|s| s.0 == step && s.2 == "DONE").count();
        assert_eq!(done, 1, "step {step} done once on b: {on_b:?}");
    }
    assert!(done_at_hold >= 2, "{on_b:?}");
    assert_eq!(sim_steps(&a, job_dir).len(), 1, "nothing more on a: {:?}", sim_steps(&a, job_dir));
}

/// condor_rm of a sequence job: the gridmanager's cancel is the same as for
/// condor_hold, so the sequence stops; one never resumed is purged after
/// `purge_stopped_sequences_after_secs` (its batches retired, its files
/// deleted), and a release after all is held saying so.
#[test]
fn a_sequence_job_cancelled_and_never_resumed_is_purged() {
    let w = World::new("");
    let text = std::fs::read_to_string(&w.config).unwrap();
    std::fs::write(&w.config, format!("sequence_poll_ms = 200\npurge_stopped_sequences_after_secs = 2\n{text}")).unwrap();
    let (sim, iwd, dir) = (&w.sim, w.path().join("job"), "home_bl_seqrm_1.0");
    let mut g = w.start();
    let ad = || sequence_job(&iwd, dir, 8, "--sleep-ms 400");
    let id = submit(&mut g, ad());
    let (_, st, _) = {
        let until = Instant::now() + SEQUENCE_WAIT;
        loop {
            let s = status(&mut g, &id);
            if s.1.get_int("BoincStepsDone").is_some_and(|n| n >= 1) {
                break s;
            }
            assert!(Instant::now() < until, "no step done: {:?}", s.2);
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert!(int(&st, "BoincStepsDone") >= 1);
    let content = w.path().join("state").join("sequence-files");
    assert!(std::fs::read_dir(&content).unwrap().count() > 0, "the state is kept while it runs");
    assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: id.clone() }), ["0", "No error"]);
    // Every batch of the sequence ends retired, and its files are deleted.
    let prefix = format!("blah-{dir}#");
    eventually("every batch of the sequence is retired", || {
        let batches: Vec<i64> = sim.state()["batches"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
            .map(|b| b["state"].as_i64().unwrap())
            .collect();
        !batches.is_empty() && batches.iter().all(|&s| s == 4)
    });
    eventually("the sequence's files are deleted", || std::fs::read_dir(&content).unwrap().count() == 0);
    assert!(log_text(w.path()).contains("purging a sequence stopped for more than 2 s"));
    // A release after the purge: held, saying why.
    let again = submit(&mut g, ad());
    let (_, held) = wait_status_within(&mut g, &again, 5, WAIT);
    let reason = held.get_str("HoldReason").unwrap_or_default().to_string();
    assert!(reason.contains("was purged: stopped") && reason.contains("submit the job anew"), "{reason}");
}
