//! `boinc_gahp serve` for the end-to-end tests: clients added with `token
//! add`, a throwaway certificate for 127.0.0.1, and GAHP clients through
//! `boinc_gahp connect`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::{log_text, GahpClient, Sim};

pub fn boinc_gahp() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_boinc_gahp"))
}

/// `token add NAME` for the sim's project; returns the token file's path.
pub fn add_client(dir: &Path, tokens: &Path, sim: &Sim, name: &str) -> PathBuf {
    add_client_sims(dir, tokens, &[sim], name)
}

/// `token add NAME` with a `--project` for each sim (its account).
pub fn add_client_sims(dir: &Path, tokens: &Path, sims: &[&Sim], name: &str) -> PathBuf {
    let mut projects = Vec::new();
    for (i, sim) in sims.iter().enumerate() {
        let auth = dir.join(if i == 0 { format!("{name}.auth") } else { format!("{name}-{i}.auth") });
        std::fs::write(&auth, format!("{}\n", sim.auth)).unwrap();
        projects.push((sim.url.clone(), auth));
    }
    add_client_of(dir, tokens, &projects, name)
}

/// `token add NAME --project URL=AUTH_FILE ...`; returns the token file's path.
pub fn add_client_of(dir: &Path, tokens: &Path, projects: &[(String, PathBuf)], name: &str) -> PathBuf {
    let mut cmd = Command::new(boinc_gahp());
    cmd.args(["token", "add", name, "--tokens", tokens.to_str().unwrap()]);
    for (url, auth) in projects {
        cmd.arg("--project").arg(format!("{url}={}", auth.display()));
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = dir.join(format!("{name}.token"));
    std::fs::write(&file, &out.stdout).unwrap();
    file
}

pub struct Serve {
    pub child: Child,
    pub port: u16,
    /// Its `--state-dir`.
    pub state: PathBuf,
    /// Its certificate, which the clients trust; `None` on plain TCP.
    pub ca: Option<PathBuf>,
    pub tokens: PathBuf,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A serve over `dir/serve-state` (so a second one on the same `dir` is a
/// restart), logging into `dir/serve-log`: over TLS with a certificate for
/// 127.0.0.1 made by the first, or plain TCP when `extra` (the flags after
/// `serve`) has `--insecure-loopback`. The tokens file must exist: add a
/// client first.
pub fn serve(dir: &Path, tokens: &Path, extra: &[&str]) -> Serve {
    serve_with(dir, tokens, &[], extra)
}

/// `serve` with the daemon's own flags (`global`, before `serve`) too.
pub fn serve_with(dir: &Path, tokens: &Path, global: &[&str], extra: &[&str]) -> Serve {
    serve_listening(dir, tokens, global, 0, extra)
}

/// `serve` on a port of the test's choosing (0: any): a restart where its
/// clients were.
pub fn serve_at(dir: &Path, tokens: &Path, port: u16, extra: &[&str]) -> Serve {
    serve_listening(dir, tokens, &[], port, extra)
}

fn serve_listening(dir: &Path, tokens: &Path, global: &[&str], port: u16, extra: &[&str]) -> Serve {
    let (state, log) = (dir.join("serve-state"), dir.join("serve-log"));
    std::fs::create_dir_all(&log).unwrap();
    let mut cmd = Command::new(boinc_gahp());
    cmd.args(["--state-dir", state.to_str().unwrap(), "--log-file", log.join("gahp.log").to_str().unwrap(), "--retry-base-ms", "20"]);
    cmd.args(global);
    let listen = format!("127.0.0.1:{port}");
    cmd.args(["serve", "--listen", listen.as_str(), "--tokens", tokens.to_str().unwrap()]);
    let ca = if extra.contains(&"--insecure-loopback") {
        None
    } else {
        let (ca, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        if !ca.exists() {
            let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
            std::fs::write(&ca, cert.cert.pem()).unwrap();
            std::fs::write(&key, cert.key_pair.serialize_pem()).unwrap();
        }
        cmd.args(["--tls-cert", ca.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
        Some(ca)
    };
    cmd.args(extra).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {line:?}"));
    Serve { child, port, state, ca, tokens: tokens.to_path_buf(), log }
}

impl Serve {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `connect ADDR --token-file F`, then `--ca` (or `--insecure-loopback`
    /// on plain TCP), then `extra`.
    pub fn connect_args(&self, token_file: &Path, extra: &[&str]) -> Vec<String> {
        let mut args = vec!["connect".to_string(), self.addr(), "--token-file".into(), token_file.to_str().unwrap().into()];
        match &self.ca {
            Some(ca) => args.extend(["--ca".to_string(), ca.to_str().unwrap().into()]),
            None => args.push("--insecure-loopback".into()),
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    /// A GAHP client through `boinc_gahp connect`, started in `cwd`.
    pub fn connect(&self, token_file: &Path, cwd: &Path, extra: &[&str]) -> GahpClient {
        let args = self.connect_args(token_file, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        GahpClient::spawn(boinc_gahp(), &args, &[], cwd).expect("connect reads the banner")
    }

    /// A client's file area.
    pub fn files(&self, client: &str) -> PathBuf {
        self.state.join("clients").join(client).join("files")
    }

    /// A TLS connection of the test's own that trusts its certificate,
    /// with a read timeout; nothing sent yet.
    pub fn tls(&self) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(self.ca.as_ref().expect("a serve over TLS")).unwrap();
        for c in rustls_pemfile::certs(&mut pem.as_slice()) {
            roots.add(c.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let tcp = TcpStream::connect(self.addr()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        rustls::StreamOwned::new(conn, tcp)
    }

    /// Everything it has logged.
    pub fn log_text(&self) -> String {
        log_text(&self.log)
    }
}

/// A raw TLS connection that has sent `AUTH` and `FILES 1` and read the
/// banner; `line` reads the next line, whichever it is.
pub struct Raw {
    pub tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
}

impl Raw {
    pub fn open(s: &Serve, token_file: &Path) -> Raw {
        let mut raw = Raw { tls: s.tls() };
        let token = std::fs::read_to_string(token_file).unwrap();
        raw.send(&format!("AUTH {}\r\n", token.trim()));
        assert_eq!(raw.line(), "S");
        assert!(raw.line().starts_with("$GahpVersion"));
        raw.send("FILES 1\n");
        assert_eq!(raw.line(), "FILES S");
        raw
    }

    pub fn send(&mut self, text: &str) {
        self.tls.write_all(text.as_bytes()).unwrap();
        self.tls.flush().unwrap();
    }

    pub fn line(&mut self) -> String {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while self.tls.read(&mut b).expect("a line from serve within the read timeout") == 1 && b[0] != b'\n' {
            line.push(b[0]);
        }
        String::from_utf8_lossy(&line).trim_end().to_string()
    }

    /// `GET`: the file's bytes, or the refusal line.
    pub fn get(&mut self, path: &str) -> Result<Vec<u8>, String> {
        self.send(&format!("GET {}\n", path.replace(' ', "\\ ")));
        let line = self.line();
        let size: usize = line.strip_prefix("FILES S ").ok_or(line.clone())?.parse().unwrap();
        let mut bytes = vec![0u8; size];
        self.tls.read_exact(&mut bytes).unwrap();
        Ok(bytes)
    }
}
