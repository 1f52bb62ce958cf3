//! Jobs that bring their own executable, run by a project's runner app
//! (`docs/runner.md`): the job's archive of inputs and environment sent
//! with the executable, and how the runner's output archive becomes the
//! job's files and exit code (what makes an app a runner is
//! `Templates::is_runner`, which every layer asks).

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use gahp_services::config::UnpackLimits;
use gahp_services::unpack::{self, Unpacked};

/// The runner's inputs and output, by their open names.
pub use gahp_protocol::boinc::{RUNNER_EXE_INPUT as EXE_INPUT, RUNNER_JOB_ZIP as JOB_ZIP, RUNNER_OUT_ZIP as OUT_ZIP};

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
    root.join(gahp_services::digest::hex_md5(batch.as_bytes()))
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
    let hex = gahp_services::file_stager::md5_file(tmp.path()).map_err(write_err)?;
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
/// it names (each a path in the archive, then its destination), or the
/// files it made (`None`) into `iwd`; `own` are the job's own files
/// (executable, inputs, streams), which nothing it made may replace.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub iwd: PathBuf,
    pub out: Option<PathBuf>,
    pub err: Option<PathBuf>,
    pub named: Option<Vec<(String, PathBuf)>>,
    pub own: Vec<PathBuf>,
}

/// At most this much of `_condor_exit_code` is read.
const EXIT_FILE_MAX: u64 = 64;

/// Unpacks the runner's output archive beside the job's directory, within
/// `limits`, and places each file whole: checked first, then moved, so a
/// refusal leaves nothing of it in `iwd`. Returns the program's exit.
pub fn place_outputs(archive: &Path, plan: &Placement, limits: &UnpackLimits) -> Result<Exit, String> {
    let u = unpack::unpack(archive, &plan.iwd, limits).map_err(|e| format!("the runner's {OUT_ZIP} was refused: {e}"))?;
    let root = u.root();
    let top = |name: &str| u.files.iter().any(|f| f.as_os_str() == name);
    if !top(EXIT_FILE) {
        return Err(format!("the runner's {OUT_ZIP} has no {EXIT_FILE}: the runner app did not run the job as docs/runner.md says"));
    }
    let mut exit_text = String::new();
    let read = fs::File::open(root.join(EXIT_FILE)).and_then(|f| f.take(EXIT_FILE_MAX).read_to_string(&mut exit_text));
    let exit = read
        .ok()
        .and_then(|_| parse_exit(&exit_text))
        .ok_or_else(|| format!("the runner's {EXIT_FILE} reads {:?}, not an exit code", one_line(&exit_text)))?;

    let moves = match &plan.named {
        Some(named) => {
            let mut moves = Vec::with_capacity(named.len());
            for (name, dest) in named {
                let rel = Path::new(name.trim_end_matches('/'));
                if !name_is_inside(name) || !u.files.iter().any(|f| f == rel) {
                    return Err(format!(
                        "the job made no file {name} (transfer_output_files; a runner returns the files the job makes in its directory, not directories: archive a directory in the job)"
                    ));
                }
                moves.push((root.join(rel), dest.clone()));
            }
            moves
        }
        None => made_files(&u, &plan.iwd, &plan.own, is_job_output)?,
    };
    let streams: Vec<_> = [plan.out.as_ref(), plan.err.as_ref()].into_iter().flatten().collect();
    for (_, dest) in &moves {
        if streams.contains(&dest) {
            return Err(format!("the job made a file {} that would replace its own output or error file", dest.display()));
        }
        unpack::check_dest(&plan.iwd, dest).map_err(|e| format!("the job's file {} is not placed: {e}", dest.display()))?;
    }
    for dest in &streams {
        unpack::check_dest(&plan.iwd, dest).map_err(|e| format!("can't write {}: {e}", dest.display()))?;
    }

    // The streams are moved, or copied a buffer at a time: never read whole.
    let (stdout, stderr) = (root.join(STDOUT_FILE), root.join(STDERR_FILE));
    for p in [&stdout, &stderr] {
        if !p.is_file() {
            fs::File::create(p).map_err(|e| format!("can't write in {}: {e}", root.display()))?;
        }
    }
    match (&plan.out, &plan.err) {
        (Some(o), Some(e)) if o == e => {
            let cant = |e: io::Error| format!("can't write {}: {e}", o.display());
            let mut both = tempfile::NamedTempFile::new_in(root).map_err(cant)?;
            for part in [&stdout, &stderr] {
                io::copy(&mut fs::File::open(part).map_err(cant)?, both.as_file_mut()).map_err(cant)?;
            }
            unpack::place(both.path(), &plan.iwd, o).map_err(|e| e.to_string())?;
        }
        (o, e) => {
            for (src, dest) in [(&stdout, o), (&stderr, e)] {
                if let Some(dest) = dest {
                    unpack::place(src, &plan.iwd, dest).map_err(|e| e.to_string())?;
                }
            }
        }
    }
    for (src, dest) in moves {
        unpack::place(&src, &plan.iwd, &dest).map_err(|e| e.to_string())?;
    }
    Ok(exit)
}

/// The files a job made that come back when it names none, as HTCondor
/// brings them back (docs/runner.md "Back on the submit host"): the
/// regular files at the top of the archive that `is_output` takes, as
/// `(unpacked, destination in iwd)`. Not a directory, nor a dot-file (a
/// host must not plant `.bashrc` in a home directory): those are left out
/// and logged. One that would replace one of the job's `own` files, or an
/// HTCondor submit file or log already in `iwd`, refuses them all.
pub fn made_files(u: &Unpacked, iwd: &Path, own: &[PathBuf], is_output: fn(&str) -> bool) -> Result<Vec<(PathBuf, PathBuf)>, String> {
    let mut moves = Vec::new();
    let mut left_out = Vec::new();
    for rel in &u.files {
        let name = rel.to_string_lossy();
        if !is_output(&name) {
            continue;
        }
        if rel.components().count() > 1 || name.starts_with('.') {
            left_out.push(name.into_owned());
            continue;
        }
        let dest = iwd.join(rel);
        if own.contains(&dest) {
            return Err(format!("the job made a file {name} that would replace its own {}", dest.display()));
        }
        if looks_like_submit_or_log(&name) && fs::symlink_metadata(&dest).is_ok() {
            return Err(format!(
                "the job made a file {name}, which would replace the {} already in its directory (a submit file or log, by its name): name it in transfer_output_files to take it",
                dest.display()
            ));
        }
        moves.push((u.root().join(rel), dest));
    }
    left_out.extend(u.dirs.iter().filter(|d| d.components().count() == 1).map(|d| format!("{}/", d.display())));
    if !left_out.is_empty() {
        left_out.sort();
        tracing::info!(
            dir = %iwd.display(),
            "not placed (only the top-level files a job made come back unless transfer_output_files names them): {}",
            left_out.join(", ")
        );
    }
    Ok(moves)
}

/// HTCondor submit files and job logs, by the names people give them.
fn looks_like_submit_or_log(name: &str) -> bool {
    [".sub", ".submit", ".jdl", ".condor", ".log"].iter().any(|ext| name.ends_with(ext))
}

fn one_line(text: &str) -> String {
    text.trim().chars().take(EXIT_FILE_MAX as usize).map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// A `transfer_output_files` name stays inside the job's directory.
fn name_is_inside(name: &str) -> bool {
    let p = Path::new(name);
    !name.is_empty() && p.components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gahp_protocol::boinc::Templates;
    use gahp_services::config::UnpackLimits;

    fn t(inputs: &[&str], outputs: &[&str]) -> Templates {
        Templates { inputs: inputs.iter().map(|s| s.to_string()).collect(), outputs: outputs.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn a_runner_is_known_by_its_templates() {
        assert!(t(&[EXE_INPUT, JOB_ZIP], &[OUT_ZIP]).is_runner());
        assert!(!t(&[JOB_ZIP, EXE_INPUT], &[OUT_ZIP]).is_runner());
        assert!(!t(&["in"], &["out"]).is_runner());
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
        let plan = Placement { iwd: iwd.clone(), out: Some(iwd.join("job.out")), err: Some(iwd.join("job.err")), named: None, own: vec![] };
        assert_eq!(place_outputs(&zip, &plan, &UnpackLimits::default()).unwrap(), Exit::Code(3));
        assert_eq!(fs::read_to_string(iwd.join("job.out")).unwrap(), "out\n");
        assert_eq!(fs::read_to_string(iwd.join("job.err")).unwrap(), "err\n");
        assert_eq!(fs::read_to_string(iwd.join("result.txt")).unwrap(), "r");
        let mut left: Vec<_> = fs::read_dir(&iwd).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["job.err", "job.out", "result.txt"], "no BOINC file, no directory, no scratch left");

        // Named outputs, remapped; output = error gets both.
        let iwd2 = dir.path().join("job2");
        fs::create_dir_all(&iwd2).unwrap();
        let both = iwd2.join("all.log");
        let plan = Placement {
            iwd: iwd2.clone(),
            out: Some(both.clone()),
            err: Some(both.clone()),
            named: Some(vec![("result.txt".into(), iwd2.join("r.1")), ("res/deep.txt".into(), iwd2.join("deep.txt"))]),
            own: vec![],
        };
        place_outputs(&zip, &plan, &UnpackLimits::default()).unwrap();
        assert_eq!(fs::read_to_string(iwd2.join("deep.txt")).unwrap(), "d", "a file in a folder when named");
        assert_eq!(fs::read_to_string(&both).unwrap(), "out\nerr\n");
        assert_eq!(fs::read_to_string(iwd2.join("r.1")).unwrap(), "r");
        assert!(!iwd2.join("res").exists(), "only what the job names");
        let plan = Placement { named: Some(vec![("missing".into(), iwd2.join("m"))]), ..plan };
        let none = UnpackLimits::default();
        assert!(place_outputs(&zip, &plan, &none).unwrap_err().contains("made no file missing"));
        let plan = Placement { named: Some(vec![("../x".into(), iwd2.join("m"))]), ..plan };
        assert!(place_outputs(&zip, &plan, &none).is_err());
        let plan = Placement { named: Some(vec![("res".into(), iwd2.join("m"))]), ..plan };
        assert!(place_outputs(&zip, &plan, &none).unwrap_err().contains("made no file res"), "a folder is not a file");
        // No exit code: not a runner's archive.
        let bad = runner_zip(dir.path(), &[("result.txt", "r")]);
        assert!(place_outputs(&bad, &plan, &none).unwrap_err().contains(EXIT_FILE));
    }

    /// What a hostile host sends (issue: a zip that plants dot-files, writes
    /// through a link the user keeps in Iwd, replaces the job's own files)
    /// places nothing it should not, and nothing past the job's directory.
    #[test]
    fn a_hostile_hosts_archive_reaches_no_further_than_the_jobs_files() {
        let dir = tempfile::tempdir().unwrap();
        let (iwd, elsewhere) = (dir.path().join("home"), dir.path().join("elsewhere"));
        fs::create_dir_all(&iwd).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, iwd.join("data")).unwrap();
        fs::write(iwd.join("job.sub"), "executable = job.sh").unwrap();
        fs::write(iwd.join("input.txt"), "mine").unwrap();
        let plan = |own: Vec<PathBuf>| Placement { iwd: iwd.clone(), out: Some(iwd.join("job.out")), err: None, named: None, own };
        let none = UnpackLimits::default();
        let listing = || {
            let mut l: Vec<_> = fs::read_dir(&iwd).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            l.sort();
            l
        };

        // Dot-files, a folder tree, a file through the link: only the plain file comes.
        let zip = runner_zip(
            dir.path(),
            &[
                (EXIT_FILE, "0"),
                (".bashrc", "evil"),
                (".ssh/authorized_keys", "evil"),
                ("sub/dir/deep.txt", "d"),
                ("data/x", "evil"),
                ("ok.txt", "ok"),
            ],
        );
        assert_eq!(place_outputs(&zip, &plan(vec![]), &none).unwrap(), Exit::Code(0));
        assert_eq!(listing(), ["data", "input.txt", "job.out", "job.sub", "ok.txt"]);
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing through the link");

        // A file named like the job's input, its stdout, or its submit file: refused whole.
        for (name, why) in [("input.txt", "replace its own"), ("job.out", "replace its own"), ("job.sub", "submit file or log")] {
            let zip = runner_zip(dir.path(), &[(EXIT_FILE, "0"), ("fresh.txt", "f"), (name, "evil")]);
            let e = place_outputs(&zip, &plan(vec![iwd.join("input.txt"), iwd.join("job.out")]), &none).unwrap_err();
            assert!(e.contains(why), "{name}: {e}");
            assert!(!iwd.join("fresh.txt").exists(), "{name}: nothing placed");
        }
        assert_eq!(fs::read_to_string(iwd.join("input.txt")).unwrap(), "mine");
        assert_eq!(fs::read_to_string(iwd.join("job.sub")).unwrap(), "executable = job.sh");

        // A named output through the link is refused, not written there.
        let zip = runner_zip(dir.path(), &[(EXIT_FILE, "0"), ("x", "evil")]);
        let named = Placement { named: Some(vec![("x".into(), iwd.join("data/x"))]), ..plan(vec![]) };
        assert!(place_outputs(&zip, &named, &none).unwrap_err().contains("is a link"));
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);

        // A link entry, or a bomb: refused before anything is written.
        let bomb = dir.path().join("bomb.zip");
        {
            let mut z = zip::ZipWriter::new(fs::File::create(&bomb).unwrap());
            let o = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
            z.start_file(EXIT_FILE, o).unwrap();
            z.write_all(b"0").unwrap();
            z.start_file(STDOUT_FILE, o.large_file(true)).unwrap();
            let block = vec![0u8; 1 << 20];
            for _ in 0..100 {
                z.write_all(&block).unwrap();
            }
            z.finish().unwrap();
        }
        let before = listing();
        let e = place_outputs(&bomb, &plan(vec![]), &none).unwrap_err();
        assert!(e.contains("zip bomb"), "{e}");
        assert_eq!(listing(), before, "nothing half-written, no scratch left");
        let garbage = runner_zip(dir.path(), &[(EXIT_FILE, &"9".repeat(10_000))]);
        assert!(place_outputs(&garbage, &plan(vec![]), &none).unwrap_err().contains("not an exit code"));
    }
}
