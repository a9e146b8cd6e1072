//! Renewal information (RFC 9773) asked of a real HTTPS server on
//! loopback: the directory's `renewalInfo`, the certificate's ID in the
//! URL, the suggested window and `Retry-After` read back; a directory
//! without it asks nothing.

use gapura_acme::client::Client;
use gapura_acme::jws::AccountKey;
use gapura_acme::transport::Transport;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An HTTPS server answering `/dir` and `/ari/ID`; the paths asked, in
/// order. `ari` says whether the directory offers renewal information.
fn server(ari: bool) -> (u16, Vec<u8>, Arc<Mutex<Vec<String>>>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der = cert.der().to_vec();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(der.clone())],
                PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        for tcp in l.incoming().map_while(Result::ok) {
            let mut s = StreamOwned::new(ServerConnection::new(config.clone()).unwrap(), tcp);
            let mut buf = [0u8; 4096];
            let Ok(n) = s.read(&mut buf) else { continue };
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            seen.lock().unwrap().push(path.clone());
            let base = format!("https://127.0.0.1:{port}");
            let (extra, body) = if path == "/dir" {
                let ri = if ari {
                    format!(r#","renewalInfo":"{base}/ari""#)
                } else {
                    String::new()
                };
                (
                    String::new(),
                    format!(
                        r#"{{"newNonce":"{base}/n","newAccount":"{base}/a","newOrder":"{base}/o"{ri}}}"#
                    ),
                )
            } else {
                (
                    "Retry-After: 21600\r\n".to_string(),
                    r#"{"suggestedWindow":{"start":"2027-01-10T00:00:00Z","end":"2027-01-12T00:00:00Z"}}"#
                        .to_string(),
                )
            };
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
            s.conn.send_close_notify();
            let _ = s.flush();
        }
    });
    (port, der, asked)
}

/// A leaf with an Authority Key Identifier (the certificate ID needs one).
fn leaf() -> (Vec<u8>, String) {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca.self_signed(&ca_key).unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
    p.use_authority_key_identifier_extension = true;
    let key = rcgen::KeyPair::generate().unwrap();
    let der = p.signed_by(&key, &ca, &ca_key).unwrap().der().to_vec();
    let id = gapura_acme::ari::cert_id(&der).unwrap();
    (der, id)
}

#[test]
fn the_window_is_asked_by_certificate_id_and_read_with_its_retry_after() {
    let (port, root, asked) = server(true);
    let t = Transport::new(Some(&[root]), Duration::from_secs(5)).unwrap();
    let mut c = Client::connect(
        t,
        AccountKey::generate().unwrap(),
        &format!("https://127.0.0.1:{port}/dir"),
    )
    .unwrap();
    assert_eq!(
        c.directory().renewal_info.as_deref(),
        Some(format!("https://127.0.0.1:{port}/ari").as_str())
    );
    let (der, id) = leaf();
    let (window, again) = c.renewal_window(&der).unwrap().unwrap();
    assert_eq!(window, (1_799_539_200, 1_799_712_000));
    assert_eq!(again, Some(21_600_000));
    assert_eq!(
        asked.lock().unwrap().clone(),
        ["/dir".to_string(), format!("/ari/{id}")]
    );
    // Any time chosen in the window is in it.
    for r in [0u64, 1, 172_799, u64::MAX] {
        let at = gapura_acme::ari::choose(window, r);
        assert!((window.0..window.1).contains(&at));
    }
}

#[test]
fn a_directory_without_renewal_information_is_asked_nothing_more() {
    let (port, root, asked) = server(false);
    let t = Transport::new(Some(&[root]), Duration::from_secs(5)).unwrap();
    let mut c = Client::connect(
        t,
        AccountKey::generate().unwrap(),
        &format!("https://127.0.0.1:{port}/dir"),
    )
    .unwrap();
    let (der, _) = leaf();
    assert_eq!(c.renewal_window(&der).unwrap(), None);
    assert_eq!(asked.lock().unwrap().clone(), ["/dir".to_string()]);
}
