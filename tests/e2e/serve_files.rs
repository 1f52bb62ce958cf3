//! Files over the connection: `boinc_gahp connect` sends a request's
//! local inputs to `boinc_gahp serve` and brings the outputs back to the
//! local paths asked for, in both dialects; the real binaries over TLS
//! against the simulated project.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::serve::*;
use crate::common::*;
use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::{BlahCommand, Command};
use sha2::{Digest, Sha256};

/// The file protocol's directory in a client's area.
fn transfer(s: &Serve, client: &str) -> PathBuf {
    s.files(client).join(".transfer")
}

fn uploads_stored(s: &Serve) -> usize {
    s.log_text().matches("stored an uploaded input").count()
}

/// The name of a job's fetch directory in the area (as `connect` makes it).
fn job_key(job: &str) -> String {
    Sha256::digest(job.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()[..32].to_string()
}

fn fetch(job: &str, dir: &Path, dst: &str) -> AsyncCommand {
    AsyncCommand::FetchOutput(FetchOutput {
        job_name: job.into(),
        dir: dir.to_path_buf(),
        stderr_file: "/dev/null".into(),
        mode: FetchMode::Some,
        specs: vec![OutputSpec { src: "out".into(), dst: dst.into() }],
    })
}

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + WAIT;
    while !ok() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn boinc_inputs_go_up_once_and_outputs_land_at_the_local_paths_asked_for_until_retire() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let s = serve(dir.path(), &tokens, &[]);

    // The inputs are on the first tier only, one with a space in its name.
    let local = dir.path().join("first tier");
    std::fs::create_dir_all(local.join("outs")).unwrap();
    std::fs::write(local.join("in one.txt"), "hello one\n").unwrap();
    std::fs::write(local.join("b.txt"), "hello b\n").unwrap();
    let mut a = s.connect(&alice, &local, &[]);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    // Two jobs name the same file; the relative path is the connect's.
    let files = [PathBuf::from("in one.txt"), PathBuf::from("in one.txt"), local.join("b.txt")];
    let r = a.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("b1", &files))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    assert_eq!(uploads_stored(&s), 2, "each content went up once");
    let jobs = wait_finished(&mut a, "b1");
    assert!(jobs.iter().all(|(_, st)| st == "DONE"), "{jobs:?}");

    let outs = local.join("outs");
    for (i, want) in [(0, "HELLO ONE\n"), (2, "HELLO B\n")] {
        let dst = format!("got {i}.txt");
        let r = a.call(|id| async_cmd(id, fetch(&format!("b1#{i}.0"), &outs, &dst)), WAIT).unwrap();
        assert_eq!(r[0], "NULL", "{r:?}");
        assert_eq!(std::fs::read_to_string(outs.join(&dst)).unwrap(), want);
    }
    // A destination that can't be written: the result says so.
    let r = a.call(|id| async_cmd(id, fetch("b1#1.0", &outs, "no/such/dir/x")), WAIT).unwrap();
    assert!(r[0].contains("can't write"), "{r:?}");

    // A second batch of the same content sends nothing.
    let r = a.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("b2", &files[..1]))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    assert_eq!(uploads_stored(&s), 2, "the server had it");
    assert_eq!(sim.batches_named("alice~b2").len(), 1);

    // An input that is not there: refused here, nothing reaches the server.
    let id = a.reqid();
    let bad = uppercase_batch("b3", &[local.join("missing.txt")]);
    assert_eq!(a.command(&async_cmd(id, AsyncCommand::Submit(bad.clone()))).unwrap(), ["E"]);
    assert!(sim.batches_named("alice~b3").is_empty());
    // So is it behind lines still waiting for the server's replies: its
    // `E` comes in its turn, after theirs (it came first before).
    let mut lines = Vec::new();
    for _ in 0..3 {
        lines.extend_from_slice(b"COMMANDS\r\n");
    }
    let id = a.reqid();
    lines.extend(gahp_protocol::gahp::request::format(&async_cmd(id, AsyncCommand::Submit(bad))));
    lines.extend_from_slice(b"\r\nVERSION\r\n");
    a.send_raw(&lines).unwrap();
    for _ in 0..3 {
        assert_eq!(a.read_reply().unwrap()[0], "S", "a COMMANDS");
    }
    assert_eq!(a.read_reply().unwrap(), ["E"], "the submit");
    assert_eq!(a.read_reply().unwrap()[0], "S", "the VERSION");

    // The outputs wait in the area until the batch is retired.
    let out0 = transfer(&s, "alice").join("out").join(job_key("b1#0.0"));
    assert!(out0.join("out").exists() || out0.read_dir().unwrap().next().is_some(), "{}", out0.display());
    let r = a.call(|id| async_cmd(id, AsyncCommand::RetireBatch { batch: "b1".into() }), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    assert!(!out0.exists(), "retire deleted the outputs");
    assert!(!transfer(&s, "alice").join("out").join(job_key("b1#2.0")).exists());
}

#[test]
fn the_file_protocol_keeps_to_the_area_and_outputs_survive_a_disconnect_and_a_restart_until_the_retention() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let mut s = serve(dir.path(), &tokens, &[]);
    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(local.join("x"), "survive\n").unwrap();

    // Paths outside the area are refused, and so is content that is not
    // what was announced.
    let mut raw = Raw::open(&s, &alice);
    for path in ["../../../tokens.toml", "/etc/passwd", ".transfer/../../bob/files/x"] {
        let e = raw.get(path).unwrap_err();
        assert!(e.starts_with("FILES E "), "{path}: {e}");
    }
    let sha: String = Sha256::digest(b"abc").iter().map(|b| format!("{b:02x}")).collect();
    raw.send(&format!("PUT {sha} 3\nabd"));
    assert!(raw.line().starts_with("FILES E the\\ content's\\ SHA-256"), "a wrong digest is refused");
    raw.send(&format!("HAVE {sha} 3\n"));
    assert!(raw.line().starts_with("FILES E"), "nothing was kept of it");
    raw.send(&format!("PUT {sha} 3\nabc"));
    assert_eq!(raw.line(), "FILES S");
    raw.send(&format!("STAGE {sha} ../../escape\n"));
    assert!(raw.line().starts_with("FILES E"));
    assert!(!s.state.join("clients/escape").exists() && !s.state.join("clients/alice/escape").exists());
    drop(raw);

    let mut a = s.connect(&alice, &local, &[]);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    let r = a.call(|id| async_cmd(id, AsyncCommand::Submit(uppercase_batch("b1", &[PathBuf::from("x")]))), WAIT).unwrap();
    assert_eq!(r, ["NULL"]);
    wait_finished(&mut a, "b1");
    // The client goes away as soon as its fetch is accepted.
    let id = a.reqid();
    a.submit_async(&async_cmd(id, fetch("b1#0.0", &local, "got.txt"))).unwrap();
    a.kill();
    // Renamed in the area as it is to be here: the first spec's, `.r0`.
    let fetched = transfer(&s, "alice").join("out").join(job_key("b1#0.0")).join(".r0");
    eventually("the server fetched the output", || fetched.exists());
    assert!(!local.join("got.txt").exists());

    // Restarted, the server still has it for its owner.
    drop(s);
    s = serve(dir.path(), &tokens, &[]);
    let mut raw = Raw::open(&s, &alice);
    let at = format!(".transfer/out/{}/.r0", job_key("b1#0.0"));
    assert_eq!(raw.get(&at).unwrap(), b"SURVIVE\n");
    drop(raw);

    // After the retention it is gone.
    drop(s);
    let s = serve(dir.path(), &tokens, &["--keep-files-days", "0.00002"]);
    eventually("the retention deleted it", || !fetched.exists());
    assert!(!transfer(&s, "alice").join("in").read_dir().unwrap().any(|_| true), "inputs too");
}

fn str_value(v: &str) -> Value {
    Value::Str(v.into())
}

/// A BLAH command through the client; its result's fields after the id.
fn blah(g: &mut GahpClient, command: BlahCommand) -> Vec<String> {
    g.call(|reqid| Request::Command { reqid: ReqId(reqid), command: Command::Blah(command) }, WAIT).unwrap()
}

fn rpc_total(sim: &Sim) -> u64 {
    sim.state()["rpc_counts"].as_object().unwrap().values().map(|v| v.as_u64().unwrap_or(0)).sum()
}

#[test]
fn a_blah_job_through_connect_gets_its_inputs_there_and_its_outputs_back_and_unknown_ids_cost_no_rpc() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let s = serve(dir.path(), &tokens, &[]);

    // As the gridmanager sends it: absolute local paths, the GAHP: prefix.
    let iwd = dir.path().join("submit dir");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("input.txt"), "b a b\nc b\n").unwrap();
    let mut g = s.connect(&alice, dir.path(), &[]);
    assert_eq!(g.set_prefix("GAHP:").unwrap(), ["S"]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let job_dir = "home_bl_127.0.0.1_9618_vm_7.0_1795253890";
    let ad: ClassAd = gahp_testkit::blah_job_ad(
        &iwd,
        job_dir,
        &[
            ("Out", str_value("job.out")),
            ("Err", str_value(&iwd.join("job.err").display().to_string())),
            ("TransferInput", str_value(&iwd.join("input.txt").display().to_string())),
            ("TransferOutput", str_value("counts,summary")),
            ("TransferOutputRemaps", str_value("summary=summary.txt")),
            ("BoincApp", str_value("wordcount")),
        ],
    );
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let id = r[2].clone();
    assert!(id.ends_with(&format!("/blah#{job_dir}#1")), "the client sees its id without the prefix: {id}");
    let until = Instant::now() + WAIT;
    let last = loop {
        let r = blah(&mut g, BlahCommand::JobStatus { job_id: id.clone() });
        if r[0] == "0" && r[2] != "1" && r[2] != "2" {
            break r;
        }
        assert!(Instant::now() < until, "not completed: {r:?}");
        std::thread::sleep(Duration::from_millis(150));
    };
    assert_eq!(last[2], "4", "{last:?}");
    // The files are here before the gridmanager reads status 4.
    assert_eq!(std::fs::read_to_string(iwd.join("counts")).unwrap(), "a 1\nb 3\nc 1\n");
    assert!(!std::fs::read_to_string(iwd.join("summary.txt")).unwrap().is_empty());
    assert!(!iwd.join("summary").exists(), "remapped");
    assert!(iwd.join("job.out").exists() && iwd.join("job.err").exists());
    // On the project its BOINC name is the client's (its batch, shared
    // by every client on the account, names none).
    let boinc = format!("alice~blah#{job_dir}#1");
    let state = sim.state();
    let jobs: Vec<&serde_json::Value> = state["jobs"].as_array().unwrap().iter().filter(|j| j["name"] == boinc.as_str()).collect();
    assert_eq!(jobs.len(), 1, "{boinc}");
    let batch = jobs[0]["batch"].clone();
    eventually("the batch is retired", || {
        sim.state()["batches"].as_array().unwrap().iter().any(|b| b["id"] == batch && b["state"].as_i64() == Some(4))
    });

    // Ids this client has no job of: answered without asking the project.
    std::thread::sleep(Duration::from_millis(500));
    let before = rpc_total(&sim);
    let key = id.strip_prefix("boinc/").unwrap().split('/').next().unwrap().to_string();
    for other in [format!("boinc/{key}/blah#home_bl_other_1.0_1#1"), format!("boinc/{key}/bob~blah#x#1")] {
        let r = blah(&mut g, BlahCommand::JobStatus { job_id: other.clone() });
        assert_eq!((r[0].as_str(), r[2].as_str(), r[3].as_str()), ("1", "0", "N/A"), "{other}: {r:?}");
        assert_eq!(blah(&mut g, BlahCommand::JobCancel { job_id: other.clone() })[0], "0");
    }
    assert_eq!(rpc_total(&sim), before, "no RPC for ids the client has no job of: {}", sim.state()["rpc_counts"]);
    // Its own completed job is still answered.
    assert_eq!(blah(&mut g, BlahCommand::JobStatus { job_id: id })[2], "4");
}

/// What `connect` brings down is checked as the daemon checks a host's
/// zip (issue 45): a served job's area holding a dot-file and a file
/// below a folder that is a link in the local `Iwd` (as a server gone bad
/// would leave them) gets no dot-file placed and nothing written through
/// the link; the status says why until the area is clean.
#[test]
fn connect_brings_no_dot_file_and_writes_through_no_link_in_iwd() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let s = serve(dir.path(), &tokens, &[]);
    let iwd = dir.path().join("home");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, iwd.join("data")).unwrap();
    std::fs::write(iwd.join("input.txt"), "b a b\n").unwrap();
    let mut g = s.connect(&alice, dir.path(), &[]);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let job_dir = "home_bl_127.0.0.1_9618_vm_8.0_1795253890";
    let ad: ClassAd = gahp_testkit::blah_job_ad(
        &iwd,
        job_dir,
        &[
            ("TransferInput", str_value(&iwd.join("input.txt").display().to_string())),
            ("TransferOutput", str_value("counts")),
            ("BoincApp", str_value("wordcount")),
        ],
    );
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let id = r[2].clone();
    let area = transfer(&s, "alice").join("blah").join(job_dir);
    eventually("the job's area is made", || area.is_dir());
    std::fs::write(area.join(".bashrc"), "evil").unwrap();
    std::fs::create_dir_all(area.join("data")).unwrap();
    std::fs::write(area.join("data/x"), "evil").unwrap();
    let status = |g: &mut GahpClient| loop {
        let r = blah(g, BlahCommand::JobStatus { job_id: id.clone() });
        if !(r[0] == "0" && (r[2] == "1" || r[2] == "2")) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(150));
    };
    let until = Instant::now() + WAIT;
    let refused = loop {
        let r = status(&mut g);
        if r[0] == "1" {
            break r;
        }
        assert!(Instant::now() < until && r[2] != "4", "the link was not refused: {r:?}");
    };
    assert!(refused[1].contains("is a link"), "{refused:?}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
    assert!(!iwd.join("counts").exists(), "nothing brought before every destination is checked");
    std::fs::remove_dir_all(area.join("data")).unwrap();
    let done = status(&mut g);
    assert_eq!((done[0].as_str(), done[2].as_str()), ("0", "4"), "{done:?}");
    assert_eq!(std::fs::read_to_string(iwd.join("counts")).unwrap(), "a 1\nb 2\n");
    assert!(!iwd.join(".bashrc").exists(), "no dot-file brought");
}
