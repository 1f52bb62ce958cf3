//! Retirement, lease expiry and file deletion; restarts on the same
//! directory.

use std::time::Duration;

use crate::common::*;

pub async fn retire_and_expiry_delete_files() {
    let sim = TestSim::start(|_| {}).await;
    let dl = sim.h.dir().join("download");
    let fa: &[u8] = b"retire me\n";
    let shared: &[u8] = b"shared\n";
    let a = sim.create_batch("ra", 0.0).await;
    let names = sim.stage(a, &[fa, shared]).await;
    let body = sim
        .submit(
            a,
            "uppercase",
            &[("ra_0".into(), String::new(), vec![names[0].clone()]), ("ra_1".into(), String::new(), vec![names[1].clone()])],
        )
        .await;
    assert!(body.contains("<batch_id>"), "{body}");
    // A live batch holds the shared file too.
    let c = sim.create_batch("live", 0.0).await;
    sim.stage(c, &[shared]).await;
    sim.wait_final("ra", Duration::from_secs(20)).await;
    let url = format!("get_output.php?cmd=workunit_file&auth_str={}&wu_name=ra_0&file_num=0", sim.auth);
    assert_eq!(sim.get(&url).await.2, b"RETIRE ME\n");

    let body = sim
        .rpc(&format!("<retire_batch>\n<authenticator>{}</authenticator>\n<batch_name>ra</batch_name>\n</retire_batch>\n", sim.auth))
        .await;
    assert!(body.contains("<success>1</success>"), "{body}");
    let fa_path = dl.join(&names[0]);
    wait_for("input file deleted", Duration::from_secs(10), || async { (!fa_path.exists()).then_some(()) }).await;
    assert!(dl.join(&names[1]).exists(), "still needed by a live batch");
    let body = String::from_utf8(sim.get(&url).await.2).unwrap();
    assert!(body.starts_with("ERROR: no such file: "), "outputs deleted: {body}");
    let st = sim.state().await;
    let files = st["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["batches"], serde_json::json!([a, c]));
    assert_eq!(st["output_file_count"], 0);

    // Lease expiry: aborted, retired, files gone.
    let fb: &[u8] = b"expire me\n";
    let b = sim.create_batch("ex", sim.h.now() + 30.0).await;
    let nb = sim.stage(b, &[fb]).await;
    sim.submit(b, "uppercase", &[("ex_0".into(), String::new(), nb.clone())]).await;
    sim.h.advance_clock(60.0);
    let st = wait_for("batch expired", Duration::from_secs(10), || async {
        let st = sim.state_of(b).await;
        (st["batches"][0]["state"] == 4).then_some(st)
    })
    .await;
    let j = &st["jobs"][0];
    assert!(j["status"] == "DONE" || j["error_mask"] == 16, "{j}");
    let fb_path = dl.join(&nb[0]);
    wait_for("expired batch's file deleted", Duration::from_secs(10), || async { (!fb_path.exists()).then_some(()) }).await;
    // Retired batches still answer query_batch2, not query_batches.
    assert!(sim.query_batch2("ex", 0.0).await.contains("<batch_size>1</batch_size>"));
    let body = sim.rpc(&format!("<query_batches><authenticator>{}</authenticator></query_batches>", sim.auth)).await;
    assert!(body.contains("<name>live</name>") && !body.contains("<name>ex</name>") && !body.contains("<name>ra</name>"), "{body}");
    sim.stop().await;
}

pub async fn restart_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let d2 = d.clone();
    let sim = TestSim::start(move |o| o.dir = Some(d2)).await;
    let auth = sim.auth.clone();
    sim.submit_simple("keep", "uppercase", &[("keep_0", "", b"persist\n")]).await;
    sim.wait_final("keep", Duration::from_secs(20)).await;
    sim.h.advance_clock(1000.0);
    let t_before = sim.h.now();
    sim.stop().await;

    let d2 = d.clone();
    let sim = TestSim::start(move |o| o.dir = Some(d2)).await;
    assert_eq!(sim.auth, auth, "the default user survives");
    assert!(sim.h.now() >= t_before, "the sim clock does not go back");
    assert!(sim.query_batch2("keep", 0.0).await.contains("<status>DONE</status>"));
    let url = format!("get_output.php?cmd=workunit_file&auth_str={auth}&wu_name=keep_0&file_num=0");
    assert_eq!(sim.get(&url).await.2, b"PERSIST\n");
    assert_eq!(sim.create_batch("next", 0.0).await, 2);
    sim.stop().await;

    // An instance in progress at the stop: its host goes on with it.
    let slow = |o: &mut boinc_sim::SimOptions| {
        o.config.hosts[0].count = 1;
        o.config.hosts[0].flops = 1e7; // 100 sim seconds per job
    };
    let d2 = d.clone();
    let sim = TestSim::start(move |o| {
        o.dir = Some(d2);
        slow(o);
    })
    .await;
    sim.submit_simple("slow", "uppercase", &[("slow_0", "", b"resume\n")]).await;
    wait_for("dispatch", Duration::from_secs(10), || async {
        let b = sim.query_batch2("slow", 0.0).await;
        b.contains("IN_PROGRESS").then_some(())
    })
    .await;
    sim.stop().await;
    let d2 = d.clone();
    let sim = TestSim::start(move |o| {
        o.dir = Some(d2);
        slow(o);
    })
    .await;
    sim.h.advance_clock(200.0);
    let body = sim.wait_final("slow", Duration::from_secs(20)).await;
    assert!(body.contains("<status>DONE</status>"), "{body}");
    let st = sim.state().await;
    assert_eq!(job(&st, "slow_0")["instances"].as_array().unwrap().len(), 1);
    sim.stop().await;
}
