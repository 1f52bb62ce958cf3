//! job_file.php: query_files, upload_files, associations and their fatal
//! duplicates, PHP's limits (20 files per call, 2M per file, 8M per body).

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

/// Seen on the real server: a project's files are the project's, not an
/// account's. A file one submitter uploaded is present to another
/// submitter's query_files; a bad authenticator is still refused.
pub async fn query_files_answers_alike_for_every_account() {
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    let b = sim.create_batch("mine", 0.0).await;
    let names = sim.stage(b, &[INPUT]).await;
    let other = sim.add_user(serde_json::json!({ "name": "other", "submit_all": true })).await;
    let ask = |auth: &str| {
        format!(
            "<query_files>\n<authenticator>{auth}</authenticator>\n   <phys_name>{}</phys_name>\n   <phys_name>00000000000000000000000000000000.txt</phys_name>\n</query_files>\n",
            names[0]
        )
    };
    let (_, mine) = sim.post("job_file.php", &ask(CAP_AUTH)).await;
    let (_, theirs) = sim.post("job_file.php", &ask(&other)).await;
    assert!(mine.contains("<absent_files>\n<file>1</file>\n</absent_files>"), "{mine}");
    assert_eq!(theirs, mine);
    let (_, bad) = sim.post("job_file.php", &ask("deadbeef")).await;
    assert!(bad.contains("<error_msg>bad authenticator</error_msg>") && !bad.contains("<absent_files>"), "{bad}");
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

    // The recorded call of 21, byte for byte.
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    let contents: Vec<Vec<u8>> = (0..21).map(|i| captured_content("many", i, 20)).collect();
    let parts: Vec<(&str, &[u8])> = (0..21).map(|i| (fields[i].as_str(), contents[i].as_slice())).collect();
    let cap = "upload_files_max_file_uploads.txt";
    let (_, body) = sim.post_files("job_file.php", &capture_request(cap), &parts).await;
    assert_eq!(body, capture_body(cap));
    sim.stop().await;
}

/// The content the capture script gave file `i` of a set (`tag`).
fn captured_content(tag: &str, i: usize, size: usize) -> Vec<u8> {
    format!("input {i} of {tag}\n").into_bytes().into_iter().cycle().take(size).collect()
}

pub async fn upload_max_filesize_refuses_a_file_as_captured() {
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    // 3 MiB: refused before anything is stored, the part's name in the message.
    let cap = "upload_files_upload_max_filesize.txt";
    let big = captured_content("big", 0, 3 << 20);
    let (status, body) = sim.post_named_files("job_file.php", &capture_request(cap), &[("file_0", "big.txt", &big)]).await;
    assert_eq!(status, 200);
    assert_eq!(body, capture_body(cap));
    assert!(sim.state().await["files"].as_array().unwrap().is_empty());
    // With a small file before it: still nothing stored (parts are checked first).
    let small = b"small\n".to_vec();
    let req = format!(
        "<upload_files>\n<authenticator>{CAP_AUTH}</authenticator>\n<phys_name>{}</phys_name>\n<phys_name>{}</phys_name>\n</upload_files>\n",
        phys_name(&small),
        phys_name(&big)
    );
    let (_, body) = sim.post_named_files("job_file.php", &req, &[("file_0", "a.txt", &small), ("file_1", "big.txt", &big)]).await;
    assert!(body.contains("<error_msg>big.txt upload failed because: The uploaded file exceeds upload_max_filesize"), "{body}");
    assert!(sim.state().await["files"].as_array().unwrap().is_empty());
    // Exactly 2 MiB is taken (PHP refuses only what is larger).
    let edge = captured_content("edge", 0, 2 << 20);
    let req = format!(
        "<upload_files>\n<authenticator>{CAP_AUTH}</authenticator>\n<phys_name>{}</phys_name>\n</upload_files>\n",
        phys_name(&edge)
    );
    let (_, body) = sim.post_files("job_file.php", &req, &[("file_0", &edge)]).await;
    assert!(body.contains("<success/>"), "{body}");
    sim.stop().await;

    // Configured without the limit: the 3 MiB file goes in.
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
        o.config.quirks.upload_max_filesize = 0;
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    let (_, body) = sim.post_named_files("job_file.php", &capture_request(cap), &[("file_0", "big.txt", &big)]).await;
    assert!(body.contains("<success/>"), "{body}");
    sim.stop().await;
}

pub async fn post_max_size_drops_the_body_as_captured() {
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    // Five files of 1.9 MiB: each under upload_max_filesize, 9.5 MiB in all.
    let cap = "upload_files_post_max_size.txt";
    let contents: Vec<Vec<u8>> = (0..5).map(|i| captured_content("nearly2", i, 19 * (1 << 20) / 10)).collect();
    let fields: Vec<String> = (0..5).map(|i| format!("file_{i}")).collect();
    let names: Vec<String> = (0..5).map(|i| format!("in_{i}.txt")).collect();
    let parts: Vec<(&str, &str, &[u8])> = (0..5).map(|i| (fields[i].as_str(), names[i].as_str(), contents[i].as_slice())).collect();
    let (status, body) = sim.post_named_files("job_file.php", &capture_request(cap), &parts).await;
    assert_eq!(status, 200);
    assert_eq!(body, capture_body(cap));
    assert!(sim.state().await["files"].as_array().unwrap().is_empty());
    assert_eq!(sim.state().await["rpc_counts"]["job_file.php:unparsable"], 1, "the script saw no request");

    // The limit is on the whole body: post_max_size bytes pass, one more not.
    let files: Vec<Vec<u8>> = (0..5).map(|i| format!("edge file {i}\n").into_bytes()).collect();
    let mut req = format!("<upload_files>\n<authenticator>{CAP_AUTH}</authenticator>\n");
    for f in &files {
        req.push_str(&format!("<phys_name>{}</phys_name>\n", phys_name(f)));
    }
    req.push_str("</upload_files>\n");
    let body_of = |pad: usize| {
        let mut fs = files.clone();
        for f in fs.iter_mut() {
            f.resize(f.len() + pad / 5, b'.');
        }
        let last = fs[4].len() + pad % 5;
        fs[4].resize(last, b'.');
        fs
    };
    let small: Vec<(&str, &[u8])> = files.iter().enumerate().map(|(i, f)| (fields[i].as_str(), f.as_slice())).collect();
    let overhead = multipart(&req, &small).1.len();
    for (extra, accepted) in [(0, true), (1, false)] {
        let padded = body_of((8 << 20) + extra - overhead);
        let mut req = format!("<upload_files>\n<authenticator>{CAP_AUTH}</authenticator>\n");
        for f in &padded {
            req.push_str(&format!("<phys_name>{}</phys_name>\n", phys_name(f)));
        }
        req.push_str("</upload_files>\n");
        let parts: Vec<(&str, &[u8])> = padded.iter().enumerate().map(|(i, f)| (fields[i].as_str(), f.as_slice())).collect();
        assert_eq!(multipart(&req, &parts).1.len(), (8 << 20) + extra);
        let (_, body) = sim.post_files("job_file.php", &req, &parts).await;
        assert_eq!(body.contains("<success/>"), accepted, "{} bytes: {body}", (8 << 20) + extra);
    }
    sim.stop().await;

    // Configured with a larger post_max_size, the five go in one call.
    let sim = TestSim::start(|o| {
        o.config = capture_config();
        o.config.hosts.clear();
        o.config.quirks.post_max_size = 16 << 20;
    })
    .await;
    let sim = TestSim { auth: CAP_AUTH.into(), ..sim };
    let (_, body) = sim.post_named_files("job_file.php", &capture_request(cap), &parts).await;
    assert!(body.contains("<success/>"), "{body}");
    sim.stop().await;
}
