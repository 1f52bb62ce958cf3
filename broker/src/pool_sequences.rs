//! Work sequences on a pool (`BOINC_SELECT_PROJECT pool:<path> -`, or a
//! `batch boinc` sequence job placed by `[blah] pool`): a new sequence is
//! matched like a one-job batch (its state files and inputs are its data)
//! and created on the best project that takes its app; a step relocated
//! there goes to the pool's next-best project ([`NextProject`]).
//!
//! There is no route table for sequences: a sequence is where its record
//! is (the SequenceStore of one project account of the pool), and a move
//! is one transaction that changes that, so the answer can't go stale.

use std::path::PathBuf;

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::{SequenceCommand, SequenceResult};
use gahp_protocol::gahp::CommandResult;

use crate::pool::Pool;
use crate::pools::{Broker, Pools, Wanted};
use crate::registry::SequencesOf;
use crate::{sequence_holder, tree_of};
use gahp_project::ProjectKey;
use gahp_sequences::commands;
use gahp_sequences::relocator::{NextProject, SequenceHolder, SequenceRelocator};
use gahp_sequences::store::SequenceStore;

impl Pools {
    /// Starts the trees of the pool's projects that hold its unfinished
    /// sequences, so that they go on after a restart without waiting for a
    /// command that names them.
    pub(super) fn resume_sequences(&self, id: &str, pool: &Pool) {
        let stores: Vec<(ProjectKey, SequenceStore)> = pool.projects.iter().map(|p| (p.key.clone(), self.store_of(&p.key))).collect();
        let (projects, id) = (self.projects.clone(), id.to_string());
        actix_rt::spawn(async move {
            let keys = tokio::task::spawn_blocking(move || {
                stores.into_iter().filter(|(_, s)| s.has_pool_work(&id).unwrap_or(false)).map(|(k, _)| k).collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            for key in keys {
                tree_of(&projects, &key).await;
            }
        });
    }

    pub(super) fn store_of(&self, key: &ProjectKey) -> SequenceStore {
        SequenceStore::new(self.db.clone(), &self.config.state_dir, &key.url, &key.account())
    }
}

impl Pools {
    /// Each project's sequence store, in pool order.
    pub(super) fn stores(&self, broker: &Broker) -> Vec<SequenceStore> {
        broker.pool().projects.iter().map(|p| self.store_of(&p.key)).collect()
    }
}

impl Handler<NextProject> for Pools {
    type Result = ResponseFuture<Result<Option<(ProjectKey, Addr<SequenceRelocator>)>, String>>;

    fn handle(&mut self, msg: NextProject, _: &mut Context<Self>) -> Self::Result {
        let broker = self.broker(&PathBuf::from(&msg.pool)).map_err(|e| e.to_string());
        Box::pin(async move {
            let broker = broker?;
            let inputs = broker.stage(msg.inputs).await?;
            let want = Wanted { name: &msg.name, app: &msg.app, job_count: 1, requirements: None, rank: None };
            for p in broker.matchmake(&want, &inputs).await? {
                let project = &broker.pool().projects[p];
                if project.key == msg.from {
                    continue;
                }
                if let Err(why) = broker.probe(p, &msg.app).await {
                    tracing::info!(sequence = %msg.name, project = %project.name, "not moved there: {why}");
                    continue;
                }
                return Ok(broker.relocator(p).await.map(|r| (project.key.clone(), r)));
            }
            Ok(None)
        })
    }
}

impl Handler<SequenceHolder> for Pools {
    type Result = ResponseFuture<Result<Option<Addr<SequenceRelocator>>, String>>;

    fn handle(&mut self, msg: SequenceHolder, _: &mut Context<Self>) -> Self::Result {
        let broker = self.broker(&PathBuf::from(&msg.pool)).map_err(|e| e.to_string());
        let stores = broker.as_ref().map(|b| self.stores(b)).unwrap_or_default();
        Box::pin(async move {
            let broker = broker?;
            match sequence_holder(stores, &broker.pool.id, &msg.name).await? {
                Some(p) => Ok(broker.relocator(p).await),
                None => Ok(None),
            }
        })
    }
}

impl Broker {
    /// Project `p`'s SequenceRelocator.
    async fn relocator(&self, p: usize) -> Option<Addr<SequenceRelocator>> {
        self.projects.send(SequencesOf(self.pool().projects[p].key.clone())).await.ok()
    }

    /// A `BOINC_SEQUENCE_*` command on the pool, as its result: no
    /// authenticator of the pool's projects in it.
    pub(super) async fn run_sequence(self, command: SequenceCommand, stores: Vec<SequenceStore>) -> CommandResult {
        let result = match self.sequence(command, stores).await {
            SequenceResult::Error(e) => {
                SequenceResult::Error(self.pool().projects.iter().fold(e, |e, p| p.key.authenticator.redact_in(&e)))
            }
            other => other,
        };
        result.into_result()
    }

    /// A `BOINC_SEQUENCE_*` command on the pool: a create that names a new
    /// sequence is placed; everything else goes where the sequence is.
    async fn sequence(&self, command: SequenceCommand, stores: Vec<SequenceStore>) -> SequenceResult {
        let code = command.code();
        let id = self.pool.id.clone();
        let held = match sequence_holder(stores, &id, command.name()).await {
            Ok(h) => h,
            Err(e) => return SequenceResult::Error(format!("{code} failed: {e}")),
        };
        let p = match (held, &command) {
            (Some(p), _) => p,
            (None, SequenceCommand::Create(c)) => {
                let mut paths: Vec<PathBuf> = c.state_files.iter().map(|f| f.src.clone()).collect();
                paths.extend(c.inputs.iter().map(|f| f.src.clone()));
                match self.place_sequence(&c.name, &c.app_name, paths).await {
                    Ok(p) => p,
                    Err(e) => return SequenceResult::Error(format!("{code} failed: {e}")),
                }
            }
            (None, _) => return SequenceResult::Error(format!("{code} failed: no sequence named {} in the pool", command.name())),
        };
        match self.relocator(p).await {
            Some(relocator) => commands::run(relocator, command, Some(id)).await,
            None => SequenceResult::Error(format!("{code} failed: internal error (no project tree)")),
        }
    }

    /// The best project of the pool that takes the sequence's app now.
    async fn place_sequence(&self, name: &str, app: &str, paths: Vec<PathBuf>) -> Result<usize, String> {
        let inputs = self.stage(paths).await.map_err(|e| format!("can't read a state or input file: {e}"))?;
        let want = Wanted { name, app, job_count: 1, requirements: None, rank: None };
        let mut skipped = Vec::new();
        for p in self.matchmake(&want, &inputs).await? {
            match self.probe(p, app).await {
                Ok(()) => {
                    tracing::info!(pool = %self.pool.id, project = %self.pool().projects[p].name, sequence = name, "sequence placed");
                    return Ok(p);
                }
                Err(why) => skipped.push(format!("{}: {why}", self.pool().projects[p].name)),
            }
        }
        let why = if skipped.is_empty() { "none matches its Requirements".to_string() } else { skipped.join("; ") };
        Err(format!("no project of the pool takes the sequence ({why})"))
    }
}
