//! The README's first command: `boinc_gahp demo` drives a batch through
//! the real daemon and the in-process simulated project.

#[test]
fn the_demo_runs_a_batch_through_even_with_a_broken_user_config() {
    let out = tempfile::tempdir().unwrap();
    // A user config the daemon would refuse (a zero timeout, an unknown
    // key), both where the daemon looks by default and where
    // $BOINC_GAHP_CONFIG points: the demo must not read it.
    let home = tempfile::tempdir().unwrap();
    let broken = home.path().join(".config/boinc-gahp/config.toml");
    std::fs::create_dir_all(broken.parent().unwrap()).unwrap();
    std::fs::write(&broken, "rpc_timeout_secs = 0\nno_such_key = 1\n").unwrap();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_boinc_gahp"))
        .env("HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "the daemon itself refuses that config");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("rpc_timeout_secs"), "{}", String::from_utf8_lossy(&refused.stderr));

    let run = std::process::Command::new(env!("CARGO_BIN_EXE_boinc_gahp"))
        .env("HOME", home.path())
        .env("BOINC_GAHP_CONFIG", &broken)
        .args(["demo", "--jobs", "3", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("3 of 3 jobs done with the right output"), "{stdout}");
    assert!(stdout.contains("progress:"), "plain progress lines when not on a terminal: {stdout}");
    for i in 0..3 {
        let text = std::fs::read_to_string(out.path().join(format!("results/out_{i}.txt"))).unwrap();
        assert_eq!(text, format!("HELLO FROM JOB {i} OF THE BOINC-GAHP DEMO\n"));
    }
}
