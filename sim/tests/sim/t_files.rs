//! job_file.php: query_files, upload_files, associations and their fatal
//! duplicates, the 20-files-per-call limit.

use crate::common::*;

const INPUT: &[u8] = b"hello boinc 091015\n";

pub async fn query_and_upload() {
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    let b = sim.create_batch("files", 0.0).await;
    assert_eq!(b, 1);
    let q = capture_request("query_files.txt").replace("<batch_id>10<", "<batch_id>1<");
    let (_, body) = sim.post("job_file.php", &q).await;
    assert_eq!(body, capture_body("query_files.txt"));
    let u = capture_request("upload_files.txt").replace("<batch_id>10<", "<batch_id>1<");
    let (_, body) = sim.post_files("job_file.php", &u, &[("file_0", INPUT)]).await;
    assert_eq!(body, capture_body("upload_files.txt"));
    assert_eq!(std::fs::read(sim.h.dir().join("download/1c9478264b7baff41c8f2103d1c1a1bc.txt")).unwrap(), INPUT);
    // Without batch_id: no association, absent index reported.
    let (_, body) = sim.post("job_file.php", &capture_request("query_files_present_no_batch.txt")).await;
    assert_eq!(body, capture_body("query_files_present_no_batch.txt"));
    // Uploading a name the server already knows: PHP dies on the insert.
    let (status, body) = sim.post_files("job_file.php", &capture_request("upload_files_already_present.txt"), &[("file_0", INPUT)]).await;
    assert_eq!(status, 200);
    assert_eq!(body, capture_body("upload_files_already_present.txt"));
    // Different bytes under that name.
    let (_, body) = sim
        .post_files("job_file.php", &capture_request("upload_files_immutability_violation.txt"), &[("file_0", b"hello boinc 09101\n")])
        .await;
    assert_eq!(body, capture_body("upload_files_immutability_violation.txt"));
    // A later delete_time: updated, and the script reports its own success
    // as a failure.
    let (_, body) = sim
        .post(
            "job_file.php",
            &format!("<query_files><authenticator>{CAP_AUTH}</authenticator><delete_time>2000000000</delete_time><phys_name>1c9478264b7baff41c8f2103d1c1a1bc.txt</phys_name></query_files>"),
        )
        .await;
    assert!(body.contains("<error_msg>job_file->update() failed: </error_msg>"), "{body}");
    let st = sim.state().await;
    let f = &st["files"][0];
    assert_eq!(f["name"], "1c9478264b7baff41c8f2103d1c1a1bc.txt");
    assert_eq!(f["size"], 19);
    assert_eq!(f["batches"], serde_json::json!([1]));
    assert_eq!(f["delete_time"], 2000000000.0);
    // A missing file's stale record is dropped and the file reported absent.
    std::fs::remove_file(sim.h.dir().join("download/1c9478264b7baff41c8f2103d1c1a1bc.txt")).unwrap();
    let (_, body) = sim.post("job_file.php", &capture_request("query_files_present_no_batch.txt")).await;
    assert!(body.contains("<absent_files>\n<file>0</file>\n<file>1</file>\n</absent_files>"), "{body}");
    assert!(sim.state().await["files"].as_array().unwrap().is_empty());
    // Zero files: 0 = 0.
    let (_, body) = sim.post("job_file.php", &format!("<upload_files><authenticator>{CAP_AUTH}</authenticator></upload_files>")).await;
    assert!(body.contains("<success/>"), "{body}");
    sim.stop().await;
}

pub async fn duplicate_association_is_fatal() {
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    let b = sim.create_batch("assoc", 0.0).await;
    sim.stage(b, &[INPUT]).await;
    // Associated at upload; a repeated query_files with that batch dies.
    let q = capture_request("query_files_after_upload.txt").replace("<batch_id>10<", &format!("<batch_id>{b}<"));
    let (status, body) = sim.post("job_file.php", &q).await;
    assert_eq!(status, 200);
    assert_eq!(body, capture_body("query_files_after_upload.txt").replace("'7-10'", &format!("'1-{b}'")));
    // The same name twice in one request: the second association dies.
    let c = sim.create_batch("assoc2", 0.0).await;
    let (_, body) = sim
        .post(
            "job_file.php",
            &format!("<query_files><authenticator>{CAP_AUTH}</authenticator><batch_id>{c}</batch_id><phys_name>1c9478264b7baff41c8f2103d1c1a1bc.txt</phys_name><phys_name>1c9478264b7baff41c8f2103d1c1a1bc.txt</phys_name></query_files>"),
        )
        .await;
    assert!(body.contains(&format!("Duplicate entry '1-{c}' for key 'job_file_id'")), "{body}");
    assert!(!body.contains("<absent_files>"), "{body}");
    // The first association of that request stays.
    let st = sim.state().await;
    assert_eq!(st["files"][0]["batches"], serde_json::json!([b, c]));
    sim.stop().await;
}

pub async fn upload_limit_of_20_files() {
    let sim = TestSim::start(|o| o.config.hosts.clear()).await;
    let b = sim.create_batch("many", 0.0).await;
    let datas: Vec<Vec<u8>> = (0..21).map(|i| format!("file {i}\n").into_bytes()).collect();
    let fields: Vec<String> = (0..21).map(|i| format!("file_{i}")).collect();
    let upload = |n: usize| {
        let mut u = format!("<upload_files>\n<authenticator>{}</authenticator>\n<batch_id>{b}</batch_id>\n", sim.auth);
        for d in &datas[..n] {
            u.push_str(&format!("<phys_name>{}</phys_name>\n", phys_name(d)));
        }
        u.push_str("</upload_files>\n");
        let files: Vec<(&str, &[u8])> = (0..n).map(|i| (fields[i].as_str(), datas[i].as_slice())).collect();
        (u, files)
    };
    // 21 parts: PHP keeps 20, the counts disagree, nothing is stored.
    let (u, files) = upload(21);
    let (_, body) = sim.post_files("job_file.php", &u, &files).await;
    assert!(body.contains("<error_msg># of uploaded files (20) doesn't agree with request (21)</error_msg>"), "{body}");
    assert!(sim.state().await["files"].as_array().unwrap().is_empty());
    // 20 are fine.
    let (u, files) = upload(20);
    let (_, body) = sim.post_files("job_file.php", &u, &files).await;
    assert!(body.contains("<success/>"), "{body}");
    assert_eq!(sim.state().await["files"].as_array().unwrap().len(), 20);
    sim.stop().await;

    // Without the limit, 21 go through.
    let sim = TestSim::start(|o| {
        o.config.hosts.clear();
        o.config.quirks.max_file_uploads = 0;
    })
    .await;
    let b = sim.create_batch("many", 0.0).await;
    let mut u = format!("<upload_files>\n<authenticator>{}</authenticator>\n<batch_id>{b}</batch_id>\n", sim.auth);
    for d in &datas {
        u.push_str(&format!("<phys_name>{}</phys_name>\n", phys_name(d)));
    }
    u.push_str("</upload_files>\n");
    let files: Vec<(&str, &[u8])> = (0..21).map(|i| (fields[i].as_str(), datas[i].as_slice())).collect();
    let (_, body) = sim.post_files("job_file.php", &u, &files).await;
    assert!(body.contains("<success/>"), "{body}");
    sim.stop().await;
}
