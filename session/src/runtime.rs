//! The daemon's actors behind a session: result queue, project registry,
//! broker and BLAH front end over one state directory. The stdio daemon
//! builds one; `boinc_gahp serve` one per client.

use std::io;
use std::sync::Arc;

use actix::prelude::*;

use gahp_blah::job_records::{Gathering, JobRecords};
use gahp_blah::jobs::BlahJobs;
use gahp_broker::pools::Pools;
use gahp_broker::registry::{Registry, SetPools};
use gahp_sequences::relocator::PoolLink;
use gahp_services::config::DaemonConfig;
use gahp_services::file_stager::FileStager;
use gahp_services::result_queue::ResultQueue;
use gahp_services::state_db::StateDb;

#[derive(Clone)]
pub struct Runtime {
    pub config: Arc<DaemonConfig>,
    pub queue: Addr<ResultQueue>,
    pub projects: Addr<Registry>,
    pub pools: Addr<Pools>,
    pub blah: Addr<BlahJobs>,
}

/// A state directory opened, its schema brought up to date, and (for a
/// client of `serve`) the results it had not read: the blocking half of
/// starting a runtime, done on a blocking thread by `serve` so that other
/// clients are not kept waiting.
pub struct OpenedState {
    config: Arc<DaemonConfig>,
    db: StateDb,
    queue: ResultQueue,
}

impl OpenedState {
    /// For the stdio daemon. Results not yet read are kept in memory only:
    /// a new stdio daemon serves a gridmanager that has given up on what it
    /// asked the old one, and stored results would answer request ids this
    /// process never accepted (docs/serve.md).
    pub fn open(config: DaemonConfig) -> io::Result<Self> {
        Self::open_with(config, false)
    }

    /// For a client of `boinc_gahp serve`: its unread results are kept in
    /// its state database and come back after a restart.
    pub fn open_served(config: DaemonConfig) -> io::Result<Self> {
        Self::open_with(config, true)
    }

    fn open_with(config: DaemonConfig, durable_results: bool) -> io::Result<Self> {
        let config = Arc::new(config);
        let db = StateDb::open(&config.state_dir, gahp_services::schema::SCHEMA)?;
        gahp_services::metrics::global().watch_state_db(gahp_services::metrics::client_of(&config), &config.state_dir);
        match gahp_sequences::store::sweep_leftovers(&config.state_dir) {
            Ok(0) => {}
            Ok(n) => tracing::info!(files = n, "removed temporary files a killed daemon left in the sequence content store"),
            Err(e) => tracing::warn!("can't sweep the sequence content store: {e}"),
        }
        let queue = match durable_results {
            true => ResultQueue::durable(db.clone()).map_err(io::Error::other)?,
            false => ResultQueue::default(),
        };
        Ok(OpenedState { config, db, queue })
    }
}

impl Runtime {
    /// Opens the state and starts the actors of the stdio daemon; call
    /// inside a running actix System.
    pub fn start(config: DaemonConfig) -> io::Result<Runtime> {
        Self::on(OpenedState::open(config)?)
    }

    /// Starts the actors on an opened state; call inside a running actix
    /// System.
    pub fn on(state: OpenedState) -> io::Result<Runtime> {
        let gathering = Gathering::new(state.config.blah.batch_window, state.config.blah.batch_max_jobs);
        Self::gathering_with(state, gathering)
    }

    /// As [`Runtime::on`], its BLAH jobs gathering into BOINC batches with
    /// those of every runtime handed the same `gathering` (the clients of
    /// one `serve`; jobs of one account share batches).
    pub fn gathering_with(state: OpenedState, gathering: Gathering) -> io::Result<Runtime> {
        let OpenedState { config, db, queue } = state;
        let stager = FileStager::new(db.clone(), config.hash_threads).start();
        let queue = queue.start();
        let projects = Registry::new(config.clone(), stager.clone(), db.clone()).start();
        let pools = Pools::new(config.clone(), projects.clone(), stager.clone(), db.clone()).start();
        projects.do_send(SetPools(PoolLink::to(pools.clone())));
        let blah = BlahJobs::new(config.clone(), projects.clone(), stager, JobRecords::new(db, gathering)?, pools.clone()).start();
        Ok(Runtime { config, queue, projects, pools, blah })
    }
}
