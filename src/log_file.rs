//! The log's writer: a line that can't be written (the log's disk is full,
//! its file system failed) is dropped, never waited for or retried, so the
//! daemon goes on. The first drop is said once on stderr; once lines can be
//! written again, the log says how many were dropped.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tracing_subscriber::fmt::MakeWriter;

/// Wraps the log file's writer (`inner`), whose writes may fail.
pub struct DroppingLog<M> {
    inner: M,
    /// What the log is, for the stderr line.
    name: String,
    /// Lines dropped since the last one written.
    dropped: AtomicU64,
    /// Whether stderr has been told.
    said: AtomicBool,
}

impl<M> DroppingLog<M> {
    pub fn new(inner: M, name: String) -> Self {
        DroppingLog { inner, name, dropped: AtomicU64::new(0), said: AtomicBool::new(false) }
    }

    fn drop_line(&self, e: &io::Error) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        if !self.said.swap(true, Ordering::Relaxed) {
            eprintln!("boinc_gahp: can't write the log {}: {e}; log lines are dropped until it can be written again", self.name);
        }
    }
}

/// One line's writer.
pub struct LogLine<'a, M: MakeWriter<'a>> {
    log: &'a DroppingLog<M>,
    inner: M::Writer,
}

impl<'a, M: MakeWriter<'a> + 'a> MakeWriter<'a> for DroppingLog<M> {
    type Writer = LogLine<'a, M>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine { log: self, inner: self.inner.make_writer() }
    }
}

impl<'a, M: MakeWriter<'a>> Write for LogLine<'a, M> {
    /// Takes a whole line (the formatter writes each event at once) and
    /// always succeeds: a line that can't be written is counted instead.
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let dropped = self.log.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            // On a line of its own, whatever part of a line the failed
            // write left.
            let note = format!("\nboinc_gahp: {dropped} log lines were dropped here: the log could not be written\n");
            if let Err(e) = self.inner.write_all(note.as_bytes()) {
                self.log.dropped.fetch_add(dropped, Ordering::Relaxed);
                self.log.drop_line(&e);
                return Ok(line.len());
            }
        }
        if let Err(e) = self.inner.write_all(line) {
            self.log.drop_line(&e);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = self.inner.flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A file system that fails while `full` is set; what it took.
    #[derive(Clone, Default)]
    struct Disk {
        full: Arc<AtomicBool>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.full.load(Ordering::Relaxed) {
                return Err(io::Error::from_raw_os_error(28));
            }
            self.written.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_dropped_while_the_disk_is_full_and_counted_after() {
        let disk = Disk::default();
        let d = disk.clone();
        let log = DroppingLog::new(move || d.clone(), "test.log".into());
        let line = |text: &str| log.make_writer().write(text.as_bytes()).unwrap();
        line("one\n");
        disk.full.store(true, Ordering::Relaxed);
        for _ in 0..3 {
            assert_eq!(line("lost\n"), 5, "a dropped line is not an error");
        }
        assert!(log.said.load(Ordering::Relaxed));
        disk.full.store(false, Ordering::Relaxed);
        line("two\n");
        let text = String::from_utf8(disk.written.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "one\n\nboinc_gahp: 3 log lines were dropped here: the log could not be written\ntwo\n");
        line("three\n");
        assert!(String::from_utf8(disk.written.lock().unwrap().clone()).unwrap().ends_with("two\nthree\n"), "said once");
    }
}
