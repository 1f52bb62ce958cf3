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

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

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
    /// args unescaped and split as a BOINC client does. `None` if `command` is an empty list.
    pub fn argv(&self, exe: &Path, command_line: &str) -> Option<Vec<OsString>> {
        let mut argv: Vec<OsString> = match &self.command {
            None => vec![exe.as_os_str().to_owned(), APP_ENTRY_ARG.into(), self.name.clone().into()],
            Some(cmd) if cmd.is_empty() => return None,
            Some(cmd) => cmd.iter().map(OsString::from).collect(),
        };
        argv.extend(split_command_line(&xml_unescape(command_line)).into_iter().map(OsString::from));
        Some(argv)
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
///   [`crate::runner`]. Its template leaves the bounds to the job.
pub fn builtin_apps() -> Vec<AppSpec> {
    let mut stepper = AppSpec::new("stepper", &["state", "extra"], &["state", "DONE"]);
    stepper.optional_outputs = vec!["state".into(), "DONE".into()];
    vec![
        AppSpec::new("uppercase", &["in"], &["out"]),
        AppSpec::new("wordcount", &["in"], &["counts", "summary"]),
        AppSpec::new("zipper", &["in"], &["results.zip"]),
        AppSpec::new("concat", &["a", "b"], &["out"]),
        stepper,
        crate::runner::spec(),
    ]
}

/// The built-in app called `name`, if any.
pub fn builtin_app(name: &str) -> Option<AppSpec> {
    builtin_apps().into_iter().find(|a| a.name == name)
}

/// For a binary's `main`: if the process was started as a built-in app
/// (`argv[1] == APP_ENTRY_ARG`), runs it and returns its exit code, which
/// `main` must pass to `std::process::exit` at once. Call it first thing,
/// before parsing the command line or setting up logging.
pub fn app_entry_from_env() -> Option<i32> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a.as_os_str()) == Some(OsStr::new(APP_ENTRY_ARG)) {
        Some(app_main(&args[2..]))
    } else {
        None
    }
}

/// Entry point of a built-in app run as a process: `args` are the words
/// after [`APP_ENTRY_ARG`]: `<app name> [job args...]`. Reads the inputs by
/// their logical names from the current directory, writes the outputs there
/// by their logical names, writes BOINC-style progress lines to stderr and
/// returns the exit code.
///
/// Job args: `--fail N` (exit with code N after the sleep/cpu phases and
/// without writing outputs), `--sleep-ms N` (sleep before working),
/// `--cpu-ms N` (compute until N ms of CPU time are used, before working);
/// for `stepper` also `--end-at K` (write `DONE` once the new counter is
/// at least K) and `--heartbeat` (write no `state`). Unknown words are
/// reported on stderr and ignored. `runner` takes none of these: every
/// word after its name is the job's (see [`crate::runner`]). Exit codes of
/// its own: 0 success, 1 an input could not be read or an output written,
/// 2 usage (unknown app, bad job arg value).
pub fn app_main(args: &[OsString]) -> i32 {
    let stderr = io::stderr();
    let mut log = stderr.lock();
    app_main_in(Path::new("."), args, &mut log)
}

/// [`app_main`] with an explicit directory and stderr sink (for tests and
/// in-process use).
pub fn app_main_in(dir: &Path, args: &[OsString], log: &mut dyn Write) -> i32 {
    let mut lg = AppLog { out: log };
    let Some(name) = args.first().and_then(|a| a.to_str()) else {
        lg.line("usage: <app name> [--fail N] [--sleep-ms N] [--cpu-ms N]");
        return 2;
    };
    let Some(app) = builtin_app(name) else {
        lg.line(&format!("no built-in app named '{}'", name.escape_debug()));
        return 2;
    };
    lg.line(&format!("{name}: app started; argc {}", args.len()));

    if name == crate::runner::NAME {
        // Every word after the name is the job's own: the runner takes
        // none of the flags below.
        let code = match crate::runner::run(dir, &args[1..], &mut lg) {
            Ok(()) => 0,
            Err(msg) => {
                lg.line(&format!("{name}: {msg}"));
                1
            }
        };
        lg.line(&format!("called boinc_finish({code})"));
        return code;
    }

    let mut fail: Option<i32> = None;
    let mut sleep_ms: u64 = 0;
    let mut cpu_ms: u64 = 0;
    let mut step = StepArgs::default();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        let flag = a.as_ref();
        match flag {
            "--heartbeat" => step.heartbeat = true,
            "--fail" | "--sleep-ms" | "--cpu-ms" | "--end-at" => {
                let value = it.next().map(|v| v.to_string_lossy().into_owned());
                let ok = match (flag, value.as_deref()) {
                    ("--fail", Some(v)) => v.parse::<i32>().map(|n| fail = Some(n)).is_ok(),
                    ("--sleep-ms", Some(v)) => v.parse::<u64>().map(|n| sleep_ms = n).is_ok(),
                    ("--cpu-ms", Some(v)) => v.parse::<u64>().map(|n| cpu_ms = n).is_ok(),
                    ("--end-at", Some(v)) => v.parse::<u64>().map(|n| step.end_at = Some(n)).is_ok(),
                    _ => false,
                };
                if !ok {
                    lg.line(&format!("{name}: bad or missing value for {flag}: {:?}", value.unwrap_or_default()));
                    lg.line("called boinc_finish(2)");
                    return 2;
                }
            }
            other => lg.line(&format!("{name}: ignoring unknown argument {other:?}")),
        }
    }

    if sleep_ms > 0 {
        lg.line(&format!("{name}: sleeping {sleep_ms} ms"));
        std::thread::sleep(Duration::from_millis(sleep_ms));
    }
    if cpu_ms > 0 {
        lg.line(&format!("{name}: computing for {cpu_ms} ms"));
        busy_loop(Duration::from_millis(cpu_ms));
    }
    if let Some(code) = fail {
        lg.line(&format!("{name}: failing on request with exit code {code}"));
        lg.line(&format!("called boinc_finish({code})"));
        return code;
    }

    let code = match run_builtin(&app, dir, &step, &mut lg) {
        Ok(()) => 0,
        Err(msg) => {
            lg.line(&format!("{name}: {msg}"));
            1
        }
    };
    lg.line(&format!("called boinc_finish({code})"));
    code
}

/// A built-in app's stderr.
pub(crate) struct AppLog<'a> {
    out: &'a mut dyn Write,
}

impl AppLog<'_> {
    /// `YYYY-MM-DD HH:MM:SS (pid): msg`, as BOINC apps log (UTC here).
    pub(crate) fn line(&mut self, msg: &str) {
        let _ = writeln!(self.out, "{} ({}): {msg}", timestamp(), std::process::id());
        let _ = self.out.flush();
    }
}

fn timestamp() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let rem = secs % 86400;
    let (y, m, d) = crate::php::civil((secs / 86400) as i64);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// CPU time consumed by the calling thread, if the clock is available.
fn thread_cpu_time() -> Option<Duration> {
    // SAFETY: timespec is plain data; clock_gettime only writes into it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a local.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (r == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Computes until this thread has used `d` of CPU time (of wall time if the
/// thread CPU clock is unavailable).
fn busy_loop(d: Duration) {
    let wall = Instant::now();
    let cpu0 = thread_cpu_time();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    loop {
        let used = match (cpu0, thread_cpu_time()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => wall.elapsed(),
        };
        if used >= d {
            break;
        }
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
    }
}

fn read_input(dir: &Path, name: &str, lg: &mut AppLog<'_>) -> Result<Vec<u8>, String> {
    let data = std::fs::read(dir.join(name)).map_err(|e| format!("can't read input file '{name}': {e}"))?;
    lg.line(&format!("read {} bytes from '{name}'", data.len()));
    Ok(data)
}

fn write_output(dir: &Path, name: &str, data: &[u8], lg: &mut AppLog<'_>) -> Result<(), String> {
    std::fs::write(dir.join(name), data).map_err(|e| format!("can't write output file '{name}': {e}"))?;
    lg.line(&format!("wrote {} bytes to '{name}'", data.len()));
    Ok(())
}

/// `lines N\nwords N\nbytes N\n`, with `wc`'s definitions.
fn summary(data: &[u8]) -> String {
    let lines = data.iter().filter(|b| **b == b'\n').count();
    let words = data.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()).count();
    format!("lines {lines}\nwords {words}\nbytes {}\n", data.len())
}

fn run_builtin(app: &AppSpec, dir: &Path, step: &StepArgs, lg: &mut AppLog<'_>) -> Result<(), String> {
    match app.name.as_str() {
        "stepper" => run_stepper(dir, step, lg),
        "uppercase" => {
            let data = read_input(dir, "in", lg)?;
            write_output(dir, "out", &data.to_ascii_uppercase(), lg)
        }
        "wordcount" => {
            let data = read_input(dir, "in", lg)?;
            let mut counts: BTreeMap<&[u8], u64> = BTreeMap::new();
            for w in data.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()) {
                *counts.entry(w).or_insert(0) += 1;
            }
            let mut out = Vec::new();
            for (w, n) in &counts {
                out.extend_from_slice(w);
                out.extend_from_slice(format!(" {n}\n").as_bytes());
            }
            lg.line(&format!("{} distinct words", counts.len()));
            write_output(dir, "counts", &out, lg)?;
            write_output(dir, "summary", summary(&data).as_bytes(), lg)
        }
        "zipper" => {
            let data = read_input(dir, "in", lg)?;
            let zip = make_zip(&[("upper.txt", &data.to_ascii_uppercase(), true), ("count.txt", summary(&data).as_bytes(), false)])
                .map_err(|e| format!("can't build zip: {e}"))?;
            write_output(dir, "results.zip", &zip, lg)
        }
        "concat" => {
            let mut data = read_input(dir, "a", lg)?;
            data.extend(read_input(dir, "b", lg)?);
            write_output(dir, "out", &data, lg)
        }
        other => Err(format!("no implementation for app '{other}'")),
    }
}

/// The `stepper`'s own job args.
#[derive(Debug, Default)]
struct StepArgs {
    /// Write `DONE` when the new counter reaches this.
    end_at: Option<u64>,
    /// Write no `state`: the step only says the work goes on.
    heartbeat: bool,
}

/// FNV-1a 64 offset basis and prime.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Longest state file the stepper accepts (the line is < 64 bytes); more is
/// malformed, and is not read into memory.
const STATE_MAX_BYTES: u64 = 4096;

/// Why a stepper state could not be advanced.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("malformed state {0:?}: want \"counter <n> checksum <16 lowercase hex>\\n\" or nothing")]
    Malformed(String),
    #[error("state counter {0} can't be advanced")]
    Overflow(u64),
    #[error("reading extra: {0}")]
    Extra(#[from] io::Error),
}

/// A `stepper` state: how many steps ran, and the running checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepState {
    pub counter: u64,
    pub checksum: u64,
}

impl StepState {
    /// Parses a state file's text: empty = the initial state (0, 0);
    /// otherwise exactly `counter <n> checksum <16 lowercase hex>` and an
    /// optional final newline.
    pub fn parse(text: &str) -> Result<StepState, StepError> {
        if text.is_empty() {
            return Ok(StepState::default());
        }
        let bad = || {
            let shown: String = text.chars().take(80).collect();
            StepError::Malformed(shown)
        };
        let line = text.strip_suffix('\n').unwrap_or(text);
        let mut words = line.split(' ');
        let (Some("counter"), Some(n), Some("checksum"), Some(h), None) =
            (words.next(), words.next(), words.next(), words.next(), words.next())
        else {
            return Err(bad());
        };
        let digits = |s: &str, ok: fn(u8) -> bool| !s.is_empty() && s.bytes().all(ok);
        if !digits(n, |b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
            return Err(bad());
        }
        if h.len() != 16 || !digits(h, |b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        let counter = n.parse().map_err(|_| bad())?;
        let checksum = u64::from_str_radix(h, 16).map_err(|_| bad())?;
        Ok(StepState { counter, checksum })
    }

    /// The state file's text: `counter <n> checksum <16 hex>\n`.
    pub fn line(&self) -> String {
        format!("counter {} checksum {:016x}\n", self.counter, self.checksum)
    }

    /// The next state: counter + 1, checksum = FNV-1a 64 over
    /// `<old checksum hex> <new counter>\n` then every byte of `extra`,
    /// read in chunks (a huge `extra` needs no memory of its size).
    pub fn next_from(&self, mut extra: impl io::Read) -> Result<StepState, StepError> {
        let counter = self.counter.checked_add(1).ok_or(StepError::Overflow(self.counter))?;
        let mut h = fnv1a64(FNV_OFFSET, format!("{:016x} {counter}\n", self.checksum).as_bytes());
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match extra.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => h = fnv1a64(h, &buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(StepState { counter, checksum: h })
    }
}

/// FNV-1a 64 of `data`, continuing from `hash` (start with the offset
/// basis).
fn fnv1a64(mut hash: u64, data: &[u8]) -> u64 {
    for &b in data {
        hash ^= b as u64;
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// One `stepper` step on a state file's text and the `extra` input: the
/// next state file's text. Pure; both the sim's app and the tests (here
/// and in the daemon) compute expected sequences with it.
pub fn stepper_next(state: &str, extra: &[u8]) -> Result<String, StepError> {
    Ok(StepState::parse(state)?.next_from(extra)?.line())
}

/// Writes `data` to `dir/name` whole: a temporary file, then a rename.
fn write_output_whole(dir: &Path, name: &str, data: &[u8], lg: &mut AppLog<'_>) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("can't write output file '{name}': {e}");
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| fail(&e))?;
    tmp.write_all(data).map_err(|e| fail(&e))?;
    tmp.persist(dir.join(name)).map_err(|e| fail(&e.error))?;
    lg.line(&format!("wrote {} bytes to '{name}'", data.len()));
    Ok(())
}

/// `stepper`: reads `state` (at most [`STATE_MAX_BYTES`]) and streams
/// `extra`; removes the input `state` from the work directory (input and
/// output share the name, and a heartbeat must leave no `state` behind);
/// writes the new `state` unless `--heartbeat`, and `DONE` (the new state
/// line) once the counter reaches `--end-at`.
fn run_stepper(dir: &Path, step: &StepArgs, lg: &mut AppLog<'_>) -> Result<(), String> {
    use std::io::Read;
    let path = dir.join("state");
    let f = std::fs::File::open(&path).map_err(|e| format!("can't read input file 'state': {e}"))?;
    let mut raw = Vec::new();
    f.take(STATE_MAX_BYTES + 1).read_to_end(&mut raw).map_err(|e| format!("can't read input file 'state': {e}"))?;
    if raw.len() as u64 > STATE_MAX_BYTES {
        return Err(format!("input file 'state' is over {STATE_MAX_BYTES} bytes: not a stepper state"));
    }
    let text = String::from_utf8(raw).map_err(|_| "input file 'state' is not text: not a stepper state".to_string())?;
    let old = StepState::parse(&text).map_err(|e| format!("input file 'state': {e}"))?;
    lg.line(&format!("state in: counter {} checksum {:016x}", old.counter, old.checksum));
    let extra = std::fs::File::open(dir.join("extra")).map_err(|e| format!("can't read input file 'extra': {e}"))?;
    let new = old.next_from(io::BufReader::new(extra)).map_err(|e| format!("input file 'extra': {e}"))?;
    std::fs::remove_file(&path).map_err(|e| format!("can't remove input file 'state': {e}"))?;
    let line = new.line();
    if step.heartbeat {
        lg.line(&format!("heartbeat: counter {} (no state written)", new.counter));
    } else {
        write_output_whole(dir, "state", line.as_bytes(), lg)?;
    }
    if step.end_at.is_some_and(|k| new.counter >= k) {
        lg.line(&format!("counter {} reached the end: writing DONE", new.counter));
        write_output_whole(dir, "DONE", line.as_bytes(), lg)?;
    }
    Ok(())
}

fn make_zip(entries: &[(&str, &[u8], bool)]) -> zip::result::ZipResult<Vec<u8>> {
    use zip::write::SimpleFileOptions;
    use zip::CompressionMethod;
    let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
    for (name, data, deflate) in entries {
        let method = if *deflate { CompressionMethod::Deflated } else { CompressionMethod::Stored };
        w.start_file(*name, SimpleFileOptions::default().compression_method(method))?;
        w.write_all(data)?;
    }
    Ok(w.finish()?.into_inner())
}

/// BOINC's `xml_unescape()`, which the client applies to a workunit's
/// `<command_line>` before splitting it: `&lt;` `&gt;` `&quot;` `&apos;`
/// `&amp;`, `&#xA;` and `&#xD;`, and `&#` followed by a decimal number read
/// with C's `atoi` into one `char` (so `&#39;` is `'`; a number past 127 is
/// not a character here and is kept as written). Anything else is kept.
pub fn xml_unescape(s: &str) -> String {
    const NAMED: [(&str, char); 9] = [
        ("&lt;", '<'),
        ("&gt;", '>'),
        ("&quot;", '"'),
        ("&apos;", '\''),
        ("&amp;", '&'),
        ("&#xA;", '\n'),
        ("&#xa;", '\n'),
        ("&#xD;", '\r'),
        ("&#xd;", '\r'),
    ];
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some((e, c)) = NAMED.iter().find(|(e, _)| rest.starts_with(e)) {
            out.push(*c);
            rest = &rest[e.len()..];
            continue;
        }
        if let Some(num) = rest.strip_prefix("&#") {
            let digits = num.len() - num.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            if let Some(c) = num[..digits].parse::<u8>().ok().filter(|n| (1..=127).contains(n)).map(char::from) {
                out.push(c);
                // Past the `;` if there is one, else past the digits.
                rest = match num.find(';') {
                    Some(semi) => &num[semi + 1..],
                    None => &num[digits..],
                };
                continue;
            }
        }
        out.push('&');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// Splits a job's command line into words as BOINC's `parse_command_line`
/// does: runs of whitespace separate words; a word that *starts* with `"`
/// or `'` extends to the next identical quote (which may enclose
/// whitespace); the character right after the opening quote is taken into
/// the word unlooked-at, so `''` does not close (seen on a real server: it
/// swallows the rest of the line); a quote elsewhere is an ordinary
/// character; the character after a closing quote starts a new word; an
/// unclosed quote extends to the end. No escapes.
pub fn split_command_line(s: &str) -> Vec<String> {
    enum State {
        Between,
        /// Just past an opening quote: the next character is the word's.
        Opened(char),
        Quoted(char),
        Unquoted,
    }
    // C's isspace in the "C" locale.
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r');
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut state = State::Between;
    for c in s.chars() {
        match state {
            State::Between => {
                if is_space(c) {
                } else if c == '\'' || c == '"' {
                    state = State::Opened(c);
                } else {
                    cur.push(c);
                    state = State::Unquoted;
                }
            }
            State::Opened(q) => {
                cur.push(c);
                state = State::Quoted(q);
            }
            State::Quoted(q) => {
                if c == q {
                    words.push(std::mem::take(&mut cur));
                    state = State::Between;
                } else {
                    cur.push(c);
                }
            }
            State::Unquoted => {
                if is_space(c) {
                    words.push(std::mem::take(&mut cur));
                    state = State::Between;
                } else {
                    cur.push(c);
                }
            }
        }
    }
    if !matches!(state, State::Between) {
        words.push(cur);
    }
    words
}

/// The `stderr_out` an instance reports, as a BOINC client stores it:
///
/// ```text
/// ⏎<core_client_version>8.0.2</core_client_version>⏎<![CDATA[⏎
/// [<message>⏎MESSAGE</message>⏎]<stderr_txt>⏎APP-STDERR⏎</stderr_txt>⏎]]>⏎
/// ```
///
/// (the leading newline is there in real servers' databases too). The
/// `<message>` block is the client's own note on a failure.
pub fn wrap_stderr(app_stderr: &str, message: Option<&str>) -> String {
    let mut s = format!("\n<core_client_version>{CORE_CLIENT_VERSION}</core_client_version>\n<![CDATA[\n");
    if let Some(m) = message {
        s.push_str(&format!("<message>\n{m}</message>\n"));
    }
    s.push_str(&format!("<stderr_txt>\n{app_stderr}\n</stderr_txt>\n]]>\n"));
    s
}

/// What one run of an instance gave.
#[derive(Debug, Clone)]
pub struct InstanceRun {
    /// The process's exit code (0..=255); for a process killed by a signal,
    /// the raw wait status (as the BOINC client reports it); for a run
    /// killed at the timeout, [`EXIT_TIME_LIMIT_EXCEEDED`].
    pub exit_status: i32,
    /// BOINC-wrapped stderr, see [`wrap_stderr`]. On failure a `<message>`
    /// says why (`process exited with code N (0xN, -M)`, `process got
    /// signal N`, `exceeded elapsed time limit S`).
    pub stderr: String,
    /// By output index: the file in the work directory, or `None` if the
    /// app did not create it as a regular file.
    pub outputs: Vec<Option<PathBuf>>,
    /// Real elapsed time from spawn to exit.
    pub wall_secs: f64,
    /// Real CPU time (user + system) of the process and the children it
    /// waited for, from `wait4`'s rusage.
    pub cpu_secs: f64,
    /// Whether it was killed at the timeout.
    pub timed_out: bool,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// A logical name must be a plain file name in the work directory.
fn check_logical_name(kind: &str, name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(invalid(format!("bad {kind} logical name {name:?}")));
    }
    Ok(())
}

/// Kills and reaps the child if the run is abandoned (future dropped).
struct ChildGuard {
    pid: libc::pid_t,
    reaped: bool,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.reaped {
            let pid = self.pid;
            // SAFETY: plain syscalls on our own unreaped child and its group.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
            std::thread::spawn(move || {
                let mut status = 0;
                // SAFETY: reaping our own child; blocks only until it dies.
                unsafe { libc::waitpid(pid, &mut status, 0) };
            });
        }
    }
}

/// Whether our child `pid` has ended, without reaping it: until it is
/// reaped, its pid and process group id stay reserved, so signalling them is
/// safe.
fn has_exited(pid: libc::pid_t) -> io::Result<bool> {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a local; pid is our unreaped child.
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
        if r == 0 {
            // SAFETY: waitid filled `info` (si_pid is 0 if nothing ended).
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps our ended child: its wait status and CPU seconds (user + system,
/// from `wait4`'s rusage).
fn reap(pid: libc::pid_t) -> io::Result<(libc::c_int, f64)> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain data; zeroed is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals; pid is our child, already ended.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return Ok((status, tv(ru.ru_utime) + tv(ru.ru_stime)));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads `r` to EOF into `buf`, keeping only the last [`STDERR_CAP`] bytes.
async fn read_tail<R: tokio::io::AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > 2 * STDERR_CAP {
                    buf.drain(..buf.len() - STDERR_CAP);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Runs one instance of `app`.
///
/// Creates `workdir` (and its parents), copies each of `inputs` to it under
/// the app's input logical names (in order; the count must match), runs the
/// app's argv (see [`AppSpec::argv`]; `exe` is the binary that dispatches
/// [`APP_ENTRY_ARG`], normally the current executable) with the job's
/// `command_line` split by [`split_command_line`], in `workdir`, in a process
/// group of its own, no shell, stdin null, stdout discarded, stderr captured
/// (its last [`STDERR_CAP`] bytes). After `timeout` of wall time the whole
/// process group is killed. When the app exits, any process it left in its
/// group is killed too.
///
/// `Err` only when the instance could not be started (bad logical names,
/// input copy failed, the program could not be executed); any outcome of a
/// started process is an `Ok(InstanceRun)`.
pub async fn run_instance(
    app: &AppSpec,
    exe: &Path,
    command_line: &str,
    inputs: &[PathBuf],
    workdir: &Path,
    timeout: Duration,
) -> io::Result<InstanceRun> {
    run_instance_with(app, exe, command_line, inputs, workdir, timeout, None).await
}

/// [`run_instance`], with the client's message for a run killed at
/// `timeout` (default: `exceeded elapsed time limit <timeout>`).
pub async fn run_instance_with(
    app: &AppSpec,
    exe: &Path,
    command_line: &str,
    inputs: &[PathBuf],
    workdir: &Path,
    timeout: Duration,
    timeout_message: Option<String>,
) -> io::Result<InstanceRun> {
    use std::os::unix::process::CommandExt;

    if inputs.len() != app.inputs.len() {
        return Err(invalid(format!("app {} takes {} input file(s), {} given", app.name, app.inputs.len(), inputs.len())));
    }
    for n in &app.inputs {
        check_logical_name("input", n)?;
    }
    for n in &app.outputs {
        check_logical_name("output", n)?;
    }
    let argv = app.argv(exe, command_line).ok_or_else(|| invalid(format!("app {} has an empty command", app.name)))?;

    tokio::fs::create_dir_all(workdir).await?;
    for (src, name) in inputs.iter().zip(&app.inputs) {
        let dst = workdir.join(name);
        // A copy, not a link: the app may modify its input in place.
        let _ = tokio::fs::remove_file(&dst).await;
        tokio::fs::copy(src, &dst)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("copying input {} to {name}: {e}", src.display())))?;
    }

    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(workdir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("starting {}: {e}", Path::new(&argv[0]).display())))?;
    let pid = child.id() as libc::pid_t;
    let mut guard = ChildGuard { pid, reaped: false };
    tracing::debug!(app = %app.name, pid, workdir = %workdir.display(), "instance started");

    let mut stderr_buf = Vec::new();
    let mut stderr_pipe = match child.stderr.take() {
        Some(p) => Some(tokio::process::ChildStderr::from_std(p)?),
        None => None,
    };

    let deadline = start + timeout;
    let mut timed_out = false;
    let wall_secs;
    let (status, cpu_secs) = {
        let reader = async {
            if let Some(p) = stderr_pipe.as_mut() {
                read_tail(p, &mut stderr_buf).await;
            }
        };
        tokio::pin!(reader);
        let mut reader_done = false;
        let mut poll = Duration::from_millis(1);
        let reaped = loop {
            if has_exited(pid)? {
                // Whatever the app left behind in its group goes too (the
                // ended leader, not yet reaped, keeps the group id ours).
                // SAFETY: plain syscall on our own process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let r = reap(pid)?;
                guard.reaped = true;
                break r;
            }
            let now = Instant::now();
            if !timed_out && now >= deadline {
                timed_out = true;
                tracing::debug!(app = %app.name, pid, "instance timed out; killing its group");
                // SAFETY: our unreaped child (and its group): the pid cannot
                // have been reused.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            let mut nap = poll;
            if !timed_out {
                nap = nap.min(deadline.saturating_duration_since(now));
            }
            tokio::select! {
                _ = &mut reader, if !reader_done => reader_done = true,
                _ = tokio::time::sleep(nap) => poll = (poll * 2).min(Duration::from_millis(20)),
            }
        };
        wall_secs = start.elapsed().as_secs_f64();
        if !reader_done {
            // A process that left the group may still hold the pipe.
            let _ = tokio::time::timeout(Duration::from_millis(500), &mut reader).await;
        }
        reaped
    };
    drop(child);

    if stderr_buf.len() > STDERR_CAP {
        stderr_buf.drain(..stderr_buf.len() - STDERR_CAP);
    }
    let app_stderr = String::from_utf8_lossy(&stderr_buf);

    let (exit_status, message) = if timed_out {
        let msg = timeout_message.unwrap_or_else(|| format!("exceeded elapsed time limit {:.2}", timeout.as_secs_f64()));
        (EXIT_TIME_LIMIT_EXCEEDED, Some(msg))
    } else if libc::WIFEXITED(status) {
        let c = libc::WEXITSTATUS(status);
        let msg = (c != 0).then(|| format!("process exited with code {c} ({c:#x}, {})", c - 256));
        (c, msg)
    } else if libc::WIFSIGNALED(status) {
        (status, Some(format!("process got signal {}", libc::WTERMSIG(status))))
    } else {
        (status, Some(format!("process ended with status {status}")))
    };

    let mut outputs = Vec::with_capacity(app.outputs.len());
    for name in &app.outputs {
        let p = workdir.join(name);
        let is_file = tokio::fs::symlink_metadata(&p).await.map(|m| m.file_type().is_file()).unwrap_or(false);
        outputs.push(is_file.then_some(p));
    }

    tracing::debug!(app = %app.name, pid, exit_status, timed_out, wall_secs, cpu_secs, "instance ended");
    Ok(InstanceRun { exit_status, stderr: wrap_stderr(&app_stderr, message.as_deref()), outputs, wall_secs, cpu_secs, timed_out })
}
