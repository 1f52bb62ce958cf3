//! The built-in `runner` app: it runs the executable a job brings, as
//! `docs/runner.md` says and as a volunteer host running BOINC's `wrapper`
//! would. In the work directory, where `condor_exec.exe` and
//! `condor_job.zip` are:
//!
//! 1. unpack `condor_job.zip` (refusing `..`, absolute paths and links),
//!    delete it, and note every path there is;
//! 2. run `./condor_exec.exe` with the job's args (argv, no shell), the
//!    variables of `_condor_env` added to its environment, stdin from
//!    `_condor_stdin` (or nothing), stdout to `_condor_stdout`, stderr to
//!    `_condor_stderr`;
//! 3. write its exit code (or `signal N`) to `_condor_exit_code`;
//! 4. zip every regular file that is new since step 1 into `condor_out.zip`.
//!
//! The runner succeeds whatever the job's exit code, so that the outputs of
//! a failed job come back too; it fails (exit 1) only when it can't do its
//! own part. It takes no flags: every arg is the job's.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use super::{AppLog, AppSpec};

/// The app's name.
pub const NAME: &str = "runner";
/// Input 0: the job's executable.
pub const EXEC: &str = "condor_exec.exe";
/// Input 1: everything else the job brings.
pub const JOB_ZIP: &str = "condor_job.zip";
/// Output 0: what the job made.
pub const OUT_ZIP: &str = "condor_out.zip";
/// In the job zip: the job's environment, `NAME=VALUE` lines.
pub const ENV_FILE: &str = "_condor_env";
/// In the job zip: the job's stdin.
pub const STDIN_FILE: &str = "_condor_stdin";
/// Made by the runner: the job's stdout, stderr and exit code.
pub const STDOUT_FILE: &str = "_condor_stdout";
pub const STDERR_FILE: &str = "_condor_stderr";
pub const EXIT_CODE_FILE: &str = "_condor_exit_code";

/// How often a spawn that meets "text file busy" is tried: a process forked
/// elsewhere may briefly hold the executable open for writing.
const SPAWN_TRIES: u32 = 20;

/// File type bits of a zip entry's unix mode.
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

/// The `runner` app: two inputs and one output by the contract's names.
/// Its input template leaves the bounds out (`job_bounds`): the daemon
/// passes each batch's own, and a template value would win over them.
pub fn spec() -> AppSpec {
    let mut app = AppSpec::new(NAME, &[EXEC, JOB_ZIP], &[OUT_ZIP]);
    app.job_bounds = true;
    app
}

/// Runs the job in `dir` with `args` (the words after the app name).
/// `Err` says why the runner could not do its part; the job's own failure
/// is an `Ok`.
pub(crate) fn run(dir: &Path, args: &[OsString], lg: &mut AppLog<'_>) -> Result<(), String> {
    // Absolute, so that the executable's path does not depend on when the
    // child changes directory.
    let dir = dir.canonicalize().map_err(|e| format!("can't open the work directory {}: {e}", dir.display()))?;
    let exe = dir.join(EXEC);
    match fs::symlink_metadata(&exe) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(format!("{EXEC} is not a regular file")),
        Err(e) => return Err(format!("no {EXEC} in the work directory: {e}")),
    }

    let entries = unpack(&dir)?;
    lg.line(&format!("{NAME}: unpacked {entries} entries from {JOB_ZIP}"));
    // As BOINC's wrapper does: the zip is not the job's.
    fs::remove_file(dir.join(JOB_ZIP)).map_err(|e| format!("can't delete {JOB_ZIP}: {e}"))?;
    let before: BTreeSet<PathBuf> =
        walk(&dir).map_err(|e| format!("can't list the work directory: {e}"))?.into_iter().map(|(p, _)| p).collect();

    let env = read_env(&dir)?;
    make_executable(&exe)?;
    lg.line(&format!("{NAME}: running {EXEC} with {} argument(s), {} variable(s) from {ENV_FILE}", args.len(), env.len()));
    let status = run_job(&dir, &exe, args, &env)?;
    let code = exit_code_text(status);
    match status.code() {
        Some(c) => lg.line(&format!("{NAME}: {EXEC} exited with code {c}")),
        None => lg.line(&format!("{NAME}: {EXEC} ended: {code}")),
    }
    fs::write(dir.join(EXIT_CODE_FILE), &code).map_err(|e| format!("can't write {EXIT_CODE_FILE}: {e}"))?;

    // As BOINC's wrapper does (its zip_output scans the slot's top level,
    // and a directory would fail its zip): new top-level files only; a
    // directory the job made is not returned (deploy/boinc-runner parks it).
    let mut new = Vec::new();
    for (p, ft) in walk(&dir).map_err(|e| format!("can't list the work directory: {e}"))? {
        let top = p.components().count() == 1;
        // The runner's own output name is not the job's.
        if top && !before.contains(&p) && p != Path::new(OUT_ZIP) {
            if ft.is_file() {
                new.push(p);
            } else {
                lg.line(&format!("{NAME}: not returned (not a file): {}", p.display()));
            }
        }
    }
    let n = write_out_zip(&dir, &new, lg)?;
    lg.line(&format!("{NAME}: wrote {n} file(s) to {OUT_ZIP}"));
    Ok(())
}

/// `_condor_exit_code`'s text: the exit code in decimal, or `signal N`.
fn exit_code_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("signal {s}"),
        // Neither exited nor signalled (can't be, with wait): the raw status.
        (None, None) => status.into_raw().to_string(),
    }
}

/// A zip entry's name as a relative path in the work directory, or why it
/// is refused.
fn entry_path(name: &str) -> Result<PathBuf, &'static str> {
    if name.contains('\0') {
        return Err("a NUL in its name");
    }
    if name.starts_with('/') {
        return Err("an absolute path");
    }
    let mut p = PathBuf::new();
    for part in name.split('/') {
        match part {
            ".." => return Err("a `..` component"),
            "" | "." => {}
            _ => p.push(part),
        }
    }
    Ok(p)
}

/// Unpacks `condor_job.zip` into `dir`; returns how many entries it had.
fn unpack(dir: &Path) -> Result<usize, String> {
    let bad = |e: &dyn std::fmt::Display| format!("{JOB_ZIP} is damaged: {e}");
    let f = File::open(dir.join(JOB_ZIP)).map_err(|e| format!("can't open {JOB_ZIP}: {e}"))?;
    let mut z = zip::ZipArchive::new(io::BufReader::new(f)).map_err(|e| bad(&e))?;
    for i in 0..z.len() {
        let mut entry = z.by_index(i).map_err(|e| bad(&e))?;
        let name = entry.name().to_string();
        let refuse = |why: &str| format!("{JOB_ZIP}: refusing entry {name:?}: {why}");
        let rel = entry_path(&name).map_err(refuse)?;
        let kind = entry.unix_mode().map(|m| m & S_IFMT).filter(|k| *k != 0);
        if kind == Some(S_IFLNK) {
            return Err(refuse("a link"));
        }
        let target = dir.join(&rel);
        if entry.is_dir() {
            if kind.is_some_and(|k| k != S_IFDIR) {
                return Err(refuse("not a directory"));
            }
            fs::create_dir_all(&target).map_err(|e| refuse(&format!("can't make the directory: {e}")))?;
            continue;
        }
        if kind.is_some_and(|k| k != S_IFREG) {
            return Err(refuse("not a regular file"));
        }
        if rel.as_os_str().is_empty() {
            return Err(refuse("an empty name"));
        }
        if [EXEC, JOB_ZIP, OUT_ZIP].iter().any(|n| rel == Path::new(n)) {
            return Err(refuse("it would replace the runner's own file"));
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(|e| refuse(&format!("can't make its directory: {e}")))?;
        }
        // Never write through a link or into a directory already there.
        if fs::symlink_metadata(&target).is_ok_and(|m| !m.is_file()) {
            return Err(refuse("something that is not a file is already there"));
        }
        let mut out = File::create(&target).map_err(|e| refuse(&format!("can't create it: {e}")))?;
        io::copy(&mut entry, &mut out).map_err(|e| refuse(&format!("can't unpack it: {e}")))?;
        if let Some(mode) = entry.unix_mode() {
            // Its permission bits (a helper script stays executable), and
            // always readable and writable by the job.
            let perm = fs::Permissions::from_mode((mode & 0o777) | 0o600);
            fs::set_permissions(&target, perm).map_err(|e| refuse(&format!("can't set its mode: {e}")))?;
        }
    }
    Ok(z.len())
}

/// Every path under `dir` (relative, sorted) with its type; links are not
/// followed.
fn walk(dir: &Path) -> io::Result<Vec<(PathBuf, fs::FileType)>> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in fs::read_dir(dir.join(&rel))? {
            let e = e?;
            let ft = e.file_type()?;
            let p = rel.join(e.file_name());
            if ft.is_dir() {
                todo.push(p.clone());
            }
            out.push((p, ft));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The variables of `_condor_env`: `NAME=VALUE` lines, empty lines skipped.
/// Values are not quoted in errors (they may be secrets).
fn read_env(dir: &Path) -> Result<Vec<(OsString, OsString)>, String> {
    let data = match fs::read(dir.join(ENV_FILE)) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("can't read {ENV_FILE}: {e}")),
    };
    let mut vars = Vec::new();
    for (i, line) in data.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let bad = |why: &str| format!("{ENV_FILE} line {}: {why}", i + 1);
        if line.contains(&0) {
            return Err(bad("a NUL byte"));
        }
        let Some(eq) = line.iter().position(|b| *b == b'=') else {
            return Err(bad("no '=' (want NAME=VALUE)"));
        };
        if eq == 0 {
            return Err(bad("an empty variable name"));
        }
        vars.push((OsStr::from_bytes(&line[..eq]).to_owned(), OsStr::from_bytes(&line[eq + 1..]).to_owned()));
    }
    Ok(vars)
}

/// Sets the executable bits (BOINC copies inputs without their modes).
fn make_executable(exe: &Path) -> Result<(), String> {
    let fail = |e: io::Error| format!("can't make {EXEC} executable: {e}");
    let mode = fs::metadata(exe).map_err(fail)?.permissions().mode();
    fs::set_permissions(exe, fs::Permissions::from_mode(mode | 0o755)).map_err(fail)
}

/// Runs the job's executable (argv only: no shell, not even for a file the
/// kernel can't execute) and waits for it.
fn run_job(dir: &Path, exe: &Path, args: &[OsString], env: &[(OsString, OsString)]) -> Result<ExitStatus, String> {
    let stdin = match File::open(dir.join(STDIN_FILE)) {
        Ok(f) => Stdio::from(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Stdio::null(),
        Err(e) => return Err(format!("can't open {STDIN_FILE}: {e}")),
    };
    let stdout = File::create(dir.join(STDOUT_FILE)).map_err(|e| format!("can't create {STDOUT_FILE}: {e}"))?;
    let stderr = File::create(dir.join(STDERR_FILE)).map_err(|e| format!("can't create {STDERR_FILE}: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v))).current_dir(dir).stdin(stdin).stdout(stdout).stderr(stderr);
    let mut tries = 0;
    let mut child = loop {
        match cmd.spawn() {
            Ok(c) => break c,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries + 1 < SPAWN_TRIES => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10 * u64::from(tries)));
            }
            Err(e) => return Err(format!("can't run {EXEC}: {e}")),
        }
    };
    child.wait().map_err(|e| format!("can't wait for {EXEC}: {e}"))
}

/// Zips `files` (relative to `dir`, sorted) into `condor_out.zip`, whole:
/// a temporary file, then a rename. Deterministic bytes (fixed times), so
/// replicas of one job agree. Returns how many files went in.
fn write_out_zip(dir: &Path, files: &[PathBuf], lg: &mut AppLog<'_>) -> Result<usize, String> {
    use zip::write::SimpleFileOptions;
    let fail = |e: &dyn std::fmt::Display| format!("can't write {OUT_ZIP}: {e}");
    let tmp = tempfile::Builder::new().prefix(".condor_out.zip.").tempfile_in(dir).map_err(|e| fail(&e))?;
    let mut w = zip::ZipWriter::new(io::BufWriter::new(tmp.as_file()));
    let mut n = 0;
    for rel in files {
        // Zip names are text: a name that is not UTF-8 can't be carried.
        let Some(name) = rel.to_str() else {
            lg.line(&format!("{NAME}: leaving out {:?}: its name is not UTF-8", rel.as_os_str()));
            continue;
        };
        let add = |e: &dyn std::fmt::Display| format!("can't add {name:?} to {OUT_ZIP}: {e}");
        let mut f = File::open(dir.join(rel)).map_err(|e| add(&e))?;
        let meta = f.metadata().map_err(|e| add(&e))?;
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(meta.permissions().mode() & 0o777)
            .large_file(meta.len() >= u64::from(u32::MAX));
        w.start_file(name, opts).map_err(|e| add(&e))?;
        io::copy(&mut f, &mut w).map_err(|e| add(&e))?;
        n += 1;
    }
    let mut buf = w.finish().map_err(|e| fail(&e))?;
    buf.flush().map_err(|e| fail(&e))?;
    drop(buf);
    tmp.persist(dir.join(OUT_ZIP)).map_err(|e| fail(&e.error))?;
    Ok(n)
}
