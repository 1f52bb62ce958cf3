//! Files that land whole or not at all: written under a temporary name
//! beside their destination (same directory, so the rename cannot cross
//! file systems), synced, then renamed over it. A temporary file that is
//! not persisted is removed when dropped, on every error path; one left by
//! a process that was killed is removed by the next daemon that writes in
//! that directory (see [`sweep_abandoned`]).

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use tempfile::NamedTempFile;

/// Random characters tempfile puts in a name (its default).
const RANDOM_LEN: usize = 6;
const SUFFIX: &str = ".part";

/// A new temporary file in `dest`'s directory, named `.<name>.<random>.part`
/// so that a person looking at the directory sees what it will become. It
/// is locked while this process has it open: that is how a later daemon
/// tells a live writer's file from one a killed daemon left behind.
pub fn temp_beside(dest: &Path) -> io::Result<NamedTempFile> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    sweep_once(dir);
    let tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(SUFFIX).rand_bytes(RANDOM_LEN).tempfile_in(dir)?;
    // Where locks are not supported nothing is swept either: no harm.
    let _ = tmp.as_file().try_lock();
    Ok(tmp)
}

/// Directories remembered as swept. Each HTCondor job writes its outputs
/// into a directory of its own, so a set of every directory ever written
/// grew by one path a job for as long as the daemon ran; when it is full
/// it starts again, and a directory written to after that is swept once
/// more (a read of the directory: what this process is writing there is
/// newer than `since`, and locked).
const SWEPT_DIRS_KEPT: usize = 1024;

/// Sweeps each directory once per process, on the first write there: what
/// a killed predecessor left is older than this process's first write.
fn sweep_once(dir: &Path) {
    static SINCE: OnceLock<SystemTime> = OnceLock::new();
    let since = *SINCE.get_or_init(SystemTime::now);
    let first = {
        let mut swept = swept_dirs().lock().unwrap_or_else(|e| e.into_inner());
        if swept.len() >= SWEPT_DIRS_KEPT && !swept.contains(dir) {
            swept.clear();
        }
        swept.insert(dir.to_path_buf())
    };
    if first {
        sweep_abandoned(dir, since);
    }
}

fn swept_dirs() -> &'static Mutex<HashSet<PathBuf>> {
    static SWEPT: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    SWEPT.get_or_init(Default::default)
}

/// Removes the temporary files in `dir` (named as [`temp_beside`] names
/// them) that were last written before `since` and that no process holds
/// locked: their writer died before it could rename or remove them.
pub fn sweep_abandoned(dir: &Path, since: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_temp_name) {
            continue;
        }
        let stale = entry.metadata().ok().and_then(|m| m.modified().ok()).is_some_and(|t| t < since);
        if !stale {
            continue;
        }
        let path = entry.path();
        let Ok(file) = File::open(&path) else { continue };
        if file.try_lock().is_ok() && std::fs::remove_file(&path).is_ok() {
            tracing::info!(file = %path.display(), "removed a temporary file an earlier daemon left");
            removed += 1;
        }
    }
    removed
}

/// `.<name>.<random>.part`, as [`temp_beside`] makes them.
fn is_temp_name(n: &str) -> bool {
    let Some(stem) = n.strip_suffix(SUFFIX) else { return false };
    let Some((head, random)) = stem.rsplit_once('.') else { return false };
    head.len() > 1 && head.starts_with('.') && random.len() == RANDOM_LEN && random.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Syncs `tmp` and renames it to `dest`.
pub fn persist(tmp: NamedTempFile, dest: &Path) -> io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist(dest).map_err(|e| e.error)?;
    Ok(())
}

/// Writes `dest` whole: `fill` writes the temporary file, then it is
/// persisted.
pub fn write_whole(dest: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    let mut tmp = temp_beside(dest)?;
    fill(tmp.as_file_mut())?;
    persist(tmp, dest)
}

/// Appends `text` to `dest` whole or not at all: the old content and the
/// new are written to a temporary file beside it, which is renamed over
/// it (the old file's permissions kept). On a full disk `dest` is left as
/// it was, never with half of `text` or, when new, empty. What is not a
/// regular file (`/dev/null`, a FIFO) is written in place: renaming over
/// it would replace the device.
pub fn append_whole(dest: &Path, text: &[u8]) -> io::Result<()> {
    match std::fs::metadata(dest) {
        Ok(m) if !m.is_file() => std::fs::OpenOptions::new().append(true).open(dest)?.write_all(text),
        Ok(m) => {
            let mut old = File::open(dest)?;
            let mut tmp = temp_beside(dest)?;
            io::copy(&mut old, tmp.as_file_mut())?;
            tmp.as_file_mut().write_all(text)?;
            tmp.as_file().set_permissions(m.permissions())?;
            persist(tmp, dest)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => write_whole(dest, |f| f.write_all(text)),
        Err(e) => Err(e),
    }
}

/// Streams `src` to `dest` through a temporary file and a rename.
pub fn copy_whole(src: &Path, dest: &Path) -> io::Result<()> {
    let mut input = std::fs::File::open(src)?;
    write_whole(dest, |out| io::copy(&mut input, out).map(drop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_nothing_and_a_good_one_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.txt");
        std::fs::write(&dest, b"old").unwrap();
        let err = write_whole(&dest, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("disk full"))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read(&dest).unwrap(), b"old");
        write_whole(&dest, |f| f.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out.txt")], "no temporary file is left");
    }

    #[test]
    fn an_append_adds_to_the_old_content_and_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("stderr");
        append_whole(&dest, b"one\n").unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o640)).unwrap();
        append_whole(&dest, b"two\n").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"one\ntwo\n");
        assert_eq!(std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o640);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("stderr")], "no temporary file is left");
        // A device is written in place, never renamed over.
        append_whole(Path::new("/dev/null"), b"gone").unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    }

    #[test]
    fn temp_names_are_recognised_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = temp_beside(&dir.path().join("out.txt")).unwrap();
        let name = tmp.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(is_temp_name(&name), "{name}");
        for other in ["out.txt", ".out.txt.part", "out.txt.abcdef.part", ".out.txt.abc-ef.part", "..abcdef.part", ".x.abcdefg.part"] {
            assert!(!is_temp_name(other), "{other}");
        }
    }

    #[test]
    fn an_abandoned_temp_file_is_swept_and_a_live_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        // A live writer's file, locked as temp_beside locks it (made first:
        // temp_beside's own sweep would take the next one).
        let live = temp_beside(&dir.path().join("other")).unwrap();
        // A killed writer's file: nobody holds it.
        let dead = dir.path().join(".out.Ab12Cd.part");
        std::fs::write(&dead, b"half").unwrap();
        // A user's file that merely looks alike in part.
        std::fs::write(dir.path().join("notes.part"), b"mine").unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        assert_eq!(sweep_abandoned(dir.path(), later), 1);
        assert!(!dead.exists());
        assert!(live.path().exists(), "a file a live writer holds is kept");
        assert!(dir.path().join("notes.part").exists());
        // Files written after `since` are kept even when unlocked.
        std::fs::write(&dead, b"half").unwrap();
        assert_eq!(sweep_abandoned(dir.path(), SystemTime::UNIX_EPOCH), 0);
        assert!(dead.exists());
    }

    #[test]
    fn the_directories_remembered_as_swept_stay_bounded() {
        // A directory per job, as HTCondor's jobs have: what is remembered
        // must not grow with the jobs.
        let dirs: Vec<_> = (0..2 * SWEPT_DIRS_KEPT + 1).map(|_| tempfile::tempdir().unwrap()).collect();
        for d in &dirs {
            temp_beside(&d.path().join("out")).unwrap();
        }
        let kept = swept_dirs().lock().unwrap().len();
        assert!(kept <= SWEPT_DIRS_KEPT, "{kept} directories remembered after {} were written", dirs.len());
        // The last one is still known: no second sweep of a busy directory.
        assert!(swept_dirs().lock().unwrap().contains(dirs.last().unwrap().path()));
    }
}
