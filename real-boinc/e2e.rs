//! End to end against a real BOINC server: BOINC's own PHP handlers,
//! `create_work`, MariaDB and a real client computing the jobs. The
//! simulated project is only as strict as what it was told; these tests
//! check what a real server does with what the daemon sends.
//!
//! Every test is `#[ignore]`d: `cargo test --workspace --release` stays
//! self-contained. `real-boinc/run` sets the server up and runs
//! them (`docs/real-boinc-test.md`); against a server of your own:
//!
//! ```sh
//! BOINC_REAL_URL=http://127.0.0.1/boinctest/ BOINC_REAL_AUTH_FILE=~/submitter.auth \
//! BOINC_REAL_CLIENT_RPC=127.0.0.1:31418 BOINC_REAL_CLIENT_PASSWD=... \
//!     cargo test --release --test real_boinc_e2e -- --ignored --test-threads=1
//! ```
//!
//! The project needs BOINC's example app `uppercase` (input `in`, output
//! `out`) and the `stepper` app of the test server (input and output
//! `state`; it writes each argv word to stderr as `argv[i]=<word>`; `--sleep
//! S` makes a step take S seconds), and the runner app `runner` of
//! `deploy/boinc-runner` (docs/runner.md), and its container runner
//! `container_runner` (`register --container`) with podman and the image
//! of `deploy/boinc-runner/test-image` (or `BOINC_REAL_CONTAINER_IMAGE`,
//! which must be like it) on the client's host. `BOINC_REAL_CLIENT_RPC` and
//! `BOINC_REAL_CLIENT_PASSWD` name the GUI RPC of a client attached to the
//! project: the tests nudge it while they wait, and the work-sequence test
//! suspends it to make a step miss its deadline (it fails without them).
//! Batches are named `rbci_<test>_<tag>` and retired at the end.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "e2e/quorum.rs"]
mod quorum;
use common::*;
use gahp_protocol::classad::{format_args_v2, ClassAd, Value};
use gahp_protocol::gahp::sequence_commands::{CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use gahp_protocol::gahp::{BlahCommand, Command as GahpCommand};
#[path = "boinc_client.rs"]
mod boinc_client;
use boinc_client::{BoincClient, Nudger};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const NEEDS: &str = "needs a real BOINC server: real-boinc/run";

/// How long a real job may take to be fetched, run and reported.
const JOB_WAIT: Duration = Duration::from_secs(240);
/// How often a waiting test nudges the client.
const NUDGE_EVERY: Duration = Duration::from_secs(3);

/// Arguments with everything a command line can trip on: white space,
/// both quotes, a backslash, XML's specials, a tab, non-ASCII. Each must
/// reach the app as exactly this word.
const ARGS: &[&str] = &[
    "plain",
    "two words",
    "it's",
    "it's here",
    "say \"hi\"",
    "back\\slash",
    "a&b",
    "x<y>z",
    "tab\there",
    "na\u{ef}ve caf\u{e9} \u{65e5}\u{672c}",
];

/// A word no quoting can carry through BOINC's splitter: white space and
/// both kinds of quote.
const UNCARRIABLE: &str = "it's \"both\" here";

/// The server under test, from the environment.
struct Real {
    url: String,
    auth: String,
    auth_file: PathBuf,
    client: Option<BoincClient>,
    /// Distinguishes this run's batches from every other run's.
    tag: String,
}

fn real() -> Real {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let url = var("BOINC_REAL_URL").unwrap_or_else(|| panic!("BOINC_REAL_URL is not set ({NEEDS})"));
    let auth_file = PathBuf::from(var("BOINC_REAL_AUTH_FILE").unwrap_or_else(|| panic!("BOINC_REAL_AUTH_FILE is not set ({NEEDS})")));
    let text = std::fs::read_to_string(&auth_file).unwrap_or_else(|e| panic!("{}: {e}", auth_file.display()));
    let auth = text.split_whitespace().next().unwrap_or_else(|| panic!("{}: no authenticator in it", auth_file.display())).to_string();
    let client = match (var("BOINC_REAL_CLIENT_RPC"), var("BOINC_REAL_CLIENT_PASSWD")) {
        (Some(rpc), Some(passwd)) => Some(BoincClient { rpc, passwd, url: url.clone() }),
        _ => None,
    };
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let tag = format!("{:x}{:03x}", t.as_secs() % 0x100_0000, std::process::id() % 0x1000);
    Real { url, auth, auth_file, client, tag }
}

/// Held by a test while it suspends the client, or while it needs the
/// client computing (the tests run at once).
static CLIENT_MODE: Mutex<()> = Mutex::new(());

fn client_mode() -> MutexGuard<'static, ()> {
    CLIENT_MODE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The client suspended until this is dropped (also when a test fails:
/// the client is shared), then in its run mode of before.
struct Suspended<'a> {
    client: &'a BoincClient,
    before: &'static str,
    _held: Option<MutexGuard<'static, ()>>,
}

impl<'a> Suspended<'a> {
    fn new(c: &'a BoincClient) -> Suspended<'a> {
        Suspended::holding(c, Some(client_mode()))
    }

    /// For a test that holds `client_mode()` already.
    fn holding(c: &'a BoincClient, held: Option<MutexGuard<'static, ()>>) -> Suspended<'a> {
        let before = c.run_mode().unwrap_or("always");
        assert!(c.set_run_mode("never"), "boinccmd --set_run_mode never failed");
        Suspended { client: c, before, _held: held }
    }
}

impl Drop for Suspended<'_> {
    fn drop(&mut self) {
        self.client.set_run_mode(self.before);
        self.client.nudge();
    }
}

/// A daemon on the real project, async mode on, the project selected;
/// `config` is the text of its config file.
fn daemon(real: &Real, dir: &Path, config: &str) -> GahpClient {
    let path = dir.join("config.toml");
    std::fs::write(&path, config).unwrap();
    let mut g = gahp_with(dir, &["--config", path.to_str().unwrap()], &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    let select = Request::SelectProject { url: real.url.clone(), authenticator: Authenticator::new(real.auth.clone()) };
    assert_eq!(g.command(&select).unwrap(), ["S"]);
    g
}

fn call(g: &mut GahpClient, command: AsyncCommand) -> Vec<String> {
    g.call(|id| async_cmd(id, command), Duration::from_secs(300)).unwrap()
}

/// One job of `app` per (args, inputs).
fn batch(name: &str, app: &str, jobs: Vec<(Vec<String>, Vec<InputFile>)>) -> SubmitBatch {
    SubmitBatch {
        batch_name: name.to_string(),
        app_name: app.into(),
        jobs: jobs.into_iter().enumerate().map(|(i, (args, inputs))| JobSpec { name: format!("{name}#{i}.0"), args, inputs }).collect(),
        params: JobParams::default(),
    }
}

/// Polls BOINC_QUERY_BATCHES until every job is DONE or ERROR, nudging
/// the client.
fn wait_batch(real: &Real, g: &mut GahpClient, batch: &str) -> Vec<(String, String)> {
    let until = Instant::now() + JOB_WAIT;
    let mut nudger = Nudger::new(real.client.as_ref(), NUDGE_EVERY);
    loop {
        let r = call(g, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![batch.to_string()] });
        assert_eq!(r[0], "NULL", "{r:?}");
        let jobs: Vec<(String, String)> = r[3..].chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
        if !jobs.is_empty() && jobs.iter().all(|(_, s)| s == "DONE" || s == "ERROR") {
            return jobs;
        }
        assert!(Instant::now() < until, "batch {batch} did not finish in {JOB_WAIT:?}: {jobs:?}");
        nudger.tick();
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn retire(g: &mut GahpClient, batch: &str) {
    let r = call(g, AsyncCommand::RetireBatch { batch: batch.into() });
    assert_eq!(r, ["NULL"], "retiring {batch}");
}

/// The BOINC client sends a task's stderr with every non-ASCII byte as a
/// character reference (`non_ascii_escape()`: `ï` is `&#195;&#175;`); this
/// undoes that, so a test sees the bytes the app wrote. Other references
/// stay as they are.
fn undo_client_escape(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("&#") {
        out.extend_from_slice(&rest.as_bytes()[..at]);
        rest = &rest[at..];
        let byte = rest[2..].split_once(';').and_then(|(n, _)| n.parse::<u8>().ok()).filter(|b| *b >= 0x80);
        match byte {
            Some(b) => {
                out.push(b);
                rest = &rest[rest.find(';').unwrap() + 1..];
            }
            None => {
                out.extend_from_slice(b"&#");
                rest = &rest[2..];
            }
        }
    }
    out.extend_from_slice(rest.as_bytes());
    String::from_utf8_lossy(&out).into_owned()
}

/// The `argv[i]=<word>` lines the stepper wrote to stderr, in order. A
/// task restarted by its client writes them again: every copy must agree.
fn argv_of(stderr: &str) -> Vec<String> {
    let stderr = undo_client_escape(stderr);
    let mut argv: BTreeMap<usize, String> = BTreeMap::new();
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix("argv[") else { continue };
        let Some((i, word)) = rest.split_once("]=") else { continue };
        let Ok(i) = i.parse::<usize>() else { continue };
        if let Some(seen) = argv.insert(i, word.to_string()) {
            assert_eq!(seen, word, "argv[{i}] differs between two runs of the task: {stderr}");
        }
    }
    let words: Vec<String> = argv.values().cloned().collect();
    assert_eq!(argv.keys().copied().collect::<Vec<_>>(), (1..=words.len()).collect::<Vec<_>>(), "argv lines: {stderr}");
    words
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// A `stepper` state file: `<tag> 0`.
fn state_file(dir: &Path, name: &str, tag: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("{tag} 0\n")).unwrap();
    p
}

/// The stepper's state after `n` steps from `<tag> 0`.
fn stepped(tag: &str, n: u32) -> String {
    let mut s = format!("{tag} {n}\n");
    for i in 1..=n {
        s.push_str(&format!("step {i}\n"));
    }
    s
}

/// A one-line reason that names the refused argument (position 2).
fn assert_names_argument(reason: &str) {
    assert!(!reason.contains('\n'), "one line: {reason:?}");
    assert!(reason.contains("argument 2"), "names the argument: {reason:?}");
}

#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn boinc_submit_arguments_reach_the_app_exactly() {
    let real = real();
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&real, dir.path(), "");
    let name = format!("rbci_args_{}", real.tag);
    let state = state_file(dir.path(), "state0", "args");
    let b = batch(&name, "stepper", vec![(owned(ARGS), vec![InputFile { src: state, dst_name: "state".into() }])]);
    let r = call(&mut g, AsyncCommand::Submit(b));
    assert_eq!(r, ["NULL"], "BOINC_SUBMIT of {ARGS:?}");
    let jobs = wait_batch(&real, &mut g, &name);
    assert_eq!(jobs, [(format!("{name}#0.0"), "DONE".to_string())]);

    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let fetch = FetchOutput {
        job_name: format!("{name}#0.0"),
        dir: out.clone(),
        stderr_file: "stderr.txt".into(),
        mode: FetchMode::Some,
        specs: vec![OutputSpec { src: "state".into(), dst: "state.out".into() }],
    };
    let r = call(&mut g, AsyncCommand::FetchOutput(fetch));
    assert_eq!(r[..2], ["NULL", "0"], "fetch: {r:?}");
    assert_eq!(std::fs::read_to_string(out.join("state.out")).unwrap(), stepped("args", 1));
    let stderr = std::fs::read_to_string(out.join("stderr.txt")).unwrap();
    assert_eq!(argv_of(&stderr), ARGS, "the app's argv (stderr: {stderr})");
    retire(&mut g, &name);

    // One that no quoting carries: refused before anything is created.
    let no = format!("rbci_argsno_{}", real.tag);
    let state = state_file(dir.path(), "state1", "no");
    let b = batch(&no, "stepper", vec![(owned(&["ok", UNCARRIABLE]), vec![InputFile { src: state, dst_name: "state".into() }])]);
    let r = call(&mut g, AsyncCommand::Submit(b));
    assert_eq!(r.len(), 1, "{r:?}");
    assert_ne!(r[0], "NULL", "{UNCARRIABLE:?} was accepted");
    assert_names_argument(&r[0]);
    let r = call(&mut g, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![no.clone()] });
    assert_ne!(r[0], "NULL", "a batch {no} was made: {r:?}");
    assert!(!log_text(dir.path()).contains(&real.auth), "the authenticator never reaches the log");
}

/// A submit ad as HTCondor 23.9's gridmanager writes it.
use gahp_testkit::blah_job_ad as job_ad;

fn blah(g: &mut GahpClient, command: BlahCommand) -> Vec<String> {
    g.call(|reqid| Request::Command { reqid: ReqId(reqid), command: GahpCommand::Blah(command) }, Duration::from_secs(300)).unwrap()
}

/// Polls BLAH_JOB_STATUS until the job is completed (4), removed (3) or
/// held (5); the status and its ad.
fn wait_blah_final(real: &Real, g: &mut GahpClient, id: &str) -> (i64, ClassAd) {
    let until = Instant::now() + JOB_WAIT;
    let mut nudger = Nudger::new(real.client.as_ref(), NUDGE_EVERY);
    loop {
        let r = blah(g, BlahCommand::JobStatus { job_id: id.into() });
        assert_eq!(r[0], "0", "BLAH_JOB_STATUS {id}: {r:?}");
        let st: i64 = r[2].parse().unwrap();
        if st >= 3 {
            return (st, ClassAd::parse(&r[3]).unwrap_or_else(|e| panic!("status ad {r:?}: {e}")));
        }
        assert!(Instant::now() < until, "job {id} not done in {JOB_WAIT:?}: {r:?}");
        nudger.tick();
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn blah_submit_arguments_reach_the_app_exactly() {
    let real = real();
    let dir = tempfile::tempdir().unwrap();
    let config =
        format!("[blah]\nproject_url = \"{}\"\nauthenticator_file = \"{}\"\nstatus_refresh_secs = 1\n", real.url, real.auth_file.display());
    let mut g = daemon(&real, dir.path(), &config);
    let iwd = dir.path().join("job");
    std::fs::create_dir_all(&iwd).unwrap();
    state_file(&iwd, "state", "blah");
    let attrs = |args: &[&str]| {
        vec![
            ("BoincApp", Value::Str("stepper".into())),
            ("Arguments", Value::Str(format_args_v2(args))),
            ("TransferInput", Value::Str("state".into())),
            ("Out", Value::Str("job.out".into())),
            ("Err", Value::Str("job.err".into())),
        ]
    };
    let r = blah(&mut g, BlahCommand::JobSubmit { ad: job_ad(&iwd, &format!("rbci_blah_{}", real.tag), &attrs(ARGS)) });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let id = r[2].clone();
    let (st, ad) = wait_blah_final(&real, &mut g, &id);
    assert_eq!(st, 4, "completed: {ad}");
    assert_eq!(ad.get_int("ExitCode"), Some(0), "{ad}");
    assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), stepped("blah", 1));
    let stderr = std::fs::read_to_string(iwd.join("job.err")).unwrap();
    assert_eq!(argv_of(&stderr), ARGS, "the app's argv (job.err: {stderr})");

    // One that no quoting carries: held, the reason naming it.
    let iwd = dir.path().join("refused");
    std::fs::create_dir_all(&iwd).unwrap();
    state_file(&iwd, "state", "no");
    let r = blah(&mut g, BlahCommand::JobSubmit { ad: job_ad(&iwd, &format!("rbci_blahno_{}", real.tag), &attrs(&["ok", UNCARRIABLE])) });
    assert_eq!(r[0], "0", "{r:?}");
    let (st, ad) = wait_blah_final(&real, &mut g, &r[2]);
    assert_eq!(st, 5, "held: {ad}");
    assert_names_argument(ad.get_str("HoldReason").unwrap_or_default());
    assert!(!log_text(dir.path()).contains(&real.auth), "the authenticator never reaches the log");
}

/// `n` bytes of text no earlier run uploaded.
fn new_input(dir: &Path, name: &str, n: usize, tag: &str) -> PathBuf {
    let line = format!("input {name} of run {tag}, new to the server\n");
    let text: String = line.chars().cycle().take(n).collect();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn inputs_near_and_over_phps_upload_limit() {
    let real = real();
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&real, dir.path(), "");

    // Five new 1.9 MB inputs in one batch: each under upload_max_filesize
    // (2M), together over post_max_size (8M).
    let name = format!("rbci_up5_{}", real.tag);
    let jobs = (0..5)
        .map(|i| {
            let f = new_input(dir.path(), &format!("in{i}_{}.txt", real.tag), 1_900_000, &real.tag);
            (vec![], vec![InputFile { src: f, dst_name: "in".into() }])
        })
        .collect();
    let r = call(&mut g, AsyncCommand::Submit(batch(&name, "uppercase", jobs)));
    assert_eq!(r, ["NULL"], "five 1.9 MB inputs");
    let r = call(&mut g, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![name.clone()] });
    assert_eq!((r[0].as_str(), r[2].as_str()), ("NULL", "5"), "five jobs on the server: {r:?}");
    // They need not run: abort them and retire the batch.
    let all: Vec<String> = (0..5).map(|i| format!("{name}#{i}.0")).collect();
    assert_eq!(call(&mut g, AsyncCommand::AbortJobs { jobs: all }), ["NULL"]);
    retire(&mut g, &name);

    // One 3 MB input: refused with a reason naming the file, its size and
    // the limit.
    let big = format!("big_{}.dat", real.tag);
    let name = format!("rbci_up3_{}", real.tag);
    let f = new_input(dir.path(), &big, 3_000_000, &real.tag);
    let r =
        call(&mut g, AsyncCommand::Submit(batch(&name, "uppercase", vec![(vec![], vec![InputFile { src: f, dst_name: "in".into() }])])));
    assert_eq!(r.len(), 1, "{r:?}");
    let e = &r[0];
    assert_ne!(e, "NULL", "a 3 MB input was accepted");
    assert!(e.contains(&big), "names the file: {e}");
    assert!(["3000000", "3,000,000", "3.0 MB", "2.9 MiB", "2.86 MiB"].iter().any(|s| e.contains(s)), "names its size: {e}");
    assert!(e.contains("upload_max_filesize"), "names the limit: {e}");
    // Whatever was made of it goes.
    let _ = call(&mut g, AsyncCommand::RetireBatch { batch: name });
}

fn seq(g: &mut GahpClient, command: SequenceCommand) -> Vec<String> {
    g.call(|id| Request::Command { reqid: ReqId(id), command: GahpCommand::Sequence(command) }, Duration::from_secs(300)).unwrap()
}

/// Queries the sequence until `done(reply)`, nudging the client; the last
/// reply (`NULL status steps_done steps_planned current_step attempt
/// relocations url reason ndead ...`).
fn wait_seq(real: &Real, g: &mut GahpClient, name: &str, what: &str, within: Duration, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let until = Instant::now() + within;
    let mut nudger = Nudger::new(real.client.as_ref(), NUDGE_EVERY);
    loop {
        let r = seq(g, SequenceCommand::Query { name: name.into() });
        assert_eq!(r[0], "NULL", "{r:?}");
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < until, "{name}: no {what} in {within:?}: {r:?}");
        nudger.tick();
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn a_three_step_sequence_with_a_relocated_step_ends_in_the_exact_state() {
    let real = real();
    let client = real.client.as_ref().unwrap_or_else(|| {
        panic!("BOINC_REAL_CLIENT_RPC and BOINC_REAL_CLIENT_PASSWD are not set: this test suspends the client ({NEEDS})")
    });
    let dir = tempfile::tempdir().unwrap();
    let mut g = daemon(&real, dir.path(), "sequence_poll_ms = 1000\n");
    let name = format!("rbci-seq-{}", real.tag);
    let state = state_file(dir.path(), "state0", "seq");
    let max_step_time = 40;
    let create = CreateSequence {
        name: name.clone(),
        app_name: "stepper".into(),
        steps: 3,
        max_step_time,
        max_attempts: 6,
        end_marker: None,
        state_files: vec![InputFile { src: state, dst_name: "state".into() }],
        args: owned(&["--sleep", "1"]),
        inputs: vec![],
    };
    let t0 = Instant::now();
    assert_eq!(seq(&mut g, SequenceCommand::Create(create)), ["NULL"]);
    wait_seq(&real, &mut g, &name, "first step", JOB_WAIT, |r| r[2] != "0" || r[1] != "RUNNING");
    eprintln!("{name}: step 1 done after {:.0?}; suspending the client", t0.elapsed());
    {
        // The client stops computing: the live step misses its deadline
        // and is relocated; the client computes again when this ends.
        let _suspended = Suspended::new(client);
        let within = Duration::from_secs(u64::from(max_step_time) + 60);
        let r = wait_seq(&real, &mut g, &name, "relocation", within, |r| r[6] != "0" || r[1] != "RUNNING");
        assert_eq!(r[1], "RUNNING", "{r:?}");
        eprintln!("{name}: relocated after {:.0?}: {r:?}; resuming the client", t0.elapsed());
    }
    let r = wait_seq(&real, &mut g, &name, "completion", JOB_WAIT, |r| r[1] != "RUNNING");
    assert_eq!((r[1].as_str(), r[2].as_str(), r[3].as_str()), ("COMPLETED", "3", "3"), "{r:?}");
    eprintln!("{name}: completed after {:.0?}: {r:?}", t0.elapsed());
    let relocations: usize = r[6].parse().unwrap();
    let dead: usize = r[9].parse().unwrap();
    assert!(relocations >= 1 && dead == relocations, "{r:?}");
    for d in r[10..].chunks(5) {
        assert!(["deadline missed", "never sent"].contains(&d[2].as_str()), "dead branch {d:?}");
    }
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let r = seq(&mut g, SequenceCommand::Fetch(FetchSequence { name: name.clone(), step: StepSelector::Latest, dir: out.clone() }));
    assert_eq!(r[..2], ["NULL", "3"], "{r:?}");
    // Every step ran once, in order, on the state the one before left.
    assert_eq!(std::fs::read_to_string(out.join("state")).unwrap(), stepped("seq", 3));
    assert!(!log_text(dir.path()).contains(&real.auth), "the authenticator never reaches the log");
}

/// The second tier on the real server: `serve` holds the key, a client
/// with only a token reaches the project through `connect` in both
/// dialects, from a directory outside its area, with its files both ways.
#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn a_job_in_each_dialect_through_serve_and_connect_with_files_both_ways() {
    use common::serve::{add_client_of, serve};
    let real = real();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let token = add_client_of(dir.path(), &tokens, &[(real.url.clone(), real.auth_file.clone())], "rbci");
    let s = serve(dir.path(), &tokens, &[]);
    let local = dir.path().join("first tier");
    std::fs::create_dir_all(local.join("outs")).unwrap();

    // BOINC_*: the client's key is not sent; the second tier's is used.
    let mut g = s.connect(&token, &local, &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);
    let select = Request::SelectProject { url: real.url.clone(), authenticator: Authenticator::new("not-the-key") };
    assert_eq!(g.command(&select).unwrap(), ["S"]);
    let name = format!("rbci_serve_{}", real.tag);
    let state = state_file(&local, "state 0.txt", "serve");
    let args = owned(&["two words", "it's"]);
    let r = call(
        &mut g,
        AsyncCommand::Submit(batch(&name, "stepper", vec![(args.clone(), vec![InputFile { src: state, dst_name: "state".into() }])])),
    );
    assert_eq!(r, ["NULL"], "BOINC_SUBMIT through serve");
    let jobs = wait_batch(&real, &mut g, &name);
    assert_eq!(jobs, [(format!("{name}#0.0"), "DONE".to_string())]);
    let outs = local.join("outs");
    let fetch = FetchOutput {
        job_name: format!("{name}#0.0"),
        dir: outs.clone(),
        stderr_file: "stderr.txt".into(),
        mode: FetchMode::Some,
        specs: vec![OutputSpec { src: "state".into(), dst: "state out.txt".into() }],
    };
    let r = call(&mut g, AsyncCommand::FetchOutput(fetch));
    assert_eq!(r[..2], ["NULL", "0"], "fetch: {r:?}");
    assert_eq!(std::fs::read_to_string(outs.join("state out.txt")).unwrap(), stepped("serve", 1));
    assert_eq!(argv_of(&std::fs::read_to_string(outs.join("stderr.txt")).unwrap()), args);

    // On the project the batch carries the client's prefix.
    let direct_dir = dir.path().join("direct");
    std::fs::create_dir_all(&direct_dir).unwrap();
    let mut direct = daemon(&real, &direct_dir, "");
    let r = call(&mut direct, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![format!("rbci~{name}")] });
    assert_eq!(r[0], "NULL", "the project has rbci~{name}: {r:?}");
    assert_eq!(r[3..], [format!("rbci~{name}#0.0"), "DONE".to_string()]);
    retire(&mut g, &name);

    // BLAH_*: the job's project is the client's first; inputs go up from
    // its Iwd and outputs come back there before status 4 is read.
    let iwd = local.join("blah job");
    std::fs::create_dir_all(&iwd).unwrap();
    state_file(&iwd, "state", "sblah");
    let ad = job_ad(
        &iwd,
        &format!("rbci_sblah_{}", real.tag),
        &[
            ("BoincApp", Value::Str("stepper".into())),
            ("Arguments", Value::Str(format_args_v2(&["two words"]))),
            ("TransferInput", Value::Str(iwd.join("state").display().to_string())),
            ("Out", Value::Str("job.out".into())),
            ("Err", Value::Str("job.err".into())),
        ],
    );
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let (st, ad) = wait_blah_final(&real, &mut g, &r[2]);
    assert_eq!(st, 4, "completed: {ad}");
    assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), stepped("sblah", 1));
    assert_eq!(argv_of(&std::fs::read_to_string(iwd.join("job.err")).unwrap()), ["two words"]);
    assert!(!s.log_text().contains(&real.auth), "the authenticator never reaches serve's log");
}

/// Two clients of one `serve` on one account: their `batch boinc` jobs,
/// sent within one batch window, go into one BOINC batch on the real
/// server (the batch both job ids name), each completes with its own
/// output in its own `Iwd`, and the project's jobs carry each client's
/// prefix.
#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn two_clients_blah_jobs_share_one_batch_through_serve() {
    use common::serve::{add_client_of, serve};
    let real = real();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let project = [(real.url.clone(), real.auth_file.clone())];
    let clients = ["rbca", "rbcb"];
    let token_files: Vec<PathBuf> = clients.iter().map(|c| add_client_of(dir.path(), &tokens, &project, c)).collect();
    let s = serve(dir.path(), &tokens, &[]);
    let mut gs: Vec<(GahpClient, PathBuf)> = clients
        .iter()
        .zip(&token_files)
        .map(|(c, token)| {
            let iwd = dir.path().join(format!("{c} job"));
            std::fs::create_dir_all(&iwd).unwrap();
            state_file(&iwd, "state", c);
            (s.connect(token, &iwd, &[]), iwd)
        })
        .collect();
    // Both within one window (2 s): the second submit follows the first.
    let ids: Vec<String> = gs
        .iter_mut()
        .zip(clients)
        .map(|((g, iwd), c)| {
            let ad = job_ad(
                iwd,
                &format!("rbcs_{c}_{}", real.tag),
                &[
                    ("BoincApp", Value::Str("stepper".into())),
                    ("TransferInput", Value::Str(iwd.join("state").display().to_string())),
                    ("Out", Value::Str("job.out".into())),
                    ("Err", Value::Str("job.err".into())),
                ],
            );
            let r = blah(g, BlahCommand::JobSubmit { ad });
            assert_eq!(r[..2], ["0", "No error"], "{c}: {r:?}");
            r[2].clone()
        })
        .collect();
    for (((g, iwd), id), c) in gs.iter_mut().zip(&ids).zip(clients) {
        let (st, ad) = wait_blah_final(&real, g, id);
        assert_eq!(st, 4, "{c} completed: {ad}");
        assert_eq!(std::fs::read_to_string(iwd.join("state")).unwrap(), stepped(c, 1), "{c}'s own output");
    }
    // `boinc/<key>/<batch>/<job>`: one batch for both.
    let batch_of = |id: &str| id.split('/').nth(2).map(str::to_string);
    assert!(ids[0].split('/').count() == 4 && batch_of(&ids[0]) == batch_of(&ids[1]), "one batch: {ids:?}");
    let batch = batch_of(&ids[0]).unwrap();
    assert!(batch.starts_with("blah#shared-"), "{batch}");
    // On the project: that batch holds both jobs, each named for its client.
    let direct_dir = dir.path().join("direct");
    std::fs::create_dir_all(&direct_dir).unwrap();
    let mut direct = daemon(&real, &direct_dir, "");
    let r = call(&mut direct, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![batch.clone()] });
    assert_eq!(r[0], "NULL", "the project has {batch}: {r:?}");
    let names: Vec<&String> = r[3..].iter().step_by(2).collect();
    assert_eq!(names.len(), 2, "{r:?}");
    for c in clients {
        assert_eq!(names.iter().filter(|n| n.starts_with(&format!("{c}~blah#"))).count(), 1, "{c}: {r:?}");
    }
    assert!(!s.log_text().contains(&real.auth), "the authenticator never reaches serve's log");
}

/// Where the project keeps a staged input (`download/<fan-out dir>/<name>`),
/// if `BOINC_REAL_PROJECT_DIR` names the project's directory.
fn download_path(name: &str) -> Option<PathBuf> {
    let project = PathBuf::from(std::env::var("BOINC_REAL_PROJECT_DIR").ok().filter(|v| !v.is_empty())?);
    std::fs::read_dir(project.join("download")).ok()?.flatten().map(|d| d.path().join(name)).find(|p| p.is_file())
}

/// A `batch boinc` job that sends its own sh script runs in the project's
/// runner app (`deploy/boinc-runner`: BOINC's wrapper and
/// `condor_runner.sh`; docs/runner.md): its arguments with white space and
/// quotes, its environment, stdin and input file reach the script, and its
/// stdout, stderr and output come back; a second job of the same script,
/// exiting 3, completes with `ExitCode` 3 and its outputs, and the script
/// was uploaded once (with `BOINC_REAL_PROJECT_DIR`: its file in the
/// project's download directory is the one the first job's upload made).
#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn script_jobs_run_in_the_runner_app() {
    let real = real();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[blah]\nproject_url = \"{}\"\nauthenticator_file = \"{}\"\nstatus_refresh_secs = 1\nrunner_app = \"runner\"\n",
        real.url,
        real.auth_file.display()
    );
    let mut g = daemon(&real, dir.path(), &config);
    // New to the server in each run (the tag), so the first job uploads it.
    let script = format!(
        "#!/bin/sh\n# runner test {}\nfor a in \"$@\"; do echo \"arg=<$a>\"; done\necho \"GREETING=<$GREETING>\"\n\
         echo \"stdin=<$(cat)>\"\ntr a-z A-Z <data.txt >result.txt\necho \"to stderr\" >&2\nexit \"${{RC:-0}}\"\n",
        real.tag
    );
    let args = ["plain", "two words", "it's here", "say \"hi\"", "a&b"];
    let job = |name: &str, env: &str| {
        let iwd = dir.path().join(name);
        std::fs::create_dir_all(&iwd).unwrap();
        std::fs::write(iwd.join("job.sh"), &script).unwrap();
        std::fs::write(iwd.join("data.txt"), format!("input of {name}\n")).unwrap();
        std::fs::write(iwd.join("in.txt"), format!("stdin of {name}")).unwrap();
        let ad = job_ad(
            &iwd,
            &format!("rbci_{name}_{}", real.tag),
            &[
                ("Arguments", Value::Str(format_args_v2(&args))),
                ("Environment", Value::Str(env.into())),
                ("In", Value::Str("in.txt".into())),
                ("TransferInput", Value::Str("data.txt".into())),
                ("TransferOutput", Value::Str("result.txt".into())),
                ("TransferOutputRemaps", Value::Str(format!("result.txt = result {name}.txt"))),
                ("Out", Value::Str("job.out".into())),
                ("Err", Value::Str("job.err".into())),
            ],
        );
        (iwd, ad)
    };
    let check = |name: &str, iwd: &Path, ad: &ClassAd, exit: i64| {
        assert_eq!(ad.get_int("ExitCode"), Some(exit), "{name}: {ad}");
        let mut out = String::new();
        for a in args {
            out.push_str(&format!("arg=<{a}>\n"));
        }
        out.push_str(&format!("GREETING=<hello world>\nstdin=<stdin of {name}>\n"));
        assert_eq!(std::fs::read_to_string(iwd.join("job.out")).unwrap(), out, "{name}'s stdout");
        assert_eq!(std::fs::read_to_string(iwd.join("job.err")).unwrap(), "to stderr\n", "{name}'s stderr");
        let result = std::fs::read_to_string(iwd.join(format!("result {name}.txt"))).unwrap();
        assert_eq!(result, format!("INPUT OF {}\n", name.to_uppercase()), "{name}'s output");
    };

    let (iwd, ad) = job("runa", "GREETING='hello world'");
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let (st, ad) = wait_blah_final(&real, &mut g, &r[2]);
    assert_eq!(st, 4, "completed: {ad}");
    check("runa", &iwd, &ad, 0);

    // The script's upload: <md5>.sh (docs/spec/boinc-rpc.md §8.2).
    let sum = Command::new("md5sum").arg(iwd.join("job.sh")).output().unwrap();
    let name = format!("{}.sh", String::from_utf8_lossy(&sum.stdout).split_whitespace().next().unwrap());
    let first = download_path(&name).map(|p| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&p).unwrap();
        (p, m.ino(), m.mtime_nsec(), m.mtime())
    });
    if std::env::var_os("BOINC_REAL_PROJECT_DIR").is_some() {
        assert!(first.is_some(), "the script is in the project's download directory as {name}");
    }

    let (iwd, ad) = job("runb", "GREETING='hello world' RC=3");
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let (st, ad) = wait_blah_final(&real, &mut g, &r[2]);
    assert_eq!(st, 4, "completed, exiting 3: {ad}");
    check("runb", &iwd, &ad, 3);
    if let Some((p, ino, nsec, sec)) = first {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.ino(), m.mtime_nsec(), m.mtime()), (ino, nsec, sec), "{name} was uploaded again for the second job");
    }
    assert!(!log_text(dir.path()).contains(&real.auth), "the authenticator never reaches the log");
}

/// The image a container job of the real-server stage names, built by
/// `deploy/boinc-runner/test-image` on the client's host (its
/// `/etc/os-release` says `ID=boinc-gahp-test`).
fn test_image() -> String {
    std::env::var("BOINC_REAL_CONTAINER_IMAGE").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "localhost/boinc-gahp-test:1".into())
}

/// A daemon config whose jobs with an image go to the container runner.
fn container_config(real: &Real) -> String {
    format!(
        "[blah]\nproject_url = \"{}\"\nauthenticator_file = \"{}\"\nstatus_refresh_secs = 1\n\
         container_runner_app = \"container_runner\"\n[blah.apps.container_runner]\ncontainer = true\n",
        real.url,
        real.auth_file.display()
    )
}

/// A `batch boinc` job with `container_image`, naming no app, runs in the
/// project's container runner (`deploy/boinc-runner/register --container`:
/// BOINC's wrapper and `condor_runner.sh`, which runs the job's program
/// with podman inside the image) on the real client: its script reads the
/// image's `/etc/os-release` and not the host's, sees its argument and
/// environment and the job's input in its working directory, writes an
/// output that comes back, and its exit code 5 is the job's `ExitCode`.
#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn a_container_job_runs_in_its_image() {
    let real = real();
    let dir = tempfile::tempdir().unwrap();
    let config = container_config(&real);
    let mut g = daemon(&real, dir.path(), &config);
    let iwd = dir.path().join("boxed");
    std::fs::create_dir_all(&iwd).unwrap();
    // The host (Debian) has /etc/debian_version; the image has no such file.
    let script = format!(
        "#!/bin/sh\n# container test {}\ncat /etc/os-release\nif [ -e /etc/debian_version ]; then echo \"host's file\"; fi\n\
         echo \"pwd=<$(pwd)> arg=<$1> GREETING=<$GREETING>\"\ncat data.txt\ngrep '^ID=' /etc/os-release >made.txt\nexit 5\n",
        real.tag
    );
    std::fs::write(iwd.join("job.sh"), script).unwrap();
    std::fs::write(iwd.join("data.txt"), "input of boxed\n").unwrap();
    let image = test_image();
    let ad = job_ad(
        &iwd,
        &format!("rbci_boxed_{}", real.tag),
        &[
            ("ContainerImage", Value::Str(image.clone())),
            ("Arguments", Value::Str(format_args_v2(&["two words"]))),
            ("Environment", Value::Str("GREETING='hello box'".into())),
            ("TransferInput", Value::Str("data.txt".into())),
            ("TransferOutput", Value::Str("made.txt".into())),
            ("Out", Value::Str("job.out".into())),
            ("Err", Value::Str("job.err".into())),
        ],
    );
    let t0 = Instant::now();
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let (st, ad) = wait_blah_final(&real, &mut g, &r[2]);
    eprintln!("container job in {image}: completed after {:.0?}", t0.elapsed());
    assert_eq!(st, 4, "completed: {ad}");
    let out = std::fs::read_to_string(iwd.join("job.out")).unwrap();
    assert_eq!(ad.get_int("ExitCode"), Some(5), "the script's exit code: {ad}; its stdout: {out}");
    assert!(out.starts_with("ID=boinc-gahp-test\n"), "the image's /etc/os-release: {out}");
    assert!(!out.contains("host's file"), "ran outside the image: {out}");
    assert!(out.contains("pwd=</srv> arg=<two words> GREETING=<hello box>\ninput of boxed\n"), "{out}");
    assert_eq!(std::fs::read_to_string(iwd.join("made.txt")).unwrap(), "ID=boinc-gahp-test\n", "its output");
    assert_eq!(std::fs::read_to_string(iwd.join("job.err")).unwrap(), "", "its stderr");
    assert!(!log_text(dir.path()).contains(&real.auth), "the authenticator never reaches the log");
}

/// A container of this run's job, found by `marker` (an argument of the
/// job's command): its id, podman's state of it (`running`, `paused`,
/// ...) and the slot mounted at `/srv`.
type Container = Option<(String, String, PathBuf)>;

fn container_of(marker: &str) -> Container {
    let out = Command::new("podman").args(["ps", "--all", "--no-trunc", "--format", "{{.ID}} {{.Command}}"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.lines().find(|l| l.split_whitespace().any(|w| w == marker))?.split_whitespace().next()?.to_string();
    let format = "{{.State.Status}} {{range .Mounts}}{{if eq .Destination \"/srv\"}}{{.Source}}{{end}}{{end}}";
    let out = Command::new("podman").args(["inspect", "--format", format, &id]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (state, slot) = text.trim().split_once(' ')?;
    Some((id, state.to_string(), PathBuf::from(slot)))
}

/// The number a job's script last wrote to `progress` in its slot.
fn progress(slot: &Path) -> u64 {
    std::fs::read_to_string(slot.join("progress")).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0)
}

/// A task suspended with boinccmd until this is dropped (also when a
/// test fails: the client is shared).
struct TaskSuspended<'a> {
    client: &'a BoincClient,
    task: String,
}

impl<'a> TaskSuspended<'a> {
    fn new(client: &'a BoincClient, task: &str) -> TaskSuspended<'a> {
        assert!(client.task_op(task, "suspend"), "boinccmd --task {task} suspend failed");
        TaskSuspended { client, task: task.to_string() }
    }
}

impl Drop for TaskSuspended<'_> {
    fn drop(&mut self) {
        self.client.task_op(&self.task, "resume");
    }
}

/// The clients that may compute a job: the one named, and a second one
/// attached to the project (`BOINC_REAL_CLIENT2_RPC`, the same password).
fn clients(real: &Real) -> Vec<BoincClient> {
    let first = real.client.as_ref().expect("needs the client's GUI RPC: BOINC_REAL_CLIENT_RPC and BOINC_REAL_CLIENT_PASSWD");
    let mut all = vec![BoincClient { rpc: first.rpc.clone(), passwd: first.passwd.clone(), url: first.url.clone() }];
    if let Some(rpc) = std::env::var("BOINC_REAL_CLIENT2_RPC").ok().filter(|v| !v.is_empty()) {
        all.push(BoincClient { rpc, passwd: first.passwd.clone(), url: first.url.clone() });
    }
    all
}

/// The client computing a job whose BOINC name holds `job_dir`, and its
/// task's name.
fn task_of<'a>(clients: &'a [BoincClient], job_dir: &str) -> Option<(&'a BoincClient, String)> {
    clients.iter().find_map(|c| c.tasks().into_iter().find(|t| t.wu_name.contains(job_dir)).map(|t| (c, t.name)))
}

/// The volunteer is in charge of a container job (docs/runner.md
/// "Containers"): on the real client, a task suspended with boinccmd has
/// its container paused (podman's state, and the job's progress file
/// stands still), resumed it runs on; the client's own suspend (run
/// mode never) pauses it too; the job completes and its CPU time, the
/// container's, is `RemoteUserCpu`. A second job aborted on the client
/// has its container removed.
#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn a_container_job_stops_when_the_volunteer_says_so() {
    let real = real();
    let clients = clients(&real);
    let dir = tempfile::tempdir().unwrap();
    let config = container_config(&real);
    let mut g = daemon(&real, dir.path(), &config);
    let mut nudgers: Vec<Nudger> = clients.iter().map(|c| Nudger::new(Some(c), NUDGE_EVERY)).collect();
    let mut wait = |marker: &str, within: Duration, until: &dyn Fn(&Container) -> bool| {
        let end = Instant::now() + within;
        loop {
            let seen = container_of(marker);
            if until(&seen) || Instant::now() >= end {
                return seen;
            }
            nudgers.iter_mut().for_each(Nudger::tick);
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    // The busy job: 50 steps of about 0.4 s of the shell's own CPU each;
    // its stdout is its user CPU time (`times`). The other sleeps.
    let busy = "n=0\nwhile [ $n -lt 50 ]; do\n    n=$((n+1)); echo $n >progress\n    \
                i=0; while [ $i -lt 350000 ]; do i=$((i+1)); done\ndone\ntimes\n";
    let sleeper = "n=0\nwhile [ $n -lt 120 ]; do n=$((n+1)); echo $n >progress; sleep 1; done\n";
    let mut submitted = Vec::new();
    for (name, body) in [("busy", busy), ("aborted", sleeper)] {
        let iwd = dir.path().join(name);
        std::fs::create_dir_all(&iwd).unwrap();
        std::fs::write(iwd.join("job.sh"), format!("#!/bin/sh\n# {name} {}\n{body}", real.tag)).unwrap();
        let job_dir = format!("rbci_volunteer_{name}_{}", real.tag);
        // An argument of the container's command, to find it by.
        let marker = format!("{name}-{}", real.tag);
        let ad = job_ad(
            &iwd,
            &job_dir,
            &[
                ("ContainerImage", Value::Str(test_image())),
                ("Arguments", Value::Str(marker.clone())),
                ("Out", Value::Str("job.out".into())),
                ("Err", Value::Str("job.err".into())),
            ],
        );
        let r = blah(&mut g, BlahCommand::JobSubmit { ad });
        assert_eq!(r[..2], ["0", "No error"], "{r:?}");
        submitted.push((iwd, job_dir, marker, r[2].clone()));
    }
    let running = |c: &Container| c.as_ref().is_some_and(|c| c.1 == "running");
    let paused = |c: &Container| c.as_ref().is_some_and(|c| c.1 == "paused");
    let gone = |c: &Container| c.is_none();

    // Aborted: its container is gone (podman ps -a), not left to run.
    let (_, job_dir, marker, id) = &submitted[1];
    let seen = wait(marker, JOB_WAIT, &running);
    assert!(running(&seen), "the aborted job's container never ran: {seen:?}");
    let (client, task) = task_of(&clients, job_dir).unwrap_or_else(|| panic!("no client computes {job_dir}"));
    assert!(client.task_op(&task, "abort"), "boinccmd --task {task} abort failed");
    let t = Instant::now();
    let seen = wait(marker, Duration::from_secs(20), &gone);
    assert!(gone(&seen), "the aborted task's container is still there after {:.0?}: {seen:?}", t.elapsed());
    eprintln!("aborted task {task}: its container gone after {:.1?}", t.elapsed());
    // The project would send it again: cancelled, it is not.
    let r = blah(&mut g, BlahCommand::JobCancel { job_id: id.clone() });
    assert_eq!(r[0], "0", "BLAH_JOB_CANCEL: {r:?}");

    // Suspended and resumed, by task and by the client's run mode; no
    // other test suspends the client meanwhile.
    let (iwd, job_dir, marker, id) = &submitted[0];
    let seen = wait(marker, JOB_WAIT, &running);
    let held = client_mode();
    let slot = seen.as_ref().unwrap_or_else(|| panic!("the busy job's container never ran: {seen:?}")).2.clone();
    let (client, task) = task_of(&clients, job_dir).unwrap_or_else(|| panic!("no client computes {job_dir}"));
    let mut stands_still = |how: &str| {
        let seen = wait(marker, Duration::from_secs(10), &paused);
        assert!(paused(&seen), "{how}: the container is not paused: {seen:?}");
        let before = progress(&slot);
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(progress(&slot), before, "{how}: the job went on while its container was paused");
        before
    };
    let goes_on = |how: &str, from: u64| {
        let end = Instant::now() + Duration::from_secs(10);
        while progress(&slot) == from && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(progress(&slot) > from, "{how}: the job does not go on; its container: {:?}", container_of(marker));
    };
    // Another test may have had the client suspended until now: the job
    // goes on before its task is suspended, else a pause of before would
    // be taken for this one.
    goes_on("before the suspend", progress(&slot));
    let suspended = TaskSuspended::new(client, &task);
    let at = stands_still("task suspended");
    drop(suspended);
    goes_on("task resumed", at);
    let suspended = Suspended::holding(client, None);
    let at = stands_still("client suspended");
    drop(suspended);
    goes_on("client resumed", at);
    drop(held);
    eprintln!("task {task}: paused and resumed, by task and by the client");

    let (st, ad) = wait_blah_final(&real, &mut g, id);
    assert_eq!(st, 4, "completed: {ad}");
    assert_eq!(ad.get_int("ExitCode"), Some(0), "{ad}");
    let out = std::fs::read_to_string(iwd.join("job.out")).unwrap();
    // `times`' first line: the shell's own user and system time (0m12.345s).
    let user = out.lines().next().and_then(|l| l.split_whitespace().next()).and_then(|u| {
        let (m, s) = u.strip_suffix('s')?.split_once('m')?;
        Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
    });
    let user = user.unwrap_or_else(|| panic!("no user time in the job's stdout: {out:?}"));
    let cpu = match ad.get("RemoteUserCpu") {
        Some(Value::Real(r)) => *r,
        Some(Value::Int(i)) => *i as f64,
        _ => panic!("no RemoteUserCpu: {ad}"),
    };
    eprintln!("busy container job: {user:.1} s of user CPU inside, RemoteUserCpu {cpu:.1}");
    assert!(user > 5.0, "the job was meant to be busy: {out}");
    assert!(cpu >= 0.9 * user, "RemoteUserCpu {cpu} is not the container's CPU time ({user} s): {ad}");

    // Nothing of the aborted job runs on (the project may have sent it
    // again before the cancel reached it).
    let seen = wait(&submitted[1].2, Duration::from_secs(60), &gone);
    assert!(gone(&seen), "the cancelled job's container is still there: {seen:?}");
    assert!(!log_text(dir.path()).contains(&real.auth), "the authenticator never reaches the log");
}
