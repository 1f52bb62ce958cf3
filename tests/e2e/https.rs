//! HTTPS through rustls: a project on a loopback TLS server with a
//! certificate the daemon only trusts through GAHP_SSL_CAFILE, as HTCondor
//! passes it.

use crate::common::*;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PING_REPLY: &str = "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<ping>\n<success>1</success>\n        </ping>\n    ";

/// Serves every request with the ping reply; returns the port.
fn tls_server(cert_der: Vec<u8>, key_der: Vec<u8>) -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert_der.into()], rustls::pki_types::PrivateKeyDer::Pkcs8(key_der.into()))
                .unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            // Bounded: a handful of connections is all the test makes.
            for _ in 0..20 {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // Read the head and the body its Content-Length announces.
                    loop {
                        let Ok(n) = tls.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf).to_string();
                        if let Some((head, body)) = text.split_once("\r\n\r\n") {
                            let len = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if body.len() >= len {
                                break;
                            }
                        }
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PING_REPLY}",
                        PING_REPLY.len()
                    );
                    let _ = tls.write_all(reply.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
    });
    rx.recv().unwrap()
}

#[test]
fn https_projects_work_with_the_ca_htcondor_passes() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    let port = tls_server(cert.cert.der().to_vec(), cert.key_pair.serialize_der());
    let select = Request::SelectProject { url: format!("https://localhost:{port}/test/"), authenticator: Authenticator::new("x") };

    let mut g = gahp_with(dir.path(), &["--command-timeout", "5"], &[("GAHP_SSL_CAFILE", ca.to_str().unwrap())]);
    g.command(&select).unwrap();
    assert_eq!(g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap(), ["NULL"]);

    // Without the CA the certificate is refused (and it is not a BOINC answer).
    let other = tempfile::tempdir().unwrap();
    let mut g = gahp_with(other.path(), &["--command-timeout", "3"], &[]);
    g.command(&select).unwrap();
    let r = g.call(|id| async_cmd(id, AsyncCommand::Ping), WAIT).unwrap();
    assert!(r[0].starts_with("ping_server returned -184"), "{r:?}");
}
