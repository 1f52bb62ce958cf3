//! A built-in app run as a process: the sim binary started with
//! [`APP_ENTRY_ARG`] reads its job args, runs the app in its work
//! directory and logs to stderr as BOINC apps do.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::stepper::{run_stepper, StepArgs};
use super::{builtin_app, AppSpec, APP_ENTRY_ARG};

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

    if name == super::runner::NAME {
        // Every word after the name is the job's own: the runner takes
        // none of the flags below. They reach the job as BOINC's wrapper
        // passes them on.
        let given: Vec<String> = args[1..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let words = super::wrapper_words(&given).map(|w| w.into_iter().map(OsString::from).collect::<Vec<_>>());
        let code = match words.and_then(|words| super::runner::run(dir, &words, &mut lg)) {
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
