//! How one request gets a connection to its server: a pooled HTTP/1.1
//! connection or a running HTTP/2 stream at once (no await, so the
//! connection task's future stays small), else the waiting path, boxed: a
//! new connection under a free slot, a place in the server's queue
//! (`crate::upstream::pool`), a new HTTP/2 connection, each bounded by its
//! timeout and by the client going away.

use crate::clock;
use crate::server::conn::gone::client_gone;
use crate::server::conn::Conn;
use crate::server::shard::Shard;
use crate::transport::h2client::{self, StreamSlot};
use crate::transport::plain::Plain;
use crate::transport::tls::{self, HandshakeFail};
use crate::transport::upstream::{server_name, UpstreamConn};
use crate::transport::Transport;
use crate::upstream::h2conns::{H2Conn, Take};
use crate::upstream::pool::{Checkout, CloseReason, Got, Permit};
use gapura_gate::upstream::{UpstreamGroup, UpstreamProtocol, UpstreamServer};
use gapura_gate::UpstreamWhy;

fn connect_error(e: &std::io::Error) -> UpstreamWhy {
    match e.kind() {
        std::io::ErrorKind::TimedOut => UpstreamWhy::ConnectTimeout,
        std::io::ErrorKind::ConnectionRefused => UpstreamWhy::Refused,
        _ => UpstreamWhy::Reset,
    }
}

/// A new connection to `server`: TCP within the group's connect timeout,
/// then, for a group with `tls`, the TLS handshake within the same
/// deadline (a failed one is counted by reason). A plaintext connection
/// receives from the shard's ring when it has one.
async fn connect(
    group: &UpstreamGroup,
    server: &UpstreamServer,
    shard: &Shard,
) -> Result<UpstreamConn, UpstreamWhy> {
    let deadline = clock::deadline(group.connect_timeout_ms);
    let tcp =
        match monoio::time::timeout_at(deadline, monoio::net::TcpStream::connect_addr(server.addr))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(connect_error(&e)),
            Err(_) => return Err(UpstreamWhy::ConnectTimeout),
        };
    let _ = tcp.set_nodelay(true);
    let Some(tls) = &group.tls else {
        return Ok(UpstreamConn::Plain(Plain::new(tcp, shard.ring())));
    };
    let fail = |why: HandshakeFail| {
        shard.stats.upstream_tls_failures[why as usize].inc();
        match why {
            HandshakeFail::Timeout => UpstreamWhy::ConnectTimeout,
            HandshakeFail::Verify => UpstreamWhy::Certificate,
            _ => UpstreamWhy::Handshake,
        }
    };
    let config = shard.upstream_tls(tls, group.protocol);
    let (Some(config), Ok(name)) = (config, server_name(tls, server)) else {
        return Err(fail(HandshakeFail::Other));
    };
    match tls::connect(tcp, config, name, deadline).await {
        Ok(s) => {
            s.set_made_under(tls.clone());
            Ok(UpstreamConn::Tls(s))
        }
        Err(why) => Err(fail(why)),
    }
}

/// Whether a pooled connection may carry `group`'s next request: plain
/// for a plain group, TLS made under the group's TLS settings (or equal
/// ones) for a TLS group. A reload that turned TLS on or off, or changed
/// a CA or the client certificate, retires the connections made before.
fn fits(conn: &UpstreamConn, group: &UpstreamGroup) -> bool {
    match (conn, &group.tls) {
        (UpstreamConn::Plain(_), None) => true,
        (UpstreamConn::Tls(t), Some(tls)) => t.made_under(tls),
        _ => false,
    }
}

/// A pooled HTTP/1.1 connection's place in its server's count.
pub(super) type Slot = Permit<UpstreamConn>;

/// What carries one request to a server.
pub(super) struct Carrier {
    pub link: Link,
    /// Made before: a pooled connection, or a stream on a running HTTP/2
    /// connection.
    pub reused: bool,
    /// The HTTP/1.1 connection's slot in its server's pool (`None` for
    /// an HTTP/2 stream).
    pub slot: Option<Slot>,
}

/// The connection a request goes on.
pub(super) enum Link {
    /// An HTTP/1.1 connection, the request written as bytes.
    H1(UpstreamConn),
    /// A stream on an HTTP/2 connection, the request sent as parts.
    H2(H2Call),
}

/// A stream on a server's HTTP/2 connection, held for one request.
pub(super) struct H2Call {
    pub conn: H2Conn,
    /// The stream's place in the connection's count.
    pub _slot: StreamSlot,
    /// The request's scheme is `https`.
    pub https: bool,
}

impl Carrier {
    /// A stream on an HTTP/2 connection (`reused`: a running one).
    fn h2(c: H2Conn, slot: StreamSlot, https: bool, reused: bool) -> Carrier {
        Carrier {
            link: Link::H2(H2Call {
                conn: c,
                _slot: slot,
                https,
            }),
            reused,
            slot: None,
        }
    }

    /// A connection from (or for) a server's HTTP/1.1 pool.
    fn h1(conn: UpstreamConn, reused: bool, slot: Slot) -> Carrier {
        Carrier {
            link: Link::H1(conn),
            reused,
            slot: Some(slot),
        }
    }
}

/// The server a request goes to: its group, itself, and the shard whose
/// pools hold its connections.
#[derive(Clone, Copy)]
pub(super) struct Dest<'a> {
    pub(super) group: &'a UpstreamGroup,
    pub(super) server: &'a UpstreamServer,
    pub(super) shard: &'a Shard,
}

/// Why no connection to a server could be had.
pub(super) enum NoConn {
    /// The server failed (connect refused or timed out, a handshake):
    /// counted against its passive health.
    Failed(UpstreamWhy),
    /// Every connection busy and the queue full: another server may
    /// take the request, else 503.
    QueueFull,
    /// Waited in the queue past `queue_timeout_ms`: 503.
    QueueTimeout,
    /// The client went away while the request waited.
    ClientGone,
}

/// What the pools give a request at once, before anything waits.
pub(super) enum First {
    H1(Checkout<UpstreamConn>),
    H2(Take),
}

/// A connection to `server` that can be had without waiting: a pooled
/// HTTP/1.1 connection of the group's kind, or a stream on a running
/// HTTP/2 connection (the common case, kept out of the async path so the
/// connection task's future stays small); else what the pool said, for
/// [`upstream_for`].
// The `Ok` side (a carrier holds its connection) is as large as the `Err`
// side: boxing either would only add an allocation to the fast path.
#[allow(clippy::result_large_err)]
fn at_once(d: Dest<'_>) -> Result<Carrier, First> {
    let Dest {
        group,
        server,
        shard,
    } = d;
    let https = group.tls.is_some();
    if group.protocol != UpstreamProtocol::Http1 {
        match shard.upstream.h2.take(group, server.key) {
            Take::Stream(c, slot) => return Ok(Carrier::h2(c, slot, https, true)),
            // An `auto` server that agreed to HTTP/1.1 only: its pool.
            Take::Http1 => {}
            other => return Err(First::H2(other)),
        }
    }
    match shard
        .upstream
        .pools
        .checkout(group, server, clock::now_ms())
    {
        Checkout::Idle(conn, slot) if fits(&conn, group) => Ok(Carrier::h1(conn, true, slot)),
        other => Err(First::H1(other)),
    }
}

/// What carries one request to `server`, given what the pools said at
/// first (`first`, from [`at_once`]).
///
/// HTTP/1.1: a pooled connection of the group's kind (one of the other
/// kind, left by a reload that turned TLS on or off, is closed), else a
/// new one while the server has fewer than `max_connections_per_server`
/// on this shard, else a place in its queue until a connection comes back
/// or a slot frees (at most `queue_timeout_ms`; `pool`). HTTP/2 (`h2`,
/// `auto`): a stream on one of the shard's connections to the server,
/// else a new connection (its streams limited as the group says; a
/// request waits for a stream within the connect timeout); with `auto`, a
/// server whose ALPN agrees only to HTTP/1.1 is spoken to in HTTP/1.1
/// from then on. `gone` ends when the client has gone away.
async fn upstream_for(
    first: First,
    d: Dest<'_>,
    gone: impl std::future::Future<Output = ()>,
    waited: &mut Option<u64>,
) -> Result<Carrier, NoConn> {
    let Dest {
        group,
        server,
        shard,
    } = d;
    let https = group.tls.is_some();
    let deadline = clock::deadline(group.connect_timeout_ms);
    let pool = &shard.upstream.h2;
    let mut take = match first {
        First::H1(c) => return http1_for(Some(c), d, gone, waited).await,
        First::H2(t) => t,
    };
    loop {
        match take {
            Take::Stream(c, slot) => return Ok(Carrier::h2(c, slot, https, true)),
            Take::Wait => {
                if monoio::time::timeout_at(deadline, pool.wait(server.key))
                    .await
                    .is_err()
                {
                    return Err(NoConn::Failed(UpstreamWhy::ConnectTimeout));
                }
            }
            Take::Open => break,
            Take::Http1 => return http1_for(None, d, gone, waited).await,
        }
        take = pool.take(group, server.key);
    }
    let conn = match connect(group, server, shard).await {
        Ok(c) => c,
        Err(status) => {
            pool.failed(server.key, false);
            return Err(NoConn::Failed(status));
        }
    };
    if let (UpstreamProtocol::Auto, UpstreamConn::Tls(t)) = (group.protocol, &conn) {
        if t.alpn().as_deref() != Some(b"h2") {
            pool.failed(server.key, true);
            // Counted in the server's HTTP/1.1 pool from here on: its slot
            // is taken when one is free, else the connection is closed
            // and the request takes the pool's way.
            if let Checkout::Open(mut slot) =
                shard
                    .upstream
                    .pools
                    .checkout(group, server, clock::now_ms())
            {
                slot.connected();
                return Ok(Carrier::h1(conn, false, slot));
            }
            drop(conn);
            return http1_for(None, d, gone, waited).await;
        }
    }
    let live = pool.live_for(server.key);
    let (read, write) = conn.split();
    let streams = group.h2_streams_per_connection;
    match h2client::handshake(read, write, deadline, &live, streams).await {
        Ok(send) => {
            let (c, slot) = pool.opened(server.key, send, live);
            Ok(Carrier::h2(c, slot, https, false))
        }
        Err(e) => {
            pool.failed(server.key, false);
            Err(NoConn::Failed(connect_error(&e)))
        }
    }
}

/// An HTTP/1.1 connection from `server`'s pool (`first`: what it said
/// already): an idle one, a new one under a free slot, or one handed over
/// after waiting in the queue (`waited`: the milliseconds spent there).
async fn http1_for(
    mut first: Option<Checkout<UpstreamConn>>,
    d: Dest<'_>,
    gone: impl std::future::Future<Output = ()>,
    waited: &mut Option<u64>,
) -> Result<Carrier, NoConn> {
    let Dest {
        group,
        server,
        shard,
    } = d;
    let mut gone = std::pin::pin!(gone);
    loop {
        let checkout = first.take().unwrap_or_else(|| {
            shard
                .upstream
                .pools
                .checkout(group, server, clock::now_ms())
        });
        let got = match checkout {
            Checkout::Idle(c, slot) => Got::Idle(c, slot),
            Checkout::Open(slot) => Got::Open(slot),
            Checkout::Full => return Err(NoConn::QueueFull),
            Checkout::Wait(mut wait) => {
                let since = clock::now_ms();
                let deadline = clock::deadline(group.queue_timeout_ms);
                let got = monoio::select! {
                    r = monoio::time::timeout_at(deadline, &mut wait) => r.ok(),
                    _ = &mut gone => {
                        *waited = Some(clock::now_ms().saturating_sub(since));
                        return Err(NoConn::ClientGone);
                    }
                };
                *waited = Some(waited.unwrap_or(0) + clock::now_ms().saturating_sub(since));
                match got {
                    Some(g) => g,
                    None => {
                        wait.timed_out();
                        return Err(NoConn::QueueTimeout);
                    }
                }
            }
        };
        match got {
            Got::Idle(c, slot) if fits(&c, group) => return Ok(Carrier::h1(c, true, slot)),
            Got::Idle(c, mut slot) => {
                // Made before a reload turned TLS on or off, or changed
                // its settings (a CA, a client certificate).
                slot.closing(CloseReason::Discarded);
                drop((c, slot));
            }
            Got::Open(mut slot) => {
                let conn = connect(group, server, shard)
                    .await
                    .map_err(NoConn::Failed)?;
                slot.connected();
                return Ok(Carrier::h1(conn, false, slot));
            }
        }
    }
}

impl<S: Transport> Conn<S> {
    /// What carries the request to `d.server`: taken at once when the pools
    /// have it, else by the boxed waiting path (a new connection, a wait:
    /// its state stays out of the connection task's future). Time spent in
    /// the server's queue goes to the request's log line.
    pub(super) async fn carrier(&mut self, d: Dest<'_>) -> Result<Carrier, NoConn> {
        let first = match at_once(d) {
            Ok(c) => return Ok(c),
            Err(first) => first,
        };
        let mut waited = None;
        let got = {
            let gone = client_gone(self.io.stream_mut());
            Box::pin(upstream_for(first, d, gone, &mut waited)).await
        };
        if let (Some(ms), Some(rec)) = (waited, self.log.as_deref_mut()) {
            rec.queue_ms = Some(rec.queue_ms.unwrap_or(0) + ms);
        }
        got
    }
}
