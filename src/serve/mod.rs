//! `boinc_gahp serve`: one second tier for many first tiers, over TLS,
//! each client proving a token first (see docs/serve.md); and `boinc_gahp
//! token`, how an admin manages those tokens.

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
