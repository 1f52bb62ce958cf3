//! The command line: one `ready` line, exit on stdin close and SIGTERM, the
//! authenticator kept in the state directory.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(dir: &std::path::Path) -> (Child, String, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("BOINC_SIM_TEST_CLI", "1")
        .args(["--listen", "127.0.0.1:0", "--time-scale", "2", "--dir"])
        .arg(dir)
        .arg("--log-file")
        .arg(dir.join("sim.log"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let parts: Vec<&str> = line.trim_end().split(' ').collect();
    assert_eq!(parts.len(), 3, "{line:?}");
    assert_eq!(parts[0], "ready");
    assert!(parts[1].starts_with("http://127.0.0.1:") && parts[1].ends_with("/boinctest/"), "{line}");
    assert!(parts[2].len() == 32 && parts[2].chars().all(|c| c.is_ascii_hexdigit()), "{line}");
    (child, parts[1].to_string(), parts[2].to_string())
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "boinc-sim did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub async fn ready_line_and_stdin_close() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url, auth) = spawn(dir.path());
    let client = awc::Client::default();
    let mut resp = client
        .post(format!("{url}submit_rpc_handler.php"))
        .insert_header(("Content-Type", "application/x-www-form-urlencoded"))
        .send_body("request=%3Cping%3E+%3C%2Fping%3E")
        .await
        .unwrap();
    let body = resp.body().await.unwrap();
    assert!(String::from_utf8_lossy(&body).contains("<success>1</success>"));
    // Closing stdin stops it; nothing else was written to stdout.
    drop(child.stdin.take());
    let status = wait_exit(&mut child);
    assert!(status.success(), "{status:?}: {}", std::fs::read_to_string(dir.path().join("sim.log")).unwrap_or_default());
    let mut rest = String::new();
    child.stdout.take().unwrap().read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "");
    assert!(std::fs::read_to_string(dir.path().join("sim.log")).unwrap().contains("serving"));

    // Same directory: same authenticator; SIGTERM stops it.
    let (mut child, _, auth2) = spawn(dir.path());
    assert_eq!(auth, auth2);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert!(wait_exit(&mut child).success());
}
