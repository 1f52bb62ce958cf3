//! The `boinc-gahp` package: the daemon's command line and wiring, and (with
//! the default `sim` feature) the demo, which embeds the simulated project.
//!
//! Three layers over the workspace's crates, top to bottom. A module names
//! only modules of its own layer or a lower one, and no files name each
//! other around a circle (`tests/layers.rs` checks both; see
//! `docs/design.md`, "Layers"):
//!
//! ```text
//! binaries' wiring  main.rs, bin/    the executables: parse, pick the command
//!                   lib.rs, cli      the module tree; the command line (each
//!                                    subcommand's arguments live with their
//!                                    command) and the daemon's run on stdio
//! commands          check/           `boinc_gahp check`
//!                   serve/           `serve`, `connect` (dial, relay/), `token`
//!                   demo             `boinc_gahp demo` (the `sim` feature)
//!                   remote_layout    `boinc_gahp remote-layout`
//! settings          settings         the flags before the subcommand, the
//!                                    config file, the environment, the log
//!                   log_file         the log's writer: a full disk drops lines
//!                   stdin            standard input (the daemon's, connect's): a pipe
//!                                    read on the runtime's thread
//! ```
//!
//! Below them: the daemon's crates (gahp-session over gahp-blah,
//! gahp-broker, gahp-sequences, gahp-project, gahp-services),
//! gahp-protocol, and with `sim` boinc-sim and gahp-testkit.

#![forbid(unsafe_code)]

pub mod check;
pub mod cli;
#[cfg(feature = "sim")]
pub mod demo;
pub mod log_file;
pub mod remote_layout;
pub mod serve;
pub mod settings;
pub mod stdin;
