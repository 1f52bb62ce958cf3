//! Everything one selected project owns: its key, its actor tree and the
//! actors in that tree (HTTP client, submit pipelines, batch monitor,
//! output fetcher).

pub mod batch_monitor;
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
