//! Work-sequence support: the `stepper` app end to end (two inputs,
//! optional outputs fetched through get_output.php), jobs targeted at a
//! host or user (`target_host`/`target_user`/`target_team` as a real server
//! takes them), and hosts that stall, set in the config or at run time.

use std::time::Duration;

use boinc_sim::apps::stepper_next;
use boinc_sim::config::HostSpec;
use serde_json::{json, Value};

use crate::common::*;

/// A `submit_batch` whose jobs carry extra XML (targets) after the name.
fn submit_with(auth: &str, batch: i64, app: &str, jobs: &[(&str, &str, Vec<String>, &str)]) -> String {
    let list: Vec<(String, String, Vec<String>)> = jobs.iter().map(|j| (j.0.to_string(), j.1.to_string(), j.2.clone())).collect();
    let mut xml = submit_xml(auth, batch, app, &list);
    for (name, _, _, extra) in jobs {
        let at = format!("  <name>{name}</name>\n");
        xml = xml.replacen(&at, &format!("{at}{extra}"), 1);
    }
    xml
}

async fn fetch(sim: &TestSim, wu: &str, file_num: usize) -> String {
    let (status, _, body) =
        sim.get(&format!("get_output.php?cmd=workunit_file&auth_str={}&wu_name={wu}&file_num={file_num}", sim.auth)).await;
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

/// The instances of job `name` in a state JSON.
fn instances<'a>(st: &'a Value, name: &str) -> &'a Vec<Value> {
    job(st, name)["instances"].as_array().unwrap()
}

pub async fn stepper_jobs_end_to_end() {
    let sim = TestSim::start(|_| {}).await;
    let body =
        sim.rpc(&format!("<get_templates><authenticator>{}</authenticator><app_name>stepper</app_name></get_templates>", sim.auth)).await;
    assert_eq!(body.matches("<optional/>").count(), 2, "{body}");
    assert_eq!(body.matches("<open_name>state</open_name>").count(), 2, "{body}");

    // Step 1 from the empty state; step 2 from step 1's state, ending at 2;
    // a heartbeat from step 1's state.
    let id = sim.create_batch("st", 0.0).await;
    let extra1: &[u8] = b"first extra\n";
    let names = sim.stage(id, &[b"", extra1]).await;
    let body = sim.submit(id, "stepper", &[("st_1".into(), String::new(), names.clone())]).await;
    assert!(body.contains("<batch_id>"), "{body}");
    sim.wait_final("st", Duration::from_secs(20)).await;
    let s1 = fetch(&sim, "st_1", 0).await;
    assert_eq!(s1, stepper_next("", extra1).unwrap());
    assert!(fetch(&sim, "st_1", 1).await.starts_with("ERROR: no such file: "), "no DONE: an absent optional output");

    let id2 = sim.create_batch("st2", 0.0).await;
    let names2 = sim.stage(id2, &[s1.as_bytes(), b"second"]).await;
    let body = sim
        .submit(
            id2,
            "stepper",
            &[("st_2".into(), "--end-at 2".into(), names2.clone()), ("st_hb".into(), "--heartbeat".into(), names2.clone())],
        )
        .await;
    assert!(body.contains("<batch_id>"), "{body}");
    let body = sim.wait_final("st2", Duration::from_secs(20)).await;
    assert_eq!(body.matches("<status>DONE</status>").count(), 2, "{body}");
    let s2 = fetch(&sim, "st_2", 0).await;
    assert_eq!(s2, stepper_next(&s1, b"second").unwrap());
    assert!(s2.starts_with("counter 2 "), "{s2}");
    assert_eq!(fetch(&sim, "st_2", 1).await, s2, "DONE carries the final state");
    // The heartbeat succeeded with no state output at all.
    assert!(fetch(&sim, "st_hb", 0).await.starts_with("ERROR: no such file: "));
    assert!(fetch(&sim, "st_hb", 1).await.starts_with("ERROR: no such file: "));
    let st = sim.state_of(id2).await;
    let hb = &instances(&st, "st_hb")[0];
    assert_eq!((hb["outcome"].as_i64(), hb["exit_status"].as_i64()), (Some(1), Some(0)), "{hb}");
    assert_eq!(hb["output_files"].as_array().unwrap().len(), 2, "both outputs are named, as in the result's record");
    // query_job lists only the outputs that exist.
    let jid = job(&st, "st_2")["id"].as_i64().unwrap();
    let body = sim.rpc(&format!("<query_job><authenticator>{}</authenticator><job_id>{jid}</job_id></query_job>", sim.auth)).await;
    assert_eq!(body.matches("<outfile>").count(), 2, "{body}");
    let jid = job(&st, "st_hb")["id"].as_i64().unwrap();
    let body = sim.rpc(&format!("<query_job><authenticator>{}</authenticator><job_id>{jid}</job_id></query_job>", sim.auth)).await;
    assert_eq!(body.matches("<outfile>").count(), 0, "{body}");

    // A malformed state fails the instance (exit 1) and, after the error
    // limit, the job.
    let id3 = sim.create_batch("st3", 0.0).await;
    let names3 = sim.stage(id3, &[b"not a state", b""]).await;
    sim.submit(id3, "stepper", &[("st_bad".into(), String::new(), names3)]).await;
    let body = sim.wait_final("st3", Duration::from_secs(30)).await;
    assert!(body.contains("<status>ERROR</status>"), "{body}");
    let st = sim.state_of(id3).await;
    assert!(instances(&st, "st_bad").iter().all(|x| x["exit_status"] == 1), "{st}");
    sim.stop().await;
}

pub async fn jobs_go_only_to_their_target() {
    let sim = TestSim::start(|o| {
        o.config.hosts = vec![
            HostSpec { name: "host".into(), count: 4, ..Default::default() },
            HostSpec { name: "mine".into(), count: 2, user_id: 1, ..Default::default() },
        ];
    })
    .await;
    let hosts = sim.state().await["hosts"].clone();
    let ids: Vec<(i64, &str, i64)> = hosts
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["id"].as_i64().unwrap(), h["name"].as_str().unwrap(), h["user_id"].as_i64().unwrap()))
        .collect();
    assert_eq!(ids, [(1, "host_1", 0), (2, "host_2", 0), (3, "host_3", 0), (4, "host_4", 0), (5, "mine_1", 1), (6, "mine_2", 1)]);

    let id = sim.create_batch("tg", 0.0).await;
    let names = sim.stage(id, &[b"targeted\n"]).await;
    let mut jobs: Vec<(String, &str)> = Vec::new();
    for i in 0..6 {
        jobs.push((format!("tg_h3_{i}"), "<target_host>3</target_host>\n"));
    }
    for i in 0..3 {
        // target_user beats target_host.
        jobs.push((format!("tg_u1_{i}"), "<target_host>2</target_host>\n<target_user>1</target_user>\n"));
    }
    jobs.push(("tg_free".into(), ""));
    jobs.push(("tg_nohost".into(), "<target_host>99</target_host>\n"));
    let list: Vec<(&str, &str, Vec<String>, &str)> = jobs.iter().map(|(n, x)| (n.as_str(), "", names.clone(), *x)).collect();
    let body = sim.rpc(&submit_with(&sim.auth, id, "uppercase", &list)).await;
    assert!(body.contains("<batch_id>"), "{body}");

    let st = wait_for("targeted jobs done", Duration::from_secs(30), || async {
        let st = sim.state_of(id).await;
        let done = st["jobs"].as_array().unwrap().iter().filter(|j| j["status"] == "DONE").count();
        (done == 10).then_some(st)
    })
    .await;
    for (name, _) in &jobs {
        let xs = instances(&st, name);
        let hosts: Vec<i64> = xs.iter().map(|x| x["host_id"].as_i64().unwrap()).collect();
        if name.starts_with("tg_h3") {
            assert_eq!(hosts, [3], "{name}");
            assert_eq!(job(&st, name)["target"], json!({"type": "host", "id": 3}));
        } else if name.starts_with("tg_u1") {
            assert!(hosts.len() == 1 && (hosts[0] == 5 || hosts[0] == 6), "{name}: {hosts:?}");
            assert_eq!(job(&st, name)["target"], json!({"type": "user", "id": 1}));
        } else if name == "tg_free" {
            assert_eq!(hosts.len(), 1);
            assert!(job(&st, name)["target"].is_null());
        }
    }
    // A host id that no host has: accepted, never sent, no instance made.
    actix_rt::time::sleep(Duration::from_millis(300)).await;
    let st = sim.state_of(id).await;
    assert_eq!(job(&st, "tg_nohost")["status"], "UNSENT");
    assert!(instances(&st, "tg_nohost").is_empty());
    let body = sim.query_batch2("tg", 0.0).await;
    assert!(body.contains("<job_name>tg_nohost</job_name>\n        <status>UNSENT</status>"), "{body}");

    // target_team: create_work does not take it per job and stops there;
    // the targeted jobs of earlier lines exist, untargeted ones don't.
    let id2 = sim.create_batch("tt", 0.0).await;
    let names2 = sim.stage(id2, &[b"team\n"]).await;
    let list = [
        ("tt_free", "", names2.clone(), ""),
        ("tt_host", "", names2.clone(), "<target_host>1</target_host>\n"),
        ("tt_team", "", names2.clone(), "<target_host>1</target_host>\n<target_team>7</target_team>\n"),
        ("tt_after", "", names2.clone(), "<target_host>1</target_host>\n"),
    ];
    let body = sim.rpc(&submit_with(&sim.auth, id2, "uppercase", &list)).await;
    assert!(body.contains("<error_msg>create_work failed: create_work: bad stdin argument '--target_team'\n</error_msg>"), "{body}");
    let st = sim.state_of(id2).await;
    let made: Vec<&str> = st["jobs"].as_array().unwrap().iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert_eq!(made, ["tt_host"]);
    // A zero or non-numeric target is no target.
    let id3 = sim.create_batch("tz", 0.0).await;
    let names3 = sim.stage(id3, &[b"zero\n"]).await;
    let list = [("tz_0", "", names3.clone(), "<target_host>0</target_host>\n<target_team>x</target_team>\n")];
    let body = sim.rpc(&submit_with(&sim.auth, id3, "uppercase", &list)).await;
    assert!(body.contains("<batch_id>"), "{body}");
    assert!(job(&sim.state_of(id3).await, "tz_0")["target"].is_null());
    sim.stop().await;
}

pub async fn stalled_hosts_hold_their_work() {
    // host 1 loses every instance, host 2 straggles for ever, 3 and 4 are fine.
    let sim = TestSim::start(|o| {
        o.config.hosts = vec![
            HostSpec { name: "lost".into(), count: 1, lost_rate: 1.0, ..Default::default() },
            HostSpec { name: "slow".into(), count: 1, straggler_rate: 1.0, straggler_factor: 1e9, ..Default::default() },
            HostSpec { name: "good".into(), count: 2, ..Default::default() },
        ];
    })
    .await;
    let id = sim.create_batch("sl", 0.0).await;
    let names = sim.stage(id, &[b"", b"x"]).await;
    let list = [
        ("sl_lost", "", names.clone(), "<target_host>1</target_host>\n"),
        ("sl_slow", "", names.clone(), "<target_host>2</target_host>\n"),
        ("sl_good", "", names.clone(), "<target_host>3</target_host>\n"),
    ];
    let body = sim.rpc(&submit_with(&sim.auth, id, "stepper", &list)).await;
    assert!(body.contains("<batch_id>"), "{body}");
    let st = wait_for("the good step done", Duration::from_secs(20), || async {
        let st = sim.state_of(id).await;
        (job(&st, "sl_good")["status"] == "DONE").then_some(st)
    })
    .await;
    // Well past the good one's time, the stalled two are still in progress
    // on their hosts, and the hosts show what they run.
    actix_rt::time::sleep(Duration::from_millis(500)).await;
    let st2 = sim.state().await;
    for (name, host) in [("sl_lost", 1), ("sl_slow", 2)] {
        assert_eq!(job(&st2, name)["status"], "IN_PROGRESS", "{name}");
        let xs = instances(&st2, name);
        assert_eq!(xs.len(), 1);
        assert_eq!((xs[0]["host_id"].as_i64(), xs[0]["server_state"].as_i64()), (Some(host), Some(4)));
        let h = &st2["hosts"][host as usize - 1];
        assert_eq!(h["running"]["name"], xs[0]["name"], "{h}");
    }
    assert!(st2["hosts"][2]["running"].is_null());
    assert_eq!(instances(&st, "sl_good")[0]["host_id"], 3);

    // Relocation: abort the lost step, submit it again at a good host.
    sim.rpc(&format!("<abort_jobs><authenticator>{}</authenticator><job_name>sl_lost</job_name></abort_jobs>", sim.auth)).await;
    let id2 = sim.create_batch("sl2", 0.0).await;
    let names2 = sim.stage(id2, &[b"", b"x"]).await;
    let list = [("sl_lost#2", "", names2.clone(), "<target_host>4</target_host>\n")];
    sim.rpc(&submit_with(&sim.auth, id2, "stepper", &list)).await;
    sim.wait_final("sl2", Duration::from_secs(20)).await;
    assert_eq!(fetch(&sim, "sl_lost%232", 0).await, stepper_next("", b"x").unwrap());
    assert_eq!(instances(&sim.state_of(id2).await, "sl_lost#2")[0]["host_id"], 4);

    // At run time: host 4 starts losing its work; host 1 recovers.
    let mut resp = sim.client.post(format!("{}__sim/hosts", sim.url)).send_json(&json!({"id": 4, "lost_rate": 1.0})).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!((v["name"].as_str(), v["lost_rate"].as_f64()), (Some("good_2"), Some(1.0)));
    let mut resp =
        sim.client.post(format!("{}__sim/hosts", sim.url)).send_json(&json!({"name": "lost_1", "lost_rate": 0.0})).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let _ = resp.body().await;
    for bad in [json!({"id": 9, "lost_rate": 0.5}), json!({"id": 1, "lost_rate": 2.0}), json!({"id": 1, "bogus": 1})] {
        let resp = sim.client.post(format!("{}__sim/hosts", sim.url)).send_json(&bad).await.unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{bad}");
    }
    let id3 = sim.create_batch("sl3", 0.0).await;
    let names3 = sim.stage(id3, &[b"", b"y"]).await;
    let list = [
        ("sl3_on4", "", names3.clone(), "<target_host>4</target_host>\n"),
        ("sl3_on1", "", names3.clone(), "<target_host>1</target_host>\n"),
    ];
    sim.rpc(&submit_with(&sim.auth, id3, "stepper", &list)).await;
    wait_for("the step on the recovered host", Duration::from_secs(20), || async {
        let st = sim.state_of(id3).await;
        (job(&st, "sl3_on1")["status"] == "DONE").then_some(())
    })
    .await;
    actix_rt::time::sleep(Duration::from_millis(300)).await;
    let st = sim.state_of(id3).await;
    assert_eq!(job(&st, "sl3_on4")["status"], "IN_PROGRESS");
    assert_eq!(instances(&st, "sl3_on4")[0]["host_id"], 4);
    sim.stop().await;
}

pub async fn targets_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let d2 = d.clone();
    let sim = TestSim::start(move |o| o.dir = Some(d2)).await;
    let id = sim.create_batch("rs", 0.0).await;
    let names = sim.stage(id, &[b"", b"r"]).await;
    let list =
        [("rs_99", "", names.clone(), "<target_host>99</target_host>\n"), ("rs_2", "", names.clone(), "<target_host>2</target_host>\n")];
    sim.rpc(&submit_with(&sim.auth, id, "stepper", &list)).await;
    sim.stop().await;

    let d2 = d.clone();
    let sim = TestSim::start(move |o| o.dir = Some(d2)).await;
    let st = wait_for("the host-2 step after the restart", Duration::from_secs(20), || async {
        let st = sim.state_of(id).await;
        (job(&st, "rs_2")["status"] == "DONE").then_some(st)
    })
    .await;
    assert_eq!(instances(&st, "rs_2").iter().map(|x| x["host_id"].as_i64().unwrap()).collect::<Vec<_>>(), [2]);
    assert_eq!(job(&st, "rs_99")["target"], json!({"type": "host", "id": 99}));
    assert_eq!(job(&st, "rs_99")["status"], "UNSENT");
    assert!(instances(&st, "rs_99").is_empty());
    sim.stop().await;
}
