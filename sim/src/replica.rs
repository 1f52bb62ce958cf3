//! Replicas of a runner job (an app whose output is the runner's
//! `condor_out.zip`) as several volunteer hosts make them, and how the
//! project tells whether they agree, as `deploy/boinc-runner/`'s
//! validator does on a real project.
//!
//! * Each host zips its outputs at its own time: [`restamp`] rewrites a
//!   host's zip with that host's times, so replicas of one job differ in
//!   their bytes while their contents agree.
//! * A host may lie (`lie_rate`): [`lie`] changes one output, in its own
//!   way per host, so two liars do not agree with each other either.
//! * [`digest`] is what the validator compares: the set of names and each
//!   entry's unpacked bytes (the exit code among them), not the zip's
//!   bytes. A zip that is not a runner's well-formed output (a link, a
//!   directory, `..`, a bomb) has no digest: the instance is invalid.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use md5::{Digest, Md5};

use crate::apps::runner::{EXIT_CODE_FILE, STDOUT_FILE};

/// Bounds of one zip, as the validator's (and the daemon's defaults):
/// entries, and bytes unpacked per byte of zip once past a first
/// allowance (deflate reaches about 1,030; text about 10).
const MAX_ENTRIES: usize = 10_000;
const RATIO: u64 = 200;
const RATIO_ALLOWANCE: u64 = 64 << 20;

/// File type bits of a zip entry's unix mode.
const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;

/// Why a runner's zip is not a well-formed output.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("can't read it: {0}")]
    Io(#[from] io::Error),
    #[error("not a zip: {0}")]
    Zip(#[from] zip::result::ZipError),
    #[error("{0} entries, more than {MAX_ENTRIES}")]
    TooMany(usize),
    #[error("entry {0:?}: {1}")]
    Entry(String, &'static str),
    #[error("it unpacks to more than {0} bytes (a zip bomb?)")]
    Bomb(u64),
    #[error("no {EXIT_CODE_FILE} (not a runner's output)")]
    NoExitCode,
}

/// The entries of the zip at `path`, by name, each unpacked, after the
/// checks above; `visit` sees each entry's bytes as they are read.
fn read_entries(path: &Path, mut visit: impl FnMut(&str, &[u8])) -> Result<Vec<String>, Refused> {
    let f = File::open(path)?;
    let budget = RATIO_ALLOWANCE.max(f.metadata()?.len().saturating_mul(RATIO));
    let mut z = zip::ZipArchive::new(io::BufReader::new(f))?;
    if z.len() > MAX_ENTRIES {
        return Err(Refused::TooMany(z.len()));
    }
    // Sorted by name: the zip's own order is metadata.
    let mut order: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..z.len() {
        let e = z.by_index_raw(i)?;
        let name = e.name().to_string();
        let bad = |why| Refused::Entry(name.clone(), why);
        if name.is_empty() || name.contains(['/', '\\', '\0']) || name == "." || name == ".." {
            return Err(bad("not a plain top-level file name"));
        }
        if e.is_dir() || e.unix_mode().is_some_and(|m| m & S_IFMT != 0 && m & S_IFMT != S_IFREG) {
            return Err(bad("not a regular file"));
        }
        if order.insert(name.clone(), i).is_some() {
            return Err(bad("twice in the zip"));
        }
    }
    if !order.contains_key(EXIT_CODE_FILE) {
        return Err(Refused::NoExitCode);
    }
    let mut left = budget;
    let mut buf = vec![0u8; 64 << 10];
    for (name, i) in &order {
        let mut e = z.by_index(*i)?;
        loop {
            // The bytes really unpacked count, not the sizes the zip claims.
            let n = e.read(&mut buf)?;
            if n == 0 {
                break;
            }
            left = left.checked_sub(n as u64).ok_or(Refused::Bomb(budget))?;
            visit(name, &buf[..n]);
        }
    }
    Ok(order.into_keys().collect())
}

/// What replicas of a runner job must agree on: an MD5 over each entry's
/// name and unpacked bytes in name order (the exit code is an entry).
pub fn digest(path: &Path) -> Result<String, Refused> {
    let mut h = Md5::new();
    let mut current: Option<String> = None;
    let names = read_entries(path, |name, bytes| {
        if current.as_deref() != Some(name) {
            // A separator no name or length can fake: the name's length,
            // the name, then the entry's bytes until the next header.
            h.update(b"\0entry\0");
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            current = Some(name.to_string());
        }
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    })?;
    // An empty entry has no bytes to visit: its name still counts.
    let mut tail = Md5::new();
    for n in &names {
        tail.update((n.len() as u64).to_le_bytes());
        tail.update(n.as_bytes());
    }
    h.update(tail.finalize());
    Ok(crate::files::hex(&h.finalize()))
}

/// Rewrites the zip at `path` with its entries' bytes and modes, `change`
/// applied to each entry's bytes, and every time set to `when`; whole (a
/// temporary file, then a rename).
fn rewrite(path: &Path, when: zip::DateTime, mut change: impl FnMut(&str, &mut Vec<u8>)) -> Result<(), Refused> {
    use zip::write::SimpleFileOptions;
    let mut z = zip::ZipArchive::new(io::BufReader::new(File::open(path)?))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut w = zip::ZipWriter::new(io::BufWriter::new(tmp.as_file()));
    for i in 0..z.len() {
        let mut e = z.by_index(i)?;
        let name = e.name().to_string();
        let mut data = Vec::new();
        e.read_to_end(&mut data)?;
        change(&name, &mut data);
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(when)
            .unix_permissions(e.unix_mode().unwrap_or(0o644) & 0o777);
        w.start_file(name, opts)?;
        w.write_all(&data)?;
    }
    let mut out = w.finish()?;
    out.flush()?;
    drop(out);
    tmp.persist(path).map_err(|e| Refused::Io(e.error))?;
    Ok(())
}

/// Host `host`'s copy of its zip: the same entries, zipped at the host's
/// own time (hosts' clocks and finishing times differ).
pub fn restamp(path: &Path, host: usize) -> Result<(), Refused> {
    let day = (host % 28) as u8 + 1;
    let when = zip::DateTime::from_date_and_time(2026, 1, day, 12, (host % 60) as u8, 0).unwrap_or_default();
    rewrite(path, when, |_, _| {})
}

/// A lying host's zip: its stdout says something the job never wrote.
pub fn lie(path: &Path, host_name: &str) -> Result<(), Refused> {
    rewrite(path, zip::DateTime::default(), |name, data| {
        if name == STDOUT_FILE {
            data.extend_from_slice(format!("forged by {host_name}\n").as_bytes());
        }
    })
}

/// A lying host's output of any other app: one more line at its end.
pub fn lie_plain(path: &Path, host_name: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    writeln!(f, "forged by {host_name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    fn make(path: &Path, entries: &[(&str, &[u8])], when: zip::DateTime) {
        let mut w = zip::ZipWriter::new(File::create(path).unwrap());
        for (n, d) in entries {
            w.start_file(*n, SimpleFileOptions::default().last_modified_time(when)).unwrap();
            w.write_all(d).unwrap();
        }
        w.finish().unwrap();
    }

    const JOB: &[(&str, &[u8])] = &[("_condor_exit_code", b"0"), ("_condor_stdout", b"hello\n"), ("out.txt", b"x")];

    #[test]
    fn replicas_zipped_at_other_times_differ_in_bytes_and_agree_in_digest() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a.zip"), d.path().join("b.zip"));
        make(&a, JOB, zip::DateTime::default());
        std::fs::copy(&a, &b).unwrap();
        restamp(&a, 0).unwrap();
        restamp(&b, 1).unwrap();
        assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "the zips' bytes differ");
        assert_eq!(digest(&a).unwrap(), digest(&b).unwrap());
        // Another order of the same entries agrees too.
        let c = d.path().join("c.zip");
        make(&c, &[JOB[2], JOB[0], JOB[1]], zip::DateTime::default());
        assert_eq!(digest(&a).unwrap(), digest(&c).unwrap());
    }

    #[test]
    fn a_changed_output_an_exit_code_or_a_moved_byte_disagrees() {
        let d = tempfile::tempdir().unwrap();
        let at = |n: &str, e: &[(&str, &[u8])]| {
            let p = d.path().join(n);
            make(&p, e, zip::DateTime::default());
            digest(&p).unwrap()
        };
        let honest = at("h.zip", JOB);
        assert_ne!(honest, at("e.zip", &[("_condor_exit_code", b"1"), JOB[1], JOB[2]]));
        assert_ne!(honest, at("m.zip", &[JOB[0], JOB[1]]), "a missing output");
        assert_ne!(honest, at("x.zip", &[JOB[0], JOB[1], JOB[2], ("extra", b"")]), "an extra empty output");
        // The same bytes cut between two entries otherwise.
        assert_ne!(at("s1.zip", &[JOB[0], ("a", b"xy"), ("b", b"z")]), at("s2.zip", &[JOB[0], ("a", b"x"), ("b", b"yz")]));
        let (l1, l2) = (d.path().join("h.zip"), d.path().join("l2.zip"));
        std::fs::copy(&l1, &l2).unwrap();
        lie(&l1, "liar_1").unwrap();
        lie(&l2, "liar_2").unwrap();
        let (d1, d2) = (digest(&l1).unwrap(), digest(&l2).unwrap());
        assert!(d1 != honest && d2 != honest && d1 != d2, "each liar disagrees with the others");
    }

    #[test]
    fn hostile_zips_are_refused_not_read_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("z.zip");
        for (entries, what) in [
            (&[JOB[0], ("../x", b"1" as &[u8])][..], "a .. path"),
            (&[JOB[0], ("sub/x", b"1")][..], "a path"),
            (&[JOB[0], ("/etc/x", b"1")][..], "an absolute path"),
            (&[JOB[1]][..], "no exit code"),
        ] {
            make(&p, entries, zip::DateTime::default());
            assert!(digest(&p).is_err(), "{what}");
        }
        // A link.
        let mut w = zip::ZipWriter::new(File::create(&p).unwrap());
        w.start_file("_condor_exit_code", SimpleFileOptions::default()).unwrap();
        w.write_all(b"0").unwrap();
        w.add_symlink("out.txt", "/etc/passwd", SimpleFileOptions::default()).unwrap();
        w.finish().unwrap();
        assert!(matches!(digest(&p), Err(Refused::Entry(n, _)) if n == "out.txt"));
        // A bomb: 100 MiB of zeros in a zip of about 100 KB.
        let mut w = zip::ZipWriter::new(File::create(&p).unwrap());
        w.start_file("_condor_exit_code", SimpleFileOptions::default()).unwrap();
        w.write_all(b"0").unwrap();
        w.start_file("_condor_stdout", SimpleFileOptions::default().compression_level(Some(9))).unwrap();
        let mb = vec![0u8; 1 << 20];
        for _ in 0..100 {
            w.write_all(&mb).unwrap();
        }
        w.finish().unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() < 1 << 20);
        assert!(matches!(digest(&p), Err(Refused::Bomb(_))), "{:?}", digest(&p));
        std::fs::write(&p, b"PK\x03\x04 not really").unwrap();
        assert!(digest(&p).is_err());
    }
}
