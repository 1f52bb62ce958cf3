//! The session of boinc-gahp, the top of the house (see `docs/design.md`,
//! "Layers", and `docs/layout.md` for the crate graph).
//!
//! The layers are crates, and Cargo keeps them downward only: a crate
//! names only the crates below it; a lower one reaches up only through a
//! `Recipient` of a message defined at its own level.
//!
//! ```text
//! front ends       gahp-session    session (stdin/stdout or a served client: parses lines,
//!                                  answers at once), dispatch (every command's one way down
//!                                  to whoever answers it), runtime (the actors behind a
//!                                  session, over one state directory), tenancy (what a client
//!                                  of `serve` may do)
//!                  gahp-blah       the BLAH_* front end (`grid_resource = batch boinc`)
//! multi-project    gahp-broker     projects (the registry: one tree per URL and
//!                                  authenticator) and pools of projects as one
//! one project      gahp-sequences  that project's work sequences (the relocator)
//!                  gahp-project    one project's actor tree: RpcClient, SubmitPipeline,
//!                                  BatchMonitor, OutputFetcher
//! shared services  gahp-services   state_db, schema (every table), file_stager,
//!                                  result_queue, config, clock, digest, atomic_file, unpack,
//!                                  metrics (and metrics_http, which serves them)
//! ```
//!
//! Every command takes one path: Session ──▶ `dispatch::Dispatch` (one
//! net: a result for every request, once) ──▶ whoever answers: for a
//! project, its ProjectTree (`Run`: RpcClient, BatchMonitor,
//! OutputFetcher, a SubmitPipeline per submit; the tree and beside it the
//! project's SequenceRelocator come from the Registry); for a pool, Pools
//! (`RunOnPool`) ──Run──▶ the chosen project's tree; for a `BLAH_*`
//! command, BlahJobs (`RunBlah`) ──▶ ProjectJobs (on the project's tree).
//! Each answerer has a file per command. Results go to ResultQueue as
//! `Complete`; it asks Session to write. FileStager and StateDb are shared
//! by every project. Each actor lives in its own file (or folder) with its
//! messages beside it.

#![forbid(unsafe_code)]

pub mod dispatch;
pub mod runtime;
pub mod session;
pub mod tenancy;

pub use session::{start_daemon, DaemonHandles};
