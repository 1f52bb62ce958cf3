//! What drives the daemon from outside, as HTCondor does: a GAHP client over
//! pipes, and a `boinc-sim` process on loopback with its introspection (or
//! a real project's client, through `boinccmd`). Used
//! by the demo, the end-to-end tests, the benchmarks and the chaos harness;
//! the production daemon links none of it.

#![forbid(unsafe_code)]

pub mod blah_ad;
pub mod boinc_client;
pub mod gahp_client;
pub mod sim_process;
pub mod tmpfs;

pub use blah_ad::blah_job_ad;
pub use boinc_client::{BoincClient, ClientTask, Nudger};
pub use gahp_client::GahpClient;
pub use sim_process::{http, SimProcess};
pub use tmpfs::PrivateTmpfs;

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
