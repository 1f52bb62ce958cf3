//! The actix actors of boinc-gahp (see `docs/design.md`, "Actors").
//!
//! ```text
//! Session ──Accept/Drain──▶ ResultQueue ◀──Complete── Projects ──Run──▶ project::tree::ProjectTree
//!    ▲                          │                                        ├─ project::rpc::RpcClient
//!    └──────────Notify (R)──────┘                                        ├─ project::batch_monitor::BatchMonitor
//!                                                                        ├─ project::output_fetcher::OutputFetcher
//!                                                                        └─ project::submit_pipeline (one per submit)
//! FileStager and StateDb are shared by every project (one hash cache).
//!
//! Session ──BlahDispatch──▶ blah::jobs::BlahJobs ──▶ blah::project::BlahProject
//!                              │   (one per BOINC project, on that project's
//!                              │    tree: RpcClient, SubmitPipeline)
//!                              └─Complete─▶ ResultQueue
//! ```
//! Session ──PoolDispatch──▶ broker::pools::Pools (a pool selected with
//!    `pool:<path>`: matchmaking, then the chosen project's tree)
//!
//! The modules mirror the tree: `project/` is what one project owns,
//! `blah/` the BLAH front end. Each actor lives in its own file with its
//! messages beside it.

#![forbid(unsafe_code)]

pub mod atomic_file;
pub mod blah;
pub mod broker;
pub mod clock;
pub mod config;
pub mod file_stager;
pub mod project;
pub mod projects;
pub mod result_queue;
pub mod sequences;
pub mod session;
pub mod state_db;

pub use config::DaemonConfig;

/// The state database's schema: each module's own steps (see
/// `state_db::Migration`).
pub const SCHEMA: &[&[state_db::Migration]] = &[
    state_db::MIGRATIONS,
    blah::store::MIGRATIONS,
    broker::routes::MIGRATIONS,
    sequences::store::MIGRATIONS,
    project::submit_records::MIGRATIONS,
];

pub use session::{start_daemon, DaemonHandles};

#[cfg(test)]
mod tests {
    #[test]
    fn the_schema_has_every_version_once_from_1() {
        let mut versions: Vec<usize> = super::SCHEMA.iter().flat_map(|m| m.iter()).map(|m| m.version).collect();
        versions.sort();
        versions.dedup();
        assert_eq!(versions, (1..=versions.len()).collect::<Vec<_>>(), "a gap in the schema's versions");
    }
}
