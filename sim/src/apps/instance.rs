//! One instance of a job run by one simulated host: its inputs placed under
//! their logical names in a fresh work directory, the app's process run
//! with a timeout, its outputs and stderr reported as a BOINC client would.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::{AppSpec, CORE_CLIENT_VERSION, EXIT_TIME_LIMIT_EXCEEDED, STDERR_CAP};

/// The `stderr_out` an instance reports, as a BOINC client stores it:
///
/// ```text
/// ⏎<core_client_version>8.0.2</core_client_version>⏎<![CDATA[⏎
/// [<message>⏎MESSAGE</message>⏎]<stderr_txt>⏎APP-STDERR⏎</stderr_txt>⏎]]>⏎
/// ```
///
/// (the leading newline is there in real servers' databases too). The
/// `<message>` block is the client's own note on a failure.
pub fn wrap_stderr(app_stderr: &str, message: Option<&str>) -> String {
    let mut s = format!("\n<core_client_version>{CORE_CLIENT_VERSION}</core_client_version>\n<![CDATA[\n");
    if let Some(m) = message {
        s.push_str(&format!("<message>\n{m}</message>\n"));
    }
    s.push_str(&format!("<stderr_txt>\n{app_stderr}\n</stderr_txt>\n]]>\n"));
    s
}

/// What one run of an instance gave.
#[derive(Debug, Clone)]
pub struct InstanceRun {
    /// The process's exit code (0..=255); for a process killed by a signal,
    /// the raw wait status (as the BOINC client reports it); for a run
    /// killed at the timeout, [`EXIT_TIME_LIMIT_EXCEEDED`].
    pub exit_status: i32,
    /// BOINC-wrapped stderr, see [`wrap_stderr`]. On failure a `<message>`
    /// says why (`process exited with code N (0xN, -M)`, `process got
    /// signal N`, `exceeded elapsed time limit S`).
    pub stderr: String,
    /// By output index: the file in the work directory, or `None` if the
    /// app did not create it as a regular file.
    pub outputs: Vec<Option<PathBuf>>,
    /// Real elapsed time from spawn to exit.
    pub wall_secs: f64,
    /// Real CPU time (user + system) of the process and the children it
    /// waited for, from `wait4`'s rusage.
    pub cpu_secs: f64,
    /// Whether it was killed at the timeout.
    pub timed_out: bool,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// A logical name must be a plain file name in the work directory.
fn check_logical_name(kind: &str, name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(invalid(format!("bad {kind} logical name {name:?}")));
    }
    Ok(())
}

/// Kills and reaps the child if the run is abandoned (future dropped).
struct ChildGuard {
    pid: libc::pid_t,
    reaped: bool,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.reaped {
            let pid = self.pid;
            // SAFETY: plain syscalls on our own unreaped child and its group.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
            std::thread::spawn(move || {
                let mut status = 0;
                // SAFETY: reaping our own child; blocks only until it dies.
                unsafe { libc::waitpid(pid, &mut status, 0) };
            });
        }
    }
}

/// Whether our child `pid` has ended, without reaping it: until it is
/// reaped, its pid and process group id stay reserved, so signalling them is
/// safe.
fn has_exited(pid: libc::pid_t) -> io::Result<bool> {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a local; pid is our unreaped child.
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) };
        if r == 0 {
            // SAFETY: waitid filled `info` (si_pid is 0 if nothing ended).
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps our ended child: its wait status and CPU seconds (user + system,
/// from `wait4`'s rusage).
fn reap(pid: libc::pid_t) -> io::Result<(libc::c_int, f64)> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain data; zeroed is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals; pid is our child, already ended.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return Ok((status, tv(ru.ru_utime) + tv(ru.ru_stime)));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads `r` to EOF into `buf`, keeping only the last [`STDERR_CAP`] bytes.
async fn read_tail<R: tokio::io::AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > 2 * STDERR_CAP {
                    buf.drain(..buf.len() - STDERR_CAP);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Runs one instance of `app`.
///
/// Creates `workdir` (and its parents), copies each of `inputs` to it under
/// the app's input logical names (in order; the count must match), runs the
/// app's argv (see [`AppSpec::argv`]; `exe` is the binary that dispatches
/// [`APP_ENTRY_ARG`], normally the current executable) with the job's
/// `command_line` split by [`split_command_line`], in `workdir`, in a process
/// group of its own, no shell, stdin null, stdout discarded, stderr captured
/// (its last [`STDERR_CAP`] bytes). After `timeout` of wall time the whole
/// process group is killed. When the app exits, any process it left in its
/// group is killed too.
///
/// `Err` only when the instance could not be started (bad logical names,
/// input copy failed, the program could not be executed); any outcome of a
/// started process is an `Ok(InstanceRun)`.
pub async fn run_instance(
    app: &AppSpec,
    exe: &Path,
    command_line: &str,
    inputs: &[PathBuf],
    workdir: &Path,
    timeout: Duration,
) -> io::Result<InstanceRun> {
    run_instance_with(app, exe, command_line, inputs, workdir, timeout, None).await
}

/// [`run_instance`], with the client's message for a run killed at
/// `timeout` (default: `exceeded elapsed time limit <timeout>`).
pub async fn run_instance_with(
    app: &AppSpec,
    exe: &Path,
    command_line: &str,
    inputs: &[PathBuf],
    workdir: &Path,
    timeout: Duration,
    timeout_message: Option<String>,
) -> io::Result<InstanceRun> {
    use std::os::unix::process::CommandExt;

    if inputs.len() != app.inputs.len() {
        return Err(invalid(format!("app {} takes {} input file(s), {} given", app.name, app.inputs.len(), inputs.len())));
    }
    for n in &app.inputs {
        check_logical_name("input", n)?;
    }
    for n in &app.outputs {
        check_logical_name("output", n)?;
    }
    let argv = app.argv(exe, command_line).map_err(invalid)?;

    tokio::fs::create_dir_all(workdir).await?;
    for (src, name) in inputs.iter().zip(&app.inputs) {
        let dst = workdir.join(name);
        // A copy, not a link: the app may modify its input in place.
        let _ = tokio::fs::remove_file(&dst).await;
        tokio::fs::copy(src, &dst)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("copying input {} to {name}: {e}", src.display())))?;
    }

    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(workdir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("starting {}: {e}", Path::new(&argv[0]).display())))?;
    let pid = child.id() as libc::pid_t;
    let mut guard = ChildGuard { pid, reaped: false };
    tracing::debug!(app = %app.name, pid, workdir = %workdir.display(), "instance started");

    let mut stderr_buf = Vec::new();
    let mut stderr_pipe = match child.stderr.take() {
        Some(p) => Some(tokio::process::ChildStderr::from_std(p)?),
        None => None,
    };

    let deadline = start + timeout;
    let mut timed_out = false;
    let wall_secs;
    let (status, cpu_secs) = {
        let reader = async {
            if let Some(p) = stderr_pipe.as_mut() {
                read_tail(p, &mut stderr_buf).await;
            }
        };
        tokio::pin!(reader);
        let mut reader_done = false;
        let mut poll = Duration::from_millis(1);
        let reaped = loop {
            if has_exited(pid)? {
                // Whatever the app left behind in its group goes too (the
                // ended leader, not yet reaped, keeps the group id ours).
                // SAFETY: plain syscall on our own process group.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let r = reap(pid)?;
                guard.reaped = true;
                break r;
            }
            let now = Instant::now();
            if !timed_out && now >= deadline {
                timed_out = true;
                tracing::debug!(app = %app.name, pid, "instance timed out; killing its group");
                // SAFETY: our unreaped child (and its group): the pid cannot
                // have been reused.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            let mut nap = poll;
            if !timed_out {
                nap = nap.min(deadline.saturating_duration_since(now));
            }
            tokio::select! {
                _ = &mut reader, if !reader_done => reader_done = true,
                _ = tokio::time::sleep(nap) => poll = (poll * 2).min(Duration::from_millis(20)),
            }
        };
        wall_secs = start.elapsed().as_secs_f64();
        if !reader_done {
            // A process that left the group may still hold the pipe.
            let _ = tokio::time::timeout(Duration::from_millis(500), &mut reader).await;
        }
        reaped
    };
    drop(child);

    if stderr_buf.len() > STDERR_CAP {
        stderr_buf.drain(..stderr_buf.len() - STDERR_CAP);
    }
    let app_stderr = String::from_utf8_lossy(&stderr_buf);

    let (exit_status, message) = if timed_out {
        let msg = timeout_message.unwrap_or_else(|| format!("exceeded elapsed time limit {:.2}", timeout.as_secs_f64()));
        (EXIT_TIME_LIMIT_EXCEEDED, Some(msg))
    } else if libc::WIFEXITED(status) {
        let c = libc::WEXITSTATUS(status);
        let msg = (c != 0).then(|| format!("process exited with code {c} ({c:#x}, {})", c - 256));
        (c, msg)
    } else if libc::WIFSIGNALED(status) {
        (status, Some(format!("process got signal {}", libc::WTERMSIG(status))))
    } else {
        (status, Some(format!("process ended with status {status}")))
    };

    let mut outputs = Vec::with_capacity(app.outputs.len());
    for name in &app.outputs {
        let p = workdir.join(name);
        let is_file = tokio::fs::symlink_metadata(&p).await.map(|m| m.file_type().is_file()).unwrap_or(false);
        outputs.push(is_file.then_some(p));
    }

    tracing::debug!(app = %app.name, pid, exit_status, timed_out, wall_secs, cpu_secs, "instance ended");
    Ok(InstanceRun { exit_status, stderr: wrap_stderr(&app_stderr, message.as_deref()), outputs, wall_secs, cpu_secs, timed_out })
}
