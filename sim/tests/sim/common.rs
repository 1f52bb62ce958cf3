//! Helpers: a sim with an HTTP client, multipart bodies, the recorded real
//! replies, polling.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use boinc_sim::apps::{builtin_apps, AppSpec};
use boinc_sim::config::UserSpec;
use boinc_sim::{SimConfig, SimHandle, SimOptions};
use md5::{Digest, Md5};
use serde_json::Value;

/// Authenticators of the users the captures were recorded with.
pub const CAP_AUTH: &str = "888febac2c12d6e100ca4167792fa466";
pub const CAP_NO_SUBMIT: &str = "bbe779ab54146d36fe3e854fc5bcf98c";

pub struct TestSim {
    pub h: SimHandle,
    pub url: String,
    pub auth: String,
    pub client: awc::Client,
}

/// A configuration whose `uppercase` app has the captured server's
/// templates, plus the captured users (`CAP_AUTH` with `submit_all`,
/// `CAP_NO_SUBMIT` without `user_submit`).
pub fn capture_config() -> SimConfig {
    let mut cfg = SimConfig::default();
    for a in cfg.apps.iter_mut() {
        if a.name == "uppercase" {
            a.fpops_est = 1e10;
        }
    }
    cfg.hosts[0].flops = 1e11;
    cfg.users = vec![
        UserSpec { name: "cap".into(), authenticator: Some(CAP_AUTH.into()), submit_all: true, ..Default::default() },
        UserSpec { name: "nosubmit".into(), authenticator: Some(CAP_NO_SUBMIT.into()), no_submit: true, ..Default::default() },
    ];
    cfg
}

/// The built-in app `name` with changes.
pub fn app(name: &str, f: impl FnOnce(&mut AppSpec)) -> AppSpec {
    let mut a = builtin_apps().into_iter().find(|a| a.name == name).unwrap();
    f(&mut a);
    a
}

impl TestSim {
    pub async fn start(f: impl FnOnce(&mut SimOptions)) -> TestSim {
        let mut opts = SimOptions::new_default("127.0.0.1:0".parse().unwrap());
        opts.app_exe = std::env::current_exe().unwrap();
        opts.config.tick_ms = 20;
        f(&mut opts);
        let h = boinc_sim::start(opts).await.expect("sim starts");
        let client = awc::Client::builder().timeout(Duration::from_secs(60)).disable_redirects().finish();
        TestSim { url: h.project_url.clone(), auth: h.authenticator.clone(), h, client }
    }

    pub async fn stop(self) {
        self.h.stop().await;
    }

    /// POSTs `request` as the C client does (multipart) with file parts.
    pub async fn post_files(&self, script: &str, request: &str, files: &[(&str, &[u8])]) -> (u16, String) {
        let named: Vec<(&str, &str, &[u8])> = files.iter().map(|(field, data)| (*field, "in.txt", *data)).collect();
        self.post_named_files(script, request, &named).await
    }

    /// [`TestSim::post_files`] with each part's file name: (field, file name, data).
    pub async fn post_named_files(&self, script: &str, request: &str, files: &[(&str, &str, &[u8])]) -> (u16, String) {
        let (ctype, body) = multipart_named(request, files);
        let mut resp = self
            .client
            .post(format!("{}{script}", self.url))
            .insert_header(("Content-Type", ctype))
            .send_body(body)
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let body = resp.body().limit(1 << 30).await.expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    pub async fn post(&self, script: &str, request: &str) -> (u16, String) {
        self.post_files(script, request, &[]).await
    }

    pub async fn rpc(&self, request: &str) -> String {
        let (status, body) = self.post("submit_rpc_handler.php", request).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// POSTs `request` urlencoded, as BOINC's Python binding does.
    pub async fn post_form(&self, script: &str, request: &str) -> (u16, String) {
        let body: String = form_urlencoded::Serializer::new(String::new()).append_pair("request", request).finish();
        let mut resp = self
            .client
            .post(format!("{}{script}", self.url))
            .insert_header(("Content-Type", "application/x-www-form-urlencoded"))
            .send_body(body)
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let body = resp.body().limit(1 << 30).await.expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// GET `<project_url><rest>`: status, headers, body.
    pub async fn get(&self, rest: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut resp = self.client.get(format!("{}{rest}", self.url)).send().await.expect("request");
        let headers = resp.headers().iter().map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string())).collect();
        let status = resp.status().as_u16();
        let body = resp.body().limit(1 << 30).await.expect("body");
        (status, headers, body.to_vec())
    }

    pub async fn state(&self) -> Value {
        let (status, _, body) = self.get("__sim/state").await;
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }

    pub async fn state_of(&self, batch: i64) -> Value {
        let (status, _, body) = self.get(&format!("__sim/state?batch={batch}")).await;
        assert_eq!(status, 200);
        serde_json::from_slice(&body).unwrap()
    }

    /// Adds a user through the introspection endpoint; returns its
    /// authenticator.
    pub async fn add_user(&self, json: Value) -> String {
        let mut resp = self.client.post(format!("{}__sim/users", self.url)).send_json(&json).await.unwrap();
        let v: Value = resp.json().await.unwrap();
        v["authenticator"].as_str().expect("user created").to_string()
    }

    pub async fn create_batch(&self, name: &str, expire_time: f64) -> i64 {
        let body = self
            .rpc(&format!(
                "<create_batch>\n   <authenticator>{}</authenticator>\n   <batch_name>{name}</batch_name>\n   <app_name>{}</app_name>\n   <expire_time>{expire_time:.6}</expire_time>\n</create_batch>\n",
                self.auth, "uppercase"
            ))
            .await;
        between(&body, "<batch_id>", "</batch_id>").parse().unwrap_or_else(|_| panic!("create_batch: {body}"))
    }

    /// Stages `inputs` for `batch` (query_files, then uploads of the absent
    /// ones); returns their physical names.
    pub async fn stage(&self, batch: i64, inputs: &[&[u8]]) -> Vec<String> {
        let names: Vec<String> = inputs.iter().map(|d| phys_name(d)).collect();
        let mut q = format!("<query_files>\n<authenticator>{}</authenticator>\n<batch_id>{batch}</batch_id>\n", self.auth);
        for n in &names {
            q.push_str(&format!("   <phys_name>{n}</phys_name>\n"));
        }
        q.push_str("</query_files>\n");
        let (_, body) = self.post("job_file.php", &q).await;
        assert!(body.contains("<absent_files>"), "{body}");
        let absent: Vec<usize> = body.split("<file>").skip(1).map(|s| s.split('<').next().unwrap().parse().unwrap()).collect();
        if !absent.is_empty() {
            let mut u = format!("<upload_files>\n<authenticator>{}</authenticator>\n<batch_id>{batch}</batch_id>\n", self.auth);
            let mut parts = Vec::new();
            for &i in &absent {
                u.push_str(&format!("<phys_name>{}</phys_name>\n", names[i]));
                parts.push((format!("file_{i}"), inputs[i]));
            }
            u.push_str("</upload_files>\n");
            let files: Vec<(&str, &[u8])> = parts.iter().map(|(n, d)| (n.as_str(), *d)).collect();
            let (_, body) = self.post_files("job_file.php", &u, &files).await;
            assert!(body.contains("<success/>"), "{body}");
        }
        names
    }

    /// `submit_batch` of `jobs` (name, command line, input physical names)
    /// to an existing batch, in the C client's form.
    pub async fn submit(&self, batch: i64, app: &str, jobs: &[(String, String, Vec<String>)]) -> String {
        self.rpc(&submit_xml(&self.auth, batch, app, jobs)).await
    }

    /// create_batch + stage + submit of one-input jobs; returns the batch id.
    pub async fn submit_simple(&self, batch_name: &str, app: &str, jobs: &[(&str, &str, &[u8])]) -> i64 {
        let id = self.create_batch(batch_name, 0.0).await;
        let inputs: Vec<&[u8]> = jobs.iter().map(|j| j.2).collect();
        let names = self.stage(id, &inputs).await;
        let list: Vec<(String, String, Vec<String>)> =
            jobs.iter().zip(names).map(|(j, n)| (j.0.to_string(), j.1.to_string(), vec![n])).collect();
        let body = self.submit(id, app, &list).await;
        assert!(body.contains("<batch_id>"), "{body}");
        id
    }

    /// `query_batch2` reply for one batch name.
    pub async fn query_batch2(&self, name: &str, min_mod_time: f64) -> String {
        self.rpc(&format!(
            "<query_batch2>\n<authenticator>{}</authenticator>\n<min_mod_time>{min_mod_time:.6}</min_mod_time>\n<batch_name>{name}</batch_name>\n</query_batch2>\n",
            self.auth
        ))
        .await
    }

    /// Polls `query_batch2` until every job of the batch has a final status
    /// (DONE or ERROR); returns the last reply.
    pub async fn wait_final(&self, name: &str, timeout: Duration) -> String {
        let t0 = Instant::now();
        loop {
            let body = self.query_batch2(name, 0.0).await;
            let statuses: Vec<&str> = body.split("<status>").skip(1).map(|s| s.split('<').next().unwrap()).collect();
            if !statuses.is_empty() && statuses.iter().all(|s| *s == "DONE" || *s == "ERROR") {
                return body;
            }
            assert!(t0.elapsed() < timeout, "batch {name} not final in time: {body}");
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub fn submit_xml(auth: &str, batch: i64, app: &str, jobs: &[(String, String, Vec<String>)]) -> String {
    let mut s = format!(
        "<submit_batch>\n<authenticator>{auth}</authenticator>\n<batch>\n   <batch_id>{batch}</batch_id>\n   <app_name>{app}</app_name>\n   <app_version_num>0</app_version_num>\n   <job_params>\n       <rsc_disk_bound>0.000000</rsc_disk_bound>\n       <rsc_fpops_est>0.000000</rsc_fpops_est>\n       <rsc_fpops_bound>0.000000</rsc_fpops_bound>\n       <rsc_memory_bound>0.000000</rsc_memory_bound>\n       <delay_bound>0.000000</delay_bound>\n   </job_params>\n"
    );
    for (name, cmd, inputs) in jobs {
        s.push_str(&format!("<job>\n  <name>{name}</name>\n"));
        if !cmd.is_empty() {
            s.push_str(&format!("<command_line>{cmd}</command_line>\n"));
        }
        for i in inputs {
            s.push_str(&format!("<input_file>\n<mode>local_staged</mode>\n<source>{i}</source>\n</input_file>\n"));
        }
        s.push_str("</job>\n");
    }
    s.push_str("</batch>\n</submit_batch>\n");
    s
}

/// Lowercase hex MD5.
pub fn md5_hex(data: &[u8]) -> String {
    Md5::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// The GAHP's content name: MD5 of the content + `.txt`.
pub fn phys_name(data: &[u8]) -> String {
    format!("{}.txt", md5_hex(data))
}

/// A multipart/form-data body: field `request`, then the file parts.
pub fn multipart(request: &str, files: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let named: Vec<(&str, &str, &[u8])> = files.iter().map(|(field, data)| (*field, "in.txt", *data)).collect();
    multipart_named(request, &named)
}

/// [`multipart`] with each part's file name: (field, file name, data).
pub fn multipart_named(request: &str, files: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    let b = "------------------------d74496d66958873e";
    let mut body = Vec::new();
    body.extend_from_slice(format!("--{b}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{request}\r\n").as_bytes());
    for (field, filename, data) in files {
        body.extend_from_slice(
            format!("--{b}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{b}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={b}"), body)
}

/// The text between the first `start` and the next `end`.
pub fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let i = s.find(start).map(|i| i + start.len()).unwrap_or(s.len());
    let j = s[i..].find(end).map(|j| i + j).unwrap_or(s.len());
    &s[i..j]
}

fn captures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../captures/real-boinc")
}

/// A recorded real reply body, byte for byte.
pub fn capture_body(name: &str) -> String {
    let s = std::fs::read_to_string(captures_dir().join(name)).unwrap();
    if let Some(i) = s.find("### response body (verbatim):\n") {
        let body = &s[i + "### response body (verbatim):\n".len()..];
        return body.strip_suffix("\n### (no trailing newline)\n").unwrap_or(body).to_string();
    }
    let i = s.find("\r\n\r\n").expect("raw HTTP capture");
    s[i + 4..].to_string()
}

/// The request XML a capture was recorded with.
pub fn capture_request(name: &str) -> String {
    let s = std::fs::read_to_string(captures_dir().join(name)).unwrap();
    let start = "(multipart/form-data):\n";
    let i = s.find(start).expect("request in capture") + start.len();
    let j = s[i..].find("\n### ").map(|j| i + j + 1).unwrap();
    s[i..j].to_string()
}

/// Drops the PHP "Warning"/"Deprecated" noise a real server printed.
pub fn strip_php_noise(body: &str) -> String {
    let mut out = body.to_string();
    for kind in ["Warning", "Deprecated"] {
        let pat = format!("<br />\n<b>{kind}</b>:");
        while let Some(i) = out.find(&pat) {
            let j = out[i + 6..].find("<br />\n").map(|j| i + 6 + j + 7).unwrap();
            out.replace_range(i..j, "");
        }
    }
    out
}

/// Polls `f` until it returns `Some`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t0 = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The job named `name` in a state JSON.
pub fn job<'a>(state: &'a Value, name: &str) -> &'a Value {
    state["jobs"].as_array().unwrap().iter().find(|j| j["name"] == name).unwrap_or_else(|| panic!("no job {name} in state"))
}
