//! TLS over a TCP stream, with rustls doing the protocol and this module the
//! I/O: ciphertext is read from the socket into the stream's own buffer and
//! fed to rustls, plaintext is copied out into the caller's buffer; plaintext
//! written is encrypted by rustls and the records go out in one write.
//!
//! The same stream serves both sides: a client's connection ([`accept`],
//! rustls' server) and an upstream's ([`connect`], rustls' client). The
//! handshake runs under one deadline and ends with a typed reason
//! ([`HandshakeFail`]) for the counters. The stream splits into two
//! halves for a tunnel; they share the rustls state (one thread, no lock).
//! A peer that closes the TCP connection without a close_notify ends the
//! stream as a close would: HTTP's own framing tells a truncated message.

use super::{read_spare_raw, write_all_raw, ReadSpare, Transport, WriteAll};
use monoio::buf::IoBuf;
use monoio::io::{AsyncReadRent, AsyncWriteRent, OwnedReadHalf, OwnedWriteHalf};
use monoio::net::TcpStream;
use monoio::time::Instant;
use rustls::{ClientConnection, ConnectionCommon, ServerConnection};
use std::cell::RefCell;
use std::io::{self, BufRead, Write};
use std::ops::DerefMut;
use std::rc::Rc;
use std::sync::Arc;

/// Ciphertext read buffer (a full record is 16 KiB and some; smaller reads
/// are fed piecewise).
const CIPHER_IN_BYTES: usize = 8 * 1024;
/// Plaintext spare room given to a read that came with none.
const MIN_READ_ROOM: usize = 4096;

/// Why a handshake failed, for `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeFail {
    /// No protocol version both sides speak (below the minimum, or not TLS).
    ProtocolVersion,
    /// No cipher suite, group or signature scheme in common.
    Incompatible,
    /// The client asked for application protocols, none of which we speak.
    Alpn,
    /// A malformed, undecryptable or out-of-order record or message.
    BadRecord,
    /// The handshake took longer than its timeout.
    Timeout,
    /// The client closed or reset the connection during the handshake.
    Closed,
    /// The client sent a fatal alert (it refused our certificate, say).
    ClientAlert,
    /// Anything else rustls refused.
    Other,
    /// The peer's certificate did not verify (an upstream's: a client's is
    /// never asked for).
    Verify,
}

impl HandshakeFail {
    /// The reasons a client's handshake fails for.
    pub const ALL: [HandshakeFail; 8] = [
        HandshakeFail::ProtocolVersion,
        HandshakeFail::Incompatible,
        HandshakeFail::Alpn,
        HandshakeFail::BadRecord,
        HandshakeFail::Timeout,
        HandshakeFail::Closed,
        HandshakeFail::ClientAlert,
        HandshakeFail::Other,
    ];

    /// The reasons a handshake with an upstream fails for.
    pub const UPSTREAM: [HandshakeFail; 6] = [
        HandshakeFail::Verify,
        HandshakeFail::ClientAlert,
        HandshakeFail::Incompatible,
        HandshakeFail::Timeout,
        HandshakeFail::Closed,
        HandshakeFail::Other,
    ];

    /// How many reasons there are (every variant is below it: the
    /// counters are indexed by them).
    pub const COUNT: usize = HandshakeFail::Verify as usize + 1;

    /// The `reason` label of an upstream's handshake on `/metrics`.
    pub fn upstream_label(self) -> &'static str {
        match self {
            HandshakeFail::Verify => "tls_verify",
            // The server refused us (our certificate, say).
            HandshakeFail::ClientAlert => "refused",
            other => other.label(),
        }
    }

    /// The `reason` label on `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            HandshakeFail::ProtocolVersion => "protocol_version",
            HandshakeFail::Incompatible => "incompatible",
            HandshakeFail::Alpn => "alpn",
            HandshakeFail::BadRecord => "bad_record",
            HandshakeFail::Timeout => "timeout",
            HandshakeFail::Closed => "closed",
            HandshakeFail::ClientAlert => "client_alert",
            HandshakeFail::Other => "other",
            HandshakeFail::Verify => "tls_verify",
        }
    }

    /// Whether `e` (from a read on a TLS stream) is a fatal alert the peer
    /// sent: over TLS 1.3 a server refuses a client's certificate (or the
    /// lack of one) only after the client's handshake is done, so its
    /// refusal arrives as the first read's error.
    pub fn is_alert(e: &io::Error) -> bool {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|r| matches!(r, rustls::Error::AlertReceived(_)))
    }

    /// Classifies a rustls error met during the handshake.
    pub fn of(e: &rustls::Error) -> HandshakeFail {
        use rustls::{Error, PeerIncompatible as P};
        match e {
            Error::PeerIncompatible(
                P::Tls12NotOffered
                | P::Tls12NotOfferedOrEnabled
                | P::Tls13RequiredForQuic
                | P::SupportedVersionsExtensionRequired
                | P::ServerDoesNotSupportTls12Or13,
            ) => HandshakeFail::ProtocolVersion,
            Error::PeerIncompatible(_) => HandshakeFail::Incompatible,
            Error::NoApplicationProtocol => HandshakeFail::Alpn,
            Error::InvalidMessage(_)
            | Error::DecryptError
            | Error::InappropriateMessage { .. }
            | Error::InappropriateHandshakeMessage { .. }
            | Error::PeerMisbehaved(_) => HandshakeFail::BadRecord,
            Error::AlertReceived(_) => HandshakeFail::ClientAlert,
            Error::InvalidCertificate(_) | Error::InvalidCertRevocationList(_) => {
                HandshakeFail::Verify
            }
            _ => HandshakeFail::Other,
        }
    }
}

/// Ciphertext read from the socket and not yet given to rustls.
#[derive(Default)]
struct CipherIn {
    buf: Vec<u8>,
    at: usize,
}

/// A TLS stream over TCP: a client's (`C` = rustls' server side) or an
/// upstream's (`C` = [`ClientConnection`]).
pub struct TlsStream<C = ServerConnection> {
    tcp: TcpStream,
    tls: Rc<RefCell<C>>,
    cin: CipherIn,
    cout: Vec<u8>,
    /// An upstream connection's TLS settings, as they were when it was
    /// made (a reload that changes them retires it from the pool).
    made_under: RefCell<Option<Arc<gapura_gate::upstreamtls::UpstreamTls>>>,
}

/// Completes a server handshake on `tcp` under `deadline`. `early` holds
/// bytes already read from the socket (after a PROXY header).
pub async fn accept(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    early: Vec<u8>,
    deadline: Instant,
) -> Result<TlsStream, HandshakeFail> {
    let conn = ServerConnection::new(config).map_err(|e| HandshakeFail::of(&e))?;
    TlsStream::new(tcp, conn, early).handshaken(deadline).await
}

/// Completes a client handshake with an upstream on `tcp` under
/// `deadline`, for `name` (SNI, and what the certificate must be valid
/// for).
pub async fn connect(
    tcp: TcpStream,
    config: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
    deadline: Instant,
) -> Result<TlsStream<ClientConnection>, HandshakeFail> {
    let conn = ClientConnection::new(config, name).map_err(|e| HandshakeFail::of(&e))?;
    TlsStream::new(tcp, conn, Vec::new())
        .handshaken(deadline)
        .await
}

impl<C: DerefMut<Target = ConnectionCommon<D>>, D> TlsStream<C> {
    fn new(tcp: TcpStream, conn: C, early: Vec<u8>) -> TlsStream<C> {
        let mut cin = CipherIn { buf: early, at: 0 };
        if cin.buf.capacity() < CIPHER_IN_BYTES {
            cin.buf.reserve(CIPHER_IN_BYTES - cin.buf.len());
        }
        TlsStream {
            tcp,
            tls: Rc::new(RefCell::new(conn)),
            cin,
            cout: Vec::new(),
            made_under: RefCell::new(None),
        }
    }

    async fn handshake(&mut self) -> Result<(), HandshakeFail> {
        loop {
            let (handshaking, wants_write) = {
                let c = self.tls.borrow();
                (c.is_handshaking(), c.wants_write())
            };
            if wants_write {
                // The server's flight, or an alert before giving up.
                if flush_tls(&mut self.tcp, &self.tls, &mut self.cout)
                    .await
                    .is_err()
                {
                    return Err(HandshakeFail::Closed);
                }
            }
            if !handshaking {
                return Ok(());
            }
            match feed(&mut self.tcp, &self.tls, &mut self.cin).await {
                Ok(true) => {}
                Ok(false) => return Err(HandshakeFail::Closed),
                Err(Fed::Io) => return Err(HandshakeFail::Closed),
                Err(Fed::Tls(e)) => {
                    // The alert rustls queued, best effort.
                    let _ = flush_tls(&mut self.tcp, &self.tls, &mut self.cout).await;
                    return Err(HandshakeFail::of(&e));
                }
            }
        }
    }

    /// The stream once its handshake is done by `deadline`.
    async fn handshaken(mut self, deadline: Instant) -> Result<Self, HandshakeFail> {
        match monoio::time::timeout_at(deadline, self.handshake()).await {
            Ok(Ok(())) => Ok(self),
            Ok(Err(fail)) => Err(fail),
            Err(_) => Err(HandshakeFail::Timeout),
        }
    }

    /// The application protocol agreed by ALPN.
    pub fn alpn(&self) -> Option<Vec<u8>> {
        self.tls.borrow().alpn_protocol().map(<[u8]>::to_vec)
    }

    /// Whether the session was resumed (no certificate was sent).
    pub fn resumed(&self) -> bool {
        matches!(
            self.tls.borrow().handshake_kind(),
            Some(rustls::HandshakeKind::Resumed)
        )
    }

    /// The protocol version agreed.
    pub fn version(&self) -> Option<rustls::ProtocolVersion> {
        self.tls.borrow().protocol_version()
    }
}

impl TlsStream<ClientConnection> {
    /// Records the settings this upstream connection is made under.
    pub fn set_made_under(&self, tls: Arc<gapura_gate::upstreamtls::UpstreamTls>) {
        *self.made_under.borrow_mut() = Some(tls);
    }

    /// Whether it was made under `tls`: the same settings, or equal ones
    /// (a reload that changed nothing; they are then adopted, so the next
    /// check is a pointer's).
    pub fn made_under(&self, tls: &Arc<gapura_gate::upstreamtls::UpstreamTls>) -> bool {
        let mut made = self.made_under.borrow_mut();
        match &*made {
            Some(m) if Arc::ptr_eq(m, tls) => true,
            Some(m) if **m == **tls => {
                *made = Some(tls.clone());
                true
            }
            _ => false,
        }
    }
}

impl TlsStream<ServerConnection> {
    /// The name the client asked for (SNI), if any.
    pub fn server_name(&self) -> Option<String> {
        self.tls.borrow().server_name().map(str::to_string)
    }

    /// Whether ALPN agreed on HTTP/2.
    pub fn alpn_h2(&self) -> bool {
        self.tls.borrow().alpn_protocol() == Some(b"h2")
    }
}

enum Fed {
    Io,
    Tls(rustls::Error),
}

/// Gives rustls more ciphertext: what is buffered, else one socket read.
/// `Ok(false)`: the socket ended.
async fn feed<R: AsyncReadRent, C: DerefMut<Target = ConnectionCommon<D>>, D>(
    tcp: &mut R,
    tls: &RefCell<C>,
    cin: &mut CipherIn,
) -> Result<bool, Fed> {
    if cin.at == cin.buf.len() {
        cin.buf.clear();
        cin.at = 0;
        let buf = std::mem::take(&mut cin.buf);
        let (res, buf) = read_spare_raw(tcp, buf).await;
        cin.buf = buf;
        match res {
            Ok(0) => {
                let mut c = tls.borrow_mut();
                // Records rustls still holds are processed; the reader
                // reports the end.
                let _ = c.read_tls(&mut &[][..]);
                c.process_new_packets().map_err(Fed::Tls)?;
                return Ok(false);
            }
            Ok(_) => {}
            Err(_) => return Err(Fed::Io),
        }
    }
    let mut c = tls.borrow_mut();
    let mut rest = &cin.buf[cin.at..];
    let before = rest.len();
    c.read_tls(&mut rest).map_err(|_| Fed::Io)?;
    cin.at += before - rest.len();
    c.process_new_packets().map_err(Fed::Tls)?;
    Ok(true)
}

/// Writes what rustls has queued (records, alerts, session tickets).
async fn flush_tls<W: AsyncWriteRent, C: DerefMut<Target = ConnectionCommon<D>>, D>(
    tcp: &mut W,
    tls: &RefCell<C>,
    cout: &mut Vec<u8>,
) -> io::Result<()> {
    cout.clear();
    {
        let mut c = tls.borrow_mut();
        while c.wants_write() {
            c.write_tls(cout)?;
        }
    }
    if cout.is_empty() {
        return Ok(());
    }
    let buf = std::mem::take(cout);
    let (res, mut buf) = write_all_raw(tcp, buf).await;
    buf.clear();
    *cout = buf;
    res
}

/// Reads plaintext into `out`'s spare room.
async fn read_plain<R: AsyncReadRent, C: DerefMut<Target = ConnectionCommon<D>>, D>(
    tcp: &mut R,
    tls: &RefCell<C>,
    cin: &mut CipherIn,
    mut out: Vec<u8>,
) -> (io::Result<usize>, Vec<u8>) {
    if out.len() == out.capacity() {
        out.reserve(MIN_READ_ROOM);
    }
    loop {
        {
            let mut c = tls.borrow_mut();
            let mut reader = c.reader();
            match reader.fill_buf() {
                Ok(chunk) => {
                    // Empty: a close_notify was received.
                    let n = chunk.len().min(out.capacity() - out.len());
                    out.extend_from_slice(&chunk[..n]);
                    reader.consume(n);
                    return (Ok(n), out);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The TCP stream ended without a close_notify.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return (Ok(0), out),
                Err(e) => return (Err(e), out),
            }
        }
        match feed(tcp, tls, cin).await {
            Ok(_) => {}
            Err(Fed::Io) => return (Err(io::ErrorKind::ConnectionReset.into()), out),
            Err(Fed::Tls(e)) => return (Err(io::Error::new(io::ErrorKind::InvalidData, e)), out),
        }
    }
}

/// Encrypts and writes all of `data`.
async fn write_plain<W: AsyncWriteRent, C: DerefMut<Target = ConnectionCommon<D>>, D>(
    tcp: &mut W,
    tls: &RefCell<C>,
    cout: &mut Vec<u8>,
    data: &[u8],
) -> io::Result<()> {
    let mut at = 0;
    loop {
        if at < data.len() {
            // Bounded by rustls' send buffer: the rest after this flush.
            at += tls.borrow_mut().writer().write(&data[at..])?;
        }
        flush_tls(tcp, tls, cout).await?;
        if at == data.len() {
            return Ok(());
        }
    }
}

impl<C: DerefMut<Target = ConnectionCommon<D>>, D> ReadSpare for TlsStream<C> {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        let (res, buf) = read_plain(&mut self.tcp, &self.tls, &mut self.cin, buf).await;
        // Replies reading made (a key update, an alert) go out now.
        if self.tls.borrow().wants_write() {
            let _ = flush_tls(&mut self.tcp, &self.tls, &mut self.cout).await;
        }
        (res, buf)
    }
}

/// The writing side of a stream and of its write half: the same fields.
macro_rules! tls_write {
    ($($t:ident),*) => {$(
        impl<C: DerefMut<Target = ConnectionCommon<D>>, D> WriteAll for $t<C> {
            async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
                let data = super::init_bytes(&buf);
                let res = write_plain(&mut self.tcp, &self.tls, &mut self.cout, data).await;
                (res, buf)
            }

            async fn close_write(&mut self) {
                self.tls.borrow_mut().send_close_notify();
                let _ = flush_tls(&mut self.tcp, &self.tls, &mut self.cout).await;
                let _ = AsyncWriteRent::shutdown(&mut self.tcp).await;
            }
        }
    )*};
}

tls_write!(TlsStream, TlsWriteHalf);

/// The reading half of a split [`TlsStream`].
pub struct TlsReadHalf<C = ServerConnection> {
    tcp: OwnedReadHalf<TcpStream>,
    tls: Rc<RefCell<C>>,
    cin: CipherIn,
}

/// The writing half of a split [`TlsStream`]; it also sends what reading
/// queued (a key update's answer) with its next write.
pub struct TlsWriteHalf<C = ServerConnection> {
    tcp: OwnedWriteHalf<TcpStream>,
    tls: Rc<RefCell<C>>,
    cout: Vec<u8>,
}

impl<C: DerefMut<Target = ConnectionCommon<D>>, D> ReadSpare for TlsReadHalf<C> {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        read_plain(&mut self.tcp, &self.tls, &mut self.cin, buf).await
    }
}

impl<C: DerefMut<Target = ConnectionCommon<D>> + 'static, D: 'static> TlsStream<C> {
    /// Its two halves.
    pub fn split(self) -> (TlsReadHalf<C>, TlsWriteHalf<C>) {
        let (r, w) = monoio::io::Splitable::into_split(self.tcp);
        (
            TlsReadHalf {
                tcp: r,
                tls: self.tls.clone(),
                cin: self.cin,
            },
            TlsWriteHalf {
                tcp: w,
                tls: self.tls,
                cout: self.cout,
            },
        )
    }
}

impl<C: DerefMut<Target = ConnectionCommon<D>> + 'static, D: 'static> Transport for TlsStream<C> {
    type ReadHalf = TlsReadHalf<C>;
    type WriteHalf = TlsWriteHalf<C>;
    crate::transport::answers_as_bytes!();
    const TLS: bool = true;

    #[inline]
    fn socket(&self) -> Option<&TcpStream> {
        Some(&self.tcp)
    }

    fn into_split(self) -> Option<(TlsReadHalf<C>, TlsWriteHalf<C>)> {
        Some(self.split())
    }
}
