//! `boinc-sim`: the simulated BOINC project as a program of its own.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    boinc_sim::cli_main()
}
