//! The content stores on disk: `download/` (input files) and `upload/`
//! (instance outputs), flat, keyed by physical name.

use std::io::{self, Write};
use std::path::Path;

use md5::{Digest, Md5};

/// Writes `data` to `path` through a temporary file and a rename, so a
/// reader never sees half a file.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_data().ok();
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Lowercase hex MD5 of a file's content.
pub fn md5_file(path: &Path) -> io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Md5::new();
    io::copy(&mut f, &mut h)?;
    Ok(format!("{:x}", h.finalize()))
}

/// Removes a file; a missing one is fine.
pub fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "can't delete file");
        }
    }
}
