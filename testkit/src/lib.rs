//! What drives the daemon from outside, as HTCondor does: a GAHP client over
//! pipes, and a `boinc-sim` process on loopback with its introspection. Used
//! by the demo, the end-to-end tests, the benchmarks and the chaos harness;
//! the production daemon links none of it.

#![forbid(unsafe_code)]

pub mod blah_ad;
pub mod gahp_client;
pub mod sim_process;

pub use blah_ad::blah_job_ad;
pub use gahp_client::GahpClient;
pub use sim_process::{http, SimProcess};
