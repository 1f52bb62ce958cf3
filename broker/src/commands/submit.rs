//! `BOINC_SUBMIT` on a pool: a batch the pool has a route for goes there;
//! a new one is placed by matchmaking, best project first, skipping one
//! that refuses it before the batch exists anywhere.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use gahp_project::rpc::{Rpc, RpcError};
use gahp_protocol::boinc::{reply, request, Script};
use gahp_protocol::gahp::{AsyncCommand, CommandResult, SubmitBatch};

use crate::data_overlap::Uploaded;
use crate::matchmaker::InputData;
use crate::pools::{Broker, Route, Wanted};
use crate::rpc_client_of;

impl Broker {
    pub(crate) async fn submit(&self, batch: SubmitBatch) -> CommandResult {
        match self.batch_route(&batch.batch_name).await {
            // Once a batch may exist on a project, it stays there.
            Ok(Route::Project(p)) => {
                let names = self.phys_names(&batch).await;
                let result = self.on(p, AsyncCommand::Submit(batch)).await;
                if matches!(result, CommandResult::Ok) {
                    self.pool.overlap.do_send(Uploaded { project: p, names });
                }
                result
            }
            Ok(Route::Unknown) => self.place(batch).await,
            Err(e) => CommandResult::Error(format!("error submitting jobs: {e}")),
        }
    }

    /// The content names of the batch's inputs (empty if they can't be had:
    /// the submit itself then says why).
    async fn phys_names(&self, batch: &SubmitBatch) -> Vec<String> {
        self.inputs(batch).await.map(|files| files.into_iter().map(|f| f.phys_name).collect()).unwrap_or_default()
    }

    /// The distinct input files of the batch, hashed (through the MD5 cache
    /// the submit pipeline uses next).
    async fn inputs(&self, batch: &SubmitBatch) -> Result<Vec<InputData>, String> {
        let mut seen = HashSet::new();
        let paths: Vec<PathBuf> =
            batch.jobs.iter().flat_map(|j| j.inputs.iter()).filter(|i| seen.insert(&i.src)).map(|i| i.src.clone()).collect();
        self.stage(paths).await
    }

    async fn place(&self, batch: SubmitBatch) -> CommandResult {
        if batch.jobs.is_empty() {
            return CommandResult::Error("error submitting jobs: no jobs".into());
        }
        let inputs = match self.inputs(&batch).await {
            Ok(i) => i,
            Err(e) => return CommandResult::Error(format!("error processing input files: -108 {e}")),
        };
        let want = Wanted { name: &batch.batch_name, app: &batch.app_name, job_count: batch.jobs.len(), requirements: None, rank: None };
        let candidates = match self.matchmake(&want, &inputs).await {
            Ok(c) => c,
            Err(e) => return CommandResult::Error(format!("error submitting jobs: {e}")),
        };
        let mut skipped: Vec<String> = Vec::new();
        for p in candidates {
            let project = &self.pool().projects[p];
            if let Err(why) = self.probe(p, &batch.app_name).await {
                tracing::info!(pool = %self.pool.id, project = %project.name, batch = %batch.batch_name, "skipped: {why}");
                skipped.push(format!("{}: {why}", project.name));
                continue;
            }
            let (b, name) = (batch.batch_name.clone(), project.name.clone());
            let jobs: Vec<String> = batch.jobs.iter().map(|j| j.name.clone()).collect();
            if let Err(e) = self.blocking(move |r, pool| r.bind(pool, &b, &name, &jobs)).await {
                return CommandResult::Error(format!("error submitting jobs: {e}"));
            }
            tracing::info!(pool = %self.pool.id, project = %project.name, batch = %batch.batch_name, "batch placed");
            let result = self.on(p, AsyncCommand::Submit(batch.clone())).await;
            let CommandResult::Error(err) = &result else {
                self.pool.overlap.do_send(Uploaded { project: p, names: inputs.iter().map(|f| f.phys_name.clone()).collect() });
                return result;
            };
            if !self.batch_absent(p, &batch.batch_name).await {
                // It exists there (or may): it stays.
                return result;
            }
            let b = batch.batch_name.clone();
            if let Err(e) = self.blocking(move |r, pool| r.unbind(pool, &b)).await {
                return CommandResult::Error(format!("error submitting jobs: {e}"));
            }
            tracing::info!(pool = %self.pool.id, project = %project.name, batch = %batch.batch_name, "refused before creation: {err}");
            skipped.push(format!("{}: {err}", project.name));
        }
        let why = if skipped.is_empty() { "none matches its Requirements".to_string() } else { skipped.join("; ") };
        CommandResult::Error(format!("error submitting jobs: -1 no project of the pool takes the batch ({why})"))
    }

    /// True only if the project says it has no batch of this name.
    async fn batch_absent(&self, p: usize, batch: &str) -> bool {
        let project = &self.pool().projects[p];
        let Some(rpc) = rpc_client_of(&self.projects, &project.key).await else {
            return false;
        };
        let deadline = Instant::now() + self.pool().probe_timeout;
        let xml = request::query_batch_by_name(&project.key.authenticator, batch);
        matches!(
            rpc.idempotent(Script::SubmitRpcHandler, xml, reply::parse_query_batch, deadline).await,
            Err(RpcError::Boinc { ref msg, .. }) if msg == "no such batch"
        )
    }
}
