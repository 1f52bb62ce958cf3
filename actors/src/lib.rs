//! The actix actors of boinc-gahp (see `docs/design.md`, "Actors" and
//! "Layers").
//!
//! Four layers, top to bottom. A module names only modules of its own
//! layer or a lower one (`tests/layers.rs` checks it, and that no files
//! name each other around a circle); a lower layer reaches up only
//! through a `Recipient` of a message defined at its own level.
//!
//! ```text
//! front ends       session            stdin/stdout (or a served client's connection): parses
//!                                     lines, answers at once, dispatches
//!                  runtime            the actors behind a session, over one state directory
//!                  tenancy            what a client of `serve` may do: its projects, its file
//!                                     area, its names kept apart from other clients'
//!                  blah/              the BLAH_* front end: jobs (dispatcher), project/
//!                                     (one actor per BOINC project: submit, status,
//!                                     delivery, abort, upkeep, sequences), map (ad ->
//!                                     BOINC), placement (ad -> a pool's PlaceJob),
//!                                     sequence (ad -> work sequence), outputs,
//!                                     batch_zip, store (its tables), shared_batch
//!                                     (one BOINC batch for several clients' jobs)
//! ───────────────────────────────────────────────────────────────────────────────────
//! multi-project    broker/            a pool of projects as one: pools (placement and
//!                                     routing), sequences (a pool's sequences, and the
//!                                     answers to a relocator's PoolLink), project_ads,
//!                                     data_overlap, rank_functions, matchmaker (pure),
//!                                     pool (the pool file), routes (its tables)
//! ───────────────────────────────────────────────────────────────────────────────────
//! one project      projects           the registry: one tree per (URL, authenticator),
//!                                     replaced if it dies; runs a BOINC_* command on
//!                                     its tree with exactly one result
//!                  project/           key, tree, rpc (RpcClient), submit_pipeline,
//!                                     submit_records (its tables), batch_monitor,
//!                                     output_fetcher; shared_calls (the thread's
//!                                     shared calls), templates and measures (a
//!                                     pool ad's ping and job counts) through it
//!                  sequences/         that project's work sequences: relocator/ (the
//!                                     actor: submit, poll, relocate, collect, moves
//!                                     with PoolLink, messages), decide (pure), store
//!                                     (its tables), command (BOINC_SEQUENCE_* -> it)
//! ───────────────────────────────────────────────────────────────────────────────────
//! shared services  state_db           the SQLite file; runs each module's migrations
//!                  file_stager        MD5 content names and the hash cache
//!                  result_queue       one result per accepted request, in order
//!                  config, clock, atomic_file (whole or nothing), unpack (a
//!                                     stranger's zip: bounded, checked, placed
//!                                     without following links)
//!                  metrics            the Prometheus registry; metrics_http serves it
//! ```
//!
//! Actors: Session ──Dispatch──▶ Projects ──Run──▶ ProjectTree (RpcClient,
//! BatchMonitor, OutputFetcher, SequenceRelocator, a SubmitPipeline per
//! submit); Session ──BlahDispatch──▶ BlahJobs ──▶ BlahProject (on the
//! project's tree); Session ──PoolDispatch──▶ Pools ──Run──▶ the chosen
//! project's tree. Results go to ResultQueue as `Complete`; it asks Session
//! to write. FileStager and StateDb are shared by every project. Each actor
//! lives in its own file (or folder) with its messages beside it.

#![forbid(unsafe_code)]

pub mod atomic_file;
pub mod blah;
pub mod broker;
pub mod clock;
pub mod config;
pub mod file_stager;
pub mod metrics;
pub mod metrics_http;
pub mod project;
pub mod projects;
pub mod result_queue;
pub mod runtime;
pub mod sequences;
pub mod session;
pub mod state_db;
pub mod tenancy;
pub mod unpack;

pub use config::DaemonConfig;

/// The state database's schema: each module's own steps (see
/// `state_db::Migration`).
pub const SCHEMA: &[&[state_db::Migration]] = &[
    state_db::MIGRATIONS,
    blah::store::MIGRATIONS,
    broker::routes::MIGRATIONS,
    sequences::store::MIGRATIONS,
    project::submit_records::MIGRATIONS,
    result_queue::MIGRATIONS,
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
