//! Upstreams over TLS through the real binary: a rustls upstream with a
//! certificate from the test's own authority, one that demands a client
//! certificate (mTLS), one whose certificate no configured authority
//! vouches for, and one whose certificate names someone else.

mod common;

use common::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A certificate authority of the test's, and what it signed.
struct Authority {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Authority { cert, key }
    }

    /// A leaf for `names` (host names or IP addresses): its DER chain and
    /// key, and both as PEM.
    fn issue(
        &self,
        names: &[&str],
    ) -> (
        Vec<CertificateDer<'static>>,
        PrivateKeyDer<'static>,
        String,
        String,
    ) {
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

/// A TLS upstream: answers every request on a connection with `200` and
/// the path it saw; counts handshakes completed and requests answered.
struct TlsUpstream {
    addr: SocketAddr,
    handshakes: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

fn tls_upstream(config: ServerConfig) -> TlsUpstream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let config = Arc::new(config);
    let handshakes = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let (h, r) = (handshakes.clone(), requests.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let (config, h, r) = (config.clone(), h.clone(), r.clone());
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
                    let path = head.split(' ').nth(1).unwrap_or("").to_string();
                    let body = format!("tls upstream saw {path}");
                    r.fetch_add(1, Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tls.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    TlsUpstream {
        addr,
        handshakes,
        requests,
    }
}

/// An upstream's server configuration: its leaf, and, with `clients`, the
/// authority a client certificate must come from (then one is required).
fn server_config(
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
struct Files {
    _dir: TempDir,
    ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn files(ca: &Authority) -> Files {
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

/// One proxy host `app.test` routing to the upstream with `tls`.
fn tls_profile(addr: SocketAddr, tls: &str) -> String {
    profile(
        "",
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"{addr}\"]\nconnect_timeout_ms = 2000\nresponse_header_timeout_ms = 2000\n{tls}\n\n[[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\n"
        ),
    )
}

fn get(g: &Gapura, path: &str) -> Response {
    request(
        g.addr,
        format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes(),
    )
}

const METRIC_WAIT: Duration = Duration::from_secs(10);

fn tls_failures(g: &Gapura, reason: &str, want: u64) -> u64 {
    g.wait_metric(
        &format!("gapura_upstream_tls_failures_total{{shard=\"0\",reason=\"{reason}\"}}"),
        want,
        METRIC_WAIT,
    )
}

#[test]
fn mutual_tls_to_an_upstream_that_demands_a_client_certificate_answers() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), Some(&ca)));
    let f = files(&ca);
    let g = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
            f.ca.display(),
            f.client_cert.display(),
            f.client_key.display()
        ),
    ));
    let r = get(&g, "/one");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /one"[..])
    );
    // The pooled connection stays TLS across requests: one handshake.
    let r = get(&g, "/two");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /two"[..])
    );
    assert_eq!(up.requests.load(Ordering::SeqCst), 2);
    assert_eq!(up.handshakes.load(Ordering::SeqCst), 1);
}

#[test]
fn without_its_client_certificate_the_same_upstream_does_not_answer() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), Some(&ca)));
    let f = files(&ca);
    let g = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    ));
    let r = get(&g, "/secret");
    assert_eq!(r.status, 502);
    assert!(!String::from_utf8_lossy(&r.body).contains("tls upstream saw"));
    assert_eq!(up.requests.load(Ordering::SeqCst), 0);
}

#[test]
fn an_upstream_no_configured_authority_vouches_for_gets_502_and_nothing_is_relayed() {
    let ours = Authority::new("test authority");
    let rogue = Authority::new("someone else");
    let (chain, key, _, _) = rogue.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), None));
    let f = files(&ours);
    let g = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    ));
    let r = get(&g, "/");
    assert_eq!(r.status, 502);
    assert_eq!(tls_failures(&g, "tls_verify", 1), 1);
    assert_eq!(up.requests.load(Ordering::SeqCst), 0);
    // verify = false takes it (a lab), with the profile's warning.
    let lab = Gapura::start(&tls_profile(up.addr, "tls = { verify = false }"));
    let r = get(&lab, "/lab");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /lab"[..])
    );
}

#[test]
fn a_certificate_for_another_name_gets_502() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test", "127.0.0.1"]);
    let up = tls_upstream(server_config((chain, key), None));
    let f = files(&ca);
    let wrong = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"other.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    ));
    assert_eq!(get(&wrong, "/").status, 502);
    assert_eq!(tls_failures(&wrong, "tls_verify", 1), 1);
    // Without a server_name, the server's address is what the certificate
    // must name: this one names 127.0.0.1.
    let by_address = Gapura::start(&tls_profile(
        up.addr,
        &format!("tls = {{ ca_file = \"{}\" }}", f.ca.display()),
    ));
    let r = get(&by_address, "/ip");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /ip"[..])
    );
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);
}
