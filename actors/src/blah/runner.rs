//! Jobs that bring their own executable, run by a project's runner app
//! (`docs/runner.md`): what makes an app a runner, the job's archive of
//! inputs and environment sent with the executable, and how the runner's
//! output archive becomes the job's files and exit code.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use gahp_protocol::boinc::Templates;

/// The runner's inputs and output, by their open names.
pub const EXE_INPUT: &str = "condor_exec.exe";
pub const JOB_ZIP: &str = "condor_job.zip";
pub const OUT_ZIP: &str = "condor_out.zip";

/// Files of the job's archive and of the runner's outputs that are the
/// runner's, not the job's.
pub const ENV_FILE: &str = "_condor_env";
pub const STDIN_FILE: &str = "_condor_stdin";
pub const STDOUT_FILE: &str = "_condor_stdout";
pub const STDERR_FILE: &str = "_condor_stderr";
pub const EXIT_FILE: &str = "_condor_exit_code";
/// A container runner's image, for a job with `container_image`.
pub const IMAGE_FILE: &str = "_condor_container_image";

/// At most this many files go into one job's archive (a directory of
/// millions is a mistake, not a job).
const MAX_ARCHIVE_FILES: usize = 100_000;

/// Where the archives of one batch's jobs are written while it is
/// submitted: `<state dir>/job-archives/<MD5 of the batch name>`. Those of
/// batches a killed daemon left behind more than a day ago are removed.
pub fn scratch_dir(state_dir: &Path, batch: &str) -> PathBuf {
    let root = state_dir.join("job-archives");
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    for e in fs::read_dir(&root).into_iter().flatten().flatten() {
        if e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < day_ago) {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    root.join(crate::file_stager::hex_md5(batch.as_bytes()))
}

/// Removes a batch's archives once it is submitted (or failed): the
/// project has them, and a new attempt writes them again.
pub fn remove_scratch(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!("can't remove {}: {e}", dir.display());
        }
    }
}

/// An app is a runner when its templates are the runner's.
pub fn is_runner(t: &Templates) -> bool {
    t.inputs == [EXE_INPUT, JOB_ZIP] && t.outputs == [OUT_ZIP]
}

/// Whether a file of the runner's output archive is the job's: not the
/// runner's own nor the BOINC client's or wrapper's.
pub fn is_job_output(name: &str) -> bool {
    !(name.starts_with("_condor_")
        || name.starts_with("boinc_")
        || matches!(name, "stderr.txt" | "wrapper_checkpoint.txt" | "init_data.xml" | "job.xml" | OUT_ZIP | "temp.zip"))
}

/// One entry of a job's archive: its path inside, and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    File { name: String, src: PathBuf },
    Text { name: String, text: String },
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Entry::File { name, .. } | Entry::Text { name, .. } => name,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{path} can't be read: {source}")]
    Read { path: String, source: io::Error },
    #[error("{0} holds more than 100000 files")]
    TooMany(String),
    #[error("{0} is neither a file nor a directory")]
    Special(String),
    #[error("two inputs would both be {0} in the job's directory")]
    Twice(String),
    #[error("can't write the job's input archive in {dir}: {source}")]
    Write { dir: String, source: io::Error },
}

/// The entries for one `transfer_input_files` item: a file under its base
/// name, a directory as its tree under its name (its contents at the top
/// when written with a trailing `/`, as HTCondor does).
pub fn entries_of(path: &Path, contents_only: bool, out: &mut Vec<Entry>) -> Result<(), ArchiveError> {
    let read_err = |p: &Path, source| ArchiveError::Read { path: p.display().to_string(), source };
    let meta = fs::metadata(path).map_err(|e| read_err(path, e))?;
    let base = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if meta.is_file() {
        out.push(Entry::File { name: base, src: path.to_path_buf() });
        return Ok(());
    }
    if !meta.is_dir() {
        return Err(ArchiveError::Special(path.display().to_string()));
    }
    let prefix = if contents_only { String::new() } else { format!("{base}/") };
    let mut stack = vec![(path.to_path_buf(), prefix)];
    while let Some((dir, prefix)) = stack.pop() {
        let mut names: Vec<_> = fs::read_dir(&dir)
            .map_err(|e| read_err(&dir, e))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(|e| read_err(&dir, e))?;
        names.sort();
        for n in names {
            let p = dir.join(&n);
            let name = format!("{prefix}{}", n.to_string_lossy());
            let meta = fs::metadata(&p).map_err(|e| read_err(&p, e))?;
            if meta.is_dir() {
                stack.push((p, format!("{name}/")));
            } else if meta.is_file() {
                out.push(Entry::File { name, src: p });
                if out.len() > MAX_ARCHIVE_FILES {
                    return Err(ArchiveError::TooMany(path.display().to_string()));
                }
            } else {
                return Err(ArchiveError::Special(p.display().to_string()));
            }
        }
    }
    Ok(())
}

/// Writes the archive of `entries` into `dir` as `<md5>.zip`, the same
/// bytes for the same entries (sorted, fixed times and modes), so that
/// jobs bringing the same files share one upload. Returns its path.
pub fn write_archive(dir: &Path, mut entries: Vec<Entry>) -> Result<PathBuf, ArchiveError> {
    entries.sort_by(|a, b| a.name().cmp(b.name()));
    if let Some(w) = entries.windows(2).find(|w| w[0].name() == w[1].name()) {
        return Err(ArchiveError::Twice(w[0].name().to_string()));
    }
    let write_err = |source| ArchiveError::Write { dir: dir.display().to_string(), source };
    fs::create_dir_all(dir).map_err(write_err)?;
    let tmp = tempfile::Builder::new().prefix(".job-").suffix(".zip.tmp").tempfile_in(dir).map_err(write_err)?;
    {
        let mut zip = zip::ZipWriter::new(tmp.as_file());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(0o644);
        for e in &entries {
            zip.start_file(e.name(), options).map_err(|e| write_err(io::Error::other(e)))?;
            match e {
                Entry::Text { text, .. } => zip.write_all(text.as_bytes()).map_err(write_err)?,
                Entry::File { src, .. } => {
                    let mut f = fs::File::open(src).map_err(|e| ArchiveError::Read { path: src.display().to_string(), source: e })?;
                    io::copy(&mut f, &mut zip).map_err(write_err)?;
                }
            }
        }
        zip.finish().map_err(|e| write_err(io::Error::other(e)))?;
    }
    let hex = crate::file_stager::md5_file(tmp.path()).map_err(write_err)?;
    let dest = dir.join(format!("{hex}.zip"));
    if dest.is_file() {
        return Ok(dest); // the same bytes, made for an earlier job
    }
    tmp.persist(&dest).map_err(|e| write_err(e.error))?;
    Ok(dest)
}

/// The job's environment as the runner's `_condor_env` text: a
/// `NAME=VALUE` line each. `None` when a value holds a line break, which a
/// line can't carry (the name is returned).
pub fn env_file(env: &[(String, String)]) -> Result<String, String> {
    let mut text = String::new();
    for (name, value) in env {
        if value.contains(['\n', '\r']) || name.contains(['\n', '\r', '=']) {
            return Err(name.clone());
        }
        text.push_str(&format!("{name}={value}\n"));
    }
    Ok(text)
}

/// How the job's program ended, from `_condor_exit_code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i64),
    Signal(i64),
}

pub fn parse_exit(text: &str) -> Option<Exit> {
    let t = text.trim();
    match t.strip_prefix("signal ") {
        Some(n) => n.trim().parse().ok().map(Exit::Signal),
        None => t.parse().ok().map(Exit::Code),
    }
}

/// Where the job's files go after a run: its std streams and the outputs
/// it names (each a path in the archive, then its destination), or all it
/// made (`None`) into `iwd`.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub iwd: PathBuf,
    pub out: Option<PathBuf>,
    pub err: Option<PathBuf>,
    pub named: Option<Vec<(String, PathBuf)>>,
}

/// Unpacks the runner's output archive beside the job's directory and
/// places each file whole (renamed from the unpacked copy). Returns the
/// program's exit and its BOINC-side stderr is not touched.
pub fn place_outputs(archive: &Path, plan: &Placement) -> Result<Exit, String> {
    let scratch = tempfile::Builder::new()
        .prefix(".boinc-gahp-out-")
        .tempdir_in(&plan.iwd)
        .map_err(|e| format!("can't unpack the outputs in {}: {e}", plan.iwd.display()))?;
    crate::project::output_fetcher::extract_zip(archive, scratch.path())
        .map_err(|e| format!("the runner's {OUT_ZIP} can't be unpacked: {e}"))?;
    let root = scratch.path();
    let exit_text = fs::read_to_string(root.join(EXIT_FILE))
        .map_err(|_| format!("the runner's {OUT_ZIP} has no {EXIT_FILE}: the runner app did not run the job as docs/runner.md says"))?;
    let exit = parse_exit(&exit_text).ok_or_else(|| format!("the runner's {EXIT_FILE} reads {:?}, not an exit code", exit_text.trim()))?;

    let stream = |name: &str| -> Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        if let Ok(mut f) = fs::File::open(root.join(name)) {
            f.read_to_end(&mut bytes).map_err(|e| format!("can't read the job's {name}: {e}"))?;
        }
        Ok(bytes)
    };
    let (stdout, stderr) = (stream(STDOUT_FILE)?, stream(STDERR_FILE)?);
    let write = |dest: &Path, parts: &[&[u8]]| {
        crate::atomic_file::write_whole(dest, |f| parts.iter().try_for_each(|p| f.write_all(p)))
            .map_err(|e| format!("can't write {}: {e}", dest.display()))
    };
    match (&plan.out, &plan.err) {
        (Some(o), Some(e)) if o == e => write(o, &[&stdout, &stderr])?,
        (o, e) => {
            if let Some(o) = o {
                write(o, &[&stdout])?;
            }
            if let Some(e) = e {
                write(e, &[&stderr])?;
            }
        }
    }

    let moves: Vec<(PathBuf, PathBuf)> = match &plan.named {
        Some(named) => {
            let mut moves = Vec::with_capacity(named.len());
            for (name, dest) in named {
                let src = root.join(name.trim_end_matches('/'));
                if !name_is_inside(name) || !src.exists() {
                    return Err(format!(
                        "the job made no file {name} (transfer_output_files; a runner returns the files the job makes in its directory, not directories: archive a directory in the job)"
                    ));
                }
                moves.push((src, dest.clone()));
            }
            moves
        }
        None => {
            let mut names: Vec<_> = fs::read_dir(root).map_err(|e| e.to_string())?.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
            names.sort();
            names.into_iter().filter(|n| is_job_output(&n.to_string_lossy())).map(|n| (root.join(&n), plan.iwd.join(&n))).collect()
        }
    };
    for (src, dest) in moves {
        move_tree(&src, &dest)?;
    }
    Ok(exit)
}

/// A `transfer_output_files` name stays inside the job's directory.
fn name_is_inside(name: &str) -> bool {
    let p = Path::new(name);
    !name.is_empty() && p.components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Moves a file, or a directory's files (making its directories), to
/// `dest`: each file renamed, or copied whole across file systems.
fn move_tree(src: &Path, dest: &Path) -> Result<(), String> {
    let meta = fs::symlink_metadata(src).map_err(|e| format!("{}: {e}", src.display()))?;
    if meta.is_dir() {
        fs::create_dir_all(dest).map_err(|e| format!("can't make {}: {e}", dest.display()))?;
        let mut children = BTreeMap::new();
        for e in fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            children.insert(e.file_name(), e.path());
        }
        for (name, path) in children {
            move_tree(&path, &dest.join(name))?;
        }
        return Ok(());
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("can't make {}: {e}", parent.display()))?;
    }
    if fs::rename(src, dest).is_err() {
        crate::atomic_file::copy_whole(src, dest).map_err(|e| format!("can't write {}: {e}", dest.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(inputs: &[&str], outputs: &[&str]) -> Templates {
        Templates { inputs: inputs.iter().map(|s| s.to_string()).collect(), outputs: outputs.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn a_runner_is_known_by_its_templates() {
        assert!(is_runner(&t(&[EXE_INPUT, JOB_ZIP], &[OUT_ZIP])));
        assert!(!is_runner(&t(&[JOB_ZIP, EXE_INPUT], &[OUT_ZIP])));
        assert!(!is_runner(&t(&["in"], &["out"])));
    }

    #[test]
    fn the_same_inputs_make_the_same_archive() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        fs::create_dir_all(w.join("data/sub")).unwrap();
        fs::write(w.join("data/sub/x"), "x").unwrap();
        fs::write(w.join("data/a"), "a").unwrap();
        fs::write(w.join("in"), "in").unwrap();
        let make = |contents_only| {
            let mut e = vec![Entry::Text { name: ENV_FILE.into(), text: "FOO=bar\n".into() }];
            entries_of(&w.join("in"), false, &mut e).unwrap();
            entries_of(&w.join("data"), contents_only, &mut e).unwrap();
            e
        };
        let one = write_archive(&w.join("zips"), make(false)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let two = write_archive(&w.join("zips"), make(false)).unwrap();
        assert_eq!(one, two, "same bytes, same name");
        let mut zip = zip::ZipArchive::new(fs::File::open(&one).unwrap()).unwrap();
        let names: Vec<_> = (0..zip.len()).map(|i| zip.by_index(i).unwrap().name().to_string()).collect();
        assert_eq!(names, [ENV_FILE, "data/a", "data/sub/x", "in"]);
        let flat = write_archive(&w.join("zips"), make(true)).unwrap();
        let mut zip = zip::ZipArchive::new(fs::File::open(&flat).unwrap()).unwrap();
        let names: Vec<_> = (0..zip.len()).map(|i| zip.by_index(i).unwrap().name().to_string()).collect();
        assert_eq!(names, [ENV_FILE, "a", "in", "sub/x"]);
        // Two inputs with one name are refused, not overwritten.
        let mut e = make(false);
        entries_of(&w.join("in"), false, &mut e).unwrap();
        assert!(matches!(write_archive(&w.join("zips"), e), Err(ArchiveError::Twice(n)) if n == "in"));
        assert!(matches!(entries_of(&w.join("nope"), false, &mut vec![]), Err(ArchiveError::Read { .. })));
    }

    #[test]
    fn environment_lines() {
        let env = vec![("FOO".to_string(), "bar baz".to_string()), ("E".to_string(), String::new())];
        assert_eq!(env_file(&env).unwrap(), "FOO=bar baz\nE=\n");
        assert_eq!(env_file(&[("X".into(), "a\nb".into())]).unwrap_err(), "X");
    }

    #[test]
    fn exit_codes_and_signals() {
        assert_eq!(parse_exit("3\n"), Some(Exit::Code(3)));
        assert_eq!(parse_exit("signal 9"), Some(Exit::Signal(9)));
        assert_eq!(parse_exit("x"), None);
    }

    fn runner_zip(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
        let p = dir.join("out.zip");
        let mut z = zip::ZipWriter::new(fs::File::create(&p).unwrap());
        for (n, c) in files {
            z.start_file(*n, zip::write::SimpleFileOptions::default()).unwrap();
            z.write_all(c.as_bytes()).unwrap();
        }
        z.finish().unwrap();
        p
    }

    #[test]
    fn outputs_are_placed_and_the_runners_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let iwd = dir.path().join("job");
        fs::create_dir_all(&iwd).unwrap();
        let files = [
            (EXIT_FILE, "3\n"),
            (STDOUT_FILE, "out\n"),
            (STDERR_FILE, "err\n"),
            ("result.txt", "r"),
            ("stderr.txt", "boinc"),
            ("res/deep.txt", "d"),
        ];
        let zip = runner_zip(dir.path(), &files);
        let plan = Placement { iwd: iwd.clone(), out: Some(iwd.join("job.out")), err: Some(iwd.join("job.err")), named: None };
        assert_eq!(place_outputs(&zip, &plan).unwrap(), Exit::Code(3));
        assert_eq!(fs::read_to_string(iwd.join("job.out")).unwrap(), "out\n");
        assert_eq!(fs::read_to_string(iwd.join("job.err")).unwrap(), "err\n");
        assert_eq!(fs::read_to_string(iwd.join("result.txt")).unwrap(), "r");
        assert_eq!(fs::read_to_string(iwd.join("res/deep.txt")).unwrap(), "d");
        let mut left: Vec<_> = fs::read_dir(&iwd).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["job.err", "job.out", "res", "result.txt"], "no BOINC file, no scratch left");

        // Named outputs, remapped; output = error gets both.
        let iwd2 = dir.path().join("job2");
        fs::create_dir_all(&iwd2).unwrap();
        let both = iwd2.join("all.log");
        let plan = Placement {
            iwd: iwd2.clone(),
            out: Some(both.clone()),
            err: Some(both.clone()),
            named: Some(vec![("result.txt".into(), iwd2.join("r.1"))]),
        };
        place_outputs(&zip, &plan).unwrap();
        assert_eq!(fs::read_to_string(&both).unwrap(), "out\nerr\n");
        assert_eq!(fs::read_to_string(iwd2.join("r.1")).unwrap(), "r");
        assert!(!iwd2.join("res").exists(), "only what the job names");
        let plan = Placement { named: Some(vec![("missing".into(), iwd2.join("m"))]), ..plan };
        assert!(place_outputs(&zip, &plan).unwrap_err().contains("made no file missing"));
        let plan = Placement { named: Some(vec![("../x".into(), iwd2.join("m"))]), ..plan };
        assert!(place_outputs(&zip, &plan).is_err());
        // No exit code: not a runner's archive.
        let bad = runner_zip(dir.path(), &[("result.txt", "r")]);
        assert!(place_outputs(&bad, &plan).unwrap_err().contains(EXIT_FILE));
    }
}
