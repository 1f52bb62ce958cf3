//! The simulated project's apps and the runner of one instance (one job run
//! by one simulated host).
//!
//! Built-in apps mirror BOINC's examples and really run as separate
//! processes: the sim binary re-executes itself as
//! `[exe, APP_ENTRY_ARG, <app name>, <job args>...]`, and its `main` must
//! hand such invocations to [`app_main`] before anything else (see
//! [`app_entry_from_env`]). An app with its own `command` runs that argv
//! instead. Either way the process runs in a fresh work directory where the
//! inputs carry their logical (open) names and the outputs are expected
//! under theirs, like a BOINC slot directory with `<copy_file/>` file refs.
//!
//! Nothing here goes through a shell: argv only.
//!
//! Here: the apps' definitions and templates. `builtin.rs` runs a built-in
//! app as a process, `stepper.rs` is the `stepper`'s step, `command_line.rs`
//! reads a job's command line as the BOINC client does, and `instance.rs`
//! runs one instance and reports it as the client would.

mod builtin;
mod command_line;
mod instance;
pub mod runner;
mod stepper;

use std::ffi::OsString;
use std::path::Path;

pub(crate) use builtin::AppLog;
pub use builtin::{app_entry_from_env, app_main, app_main_in};
pub use command_line::{
    client_words, split_command_line, wrapper_words, xml_unescape, CLIENT_ARGV_WORDS, WRAPPER_ARGLIST_BYTES, WRAPPER_ARGV_WORDS,
};
pub use instance::{run_instance, run_instance_with, wrap_stderr, InstanceRun};
pub use stepper::{stepper_next, StepError, StepState};

/// The first argument that makes the sim binary act as a built-in app.
pub const APP_ENTRY_ARG: &str = "__boinc_sim_app";

/// The client version written into the instance's `stderr_out`.
pub const CORE_CLIENT_VERSION: &str = "8.0.2";

/// How much of an app's stderr is kept (the tail, like the BOINC client).
pub const STDERR_CAP: usize = 64 * 1024;

/// Exit status reported for an instance killed for running too long
/// (BOINC's `EXIT_TIME_LIMIT_EXCEEDED`).
pub const EXIT_TIME_LIMIT_EXCEEDED: i32 = 197;

/// `rsc_fpops_est` of the built-in apps: with the sim's default host speed
/// (1e10 flops) a job takes 0.1 s of simulated time.
pub const BUILTIN_FPOPS_EST: f64 = 1e9;

/// `rsc_fpops_bound` is this many times `rsc_fpops_est` (as in the stock
/// `uppercase` templates: 1e10 / 1e14).
pub const FPOPS_BOUND_FACTOR: f64 = 1e4;

/// `rsc_memory_bound` and `rsc_disk_bound` written into input templates.
pub const RSC_MEMORY_BOUND: f64 = 1e8;
pub const RSC_DISK_BOUND: f64 = 1e8;
/// `max_nbytes` of each output in output templates.
pub const OUTPUT_MAX_NBYTES: u64 = 5_000_000;

/// An app of the simulated project.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct AppSpec {
    pub name: String,
    /// Input logical (open) names, in template order.
    pub inputs: Vec<String>,
    /// Output logical names, in template order (the index is the `file_num`
    /// of `get_output.php`).
    pub outputs: Vec<String>,
    /// Outputs (logical names) marked `<optional/>` in the output template:
    /// an instance that exits 0 without one still succeeds, as with a real
    /// client; the file is then simply absent on the server.
    #[serde(default)]
    pub optional_outputs: Vec<String>,
    /// argv to run; `None` = the built-in implementation of `name`, run as
    /// `[exe, APP_ENTRY_ARG, name, job args...]`. A custom command runs in
    /// the work directory, where the inputs carry their logical names and
    /// the outputs must be written under theirs; the job's args are appended.
    pub command: Option<Vec<String>>,
    /// The input template leaves out `rsc_fpops_bound`, `rsc_memory_bound`
    /// and `rsc_disk_bound`, so each job's own (its `job_params`) apply: a
    /// value in the template wins over the job's, as on a real server.
    #[serde(default)]
    pub job_bounds: bool,
    pub fpops_est: f64,
    pub delay_bound: f64,
    pub min_quorum: u32,
    pub target_nresults: u32,
    pub max_error_results: u32,
    pub max_total_results: u32,
    pub max_success_results: u32,
}

/// Escapes `&`, `<`, `>` for element text.
fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

impl AppSpec {
    /// An app with the built-in defaults (those of the stock `uppercase`
    /// templates, with `fpops_est` = [`BUILTIN_FPOPS_EST`]).
    pub fn new(name: &str, inputs: &[&str], outputs: &[&str]) -> Self {
        AppSpec {
            name: name.to_string(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            optional_outputs: Vec::new(),
            command: None,
            job_bounds: false,
            fpops_est: BUILTIN_FPOPS_EST,
            delay_bound: 86400.0,
            min_quorum: 1,
            target_nresults: 1,
            max_error_results: 3,
            max_total_results: 5,
            max_success_results: 3,
        }
    }

    /// Whether output `i` (template order) is optional.
    pub fn output_is_optional(&self, i: usize) -> bool {
        self.outputs.get(i).is_some_and(|n| self.optional_outputs.contains(n))
    }

    /// `rsc_fpops_bound`: [`FPOPS_BOUND_FACTOR`] × `fpops_est`.
    pub fn fpops_bound(&self) -> f64 {
        self.fpops_est * FPOPS_BOUND_FACTOR
    }

    /// The bounds the input template fixes: `rsc_fpops_bound`,
    /// `rsc_memory_bound`, `rsc_disk_bound`; `None` for an app with
    /// `job_bounds` (its template has none of them).
    pub fn template_bounds(&self) -> Option<(f64, f64, f64)> {
        (!self.job_bounds).then(|| (self.fpops_bound(), RSC_MEMORY_BOUND, RSC_DISK_BOUND))
    }

    /// The `templates/<app>_in` file, in the layout of a real server's
    /// (ends with a newline; `get_templates` inserts it raw followed by one
    /// more newline).
    pub fn input_template(&self) -> String {
        let mut s = String::from("<input_template>\n");
        for i in 0..self.inputs.len() {
            s.push_str(&format!("    <file_info>\n        <number>{i}</number>\n        <no_delete/>\n    </file_info>\n"));
        }
        s.push_str("    <workunit>\n");
        for (i, name) in self.inputs.iter().enumerate() {
            s.push_str(&format!(
                "        <file_ref>\n            <file_number>{i}</file_number>\n            <open_name>{}</open_name>\n            <copy_file/>\n        </file_ref>\n",
                xml_text(name)
            ));
        }
        s.push_str(&format!("        <rsc_fpops_est>{:e}</rsc_fpops_est>\n", self.fpops_est));
        if let Some((fpops, memory, disk)) = self.template_bounds() {
            s.push_str(&format!(
                "        <rsc_fpops_bound>{fpops:e}</rsc_fpops_bound>\n\
                 \x20       <rsc_memory_bound>{memory:e}</rsc_memory_bound>\n\
                 \x20       <rsc_disk_bound>{disk:e}</rsc_disk_bound>\n"
            ));
        }
        s.push_str(&format!(
            "        <delay_bound>{}</delay_bound>\n\
             \x20       <min_quorum>{}</min_quorum>\n\
             \x20       <target_nresults>{}</target_nresults>\n\
             \x20       <max_error_results>{}</max_error_results>\n\
             \x20       <max_total_results>{}</max_total_results>\n\
             \x20       <max_success_results>{}</max_success_results>\n",
            self.delay_bound,
            self.min_quorum,
            self.target_nresults,
            self.max_error_results,
            self.max_total_results,
            self.max_success_results,
        ));
        s.push_str("    </workunit>\n</input_template>\n");
        s
    }

    /// The `templates/<app>_out` file, in the layout of a real server's
    /// (`<OUTFILE_i/>`, `<UPLOAD_URL/>`; ends with a newline).
    pub fn output_template(&self) -> String {
        let mut s = String::from("<output_template>\n");
        for i in 0..self.outputs.len() {
            s.push_str(&format!(
                "    <file_info>\n        <name><OUTFILE_{i}/></name>\n        <generated_locally/>\n        <upload_when_present/>\n        <max_nbytes>{OUTPUT_MAX_NBYTES}</max_nbytes>\n        <url><UPLOAD_URL/></url>\n    </file_info>\n"
            ));
        }
        s.push_str("    <result>\n");
        for (i, name) in self.outputs.iter().enumerate() {
            // BOINC's FILE_REF: `<optional/>` lets the client finish the
            // task successfully without this file.
            let optional = if self.output_is_optional(i) { "            <optional/>\n" } else { "" };
            s.push_str(&format!(
                "        <file_ref>\n            <file_name><OUTFILE_{i}/></file_name>\n            <open_name>{}</open_name>\n            <copy_file/>\n{optional}        </file_ref>\n",
                xml_text(name)
            ));
        }
        s.push_str("    </result>\n</output_template>\n");
        s
    }

    /// The argv of one run: the built-in entry or `command`, then the job's
    /// args unescaped and split as a BOINC client does ([`client_words`]).
    /// `Err` if `command` is an empty list or the client could not pass the words.
    pub fn argv(&self, exe: &Path, command_line: &str) -> Result<Vec<OsString>, String> {
        let mut argv: Vec<OsString> = match &self.command {
            None => vec![exe.as_os_str().to_owned(), APP_ENTRY_ARG.into(), self.name.clone().into()],
            Some(cmd) if cmd.is_empty() => return Err(format!("app {} has an empty command", self.name)),
            Some(cmd) => cmd.iter().map(OsString::from).collect(),
        };
        argv.extend(client_words(command_line)?.into_iter().map(OsString::from));
        Ok(argv)
    }
}

/// The built-in apps:
///
/// * `uppercase`: `in` → `out`, the input with ASCII letters uppercased
///   (BOINC's `uppercase` example);
/// * `wordcount`: `in` → `counts` (`<word> <count>` lines, sorted by word)
///   and `summary` (`lines N`, `words N`, `bytes N`, like `wc`);
/// * `zipper`: `in` → `results.zip`, a real zip with `upper.txt` (the input
///   uppercased, deflated) and `count.txt` (the summary, stored);
/// * `concat`: `a`, `b` → `out`, the two inputs one after the other;
/// * `stepper`: `state`, `extra` → `state`, `DONE` (both optional): one step
///   of a work sequence, see [`stepper_next`];
/// * `runner`: `condor_exec.exe`, `condor_job.zip` → `condor_out.zip`: runs
///   the job's own executable as `docs/runner.md` says, see
///   [`runner`]. Its template leaves the bounds to the job.
pub fn builtin_apps() -> Vec<AppSpec> {
    let mut stepper = AppSpec::new("stepper", &["state", "extra"], &["state", "DONE"]);
    stepper.optional_outputs = vec!["state".into(), "DONE".into()];
    vec![
        AppSpec::new("uppercase", &["in"], &["out"]),
        AppSpec::new("wordcount", &["in"], &["counts", "summary"]),
        AppSpec::new("zipper", &["in"], &["results.zip"]),
        AppSpec::new("concat", &["a", "b"], &["out"]),
        stepper,
        runner::spec(),
    ]
}

/// The built-in app called `name`, if any.
pub fn builtin_app(name: &str) -> Option<AppSpec> {
    builtin_apps().into_iter().find(|a| a.name == name)
}
