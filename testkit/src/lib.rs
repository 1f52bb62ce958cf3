//! What drives the daemon from outside, as HTCondor does, for the
//! end-to-end tests, the benchmarks and the chaos harness: the GAHP client
//! over pipes (the `gahp-client` crate, which the demo uses alone), a
//! `boinc-sim` process on loopback with its introspection, BLAH job ads,
//! zips as hosts send them. The daemon's package links it only in its
//! tests and benchmarks. (A real project's client is driven by
//! `real-boinc/boinc_client.rs`, with the rest of that test.)

#![forbid(unsafe_code)]

pub mod blah_ad;
pub mod sim_process;
pub mod tmpfs;
pub mod zips;

pub use blah_ad::blah_job_ad;
pub use gahp_client::GahpClient;
pub use sim_process::{http, SimProcess};
pub use tmpfs::PrivateTmpfs;
pub use zips::zip_file;

/// Every file under `dir`, at any depth (for tests that look for what a
/// run left behind).
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}
