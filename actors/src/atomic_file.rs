//! Files that land whole or not at all: written under a temporary name
//! beside their destination (same directory, so the rename cannot cross
//! file systems), synced, then renamed over it. A temporary file that is
//! not persisted is removed when dropped, on every error path.

use std::fs::File;
use std::io;
use std::path::Path;

use tempfile::NamedTempFile;

/// A new temporary file in `dest`'s directory, named `.<name>.<random>.part`
/// so that a person looking at the directory sees what it will become.
pub fn temp_beside(dest: &Path) -> io::Result<NamedTempFile> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".part").tempfile_in(dir)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
}
