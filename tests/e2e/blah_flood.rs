//! A flood of `BLAH_JOB_SUBMIT`s written at once, with `RESULTS`, statuses
//! and pings among them, to the real daemon over pipes, then floods of
//! statuses: the session lets at most `[blah] max_commands_in_progress`
//! submits and statuses be in progress and reads nothing more meanwhile,
//! yet every command behind the pause is answered, every result comes
//! exactly once, and every job runs to completion on the simulated project.

use crate::common::*;
use gahp_protocol::classad::Value;
use gahp_protocol::gahp::escape::split_args;
use gahp_protocol::gahp::request::format;
use gahp_protocol::gahp::{BlahCommand, Command};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const PLACES: usize = 4;
const JOBS: usize = 240;

/// What each command written in the flood is.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Sent {
    Submit(usize),
    Status,
    Ping,
    Results,
}

fn args(line: &[u8]) -> Vec<String> {
    split_args(line).into_iter().map(|a| String::from_utf8_lossy(&a).into_owned()).collect()
}

/// A result line (`<reqid> <fields>...`) into `results`, each id once.
fn take_result(results: &mut HashMap<u32, Vec<String>>, mut line: Vec<String>) {
    let id: u32 = line[0].parse().unwrap_or_else(|_| panic!("a result line without a request id: {line:?}"));
    assert!(results.insert(id, line.split_off(1)).is_none(), "two results for request {id}");
}

#[test]
fn a_submit_flood_is_paced_and_every_command_behind_it_is_answered_once() {
    let sim_dir = tempfile::tempdir().unwrap();
    let sim = Sim::start_config(sim_dir.path(), "tick_ms = 50\nmax_parallel_runs = 8\n[[hosts]]\nname = \"h\"\ncount = 32\nflops = 1e11\n");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("boinc.auth"), format!("{}\n", sim.auth)).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "log_level = \"info,gahp_session::session=debug,gahp_blah::jobs=debug\"\n[blah]\nproject_url = \"{}\"\n\
             authenticator_file = \"boinc.auth\"\ndefault_app = \"uppercase\"\nstatus_refresh_secs = 0.5\n\
             batch_window_secs = 0.5\nmax_commands_in_progress = {PLACES}\n",
            sim.url
        ),
    )
    .unwrap();
    let mut g = gahp_with(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    assert_eq!(g.command_line(b"ASYNC_MODE_ON").unwrap(), ["S"]);

    // The whole flood in one write, as a gridmanager with many submits
    // pending sends it: the daemon reads it as it paces itself (the pipe
    // holds the rest; the client's reader keeps taking what it writes).
    let iwd = |i: usize| dir.path().join(format!("j{i}"));
    let mut sent: Vec<(u32, Sent)> = Vec::new();
    let mut flood = Vec::new();
    let write = |flood: &mut Vec<u8>, line: Vec<u8>| {
        flood.extend_from_slice(&line);
        flood.extend_from_slice(b"\r\n");
    };
    for i in 0..JOBS {
        std::fs::create_dir_all(iwd(i)).unwrap();
        std::fs::write(iwd(i).join("in"), format!("flood {i}\n")).unwrap();
        let ad = gahp_testkit::blah_job_ad(
            &iwd(i),
            &format!("home_bl_flood_{i}.0"),
            &[("TransferInput", Value::Str("in".into())), ("BoincApp", Value::Str("uppercase".into()))],
        );
        let reqid = g.reqid();
        write(&mut flood, format(&Request::Command { reqid: ReqId(reqid), command: Command::Blah(BlahCommand::JobSubmit { ad }) }));
        sent.push((reqid, Sent::Submit(i)));
        if i % 40 == 39 {
            // Behind the pause: a status (of an id that is not ours: its
            // answer needs nothing but the daemon), a ping, a RESULTS.
            let reqid = g.reqid();
            let job_id = "not_a_boinc_gahp_id".to_string();
            write(&mut flood, format(&Request::Command { reqid: ReqId(reqid), command: Command::Blah(BlahCommand::JobStatus { job_id }) }));
            sent.push((reqid, Sent::Status));
            let reqid = g.reqid();
            write(
                &mut flood,
                format(&Request::Command { reqid: ReqId(reqid), command: Command::Blah(BlahCommand::Ping { batch_type: "boinc".into() }) }),
            );
            sent.push((reqid, Sent::Ping));
            write(&mut flood, b"RESULTS".to_vec());
            sent.push((0, Sent::Results));
        }
    }
    g.send_raw(&flood).unwrap();

    // Each command's return line, in order (`R` lines may come between);
    // the RESULTS blocks' lines are results too.
    let mut results: HashMap<u32, Vec<String>> = HashMap::new();
    for (reqid, what) in &sent {
        let reply = g.read_reply().unwrap_or_else(|e| panic!("no return line for {what:?} {reqid}: {e}"));
        match what {
            Sent::Results => {
                assert_eq!(reply.len(), 2, "{reply:?}");
                assert_eq!(reply[0], "S");
                let n: usize = reply[1].parse().unwrap();
                for _ in 0..n {
                    take_result(&mut results, args(&g.read_line().unwrap()));
                }
            }
            _ => assert_eq!(reply, ["S"], "the return line of {what:?} {reqid}"),
        }
    }
    // The rest of the results, each once.
    let until = Instant::now() + WAIT;
    while results.len() < sent.iter().filter(|(_, w)| *w != Sent::Results).count() {
        assert!(Instant::now() < until, "{} results of {} came", results.len(), sent.len());
        for line in g.results().unwrap() {
            take_result(&mut results, line);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut ids = vec![String::new(); JOBS];
    for (reqid, what) in &sent {
        let r = results.get(reqid);
        match what {
            Sent::Submit(i) => {
                let r = r.unwrap();
                assert_eq!(r.len(), 3, "{r:?}");
                assert_eq!(r[..2], ["0", "No error"], "{r:?}");
                ids[*i] = r[2].clone();
            }
            Sent::Status => assert_eq!(r.unwrap()[0], "1", "a status of an id that is not ours: {r:?}"),
            Sent::Ping => assert_eq!(r.unwrap()[..], ["0", "No error"]),
            Sent::Results => {}
        }
    }
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), JOBS, "each job its own id");

    // Every job runs and completes.
    let until = Instant::now() + Duration::from_secs(300);
    let mut pending: Vec<usize> = (0..JOBS).collect();
    while !pending.is_empty() {
        assert!(Instant::now() < until, "{} jobs did not complete", pending.len());
        std::thread::sleep(Duration::from_millis(500));
        let asks: Vec<u32> = pending
            .iter()
            .map(|&i| {
                let reqid = g.reqid();
                let command = BlahCommand::JobStatus { job_id: ids[i].clone() };
                g.submit_async(&Request::Command { reqid: ReqId(reqid), command: Command::Blah(command) }).unwrap();
                reqid
            })
            .collect();
        let mut still = Vec::new();
        for (&i, reqid) in pending.iter().zip(asks) {
            let r = g.wait_result(reqid, WAIT).unwrap();
            assert_eq!(r[0], "0", "{r:?}");
            match r[2].parse::<i32>().unwrap() {
                4 => assert_eq!(std::fs::read_to_string(iwd(i).join("out")).unwrap(), format!("FLOOD {i}\n")),
                s @ (3 | 5) => panic!("job {i} ended with status {s}: {r:?}"),
                _ => still.push(i),
            }
        }
        pending = still;
    }

    // The pacing held: the log says how many submits and statuses were in
    // progress at most, and that the reading paused.
    let log = log_text(dir.path());
    let most = log
        .lines()
        .filter(|l| l.contains("BLAH commands in progress: the most yet"))
        .filter_map(|l| l.split("in_progress=").nth(1)?.split_whitespace().next()?.parse::<usize>().ok())
        .max()
        .expect("the log counts the commands in progress");
    let pauses = log.matches("reading paused").count();
    // While the places are all taken the session reads nothing more: one
    // command waits for a place, the rest of the flood stays in the pipe.
    let read_unplaced = log
        .lines()
        .filter(|l| l.contains("BLAH commands read with every place taken: the most yet"))
        .filter_map(|l| l.split("read=").nth(1)?.split_whitespace().next()?.parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    eprintln!(
        "at most {most} commands were in progress at once ({PLACES} places), {read_unplaced} read while every place was taken; the reading paused {pauses} times"
    );
    assert!(most <= PLACES, "{most} commands were in progress at once, with {PLACES} places");
    assert!(pauses > 0, "the flood never filled the places");
    assert_eq!(read_unplaced, 1, "commands read while every place was taken (the reading did not pause)");
}
