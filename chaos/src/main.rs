//! gahp-chaos: see the library (`cli.rs`) and docs/chaos.md.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    gahp_chaos::cli_main()
}
