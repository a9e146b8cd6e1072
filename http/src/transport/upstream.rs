//! An upstream connection's stream: plaintext ([`Plain`], on the shard's
//! ring where it has one) or TLS ([`TlsStream`] over rustls' client), one
//! type so the proxy, its pool, the tunnel and an HTTP/2 connection's
//! codec exist once; and the rustls client configuration an upstream
//! group's `tls` asks for.

use super::plain::{Plain, PlainRead, PlainWrite};
use super::tls::{TlsReadHalf, TlsStream, TlsWriteHalf};
use super::Transport;
use gapura_gate::upstream::{UpstreamProtocol, UpstreamRoots, UpstreamTls};
use monoio::net::TcpStream;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore};
use std::sync::Arc;

/// An upstream connection.
pub enum UpstreamConn {
    Plain(Plain),
    Tls(TlsStream<ClientConnection>),
}

/// The reading half of a split [`UpstreamConn`].
pub enum UpstreamRead {
    Plain(PlainRead),
    Tls(TlsReadHalf<ClientConnection>),
}

/// The writing half of a split [`UpstreamConn`].
pub enum UpstreamWrite {
    Plain(PlainWrite),
    Tls(TlsWriteHalf<ClientConnection>),
}

impl std::fmt::Debug for UpstreamConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamConn::Plain(p) => f.debug_tuple("Plain").field(p).finish(),
            UpstreamConn::Tls(_) => f.write_str("Tls"),
        }
    }
}

either_stream!(read Plain Tls: UpstreamConn);
either_stream!(read Plain Tls: UpstreamRead);
either_stream!(write Plain Tls: UpstreamConn);
either_stream!(write Plain Tls: UpstreamWrite);

impl UpstreamConn {
    /// Its two halves (an HTTP/2 connection's codec, a tunnel).
    pub fn split(self) -> (UpstreamRead, UpstreamWrite) {
        match self {
            UpstreamConn::Plain(p) => {
                let (r, w) = p.split();
                (UpstreamRead::Plain(r), UpstreamWrite::Plain(w))
            }
            UpstreamConn::Tls(t) => {
                let (r, w) = t.split();
                (UpstreamRead::Tls(r), UpstreamWrite::Tls(w))
            }
        }
    }
}

impl Transport for UpstreamConn {
    type ReadHalf = UpstreamRead;
    type WriteHalf = UpstreamWrite;
    crate::transport::answers_as_bytes!();
    // What a client's connection reports as `X-Forwarded-Proto`; an
    // upstream connection never serves a client.
    const TLS: bool = false;
    fn buffered(&self) -> bool {
        match self {
            UpstreamConn::Plain(p) => p.buffered(),
            UpstreamConn::Tls(_) => false,
        }
    }
    #[inline]
    fn socket(&self) -> Option<&TcpStream> {
        match self {
            UpstreamConn::Plain(p) => p.socket(),
            UpstreamConn::Tls(t) => t.socket(),
        }
    }
    fn into_split(self) -> Option<(UpstreamRead, UpstreamWrite)> {
        Some(self.split())
    }
}

/// The rustls client configuration for a group's `tls`: its roots (the
/// public ones, or `ca_file`'s), its client certificate, the protocols
/// offered by ALPN (`http/1.1`, `h2`, or both, `h2` first, for `auto`),
/// sessions kept for resumption; with `verify = false`, a verifier that
/// takes any certificate (the handshake's signatures are still checked).
pub fn client_config(
    tls: &UpstreamTls,
    protocol: UpstreamProtocol,
) -> Result<Arc<ClientConfig>, String> {
    let provider = super::certs::provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if tls.verify {
        let mut roots = RootCertStore::empty();
        match &tls.roots {
            UpstreamRoots::Public => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            UpstreamRoots::Own(cas) => {
                for ca in cas {
                    roots
                        .add(CertificateDer::from(ca.clone()))
                        .map_err(|e| format!("a CA certificate: {e}"))?;
                }
            }
        }
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    };
    let mut config = match &tls.client {
        Some(c) => {
            let chain = c.chain.iter().cloned().map(CertificateDer::from).collect();
            let key = PrivateKeyDer::try_from(c.key.clone()).map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = match protocol {
        UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
        UpstreamProtocol::H2 => vec![b"h2".to_vec()],
        UpstreamProtocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(Arc::new(config))
}

/// The name a server's certificate must hold: the group's `server_name`,
/// else the name the server was written with, else its address.
pub fn server_name(
    tls: &UpstreamTls,
    server: &gapura_gate::upstream::UpstreamServer,
) -> Result<ServerName<'static>, String> {
    name_or_address(
        tls.server_name.as_deref().or(server.name.as_deref()),
        server.addr,
    )
}

/// `name` (a host name or an IP address written as text), else `addr`'s
/// IP address. An auth provider's is its `server_name`, the url's host
/// unless written.
pub fn name_or_address(
    name: Option<&str>,
    addr: std::net::SocketAddr,
) -> Result<ServerName<'static>, String> {
    match name {
        Some(name) => ServerName::try_from(name.to_string()).map_err(|e| format!("{name}: {e}")),
        None => Ok(ServerName::IpAddress(addr.ip().into())),
    }
}

/// `verify = false`: any certificate is taken; the handshake's signatures
/// still are checked, so the connection is encrypted to whoever answered.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
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

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
