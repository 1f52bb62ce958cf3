//! The shared services of boinc-gahp: what every layer above uses and
//! none of them owns (see `docs/design.md`, "Layers", and
//! `docs/layout.md`). This crate depends on no other crate of the house
//! but the protocol.
//!
//! * `state_db`: the SQLite file; `schema`: every table of it, made and
//!   changed in that one place;
//! * `file_stager`: MD5 content names and the hash cache; `digest`: the
//!   hex MD5 of bytes (pure);
//! * `result_queue`: one result per accepted request, in order;
//! * `config`, `clock`, `atomic_file` (whole or nothing), `unpack` (a
//!   stranger's zip: bounded, checked, placed without following links);
//! * `metrics`: the Prometheus registry; `metrics_http` serves it.

#![forbid(unsafe_code)]

pub mod atomic_file;
pub mod clock;
pub mod config;
pub mod digest;
pub mod file_stager;
pub mod metrics;
pub mod metrics_http;
pub mod result_queue;
pub mod schema;
pub mod state_db;
pub mod unpack;

pub use config::DaemonConfig;
