//! A client's upload stalls no other client (issue 25: "a slow or hostile
//! client cannot stall the others"): while one client's large `PUT` is
//! held up in the file system, another client's GAHP and file commands are
//! all answered, and the upload then lands whole. The real binary over TLS.
//!
//! A file system that does not answer (a hung NFS server, a dying disk) is
//! made deterministic with a FIFO: left in the upload's directory under the
//! name of a temporary file a killed daemon left behind, it is opened by
//! the first write there (which removes such files), and opening a FIFO
//! blocks until the test opens its other end.

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::serve::*;
use crate::common::*;
use gahp_protocol::gahp::request::format;
use sha2::{Digest, Sha256};

/// The upload: large enough to pass through every buffer many times over.
const UPLOAD: usize = 64 << 20;

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` bytes no compressor or cache shortcut makes light of.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that lives across the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

/// Whether a thread of process `pid` waits in the kernel for a FIFO's
/// other end (`wait_for_partner`, in the FIFO's open).
fn waits_on_a_fifo(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| std::fs::read_to_string(t.path().join("wchan")).is_ok_and(|w| w.trim() == "wait_for_partner"))
}

#[test]
fn a_large_upload_held_up_by_its_disk_stalls_no_other_client() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let uploader = add_client(dir.path(), &tokens, &sim, "uploader");
    let other = add_client(dir.path(), &tokens, &sim, "other");
    let quitter = add_client(dir.path(), &tokens, &sim, "quitter");

    // The hung file system, in the uploader's upload directory before serve
    // starts (so it is older than serve's first write there).
    let inputs = dir.path().join("serve-state/clients/uploader/files/.transfer/in");
    std::fs::create_dir_all(&inputs).unwrap();
    let fifo = inputs.join(".hung.stall0.part");
    mkfifo(&fifo);
    std::thread::sleep(Duration::from_millis(20));

    let s = serve(dir.path(), &tokens, &[]);
    let mut b = Raw::open(&s, &other);
    let mut a = Raw::open(&s, &uploader);

    let body = noise(UPLOAD);
    let sha = sha256_hex(&body);
    let (done_tx, done_rx) = mpsc::channel();
    let put = format!("PUT {sha} {UPLOAD}\n");
    let sender = std::thread::spawn(move || {
        a.send(&put);
        // As fast as serve takes it; it blocks once serve's buffers are full.
        for chunk in body.chunks(1 << 20) {
            a.tls.write_all(chunk).unwrap();
        }
        a.tls.flush().unwrap();
        let _ = done_tx.send(a.line());
    });

    // serve has taken the PUT and its writer is stuck in the file system.
    let until = Instant::now() + Duration::from_secs(60);
    while !waits_on_a_fifo(s.child.id()) {
        assert!(Instant::now() < until, "serve never opened the FIFO");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A full round of the other client's commands, GAHP and files.
    b.send("COMMANDS\r\n");
    assert!(b.line().starts_with("S "), "COMMANDS");
    b.send("VERSION\r\n");
    assert!(b.line().starts_with("S $GahpVersion"), "VERSION");
    b.send(&format!("{}\r\n", String::from_utf8(format(&sim.select())).unwrap()));
    assert_eq!(b.line(), "S", "BOINC_SELECT_PROJECT");
    b.send("BOINC_PING 1\r\n");
    assert_eq!(b.line(), "S", "BOINC_PING");
    let small = b"the other client's input\n";
    let small_sha = sha256_hex(small);
    b.send(&format!("HAVE {small_sha} {}\n", small.len()));
    assert!(b.line().starts_with("FILES E"), "HAVE before PUT");
    b.send(&format!("PUT {small_sha} {}\n", small.len()));
    b.tls.write_all(small).unwrap();
    assert_eq!(b.line(), "FILES S", "PUT");
    b.send(&format!("STAGE {small_sha} job/in\n"));
    assert_eq!(b.line(), "FILES S", "STAGE");
    b.send("LIST job\n");
    assert_eq!(b.line(), "FILES S in", "LIST");
    assert_eq!(b.get("job/in").unwrap(), small, "GET");
    let pinged = Instant::now() + Duration::from_secs(60);
    loop {
        b.send("RESULTS\r\n");
        let header = b.line();
        if header == "S 1" {
            assert!(b.line().starts_with("1 NULL"), "BOINC_PING's result");
            break;
        }
        assert_eq!(header, "S 0");
        assert!(Instant::now() < pinged, "no result for BOINC_PING");
        std::thread::sleep(Duration::from_millis(50));
    }

    // All answered while the upload could not finish.
    assert!(matches!(done_rx.try_recv(), Err(mpsc::TryRecvError::Empty)), "the upload finished before the other client's commands");
    assert!(!inputs.join(&sha).exists());

    // The file system answers again: the upload lands, whole.
    drop(std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo).expect("serve has the FIFO open"));
    let answer = done_rx.recv_timeout(Duration::from_secs(120)).expect("an answer to the PUT");
    assert_eq!(answer, "FILES S");
    sender.join().unwrap();
    let stored = std::fs::read(inputs.join(&sha)).unwrap();
    assert_eq!(stored.len(), UPLOAD);
    assert_eq!(sha256_hex(&stored), sha);
    let left: Vec<_> = std::fs::read_dir(&inputs).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 1, "no temporary file and no FIFO left: {left:?}");

    // A client that leaves in the middle of its upload leaves nothing.
    let mut q = Raw::open(&s, &quitter);
    let half = noise(3 << 20);
    q.send(&format!("PUT {} {}\n", sha256_hex(&half), half.len() * 2));
    q.tls.write_all(&half).unwrap();
    q.tls.flush().unwrap();
    let its_inputs = s.files("quitter").join(".transfer/in");
    let until = Instant::now() + Duration::from_secs(60);
    let temp_files = || std::fs::read_dir(&its_inputs).map(|d| d.count()).unwrap_or(0);
    while temp_files() == 0 {
        assert!(Instant::now() < until, "the upload never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(q);
    while temp_files() > 0 {
        assert!(Instant::now() < until, "the half upload's temporary file stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The others go on.
    b.send("COMMANDS\r\n");
    assert!(b.line().starts_with("S "));
}
