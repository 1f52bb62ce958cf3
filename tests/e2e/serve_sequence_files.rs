//! A work sequence's files over the connection: `boinc_gahp connect`
//! sends a `BOINC_SEQUENCE_CREATE`'s local state files and inputs to
//! `boinc_gahp serve` and brings a `BOINC_SEQUENCE_FETCH`'s files back to
//! the local directory asked for before its result is handed on; the real
//! binaries over TLS against the simulated project.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::serve::*;
use crate::common::*;
use gahp_protocol::gahp::sequence_commands::{CreateSequence, FetchSequence, SequenceCommand, StepSelector};
use gahp_protocol::gahp::Command;

fn uploads_stored(s: &Serve) -> usize {
    s.log_text().matches("stored an uploaded input").count()
}

/// The stepper app until a `DONE` after step 2 (of 5 planned).
fn create(name: &str, state: &Path, extra: &Path) -> SequenceCommand {
    SequenceCommand::Create(CreateSequence {
        name: name.into(),
        app_name: "stepper".into(),
        steps: 5,
        max_step_time: 600,
        max_attempts: 3,
        end_marker: Some("DONE".into()),
        state_files: vec![InputFile { src: state.to_path_buf(), dst_name: "state".into() }],
        args: vec!["--end-at".into(), "2".into()],
        inputs: vec![InputFile { src: extra.to_path_buf(), dst_name: "extra".into() }],
    })
}

fn fetch(name: &str, step: StepSelector, dir: &Path) -> SequenceCommand {
    SequenceCommand::Fetch(FetchSequence { name: name.into(), step, dir: dir.to_path_buf() })
}

/// A serve (flags after `serve`: `extra`) that looks at sequences every
/// 0.2 s, and its client alice's token file.
fn serve_polling_sequences(dir: &Path, sim: &Sim, extra: &[&str]) -> (Serve, PathBuf) {
    let tokens = dir.join("tokens.toml");
    let alice = add_client(dir, &tokens, sim, "alice");
    let config = dir.join("config.toml");
    std::fs::write(&config, "sequence_poll_ms = 200\n").unwrap();
    (serve_with(dir, &tokens, &["--config", config.to_str().unwrap()], extra), alice)
}

/// The regular files below `dir`, relative to it, sorted.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_sequence_through_connect_sends_its_inputs_once_and_its_files_come_back_to_the_local_directory() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let (s, alice) = serve_polling_sequences(dir.path(), &sim, &[]);

    // The files are on the first tier only, outside the client's area,
    // with spaces in their names.
    let local = dir.path().join("first tier");
    std::fs::create_dir_all(local.join("out dir")).unwrap();
    std::fs::create_dir_all(local.join("step one")).unwrap();
    std::fs::write(local.join("state 0"), b"").unwrap();
    std::fs::write(local.join("extra params"), "extra of md\n").unwrap();
    assert!(!local.starts_with(s.files("alice")));
    let mut a = s.connect(&alice, &local, &[]);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);

    // The state file named relative to the connect, the input absolute.
    assert_eq!(sequence_call(&mut a, create("md", Path::new("state 0"), &local.join("extra params"))), ["NULL"]);
    assert_eq!(uploads_stored(&s), 2, "each content went up once");
    // Sent again, by other paths to the same contents: the same sequence.
    assert_eq!(sequence_call(&mut a, create("md", &local.join("state 0"), Path::new("extra params"))), ["NULL"]);
    // Another sequence of the same files sends nothing.
    assert_eq!(sequence_call(&mut a, create("md2", &local.join("state 0"), &local.join("extra params"))), ["NULL"]);
    assert_eq!(uploads_stored(&s), 2, "the server had them");
    assert_eq!(sequence_call(&mut a, SequenceCommand::Abort { name: "md2".into() }), ["NULL"]);
    // An input that is not there: refused here, nothing is made.
    let id = a.reqid();
    let missing = Request::Command {
        reqid: ReqId(id),
        command: Command::Sequence(create("md3", &local.join("missing"), &local.join("extra params"))),
    };
    assert_eq!(a.command(&missing).unwrap(), ["E"]);
    assert_ne!(sequence_call(&mut a, SequenceCommand::Query { name: "md3".into() })[0], "NULL", "no md3");

    let done = wait_sequence_over(&mut a, "md", Duration::from_secs(120));
    assert_eq!((done[1].as_str(), done[2].as_str()), ("COMPLETED", "2"), "{done:?}");
    assert!(!sim.batches_named("alice~md#2#1").is_empty(), "step 2 as alice's on the project");

    let step1 = boinc_sim::apps::stepper_next("", b"extra of md\n").unwrap();
    let step2 = boinc_sim::apps::stepper_next(&step1, b"extra of md\n").unwrap();
    // The files are here when the result is read; the directory is
    // relative to the connect, with a space.
    let r = sequence_call(&mut a, fetch("md", StepSelector::Latest, Path::new("out dir")));
    assert_eq!(r, ["NULL", "2", "2", "DONE", "state"]);
    assert_eq!(std::fs::read_to_string(local.join("out dir/state")).unwrap(), step2);
    assert_eq!(std::fs::read_to_string(local.join("out dir/DONE")).unwrap(), step2);
    let r = sequence_call(&mut a, fetch("md", StepSelector::Step(1), &local.join("step one")));
    assert_eq!(r, ["NULL", "1", "1", "state"]);
    assert_eq!(std::fs::read_to_string(local.join("step one/state")).unwrap(), step1);
    // A directory that can't be written: the result says so.
    let r = sequence_call(&mut a, fetch("md", StepSelector::Latest, &local.join("no such dir")));
    assert!(r[0].contains("can't write"), "{r:?}");

    // Nothing was written here but what was asked for.
    let want: Vec<PathBuf> =
        ["extra params", "out dir/DONE", "out dir/state", "state 0", "step one/state"].iter().map(PathBuf::from).collect();
    assert_eq!(files_below(&local), want);
    // On the second tier the inputs are kept by content and the fetches'
    // copies were emptied once brought; nothing else is in the area.
    let area = files_below(&s.files("alice"));
    assert_eq!(area.len(), 2, "{area:?}");
    assert!(area.iter().all(|p| p.starts_with(".transfer/in")), "{area:?}");
}

/// A sequence reads its inputs again at every step: they stay on the
/// second tier while it may run one, however short the retention, and
/// go with the retention once it is over.
#[test]
fn a_running_sequences_inputs_outlast_the_retention_and_go_after_it_ends() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    // 0.00002 days: 1.7 s, swept every 0.2 s.
    let (s, alice) = serve_polling_sequences(dir.path(), &sim, &["--keep-files-days", "0.00002"]);
    let local = dir.path().join("first tier");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(local.join("state 0"), b"").unwrap();
    std::fs::write(local.join("extra params"), "extra of long\n").unwrap();
    let mut a = s.connect(&alice, &local, &[]);
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);

    // Four steps of at least a second each: the later ones start well
    // after the input's retention ran out.
    let create = SequenceCommand::Create(CreateSequence {
        name: "long".into(),
        app_name: "stepper".into(),
        steps: 4,
        max_step_time: 600,
        max_attempts: 1,
        end_marker: None,
        state_files: vec![InputFile { src: local.join("state 0"), dst_name: "state".into() }],
        args: vec!["--sleep-ms".into(), "1000".into()],
        inputs: vec![InputFile { src: local.join("extra params"), dst_name: "extra".into() }],
    });
    assert_eq!(sequence_call(&mut a, create), ["NULL"]);
    let done = wait_sequence_over(&mut a, "long", Duration::from_secs(120));
    assert_eq!((done[1].as_str(), done[2].as_str()), ("COMPLETED", "4"), "{done:?}");

    // Over: its inputs go with the retention.
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !files_below(&s.files("alice")).is_empty() {
        assert!(std::time::Instant::now() < until, "still kept: {:?}", files_below(&s.files("alice")));
        std::thread::sleep(Duration::from_millis(200));
    }
}
