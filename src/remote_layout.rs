//! `boinc_gahp remote-layout [DIR]`: the directory HTCondor's ssh route
//! (`grid_resource = batch boinc user@host`) expects on the host that runs
//! the daemon. The gridmanager's `remote_gahp` logs in over ssh and starts
//! `DIR/bin/blahpd` (this daemon) and
//! `CONDOR_CONFIG=DIR/etc/condor_config.ft-gahp DIR/bin/condor_ft-gahp`
//! (HTCondor's file-transfer GAHP, which moves the job's sandbox through an
//! ssh tunnel); DIR is `~/bosco/glite` unless the job names another with
//! `--rgahp-glite DIR`. The ft-gahp reads no other config and stops at once
//! if its log directory is missing, so the directories are made here.
//!
//! Every entry lands whole: links are made under a temporary name and
//! renamed over the old ones, the config file through `atomic_file`. A
//! `blahpd` that is not a link (another batch system's blahp installed
//! there) is never replaced.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gahp_services::atomic_file;

/// Where `remote_gahp` looks when the job names no `--rgahp-glite`.
pub const DEFAULT_DIR: &str = "bosco/glite";
/// Where HTCondor installs its file-transfer GAHP, if it is not on PATH.
const FT_GAHP_DIRS: &[&str] = &["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/libexec/condor"];
const FT_GAHP: &str = "condor_ft-gahp";

#[derive(clap::Args, Debug, Clone)]
pub struct RemoteLayoutArgs {
    /// The directory to make (default ~/bosco/glite, where remote_gahp
    /// looks unless the job's grid_resource has --rgahp-glite DIR).
    pub dir: Option<PathBuf>,
    /// HTCondor's condor_ft-gahp (default: found on PATH or in /usr/sbin,
    /// /usr/local/sbin, /sbin, /usr/libexec/condor).
    #[arg(long)]
    pub ft_gahp: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("HOME is not set: name the directory")]
    NoHome,
    #[error("{0}: a directory name with '$', '#' or a line break cannot be written into HTCondor's config; choose another")]
    BadDirName(String),
    #[error("can't find this program's own path: {0}")]
    OwnPath(io::Error),
    #[error("no condor_ft-gahp on PATH or in {dirs}: install HTCondor on this host (Debian: apt-get install htcondor) or give --ft-gahp PATH", dirs = FT_GAHP_DIRS.join(", "))]
    NoFtGahp,
    #[error("{0}: not an executable file")]
    NotExecutable(PathBuf),
    #[error("{0} exists and is not a link (another blahp installed there?): not replaced; choose another directory and name it in grid_resource with --rgahp-glite DIR")]
    Occupied(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> LayoutError + '_ {
    move |source| LayoutError::Io { path: path.to_path_buf(), source }
}

/// What was made, for the report.
pub struct Layout {
    pub dir: PathBuf,
    pub blahpd: PathBuf,
    pub ft_gahp: PathBuf,
    pub is_default: bool,
}

pub fn run(args: &RemoteLayoutArgs) -> ExitCode {
    match make(args) {
        Ok(l) => {
            println!("made {}:", l.dir.display());
            println!("  bin/blahpd -> {}", l.blahpd.display());
            println!("  bin/{FT_GAHP} -> {}", l.ft_gahp.display());
            println!("  etc/condor_config.ft-gahp, log/, sandbox/");
            let user = std::env::var("USER").unwrap_or_else(|_| "USER".into());
            let glite = if l.is_default { String::new() } else { format!(" --rgahp-glite {}", l.dir.display()) };
            println!("jobs reach it with: grid_resource = batch boinc {user}@<this host>{glite}");
            println!("the daemon reads this user's ~/.config/boinc-gahp/config.toml; `boinc_gahp check` tests it");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("boinc_gahp remote-layout: {e}");
            ExitCode::FAILURE
        }
    }
}

pub fn make(args: &RemoteLayoutArgs) -> Result<Layout, LayoutError> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let default = home.as_ref().map(|h| h.join(DEFAULT_DIR));
    let dir = match (&args.dir, &default) {
        (Some(d), _) => absolute(d).map_err(io_at(d))?,
        (None, Some(d)) => d.clone(),
        (None, None) => return Err(LayoutError::NoHome),
    };
    let text = dir.to_str().ok_or_else(|| LayoutError::BadDirName(dir.display().to_string()))?;
    if text.contains(['$', '#', '\n', '\r']) {
        return Err(LayoutError::BadDirName(text.to_string()));
    }
    let me = std::env::current_exe().and_then(|p| p.canonicalize()).map_err(LayoutError::OwnPath)?;
    let ft_gahp = match &args.ft_gahp {
        Some(p) => absolute(p).map_err(io_at(p))?,
        None => find_ft_gahp().ok_or(LayoutError::NoFtGahp)?,
    };
    if !is_executable(&ft_gahp) {
        return Err(LayoutError::NotExecutable(ft_gahp));
    }
    let blahpd = dir.join("bin/blahpd");
    if std::fs::symlink_metadata(&blahpd).is_ok_and(|m| !m.file_type().is_symlink()) {
        return Err(LayoutError::Occupied(blahpd));
    }
    for sub in ["bin", "etc", "log", "sandbox"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).map_err(io_at(&d))?;
    }
    link_whole(&me, &blahpd)?;
    link_whole(&ft_gahp, &dir.join("bin").join(FT_GAHP))?;
    let conf = dir.join("etc/condor_config.ft-gahp");
    let body = format!(
        "# Written by `boinc_gahp remote-layout`. HTCondor's remote_gahp starts\n\
         # bin/{FT_GAHP} over ssh with CONDOR_CONFIG set to this file, which is\n\
         # all it reads: where job sandboxes go, and its log.\n\
         BOSCO_SANDBOX_DIR = {text}/sandbox\n\
         LOG = {text}/log\n\
         FT_GAHP_LOG = $(LOG)/FTGahpLog\n"
    );
    atomic_file::write_whole(&conf, |f| io::Write::write_all(f, body.as_bytes())).map_err(io_at(&conf))?;
    Ok(Layout { is_default: default.as_ref() == Some(&dir), dir, blahpd: me, ft_gahp })
}

fn absolute(p: &Path) -> io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `condor_ft-gahp` on PATH, else in HTCondor's usual places.
fn find_ft_gahp() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(FT_GAHP_DIRS.iter().map(PathBuf::from))
        .filter(|d| d.is_absolute())
        .map(|d| d.join(FT_GAHP))
        .find(|p| is_executable(p))
}

/// `link` points at `target` afterwards, never missing in between: a new
/// link beside it, renamed over it.
fn link_whole(target: &Path, link: &Path) -> Result<(), LayoutError> {
    let name = link.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = link.with_file_name(format!(".{name}.{}.link", std::process::id()));
    let _ = std::fs::remove_file(&tmp); // one a killed run of this process id left
    std::os::unix::fs::symlink(target, &tmp).map_err(io_at(&tmp))?;
    std::fs::rename(&tmp, link).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        LayoutError::Io { path: link.to_path_buf(), source: e }
    })
}
