//! boinc-sim: a simulated BOINC project on loopback.
//!
//! It answers the remote-submission URLs of a real BOINC 8.3 project
//! (`submit_rpc_handler.php`, `job_file.php`, `get_output.php`) with the
//! same bytes, keeps its state in SQLite, runs the jobs on simulated
//! volunteer hosts that really execute the app, and injects faults on
//! demand. See `docs/sim.md`.
//!
//! In-process use:
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let opts = boinc_sim::SimOptions::new_default("127.0.0.1:0".parse().unwrap());
//! let sim = boinc_sim::start(opts).await?;
//! println!("{} {}", sim.project_url, sim.authenticator);
//! sim.stop().await;
//! # Ok(()) }
//! ```

pub mod apps;
pub mod cli;
pub mod clock;
pub mod config;
mod ctx;
pub mod faults;
mod files;
mod form;
pub mod hostile;
mod hosts;
mod http;
mod introspect;
mod lifecycle;
pub mod php;
mod project_db;
mod replica;
mod replies;
mod rpc;
mod server_status;
pub mod xmlreq;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use actix_web::{web, App, HttpServer};
use rand::Rng;
use tokio::sync::watch;

pub use cli::cli_main;
pub use config::SimConfig;

use crate::ctx::{Ctx, Dirs};

/// How to run a simulated project.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// State directory (database, file stores); `None` = a temporary
    /// directory removed at stop.
    pub dir: Option<PathBuf>,
    pub config: SimConfig,
    /// Faults in force at start (changeable at run time).
    pub faults: faults::FaultPlan,
    /// The executable that runs the built-in apps when started with
    /// [`apps::APP_ENTRY_ARG`] (its `main` must hand those invocations to
    /// [`apps::app_main`], as [`cli_main`] does).
    pub app_exe: PathBuf,
}

impl SimOptions {
    /// Built-in apps, default hosts, no faults, a temporary directory, the
    /// current executable as app runner.
    pub fn new_default(listen: SocketAddr) -> Self {
        SimOptions {
            listen,
            dir: None,
            config: SimConfig::default(),
            faults: faults::FaultPlan::default(),
            app_exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("boinc-sim")),
        }
    }
}

/// A running simulated project.
pub struct SimHandle {
    /// `http://ADDR/<project>/`, ending with `/`.
    pub project_url: String,
    /// The default user's authenticator (`submit_all`).
    pub authenticator: String,
    pub addr: SocketAddr,
    ctx: Arc<Ctx>,
    server: actix_web::dev::ServerHandle,
    server_task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    stop_tx: watch::Sender<bool>,
    engine: Option<tokio::task::JoinHandle<()>>,
    _tmp: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for SimHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHandle").field("project_url", &self.project_url).field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl SimHandle {
    /// The fault injector (set the plan, read what was injected).
    pub fn faults(&self) -> &faults::Faults {
        &self.ctx.faults
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.ctx.dirs.root
    }

    /// Simulated seconds since the epoch.
    pub fn now(&self) -> f64 {
        self.ctx.clock.now()
    }

    /// Sets the project's web stop flag (RPCs answer -183 "project down
    /// for maintenance").
    pub fn set_web_stopped(&self, stopped: bool) {
        self.ctx.web_stopped.store(stopped, std::sync::atomic::Ordering::SeqCst)
    }

    /// Jumps the simulated clock forward.
    pub fn advance_clock(&self, secs: f64) {
        self.ctx.clock.advance(secs)
    }

    /// Stops serving, stops the hosts (killing running instances) and
    /// saves the clock.
    pub async fn stop(mut self) {
        let _ = self.stop_tx.send(true);
        if let Some(engine) = self.engine.take() {
            let _ = engine.await;
        }
        self.server.stop(false).await;
        if let Some(task) = self.server_task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    /// Without [`SimHandle::stop`]: tells the server and the hosts to stop,
    /// without waiting.
    fn drop(&mut self) {
        if self.engine.is_some() {
            let _ = self.stop_tx.send(true);
            drop(self.server.stop(false));
        }
    }
}

/// 32 random lowercase hex digits, like BOINC's authenticators.
pub fn random_authenticator() -> String {
    let mut rng = rand::thread_rng();
    (0..32).map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap_or('0')).collect()
}

fn other(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Prepares the database: apps, the default user (created with a random
/// authenticator on first start), the configured users. Returns the
/// default user's authenticator.
fn init_db(cfg: &SimConfig, c: &rusqlite::Connection, now: f64) -> project_db::Res<(Vec<ctx::App>, String)> {
    let mut apps = Vec::new();
    for spec in &cfg.apps {
        apps.push(ctx::App { id: project_db::ensure_app(c, &spec.name)?, spec: spec.clone() });
    }
    let default_auth = match project_db::meta_get(c, "default_user_id")?
        .and_then(|v| v.parse::<i64>().ok())
        .map(|id| project_db::user_by_id(c, id))
        .transpose()?
        .flatten()
    {
        Some(u) => u.authenticator,
        None => {
            let auth = random_authenticator();
            let id = project_db::create_user(c, "sim_admin", &auth, now, Some((true, &[])))?;
            project_db::meta_set(c, "default_user_id", &id.to_string())?;
            auth
        }
    };
    for u in &cfg.users {
        if project_db::user_by_name(c, &u.name)?.is_some() {
            continue;
        }
        let auth = u.authenticator.clone().unwrap_or_else(random_authenticator);
        let ids: Vec<i64> = u.apps.iter().filter_map(|n| apps.iter().find(|a| a.spec.name == *n).map(|a| a.id)).collect();
        let submit = (!u.no_submit).then_some((u.submit_all, ids.as_slice()));
        project_db::create_user(c, &u.name, &auth, now, submit)?;
    }
    Ok((apps, default_auth))
}

/// Starts a simulated project; call inside a tokio (actix) runtime. Returns
/// once the socket is bound.
pub async fn start(opts: SimOptions) -> std::io::Result<SimHandle> {
    let cfg = opts.config;
    cfg.validate().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    opts.faults.validate().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;

    let (root, tmp) = match opts.dir {
        Some(d) => {
            std::fs::create_dir_all(&d)?;
            (d, None)
        }
        None => {
            let t = tempfile::Builder::new().prefix("boinc-sim-").tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let dirs = Dirs { download: root.join("download"), upload: root.join("upload"), slots: root.join("slots"), root: root.clone() };
    for d in [&dirs.download, &dirs.upload] {
        std::fs::create_dir_all(d)?;
    }
    // Work directories of a previous run are of no use: its instances are
    // lost and will time out.
    let _ = std::fs::remove_dir_all(&dirs.slots);
    std::fs::create_dir_all(&dirs.slots)?;

    let db = project_db::Store::open(&root.join("sim.db")).map_err(other)?;
    let (apps, authenticator, not_before) = {
        let c = db.lock();
        let not_before = project_db::meta_get(&c, "sim_time").map_err(other)?.and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let (apps, auth) = init_db(&cfg, &c, clock::wall_now().max(not_before)).map_err(other)?;
        (apps, auth, not_before)
    };

    let listener = std::net::TcpListener::bind(opts.listen)?;
    let addr = listener.local_addr()?;
    let project_url = format!("http://{addr}/{}/", cfg.project_name);

    let ctx = Arc::new(Ctx {
        store: db,
        clock: clock::Clock::new(cfg.time_scale, not_before),
        apps,
        dirs,
        faults: faults::Faults::new(opts.faults),
        project_url: project_url.clone(),
        app_exe: opts.app_exe,
        counts: Mutex::new(Default::default()),
        web_stopped: std::sync::atomic::AtomicBool::new(false),
        hosts: Mutex::new(ctx::SimHost::all(&cfg)),
        batch_zip_spoil: Mutex::new(None),
        cfg,
    });

    let data = web::Data::from(ctx.clone());
    let project = ctx.cfg.project_name.clone();
    let server = HttpServer::new(move || {
        let project = project.clone();
        App::new().app_data(data.clone()).configure(move |c| http::routes(c, &project))
    })
    .workers(2)
    // A reply held by a `stall_body` fault watches its client.
    .on_connect(faults::Peer::on_connect)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)?
    .run();
    let server_handle = server.handle();
    let server_task = tokio::spawn(server);

    let (stop_tx, stop_rx) = watch::channel(false);
    let engine = tokio::spawn(hosts::Engine::new(ctx.clone()).run(stop_rx));
    tracing::info!(%project_url, "simulated BOINC project serving");

    Ok(SimHandle {
        project_url,
        authenticator,
        addr,
        ctx,
        server: server_handle,
        server_task: Some(server_task),
        stop_tx,
        engine: Some(engine),
        _tmp: tmp,
    })
}
