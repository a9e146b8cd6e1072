//! TLS servers the proxy is a client of (upstreams, auth providers): a
//! certificate authority of the test's own (rcgen), the leaves and client
//! certificates it issues, the files a profile names, and a rustls server
//! on a blocking socket that answers each request head as the test says.

use super::TempDir;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A certificate authority of the test's, and what it signed.
pub struct Authority {
    pub cert: rcgen::Certificate,
    pub key: rcgen::KeyPair,
}

/// A leaf: its DER chain and key, and both as PEM.
pub type Leaf = (
    Vec<CertificateDer<'static>>,
    PrivateKeyDer<'static>,
    String,
    String,
);

impl Authority {
    pub fn new(name: &str) -> Authority {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Authority { cert, key }
    }

    /// A leaf for `names` (host names or IP addresses).
    pub fn issue(&self, names: &[&str]) -> Leaf {
        let p =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (
            vec![cert.der().clone()],
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            cert.pem(),
            key.serialize_pem(),
        )
    }
}

/// A server's configuration: its leaf, and, with `clients`, the authority
/// a client certificate must come from (then one is required).
pub fn server_config(
    leaf: (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>),
    clients: Option<&Authority>,
) -> ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(ca.cert.der().clone()).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(leaf.0, leaf.1).unwrap()
}

/// The files a profile names: the authority's PEM and a client
/// certificate it issued.
pub struct Files {
    _dir: TempDir,
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

pub fn files(ca: &Authority) -> Files {
    let dir = TempDir::new();
    let path = |n: &str| dir.0.join(n);
    let (ca_pem, cert_pem, key_pem) = {
        let (_, _, cert, key) = ca.issue(&["gapura-edge"]);
        (ca.cert.pem(), cert, key)
    };
    std::fs::write(path("ca.pem"), ca_pem).unwrap();
    std::fs::write(path("edge.pem"), cert_pem).unwrap();
    std::fs::write(path("edge.key"), key_pem).unwrap();
    std::fs::set_permissions(
        path("edge.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    Files {
        ca: path("ca.pem"),
        client_cert: path("edge.pem"),
        client_key: path("edge.key"),
        _dir: dir,
    }
}

/// What a TLS server answers to a request head (its text, without the
/// blank line): the whole response.
pub type Answerer = Arc<dyn Fn(&str) -> Vec<u8> + Send + Sync>;

/// A TLS server: counts handshakes completed and requests answered, and
/// keeps the request heads it read, in order.
pub struct TlsServer {
    pub addr: SocketAddr,
    pub handshakes: Arc<AtomicUsize>,
    pub requests: Arc<AtomicUsize>,
    pub heads: Arc<Mutex<Vec<String>>>,
}

/// A TLS server answering every request on a connection with `answer`
/// (requests without a body, a connection kept until the client closes).
pub fn tls_server(config: ServerConfig, answer: Answerer) -> TlsServer {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let config = Arc::new(config);
    let handshakes = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (h, r, seen) = (handshakes.clone(), requests.clone(), heads.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let (config, h, r, seen, answer) = (
                config.clone(),
                h.clone(),
                r.clone(),
                seen.clone(),
                answer.clone(),
            );
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let Ok(conn) = ServerConnection::new(config) else {
                    return;
                };
                let mut tls = StreamOwned::new(conn, s);
                while tls.conn.is_handshaking() {
                    if tls.conn.complete_io(&mut tls.sock).is_err() {
                        return;
                    }
                }
                h.fetch_add(1, Ordering::SeqCst);
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match tls.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let reply = answer(&head);
                    seen.lock().unwrap().push(head);
                    r.fetch_add(1, Ordering::SeqCst);
                    if tls.write_all(&reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    TlsServer {
        addr,
        handshakes,
        requests,
        heads,
    }
}

/// The value of header `name` in a request head, the first one.
pub fn head_header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}
