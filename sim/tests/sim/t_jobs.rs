//! Jobs on the simulated hosts: real outputs, replication and canonical
//! instances, deadlines, error limits, `min_mod_time`.

use std::time::Duration;

use boinc_sim::config::{CompletedJobMode, HostSpec};

use crate::common::*;

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

pub async fn uppercase_batch_done_and_downloadable() {
    let sim = TestSim::start(|_| {}).await;
    let id = sim
        .submit_simple(
            "up",
            "uppercase",
            &[("up_0", "", b"hello boinc\n"), ("up_1", "it&amp;#39;s", b"second input\n"), ("up_2", "", b"third\n")],
        )
        .await;
    let body = sim.wait_final("up", Duration::from_secs(20)).await;
    assert_eq!(body.matches("<status>DONE</status>").count(), 3, "{body}");

    // query_completed_job: the canonical instance, stderr escaped in CDATA.
    let body = sim
        .rpc(&format!(
            "<query_completed_job>\n<authenticator>{}</authenticator>\n<job_name>up_1</job_name>\n</query_completed_job>\n",
            sim.auth
        ))
        .await;
    let st = sim.state_of(id).await;
    let j = job(&st, "up_1");
    let canonical = j["canonical_resultid"].as_i64().unwrap();
    assert!(canonical > 0);
    assert!(body.starts_with(&format!(
        "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<query_completed_job>\n<completed_job>\n   <error_mask>0</error_mask>\n   <canonical_resultid>{canonical}</canonical_resultid>\n   <exit_status>0</exit_status>\n   <elapsed_time>"
    )), "{body}");
    assert!(body.contains("   <stderr_out><![CDATA[\n\n&lt;core_client_version&gt;"), "{body}");
    assert!(body.contains("&#039;it&#039;s&#039;") || body.contains("it&#039;s"), "apostrophes escaped: {body}");
    assert!(body.contains("called boinc_finish(0)"), "{body}");
    assert!(body.ends_with("\n]]&gt;\n   ]]></stderr_out>\n</completed_job>\n        </query_completed_job>\n    "), "{body}");

    // The output, with the download headers of a real server.
    let (status, headers, data) =
        sim.get(&format!("get_output.php?cmd=workunit_file&auth_str={}&wu_name=up%5F0&file_num=0", sim.auth)).await;
    assert_eq!(status, 200);
    assert_eq!(data, b"HELLO BOINC\n");
    let phys =
        j["instances"].as_array().unwrap().iter().find(|x| x["id"] == canonical).unwrap()["output_files"][0].as_str().unwrap().to_string();
    assert!(phys.starts_with("up_1_0_r") && phys.ends_with("_0"), "{phys}");
    for (k, v) in [
        ("Content-Description", "File Transfer"),
        ("Content-Type", "application/octet-stream"),
        ("Content-Transfer-Encoding", "binary"),
        ("Expires", "0"),
        ("Cache-Control", "must-revalidate, post-check=0, pre-check=0"),
        ("Pragma", "public"),
        ("Content-Length", "12"),
    ] {
        assert_eq!(header(&headers, k), Some(v), "{k}");
    }
    assert!(header(&headers, "Content-Disposition").unwrap().starts_with("attachment; filename=up_0_0_r"));
    // Errors: plain text, HTTP 200, no Content-Disposition.
    for (q, expect) in [
        (format!("cmd=workunit_file&auth_str={}&wu_name=nosuch&file_num=0", sim.auth), "ERROR: no workunit nosuch".to_string()),
        ("cmd=workunit_file&auth_str=bad&wu_name=up_0&file_num=0".to_string(), "ERROR: bad authenticator".to_string()),
        (format!("cmd=workunit_file&auth_str={}&wu_name=%3Cx%3E&file_num=0", sim.auth), "ERROR: no workunit &lt;x&gt;".to_string()),
    ] {
        let (status, headers, body) = sim.get(&format!("get_output.php?{q}")).await;
        assert_eq!((status, String::from_utf8(body).unwrap()), (200, expect));
        assert!(header(&headers, "Content-Disposition").is_none());
        assert_eq!(header(&headers, "Content-Type"), Some("text/html; charset=UTF-8"));
    }
    let (_, _, body) = sim.get(&format!("get_output.php?cmd=workunit_file&auth_str={}&wu_name=up_0&file_num=5", sim.auth)).await;
    assert!(String::from_utf8(body).unwrap().starts_with("ERROR: no such file: "));
    let (status, headers, _) = sim.get(&format!("get_output.php?cmd=workunit_file&auth_str={}&wu_name=up_0", sim.auth)).await;
    assert_eq!((status, header(&headers, "Location")), (302, Some("missing_arg_file_num.html")));
    let (status, _, body) = sim.get("get_output.php?cmd=workunit_file&file_num=0").await;
    assert_eq!(status, 200);
    assert!(String::from_utf8(body).unwrap().contains("missing or bad parameter: wu_name"));
    let (_, _, body) = sim.get("get_output.php?cmd=frob").await;
    assert_eq!(body, b"bad command\n");
    // result_file, with the hashed authenticator.
    let inst = format!("{}{}", sim.auth, "up_0_0");
    let hash = md5_hex(inst.as_bytes());
    let (status, _, body) = sim.get(&format!("get_output.php?cmd=result_file&result_name=up_0_0&file_num=0&auth_str={hash}")).await;
    assert_eq!((status, body.as_slice()), (200, b"HELLO BOINC\n".as_slice()));
    // workunit_files: a zip of the canonical outputs.
    let wu_id = job(&st, "up_2")["id"].as_i64().unwrap();
    let hash = md5_hex(format!("{}{wu_id}", sim.auth).as_bytes());
    let (status, headers, body) = sim.get(&format!("get_output.php?cmd=workunit_files&wu_id={wu_id}&auth_str={hash}")).await;
    assert_eq!(status, 200);
    assert!(header(&headers, "Content-Disposition").unwrap().contains("boinc_wu_up_2_"));
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(body)).unwrap();
    let mut f = z.by_index(0).unwrap();
    let mut s = String::new();
    std::io::Read::read_to_string(&mut f, &mut s).unwrap();
    assert_eq!(s, "THIRD\n");
    drop(f);

    // query_job, query_batch, query_batches.
    let job_id = job(&st, "up_0")["id"].as_i64().unwrap();
    let body = sim.rpc(&format!("<query_job><authenticator>{}</authenticator><job_id>{job_id}</job_id></query_job>", sim.auth)).await;
    assert!(body.contains("        <name>up_0_0</name>\n"), "{body}");
    assert!(body.contains("        <state>Completed and validated</state>\n        <outfile>\n            <size>12</size>\n        </outfile>\n</instance>\n"), "{body}");
    let body = sim
        .rpc(&format!("<query_batch><authenticator>{}</authenticator><batch_id>{id}</batch_id><get_job_details>1</get_job_details><get_cpu_time>1</get_cpu_time></query_batch>", sim.auth))
        .await;
    assert!(
        body.contains("        <fraction_done>1</fraction_done>\n        <nerror_jobs>0</nerror_jobs>\n        <state>2</state>\n"),
        "{body}"
    );
    assert_eq!(body.matches("            <status>done</status>\n").count(), 3, "{body}");
    assert!(body.contains("<total_cpu_time>"), "{body}");
    let body = sim.rpc(&format!("<query_batches><authenticator>{}</authenticator></query_batches>", sim.auth)).await;
    assert!(body.contains("        <state>2</state>\n") && !body.contains("<credit_canonical>0</credit_canonical>"), "{body}");
    sim.stop().await;
}

pub async fn completed_job_without_canonical_modes() {
    for mode in [CompletedJobMode::Intended, CompletedJobMode::PhpLt81] {
        let sim = TestSim::start(|o| o.config.quirks.query_completed_job = mode).await;
        sim.submit_simple("f", "uppercase", &[("f_0", "--fail 7", b"x\n")]).await;
        let body = sim.wait_final("f", Duration::from_secs(20)).await;
        assert!(body.contains("<status>ERROR</status>"), "{body}");
        let body = sim
            .rpc(&format!("<query_completed_job><authenticator>{}</authenticator><job_name>f_0</job_name></query_completed_job>", sim.auth))
            .await;
        match mode {
            CompletedJobMode::Intended => {
                let st = sim.state().await;
                let last = job(&st, "f_0")["instances"].as_array().unwrap().last().unwrap()["id"].as_i64().unwrap();
                assert!(
                    body.contains(&format!(
                        "   <error_mask>2</error_mask>\n   <error_resultid>{last}</error_resultid>\n   <exit_status>7</exit_status>\n"
                    )),
                    "{body}"
                );
                assert!(body.contains("process exited with code 7"), "{body}");
            }
            _ => assert!(
                body.ends_with("<completed_job>\n   <error_mask>2</error_mask>\n</completed_job>\n        </query_completed_job>\n    "),
                "{body}"
            ),
        }
        sim.stop().await;
    }
}

pub async fn replication_picks_canonical() {
    let sim = TestSim::start(|o| {
        o.config.apps = vec![app("uppercase", |a| {
            a.min_quorum = 2;
            a.target_nresults = 3;
        })];
    })
    .await;
    let id = sim.submit_simple("rep", "uppercase", &[("rep_0", "", b"quorum\n")]).await;
    sim.wait_final("rep", Duration::from_secs(20)).await;
    // The third instance may still be out; wait for it too.
    let st = wait_for("all instances over", Duration::from_secs(20), || async {
        let st = sim.state_of(id).await;
        let over = job(&st, "rep_0")["instances"].as_array().unwrap().iter().all(|x| x["server_state"] == 5);
        over.then_some(st)
    })
    .await;
    let j = job(&st, "rep_0");
    let xs = j["instances"].as_array().unwrap();
    assert_eq!(xs.len(), 3);
    let hosts: std::collections::HashSet<&str> = xs.iter().map(|x| x["host"].as_str().unwrap()).collect();
    assert_eq!(hosts.len(), 3, "one instance per host");
    assert!(xs.iter().all(|x| x["outcome"] == 1 && x["validate_state"] == 1), "{xs:?}");
    assert!(xs.iter().any(|x| x["id"] == j["canonical_resultid"]));
    assert_eq!(j["status"], "DONE");
    sim.stop().await;
}

pub async fn deadline_timeout_and_reissue() {
    // Host order decides dispatch order: "lossy" (never reports), "slow"
    // (a straggler far past any deadline), then "good".
    let sim = TestSim::start(|o| {
        o.config.time_scale = 50.0;
        o.config.hosts = vec![
            HostSpec { name: "lossy".into(), count: 1, lost_rate: 1.0, ..Default::default() },
            HostSpec { name: "slow".into(), count: 1, straggler_rate: 1.0, straggler_factor: 1e6, ..Default::default() },
            HostSpec { name: "good".into(), count: 1, ..Default::default() },
        ];
        o.config.apps = vec![app("uppercase", |a| a.delay_bound = 20.0)];
    })
    .await;
    let id = sim.submit_simple("dl", "uppercase", &[("dl_0", "", b"late\n"), ("dl_1", "", b"later\n")]).await;
    let body = sim.wait_final("dl", Duration::from_secs(20)).await;
    assert_eq!(body.matches("<status>DONE</status>").count(), 2, "{body}");
    let st = sim.state_of(id).await;
    let summary = |name: &str| -> Vec<(String, i64)> {
        job(&st, name)["instances"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x["host"].as_str().unwrap().to_string(), x["outcome"].as_i64().unwrap()))
            .collect()
    };
    let s = |h: &str, o: i64| (h.to_string(), o);
    // dl_0: lost, then done elsewhere (never twice on one host).
    assert_eq!(summary("dl_0"), [s("lossy_1", 4), s("good_1", 1)]);
    // dl_1: the straggler times out, the lossy host loses the reissue, then done.
    assert_eq!(summary("dl_1"), [s("slow_1", 4), s("lossy_1", 4), s("good_1", 1)]);
    let xs = job(&st, "dl_0")["instances"].as_array().unwrap().clone();
    assert_eq!(xs[0]["state"], "Timed out - no response");
    let deadline = xs[0]["report_deadline"].as_f64().unwrap() - xs[0]["sent_time"].as_f64().unwrap();
    assert!((deadline - 20.0).abs() < 1e-3, "{deadline}");
    assert!(xs[1]["sent_time"].as_f64().unwrap() >= xs[0]["report_deadline"].as_f64().unwrap());
    sim.stop().await;
}

pub async fn too_many_errors_ends_in_error() {
    let sim = TestSim::start(|_| {}).await;
    let id = sim.submit_simple("err", "uppercase", &[("err_0", "--fail 3", b"x\n"), ("err_1", "", b"y\n")]).await;
    let body = sim.wait_final("err", Duration::from_secs(30)).await;
    assert!(body.contains("<job_name>err_0</job_name>\n        <status>ERROR</status>"), "{body}");
    assert!(body.contains("<job_name>err_1</job_name>\n        <status>DONE</status>"), "{body}");
    let st = sim.state_of(id).await;
    let j = job(&st, "err_0");
    assert_eq!(j["error_mask"], 2);
    let xs = j["instances"].as_array().unwrap();
    // max_error_results = 3: the 4th error ends it.
    assert_eq!(xs.len(), 4);
    assert!(xs.iter().all(|x| x["outcome"] == 3 && x["exit_status"] == 3 && x["state"] == "Error while computing"));
    let body = sim
        .rpc(&format!(
            "<query_batch><authenticator>{}</authenticator><batch_id>{id}</batch_id><get_job_details>1</get_job_details></query_batch>",
            sim.auth
        ))
        .await;
    assert!(body.contains("   <error>too_many_error_results</error>\n            <exit_status>3</exit_status>\n"), "{body}");
    assert!(body.contains("        <nerror_jobs>1</nerror_jobs>\n        <state>2</state>\n"), "{body}");
    sim.stop().await;

    // Hosts that fail every instance themselves.
    let sim = TestSim::start(|o| o.config.hosts[0].error_rate = 1.0).await;
    let id = sim.submit_simple("hf", "uppercase", &[("hf_0", "", b"x\n")]).await;
    let body = sim.wait_final("hf", Duration::from_secs(20)).await;
    assert!(body.contains("<status>ERROR</status>"), "{body}");
    let st = sim.state_of(id).await;
    let xs = job(&st, "hf_0")["instances"].as_array().unwrap().clone();
    assert_eq!(xs.len(), 4);
    assert!(xs.iter().all(|x| x["outcome"] == 3 && x["exit_status"] == -1), "{xs:?}");
    sim.stop().await;
}

pub async fn min_mod_time_semantics() {
    let sim = TestSim::start(|o| o.config.hosts.clear()).await;
    let id = sim.submit_simple("mm", "uppercase", &[("mm_0", "", b"a\n"), ("mm_1", "", b"b\n")]).await;
    let body = sim.query_batch2("mm", 0.0).await;
    assert!(body.contains("<batch_size>2</batch_size>"), "{body}");
    let t0: f64 = between(&body, "<server_time>", "</server_time>").parse().unwrap();
    // Nothing changed since: nothing reported.
    sim.h.advance_clock(2.0);
    let body = sim.query_batch2("mm", t0).await;
    assert!(body.contains("<batch_size>0</batch_size>") && !body.contains("<job>"), "{body}");
    // A change two seconds later is reported, alone.
    sim.rpc(&format!("<abort_jobs><authenticator>{}</authenticator><job_name>mm_1</job_name></abort_jobs>", sim.auth)).await;
    let body = sim.query_batch2("mm", t0).await;
    assert!(body.contains("   <batch_size>1</batch_size>\n    <job>\n        <job_name>mm_1</job_name>\n        <status>ERROR</status>\n    </job>\n</query_batch2>\n"), "{body}");
    // Strictly greater than min_mod_time, whole seconds.
    let st = sim.state_of(id).await;
    let m = job(&st, "mm_1")["mod_time"].as_f64().unwrap();
    assert!(sim.query_batch2("mm", m).await.contains("<batch_size>0</batch_size>"));
    assert!(sim.query_batch2("mm", m - 0.5).await.contains("<batch_size>1</batch_size>"));
    // Aborting again changes nothing: no bump.
    sim.h.advance_clock(2.0);
    sim.rpc(&format!("<abort_jobs><authenticator>{}</authenticator><job_name>mm_1</job_name></abort_jobs>", sim.auth)).await;
    assert!(sim.query_batch2("mm", m).await.contains("<batch_size>0</batch_size>"));
    sim.stop().await;

    // Without the first-dispatch bump, IN_PROGRESS never shows in partial
    // queries; DONE does.
    let sim = TestSim::start(|o| {
        o.config.quirks.first_dispatch_bumps_mod_time = false;
        o.config.time_scale = 2.0;
        o.config.hosts[0].count = 1;
        o.config.hosts[0].flops = 5e8;
    })
    .await;
    sim.submit_simple("nb", "uppercase", &[("nb_0", "", b"a\n")]).await;
    let t0: f64 = between(&sim.query_batch2("nb", 0.0).await, "<server_time>", "</server_time>").parse().unwrap();
    sim.h.advance_clock(2.0);
    let body = wait_for("IN_PROGRESS", Duration::from_secs(10), || async {
        let b = sim.query_batch2("nb", 0.0).await;
        b.contains("<status>IN_PROGRESS</status>").then_some(b)
    })
    .await;
    assert!(body.contains("IN_PROGRESS"));
    assert!(sim.query_batch2("nb", t0).await.contains("<batch_size>0</batch_size>"));
    let _ = sim.wait_final("nb", Duration::from_secs(30)).await;
    assert!(sim.query_batch2("nb", t0).await.contains("<status>DONE</status>"));
    sim.stop().await;
}

/// `get_output.php?cmd=batch_files` as the captured server answers it: one
/// zip of every canonical output of the batch, entries named by physical
/// name (`<job>_<n>_r<random>_<i>`), `ERROR: …` texts with HTTP 200 for a
/// bad hash or an unknown batch, an empty file when nothing is finished;
/// and `__sim/batch_zip` spoils it on demand.
pub async fn batch_files_zip_like_the_capture() {
    let sim = TestSim::start(|_| {}).await;
    let id = sim.submit_simple("bz", "uppercase", &[("bz_0", "", b"zero\n"), ("bz_1", "", b"one\n")]).await;
    // Nothing finished in a batch: the real script sends an empty file.
    let empty = sim.create_batch("bz_empty", 0.0).await;
    let empty_hash = md5_hex(format!("{}{empty}", sim.auth).as_bytes());
    let (status, headers, body) = sim.get(&format!("get_output.php?cmd=batch_files&batch_id={empty}&auth_str={empty_hash}")).await;
    assert_eq!((status, body.len()), (200, 0));
    assert!(header(&headers, "Content-Disposition").is_some());
    let hash = md5_hex(format!("{}{id}", sim.auth).as_bytes());
    sim.wait_final("bz", Duration::from_secs(20)).await;

    let (status, headers, body) = sim.get(&format!("get_output.php?cmd=batch_files&batch_id={id}&auth_str={hash}")).await;
    assert_eq!(status, 200);
    let disposition = header(&headers, "Content-Disposition").unwrap();
    let file = disposition.strip_prefix("attachment; filename=boinc_batch_").unwrap();
    assert!(file.len() == "nuMeVX.zip".len() && file.ends_with(".zip"), "{disposition}");
    assert_eq!(header(&headers, "Content-Type"), Some("application/octet-stream"));
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(body)).unwrap();
    let mut got = Vec::new();
    for i in 0..z.len() {
        let mut f = z.by_index(i).unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut f, &mut s).unwrap();
        got.push((f.name().to_string(), s));
    }
    assert_eq!(got.len(), 2, "{got:?}");
    for (n, (name, text)) in got.iter().enumerate() {
        let rest = name.strip_prefix(&format!("bz_{n}_0_r")).unwrap_or_else(|| panic!("{name}"));
        let (random, index) = rest.split_once('_').unwrap();
        assert!(random.bytes().all(|b| b.is_ascii_digit()) && index == "0", "{name}");
        assert_eq!(text, if n == 0 { "ZERO\n" } else { "ONE\n" });
    }

    // Errors, as the real script words them.
    for (q, expect) in [
        (format!("batch_id={id}&auth_str=bad"), "ERROR: bad auth str".to_string()),
        (format!("batch_id={id}&auth_str={}", sim.auth), "ERROR: bad auth str".to_string()),
        (format!("batch_id=99999&auth_str={hash}"), "ERROR: no batch 99999".to_string()),
    ] {
        let (status, headers, body) = sim.get(&format!("get_output.php?cmd=batch_files&{q}")).await;
        assert_eq!((status, String::from_utf8(body).unwrap()), (200, expect));
        assert!(header(&headers, "Content-Disposition").is_none());
    }
    let (status, headers, _) = sim.get(&format!("get_output.php?cmd=batch_files&auth_str={hash}")).await;
    assert_eq!((status, header(&headers, "Location")), (302, Some("missing_arg_batch_name.html")));

    // Spoiled on demand.
    let spoiled = |spoil: &'static str| {
        let (sim, hash) = (&sim, &hash);
        async move {
            let url = format!("{}__sim/batch_zip", sim.url);
            let r = sim.client.post(url).send_json(&serde_json::json!({ "spoil": spoil })).await.unwrap();
            assert_eq!(r.status(), 200);
            sim.get(&format!("get_output.php?cmd=batch_files&batch_id={id}&auth_str={hash}")).await.2
        }
    };
    let names = |body: Vec<u8>| {
        let z = zip::ZipArchive::new(std::io::Cursor::new(body)).unwrap();
        z.file_names().map(String::from).collect::<Vec<_>>()
    };
    assert!(names(spoiled("escape").await).contains(&"../escaped".to_string()));
    assert_eq!(names(spoiled("drop_first").await).len(), 1);
    assert!(zip::ZipArchive::new(std::io::Cursor::new(spoiled("garbage").await)).is_err());
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(spoiled("corrupt").await)).unwrap();
    let mut s = String::new();
    assert!(std::io::Read::read_to_string(&mut z.by_index(0).unwrap(), &mut s).is_err(), "a CRC error: {s:?}");
    sim.stop().await;
}
