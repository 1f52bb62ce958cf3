//! What `serve` says to systemd when systemd runs it (docs/serve.md "Run
//! as a service"): READY=1 once it listens, RELOADING=1 and READY=1
//! around a reload (sd_notify, on the datagram socket `$NOTIFY_SOCKET`
//! names); and its log as journal lines when its stderr is the journal.
//! Without those variables nothing here does anything.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, Format, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Tells systemd `state` (`KEY=value` lines) if it asked to be told. A
/// failure is logged, never fatal: serve works the same without it.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else { return };
    if let Err(e) = send(&socket, state) {
        tracing::warn!(socket = %socket.to_string_lossy(), "can't tell systemd {:?}: {e}", state.lines().next().unwrap_or(""));
    }
}

fn send(socket: &OsStr, state: &str) -> io::Result<()> {
    let addr = match socket.as_bytes().strip_prefix(b"@") {
        // systemd names an abstract socket with a leading `@`.
        Some(name) => abstract_name(name)?,
        None => SocketAddr::from_pathname(socket)?,
    };
    let sent = UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &addr)?;
    if sent != state.len() {
        return Err(io::Error::other(format!("sent {sent} of {} bytes", state.len())));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn abstract_name(name: &[u8]) -> io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_name(_: &[u8]) -> io::Result<SocketAddr> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "abstract sockets are Linux's"))
}

/// `RELOADING=1` with the time the reload began on CLOCK_MONOTONIC, which
/// `Type=notify-reload` (systemd 253 and later) checks against its own.
pub fn reloading() -> String {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
    format!("RELOADING=1\nMONOTONIC_USEC={usec}")
}

/// Whether stderr is the journal: systemd sets `$JOURNAL_STREAM` to the
/// device and inode of the stream it connected, and a child's stderr that
/// went elsewhere (a gridmanager's pipe, a file) has another.
pub fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else { return false };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else { return false };
    stderr_id().is_some_and(|id| id == (dev, ino))
}

fn stderr_id() -> Option<(u64, u64)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let fd = io::stderr().as_fd().try_clone_to_owned().ok()?;
    let meta = std::fs::File::from(fd).metadata().ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Logs to stderr as the journal takes them: each line starts with its
/// priority (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and
/// trace), and has no time (the journal stamps it).
pub fn init_journal_logging(level: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(crate::settings::log_filter(level))
        .with_ansi(false)
        .event_format(JournalFormat(format::format().without_time().with_level(false)))
        .with_writer(io::stderr)
        .try_init();
}

/// The log file's line format, less the time and level, after the priority.
struct JournalFormat(Format<format::Full, ()>);

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        write!(writer, "<{}>", priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// syslog's priorities, which the journal reads from a line's `<N>`.
fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reaches_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let bound = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = bound.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        let name = format!("boinc-gahp-test-{}", std::process::id());
        let bound = UnixDatagram::bind_addr(&abstract_name(name.as_bytes()).unwrap()).unwrap();
        send(OsStr::new(&format!("@{name}")), "RELOADING=1").unwrap();
        let n = bound.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"RELOADING=1");
        assert!(send(OsStr::new("@boinc-gahp-test-nobody-listens"), "READY=1").is_err());
    }

    #[test]
    fn reloading_carries_the_monotonic_clock() {
        let state = reloading();
        let usec: u64 = state.strip_prefix("RELOADING=1\nMONOTONIC_USEC=").unwrap().parse().unwrap();
        assert!(usec > 0);
        let later: u64 = reloading().rsplit('=').next().unwrap().parse().unwrap();
        assert!(later >= usec);
    }
}
