//! Writes the man pages `boinc_gahp.1`, `boinc-sim.1` and `gahp-chaos.1`
//! into the directory given as the only argument. The synopsis and options
//! come from each program's clap definition (`src/cli.rs` with
//! `src/settings.rs`, `sim/src/cli.rs`, `chaos/src/cli.rs`), so a page cannot drift from its binary; the
//! sections clap does not model (how HTCondor runs the daemon, its
//! environment and files) are added here.

#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use boinc_gahp::cli::Cli;
use clap::CommandFactory;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

/// A section of paragraphs, each a run of styled pieces.
fn section(roff: &mut Roff, title: &str, paragraphs: Vec<Vec<Inline>>) {
    roff.control("SH", [title]);
    for p in paragraphs {
        roff.control("PP", []);
        roff.text(p);
    }
}

/// A tagged list: each entry a bold term and its description.
fn tagged(roff: &mut Roff, title: &str, entries: &[(&str, &str)]) {
    roff.control("SH", [title]);
    for (term, text) in entries {
        roff.control("TP", []);
        roff.text([bold(*term)]);
        roff.text([roman(*text)]);
    }
}

/// The page of a tool of the boinc-gahp-tools package: what clap knows,
/// and where to read more.
/// A page of this release's manual for `cmd`.
fn page(cmd: clap::Command) -> Man {
    Man::new(cmd.version(env!("CARGO_PKG_VERSION"))).manual("boinc-gahp").source(concat!("boinc-gahp ", env!("CARGO_PKG_VERSION")))
}

fn render_tool(cmd: clap::Command, w: &mut dyn Write) -> io::Result<()> {
    let man = page(cmd);
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    let mut roff = Roff::new();
    section(
        &mut roff,
        "SEE ALSO",
        vec![vec![
            bold("boinc_gahp"),
            roman("(1); the user guide, "),
            italic("docs/"),
            roman(" in the source (its pages simulated-project.md, sim.md and chaos.md)."),
        ]],
    );
    roff.to_writer(w)?;
    man.render_version_section(w)
}

fn render_daemon(w: &mut dyn Write) -> io::Result<()> {
    let cmd = Cli::command();
    let has_subcommands = cmd.get_subcommands().next().is_some();
    let man = page(cmd);
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;

    let mut roff = Roff::new();
    section(
        &mut roff,
        "HTCONDOR",
        vec![
            vec![
                roman("HTCondor's gridmanager starts "),
                bold("boinc_gahp"),
                roman(" with no arguments, as the submitting user, for jobs with "),
                bold("grid_resource = batch boinc"),
                roman(" (HTCondor 10.0 and later) or "),
                bold("grid_resource = boinc"),
                roman(
                    " (HTCondor up to 9.x), and speaks the GAHP line protocol to it on standard input and output. \
                   The program it starts is the one named by the configuration knob ",
                ),
                bold("BOINC_GAHP"),
                roman("; the boinc-gahp package sets it in "),
                italic("/etc/condor/config.d/50-boinc-gahp.conf"),
                roman("."),
            ],
            vec![
                roman("For batch boinc jobs each submitting user names the BOINC project in the "),
                bold("[blah]"),
                roman(" table of "),
                italic("~/.config/boinc-gahp/config.toml"),
                roman(" ("),
                bold("project_url"),
                roman(", "),
                bold("authenticator_file"),
                roman(", optionally "),
                bold("runner_app"),
                roman(" for jobs that send their own executable, "),
                bold("default_app"),
                roman(" or a "),
                bold("pool"),
                roman(" of projects)."),
            ],
        ],
    );
    roff.to_writer(w)?;

    man.render_options_section(w)?;
    // The packaged daemon has none (the demo needs the simulated project).
    if has_subcommands {
        man.render_subcommands_section(w)?;
    }

    let mut roff = Roff::new();
    tagged(
        &mut roff,
        "ENVIRONMENT",
        &[
            ("BOINC_GAHP_CONFIG", "The configuration file, when --config is not given."),
            (
                "GAHP_SSL_CAFILE",
                "A file of trust roots for https projects, added to the built-in ones (the gridmanager passes it when HTCondor has one).",
            ),
            ("GAHP_SSL_CADIR", "A directory of trust-root files, added likewise."),
            ("XDG_STATE_HOME", "The default state directory is $XDG_STATE_HOME/boinc-gahp, else ~/.local/state/boinc-gahp."),
        ],
    );
    tagged(
        &mut roff,
        "FILES",
        &[
            ("~/.config/boinc-gahp/config.toml", "The configuration file when neither --config nor BOINC_GAHP_CONFIG names one. Settings apply in this order, later wins: built-in defaults, the file, the environment, the command line."),
            ("config.txt", "In the working directory: the project URL on line 1 and the authenticator on line 2 select an initial project, as BOINC's C GAHP does. A broken one is logged and ignored."),
            ("~/.local/state/boinc-gahp/", "The durable state (MD5 cache, batch boinc jobs) and the log file boinc_gahp.log, rotated daily."),
            ("/usr/share/doc/boinc-gahp/examples/", "The HTCondor configuration, job router routes, a pool of projects, a configuration file and submit files to start from."),
        ],
    );
    tagged(
        &mut roff,
        "EXIT STATUS",
        &[
            ("0", "Standard input ended or the QUIT command came."),
            ("1", "The daemon could not start, or stopped on an error it cannot go on from; the reason goes to standard error."),
            ("2", "The configuration or a command-line value is invalid; the reason goes to standard error."),
            ("check", "boinc_gahp check exits 0 when every check passed (warnings allowed), 1 when one failed, 2 on a bad command line."),
        ],
    );
    section(&mut roff, "SEE ALSO", vec![vec![bold("condor_submit"), roman("(1), "), bold("condor_q"), roman("(1)")]]);
    roff.to_writer(w)?;
    man.render_version_section(w)
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: boinc-gahp-manpage <output directory>");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    // A fresh checkout has no target/man yet.
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("boinc-gahp-manpage: can't make {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    type Render = Box<dyn Fn(&mut dyn Write) -> io::Result<()>>;
    let pages: [(&str, Render); 3] = [
        ("boinc_gahp.1", Box::new(render_daemon)),
        ("boinc-sim.1", Box::new(|w: &mut dyn Write| render_tool(boinc_sim::cli::Cli::command(), w))),
        ("gahp-chaos.1", Box::new(|w: &mut dyn Write| render_tool(gahp_chaos::cli::Cli::command(), w))),
    ];
    for (page, render) in pages {
        let dest = dir.join(page);
        let written = gahp_services::atomic_file::write_whole(&dest, |f| {
            let mut w = io::BufWriter::new(f);
            render(&mut w)?;
            w.flush()
        });
        if let Err(e) = written {
            eprintln!("boinc-gahp-manpage: can't write {}: {e}", dest.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
