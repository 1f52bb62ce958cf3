//! Registry: the credential registry. Each (project URL, authenticator) gets
//! its own `ProjectTree` and, beside it on the same HTTP client, its own
//! `SequenceRelocator`, created on first use; a tree that died is
//! replaced on the next ask. Whoever runs a command on a project asks it
//! for them (`TreeOf`, `SequencesOf`).

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use gahp_project::rpc::RpcClient;
use gahp_project::tree::ProjectTree;
use gahp_project::ProjectKey;
use gahp_sequences::relocator::{PoolLink, SequenceRelocator};
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::state_db::StateDb;

pub struct Registry {
    config: Arc<DaemonConfig>,
    stager: Addr<FileStager>,
    db: StateDb,
    trees: HashMap<ProjectKey, Account>,
    /// The broker, for sequences placed by a pool (set once at start).
    pools: Option<PoolLink>,
}

/// What one (URL, authenticator) has: the tree and its work sequences.
struct Account {
    tree: Addr<ProjectTree>,
    sequences: Addr<SequenceRelocator>,
}

impl Registry {
    pub fn new(config: Arc<DaemonConfig>, stager: Addr<FileStager>, db: StateDb) -> Self {
        Registry { config, stager, db, trees: HashMap::new(), pools: None }
    }

    /// The project's tree and sequences; a tree that died (a panic) is
    /// replaced by a new one, and its sequences with it.
    fn account(&mut self, key: &ProjectKey) -> &Account {
        let alive = self.trees.get(key).map(|a| a.tree.connected());
        if alive != Some(true) {
            if alive == Some(false) {
                tracing::warn!(project = %key.url, "restarting the project's actor tree");
            }
            let rpc = RpcClient::new(key.clone(), self.config.clone()).start();
            // Starting them resumes the account's sequences (after a restart).
            let sequences = SequenceRelocator::new(
                key.clone(),
                self.config.clone(),
                rpc.clone(),
                self.stager.clone(),
                self.db.clone(),
                self.pools.clone(),
            )
            .start();
            let tree = ProjectTree::new(key.clone(), self.config.clone(), rpc, self.stager.clone(), self.db.clone()).start();
            self.trees.insert(key.clone(), Account { tree, sequences });
        }
        &self.trees[key]
    }

    fn tree(&mut self, key: &ProjectKey) -> Addr<ProjectTree> {
        self.account(key).tree.clone()
    }
}

impl Actor for Registry {
    type Context = Context<Self>;
}

/// Hands the broker to the trees made from now on (it is started after
/// `Registry`, and needs it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetPools(pub PoolLink);

impl Handler<SetPools> for Registry {
    type Result = ();
    fn handle(&mut self, msg: SetPools, _: &mut Context<Self>) {
        self.pools = Some(msg.0);
    }
}

/// The tree of a project, created if needed: the BLAH front end runs its
/// jobs on the same tree (and HTTP client) as the BOINC_* commands.
#[derive(Message)]
#[rtype(result = "Addr<ProjectTree>")]
pub struct TreeOf(pub ProjectKey);

impl Handler<TreeOf> for Registry {
    type Result = MessageResult<TreeOf>;
    fn handle(&mut self, msg: TreeOf, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.tree(&msg.0))
    }
}

/// The work sequences of a project (created with its tree if needed):
/// `BOINC_SEQUENCE_*`, the BLAH front end's sequence jobs and a pool's
/// sequences send them the messages of `gahp_sequences::relocator`.
#[derive(Message)]
#[rtype(result = "Addr<SequenceRelocator>")]
pub struct SequencesOf(pub ProjectKey);

impl Handler<SequencesOf> for Registry {
    type Result = MessageResult<SequencesOf>;
    fn handle(&mut self, msg: SequencesOf, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.account(&msg.0).sequences.clone())
    }
}
