//! The `boinc-gahp` package: the daemon's command line and wiring, a GAHP
//! client that drives the daemon over pipes the way HTCondor does (used by
//! the demo, the tests and the benchmarks), and the demo itself.

pub mod cli;
pub mod demo;
pub mod gahp_client;
pub mod testkit;
