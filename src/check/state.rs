//! The state directory: writable by this user, and the schema version of
//! its database, read without migrating it.

use std::path::Path;

use gahp_project::submit_records;
use gahp_services::state_db;
use serde_json::json;

use super::{Level, Report};

pub fn check(dir: &Path, report: &mut Report) {
    let shown = dir.display();
    match writable(dir) {
        Ok(Some(())) => report.add(Level::Ok, "state", format!("{shown} is writable")),
        Ok(None) => report.add(Level::Ok, "state", format!("{shown} does not exist yet; the daemon will create it")),
        Err(e) => report.add(Level::Fail, "state", format!("{shown}: {e}")),
    }
    let daemon = state_db::newest_version(gahp_services::schema::SCHEMA);
    let mut detail = json!({ "dir": dir, "daemon_schema_version": daemon });
    match inspect(dir) {
        Ok(None) => report.add(Level::Ok, "state", "no state database yet; the daemon will create it".into()),
        Ok(Some(s)) => {
            detail["schema_version"] = json!(s.schema_version);
            detail["upload_budgets"] = s
                .upload_budgets
                .iter()
                .map(|(p, configured, learnt)| json!({ "project": p, "configured": configured, "learnt": learnt }))
                .collect();
            let v = s.schema_version;
            if v == daemon {
                report.add(Level::Ok, "state", format!("state database schema version {v} (this daemon's)"));
            } else if v < daemon {
                report.add(Level::Ok, "state", format!("state database schema version {v}; the daemon will migrate it to {daemon}"));
            } else {
                report.add(
                    Level::Fail,
                    "state",
                    format!("state database schema version {v} is newer than this daemon's {daemon}: use a newer boinc_gahp or another --state-dir"),
                );
            }
            for (project, configured, learnt) in &s.upload_budgets {
                report.add(
                    Level::Ok,
                    "state",
                    format!("upload budget learnt for {project}: {learnt} bytes per request (configured {configured})"),
                );
            }
        }
        Err(e) => report.add(Level::Fail, "state", format!("can't read the state database in {shown}: {e}")),
    }
    report.detail("state", detail);
}

/// `Some` if the directory takes a new file, `None` if it does not exist
/// and its nearest existing parent does; an error says why not.
fn writable(dir: &Path) -> Result<Option<()>, String> {
    if !dir.exists() {
        let parent = dir.ancestors().skip(1).find(|p| p.exists()).unwrap_or(Path::new("/"));
        return try_write(parent).map(|()| None).map_err(|e| format!("does not exist, and {} is not writable: {e}", parent.display()));
    }
    if !dir.is_dir() {
        return Err("not a directory".into());
    }
    try_write(dir).map(Some).map_err(|e| format!("not writable: {e}"))
}

/// Creates and removes a file of a name of its own in `dir`.
fn try_write(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".boinc_gahp_check.{}", std::process::id()));
    std::fs::OpenOptions::new().write(true).create_new(true).open(&probe)?;
    std::fs::remove_file(&probe)
}

/// A state database as found, read without changing it.
pub(super) struct Summary {
    pub schema_version: usize,
    /// Learnt upload budgets: (project URL, configured, learnt bytes).
    pub upload_budgets: Vec<(String, u64, u64)>,
}

/// The state database of `dir`, read-only (no migration); `None` when
/// there is none yet.
pub(super) fn inspect(dir: &Path) -> Result<Option<Summary>, String> {
    let Some(conn) = state_db::open_read_only(dir).map_err(|e| e.to_string())? else { return Ok(None) };
    let schema_version = state_db::schema_version(&conn).map_err(|e| e.to_string())?;
    let upload_budgets = submit_records::learnt_budgets(&conn).map_err(|e| e.to_string())?;
    Ok(Some(Summary { schema_version, upload_budgets }))
}
