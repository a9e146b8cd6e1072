//! A TLS client for the tests: rustls over a blocking socket, certificates
//! made by rcgen, and a verifier that accepts any certificate and keeps it
//! (the tests check which certificate the server chose themselves).

use super::{parse_response, Response};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A self-signed certificate for `names`, written as `STEM.pem` and
/// `STEM.key` in `dir`; returns the two paths and the certificate's DER.
pub fn write_cert(dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf, Vec<u8>) {
    let c =
        rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let cert = dir.join(format!("{stem}.pem"));
    let key = dir.join(format!("{stem}.key"));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    (cert, key, c.cert.der().to_vec())
}

/// Accepts any certificate; keeps the stapled OCSP response it was sent.
#[derive(Debug)]
struct AcceptAny(
    Arc<rustls::crypto::CryptoProvider>,
    Arc<std::sync::Mutex<Vec<u8>>>,
);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.1.lock().unwrap() = ocsp.to_vec();
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// How a test client speaks TLS.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientOptions {
    /// Offer TLS 1.2 only.
    pub tls12_only: bool,
    /// Offer these ALPN protocols (none: no ALPN).
    pub alpn: &'static [&'static [u8]],
}

/// A client configuration; configurations keep their session tickets, so
/// reusing one resumes.
pub fn client_config(options: ClientOptions) -> Arc<ClientConfig> {
    client_config_keeping_ocsp(options).0
}

/// A client configuration, and where its verifier keeps the last OCSP
/// response a server stapled.
pub fn client_config_keeping_ocsp(
    options: ClientOptions,
) -> (Arc<ClientConfig>, Arc<std::sync::Mutex<Vec<u8>>>) {
    let stapled = Arc::new(std::sync::Mutex::new(Vec::new()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if options.tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider, stapled.clone())))
        .with_no_client_auth();
    config.alpn_protocols = options.alpn.iter().map(|p| p.to_vec()).collect();
    (Arc::new(config), stapled)
}

/// A TLS connection to the server under test.
pub struct TlsClient {
    pub tls: StreamOwned<ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

impl TlsClient {
    /// Connects and completes the handshake; `sni` `None` sends no name.
    pub fn connect(
        addr: SocketAddr,
        sni: Option<&str>,
        config: &Arc<ClientConfig>,
    ) -> Result<TlsClient, std::io::Error> {
        Self::over(TcpStream::connect(addr)?, sni, config)
    }

    /// As [`TlsClient::connect`], over a connected socket.
    pub fn over(
        tcp: TcpStream,
        sni: Option<&str>,
        config: &Arc<ClientConfig>,
    ) -> Result<TlsClient, std::io::Error> {
        tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
        // An address as the name: rustls sends no SNI for it.
        let name = match sni {
            Some(n) => ServerName::try_from(n.to_string()).unwrap(),
            None => ServerName::IpAddress(tcp.peer_addr()?.ip().into()),
        };
        let conn = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
        let mut tls = StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        Ok(TlsClient {
            tls,
            buf: Vec::new(),
        })
    }

    /// The DER of the certificate the server sent.
    pub fn leaf(&self) -> Vec<u8> {
        self.tls.conn.peer_certificates().unwrap()[0].to_vec()
    }

    pub fn version(&self) -> rustls::ProtocolVersion {
        self.tls.conn.protocol_version().unwrap()
    }

    pub fn resumed(&self) -> bool {
        self.tls.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
    }

    pub fn alpn(&self) -> Option<Vec<u8>> {
        self.tls.conn.alpn_protocol().map(<[u8]>::to_vec)
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.tls.write_all(bytes).unwrap();
        self.tls.flush().unwrap();
    }

    /// Reads one response.
    pub fn response(&mut self, head: bool) -> Option<Response> {
        loop {
            if let Some((r, n)) = parse_response(&self.buf, head) {
                self.buf.drain(..n);
                return Some(r);
            }
            let mut tmp = [0u8; 16384];
            match self.tls.read(&mut tmp) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }

    /// Sends a request and reads its response.
    pub fn request(&mut self, req: &[u8]) -> Response {
        self.send(req);
        self.response(req.starts_with(b"HEAD "))
            .expect("a response")
    }
}
