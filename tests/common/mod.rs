//! Shared set-up of the end-to-end tests: the real `boinc-sim` and
//! `boinc_gahp` binaries, talking over pipes and loopback HTTP only.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use gahp_protocol::gahp::{
    AsyncCommand, Command, FetchMode, FetchOutput, InputFile, JobParams, JobSpec, OutputSpec, ParamValue, ReqId, Request, SubmitBatch,
};
pub use gahp_protocol::Authenticator;
pub use gahp_testkit::http;
pub use gahp_testkit::GahpClient;

pub mod blah;
pub mod ledger;
pub mod script;
pub mod serve;

pub const WAIT: Duration = Duration::from_secs(60);

/// A running `boinc-sim` of this build (see `boinc_gahp::testkit`).
pub struct Sim(pub gahp_testkit::SimProcess);

impl std::ops::Deref for Sim {
    type Target = gahp_testkit::SimProcess;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Sim {
    pub fn start() -> Sim {
        Sim::start_with(&[])
    }

    /// A sim with this configuration (TOML, see docs/sim.md), written to
    /// `dir/sim.toml`.
    pub fn start_config(dir: &Path, toml: &str) -> Sim {
        let path = dir.join("sim.toml");
        std::fs::write(&path, toml).unwrap();
        Sim::start_with(&["--config", path.to_str().unwrap()])
    }

    /// A sim whose PHP takes uploads of any size (tests of big files).
    pub fn start_without_php_limits(dir: &Path) -> Sim {
        Sim::start_config(dir, "[quirks]\nupload_max_filesize = 0\npost_max_size = 0\n")
    }

    pub fn start_with(args: &[&str]) -> Sim {
        Sim(gahp_testkit::SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), args).expect("boinc-sim starts"))
    }
}

/// A daemon with fast retries, its state and log in `dir`.
pub fn gahp(dir: &Path) -> GahpClient {
    gahp_with(dir, &[], &[])
}

pub fn gahp_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> GahpClient {
    let state = dir.join("state");
    let log = dir.join("gahp.log");
    let mut all = vec!["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap(), "--retry-base-ms", "20"];
    all.extend_from_slice(args);
    GahpClient::spawn(Path::new(env!("CARGO_BIN_EXE_boinc_gahp")), &all, env, dir).expect("boinc_gahp starts")
}

/// Everything the daemon logged so far (the daily-rotated file(s)).
pub fn log_text(dir: &Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("gahp.log") {
            text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    text
}

pub fn async_cmd(reqid: u32, command: AsyncCommand) -> Request {
    Request::Command { reqid: ReqId(reqid), command: Command::Boinc(command) }
}

/// Writes `n` input files with distinct content; returns their paths.
pub fn inputs(dir: &Path, n: usize, tag: &str) -> Vec<PathBuf> {
    let d = dir.join("inputs");
    std::fs::create_dir_all(&d).unwrap();
    (0..n)
        .map(|i| {
            let p = d.join(format!("{tag}_{i}.txt"));
            std::fs::write(&p, format!("input {i} of {tag}\n")).unwrap();
            p
        })
        .collect()
}

/// One job per input, app `uppercase` (one input, `in`; one output, `out`).
pub fn uppercase_batch(name: &str, files: &[PathBuf]) -> SubmitBatch {
    SubmitBatch {
        batch_name: name.to_string(),
        app_name: "uppercase".into(),
        jobs: files
            .iter()
            .enumerate()
            .map(|(i, f)| JobSpec {
                name: format!("{name}#{i}.0"),
                args: vec![],
                inputs: vec![InputFile { src: f.clone(), dst_name: "in".into() }],
            })
            .collect(),
        params: JobParams::default(),
    }
}

/// Polls BOINC_QUERY_BATCHES until every job of the batch is DONE or ERROR.
pub fn wait_finished(g: &mut GahpClient, batch: &str) -> Vec<(String, String)> {
    let until = std::time::Instant::now() + WAIT;
    loop {
        let r =
            g.call(|id| async_cmd(id, AsyncCommand::QueryBatches { min_mod_time: 0.0, batches: vec![batch.to_string()] }), WAIT).unwrap();
        assert_eq!(r[0], "NULL", "{r:?}");
        let jobs: Vec<(String, String)> = r[3..].chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
        if !jobs.is_empty() && jobs.iter().all(|(_, s)| s == "DONE" || s == "ERROR") {
            return jobs;
        }
        assert!(std::time::Instant::now() < until, "batch {batch} did not finish: {jobs:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A started daemon with the project selected and async mode on.
pub fn ready_gahp(sim: &Sim, dir: &Path) -> GahpClient {
    let mut g = gahp(dir);
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    assert_eq!(g.command(&sim.select()).unwrap(), ["S"]);
    g
}

/// Writes each project's key file and the pool file; `extra` goes on top.
pub fn pool_file(dir: &Path, projects: &[(&str, &Sim)], extra: &str) -> PathBuf {
    let mut text = format!("probe_timeout_secs = 3\nquery_timeout_secs = 3\nrefresh_secs = 3600\n{extra}\n");
    for (name, sim) in projects {
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&key, format!("{}\n", sim.auth)).unwrap();
        text.push_str(&format!("[[project]]\nname = \"{name}\"\nurl = \"{}\"\nauthenticator_file = \"{}\"\n", sim.url, key.display()));
    }
    let path = dir.join("pool.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A `BOINC_SEQUENCE_*` command; its result's fields after the id.
pub fn sequence_call(g: &mut GahpClient, command: gahp_protocol::gahp::sequence_commands::SequenceCommand) -> Vec<String> {
    g.call(|id| Request::Command { reqid: ReqId(id), command: Command::Sequence(command) }, WAIT).unwrap()
}

/// Queries the sequence until it is no longer `RUNNING` (at most
/// `within`); the last query's fields.
pub fn wait_sequence_over(g: &mut GahpClient, name: &str, within: Duration) -> Vec<String> {
    use gahp_protocol::gahp::sequence_commands::SequenceCommand;
    let until = std::time::Instant::now() + within;
    loop {
        let r = sequence_call(g, SequenceCommand::Query { name: name.into() });
        assert_eq!(r[0], "NULL", "{r:?}");
        if r[1] != "RUNNING" {
            return r;
        }
        assert!(std::time::Instant::now() < until, "the sequence {name} did not end in time: {r:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
