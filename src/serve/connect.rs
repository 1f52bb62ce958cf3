//! `boinc_gahp connect`: stdin/stdout to a `boinc_gahp serve` over TLS.
//! It proves the token, then relays GAHP both ways, so the gridmanager
//! speaks to the remote second tier as to a local daemon; the files its
//! requests name travel over the same connection (`relay`, docs/serve.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The server, `host:port`.
    pub addr: String,
    /// A file whose first word is this client's token.
    #[arg(long)]
    pub token_file: PathBuf,
    /// Trust roots for the server's certificate (PEM; default: the web's).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Plain TCP instead of TLS, to a serve on a loopback address.
    #[arg(long)]
    pub insecure_loopback: bool,
    /// Send no files: paths in requests name files in this client's area
    /// on the serving host (put there by other means).
    #[arg(long)]
    pub remote_paths: bool,
}

pub fn run(args: &ConnectArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("boinc_gahp connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    let done = rt.block_on(connect(args));
    // stdin's reader thread may be blocked in a read: don't wait for it.
    rt.shutdown_background();
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("boinc_gahp connect: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(args: &ConnectArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&args.token_file).map_err(|e| format!("can't read {}: {e}", args.token_file.display()))?;
    let token = text.split_whitespace().next().ok_or_else(|| format!("{} is empty", args.token_file.display()))?.to_string();
    let tcp = tokio::net::TcpStream::connect(&args.addr).await.map_err(|e| format!("can't connect to {}: {e}", args.addr))?;
    let _ = tcp.set_nodelay(true);
    if args.insecure_loopback {
        let peer = tcp.peer_addr().map_err(|e| e.to_string())?;
        if !peer.ip().is_loopback() {
            return Err(format!("--insecure-loopback: {peer} is not a loopback address"));
        }
        return bridge(tcp, &token, !args.remote_paths).await;
    }
    let host = args.addr.rsplit_once(':').map_or(args.addr.as_str(), |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(args)?))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS with {}: {e}", args.addr))?;
    bridge(tls, &token, !args.remote_paths).await
}

fn client_config(args: &ConnectArgs) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &args.ca {
        Some(ca) => {
            let pem = std::fs::read(ca).map_err(|e| format!("can't read {}: {e}", ca.display()))?;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                roots.add(cert.map_err(|e| format!("{}: {e}", ca.display()))?).map_err(|e| format!("{}: {e}", ca.display()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// `AUTH`, its answer, then the relay until the server closes.
async fn bridge(mut stream: impl AsyncRead + AsyncWrite + Unpin, token: &str, files: bool) -> Result<(), String> {
    // A server over its connection limit closes at once: say so, however
    // the close shows (EOF or a reset).
    let closed = |e: std::io::Error| format!("the server closed the connection before answering AUTH ({e})");
    stream.write_all(format!("AUTH {token}\r\n").as_bytes()).await.map_err(closed)?;
    let mut buf = BytesMut::with_capacity(4096);
    let line = loop {
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            break buf.split_to(end + 1);
        }
        if buf.len() > 1024 || stream.read_buf(&mut buf).await.map_err(closed)? == 0 {
            return Err("the server closed the connection before answering AUTH".into());
        }
    };
    let line = String::from_utf8_lossy(&line).trim_end().to_string();
    if line != "S" {
        let why = line.strip_prefix("E ").unwrap_or(&line).replace("\\ ", " ").replace("\\\\", "\\");
        return Err(format!("the server refused: {why}"));
    }
    super::relay::relay(stream, buf, files).await
}
