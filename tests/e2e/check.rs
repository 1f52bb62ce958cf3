//! `boinc_gahp check` end to end: the real binary against simulated
//! projects on loopback (good, wrong authenticator, down, unknown app, no
//! submit rights, its own PHP limits), a broken config file, a pool, and
//! `--json` read back.

use crate::common::*;
use std::path::Path;
use std::process::Command;

/// Runs `boinc_gahp [global] check [args]` with a home of its own (no
/// user config is read); returns (exit code, stdout).
fn check(dir: &Path, global: &[&str], args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_boinc_gahp"))
        .args(["--state-dir", dir.join("state").to_str().unwrap()])
        .args(global)
        .arg("check")
        .args(args)
        .env("HOME", dir)
        .env_remove("BOINC_GAHP_CONFIG")
        .env_remove("XDG_STATE_HOME")
        .output()
        .expect("boinc_gahp runs");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    (out.status.code().unwrap_or(-1), stdout)
}

fn key_file(dir: &Path, name: &str, key: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{key}\n")).unwrap();
    path.to_str().unwrap().to_string()
}

fn probe_files_on(sim: &Sim) -> Vec<String> {
    let mut found = Vec::new();
    for e in gahp_testkit::files_under(sim.dir.path()) {
        let name = e.file_name().unwrap().to_string_lossy().to_string();
        if name.contains("check_probe") {
            found.push(name);
        }
    }
    found
}

#[test]
fn a_good_project_passes_with_its_apps_and_php_limits_and_nothing_stored() {
    let dir = tempfile::tempdir().unwrap();
    // Limits of its own, so the numbers below can only come from probing.
    let sim = Sim::start_config(dir.path(), "[quirks]\nupload_max_filesize = 1000000\npost_max_size = 3000000\nmax_file_uploads = 7\n");
    let key = key_file(dir.path(), "key", &sim.auth);
    let (code, out) = check(dir.path(), &[], &["--url", &sim.url, "--authenticator-file", &key, "--app", "uppercase"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("ok   project: answers: {}", sim.url)), "{out}");
    assert!(out.contains("BOINC server boinc-sim"), "{out}");
    assert!(out.contains("ok   authenticator: accepted"), "{out}");
    assert!(out.contains("ok   apps: uppercase: inputs [in], outputs [out]"), "{out}");
    assert!(out.contains("ok   apps: concat: inputs [a, b], outputs [out]"), "{out}");
    assert!(out.contains("ok   submit rights: for uppercase, wordcount, zipper, concat, stepper, runner"), "{out}");
    assert!(out.contains("files per upload request: 7 (PHP max_file_uploads)"), "{out}");
    assert!(!out.contains(&sim.auth), "the authenticator is never printed");
    // The daemon's defaults (8M, 20 files) are over this project's limits.
    assert!(out.contains("warn uploads: the daemon's upload budget (8388608 bytes) is over what the project takes"), "{out}");
    assert!(out.starts_with("ok   config: no config file"), "{out}");
    assert!(out.contains("warn uploads: the daemon sends up to 20 files per upload, the project takes 7"), "{out}");
    assert!(out.trim_end().ends_with("2 warning(s), 0 failed"), "{out}");
    let (_, json) = check(dir.path(), &[], &["--url", &sim.url, "--authenticator-file", &key, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(doc["ok"], true, "{doc}");
    let file = &doc["uploads"]["largest_file"];
    let (taken, refused) = (file["taken"].as_u64().unwrap(), file["refused"].as_u64().unwrap());
    assert!(taken <= 1_000_000 && 1_000_000 < refused && refused - taken <= 1024, "{file}");
    let body = &doc["uploads"]["largest_request"];
    let (taken, refused) = (body["taken"].as_u64().unwrap(), body["refused"].as_u64().unwrap());
    assert!(taken <= 3_000_000 && 3_000_000 < refused && refused - taken <= 1100, "{body}");
    assert_eq!(doc["uploads"]["files_per_request"], 7);
    assert_eq!(doc["project"]["answers"], true);
    assert_eq!(doc["apps"][0]["name"], "uppercase");
    assert_eq!(doc["apps"][0]["outputs"], serde_json::json!(["out"]));
    assert!(!json.contains(&sim.auth));
    assert_eq!(probe_files_on(&sim), Vec::<String>::new(), "the probe stores nothing on the project");
    assert!(sim.calls("job_file.php:upload_files") > 0, "the limits were probed");
}

#[test]
fn a_wrong_authenticator_fails_and_is_not_printed() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start();
    let key = key_file(dir.path(), "key", "0123456789abcdef0123456789abcdef");
    let (code, out) = check(dir.path(), &[], &["--url", &sim.url, "--authenticator-file", &key]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL authenticator: refused: the project knows no account with the key in"), "{out}");
    assert!(!out.contains("0123456789abcdef0123456789abcdef"), "{out}");
    assert!(out.contains("FAILED:"), "{out}");
}

#[test]
fn a_project_that_is_down_fails() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/p/");
    let key = key_file(dir.path(), "key", "k");
    let (code, out) = check(dir.path(), &[], &["--url", &url, "--authenticator-file", &key, "--timeout", "2"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("FAIL project: does not answer: {url}")), "{out}");
}

#[test]
fn an_unknown_default_app_is_named_with_the_projects_apps() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start();
    // Beside the config file, as its relative name says.
    key_file(dir.path(), "key", &sim.auth);
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[blah]\nproject_url = \"{}\"\nauthenticator_file = \"key\"\ndefault_app = \"nosuch\"\n", sim.url))
        .unwrap();
    let (code, out) = check(dir.path(), &["--config", config.to_str().unwrap()], &["--no-upload-probe"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("read as the daemon reads it"), "{out}");
    assert!(
        out.contains(
            "FAIL apps: nosuch ([blah] default_app): the project has no such app; its apps: uppercase, wordcount, zipper, concat, stepper, runner"
        ),
        "{out}"
    );
}

#[test]
fn an_account_without_submit_rights_fails() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start();
    let (addr, path) = {
        let rest = sim.url.strip_prefix("http://").unwrap();
        let (a, p) = rest.split_once('/').unwrap();
        (a.to_string(), format!("/{p}"))
    };
    let key = "feedfacefeedfacefeedfacefeedface";
    http(
        &addr,
        "POST",
        &format!("{path}__sim/users"),
        Some(&format!("{{\"name\": \"reader\", \"authenticator\": \"{key}\", \"no_submit\": true}}")),
    );
    let file = key_file(dir.path(), "key", key);
    let (code, out) = check(dir.path(), &[], &["--url", &sim.url, "--authenticator-file", &file]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL authenticator: accepted"), "{out}");
    assert!(out.contains("no file access"), "{out}");
    assert!(out.contains("FAIL submit rights: this account may submit to none of the project's apps"), "{out}");
    assert!(out.contains("warn apps: uppercase: this account has no submit access to it"), "{out}");
}

#[test]
fn a_config_syntax_error_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "# boinc-gahp\nlog_level = \"info\"\n[blah\nproject_url = \"http://x/\"\n").unwrap();
    let (code, out) = check(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{out}");
    let line = out.lines().find(|l| l.starts_with("FAIL config:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("line 3"), "{line}");
    // A value refused after parsing: its key's line.
    std::fs::write(&config, "log_level = \"info\"\n\n[blah]\nbatch_max_jobs = 0\n").unwrap();
    let (code, out) = check(dir.path(), &["--config", config.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 4: blah.batch_max_jobs: must be at least 1"), "{out}");
}

#[test]
fn a_pool_reports_each_project_and_its_ad() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Sim::start(), Sim::start());
    let pool = pool_file(dir.path(), &[("alpha", &a), ("beta", &b)], "");
    let (code, out) = check(dir.path(), &[], &["--pool", pool.to_str().unwrap(), "--app", "uppercase", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(code, 0, "{doc}");
    let projects = doc["pool"]["projects"].as_array().unwrap();
    assert_eq!(projects.len(), 2);
    for (p, name) in projects.iter().zip(["alpha", "beta"]) {
        assert_eq!(p["name"], name);
        assert_eq!(p["answers"], true);
        assert_eq!(p["ad"]["Name"], name);
        assert_eq!(p["ad"]["Up"], true);
        assert_eq!(p["ad"]["Apps"], serde_json::json!(["uppercase"]), "{p}");
    }
}

#[test]
fn the_state_database_is_reported_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start();
    // A daemon run leaves its state database in dir/state.
    let g = gahp(dir.path());
    g.close(WAIT).unwrap();
    let db = dir.path().join("state/state.sqlite3");
    let before = std::fs::read(&db).unwrap();
    let key = key_file(dir.path(), "key", &sim.auth);
    let (code, json) = check(dir.path(), &[], &["--url", &sim.url, "--authenticator-file", &key, "--no-upload-probe", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(code, 0, "{doc}");
    let state = &doc["state"];
    assert!(state["schema_version"].as_u64().is_some_and(|v| v > 0), "{state}");
    assert_eq!(state["schema_version"], state["daemon_schema_version"], "{state}");
    let messages: Vec<&str> = doc["checks"].as_array().unwrap().iter().filter_map(|c| c["message"].as_str()).collect();
    assert!(messages.iter().any(|m| m.ends_with("is writable")), "{messages:?}");
    assert!(messages.iter().any(|m| m.starts_with("state database schema version") && m.ends_with("(this daemon's)")), "{messages:?}");
    assert_eq!(std::fs::read(&db).unwrap(), before, "check changes nothing in the state database");
}
