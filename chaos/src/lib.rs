//! gahp-chaos: runs the real boinc_gahp through a seeded fault proxy
//! against a BOINC project (a real one, or a simulated one with `--sim`),
//! kills and restarts it as the gridmanager does, and judges the outcome
//! from the server's own truth. See docs/chaos.md.
//!
//! A library with a thin binary (as `boinc-sim` is), so that the man page
//! is written from this clap definition (`manpage/`).

#![forbid(unsafe_code)]

pub mod cli;
mod daemon;
mod http1;
mod judge;
mod plan;
mod proxy;
mod run;
mod soak;
mod truth;

pub use cli::cli_main;
