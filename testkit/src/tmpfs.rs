//! A small tmpfs in a mount namespace of its own, for tests and chaos runs
//! of a full disk: nothing else on the machine sees it, and it goes away
//! with the last process inside (no mount is left behind by a test that
//! dies). Needs root and util-linux's `unshare` and `nsenter`; where they
//! are not to be had, [`PrivateTmpfs::mount`] says why and the caller
//! skips.
//!
//! A holder process (`sleep`) keeps the namespace; the tmpfs is mounted on
//! `dir` inside it. This process sees the tmpfs through the holder's root
//! ([`PrivateTmpfs::view`]); a daemon started through [`PrivateTmpfs::wrap`]
//! runs inside and sees it at `dir`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PrivateTmpfs {
    holder: Child,
    dir: PathBuf,
}

/// The name of the file [`PrivateTmpfs::fill`] fills the tmpfs with.
pub const FILLER: &str = "filler";

impl PrivateTmpfs {
    /// Mounts a tmpfs of `size` (mount's syntax: `64k`, `1m`) on `dir` (an
    /// absolute path, created if missing) in a new mount namespace. Err:
    /// why it can't (not root, no unshare), for the caller's skip message.
    pub fn mount(dir: &Path, size: &str) -> Result<PrivateTmpfs, String> {
        if !dir.is_absolute() {
            return Err(format!("{} is not an absolute path", dir.display()));
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "7200"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("can't run unshare: {e}"))?;
        let mut fs = PrivateTmpfs { holder, dir: dir.to_path_buf() };
        // unshare makes the namespace, then execs sleep: wait for that.
        let ours = std::fs::read_link("/proc/self/ns/mnt").map_err(|e| format!("/proc/self/ns/mnt: {e}"))?;
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(Some(status)) = fs.holder.try_wait() {
                return Err(format!("unshare --mount failed ({status}): a mount namespace needs root"));
            }
            let theirs = std::fs::read_link(format!("/proc/{}/ns/mnt", fs.pid())).ok();
            let sleeping = std::fs::read_to_string(format!("/proc/{}/comm", fs.pid())).is_ok_and(|c| c.trim() == "sleep");
            if sleeping && theirs.is_some_and(|t| t != ours) {
                break;
            }
            if Instant::now() > until {
                return Err("unshare --mount did not make a mount namespace within 5 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mounted = Command::new("nsenter")
            .args(["-t", &fs.pid().to_string(), "-m", "mount", "-t", "tmpfs", "-o", &format!("size={size}"), "gahp-test-tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("can't run nsenter: {e}"))?;
        if !mounted.success() {
            return Err(format!("mounting a tmpfs failed ({mounted}): it needs root"));
        }
        Ok(fs)
    }

    fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// Where the tmpfs is inside its namespace (the `dir` it was mounted on).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The tmpfs as this process sees it: `dir` through the holder's root.
    pub fn view(&self) -> PathBuf {
        let rel = self.dir.strip_prefix("/").unwrap_or(&self.dir);
        Path::new(&format!("/proc/{}/root", self.pid())).join(rel)
    }

    /// The program and leading arguments that run `exe` inside the
    /// namespace, in `cwd`: nsenter, then `exe`'s own arguments follow.
    pub fn wrap(&self, exe: &Path, cwd: &Path) -> (PathBuf, Vec<String>) {
        let args = vec![
            "-t".to_string(),
            self.pid().to_string(),
            "-m".into(),
            format!("--wd={}", cwd.display()),
            "--".into(),
            exe.display().to_string(),
        ];
        (PathBuf::from("nsenter"), args)
    }

    /// Fills the tmpfs to the last byte with [`FILLER`]: the next write
    /// that needs a block fails with "No space left on device".
    pub fn fill(&self) -> io::Result<u64> {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.view().join(FILLER))?;
        let chunk = [b'x'; 4096];
        let mut n = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => return Ok(n),
                Ok(k) => n += k as u64,
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => return Err(e),
            }
        }
        // A tmpfs counts whole pages: byte by byte into the last one.
        while f.write(b"x").is_ok_and(|k| k == 1) {
            n += 1;
        }
        Ok(n)
    }

    /// Removes the filler: the space is back.
    pub fn free(&self) -> io::Result<()> {
        std::fs::remove_file(self.view().join(FILLER))
    }
}

impl Drop for PrivateTmpfs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
