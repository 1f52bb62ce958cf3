//! Zips that strangers made: the runner's `condor_out.zip` from a
//! volunteer's host, an app's zip output, a project's. Each is checked
//! whole before a byte is written (its entry count read from its end
//! record before the zip library lists the entries; names, kinds, the sum
//! of the sizes the entries claim, and that sum against the zip's own
//! size), then unpacked into a new directory of our own, every entry read
//! no further than the size it claimed. Nothing is read into memory whole:
//! a bomb costs a buffer, not its size.
//!
//! Placing what was unpacked is [`place`]: a destination below a base
//! directory is reached without following a link, so a link a user keeps
//! in their job's directory is never a way out of it.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use tempfile::TempDir;

use crate::config::{UnpackLimits, RATIO_FLOOR};

/// Why a zip was refused, or could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("it is not a zip archive ({0})")]
    Unreadable(String),
    #[error("it lists {entries} entries, more than {max} (unpack.max_entries)")]
    TooManyEntries { entries: u64, max: u64 },
    #[error("it would unpack to {bytes} bytes, more than {max} (unpack.max_bytes; a job's max_transfer_output_mb sets its own)")]
    TooLarge { bytes: u64, max: u64 },
    #[error("it would unpack to {bytes} bytes from {packed}, more than {max} times its size: a zip bomb (unpack.max_ratio)")]
    Bomb { bytes: u64, packed: u64, max: u64 },
    #[error("its entry {0:?} is a link")]
    Link(String),
    #[error("its entry {0:?} is neither a file nor a directory")]
    Special(String),
    #[error("its entry {0:?} leaves the directory it is unpacked in")]
    Escapes(String),
    #[error("it holds {0:?} twice")]
    Twice(String),
    #[error("it lists {listed} entries under {distinct} names: a name twice")]
    NamedTwice { listed: u64, distinct: usize },
    #[error("its entry {name:?} holds more than the {claimed} bytes it claims")]
    Lied { name: String, claimed: u64 },
    #[error("its entry {name:?} is damaged: {why}")]
    Damaged { name: String, why: String },
    #[error("can't unpack it in {dir}: {source}")]
    Write { dir: String, source: io::Error },
}

/// A zip unpacked into a directory of its own, removed when this is
/// dropped: the relative paths of its files and directories, in the
/// zip's order.
#[derive(Debug)]
pub struct Unpacked {
    dir: TempDir,
    pub files: Vec<PathBuf>,
    pub dirs: Vec<PathBuf>,
}

impl Unpacked {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

/// Checks `zip` against `limits`, then unpacks it into a new directory in
/// `beside` (on the destination's file system, so that placing a file is a
/// rename). Nothing is written unless the whole zip passes its checks.
pub fn unpack(zip: &Path, beside: &Path, limits: &UnpackLimits) -> Result<Unpacked, UnpackError> {
    let unreadable = |e: &dyn std::fmt::Display| UnpackError::Unreadable(e.to_string());
    let mut file = File::open(zip).map_err(|e| unreadable(&e))?;
    let packed = file.metadata().map_err(|e| unreadable(&e))?.len();
    // Before the library reads the directory into memory, entry by entry.
    let listed = entry_count(&mut file).map_err(|e| unreadable(&e))?;
    if listed > limits.max_entries {
        return Err(UnpackError::TooManyEntries { entries: listed, max: limits.max_entries });
    }
    let mut archive = zip::ZipArchive::new(file).map_err(|e| unreadable(&e))?;
    // The library keeps one entry per name: a name listed twice (two exit
    // codes, the second one believed) shows only as a shorter list.
    if archive.len() as u64 != listed {
        return Err(UnpackError::NamedTwice { listed, distinct: archive.len() });
    }
    let mut bytes: u64 = 0;
    let mut kinds = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(|e| unreadable(&e))?;
        let name = entry.name().to_string();
        let rel = entry.enclosed_name().filter(|p| p.components().all(|c| matches!(c, Component::Normal(_))));
        let Some(rel) = rel else { return Err(UnpackError::Escapes(name)) };
        if entry.is_symlink() {
            return Err(UnpackError::Link(name));
        }
        // The file type a Unix zip records; none (0) is a plain entry.
        let kind = entry.unix_mode().map_or(0, |m| m & 0o170000);
        let is_dir = entry.is_dir();
        if !matches!((kind, is_dir), (0, _) | (0o100000, false) | (0o040000, true)) {
            return Err(UnpackError::Special(name));
        }
        if !is_dir {
            bytes = bytes.saturating_add(entry.size());
        }
        kinds.push((rel, is_dir, entry.size()));
    }
    if bytes > limits.max_bytes {
        return Err(UnpackError::TooLarge { bytes, max: limits.max_bytes });
    }
    if bytes > RATIO_FLOOR && bytes / packed.max(1) > limits.max_ratio {
        return Err(UnpackError::Bomb { bytes, packed, max: limits.max_ratio });
    }

    let write = |e| UnpackError::Write { dir: beside.display().to_string(), source: e };
    sweep_abandoned(beside);
    let dir = tempfile::Builder::new().prefix(SCRATCH_PREFIX).tempdir_in(beside).map_err(write)?;
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    for (i, (rel, is_dir, claimed)) in kinds.into_iter().enumerate() {
        let out = dir.path().join(&rel);
        let name = rel.display().to_string();
        if is_dir {
            // The directory is ours and new: nothing in it is a link.
            fs::create_dir_all(&out).map_err(write)?;
            dirs.push(rel);
            continue;
        }
        if let Some(parent) = out.parent() {
            fs::create_dir_all(parent).map_err(write)?;
        }
        let mut f = match File::create_new(&out) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(UnpackError::Twice(name)),
            Err(e) => return Err(write(e)),
        };
        let mut entry = archive.by_index(i).map_err(|e| UnpackError::Damaged { name: name.clone(), why: e.to_string() })?;
        // One byte past the claim tells a lie; reading to the end checks
        // the CRC.
        let n = io::copy(&mut (&mut entry).take(claimed + 1), &mut f).map_err(|e| match e.kind() {
            io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof | io::ErrorKind::Other => {
                UnpackError::Damaged { name: name.clone(), why: e.to_string() }
            }
            _ => write(e),
        })?;
        if n > claimed {
            return Err(UnpackError::Lied { name, claimed });
        }
        if n < claimed {
            return Err(UnpackError::Damaged { name, why: format!("it holds {n} bytes, not the {claimed} it claims") });
        }
        files.push(rel);
    }
    Ok(Unpacked { dir, files, dirs })
}

/// The directories [`unpack`] makes (an older daemon's were `.boinc-gahp-out-`).
const SCRATCH_PREFIX: &str = ".boinc-gahp-unpack-";
const OLD_SCRATCH_PREFIX: &str = ".boinc-gahp-out-";

/// Removes the unpacking directories in `dir` that a killed daemon left:
/// those last changed before this process started (a live one of this
/// process, for another job of the same directory, is newer).
fn sweep_abandoned(dir: &Path) {
    static START: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::SystemTime::now);
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let ours = name.to_str().is_some_and(|n| n.starts_with(SCRATCH_PREFIX) || n.starts_with(OLD_SCRATCH_PREFIX));
        let old = e.metadata().ok().filter(|m| m.is_dir()).and_then(|m| m.modified().ok()).is_some_and(|t| t < start);
        if ours && old && fs::remove_dir_all(e.path()).is_ok() {
            tracing::info!(dir = %e.path().display(), "removed an unpacking directory an earlier daemon left");
        }
    }
}

/// The entry count a zip's end record gives (the ZIP64 one when the
/// classic record says to look there). Read from the last 64 KiB + 22
/// bytes only: what to check before a zip library reads every entry's
/// record into memory.
pub fn entry_count(f: &mut File) -> io::Result<u64> {
    let len = f.metadata()?.len();
    let tail_len = len.min(22 + 65_535);
    f.seek(SeekFrom::Start(len - tail_len))?;
    let mut tail = vec![0u8; tail_len as usize];
    f.read_exact(&mut tail)?;
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    let at = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| tail[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
        .ok_or_else(|| bad("no end of central directory record"))?;
    let u16_at = |b: &[u8], i: usize| u64::from(u16::from_le_bytes([b[i], b[i + 1]]));
    let classic = u16_at(&tail, at + 10);
    if classic != 0xFFFF {
        return Ok(classic);
    }
    // The ZIP64 locator sits just before the classic record; it gives
    // where the ZIP64 record is.
    let loc = at.checked_sub(20).filter(|&l| tail[l..l + 4] == [0x50, 0x4b, 0x06, 0x07]).ok_or_else(|| bad("no ZIP64 locator"))?;
    let offset = u64::from_le_bytes(tail[loc + 8..loc + 16].try_into().expect("8 bytes"));
    let mut rec = [0u8; 56];
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(&mut rec)?;
    if rec[..4] != [0x50, 0x4b, 0x06, 0x06] {
        return Err(bad("no ZIP64 end of central directory record"));
    }
    Ok(u64::from_le_bytes(rec[32..40].try_into().expect("8 bytes")))
}

/// Why a file could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    #[error("{0} is not below {1}")]
    Outside(String, String),
    #[error("{0} is a link: nothing is written through it")]
    Link(String),
    #[error("{0} is not a directory")]
    NotADirectory(String),
    #[error("{0} is a directory")]
    IsADirectory(String),
    #[error("can't write {path}: {source}")]
    Write { path: String, source: io::Error },
}

/// Moves `src` to `dest` whole (a rename, or a copy to a temporary file
/// beside it and a rename), reaching `dest` without following a link (see
/// [`check_dest`]); a missing directory between `base` and `dest` is made.
pub fn place(src: &Path, base: &Path, dest: &Path) -> Result<(), PlaceError> {
    prepare_dest(base, dest)?;
    // rename(2) replaces the last part itself, never what it points to.
    if fs::rename(src, dest).is_err() {
        crate::atomic_file::copy_whole(src, dest).map_err(|e| PlaceError::Write { path: dest.display().to_string(), source: e })?;
    }
    Ok(())
}

/// Whether [`place`] may write `dest`: when it is below `base`, every
/// directory between them that exists is a real one, not a link; and
/// `dest` itself, if it exists, is neither a link nor a directory. A
/// `dest` outside `base` (an absolute `Out`, a remap the submitter chose)
/// is the submitter's own path: only its last part is checked.
pub fn check_dest(base: &Path, dest: &Path) -> Result<(), PlaceError> {
    walk(base, dest, false)
}

/// [`check_dest`], making each missing directory between `base` and
/// `dest` on the way: then a file written beside `dest` and renamed over
/// it lands there and nowhere else.
pub fn prepare_dest(base: &Path, dest: &Path) -> Result<(), PlaceError> {
    walk(base, dest, true)
}

fn walk(base: &Path, dest: &Path, make: bool) -> Result<(), PlaceError> {
    let shown = |p: &Path| p.display().to_string();
    if let Ok(rel) = dest.strip_prefix(base) {
        let parts: Vec<_> = rel.components().collect();
        let mut at = base.to_path_buf();
        for (k, c) in parts.iter().enumerate() {
            let Component::Normal(part) = c else { return Err(PlaceError::Outside(shown(dest), shown(base))) };
            at.push(part);
            if k + 1 == parts.len() {
                break;
            }
            match fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => return Err(PlaceError::Link(shown(&at))),
                Ok(m) if !m.is_dir() => return Err(PlaceError::NotADirectory(shown(&at))),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if make {
                        fs::create_dir(&at).map_err(|e| PlaceError::Write { path: shown(&at), source: e })?;
                    }
                }
                Err(e) => return Err(PlaceError::Write { path: shown(&at), source: e }),
            }
        }
        if parts.is_empty() {
            return Err(PlaceError::Outside(shown(dest), shown(base)));
        }
    }
    match fs::symlink_metadata(dest) {
        Ok(m) if m.file_type().is_symlink() => Err(PlaceError::Link(shown(dest))),
        Ok(m) if m.is_dir() => Err(PlaceError::IsADirectory(shown(dest))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(dir: &Path, entries: &[(&str, &[u8])]) -> PathBuf {
        let p = dir.join("t.zip");
        let mut w = zip::ZipWriter::new(File::create(&p).unwrap());
        for (name, data) in entries {
            if let Some(d) = name.strip_suffix('/') {
                w.add_directory(d, zip::write::SimpleFileOptions::default()).unwrap();
            } else {
                w.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
                w.write_all(data).unwrap();
            }
        }
        w.finish().unwrap();
        p
    }

    fn limits(entries: u64, bytes: u64, ratio: u64) -> UnpackLimits {
        UnpackLimits { max_entries: entries, max_bytes: bytes, max_ratio: ratio }
    }

    #[test]
    fn unpacks_files_and_directories_into_a_directory_of_its_own() {
        let t = tempfile::tempdir().unwrap();
        let z = zip_of(t.path(), &[("a.txt", b"A"), ("sub/", b""), ("sub/b.txt", b"B")]);
        let u = unpack(&z, t.path(), &UnpackLimits::default()).unwrap();
        assert_eq!(u.files, [PathBuf::from("a.txt"), PathBuf::from("sub/b.txt")]);
        assert_eq!(u.dirs, [PathBuf::from("sub")]);
        assert_eq!(fs::read(u.root().join("sub/b.txt")).unwrap(), b"B");
        let root = u.root().to_path_buf();
        drop(u);
        assert!(!root.exists(), "removed when dropped");
    }

    #[test]
    fn refuses_escapes_links_and_doubles_before_writing() {
        let t = tempfile::tempdir().unwrap();
        for bad in ["../evil", "/etc/evil", "a/../../evil"] {
            let z = zip_of(t.path(), &[("ok", b"ok"), (bad, b"x")]);
            assert!(matches!(unpack(&z, t.path(), &UnpackLimits::default()), Err(UnpackError::Escapes(_))), "{bad}");
        }
        let p = t.path().join("link.zip");
        let mut w = zip::ZipWriter::new(File::create(&p).unwrap());
        w.add_symlink("home", "/home", zip::write::SimpleFileOptions::default()).unwrap();
        w.finish().unwrap();
        assert!(matches!(unpack(&p, t.path(), &UnpackLimits::default()), Err(UnpackError::Link(n)) if n == "home"));
        // A FIFO: the library writes only files, so its mode is set by hand
        // (the central directory's external attributes, offset 38).
        let p = zip_of(t.path(), &[("fifo", b"")]);
        let mut bytes = fs::read(&p).unwrap();
        let cd = bytes.windows(4).position(|w| w == [0x50, 0x4b, 0x01, 0x02]).unwrap();
        bytes[cd + 38..cd + 42].copy_from_slice(&(0o010644u32 << 16).to_le_bytes());
        fs::write(&p, &bytes).unwrap();
        assert!(matches!(unpack(&p, t.path(), &UnpackLimits::default()), Err(UnpackError::Special(_))));
        let z = zip_of(t.path(), &[("x", b"1"), ("./x", b"2")]);
        assert!(matches!(unpack(&z, t.path(), &UnpackLimits::default()), Err(UnpackError::Twice(_) | UnpackError::Escapes(_))));
        let left: Vec<_> = fs::read_dir(t.path()).unwrap().filter_map(|e| e.ok()).filter(|e| e.path().is_dir()).collect();
        assert!(left.is_empty(), "no scratch directory left: {left:?}");
    }

    #[test]
    fn bounds_entries_bytes_and_ratio() {
        let t = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..11).map(|i| format!("f{i}")).collect();
        let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        let z = zip_of(t.path(), &entries);
        assert!(matches!(unpack(&z, t.path(), &limits(10, 1 << 20, 200)), Err(UnpackError::TooManyEntries { entries: 11, max: 10 })));
        assert!(unpack(&z, t.path(), &limits(11, 1 << 20, 200)).is_ok());
        let z = zip_of(t.path(), &[("a", &[7u8; 1000]), ("b", &[7u8; 25])]);
        assert!(matches!(unpack(&z, t.path(), &limits(10, 1024, 200)), Err(UnpackError::TooLarge { bytes: 1025, max: 1024 })));
        assert!(unpack(&z, t.path(), &limits(10, 1025, 200)).is_ok());
        // 65 MiB of zeros deflate to about 65 KiB.
        let big = vec![0u8; (RATIO_FLOOR + (1 << 20)) as usize];
        let z = zip_of(t.path(), &[("zeros", &big)]);
        assert!(matches!(unpack(&z, t.path(), &UnpackLimits::default()), Err(UnpackError::Bomb { .. })));
        assert!(unpack(&z, t.path(), &limits(10, 1 << 30, 2000)).is_ok());
        assert_eq!(UnpackLimits::default().with_job_bytes(Some(2)).max_bytes, 2 << 20);
        assert_eq!(UnpackLimits::default().with_job_bytes(Some(-1)), UnpackLimits::default());
    }

    /// An entry whose header claims less than it holds is cut at its claim
    /// and refused, whatever the directory said.
    #[test]
    fn an_entry_that_lies_about_its_size_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let z = zip_of(t.path(), &[("a", &[b'a'; 5000])]);
        let mut bytes = fs::read(&z).unwrap();
        // The uncompressed size in the local header (offset 22) and the
        // central directory's (offset 24 after its signature).
        let cd = bytes.windows(4).position(|w| w == [0x50, 0x4b, 0x01, 0x02]).unwrap();
        for at in [22, cd + 24] {
            bytes[at..at + 4].copy_from_slice(&100u32.to_le_bytes());
        }
        fs::write(&z, &bytes).unwrap();
        let r = unpack(&z, t.path(), &UnpackLimits::default());
        assert!(matches!(r, Err(UnpackError::Lied { claimed: 100, .. }) | Err(UnpackError::Damaged { .. })), "{r:?}");
    }

    #[test]
    fn a_killed_daemons_unpacking_directory_is_removed_and_a_live_one_kept() {
        let t = tempfile::tempdir().unwrap();
        let z = zip_of(t.path(), &[("a", b"1")]);
        let live = unpack(&z, t.path(), &UnpackLimits::default()).unwrap();
        let left = t.path().join(format!("{SCRATCH_PREFIX}dead"));
        fs::create_dir_all(left.join("sub")).unwrap();
        let long_ago = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::open(&left).unwrap().set_modified(long_ago).unwrap();
        let _next = unpack(&z, t.path(), &UnpackLimits::default()).unwrap();
        assert!(!left.exists(), "a directory older than this process is gone");
        assert!(live.root().exists(), "this process's own is kept");
    }

    /// Two entries of one name (a forged exit code after the runner's):
    /// the zip library would keep one of them, silently.
    #[test]
    fn a_name_listed_twice_is_refused() {
        let t = tempfile::tempdir().unwrap();
        // Written as "a" and "b", then the second renamed "a" in both of
        // its headers (the library refuses to write a name twice).
        let z = zip_of(t.path(), &[("a", b"1"), ("b", b"0")]);
        let mut bytes = fs::read(&z).unwrap();
        let headers: Vec<usize> = bytes
            .windows(4)
            .enumerate()
            .filter(|(_, w)| *w == [0x50, 0x4b, 0x03, 0x04] || *w == [0x50, 0x4b, 0x01, 0x02])
            .map(|(i, _)| i)
            .collect();
        for h in headers {
            let name_at = if bytes[h + 2] == 0x03 { h + 30 } else { h + 46 };
            if bytes[name_at] == b'b' {
                bytes[name_at] = b'a';
            }
        }
        fs::write(&z, &bytes).unwrap();
        let r = unpack(&z, t.path(), &UnpackLimits::default());
        assert!(matches!(r, Err(UnpackError::NamedTwice { listed: 2, distinct: 1 })), "{r:?}");
    }

    #[test]
    fn counts_entries_from_the_end_record() {
        let t = tempfile::tempdir().unwrap();
        let z = zip_of(t.path(), &[("a", b"1"), ("b", b"2"), ("c/", b"")]);
        assert_eq!(entry_count(&mut File::open(&z).unwrap()).unwrap(), 3);
        fs::write(t.path().join("junk"), b"not a zip at all").unwrap();
        assert!(entry_count(&mut File::open(t.path().join("junk")).unwrap()).is_err());
        assert!(matches!(unpack(&t.path().join("junk"), t.path(), &UnpackLimits::default()), Err(UnpackError::Unreadable(_))));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Whatever bytes a host sends, and whatever it changes in a real
        /// zip, unpacking ends in a refusal or in files within the bounds,
        /// never in a panic, and leaves nothing behind on a refusal.
        #[test]
        fn any_bytes_unpack_within_bounds_or_are_refused(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            flips in proptest::collection::vec((0usize..4096, proptest::prelude::any::<u8>()), 0..8),
        ) {
            let t = tempfile::tempdir().unwrap();
            let small = UnpackLimits { max_entries: 8, max_bytes: 4096, max_ratio: 200 };
            let p = t.path().join("junk.zip");
            fs::write(&p, &junk).unwrap();
            let _ = unpack(&p, t.path(), &small);
            let z = zip_of(t.path(), &[("a", &[b'a'; 300]), ("d/", b""), ("d/b", b"bbbb")]);
            let mut bytes = fs::read(&z).unwrap();
            for (at, b) in &flips {
                let n = bytes.len();
                bytes[at % n] = *b;
            }
            fs::write(&z, &bytes).unwrap();
            match unpack(&z, t.path(), &small) {
                Ok(u) => {
                    let total: u64 = u.files.iter().map(|f| fs::metadata(u.root().join(f)).unwrap().len()).sum();
                    proptest::prop_assert!(total <= small.max_bytes && u.files.len() + u.dirs.len() <= 8);
                }
                Err(_) => {
                    let dirs = fs::read_dir(t.path()).unwrap().flatten().filter(|e| e.path().is_dir()).count();
                    proptest::prop_assert_eq!(dirs, 0, "a refusal leaves no directory");
                }
            }
        }
    }

    #[test]
    fn places_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let (base, elsewhere) = (t.path().join("iwd"), t.path().join("elsewhere"));
        fs::create_dir_all(&base).unwrap();
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base.join("data")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("f"), base.join("f")).unwrap();
        let src = t.path().join("src");
        let again = || fs::write(&src, "x").unwrap();
        again();
        assert!(matches!(place(&src, &base, &base.join("data/x")), Err(PlaceError::Link(_))));
        assert!(matches!(place(&src, &base, &base.join("f")), Err(PlaceError::Link(_))));
        assert!(matches!(place(&src, &base, &base.join("../x")), Err(PlaceError::Outside(..))));
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written outside");
        place(&src, &base, &base.join("new/dir/x")).unwrap();
        assert_eq!(fs::read_to_string(base.join("new/dir/x")).unwrap(), "x");
        again();
        place(&src, &base, &base.join("new/dir/x")).unwrap();
        fs::create_dir(base.join("d")).unwrap();
        again();
        assert!(matches!(place(&src, &base, &base.join("d")), Err(PlaceError::IsADirectory(_))));
    }
}
