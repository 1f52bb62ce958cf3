//! The actix actors of boinc-gahp (see `design.md`, "Actors").
//!
//! ```text
//! Session ──Accept/Drain──▶ ResultQueue ◀──Complete── Projects ──Run──▶ ProjectTree
//!    ▲                          │                                        ├─ RpcClient
//!    └──────────Notify (R)──────┘                                        ├─ BatchMonitor
//!                                                                        ├─ OutputFetcher
//!                                                                        └─ SubmitPipeline (one per submit)
//! FileStager and StateDb are shared by every project (one hash cache).
//!
//! Session ──BlahDispatch──▶ BlahJobs ──▶ BlahProject (one per BOINC project,
//!                              │          on that project's tree: RpcClient,
//!                              └─Complete─▶ ResultQueue   SubmitPipeline)
//! ```
//! Each actor lives in its own file with its messages beside it.

pub mod batch_monitor;
pub mod blah_jobs;
pub mod blah_map;
pub mod blah_outputs;
pub mod blah_project;
pub mod blah_store;
pub mod config;
pub mod file_stager;
pub mod output_fetcher;
pub mod project_tree;
pub mod projects;
pub mod result_queue;
pub mod rpc_client;
pub mod session;
pub mod state_db;
pub mod submit_pipeline;

pub use config::DaemonConfig;
pub use session::{start_daemon, DaemonHandles};
