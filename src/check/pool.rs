//! A pool (`pool.toml`): the file, each project as `project.rs` checks
//! one (answers, authenticator), and the project ads the broker would
//! match a job against, computed by the broker's own code.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use gahp_broker::matchmaker::{project_ad, ProjectSide};
use gahp_broker::pool::Pool;
use gahp_broker::project_ads::{CurrentAds, ProjectAds};
use gahp_broker::rank_functions::ad_json;
use gahp_broker::registry::Registry;
use gahp_services::file_stager::FileStager;
use gahp_services::state_db::StateDb;
use gahp_services::DaemonConfig;
use serde_json::json;

use super::project::{account, answers, client};
use super::{Level, Report};

pub async fn check(config: &DaemonConfig, path: &Path, app: Option<&str>, timeout: Duration, report: &mut Report) {
    let pool = match Pool::load(path) {
        Ok(p) => p,
        Err(e) => {
            report.add(Level::Fail, "pool", e.to_string());
            return;
        }
    };
    report.add(Level::Ok, "pool", format!("{}: {} project(s)", path.display(), pool.projects.len()));
    let mut projects_detail = Vec::new();
    for p in &pool.projects {
        let rpc = client(config, &p.key.url, &p.key.authenticator);
        let topic = format!("pool project {}", p.name);
        let mut detail = json!({ "name": p.name, "url": p.key.url });
        if answers(&rpc, &topic, &p.key.url, timeout, report, &mut detail).await {
            account(&rpc, &topic, &p.key.authenticator, &p.authenticator_file, timeout, report).await;
        }
        projects_detail.push(detail);
    }
    // The ads as the broker computes them: its own actors, on a state
    // database of this run only (nothing of the daemon's is touched).
    let db = match StateDb::in_memory(gahp_services::schema::SCHEMA) {
        Ok(db) => db,
        Err(e) => {
            report.add(Level::Fail, "pool", format!("internal error: {e}"));
            return;
        }
    };
    let stager = FileStager::new(db.clone(), 1).start();
    let projects = Registry::new(Arc::new(config.clone()), stager, db).start();
    let pool = Arc::new(pool);
    let ads = ProjectAds::new(pool.clone(), projects).start();
    let asked =
        tokio::time::timeout_at((Instant::now() + timeout).into(), ads.send(CurrentAds { app: app.unwrap_or("").to_string() })).await;
    let statuses = match asked {
        Ok(Ok(s)) => s,
        Ok(Err(_)) | Err(_) => {
            report.add(Level::Fail, "pool", format!("the project ads were not ready within {} s", timeout.as_secs_f64()));
            report.detail("pool", json!({ "file": path, "projects": projects_detail }));
            return;
        }
    };
    for ((p, status), detail) in pool.projects.iter().zip(&statuses).zip(projects_detail.iter_mut()) {
        let side = ProjectSide { name: &p.name, url: &p.key.url, attributes: &p.attributes, requirements: &p.requirements, rank: &p.rank };
        let ad = ad_json(&project_ad(&side, status));
        report.add(Level::Ok, &format!("pool project {}", p.name), format!("ad: {ad}"));
        detail["ad"] = serde_json::from_str(&ad).unwrap_or(serde_json::Value::Null);
    }
    report.detail("pool", json!({ "file": path, "projects": projects_detail }));
}
