//! gahp-chaos: see the library (`cli.rs`) and the README's "Chaos testing".

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    gahp_chaos::cli_main()
}
