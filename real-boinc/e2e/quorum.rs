//! Results a public project can trust (docs/runner.md "Quorum"), on the
//! real server: a quorum runner's job where one host lies.

use super::*;

/// A second client attached to the project (`setup.sh client2`: the
/// stage's), from `BOINC_REAL_CLIENT2_RPC` and `BOINC_REAL_CLIENT2_DIR`
/// (its data directory: the test changes a file in its slot), with the
/// first client's password.
fn client2(real: &Real) -> (BoincClient, PathBuf) {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| panic!("{k} is not set ({NEEDS})"));
    let passwd =
        real.client.as_ref().expect("needs the client's GUI RPC: BOINC_REAL_CLIENT_RPC and BOINC_REAL_CLIENT_PASSWD").passwd.clone();
    (BoincClient { rpc: var("BOINC_REAL_CLIENT2_RPC"), passwd, url: real.url.clone() }, PathBuf::from(var("BOINC_REAL_CLIENT2_DIR")))
}

/// Whether a client asks the project for new tasks (`boinccmd
/// --get_project_status`: "don't request more work").
fn requests_work(c: &BoincClient) -> Option<bool> {
    let out = Command::new("boinccmd").args(["--host", &c.rpc, "--passwd", &c.passwd, "--get_project_status"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with("don't request more work:"))?;
    Some(line.trim_end().ends_with("no"))
}

/// A client's "request more work" set for the length of a test, then set
/// back as it was (also when the test fails).
struct WorkRequests<'a> {
    client: &'a BoincClient,
    before: Option<bool>,
}

impl<'a> WorkRequests<'a> {
    fn set(client: &'a BoincClient, on: bool) -> WorkRequests<'a> {
        let before = requests_work(client);
        assert!(client.boinccmd(&["--project", &client.url, if on { "allowmorework" } else { "nomorework" }]));
        WorkRequests { client, before }
    }

    fn restore(&self) {
        if let Some(on) = self.before {
            self.client.boinccmd(&["--project", &self.client.url, if on { "allowmorework" } else { "nomorework" }]);
        }
    }
}

impl Drop for WorkRequests<'_> {
    fn drop(&mut self) {
        self.restore();
    }
}

/// A third volunteer host for the length of a test: BOINC's client in a
/// directory of its own, on GUI RPC port 31427, attached with the account
/// key of `BOINC_REAL_ACCOUNT_KEY_FILE`; detached and ended (by its PID)
/// when dropped. A new host to the project each time.
struct TempClient {
    child: std::process::Child,
    client: BoincClient,
    _dir: tempfile::TempDir,
}

impl TempClient {
    fn start(real: &Real, passwd: &str) -> TempClient {
        let key_file =
            std::env::var("BOINC_REAL_ACCOUNT_KEY_FILE").unwrap_or_else(|_| panic!("BOINC_REAL_ACCOUNT_KEY_FILE is not set ({NEEDS})"));
        let key = std::fs::read_to_string(&key_file).unwrap_or_else(|e| panic!("{key_file}: {e}")).trim().to_string();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("gui_rpc_auth.cfg"), format!("{passwd}\n")).unwrap();
        std::fs::write(
            d.join("cc_config.xml"),
            "<cc_config><options><allow_remote_gui_rpc>0</allow_remote_gui_rpc></options></cc_config>\n",
        )
        .unwrap();
        // As the stage's clients: run always, a small work buffer.
        std::fs::write(
            d.join("global_prefs_override.xml"),
            "<global_preferences><run_if_user_active>1</run_if_user_active><idle_time_to_run>0</idle_time_to_run>\
             <cpu_usage_limit>100</cpu_usage_limit><max_ncpus_pct>100</max_ncpus_pct><work_buf_min_days>0.01</work_buf_min_days>\
             <work_buf_additional_days>0.01</work_buf_additional_days></global_preferences>\n",
        )
        .unwrap();
        let child = Command::new("boinc")
            .args(["--dir", d.to_str().unwrap(), "--gui_rpc_port", "31427", "--allow_multiple_clients"])
            .current_dir(d)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("can't start a third BOINC client (boinc)");
        let client = BoincClient { rpc: "127.0.0.1:31427".into(), passwd: passwd.into(), url: real.url.clone() };
        let t = TempClient { child, client, _dir: dir };
        let until = Instant::now() + Duration::from_secs(30);
        while !t.client.boinccmd(&["--get_cc_status"]) {
            assert!(Instant::now() < until, "the third client's GUI RPC does not answer");
            std::thread::sleep(Duration::from_millis(500));
        }
        assert!(t.client.boinccmd(&["--project_attach", &real.url, &key]), "the third client can't attach");
        t.client.set_run_mode("always");
        t.client.set_network_mode("always");
        t
    }
}

impl Drop for TempClient {
    fn drop(&mut self) {
        self.client.boinccmd(&["--project", &self.client.url, "detach"]);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The slot directory of `client_dir` whose `file` holds `marker`.
fn slot_with(client_dir: &Path, file: &str, marker: &str) -> Option<PathBuf> {
    std::fs::read_dir(client_dir.join("slots"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|s| std::fs::read_to_string(s.join(file)).is_ok_and(|t| t.contains(marker)))
}

/// A script job of the quorum runner `runner_q2` (`register --quorum 2`)
/// runs on the first client and on the second, which lies: the test
/// rewrites the job's output in that client's slot before it is zipped.
/// The validator (`condor_runner_validate` under BOINC's
/// `script_validator`) finds the two disagree, BOINC asks for a third
/// result, which a third client (started by the test) computes honestly;
/// the job completes with the honest output and stdout, nothing of the
/// liar's.
///
/// Needs, besides the usual: `BOINC_REAL_CLIENT2_RPC` and
/// `BOINC_REAL_CLIENT2_DIR` (a second client on this machine, which asks
/// for work only during this test), `BOINC_REAL_ACCOUNT_KEY_FILE` (to
/// attach the third), and `boinc` on the PATH. Run it alone: while it
/// runs, any job of the project may go to the second and third client.
#[test]
#[ignore = "needs a real BOINC server: real-boinc/run"]
fn a_quorum_job_reports_the_honest_result_when_one_host_lies() {
    let real = real();
    let client = real.client.as_ref().expect("needs the client's GUI RPC: BOINC_REAL_CLIENT_RPC and BOINC_REAL_CLIENT_PASSWD");
    let (client2, client2_dir) = client2(&real);
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[blah]\nproject_url = \"{}\"\nauthenticator_file = \"{}\"\nstatus_refresh_secs = 1\nrunner_app = \"runner_q2\"\n",
        real.url,
        real.auth_file.display()
    );
    let mut g = daemon(&real, dir.path(), &config);
    // It writes its result, then waits (at most 15 s) for a `go` that only
    // the liar's slot gets, once its result is rewritten; `go` is gone
    // before the wrapper zips the slot.
    let marker = format!("quorum-{}", real.tag);
    let script = format!(
        "#!/bin/sh\necho \"honest result of {marker}\" >result.txt\necho \"stdout of $1\"\n\
         i=0\nwhile [ ! -e go ] && [ $i -lt 30 ]; do sleep 0.5; i=$((i+1)); done\nrm -f go\n"
    );
    let iwd = dir.path().join("quorum");
    std::fs::create_dir_all(&iwd).unwrap();
    std::fs::write(iwd.join("job.sh"), &script).unwrap();
    let job_name = format!("rbci_quorum_{}", real.tag);
    let ad = job_ad(
        &iwd,
        &job_name,
        &[
            ("Arguments", Value::Str(marker.clone())),
            ("TransferOutput", Value::Str("result.txt".into())),
            ("Out", Value::Str("job.out".into())),
            ("Err", Value::Str("job.err".into())),
        ],
    );
    let started = Instant::now();
    let second = WorkRequests::set(&client2, true);
    let r = blah(&mut g, BlahCommand::JobSubmit { ad });
    assert_eq!(r[..2], ["0", "No error"], "{r:?}");
    let id = r[2].clone();

    // The two results go to the two clients (one per host); the second
    // lies. It asks for work only until it has this job: it takes any job
    // the project has meanwhile.
    let until = Instant::now() + JOB_WAIT;
    let mut asking = true;
    let slot = loop {
        if asking && client2.tasks().iter().any(|t| t.wu_name.contains(&job_name)) {
            second.restore();
            asking = false;
        }
        if let Some(s) = slot_with(&client2_dir, "result.txt", &marker) {
            break s;
        }
        assert!(Instant::now() < until, "the second client never ran the job");
        client.nudge();
        client2.nudge();
        std::thread::sleep(Duration::from_millis(500));
    };
    second.restore();
    let tmp = slot.join(".result.txt.lie");
    std::fs::write(&tmp, "forged by the second host\n").unwrap();
    std::fs::rename(&tmp, slot.join("result.txt")).unwrap();
    std::fs::write(slot.join("go"), "").unwrap();
    eprintln!("quorum: the second client lies ({}) after {:?}", slot.display(), started.elapsed());

    // A third host for the third result BOINC asks for.
    let third = TempClient::start(&real, &client.passwd);
    let mut last = Instant::now() - NUDGE_EVERY;
    let (st, ad) = loop {
        let r = blah(&mut g, BlahCommand::JobStatus { job_id: id.clone() });
        assert_eq!(r[0], "0", "BLAH_JOB_STATUS {id}: {r:?}");
        let st: i64 = r[2].parse().unwrap();
        if st >= 3 {
            break (st, ClassAd::parse(&r[3]).unwrap());
        }
        assert!(Instant::now() < until + JOB_WAIT, "the quorum job not done in {:?}: {r:?}", 2 * JOB_WAIT);
        if last.elapsed() >= NUDGE_EVERY {
            for c in [client, &client2, &third.client] {
                c.nudge();
            }
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    eprintln!("quorum: completed after {:?}", started.elapsed());
    assert_eq!(st, 4, "completed: {ad}");
    assert_eq!(ad.get_int("ExitCode"), Some(0), "{ad}");
    assert_eq!(std::fs::read_to_string(iwd.join("result.txt")).unwrap(), format!("honest result of {marker}\n"), "the agreed output");
    assert_eq!(std::fs::read_to_string(iwd.join("job.out")).unwrap(), format!("stdout of {marker}\n"));
    drop(third);
}
