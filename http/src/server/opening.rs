//! A client connection from its accept to its first request: the
//! connection-level checks, the TLS handshake, and the choice of HTTP/2 or
//! HTTP/1.1 (ALPN, or the preface of a client with prior knowledge); then
//! the HTTP/1.1 connection loop (`conn`) or HTTP/2 (`h2`) takes it.
//!
//! The opening steps run in calls of their own and TLS and HTTP/2 on
//! allocations of their own, so a plain connection's task keeps, between
//! requests, only what a plain connection needs.

use super::client::{ClientIo, READ_BUF_BYTES};
use super::conn::Conn;
use super::end::{End, ReadFail};
use super::place::Place;
use super::shard::Shard;
use super::stats::ErrorKind;
use super::tls::build_config;
use crate::clock;
use crate::transport::plain::Plain;
use crate::transport::tls::{self, TlsStream};
use crate::transport::Transport;
use gapura_gate::client::Peer;
use gapura_gate::sink::Lines;
use gapura_gate::tls::TlsSettings;
use monoio::net::TcpStream;
use rustls::server::ServerConfig;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// How a listener's connections start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Listener {
    /// A PROXY protocol header comes first (from trusted peers).
    pub proxy_protocol: bool,
    /// TLS: the handshake follows the connection-level checks.
    pub tls: bool,
    /// The `Alt-Svc` its answers carry: the listener serves HTTP/3 on the
    /// same port (built once at start).
    pub alt_svc: Option<&'static Lines>,
}

/// Serves one accepted connection until it ends. Never panics on input.
///
/// The connection-level checks (a PROXY header, the connection limits, the
/// server's access list on the address) run first, before any TLS
/// handshake, so a refused peer costs no cryptography.
pub async fn serve(stream: TcpStream, peer: SocketAddr, shard: Rc<Shard>, listener: Listener) {
    let _ = stream.set_nodelay(true);
    let mut place = Place::open(&shard);
    let io = if listener.tls && !listener.proxy_protocol {
        // Nothing is read before the handshake: no buffer until the
        // client speaks.
        ClientIo::bare(stream, shard.conns.deadlines.register())
    } else {
        ClientIo::new(
            stream,
            Vec::with_capacity(READ_BUF_BYTES),
            0,
            shard.conns.deadlines.register(),
        )
    };
    // The opening steps in a call of their own: what they hold across
    // their waits is not kept in this task for the connection's life.
    let (io, client_peer, h2) = match open(io, &shard, &mut place, peer, listener).await {
        Ok(opened) => opened,
        Err(end) => return place.end(&end),
    };
    if listener.tls {
        // A client that has not said anything holds no TLS state: wait for
        // its ClientHello (within the handshake timeout) first.
        if io.drained() && !hello_arrives(&io, &shard).await {
            shard
                .stats
                .tls_failure(crate::transport::tls::HandshakeFail::Timeout);
            return;
        }
        // The handshake and what follows it on their own allocation: a
        // plain connection's task keeps only what a plain connection needs.
        let tls = serve_tls(io, shard, client_peer, place, listener.alt_svc);
        return Box::pin(tls).await;
    }
    if h2 {
        let (stream, early) = io.into_stream();
        let h2 = super::h2::serve(stream, early, shard, client_peer, place, None);
        return Box::pin(h2).await;
    }
    let io = io.map_stream(|tcp| Plain::new(tcp, shard.conns.ring.as_ref()));
    serve_http1(io, shard, client_peer, place, None).await;
}

/// Serves HTTP/1.1 on a connection whose opening steps passed, until it
/// ends; its place ends with it.
pub(super) async fn serve_http1<S: Transport>(
    io: ClientIo<S>,
    shard: Rc<Shard>,
    client_peer: Peer,
    place: Place,
    alt_svc: Option<&'static Lines>,
) {
    let serial = shard.next_connection();
    let mut conn =
        Conn::new(io, shard, client_peer, Some(place), Rc::default(), serial).with_alt_svc(alt_svc);
    // Busy from the start until its first wait for a request: a drain
    // that begins meanwhile waits for it.
    conn.set_busy(true);
    let end = conn.run().await;
    conn.set_busy(false);
    conn.finish(end).await;
}

/// The connection-level checks (the connection limit's place held by
/// `place`), and for plain HTTP with HTTP/2 on, whether the client opens
/// with the HTTP/2 preface; else how the connection ends.
async fn open(
    mut io: ClientIo<TcpStream>,
    shard: &Rc<Shard>,
    place: &mut Place,
    peer: SocketAddr,
    listener: Listener,
) -> Result<(ClientIo<TcpStream>, Peer, bool), End> {
    let client_peer =
        super::accept::accept(&mut io, shard, place, peer, listener.proxy_protocol).await?;
    if listener.tls || !shard.snapshot().server.http2.enabled {
        return Ok((io, client_peer, false));
    }
    let h2 = sniff_preface(&mut io, shard).await?;
    Ok((io, client_peer, h2))
}

/// Whether the client's first bytes arrive (or it closes: the handshake
/// then ends at once) within the handshake timeout. Holds no buffer.
async fn hello_arrives(io: &ClientIo<TcpStream>, shard: &Shard) -> bool {
    let timeout_ms = shard
        .snapshot()
        .tls
        .as_ref()
        .map_or(0, |s| s.handshake_timeout_ms);
    let ready = io.stream().readable(false);
    io.deadline()
        .within(clock::deadline(timeout_ms), ready)
        .await
        .is_ok_and(|r| r.is_ok())
}

/// A TLS connection after its checks: the handshake, then HTTP/2 or
/// HTTP/1.1 as ALPN chose.
async fn serve_tls(
    io: ClientIo<TcpStream>,
    shard: Rc<Shard>,
    client_peer: Peer,
    place: Place,
    alt_svc: Option<&'static Lines>,
) {
    match handshake(io, &shard).await {
        // An ACME validation: the handshake was all it came for.
        Some(tls) if tls.stream().alpn().as_deref() == Some(super::tls::ACME_TLS) => {}
        Some(tls) if tls.stream().alpn_h2() => {
            let (stream, _) = tls.into_stream();
            super::h2::serve(stream, Vec::new(), shard, client_peer, place, alt_svc).await
        }
        Some(tls) => serve_http1(tls, shard, client_peer, place, alt_svc).await,
        // A failed handshake is counted by its kind; the place drops.
        None => {}
    }
}

/// Whether a plaintext connection opens with the HTTP/2 preface (h2c with
/// prior knowledge): reads until the buffered bytes either are the
/// preface or differ from it, under the idle timeout. The bytes stay
/// buffered either way.
async fn sniff_preface(io: &mut ClientIo<TcpStream>, shard: &Shard) -> Result<bool, End> {
    let preface = super::h2scan::PREFACE;
    let deadline = clock::deadline(shard.snapshot().server.idle_timeout_ms);
    loop {
        let have = io.unread();
        let n = have.len().min(preface.len());
        if have[..n] != preface[..n] {
            return Ok(false);
        }
        if n == preface.len() {
            return Ok(true);
        }
        match io.read_more(deadline).await {
            Ok(0) => return Err(End::Done),
            Ok(_) => {}
            Err(ReadFail::Timeout) => return Err(End::Idle),
            Err(ReadFail::Io) => return Err(End::Error(ErrorKind::Io)),
        }
    }
}

impl Shard {
    /// The rustls configuration for `settings`, built on first use after
    /// each snapshot change. `None` (logged once per snapshot) when it
    /// cannot be built.
    pub(super) fn tls_config(&self, settings: &Arc<TlsSettings>) -> Option<Arc<ServerConfig>> {
        if let Some((built_from, config)) = &*self.tls.borrow() {
            if Arc::ptr_eq(built_from, settings) {
                return config.clone();
            }
        }
        let config = match build_config(settings, self.stats.clone(), self.on_demand.clone()) {
            Ok(config) => Some(config),
            Err(e) => {
                if let Some(warn) = self.logs.warn {
                    warn(format_args!("shard {}: TLS cannot start: {e}", self.id));
                }
                None
            }
        };
        *self.tls.borrow_mut() = Some((settings.clone(), config.clone()));
        config
    }
}

/// Completes the handshake of a connection admitted by the connection
/// checks; the client's bytes already read (after a PROXY header) are its
/// first. `None` when it failed (counted by reason).
pub(super) async fn handshake(
    io: ClientIo<TcpStream>,
    shard: &Shard,
) -> Option<ClientIo<TlsStream>> {
    let snap = shard.snapshot();
    let stats = &shard.stats;
    let Some(config) = snap.tls.as_ref().and_then(|s| shard.tls_config(s)) else {
        stats.tls_failure(tls::HandshakeFail::Other);
        return None;
    };
    let timeout_ms = snap.tls.as_ref().map_or(0, |s| s.handshake_timeout_ms);
    let (stream, rbuf, deadline) = io.into_parts();
    match tls::accept(stream, config, rbuf, clock::deadline(timeout_ms)).await {
        Ok(s) => {
            stats.tls_handshakes.inc();
            if s.version() == Some(rustls::ProtocolVersion::TLSv1_2) {
                stats.tls_12.inc();
            }
            if s.resumed() {
                stats.tls_resumed.inc();
            }
            Some(ClientIo::new(
                s,
                Vec::with_capacity(READ_BUF_BYTES),
                0,
                deadline,
            ))
        }
        Err(fail) => {
            stats.tls_failure(fail);
            None
        }
    }
}
