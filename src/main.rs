#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The simulated project's built-in apps run as this executable too.
    #[cfg(feature = "sim")]
    if std::env::args_os().nth(1).as_deref() == Some(boinc_sim::apps::APP_ENTRY_ARG.as_ref()) {
        let args: Vec<_> = std::env::args_os().skip(2).collect();
        std::process::exit(boinc_sim::apps::app_main(&args));
    }
    let cli = boinc_gahp::cli::Cli::parse();
    if cli.version {
        eprintln!("boinc_gahp {} (BOINC GAHP in Rust, GAHP protocol 1.0.2)", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    match &cli.command {
        Some(boinc_gahp::cli::Command::Check(args)) => boinc_gahp::check::run(&cli.flags, args),
        Some(boinc_gahp::cli::Command::RemoteLayout(args)) => boinc_gahp::remote_layout::run(args),
        Some(boinc_gahp::cli::Command::Token(args)) => boinc_gahp::serve::token(args),
        Some(boinc_gahp::cli::Command::Serve(args)) => boinc_gahp::serve::serve(&cli.flags, args),
        Some(boinc_gahp::cli::Command::Connect(args)) => boinc_gahp::serve::connect::run(args),
        // The demo reads no user config: a broken one must not break it.
        #[cfg(feature = "sim")]
        Some(boinc_gahp::cli::Command::Demo(args)) => match boinc_gahp::demo::run(args.clone()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("demo failed: {e}");
                ExitCode::FAILURE
            }
        },
        None => match boinc_gahp::settings::settings(&cli.flags).map_err(|e| {
            eprintln!("boinc_gahp: {e}");
            ExitCode::from(2)
        }) {
            Err(code) => code,
            Ok(settings) => match boinc_gahp::cli::run_daemon(settings) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("boinc_gahp: {e}");
                    ExitCode::FAILURE
                }
            },
        },
    }
}
