//! The projects: `registry` (Registry: one ProjectTree and one
//! SequenceRelocator per URL and authenticator, which it hands to whoever
//! runs a `BOINC_*` or `BOINC_SEQUENCE_*` command on one project), and the broker: a pool
//! of BOINC projects selected as one
//! (`BOINC_SELECT_PROJECT pool:<path> -`). Each batch is matched with
//! ClassAds (two-sided Requirements and Rank, as in Condor-G's matchmaking
//! for SAMGrid) to the project that suits it best — by default the one that
//! already holds most of its input bytes — and every later command follows
//! the durable batch -> project route.
//!
//! ```text
//! Dispatch ──RunOnPool──▶ pools::Pools ──Run──▶ gahp_project::tree::ProjectTree (one per project, as always)
//!                             ├─ project_ads::ProjectAds     (per pool: the project ads, refreshed)
//!                             ├─ data_overlap::DataOverlap   (per pool: boinc_data_overlap, cached)
//!                             ├─ rank_functions::RankFunctions (per pool: external rank functions, cached)
//!                             └─ routes::Routes              (batch -> project, job -> batch, in the state DB)
//! ```
//! `matchmaker` is the pure part: the ads and the ranking; `pool` the
//! pool file; `pool_sequences` places work sequences on a pool and moves a
//! relocated one to the next-best project.

#![forbid(unsafe_code)]

mod commands;
pub mod data_overlap;
pub mod matchmaker;
pub mod pool;
pub mod pool_sequences;
pub mod pools;
pub mod project_ads;
pub mod rank_functions;
pub mod registry;
pub mod routes;

use actix::Addr;

use crate::registry::{Registry, TreeOf};
use gahp_project::rpc::RpcClient;
use gahp_project::tree::{ClientOf, ProjectTree};
use gahp_project::ProjectKey;
use gahp_sequences::store::SequenceStore;

/// The project's tree (created if needed), shared with plain selections.
pub async fn tree_of(projects: &Addr<Registry>, key: &ProjectKey) -> Option<Addr<ProjectTree>> {
    projects.send(TreeOf(key.clone())).await.ok()
}

/// The HTTP client of the project's tree.
pub async fn rpc_client_of(projects: &Addr<Registry>, key: &ProjectKey) -> Option<Addr<RpcClient>> {
    tree_of(projects, key).await?.send(ClientOf).await.ok()
}

/// Which project (index into the pool) holds sequence `name` of pool `id`.
pub async fn sequence_holder(stores: Vec<SequenceStore>, id: &str, name: &str) -> Result<Option<usize>, String> {
    let (id, name) = (id.to_string(), name.to_string());
    tokio::task::spawn_blocking(move || {
        for (i, store) in stores.iter().enumerate() {
            if store.holds_pool_sequence(&name, &id).map_err(|e| format!("state database: {e}"))? {
                return Ok(Some(i));
            }
        }
        Ok(None)
    })
    .await
    .map_err(|_| "state database: internal error".to_string())?
}
