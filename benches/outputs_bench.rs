//! The daemon's memory while it takes a script job's outputs back from a
//! volunteer's host (issue 45): a `condor_out.zip` of about 1 MB that
//! would unpack to 1 GiB (a job whose stdout is 1 GiB of zeros: the
//! simulated host's runner deflates it) is refused as a zip bomb, and a
//! legitimate 1 GiB output (random bytes, which do not compress) is
//! placed whole. Prints numbers; asserts only that each job ended as it
//! must (held, completed with its file). Run:
//!
//!     cargo bench --bench outputs_bench
//!
//! Each case starts a fresh daemon against the simulated project (its
//! built-in runner app really runs the job's script) and reads the
//! daemon's peak RSS (VmHWM) before the job and after its final status.

use std::path::Path;
use std::time::{Duration, Instant};

use gahp_protocol::classad::{ClassAd, Value};
use gahp_protocol::gahp::{BlahCommand, Command, ReqId, Request};
use gahp_testkit::{blah_job_ad, GahpClient, SimProcess};

const GIB: u64 = 1 << 30;

fn blah(g: &mut GahpClient, command: BlahCommand) -> Vec<String> {
    g.call(|reqid| Request::Command { reqid: ReqId(reqid), command: Command::Blah(command) }, Duration::from_secs(300)).unwrap()
}

/// One script job whose script is `script`; its final status fields, the
/// seconds it took, and the daemon's peak RSS before and after.
fn run(name: &str, script: &str) -> (Vec<String>, f64, f64, f64, tempfile::TempDir) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let sim_toml = dir.path().join("sim.toml");
    // Uploads of any size: the legitimate output's zip is 1 GiB.
    std::fs::write(&sim_toml, "[quirks]\nupload_max_filesize = 0\npost_max_size = 0\n").unwrap();
    let sim =
        SimProcess::start(Path::new(env!("CARGO_BIN_EXE_boinc-sim")), &["--config", sim_toml.to_str().unwrap()]).expect("boinc-sim starts");
    let Request::SelectProject { url, authenticator } = sim.select() else { unreachable!() };
    std::fs::write(dir.path().join("boinc.auth"), format!("{}\n", authenticator.expose())).unwrap();
    let config = dir.path().join("gahp.toml");
    std::fs::write(
        &config,
        format!("[blah]\nproject_url = \"{url}\"\nauthenticator_file = \"boinc.auth\"\nrunner_app = \"runner\"\nstatus_refresh_secs = 1\n"),
    )
    .unwrap();
    let (state, log) = (dir.path().join("state"), dir.path().join("gahp.log"));
    let args = ["--state-dir", state.to_str().unwrap(), "--log-file", log.to_str().unwrap(), "--config", config.to_str().unwrap()];
    let mut g = GahpClient::spawn(Path::new(env!("CARGO_BIN_EXE_boinc_gahp")), &args, &[], dir.path()).expect("boinc_gahp starts");
    g.command_line(b"ASYNC_MODE_ON").unwrap();
    let iwd = dir.path().join(name);
    std::fs::create_dir_all(&iwd).unwrap();
    let exe = iwd.join("job.sh");
    std::fs::write(&exe, script).unwrap();
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut ad = blah_job_ad(&iwd, &format!("home_bl_{name}"), &[("Out", Value::Str("job.out".into()))]);
    ad.insert("Cmd", Value::Str(exe.display().to_string()));
    let before = g.peak_rss_mib();
    let t = Instant::now();
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[0], "0", "{r:?}");
    let id = r[2].clone();
    let until = Instant::now() + Duration::from_secs(1200);
    let status = loop {
        let r = blah(&mut g, BlahCommand::JobStatus { job_id: id.clone() });
        if r[0] == "0" && r[2] != "1" && r[2] != "2" {
            break r;
        }
        assert!(Instant::now() < until, "{name} did not end in time: {r:?}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let secs = t.elapsed().as_secs_f64();
    let after = g.peak_rss_mib();
    drop(g);
    drop(sim);
    (status, secs, before, after, dir)
}

fn main() {
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |case: &str| only.is_empty() || only.iter().any(|o| case.contains(o.as_str()));
    if wanted("bomb") {
        let script = format!("#!/bin/sh\nhead -c {GIB} /dev/zero\n");
        let (status, secs, before, after, dir) = run("bomb", &script);
        let ad = ClassAd::parse(&status[3]).unwrap();
        assert_eq!(status[2], "5", "the bomb is held: {status:?}");
        let reason = ad.get_str("HoldReason").unwrap_or_default().to_string();
        assert!(reason.contains("zip bomb"), "{reason}");
        assert!(!dir.path().join("bomb/job.out").exists(), "nothing of it placed");
        println!(
            "bomb: a job whose stdout is 1 GiB of zeros, held in {secs:.1} s (\"{reason}\"); daemon peak RSS {before:.1} MiB before, {after:.1} MiB after"
        );
    }
    if wanted("legit") {
        let script = format!("#!/bin/sh\nhead -c {GIB} /dev/urandom > big.dat\necho made\n");
        let (status, secs, before, after, dir) = run("legit", &script);
        assert_eq!(status[2], "4", "the legitimate output completes: {status:?}");
        let big = dir.path().join("legit/big.dat");
        assert_eq!(std::fs::metadata(&big).map(|m| m.len()).unwrap_or(0), GIB, "placed whole");
        println!("legit: a job that made a 1 GiB file of random bytes, completed with it placed in {secs:.1} s; daemon peak RSS {before:.1} MiB before, {after:.1} MiB after");
    }
}
