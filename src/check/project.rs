//! One project: does it answer (and what it says of itself), is the
//! authenticator accepted with file access and submit rights, which apps
//! it has with which inputs and outputs, and how large an upload it takes.
//! Only read-only calls, except the upload probe (`uploads.rs`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use gahp_project::rpc::{Rpc, RpcClient, RpcError};
use gahp_project::ProjectKey;
use gahp_protocol::boinc::{reply, request, Script, Templates};
use gahp_protocol::Authenticator;
use gahp_services::DaemonConfig;
use serde_json::json;

use super::{expand_home, uploads, CheckArgs, Level, Report};

/// The project the daemon would submit to, and its account key.
pub struct Target {
    pub url: String,
    pub authenticator_file: PathBuf,
    pub app: Option<String>,
    /// Where the app came from, for messages.
    pub app_source: &'static str,
}

impl Target {
    /// `--url` and `--authenticator-file`, else `[blah]`; `None` when
    /// neither names a project.
    pub fn from(config: &DaemonConfig, args: &CheckArgs) -> Result<Option<Target>, String> {
        let url = match args.url.clone().or_else(|| config.blah.project_url.clone()) {
            Some(u) => u,
            None if args.authenticator_file.is_some() => return Err("--authenticator-file needs a project: give --url too".into()),
            None => return Ok(None),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("{url}: the project URL must start with http:// or https://"));
        }
        // The scripts' names are appended to the URL as they are.
        let url = if url.ends_with('/') { url } else { format!("{url}/") };
        let authenticator_file = match (&args.authenticator_file, &config.blah.authenticator_file) {
            (Some(f), _) => expand_home(f),
            (None, Some(f)) if args.url.is_none() => f.clone(),
            _ => return Err(format!("{url}: no authenticator file: give --authenticator-file (or set [blah] authenticator_file)")),
        };
        let (app, app_source) = match (&args.app, &config.blah.default_app) {
            (Some(a), _) => (Some(a.clone()), "--app"),
            (None, Some(a)) => (Some(a.clone()), "[blah] default_app"),
            (None, None) => (None, ""),
        };
        Ok(Some(Target { url, authenticator_file, app, app_source }))
    }
}

/// The account key, as the daemon reads it.
pub fn read_authenticator(file: &std::path::Path) -> Result<Authenticator, String> {
    gahp_services::config::read_authenticator_file(file).map_err(|e| e.to_string())
}

/// An HTTP client for the project, as the daemon makes one.
pub fn client(config: &DaemonConfig, url: &str, auth: &Authenticator) -> Addr<RpcClient> {
    RpcClient::new(ProjectKey::new(url, auth.clone()), Arc::new(config.clone())).start()
}

pub async fn check(config: &DaemonConfig, target: &Target, args: &CheckArgs, timeout: Duration, report: &mut Report) {
    let url = &target.url;
    let auth = match read_authenticator(&target.authenticator_file) {
        Ok(a) => a,
        Err(e) => {
            report.add(Level::Fail, "authenticator", e);
            return;
        }
    };
    let rpc = client(config, url, &auth);
    let mut detail = json!({ "url": url });
    let answers = answers(&rpc, "project", url, timeout, report, &mut detail).await;
    report.detail("project", detail);
    if !answers {
        return;
    }
    let Some(file_access) = account(&rpc, "authenticator", &auth, &target.authenticator_file, timeout, report).await else {
        return;
    };
    apps(&rpc, &auth, target, timeout, report).await;
    if !file_access {
        return;
    }
    if args.no_upload_probe {
        report.add(Level::Ok, "uploads", "not probed (--no-upload-probe)".into());
    } else {
        uploads::check(config, &rpc, &auth, url, args.probe_max_mib << 20, timeout, report).await;
    }
}

/// ping, and what `get_project_config.php` says (name, server version).
pub async fn answers(
    rpc: &Addr<RpcClient>,
    topic: &str,
    url: &str,
    timeout: Duration,
    report: &mut Report,
    detail: &mut serde_json::Value,
) -> bool {
    let ping = rpc.idempotent(Script::SubmitRpcHandler, request::ping(), reply::parse_ping, Instant::now() + timeout).await;
    // Asked only of a server that answered (a project that does not costs
    // one timeout, not two); a BOINC error may be maintenance, which the
    // page tells.
    let config = match &ping {
        Ok(()) | Err(RpcError::Boinc { .. }) => match rpc.page("get_project_config.php", 1 << 20, Instant::now() + timeout).await {
            Ok(body) => reply::parse_project_config(&body).ok(),
            Err(_) => None,
        },
        Err(_) => None,
    };
    if let Some(c) = &config {
        detail["server_name"] = json!(c.name);
        detail["server_version"] = json!(c.server_version);
        detail["web_stopped"] = json!(c.web_stopped);
    }
    detail["answers"] = json!(ping.is_ok());
    match ping {
        Ok(()) => {
            let about = match &config {
                Some(c) if !c.server_version.is_empty() => format!(" ({}, BOINC server {})", c.name, c.server_version),
                Some(c) => format!(" ({}; it does not say its server version)", c.name),
                None => " (no get_project_config.php: its version is not known)".to_string(),
            };
            report.add(Level::Ok, topic, format!("answers: {url}{about}"));
            true
        }
        Err(e) => {
            let stopped = if config.is_some_and(|c| c.web_stopped) { " (its web site is stopped for maintenance)" } else { "" };
            report.add(Level::Fail, topic, format!("does not answer: {url}{stopped}: {e}"));
            false
        }
    }
}

/// Whether the account key is known, and whether it has file access (the
/// right to upload input files; checked with a query_files of nothing,
/// which reads and creates nothing). `None` when the key is refused.
pub async fn account(
    rpc: &Addr<RpcClient>,
    topic: &str,
    auth: &Authenticator,
    file: &std::path::Path,
    timeout: Duration,
    report: &mut Report,
) -> Option<bool> {
    let xml = request::query_files(auth, None, &[]);
    match rpc.idempotent(Script::JobFile, xml, reply::parse_query_files, Instant::now() + timeout).await {
        Ok(_) => {
            report.add(Level::Ok, topic, format!("accepted (from {}), with file access", file.display()));
            Some(true)
        }
        Err(RpcError::Boinc { msg, .. }) if msg.contains("bad authenticator") => {
            report.add(Level::Fail, topic, format!("refused: the project knows no account with the key in {}", file.display()));
            None
        }
        Err(RpcError::Boinc { msg, .. }) if msg.contains("no file access") => {
            report.add(
                Level::Fail,
                topic,
                format!(
                    "accepted (from {}), but the account may not upload input files (no file access): the project must grant it remote job submission",
                    file.display()
                ),
            );
            Some(false)
        }
        Err(e) => {
            report.add(Level::Fail, topic, format!("can't check it: {}", auth.redact_in(&e.to_string())));
            None
        }
    }
}

/// What get_templates said of one app.
enum AppState {
    Submittable(Templates),
    NoSubmitAccess,
    NotFound,
    /// Anything else (template file missing, a failed call): its text.
    Unusable(String),
}

async fn templates(rpc: &Addr<RpcClient>, auth: &Authenticator, app: &str, timeout: Duration) -> AppState {
    let xml = request::get_templates_for_app(auth, app);
    match rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_templates, Instant::now() + timeout).await {
        Ok(t) => AppState::Submittable(t),
        Err(RpcError::Boinc { msg, .. }) if msg.contains("no submit access") => AppState::NoSubmitAccess,
        Err(RpcError::Boinc { msg, .. }) if msg.starts_with("app not found") => AppState::NotFound,
        Err(e) => AppState::Unusable(auth.redact_in(&e.to_string())),
    }
}

/// The project's apps (`server_status.php?xml=1`: the API has no call
/// that lists them), each with its files if this account may submit to
/// it; and the app jobs will use.
pub async fn apps(rpc: &Addr<RpcClient>, auth: &Authenticator, target: &Target, timeout: Duration, report: &mut Report) {
    let listed = match rpc.page("server_status.php?xml=1", 16 << 20, Instant::now() + timeout).await {
        Ok(body) => reply::parse_server_status_apps(&body).map_err(|e| e.to_string()),
        Err(e) => Err(auth.redact_in(&e.to_string())),
    };
    let mut names = match &listed {
        Ok(names) => names.clone(),
        Err(e) => {
            report.add(Level::Warn, "apps", format!("can't list the project's apps (server_status.php?xml=1): {e}"));
            Vec::new()
        }
    };
    if let Some(app) = &target.app {
        if !names.contains(app) && listed.is_err() {
            names.push(app.clone());
        }
    }
    let mut detail = Vec::new();
    let mut submittable = Vec::new();
    for name in &names {
        let state = templates(rpc, auth, name, timeout).await;
        let (status, line) = match &state {
            AppState::Submittable(t) => {
                submittable.push(name.clone());
                ("submittable", format!("{name}: inputs [{}], outputs [{}]", t.inputs.join(", "), t.outputs.join(", ")))
            }
            AppState::NoSubmitAccess => ("no_submit_access", format!("{name}: this account has no submit access to it")),
            AppState::NotFound => ("not_found", format!("{name}: the project has no such app")),
            AppState::Unusable(why) => ("unusable", format!("{name}: not usable for remote submission: {why}")),
        };
        let mut entry = json!({ "name": name, "status": status });
        if let AppState::Submittable(t) = &state {
            entry["inputs"] = json!(t.inputs);
            entry["outputs"] = json!(t.outputs);
        }
        detail.push(entry);
        let wanted = target.app.as_deref() == Some(name.as_str());
        let level = match &state {
            AppState::Submittable(_) => Level::Ok,
            _ if wanted => Level::Fail,
            _ => Level::Warn,
        };
        // The app jobs use is reported below when the project lacks it.
        if !(wanted && matches!(state, AppState::NotFound)) {
            report.add(level, "apps", line);
        }
    }
    report.detail("apps", json!(detail));
    let listed_names = listed.as_ref().map(|n| n.join(", ")).unwrap_or_else(|_| "unknown".into());
    if let Some(app) = &target.app {
        let found = listed.as_ref().is_ok_and(|n| n.contains(app))
            || detail.iter().any(|d| d["name"] == json!(app) && d["status"] != json!("not_found"));
        if !found {
            report.add(
                Level::Fail,
                "apps",
                format!("{app} ({}): the project has no such app; its apps: {listed_names}", target.app_source),
            );
        }
    }
    if submittable.is_empty() {
        report.add(Level::Fail, "submit rights", "this account may submit to none of the project's apps".into());
    } else {
        report.add(Level::Ok, "submit rights", format!("for {}", submittable.join(", ")));
    }
}
