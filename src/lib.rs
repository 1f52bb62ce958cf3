//! The `boinc-gahp` package: the daemon's command line and wiring, and (with
//! the default `sim` feature) the demo, which embeds the simulated project.

#![forbid(unsafe_code)]

pub mod check;
pub mod cli;
#[cfg(feature = "sim")]
pub mod demo;
pub mod log_file;
pub mod remote_layout;
pub mod serve;
