//! Registry: the credential registry. Each (project URL, authenticator) gets
//! its own `ProjectTree` and, beside it on the same HTTP client, its own
//! `SequenceRelocator`, created on first use. This is also the edge where
//! every accepted request is turned into exactly one result: whatever happens
//! to the tree (an error, a panic that kills it, a timeout), `Complete` is
//! sent once for the request id.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use gahp_protocol::gahp::sequence_commands::{SequenceCommand, SequenceResult};
use gahp_protocol::gahp::{AsyncCommand, CommandResult, ReqId};

use gahp_project::rpc::RpcClient;
use gahp_project::tree::{ProjectTree, Run};
use gahp_project::ProjectKey;
use gahp_sequences::command::{encoded, execute};
use gahp_sequences::relocator::{PoolLink, SequenceRelocator};
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::result_queue::{Complete, ResultQueue};
use gahp_services::state_db::StateDb;

pub struct Registry {
    config: Arc<DaemonConfig>,
    queue: Addr<ResultQueue>,
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
    pub fn new(config: Arc<DaemonConfig>, queue: Addr<ResultQueue>, stager: Addr<FileStager>, db: StateDb) -> Self {
        Registry { config, queue, stager, db, trees: HashMap::new(), pools: None }
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

/// An accepted asynchronous command, bound to the project selected when its
/// line was read (`None`: nothing was selected yet).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Dispatch {
    pub reqid: ReqId,
    pub project: Option<ProjectKey>,
    pub command: AsyncCommand,
}

impl Handler<Dispatch> for Registry {
    type Result = ();

    fn handle(&mut self, msg: Dispatch, _: &mut Context<Self>) {
        let Dispatch { reqid, project, command } = msg;
        let queue = self.queue.clone();
        let Some(key) = project else {
            queue.do_send(Complete { reqid, result: CommandResult::Error("no project selected".into()) });
            return;
        };
        let tree = self.tree(&key);
        let code = command.code();
        // The tree bounds its own work by command_timeout; this is the net
        // under it, so that a result comes even if something hangs.
        let limit = self.config.command_timeout + std::time::Duration::from_secs(15);
        // A task of its own, not a future in this actor's context: actix
        // polls every future of a context whenever one of them wakes, which
        // made each new request cost O(requests in flight).
        actix_rt::spawn(async move {
            let result = match tokio::time::timeout(limit, tree.send(Run { command })).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => CommandResult::Error(format!(
                    "{code} failed: internal error (the project's worker stopped); the command may not have completed"
                )),
                Err(_) => CommandResult::Error(format!("{code} timed out after {} s", limit.as_secs())),
            };
            queue.do_send(Complete { reqid, result });
        });
    }
}

/// An accepted `BOINC_SEQUENCE_*` command, bound like [`Dispatch`]; run on
/// the project's SequenceRelocator.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DispatchSequence {
    pub reqid: ReqId,
    pub project: Option<ProjectKey>,
    pub command: SequenceCommand,
}

impl Handler<DispatchSequence> for Registry {
    type Result = ();

    fn handle(&mut self, msg: DispatchSequence, _: &mut Context<Self>) {
        let DispatchSequence { reqid, project, command } = msg;
        let queue = self.queue.clone();
        let Some(key) = project else {
            let msg = "no project selected";
            queue.do_send(Complete { reqid, result: CommandResult::Error(msg.into()) });
            return;
        };
        let relocator = self.account(&key).sequences.clone();
        let auth = key.authenticator;
        actix_rt::spawn(async move {
            let result = execute(relocator, command, None).await;
            let result = match result {
                SequenceResult::Error(msg) => SequenceResult::Error(auth.redact_in(&msg)),
                other => other,
            };
            queue.do_send(Complete { reqid, result: encoded(reqid, &result) });
        });
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
