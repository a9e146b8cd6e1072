//! Sockets: connecting from a chosen source address, TLS client configuration,
//! and the monoio connection type (plain TCP or rustls over TCP).
//!
//! Connections are made with socket2 so a source address can be bound before
//! `connect` (with `IP_BIND_ADDRESS_NO_PORT`, so one source address can open
//! more connections than it has ephemeral ports per destination), then handed
//! to monoio; the connect completes on a writability wait, which both monoio
//! drivers support, so a connect timeout is a plain timeout around it.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use bytes::Bytes;
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use rustls::pki_types::ServerName;

/// A non-blocking socket bound to `src` (if any) with `connect` started.
pub fn start_connect(
    addr: SocketAddr,
    src: Option<IpAddr>,
    stream: bool,
) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let (ty, proto) = if stream {
        (Type::STREAM, Protocol::TCP)
    } else {
        (Type::DGRAM, Protocol::UDP)
    };
    let sock = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if stream {
        sock.set_nodelay(true)?;
    }
    if let Some(ip) = src {
        if stream {
            let one: libc::c_int = 1;
            // SAFETY: setsockopt reads an int from a valid pointer; failure is harmless.
            unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_BIND_ADDRESS_NO_PORT,
                    &one as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        sock.bind(&SocketAddr::new(ip, 0).into())?;
    }
    sock.set_nonblocking(true)?;
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(sock)
}

/// The pending socket error (`SO_ERROR`), if any.
pub fn take_error(fd: i32) -> io::Result<()> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes an int into `err` and its size into `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    Ok(())
}

/// Connects a monoio TCP stream from `src`.
pub async fn connect_tcp(addr: SocketAddr, src: Option<IpAddr>) -> io::Result<TcpStream> {
    let sock = start_connect(addr, src, true)?;
    let std: std::net::TcpStream = sock.into();
    let s = TcpStream::from_std(std)?;
    s.writable(false).await?;
    take_error(s.as_raw_fd())?;
    Ok(s)
}

/// Builds the rustls client configuration: ring provider, webpki roots, or no
/// verification with `insecure`. Sessions resume on reconnects through the
/// configuration's in-memory session store (shared by every connection).
pub fn tls_config(insecure: bool, alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?;
    let mut cfg = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    cfg.resumption = rustls::client::Resumption::in_memory_sessions(4096);
    Ok(Arc::new(cfg))
}

pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host}: not a TLS server name: {e}"))
}

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client connection on monoio: plain TCP, or rustls driven over TCP.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
}

pub struct TlsConn {
    tcp: TcpStream,
    tls: rustls::ClientConnection,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
}

const TLS_READ_BYTES: usize = 32 * 1024;

impl Conn {
    /// Wraps `tcp` in TLS and completes the handshake.
    pub async fn tls(
        tcp: TcpStream,
        cfg: Arc<rustls::ClientConfig>,
        name: ServerName<'static>,
    ) -> io::Result<Conn> {
        let tls = rustls::ClientConnection::new(cfg, name).map_err(io::Error::other)?;
        let mut c = TlsConn {
            tcp,
            tls,
            rbuf: Vec::with_capacity(TLS_READ_BYTES),
            wbuf: Vec::with_capacity(TLS_READ_BYTES),
        };
        while c.tls.is_handshaking() {
            if c.tls.wants_write() {
                c.flush().await?;
            } else if c.fill().await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        c.flush().await?;
        Ok(Conn::Tls(Box::new(c)))
    }

    /// Writes all of `data`.
    pub async fn send(&mut self, data: Bytes) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(data).await.0.map(|_| ()),
            Conn::Tls(t) => {
                t.tls.writer().write_all(&data)?;
                t.flush().await
            }
        }
    }

    /// Reads once, appending to `buf`; 0 means end of stream.
    pub async fn recv(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match self {
            Conn::Plain(s) => {
                let len = buf.len();
                let (r, slice) = s.read(buf.slice_mut(len..)).await;
                (r, slice.into_inner())
            }
            Conn::Tls(t) => {
                let r = t.recv(&mut buf).await;
                (r, buf)
            }
        }
    }
}

impl TlsConn {
    async fn flush(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            let mut w = std::mem::take(&mut self.wbuf);
            w.clear();
            self.tls.write_tls(&mut w)?;
            let (r, w) = self.tcp.write_all(w).await;
            self.wbuf = w;
            r?;
        }
        Ok(())
    }

    /// Reads TLS records from the socket and processes them; returns bytes read (0 = EOF).
    async fn fill(&mut self) -> io::Result<usize> {
        let mut r = std::mem::take(&mut self.rbuf);
        r.clear();
        let (res, r) = self.tcp.read(r).await;
        self.rbuf = r;
        let n = res?;
        let mut data = &self.rbuf[..n];
        while !data.is_empty() {
            self.tls.read_tls(&mut data)?;
            self.tls.process_new_packets().map_err(io::Error::other)?;
        }
        if self.tls.wants_write() {
            self.flush().await?;
        }
        Ok(n)
    }

    async fn recv(&mut self, out: &mut Vec<u8>) -> io::Result<usize> {
        let mut tmp = [0u8; 16 * 1024];
        loop {
            match self.tls.reader().read(&mut tmp) {
                Ok(n) => {
                    out.extend_from_slice(&tmp[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.fill().await? == 0 {
                        return Ok(0);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
        }
    }
}
