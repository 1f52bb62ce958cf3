//! The verdict of the hostile-hosts profile (docs/chaos.md): what a
//! hostile host's `condor_out.zip` may and may not do to the submit host,
//! as pure functions of what the run saw, each shown to fail below.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use boinc_sim::hostile::HostileKind;

/// What a path is, compared before and after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File { len: u64, hash: u64 },
    Link(PathBuf),
    Other,
}

/// Every path under a root (relative), links not followed.
pub type Tree = BTreeMap<PathBuf, Node>;

/// The tree under `root`, without what is under `skip` (the jobs' own
/// directories: the nodes themselves are kept, so a job directory turned
/// into a link shows).
pub fn snapshot(root: &Path, skip: &[PathBuf]) -> std::io::Result<Tree> {
    let mut tree = Tree::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(root.join(&rel))? {
            let e = e?;
            let p = rel.join(e.file_name());
            let node = node_of(&e.path())?;
            if node == Node::Dir && !skip.iter().any(|s| *s == root.join(&p)) {
                todo.push(p.clone());
            }
            tree.insert(p, node);
        }
    }
    Ok(tree)
}

/// One path as a [`Node`] (a file's content hashed).
pub fn node_of(path: &Path) -> std::io::Result<Node> {
    let m = std::fs::symlink_metadata(path)?;
    let ft = m.file_type();
    Ok(if ft.is_symlink() {
        Node::Link(std::fs::read_link(path)?)
    } else if ft.is_dir() {
        Node::Dir
    } else if ft.is_file() {
        let mut f = std::fs::File::open(path)?;
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h = buf[..n].iter().fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
        }
        Node::File { len: m.len(), hash: h }
    } else {
        Node::Other
    })
}

/// Everything outside the jobs' directories is as it was: nothing added,
/// removed or changed.
pub fn outside_changes(before: &Tree, after: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (p, n) in after {
        match before.get(p) {
            None => out.push(format!("{} appeared outside the jobs' directories ({n:?})", p.display())),
            Some(b) if b != n => out.push(format!("{} outside the jobs' directories changed: {b:?}, now {n:?}", p.display())),
            Some(_) => {}
        }
    }
    for p in before.keys().filter(|p| !after.contains_key(*p)) {
        out.push(format!("{} outside the jobs' directories is gone", p.display()));
    }
    out
}

/// A job's directory after its run against before: what was there is
/// unchanged (its script, input, submit file, log, the link the submitter
/// keeps), and what is new is a top-level regular file that is not a
/// dot-file, never a link or a directory.
pub fn iwd_violations(job: &str, before: &Tree, after: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (p, n) in before {
        match after.get(p) {
            None => out.push(format!("job {job}: its {} is gone", p.display())),
            Some(a) if a != n => out.push(format!("job {job}: its {} changed: {n:?}, now {a:?}", p.display())),
            Some(_) => {}
        }
    }
    for (p, n) in after.iter().filter(|(p, _)| !before.contains_key(*p)) {
        let name = p.to_string_lossy();
        let planted = if p.components().count() > 1 {
            "a path below a directory"
        } else if name.starts_with('.') {
            "a dot-file"
        } else {
            match n {
                Node::File { .. } => continue,
                Node::Dir => "a directory",
                Node::Link(_) => "a link",
                Node::Other => "a special file",
            }
        };
        out.push(format!("job {job}: {planted} {} was planted in its directory", p.display()));
    }
    out
}

/// A job held or failed over its zip leaves nothing of it in its
/// directory: the only new files are its own streams (`streams`, which a
/// failed job gets empty).
pub fn refused_leftovers(job: &str, before: &Tree, after: &Tree, streams: &[&str]) -> Vec<String> {
    after
        .keys()
        .filter(|p| !before.contains_key(*p) && !streams.iter().any(|s| Path::new(s) == p.as_path()))
        .map(|p| format!("job {job} was refused, yet {} of its zip is in its directory", p.display()))
        .collect()
}

/// What the daemon must do with each kind when no quorum is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The zip is unsafe or its result unreadable: the job is held or
    /// failed, nothing of it placed.
    Refuse,
    /// A plain result with entries a job's directory must not get (dot-
    /// files, directories, paths through a link): it may complete, with
    /// none of those placed.
    Contain,
    /// A plain exit code with plain files, as an honest host sends: only
    /// a quorum can tell.
    QuorumOnly,
}

pub fn class(kind: HostileKind) -> Class {
    use HostileKind::*;
    match kind {
        LinkFile | LinkDir | DotDot | Absolute | BombStdout | ManyEntries | ExitLink | ExitGarbage | DuplicateExit | SpecialNames => {
            Class::Refuse
        }
        ThroughIwdLink | DotFiles | DirTree | DirLikeInput | DirLikeJobFiles => Class::Contain,
        ForgedExit => Class::QuorumOnly,
    }
}

/// How a job ended, as the daemon reported it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// Status 4: its exit code, and whether the daemon said it failed
    /// (`ExitReason`).
    Completed {
        exit: Option<i64>,
        failed: bool,
    },
    Held(String),
    Removed,
    NotFinal,
}

/// A job's outcome against the hostile kinds its hosts sent (`kinds`, one
/// per instance that lied): `honest` says whether its files are the ones
/// its script makes.
pub fn outcome(job: &str, kinds: &[HostileKind], ended: &Ended, quorum: bool, honest: bool) -> Option<String> {
    let refused = matches!(ended, Ended::Held(_) | Ended::Completed { failed: true, .. });
    let success = matches!(ended, Ended::Completed { failed: false, .. });
    let names = || kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ");
    if *ended == Ended::NotFinal {
        return Some(format!("job {job} ({}) did not finish in time", if kinds.is_empty() { "honest".into() } else { names() }));
    }
    if kinds.is_empty() || quorum {
        // Honest, or every lie outvoted: the job's own result, or (with a
        // quorum that could not agree) a refusal.
        return match (success, honest) {
            (true, true) => None,
            (true, false) if kinds.is_empty() => Some(format!("honest job {job} completed without its script's files")),
            (true, false) => Some(format!("job {job} completed with a forged result ({}) although a quorum was set", names())),
            (false, _) if quorum && refused => None,
            (false, _) => Some(format!("honest job {job} did not complete: {ended:?}")),
        };
    }
    if kinds.iter().any(|k| class(*k) == Class::Refuse) && !refused {
        return Some(format!("job {job} got a hostile zip ({}) that must be refused, and ended {ended:?}", names()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use HostileKind::*;

    fn tree(items: &[(&str, Node)]) -> Tree {
        items.iter().map(|(p, n)| (PathBuf::from(p), n.clone())).collect()
    }

    fn file(hash: u64) -> Node {
        Node::File { len: 1, hash }
    }

    #[test]
    fn a_file_added_changed_or_removed_outside_is_a_violation() {
        let before = tree(&[("home/.bashrc", file(1)), ("outside", Node::Dir), ("outside/target.txt", file(2))]);
        assert!(outside_changes(&before, &before).is_empty());
        let mut planted = before.clone();
        planted.insert("outside/planted.txt".into(), file(3));
        assert!(outside_changes(&before, &planted)[0].contains("outside/planted.txt appeared"));
        let mut changed = before.clone();
        changed.insert("outside/target.txt".into(), file(9));
        assert!(outside_changes(&before, &changed)[0].contains("changed"));
        let mut gone = before.clone();
        gone.remove(Path::new("home/.bashrc"));
        assert!(outside_changes(&before, &gone)[0].contains("gone"));
    }

    #[test]
    fn only_top_level_plain_files_may_appear_in_a_jobs_directory() {
        let before = tree(&[("job.sh", file(1)), ("in", file(2)), ("data", Node::Link("../../outside".into()))]);
        let mut after = before.clone();
        after.insert("job.out".into(), file(3));
        after.insert("out.txt".into(), file(4));
        assert!(iwd_violations("j", &before, &after).is_empty());
        for (p, n, says) in [
            (".bashrc", file(5), "a dot-file"),
            ("sub", Node::Dir, "a directory"),
            ("sub/deep.txt", file(6), "below a directory"),
            ("notes.txt", Node::Link("/etc/passwd".into()), "a link"),
            ("fifo", Node::Other, "a special file"),
        ] {
            let mut bad = after.clone();
            bad.insert(p.into(), n);
            let v = iwd_violations("j", &before, &bad);
            assert!(v.len() == 1 && v[0].contains(says), "{p}: {v:?}");
        }
        let mut replaced = after.clone();
        replaced.insert("in".into(), Node::Dir);
        assert!(iwd_violations("j", &before, &replaced)[0].contains("its in changed"));
        let mut relinked = after.clone();
        relinked.insert("data".into(), Node::Link("/".into()));
        assert!(!iwd_violations("j", &before, &relinked).is_empty());
    }

    #[test]
    fn a_refused_job_keeps_nothing_of_its_zip() {
        let before = tree(&[("job.sh", file(1)), ("in", file(2))]);
        let mut after = before.clone();
        after.insert("job.out".into(), file(3));
        after.insert("job.err".into(), file(4));
        assert!(refused_leftovers("j", &before, &after, &["job.out", "job.err"]).is_empty());
        after.insert("result.txt".into(), file(5));
        assert!(refused_leftovers("j", &before, &after, &["job.out", "job.err"])[0].contains("result.txt"));
    }

    #[test]
    fn a_zip_that_must_be_refused_and_completed_is_a_violation() {
        let ok = Ended::Completed { exit: Some(0), failed: false };
        let held = Ended::Held("refused".into());
        let failed = Ended::Completed { exit: Some(1), failed: true };
        for k in HostileKind::ALL.into_iter().filter(|k| class(*k) == Class::Refuse) {
            assert!(outcome("j", &[k], &ok, false, false).is_some(), "{k}");
            assert_eq!(outcome("j", &[k], &held, false, false), None, "{k}");
            assert_eq!(outcome("j", &[k], &failed, false, false), None, "{k}");
        }
        // Without a quorum a plain forgery, or a contained one, may pass.
        assert_eq!(outcome("j", &[ForgedExit], &ok, false, false), None);
        assert_eq!(outcome("j", &[DotFiles], &ok, false, false), None);
        assert!(outcome("j", &[DotDot], &Ended::NotFinal, false, false).is_some());
    }

    #[test]
    fn with_a_quorum_a_forged_result_never_completes() {
        let ok = Ended::Completed { exit: Some(0), failed: false };
        assert!(outcome("j", &[ForgedExit], &ok, true, false).unwrap().contains("forged result"));
        assert_eq!(outcome("j", &[ForgedExit], &ok, true, true), None, "outvoted: the honest result");
        assert_eq!(outcome("j", &[ForgedExit], &Ended::Held("no agreement".into()), true, false), None);
    }

    #[test]
    fn an_honest_job_completes_with_its_own_files() {
        let ok = Ended::Completed { exit: Some(0), failed: false };
        assert_eq!(outcome("j", &[], &ok, false, true), None);
        assert!(outcome("j", &[], &ok, false, false).is_some());
        assert!(outcome("j", &[], &Ended::Held("x".into()), false, true).is_some());
    }
}
