//! The end-to-end tests, in one binary (each module was a test binary of
//! its own: one binary is built and linked once, and its tests run side by
//! side). Each runs the real `boinc_gahp` over pipes against the real
//! `boinc-sim` on loopback, as HTCondor runs it.
//!
//!     cargo test --release --test e2e                 # all of them
//!     cargo test --release --test e2e blah::          # one module
//!
//! The tests against a real BOINC server are `real-boinc/e2e.rs`.

#[path = "../common/mod.rs"]
mod common;

mod argument_limits;
mod blah;
mod blah_flood;
mod broker;
mod check;
mod commands;
mod container_image;
mod deadline;
mod demo;
mod host_faults;
mod https;
mod metrics;
mod protocol;
mod quorum;
mod readme_examples;
mod recovery;
mod remote_layout;
mod runner;
mod sequences;
mod serve;
mod serve_blah_sequence;
mod serve_blah_share;
mod serve_files;
mod serve_pool;
mod serve_reconnect;
mod serve_restart;
mod serve_sequence_files;
mod serve_systemd;
mod serve_upload;
mod token;
mod upload_limits;
mod upload_memory;
mod url_inputs;
