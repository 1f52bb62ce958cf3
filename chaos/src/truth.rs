//! The server's own truth, read around the proxy: for the simulated project
//! its introspection (`<url>__sim/state`); for a real project an audit
//! through its remote-submission RPCs with the same account (no database
//! access needed). Output files are downloaded from the server directly.

use std::time::Duration;

use gahp_protocol::boinc::{reply, request};
use gahp_protocol::Authenticator;

use crate::http1::{HttpError, Upstream};

/// A batch as the server has it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerBatch {
    pub id: i64,
    pub name: String,
    /// BOINC's batch state: 0 init, 1 in progress, 2 completed, 3 aborted,
    /// 4 retired.
    pub state: i64,
    pub expire_time: f64,
    /// Job names with their status (DONE, ERROR, IN_PROGRESS, UNSENT).
    pub jobs: Vec<(String, String)>,
}

pub const BATCH_RETIRED: i64 = 4;

#[derive(Debug, thiserror::Error)]
pub enum TruthError {
    #[error("{0}")]
    Http(#[from] HttpError),
    #[error("server said: {0}")]
    Server(String),
    #[error("bad state document: {0}")]
    Json(String),
}

/// How the truth is read.
pub enum Source {
    /// `__sim/state` of the simulated project.
    Sim,
    /// `query_batches` and `query_batch` with job details.
    Rpc,
}

pub struct Truth {
    pub upstream: Upstream,
    auth: Authenticator,
    source: Source,
    rt: tokio::runtime::Runtime,
}

const AUDIT_TIMEOUT: Duration = Duration::from_secs(120);

impl Truth {
    pub fn new(upstream: Upstream, auth: Authenticator, source: Source) -> std::io::Result<Truth> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(Truth { upstream, auth, source, rt })
    }

    fn get(&self, rel: &str) -> Result<(u16, Vec<u8>, bool), TruthError> {
        let m = self.rt.block_on(self.upstream.exchange("GET", rel, &[], b"", AUDIT_TIMEOUT))?;
        let is_file = m.header("content-disposition").is_some();
        Ok((m.status(), m.body, is_file))
    }

    fn rpc(&self, script: &str, xml: &str) -> Result<Vec<u8>, TruthError> {
        let boundary = format!("chaos{:016x}", rand::random::<u64>());
        let body = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{xml}\r\n--{boundary}--\r\n");
        let headers = vec![("Content-Type".to_string(), format!("multipart/form-data; boundary={boundary}"))];
        let m = self.rt.block_on(self.upstream.exchange("POST", script, &headers, body.as_bytes(), AUDIT_TIMEOUT))?;
        if m.status() != 200 {
            return Err(TruthError::Server(format!("HTTP {}", m.status())));
        }
        Ok(m.body)
    }

    /// POSTs JSON to one of the simulated project's `__sim/` endpoints.
    pub fn sim_post(&self, rel: &str, json: &str) -> Result<(), TruthError> {
        let headers = vec![("Content-Type".to_string(), "application/json".to_string())];
        let m = self.rt.block_on(self.upstream.exchange("POST", rel, &headers, json.as_bytes(), AUDIT_TIMEOUT))?;
        if m.status() != 200 {
            return Err(TruthError::Server(format!("{rel}: HTTP {}", m.status())));
        }
        Ok(())
    }

    /// The simulated project's `__sim/state`, whole.
    pub fn sim_state(&self) -> Result<serde_json::Value, TruthError> {
        let (status, body, _) = self.get("__sim/state")?;
        if status != 200 {
            return Err(TruthError::Server(format!("__sim/state: HTTP {status}")));
        }
        serde_json::from_slice(&body).map_err(|e| TruthError::Json(e.to_string()))
    }

    /// Whether [`Truth::batches`] lists retired batches too.
    pub fn lists_retired(&self) -> bool {
        matches!(self.source, Source::Sim)
    }

    /// Every batch whose name starts with `prefix` (retired ones included
    /// for the simulated project; a real server lists only the others).
    pub fn batches(&self, prefix: &str) -> Result<Vec<ServerBatch>, TruthError> {
        match self.source {
            Source::Sim => self.sim_batches(prefix),
            Source::Rpc => self.rpc_batches(prefix),
        }
    }

    fn sim_batches(&self, prefix: &str) -> Result<Vec<ServerBatch>, TruthError> {
        let v = self.sim_state()?;
        let empty = Vec::new();
        let jobs = v["jobs"].as_array().unwrap_or(&empty);
        let mut out = Vec::new();
        for b in v["batches"].as_array().unwrap_or(&empty) {
            let name = b["name"].as_str().unwrap_or("").to_string();
            if !name.starts_with(prefix) {
                continue;
            }
            let id = b["id"].as_i64().unwrap_or(0);
            let jobs = jobs
                .iter()
                .filter(|j| j["batch"].as_i64() == Some(id))
                .map(|j| (j["name"].as_str().unwrap_or("").to_string(), j["status"].as_str().unwrap_or("").to_string()))
                .collect();
            out.push(ServerBatch {
                id,
                name,
                state: b["state"].as_i64().unwrap_or(-1),
                expire_time: b["expire_time"].as_f64().unwrap_or(0.0),
                jobs,
            });
        }
        Ok(out)
    }

    fn rpc_batches(&self, prefix: &str) -> Result<Vec<ServerBatch>, TruthError> {
        let body = self.rpc("submit_rpc_handler.php", &request::query_batches(&self.auth))?;
        let list = reply::parse_query_batches(&body).map_err(|e| TruthError::Server(e.to_string()))?;
        let mut out = Vec::new();
        for b in list.into_iter().filter(|b| b.name.starts_with(prefix)) {
            let body = self.rpc("submit_rpc_handler.php", &request::query_batch_details(&self.auth, &b.name))?;
            let details = reply::parse_query_batch_details(&body).map_err(|e| TruthError::Server(e.to_string()))?;
            let jobs = details.into_iter().map(|j| (j.name, rpc_status(&j.status).to_string())).collect();
            out.push(ServerBatch { id: b.id, name: b.name, state: b.state, expire_time: b.expire_time, jobs });
        }
        Ok(out)
    }

    /// The server's copy of output `file_num` of a job.
    pub fn output(&self, job: &str, file_num: usize) -> Result<Vec<u8>, TruthError> {
        let url = request::output_url(&self.upstream.base_path, &self.auth, job, file_num);
        let rel = url.strip_prefix(&self.upstream.base_path).unwrap_or(&url).to_string();
        let (status, body, is_file) = self.get(&rel)?;
        if status != 200 || !is_file {
            return Err(TruthError::Server(reply::download_error(&body)));
        }
        Ok(body)
    }

    /// Retires a batch directly (clean-up of what a failed run left).
    pub fn retire(&self, batch: &str) -> Result<(), TruthError> {
        let body = self.rpc("submit_rpc_handler.php", &request::retire_batch(&self.auth, batch))?;
        reply::parse_success(&body).map_err(|e| TruthError::Server(e.to_string()))
    }
}

/// `query_batch` job-detail statuses in the GAHP's words.
fn rpc_status(s: &str) -> &'static str {
    match s {
        "done" => "DONE",
        "error" => "ERROR",
        "in_progress" => "IN_PROGRESS",
        _ => "UNSENT",
    }
}
