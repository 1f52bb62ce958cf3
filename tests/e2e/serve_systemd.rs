//! `boinc_gahp serve` as systemd runs it (docs/serve.md "Run as a
//! service"), the real binary with the variables systemd sets: READY=1 on
//! `$NOTIFY_SOCKET` once it takes connections, a SIGHUP that reads the
//! tokens file again (RELOADING=1, READY=1) without dropping a connection,
//! and its log as journal lines when `$JOURNAL_STREAM` is its stderr. The
//! unit itself is checked by `systemd-analyze` in deploy/package/build: no
//! systemd runs the tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::serve::{add_client, boinc_gahp};
use crate::common::*;

/// A serve on plain loopback TCP, with `env` set; stderr to `stderr`.
struct Served {
    child: Child,
    port: u16,
    log_dir: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(dir: &Path, tokens: &Path, env: &[(&str, &str)], stderr: Option<std::fs::File>) -> Served {
        let log_dir = dir.join("serve-log");
        let mut cmd = Command::new(boinc_gahp());
        cmd.args(["--state-dir", dir.join("serve-state").to_str().unwrap()]);
        cmd.args(["--log-file", log_dir.join("gahp.log").to_str().unwrap()]);
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--insecure-loopback", "--tokens", tokens.to_str().unwrap()]);
        cmd.envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::null());
        let port_line = |line: &str| line.trim().rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        match stderr {
            None => {
                let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
                let mut line = String::new();
                BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
                let port = port_line(&line).unwrap_or_else(|| panic!("no port in {line:?}"));
                Served { child, port, log_dir }
            }
            Some(file) => {
                let path = dir.join("stderr");
                // Killed on drop, also if it never says its port.
                let mut served = Served { child: cmd.stderr(file).spawn().unwrap(), port: 0, log_dir };
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    if let Some(port) = text.lines().find(|l| l.contains("listening on")).and_then(port_line) {
                        served.port = port;
                        return served;
                    }
                    assert!(Instant::now() < deadline, "serve did not listen: {text}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    /// `AUTH` with the token in `token_file`: the server's answer line.
    fn auth(&self, token_file: &Path) -> String {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let token = std::fs::read_to_string(token_file).unwrap();
        tcp.write_all(format!("AUTH {}\r\n", token.trim()).as_bytes()).unwrap();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while tcp.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
            line.push(b[0]);
        }
        String::from_utf8_lossy(&line).trim_end().to_string()
    }

    fn connect(&self, token_file: &Path, cwd: &Path) -> GahpClient {
        let port = self.port.to_string();
        let addr = format!("127.0.0.1:{port}");
        let args = ["connect", addr.as_str(), "--token-file", token_file.to_str().unwrap(), "--insecure-loopback"];
        GahpClient::spawn(boinc_gahp(), &args, &[], cwd).expect("connect reads the banner")
    }

    fn hangup(&self) {
        let status = Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }

    /// Its log file's lines; none if it made no log file.
    fn log_text(&self) -> String {
        if self.log_dir.exists() {
            log_text(&self.log_dir)
        } else {
            String::new()
        }
    }
}

/// The test's end of `$NOTIFY_SOCKET`: what serve says, message by message.
struct Notify {
    socket: UnixDatagram,
    /// The variable's value.
    name: String,
}

impl Notify {
    /// On a path in `dir`.
    fn path(dir: &Path) -> Notify {
        let path = dir.join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        Notify { socket, name: path.to_str().unwrap().to_string() }
    }

    /// On an abstract socket, as systemd names its own (`@...`).
    fn abstract_socket(tag: &str) -> Notify {
        let name = format!("boinc-gahp-test-{}-{tag}", std::process::id());
        let socket = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        Notify { socket, name: format!("@{name}") }
    }

    /// The next message, within 30 s.
    fn next(&self) -> String {
        self.socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).expect("a message from serve on NOTIFY_SOCKET");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// Nothing more for a while.
    fn silent_for(&self, d: Duration) -> bool {
        self.socket.set_read_timeout(Some(d)).unwrap();
        let mut buf = [0u8; 4096];
        self.socket.recv(&mut buf).is_err()
    }
}

fn ready(message: &str) -> bool {
    message.lines().any(|l| l == "READY=1")
}

/// The mtime of a file.
fn mtime(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

/// Writes `text` over the tokens file and gives it back its old mtime, so
/// that only a reload, not serve's watch of the file, sees the change.
fn rewrite_keeping_mtime(path: &Path, change: impl FnOnce()) {
    let was = mtime(path);
    change();
    std::fs::File::options().write(true).open(path).unwrap().set_modified(was).unwrap();
    assert_eq!(mtime(path), was);
}

#[test]
fn ready_comes_once_serve_takes_connections() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let notify = Notify::path(dir.path());
    let s = Served::start(dir.path(), &tokens, &[("NOTIFY_SOCKET", &notify.name)], None);
    let first = notify.next();
    assert!(ready(&first), "{first:?}");
    assert!(first.contains("STATUS=listening on 127.0.0.1:"), "{first:?}");
    // At READY=1 a client gets in at once.
    assert_eq!(s.auth(&alice), "S");
    assert!(notify.silent_for(Duration::from_millis(300)), "READY=1 is said once");
    assert!(!s.log_text().contains("can't tell systemd"), "{}", s.log_text());
}

#[test]
fn a_sighup_reads_the_tokens_file_again_and_keeps_the_connected_clients() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let carol = add_client(dir.path(), &tokens, &sim, "carol");
    let notify = Notify::abstract_socket("reload");
    let s = Served::start(dir.path(), &tokens, &[("NOTIFY_SOCKET", &notify.name)], None);
    assert!(ready(&notify.next()));

    let mut a = s.connect(&alice, dir.path());
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);
    let mut c = s.connect(&carol, dir.path());
    assert_eq!(c.command(&sim.select()).unwrap(), ["S"]);

    // Bob is added and Carol revoked, in a file whose time says it did
    // not change: serve's watch of the file does not see it.
    let mut bob = PathBuf::new();
    rewrite_keeping_mtime(&tokens, || {
        bob = add_client(dir.path(), &tokens, &sim, "bob");
        let out = Command::new(boinc_gahp()).args(["token", "revoke", "carol", "--tokens", tokens.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success());
    });
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(s.auth(&bob), "E token\\ refused", "no reload yet");
    assert_eq!(c.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"], "Carol is still served before the reload");

    s.hangup();
    let reloading = notify.next();
    assert!(reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{reloading:?}");
    let usec: u64 = reloading.rsplit('=').next().unwrap().parse().unwrap();
    assert!(usec > 0);
    let done = notify.next();
    assert!(ready(&done), "{done:?}");

    assert_eq!(s.auth(&bob), "S", "a new token gets in after the reload");
    assert_eq!(s.auth(&carol), "E token\\ refused", "a removed one no longer does");
    // Carol's open connection is ended, and connect is told not to come back.
    assert!(c.wait_exit(Duration::from_secs(20)).unwrap().is_some(), "the revoked client's connection ends");
    // Alice's connection went on through it all.
    assert_eq!(a.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);
    assert!(s.log_text().contains("reloaded the tokens file clients=2"), "{}", s.log_text());
}

#[test]
fn a_broken_tokens_file_on_reload_keeps_the_tokens_read_before() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let bob = add_client(dir.path(), &tokens, &sim, "bob");
    let notify = Notify::path(dir.path());
    let s = Served::start(dir.path(), &tokens, &[("NOTIFY_SOCKET", &notify.name)], None);
    assert!(ready(&notify.next()));
    let mut a = s.connect(&alice, dir.path());
    assert_eq!(a.command(&sim.select()).unwrap(), ["S"]);

    std::fs::write(&tokens, "[[client]]\nname = \"half an edit").unwrap();
    s.hangup();
    assert!(notify.next().starts_with("RELOADING=1\n"));
    assert!(ready(&notify.next()), "READY=1 after a reload that kept the old tokens");
    assert_eq!(a.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"], "the connected client goes on");
    // (Bob's: a new connection of Alice's would replace her open one.)
    assert_eq!(s.auth(&bob), "S", "a token read before still works");
    // Past serve's own look at the file (every 2 s): still in force, said once.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(s.auth(&bob), "S");
    assert_eq!(a.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);
    let log = s.log_text();
    assert_eq!(log.matches("the tokens read before stay in force").count(), 1, "{log}");
    assert!(log.contains("is not a tokens file"), "the log says why: {log}");
}

#[test]
fn under_the_journal_the_log_is_stderr_lines_with_priorities_and_no_token() {
    let sim = Sim::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    let alice = add_client(dir.path(), &tokens, &sim, "alice");
    let wrong = dir.path().join("wrong.token");
    std::fs::write(&wrong, "bgt_0000000000000000000000000000000000000000000000000000000000000000\n").unwrap();
    let stderr_path = dir.path().join("stderr");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let meta = stderr.metadata().unwrap();
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let s = Served::start(dir.path(), &tokens, &[("JOURNAL_STREAM", &stream)], Some(stderr));
    assert_eq!(s.auth(&alice), "S");
    assert_eq!(s.auth(&wrong), "E token\\ refused");
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&stderr_path).unwrap();
        if text.contains("unknown token") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let logged: Vec<&str> = text.lines().filter(|l| l.starts_with('<')).collect();
    assert!(logged.iter().any(|l| l.starts_with("<6>") && l.contains("boinc_gahp serve starting")), "{text}");
    assert!(logged.iter().any(|l| l.starts_with("<6>") && l.contains("refused a connection: unknown token")), "{text}");
    // The journal stamps the time; the level is the prefix.
    assert!(logged.iter().all(|l| !l.contains(" INFO ") && !l[3..].starts_with(|c: char| c.is_ascii_digit())), "{text}");
    for token in [&alice, &wrong] {
        assert!(!text.contains(std::fs::read_to_string(token).unwrap().trim()), "a token in the journal");
    }
    assert!(s.log_text().is_empty(), "no log file beside the journal");
    drop(s);

    // A JOURNAL_STREAM that is not its stderr (a child of a service whose
    // stderr goes elsewhere): the log file, as without systemd.
    let other = tempfile::tempdir().unwrap();
    add_client(other.path(), &other.path().join("tokens.toml"), &sim, "alice");
    let stderr = std::fs::File::create(other.path().join("stderr")).unwrap();
    let s = Served::start(other.path(), &other.path().join("tokens.toml"), &[("JOURNAL_STREAM", &stream)], Some(stderr));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.log_text().contains("boinc_gahp serve starting") {
        assert!(Instant::now() < deadline, "serve logs to its log file");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!std::fs::read_to_string(other.path().join("stderr")).unwrap().contains("<6>"));
}
