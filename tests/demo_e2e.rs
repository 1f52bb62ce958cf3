//! The README's first command: `boinc_gahp demo` drives a batch through
//! the real daemon and the in-process simulated project.

#[test]
fn the_demo_runs_a_batch_through() {
    let out = tempfile::tempdir().unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_boinc_gahp"))
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
