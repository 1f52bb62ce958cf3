//! Reply bytes of submit_rpc_handler.php against the recorded real replies,
//! check order of permissions, both POST encodings, batch/job naming rules,
//! fault wiring and the introspection endpoints.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

const INPUT: &[u8] = b"hello boinc 091015\n";

/// Replays a capture's request against the sim and compares the body.
async fn replay_exact(sim: &TestSim, name: &str) {
    let script = if std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../captures/real-boinc").join(name))
        .unwrap()
        .starts_with("### POST http://127.0.0.1/boinctest/job_file.php")
    {
        "job_file.php"
    } else {
        "submit_rpc_handler.php"
    };
    let (status, body) = sim.post(script, &capture_request(name)).await;
    assert_eq!(status, 200, "{name}");
    assert_eq!(body, capture_body(name), "reply to {name} differs from the real server's");
}

pub async fn error_replies_match_captures() {
    let sim = TestSim::start(|o| o.config = capture_config()).await;
    for name in [
        "ping.txt",
        "ping_empty_element_quirk.txt",
        "bad_command.txt",
        "get_templates_bad_app.txt",
        "get_templates_bad_auth.txt",
        "get_templates_no_submit_access.txt",
        "create_batch_no_submit_access.txt",
        "query_batches_no_authenticator.txt",
        "query_batches_no_file_access.txt",
        "query_batch2_no_such.txt",
        "query_batch_no_such.txt",
        "retire_batch_no_such.txt",
        "set_expire_time_no_such.txt",
        "query_completed_job_no_such.txt",
        "abort_jobs_no_such.txt",
        "submit_batch_not_owner_or_bad_batch.txt",
        "submit_batch_wrong_nfiles.txt",
        "query_files_bad_filename.txt",
    ] {
        replay_exact(&sim, name).await;
    }
    // One file part for two names.
    let (_, body) = sim.post_files("job_file.php", &capture_request("upload_files_count_mismatch.txt"), &[("file_0", INPUT)]).await;
    assert_eq!(body, capture_body("upload_files_count_mismatch.txt"));
    // The unparsable request, minus the PHP warnings a real server adds.
    let (_, body) = sim.post("submit_rpc_handler.php", capture_request("unparseable_request.txt").trim_end()).await;
    assert_eq!(body, strip_php_noise(&capture_body("unparseable_request.txt")));
    sim.stop().await;
}

pub async fn unparsable_requests() {
    let sim = TestSim::start(|_| {}).await;
    let decl = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n";
    // A GET has no `request` field.
    let (status, _, body) = sim.get("submit_rpc_handler.php").await;
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        format!("{decl}<error>\n    <error_num>-1</error_num>\n    <error_msg>can't parse request message: </error_msg>\n</error>\n")
    );
    // The request is echoed HTML-escaped, apostrophes included.
    let body = sim.rpc("<a>it's & <b>").await;
    assert!(body.contains("can't parse request message: &lt;a&gt;it&#039;s &amp; &lt;b&gt;</error_msg>"), "{body}");
    // An empty root is refused (as the real server refused <ping/>), a
    // root with whitespace is not.
    assert!(sim.rpc("<ping></ping>").await.contains("can't parse request message: &lt;ping&gt;&lt;/ping&gt;"));
    assert!(sim.rpc("<ping> </ping>").await.contains("<success>1</success>"));
    // job_file.php adds <file> and <line>, and has its own unknown-command text.
    let (_, body) = sim.post("job_file.php", "nope").await;
    assert!(
        body.starts_with(&format!(
            "{decl}<error>\n    <error_num>-1</error_num>\n    <error_msg>can't parse request message: nope</error_msg>\n    <file>"
        )),
        "{body}"
    );
    assert!(body.contains("</file>\n    <line>") && body.ends_with("</line>\n</error>\n"), "{body}");
    let (_, body) = sim.post("job_file.php", "<frob> </frob>").await;
    assert_eq!(body, format!("{decl}<error>\n    <error_num>-1</error_num>\n    <error_msg>no such action</error_msg>\n</error>\n"));
    sim.stop().await;

    // With the quirks off, <ping/> is a ping and ' stays as it is.
    let sim = TestSim::start(|o| {
        o.config.quirks.reject_empty_root = false;
        o.config.quirks.escape_apostrophe = false;
    })
    .await;
    assert!(sim.rpc("<ping/>").await.contains("<success>1</success>"));
    assert!(sim.rpc("<a>it's").await.contains("can't parse request message: &lt;a&gt;it's</error_msg>"));
    sim.stop().await;
}

pub async fn templates_match_capture() {
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
    })
    .await;
    replay_exact(&sim, "get_templates.txt").await;
    // By job name: the app's templates.
    let s = TestSim { auth: CAP_AUTH.into(), ..sim };
    let id = s.create_batch("cap_batch_091015", 0.0).await;
    let names = s.stage(id, &[INPUT]).await;
    assert_eq!(names[0], "1c9478264b7baff41c8f2103d1c1a1bc.txt");
    let body = s.submit(id, "uppercase", &[("cap_job_091015_0".into(), String::new(), names)]).await;
    assert!(body.contains("<batch_id>"), "{body}");
    replay_exact(&s, "done_get_templates_by_job_name.txt").await;
    let body = s
        .rpc(&format!("<get_templates>\n<authenticator>{CAP_AUTH}</authenticator>\n<job_name>no'job</job_name>\n</get_templates>\n"))
        .await;
    assert!(body.contains("<error_msg>job not found: no&#039;job</error_msg>"), "{body}");
    s.stop().await;
}

pub async fn urlencoded_requests() {
    let sim = TestSim::start(|o| o.config = capture_config()).await;
    let (status, body) = sim.post_form("submit_rpc_handler.php", "<ping> </ping>").await;
    assert_eq!(status, 200);
    assert_eq!(body, capture_body("ping.txt"));
    let (_, body) = sim.post_form("submit_rpc_handler.php", &capture_request("query_batch2_no_such.txt")).await;
    assert_eq!(body, capture_body("query_batch2_no_such.txt"));
    let (_, body) = sim
        .post_form(
            "submit_rpc_handler.php",
            &format!("<create_batch><authenticator>{}</authenticator><batch_name>f&amp;b</batch_name><app_name>uppercase</app_name></create_batch>", sim.auth),
        )
        .await;
    assert!(body.contains("<batch_id>1</batch_id>"), "{body}");
    let (_, body) = sim
        .post_form(
            "job_file.php",
            &format!("<query_files><authenticator>{}</authenticator><phys_name>x.txt</phys_name></query_files>", sim.auth),
        )
        .await;
    assert!(body.contains("<absent_files>\n<file>0</file>\n</absent_files>"), "{body}");
    let st = sim.state().await;
    assert_eq!(st["batches"][0]["name"], "f&b");
    sim.stop().await;
}

pub async fn permissions() {
    let sim = TestSim::start(|o| o.config.hosts[0].count = 1).await;
    let wc_only = sim.add_user(json!({ "name": "wc", "apps": ["wordcount"] })).await;
    let other = sim.add_user(json!({ "name": "other", "submit_all": true })).await;
    let none = sim.add_user(json!({ "name": "none", "no_submit": true })).await;
    let create = |auth: &str, app: &str| {
        format!("<create_batch><authenticator>{auth}</authenticator><batch_name>p</batch_name><app_name>{app}</app_name></create_batch>")
    };
    assert!(sim.rpc(&create(&wc_only, "uppercase")).await.contains("<error_msg>no submit access</error_msg>"));
    assert!(sim.rpc(&create(&wc_only, "wordcount")).await.contains("<batch_id>"));
    assert!(sim.rpc(&create(&none, "wordcount")).await.contains("<error_msg>no submit access</error_msg>"));
    // The app is looked up before the authenticator.
    assert!(sim.rpc(&create("bogus", "nosuchapp")).await.contains("<error_msg>app not found: nosuchapp</error_msg>"));
    assert!(sim.rpc(&create("bogus", "uppercase")).await.contains("<error_msg>bad authenticator</error_msg>"));
    assert!(sim.rpc(&create("0", "uppercase")).await.contains("<error_msg>no authenticator</error_msg>"));
    let (_, body) = sim.post("job_file.php", &format!("<query_files><authenticator>{none}</authenticator></query_files>")).await;
    assert!(body.contains("<error_msg>no file access</error_msg>"), "{body}");

    // Someone else's batch and job.
    let id = sim.submit_simple("mine", "uppercase", &[("mine_0", "", b"abc\n")]).await;
    sim.wait_final("mine", Duration::from_secs(20)).await;
    let q2 = format!(
        "<query_batch2><authenticator>{other}</authenticator><min_mod_time>0</min_mod_time><batch_name>mine</batch_name></query_batch2>"
    );
    assert!(sim.rpc(&q2).await.contains("<error_msg>not owner of mine</error_msg>"));
    for (rpc, msg) in [
        (format!("<abort_jobs><authenticator>{other}</authenticator><job_name>mine_0</job_name></abort_jobs>"), "not owner of batch"),
        (format!("<query_completed_job><authenticator>{other}</authenticator><job_name>mine_0</job_name></query_completed_job>"), "not owner"),
        (format!("<retire_batch><authenticator>{other}</authenticator><batch_name>mine</batch_name></retire_batch>"), "not owner of batch"),
        (format!("<set_expire_time><authenticator>{other}</authenticator><batch_id>{id}</batch_id><expire_time>1</expire_time></set_expire_time>"), "not owner of batch"),
        (format!("<query_batch><authenticator>{other}</authenticator><batch_id>{id}</batch_id></query_batch>"), "not owner of batch"),
        (format!("<abort_batch><authenticator>{other}</authenticator><batch_id>{id}</batch_id></abort_batch>"), "not owner"),
        (format!("<query_job><authenticator>{other}</authenticator><job_id>1</job_id></query_job>"), "not owner"),
        (format!("<retire_batch><authenticator>{other}</authenticator></retire_batch>"), "batch not specified"),
        (format!("<submit_batch><authenticator>{other}</authenticator><batch><batch_id>{id}</batch_id><app_name>uppercase</app_name></batch></submit_batch>"), "not owner of batch"),
    ] {
        let body = sim.rpc(&rpc).await;
        assert!(body.contains(&format!("<error_msg>{msg}</error_msg>")), "{rpc}: {body}");
    }
    // Resubmitting to a batch no longer in init state.
    let body = sim
        .rpc(&format!("<submit_batch><authenticator>{}</authenticator><batch><batch_id>{id}</batch_id><app_name>uppercase</app_name></batch></submit_batch>", sim.auth))
        .await;
    assert!(body.contains("<error_msg>batch not in init state</error_msg>"), "{body}");
    // get_output.php checks the batch owner's raw authenticator.
    let (_, _, body) = sim.get(&format!("get_output.php?cmd=workunit_file&auth_str={other}&wu_name=mine_0&file_num=0")).await;
    assert_eq!(body, b"ERROR: bad authenticator");
    sim.stop().await;
}

/// The captured expire times, moved 1e8 s later (this machine's clock may
/// be past them, and the sim would expire the batches at once).
fn future(s: impl Into<String>) -> String {
    s.into().replace("1795255815.55", "1895255815.55").replace("1795263015.55", "1895263015.55")
}

pub async fn batch_lifecycle_replies() {
    // No hosts, and no transitioner pass during the test (on a busy machine
    // one could run between submit and query_job): jobs stay UNSENT with no
    // instance, as in the captures.
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
        o.config.tick_ms = 3_600_000;
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    let body = sim.rpc(&future(capture_request("create_batch.txt"))).await;
    assert_eq!(body, capture_body("create_batch.txt").replace("<batch_id>10<", "<batch_id>1<"));
    let names = sim.stage(1, &[INPUT]).await;
    assert_eq!(names[0], "1c9478264b7baff41c8f2103d1c1a1bc.txt");
    let body = sim.rpc(&capture_request("submit_batch.txt").replace("<batch_id>10<", "<batch_id>1<")).await;
    assert_eq!(body, capture_body("submit_batch.txt").replace("<batch_id>10<", "<batch_id>1<"));

    let body = sim.rpc(&capture_request("query_batch2.txt")).await;
    let t = between(&body, "<server_time>", "</server_time>").to_string();
    assert!(t.parse::<f64>().unwrap() > 1.7e9);
    assert_eq!(body, capture_body("query_batch2.txt").replace("1795252215.6335", &t));

    let st = sim.state().await;
    let create_time = st["batches"][0]["create_time"].as_i64().unwrap().to_string();
    let job_id = job(&st, "cap_job_091015_0")["id"].as_i64().unwrap().to_string();
    let fix = |s: String| {
        s.replace("<id>10</id>", "<id>1</id>")
            .replace("<create_time>1795252215<", &format!("<create_time>{create_time}<"))
            .replace("<id>8</id>", &format!("<id>{job_id}</id>"))
    };
    let body = sim.rpc(&capture_request("query_batch.txt").replace("<batch_id>10<", "<batch_id>1<")).await;
    assert_eq!(body, fix(future(strip_php_noise(&capture_body("query_batch.txt")))));
    let body = sim.rpc(&capture_request("query_batch_by_name.txt")).await;
    assert_eq!(body, fix(future(strip_php_noise(&capture_body("query_batch_by_name.txt")))));
    let body = sim.rpc(&capture_request("query_job.txt").replace("<job_id>8<", &format!("<job_id>{job_id}<"))).await;
    assert_eq!(body, capture_body("query_job.txt"));
    let body = sim.rpc(&future(capture_request("set_expire_time.txt"))).await;
    assert_eq!(body, capture_body("set_expire_time.txt"));

    // Abort, then retire, the second batch.
    let body = sim.rpc(&future(capture_request("create_batch_2.txt"))).await;
    assert!(body.contains("<batch_id>2</batch_id>"), "{body}");
    sim.stage(2, &[INPUT]).await;
    let body = sim.rpc(&capture_request("submit_batch_2.txt").replace("<batch_id>11<", "<batch_id>2<")).await;
    assert!(body.contains("<batch_id>2</batch_id>"), "{body}");
    replay_exact(&sim, "abort_jobs.txt").await;
    let body = sim.rpc(&capture_request("query_batch2_after_abort.txt")).await;
    let t = between(&body, "<server_time>", "</server_time>").to_string();
    assert_eq!(body, capture_body("query_batch2_after_abort.txt").replace("1795252215.6818", &t));
    replay_exact(&sim, "query_completed_job_aborted.txt").await;
    let body = sim.rpc(&capture_request("retire_batch.txt")).await;
    assert_eq!(body, strip_php_noise(&capture_body("retire_batch.txt")));
    let body = sim.rpc(&capture_request("query_batches_get_cpu_time.txt")).await;
    assert!(!body.contains("cap_abort_091015"), "retired batches are not listed: {body}");
    let expected = format!(
        "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<query_batches>\n    <batch>\n\n        <id>1</id>\n        <create_time>{create_time}</create_time>\n        <expire_time>1895263015.553</expire_time>\n        <est_completion_time>0</est_completion_time>\n        <njobs>1</njobs>\n        <fraction_done>0</fraction_done>\n        <nerror_jobs>0</nerror_jobs>\n        <state>1</state>\n        <completion_time>0</completion_time>\n        <credit_estimate>0</credit_estimate>\n        <credit_canonical>0</credit_canonical>\n        <name>cap_batch_091015</name>\n        <app_name>uppercase</app_name>\n        <total_cpu_time>0</total_cpu_time>\n   </batch>\n</query_batches>\n"
    );
    assert_eq!(body, expected);
    // Retired batches still answer query_batch2.
    assert!(sim.query_batch2("cap_abort_091015", 0.0).await.contains("<status>ERROR</status>"));

    // estimate_batch: template fpops over the project's speed.
    let body = sim.rpc(&capture_request("estimate_batch.txt")).await;
    assert_eq!(body, capture_body("estimate_batch.txt").replace("72291.644688767", "10"));
    sim.stop().await;
}

pub async fn duplicate_batch_names_resolve_to_oldest() {
    let sim = TestSim::start(|o| o.config.hosts.clear()).await;
    let a = sim.create_batch("dup", 0.0).await;
    let b = sim.create_batch("dup", 0.0).await;
    assert!(b > a);
    let names = sim.stage(b, &[b"x\n"]).await;
    sim.submit(b, "uppercase", &[("dup_job".into(), String::new(), names)]).await;
    // By name: the oldest, empty batch.
    let body = sim.query_batch2("dup", 0.0).await;
    assert!(body.contains("<batch_size>0</batch_size>") && !body.contains("dup_job"), "{body}");
    let body =
        sim.rpc(&format!("<query_batch><authenticator>{}</authenticator><batch_name>dup</batch_name></query_batch>", sim.auth)).await;
    assert!(body.contains(&format!("<id>{a}</id>")), "{body}");
    // Retire by name retires the oldest.
    sim.rpc(&format!("<retire_batch><authenticator>{}</authenticator><batch_name>dup</batch_name></retire_batch>", sim.auth)).await;
    let st = sim.state().await;
    assert_eq!(st["batches"][0]["state"], 4);
    assert_eq!(st["batches"][1]["state"], 1);
    // A name that SQL escaping changes is never found by name.
    sim.create_batch("it's", 0.0).await;
    let body = sim.query_batch2("it's", 0.0).await;
    assert!(body.contains("<error_msg>no batch named it\\'s</error_msg>"), "{body}");
    sim.stop().await;
}

pub async fn job_names_are_unique() {
    let sim = TestSim::start(|o| o.config.hosts.clear()).await;
    let a = sim.create_batch("a", 0.0).await;
    let n = sim.stage(a, &[b"1\n"]).await;
    let body = sim.submit(a, "uppercase", &[("j1".into(), String::new(), n.clone())]).await;
    assert!(body.contains("<batch_id>"), "{body}");
    // Same name in a later batch: create_work fails, no job is created, the
    // batch stays behind in init state with its job count.
    let b = sim.create_batch("b", 0.0).await;
    let body = sim.submit(b, "uppercase", &[("j2".into(), String::new(), n.clone()), ("j1".into(), String::new(), n.clone())]).await;
    assert!(
        body.contains(
            "<error_msg>create_work failed: wu.insert_batch() failed: -1\nMySQL error: Duplicate entry 'j1' for key 'name'\n</error_msg>"
        ),
        "{body}"
    );
    let st = sim.state().await;
    assert_eq!(st["jobs"].as_array().unwrap().len(), 1);
    let bb = &st["batches"][1];
    assert_eq!((bb["state"].as_i64(), bb["njobs"].as_i64()), (Some(0), Some(2)));
    // The same name twice in one request.
    let body = sim.submit(b, "uppercase", &[("x".into(), String::new(), n.clone()), ("x".into(), String::new(), n.clone())]).await;
    assert!(body.contains("Duplicate entry 'x' for key 'name'"), "{body}");
    // A local_staged file the server does not have.
    let body = sim.submit(b, "uppercase", &[("y".into(), String::new(), vec!["0123.txt".into()])]).await;
    assert!(body.contains("<error_msg>create_work failed: md5_file: can't open "), "{body}");
    assert!(body.contains("0123.txt\nprocess_input_template: md5_file fopen() failed\ncreate_work() failed: -108\n</error_msg>"), "{body}");
    assert_eq!(sim.state().await["jobs"].as_array().unwrap().len(), 1);
    // Listed by query_batches until it expires.
    let body = sim.rpc(&format!("<query_batches><authenticator>{}</authenticator></query_batches>", sim.auth)).await;
    assert!(body.contains("<name>b</name>"), "{body}");
    // Inline inputs and a new batch made by submit_batch itself.
    let body = sim
        .rpc(&format!("<submit_batch><authenticator>{}</authenticator><batch><batch_name>inl</batch_name><app_name>uppercase</app_name><job><input_file><mode>inline</mode><source>hi</source></input_file></job></batch></submit_batch>", sim.auth))
        .await;
    assert!(body.contains("<batch_id>3</batch_id>"), "{body}");
    let st = sim.state_of(3).await;
    assert_eq!(st["batches"][0]["name"], "inl");
    assert_eq!(st["batches"][0]["expire_time"], 0.0);
    assert!(st["jobs"][0]["name"].as_str().unwrap().starts_with("uppercase_"));
    assert_eq!(st["jobs"][0]["input_files"][0], "jf_49f68a5c8493ec2c0bf489821c21fc3b");
    sim.stop().await;
}

/// The PHP wraps a command line in `"` for `create_work --stdin`: a `"`
/// inside ends it, and the words after it are read as input files (the
/// failure a real server gave for `alpha "two words" gamma`). A raw `'`
/// breaks create_work's unescaped SQL insert, with MariaDB's message as the
/// real server gave it; backslashes are dropped; character references are
/// stored untouched.
pub async fn command_line_through_create_work() {
    let sim = TestSim::start(|o| o.config.hosts.clear()).await;
    let a = sim.create_batch("a", 0.0).await;
    let n = sim.stage(a, &[b"1\n"]).await;
    let body = sim.submit(a, "uppercase", &[("j1".into(), "alpha \"two words\" gamma".into(), n.clone())]).await;
    assert!(body.contains("<error_msg>create_work failed: md5_file: can't open "), "{body}");
    assert!(body.contains("/two\nprocess_input_template: md5_file fopen() failed\ncreate_work() failed: -108\n"), "{body}");
    assert_eq!(sim.state().await["jobs"].as_array().unwrap().len(), 0);

    // The real server's answer to the same raw quote (another app and file).
    let capture =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../captures/real-boinc/submit_batch_raw_single_quote.txt")).unwrap();
    let syntax = "You have an error in your SQL syntax; check the manual that corresponds to your MariaDB server version \
                  for the right syntax to use near 'two words' gamma\n</command_line>\n<file_ref>\n    <file_name>";
    let near_end = |phys: &str| format!("{}...' at line 1\n", &phys[..18]);
    assert!(capture
        .contains(&format!("<error_msg>create_work failed: Database error: {syntax}{}", near_end("dcc3c50bd4bb54c30983a7384eddb793"))));
    assert!(
        capture.contains(&format!("wu.insert_batch() failed: 1\nMySQL error: {syntax}{}", near_end("dcc3c50bd4bb54c30983a7384eddb793")))
    );
    let body = sim.submit(a, "uppercase", &[("j2".into(), "alpha 'two words' gamma".into(), n.clone())]).await;
    assert!(body.contains(&format!("<error_msg>create_work failed: Database error: {syntax}{}", near_end(&n[0]))), "{body}");
    assert!(body.contains(&format!("wu.insert_batch() failed: 1\nMySQL error: {syntax}{}", near_end(&n[0]))), "{body}");
    assert_eq!(sim.state().await["jobs"].as_array().unwrap().len(), 0, "no job made");

    let body = sim.submit(a, "uppercase", &[("j3".into(), "back\\slash &amp;#39;two words&amp;#39; &amp;#92;".into(), n.clone())]).await;
    assert!(body.contains("<batch_id>"), "{body}");
    assert_eq!(sim.state().await["jobs"][0]["command_line"], "backslash &#39;two words&#39; &#92;");
    sim.stop().await;
}

pub async fn faults_and_introspection() {
    let mut plan = boinc_sim::faults::FaultPlan::default();
    plan.rules.insert("get_output.php:*".into(), boinc_sim::faults::FaultRule { http503: 1.0, ..Default::default() });
    let sim = TestSim::start(move |o| {
        o.config.hosts.clear();
        o.faults = plan;
    })
    .await;
    let (status, _, _) = sim.get("get_output.php?cmd=workunit_file").await;
    assert_eq!(status, 503);

    // A run-time plan: the first create_batch gets a 500 and is not acted on.
    let plan = json!({
        "seed": 7,
        "script": [{ "endpoint": "submit_rpc_handler.php:create_batch", "nth": 1, "kind": "http500" }]
    });
    let mut resp = sim.client.put(format!("{}__sim/faults", sim.url)).send_json(&plan).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.body().await);
    let req = format!(
        "<create_batch><authenticator>{}</authenticator><batch_name>f</batch_name><app_name>uppercase</app_name></create_batch>",
        sim.auth
    );
    let (status, _) = sim.post("submit_rpc_handler.php", &req).await;
    assert_eq!(status, 500);
    assert!(sim.state().await["batches"].as_array().unwrap().is_empty());
    assert!(sim.rpc(&req).await.contains("<batch_id>1</batch_id>"));
    let st = sim.state().await;
    assert_eq!(st["rpc_counts"]["submit_rpc_handler.php:create_batch"], 2);
    assert_eq!(st["rpc_counts"]["get_output.php:workunit_file"], 1);
    assert_eq!(st["faults_injected"]["submit_rpc_handler.php:create_batch http500"], 1);
    let mut resp = sim.client.get(format!("{}__sim/faults", sim.url)).send().await.unwrap();
    let got: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(got["seed"], 7);
    assert_eq!(sim.h.faults().plan().seed, 7);
    // A bad plan is refused.
    let resp =
        sim.client.post(format!("{}__sim/faults", sim.url)).send_json(&json!({ "rules": { "*": { "http500": 2.0 } } })).await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);

    // Clock and users.
    let t0 = sim.h.now();
    let mut resp = sim.client.post(format!("{}__sim/clock", sim.url)).send_json(&json!({ "advance": 3600 })).await.unwrap();
    let v: serde_json::Value = resp.json().await.unwrap();
    assert!(v["now"].as_f64().unwrap() >= t0 + 3600.0);
    let resp = sim.client.post(format!("{}__sim/users", sim.url)).send_json(&json!({ "name": "x", "apps": ["nosuchapp"] })).await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let auth = sim.add_user(json!({ "name": "y", "authenticator": "abc", "submit_all": true })).await;
    assert_eq!(auth, "abc");
    assert!(sim
        .rpc("<query_batches><authenticator>abc</authenticator></query_batches>")
        .await
        .ends_with("<query_batches>\n</query_batches>\n"));
    sim.stop().await;
}
