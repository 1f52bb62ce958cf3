//! Everything one selected BOINC project owns: its key, its actor tree and
//! the actors in that tree (HTTP client, submit pipelines, batch monitor,
//! output fetcher). The layer above (work sequences, the registry, the
//! front ends) uses it; it uses only the shared services.

#![forbid(unsafe_code)]

pub mod batch_monitor;
pub mod commands;
pub mod key;
pub mod measures;
pub mod output_fetcher;
pub mod rpc;
pub mod shared_calls;
pub mod submit_pipeline;
pub mod submit_records;
pub mod templates;
pub mod tree;

pub use key::ProjectKey;
