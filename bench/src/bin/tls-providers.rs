//! rustls' two crypto providers side by side, in memory (no sockets, so
//! only the TLS work is timed): the server's CPU per full TLS 1.3
//! handshake (ECDSA P-256 certificate, X25519), per resumed handshake (a
//! ticket), and per MiB of application data sealed and opened in 16 KiB
//! records. Each figure is the median of `ROUNDS` timed runs; both
//! providers run in each round, in turn.
//!
//!   cargo run --release -p gapura-bench --features providers --bin tls-providers

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;
const HANDSHAKES: usize = 400;
const BULK_MIB: usize = 64;

#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

struct Setup {
    name: &'static str,
    server: Arc<ServerConfig>,
    resuming: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

fn setup(
    name: &'static str,
    provider: CryptoProvider,
    ticketer: Arc<dyn rustls::server::ProducesTickets>,
) -> Setup {
    let provider = Arc::new(provider);
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["bench.test".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let chain = vec![cert.der().clone()];
    let key_der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let server = |tickets: bool| {
        let mut c = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key_der.clone_key())
            .unwrap();
        c.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        if tickets {
            c.ticketer = ticketer.clone();
        } else {
            c.send_tls13_tickets = 0;
        }
        Arc::new(c)
    };
    let client = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider.clone())))
        .with_no_client_auth();
    Setup {
        name,
        server: server(false),
        resuming: server(true),
        client: Arc::new(client),
    }
}

/// Moves records between the two ends until neither has any to send;
/// returns the time spent in the server's calls.
fn pump(server: &mut ServerConnection, client: &mut ClientConnection) -> Duration {
    let mut spent = Duration::ZERO;
    let mut buf = Vec::with_capacity(32 * 1024);
    loop {
        let mut moved = false;
        buf.clear();
        while client.wants_write() {
            client.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            moved = true;
            let t = Instant::now();
            let mut rd = &buf[..];
            while !rd.is_empty() {
                server.read_tls(&mut rd).unwrap();
                server.process_new_packets().unwrap();
            }
            spent += t.elapsed();
        }
        buf.clear();
        let t = Instant::now();
        while server.wants_write() {
            server.write_tls(&mut buf).unwrap();
        }
        spent += t.elapsed();
        if !buf.is_empty() {
            moved = true;
            let mut rd = &buf[..];
            while !rd.is_empty() {
                client.read_tls(&mut rd).unwrap();
                client.process_new_packets().unwrap();
            }
        }
        if !moved {
            return spent;
        }
    }
}

fn connect(
    s: &Setup,
    server: &Arc<ServerConfig>,
    client: &Arc<ClientConfig>,
) -> (ServerConnection, ClientConnection, Duration) {
    let t = Instant::now();
    let mut sc = ServerConnection::new(server.clone()).unwrap();
    let made = t.elapsed();
    let mut cc =
        ClientConnection::new(client.clone(), ServerName::try_from("bench.test").unwrap()).unwrap();
    let spent = pump(&mut sc, &mut cc) + made;
    assert!(!sc.is_handshaking() && !cc.is_handshaking(), "{}", s.name);
    (sc, cc, spent)
}

/// Server µs per full handshake.
fn full(s: &Setup) -> f64 {
    let mut spent = Duration::ZERO;
    for _ in 0..HANDSHAKES {
        spent += connect(s, &s.server, &s.client).2;
    }
    spent.as_secs_f64() * 1e6 / HANDSHAKES as f64
}

/// Server µs per resumed handshake (each client resumes the session its
/// previous connection was given).
fn resumed(s: &Setup) -> f64 {
    let client = Arc::new((*s.client).clone());
    let (mut sc, mut cc, _) = connect(s, &s.resuming, &client);
    cc.writer().write_all(b"x").unwrap();
    pump(&mut sc, &mut cc);
    let mut spent = Duration::ZERO;
    for _ in 0..HANDSHAKES {
        let (mut sc, mut cc, t) = connect(s, &s.resuming, &client);
        assert_eq!(
            sc.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed),
            "{}",
            s.name
        );
        spent += t;
        // Tickets for the next connection.
        cc.writer().write_all(b"x").unwrap();
        pump(&mut sc, &mut cc);
    }
    spent.as_secs_f64() * 1e6 / HANDSHAKES as f64
}

/// Server µs per MiB sealed, and per MiB opened.
fn bulk(s: &Setup) -> (f64, f64) {
    let (mut sc, mut cc, _) = connect(s, &s.server, &s.client);
    let chunk = vec![7u8; 16 * 1024];
    let mut wire = Vec::with_capacity(17 * 1024);
    let mut sink = vec![0u8; 16 * 1024];
    let (mut seal, mut open) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..BULK_MIB * 64 {
        wire.clear();
        let t = Instant::now();
        sc.writer().write_all(&chunk).unwrap();
        while sc.wants_write() {
            sc.write_tls(&mut wire).unwrap();
        }
        seal += t.elapsed();
        let mut rd = &wire[..];
        while !rd.is_empty() {
            cc.read_tls(&mut rd).unwrap();
            cc.process_new_packets().unwrap();
        }
        while cc.reader().read(&mut sink).is_ok_and(|n| n > 0) {}
        // The other way: the client seals, the server opens.
        wire.clear();
        cc.writer().write_all(&chunk).unwrap();
        while cc.wants_write() {
            cc.write_tls(&mut wire).unwrap();
        }
        let t = Instant::now();
        let mut rd = &wire[..];
        while !rd.is_empty() {
            sc.read_tls(&mut rd).unwrap();
            sc.process_new_packets().unwrap();
        }
        while sc.reader().read(&mut sink).is_ok_and(|n| n > 0) {}
        open += t.elapsed();
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / BULK_MIB as f64;
    (per(seal), per(open))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let setups = [
        setup(
            "ring",
            rustls::crypto::ring::default_provider(),
            rustls::crypto::ring::Ticketer::new().unwrap(),
        ),
        setup(
            "aws-lc-rs",
            rustls::crypto::aws_lc_rs::default_provider(),
            rustls::crypto::aws_lc_rs::Ticketer::new().unwrap(),
        ),
    ];
    let mut figures: Vec<[Vec<f64>; 4]> = setups.iter().map(|_| Default::default()).collect();
    for round in 0..ROUNDS {
        for (i, s) in setups.iter().enumerate() {
            let f = &mut figures[i];
            f[0].push(full(s));
            f[1].push(resumed(s));
            let (seal, open) = bulk(s);
            f[2].push(seal);
            f[3].push(open);
            eprintln!("round {}: {} done", round + 1, s.name);
        }
    }
    println!("| provider | full handshake µs | resumed handshake µs | seal µs/MiB | open µs/MiB |");
    println!("|---|---:|---:|---:|---:|");
    for (s, f) in setups.iter().zip(figures) {
        let [a, b, c, d] = f.map(median);
        println!("| {} | {a:.1} | {b:.1} | {c:.0} | {d:.0} |", s.name);
    }
}
