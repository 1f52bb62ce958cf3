//! `boinc_gahp serve`: one second tier for many first tiers, over TLS,
//! each client proving a token first (see docs/serve.md); and `boinc_gahp
//! token`, how an admin manages those tokens.

pub mod connect;
pub mod dial;
pub mod files;
pub mod relay;
pub mod server;
#[cfg(unix)]
pub mod systemd;
pub mod tokens;

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug, Clone)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum TokenAction {
    /// Adds a client and prints its new token (once: only its hash is kept).
    Add {
        /// The client's name (A-Z a-z 0-9 . _ -), shown in logs and `token list`.
        name: String,
        /// The tokens file `serve --tokens` reads.
        #[arg(long)]
        tokens: PathBuf,
        /// A project the client may use and the file (on this host) whose
        /// first word is the authenticator it uses there; repeatable.
        #[arg(long = "project", value_name = "URL=AUTHFILE", required = true)]
        projects: Vec<String>,
    },
    /// Removes a client: its token no longer works, and a running serve
    /// ends its open connections.
    Revoke {
        name: String,
        #[arg(long)]
        tokens: PathBuf,
    },
    /// The clients: name, creation date, projects (never tokens or
    /// authenticators).
    List {
        #[arg(long)]
        tokens: PathBuf,
    },
}

/// `boinc_gahp token ...`: the token on stdout, everything else on stderr.
pub fn token(args: &TokenArgs) -> ExitCode {
    let done = match &args.action {
        TokenAction::Add { name, tokens, projects } => projects
            .iter()
            .map(|p| tokens::parse_project(p))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|projects| tokens::add(tokens, name, projects))
            .map(|t| {
                println!("{}", t.expose());
                eprintln!("added client {name}: give it the token above; it is not shown again");
            }),
        TokenAction::Revoke { name, tokens } => tokens::revoke(tokens, name).map(|()| eprintln!("revoked client {name}")),
        TokenAction::List { tokens } => tokens::list(tokens).map(|text| print!("{text}")),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("boinc_gahp token: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on, e.g. `0.0.0.0:9630` (port 0: any free port;
    /// the one taken is printed on stderr).
    #[arg(long)]
    pub listen: std::net::SocketAddr,
    /// The server's certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The clients and their tokens (`boinc_gahp token`).
    #[arg(long)]
    pub tokens: PathBuf,
    /// Plain TCP instead of TLS: only on a loopback address.
    #[arg(long)]
    pub insecure_loopback: bool,
    /// Connections open at once, authenticated or not.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Seconds a new connection has for its TLS handshake and its AUTH line.
    #[arg(long, default_value_t = 10.0)]
    pub auth_timeout: f64,
    /// Seconds without a request line before a connection is closed.
    #[arg(long, default_value_t = 3600.0)]
    pub idle_timeout: f64,
    /// Longest request line in bytes (longer ones are answered E).
    #[arg(long, default_value_t = 64 << 20)]
    pub max_line: usize,
    /// Request lines per second per client (a second's worth may come at once).
    #[arg(long, default_value_t = 1000)]
    pub commands_per_sec: u32,
    /// Bytes a client may leave unread before it is disconnected.
    #[arg(long, default_value_t = 256 << 20)]
    pub max_unread_bytes: usize,
    /// Days the files a client sent or has not fetched yet are kept
    /// (fractions allowed); a retired batch's outputs go at once.
    #[arg(long, default_value_t = 30.0)]
    pub keep_files_days: f64,
    /// Serve Prometheus metrics at http://ADDR/metrics (docs/metrics.md),
    /// e.g. `127.0.0.1:9632`; default: the config's `[metrics] listen`,
    /// else none.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

fn secs(flag: &str, v: f64) -> Result<std::time::Duration, String> {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(std::time::Duration::from_secs_f64(v))
    } else {
        Err(format!("{flag}: {v} is not a positive number of seconds"))
    }
}

/// `boinc_gahp serve`: runs until killed.
pub fn serve(flags: &crate::settings::GlobalFlags, args: &ServeArgs) -> ExitCode {
    match serve_inner(flags, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("boinc_gahp serve: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve_inner(flags: &crate::settings::GlobalFlags, args: &ServeArgs) -> Result<(), String> {
    let settings = crate::settings::settings(flags)?;
    let tls = match (&args.tls_cert, &args.tls_key, args.insecure_loopback) {
        (Some(cert), Some(key), false) => Some(server::tls_acceptor(cert, key)?),
        (None, None, true) if args.listen.ip().is_loopback() => None,
        (None, None, true) => return Err(format!("--insecure-loopback: {} is not a loopback address", args.listen.ip())),
        (_, _, true) => return Err("--insecure-loopback and --tls-cert exclude each other".into()),
        _ => return Err("give --tls-cert and --tls-key (or, on loopback only, --insecure-loopback)".into()),
    };
    // Refuse a broken tokens file now, not at the first client.
    tokens::TokensFile::load(&args.tokens, false).map_err(|e| e.to_string())?;
    let limits = server::Limits {
        max_connections: args.max_connections.max(1),
        auth_timeout: secs("--auth-timeout", args.auth_timeout)?,
        idle_timeout: secs("--idle-timeout", args.idle_timeout)?,
        max_line: args.max_line.max(1024),
        commands_per_sec: args.commands_per_sec.max(1),
        max_unread_bytes: args.max_unread_bytes.max(1 << 20),
    };
    // Under systemd the journal takes the log (and rotates it), else the log file.
    #[cfg(unix)]
    let journal = systemd::stderr_is_journal();
    #[cfg(not(unix))]
    let journal = false;
    if journal {
        #[cfg(unix)]
        systemd::init_journal_logging(&settings.daemon.log_level);
    } else {
        crate::settings::init_logging(
            &settings.log_file,
            &settings.daemon.log_level,
            settings.daemon.max_log_files,
            settings.daemon.log_rotation,
        );
    }
    let system = actix_rt::System::new();
    let listener =
        system.block_on(tokio::net::TcpListener::bind(args.listen)).map_err(|e| format!("can't listen on {}: {e}", args.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), %local, tls = tls.is_some(), "boinc_gahp serve starting");
    eprintln!("boinc_gahp serve: listening on {local}");
    if let Some(addr) = args.metrics_listen.or(settings.daemon.metrics.listen) {
        let local = system.block_on(gahp_services::metrics_http::start(addr, false)).map_err(|e| e.to_string())?;
        tracing::info!("metrics at http://{local}/metrics");
    }
    let keep_files = secs("--keep-files-days", args.keep_files_days * 86_400.0)?;
    let server = server::Server { tls, tokens: args.tokens.clone(), base: settings.daemon, limits, keep_files };
    system.block_on(server::run(server, listener));
    Ok(())
}
