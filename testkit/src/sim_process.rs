//! A `boinc-sim` process on loopback with its introspection endpoint, and a
//! minimal blocking HTTP client (no async runtime needed in tests).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gahp_protocol::gahp::Request;
use gahp_protocol::Authenticator;

/// A running `boinc-sim` on 127.0.0.1 with its own directory.
pub struct SimProcess {
    child: Child,
    pub url: String,
    pub auth: String,
    pub dir: tempfile::TempDir,
}

impl SimProcess {
    /// Starts `exe` (the `boinc-sim` binary) on a free loopback port with a
    /// new directory and waits for its `ready` line.
    pub fn start(exe: &Path, args: &[&str]) -> io::Result<SimProcess> {
        let dir = tempfile::tempdir()?;
        let mut child = Command::new(exe)
            .args(["--listen", "127.0.0.1:0", "--dir"])
            .arg(dir.path())
            .args(["--log-file"])
            .arg(dir.path().join("sim.log"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or_else(|| io::Error::other("no stdout"))?).read_line(&mut line)?;
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() != 3 || words[0] != "ready" {
            let _ = child.kill();
            return Err(io::Error::other(format!("boinc-sim said {line:?} instead of its ready line")));
        }
        Ok(SimProcess { child, url: words[1].to_string(), auth: words[2].to_string(), dir })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn select(&self) -> Request {
        Request::SelectProject { url: self.url.clone(), authenticator: Authenticator::new(self.auth.clone()) }
    }

    /// host:port and the path of the project URL.
    fn addr_and_path(&self) -> (String, String) {
        let rest = self.url.strip_prefix("http://").unwrap_or(&self.url);
        let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
        (addr.to_string(), format!("/{path}"))
    }

    /// The sim's introspection document.
    pub fn state(&self) -> serde_json::Value {
        let (addr, path) = self.addr_and_path();
        let body = http(&addr, "GET", &format!("{path}__sim/state"), None);
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("state JSON: {e}: {body}"))
    }

    /// Changes one simulated host (`{"id": 1, "straggler_rate": 1.0, ...}`).
    pub fn set_host(&self, json: &str) {
        let (addr, path) = self.addr_and_path();
        http(&addr, "POST", &format!("{path}__sim/hosts"), Some(json));
    }

    /// Moves the sim's clock forward: instances due in that much sim time
    /// are reported at the next tick.
    pub fn advance_clock(&self, secs: f64) {
        let (addr, path) = self.addr_and_path();
        http(&addr, "POST", &format!("{path}__sim/clock"), Some(&serde_json::json!({ "advance": secs }).to_string()));
    }

    pub fn set_faults(&self, plan: serde_json::Value) {
        let (addr, path) = self.addr_and_path();
        http(&addr, "PUT", &format!("{path}__sim/faults"), Some(&plan.to_string()));
    }

    /// How many times `script:rpc` was called (faulted calls included).
    pub fn calls(&self, endpoint: &str) -> u64 {
        let (addr, path) = self.addr_and_path();
        let body = http(&addr, "GET", &format!("{path}__sim/state?jobs=0"), None);
        let state: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("state JSON: {e}: {body}"));
        state["rpc_counts"][endpoint].as_u64().unwrap_or(0)
    }

    pub fn batches_named(&self, name: &str) -> Vec<serde_json::Value> {
        self.state()["batches"].as_array().unwrap().iter().filter(|b| b["name"] == name).cloned().collect()
    }

    pub fn jobs_of(&self, batch_id: i64) -> Vec<serde_json::Value> {
        self.state()["jobs"].as_array().unwrap().iter().filter(|j| j["batch"] == batch_id).cloned().collect()
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.0 exchange on loopback; panics unless the status is 200
/// or the whole reply has not come within a minute (a stalled or dripping
/// server fails the test, it does not hang it).
pub fn http(addr: &str, method: &str, path: &str, json: Option<&str>) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the simulated project");
    let body = json.unwrap_or("");
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        .expect("send");
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = until.checked_duration_since(std::time::Instant::now()).filter(|d| !d.is_zero());
        let left = left.unwrap_or_else(|| panic!("{method} {path}: no whole reply within 60 s"));
        s.set_read_timeout(Some(left)).expect("socket option");
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("{method} {path}: read: {e}"),
        }
    }
    let out = String::from_utf8(raw).expect("a UTF-8 reply");
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    assert!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"), "{method} {path}: {head}");
    body.to_string()
}
