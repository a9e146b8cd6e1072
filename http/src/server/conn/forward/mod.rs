//! Forwarding one request to an upstream and streaming the answer back.
//!
//! The phases, in order: pick a server (balancer, skipping servers the
//! health board or passive health took out), take a pooled connection or
//! connect, send the rewritten head with whatever body bytes are buffered,
//! stream the rest of the body, read the response head (watching for the
//! client going away), write the client's head, stream the body, then pool
//! the upstream connection if both sides ended cleanly.
//!
//! Failure answers: refused or reset connections 502, timeouts 504, a
//! malformed response 502, every server down 503. Retries go to another
//! server when a connection could not be made, and for idempotent requests
//! (or a stale pooled connection) when the request could be sent again
//! whole. Once the client's response has started, a failure closes the
//! client connection; no second status is ever written. Buffers are the
//! connection's own and bounded; bodies stream with backpressure.
//!
//! Modules: this one picks servers and sends the request; `response` reads
//! the response head; `relay` relays the body.

mod relay;
mod response;

use super::{Conn, End};
use crate::clock;
use crate::codec::chunked::ChunkedDecoder;
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::server::shard::Shard;
use crate::server::stats::ErrorKind;
use crate::transport::h2call::StreamSlot;
use crate::transport::h2call::{self, H2Call};
use crate::transport::plain::Plain;
use crate::transport::tls::{self, HandshakeFail};
use crate::transport::upstream::{server_name, UpstreamConn};
use crate::transport::Transport;
use crate::transport::WriteAll;
use crate::upstream::h2conns::{H2Conn, Take};
use crate::upstream::pool::{Checkout, CloseReason, Got, Permit};
use gapura_gate::limits::RequestLimits;
use gapura_gate::policy::HostExtras;
use gapura_gate::upstream::{Route, UpstreamGroup, UpstreamProtocol, UpstreamServer};
use gapura_gate::{ErrorStatus, Snapshot};
use response::Replace;
use std::os::fd::AsRawFd;

/// Most servers tried for one request.
const MAX_ATTEMPTS: u32 = 4;
/// Upstream read buffer.
pub(super) const UPSTREAM_BUF_BYTES: usize = 16 * 1024;
/// How long a response may take before the client is watched for aborts.
pub(super) const WATCH_AFTER_MS: u64 = 20;

/// How one attempt ended.
pub(super) enum Attempt {
    /// Response relayed. `reusable`: the upstream connection can be pooled;
    /// `close`: the client connection ends.
    Done { reusable: bool, close: bool },
    /// Nothing reached the client and the request can be sent again whole.
    Retry {
        status: ErrorStatus,
        count_failure: bool,
    },
    /// Nothing reached the client; answer with this status.
    Fail {
        status: ErrorStatus,
        count_failure: bool,
    },
    /// The client's response started and then broke: close the client.
    Broken { count_failure: bool },
    /// The client went away.
    ClientGone,
    /// The body over the limit (413), or its framing broke (400): answer and close.
    BadBody(ErrorStatus),
    /// 101 relayed: tunnel bytes both ways; the upstream's bytes read past its head.
    Upgrade(Vec<u8>),
}

/// Why no server answered: the last failure's status, and whether the
/// request can no longer be sent whole (the connection closes then).
struct NoAnswer {
    last: ErrorStatus,
    replay_broken: bool,
}

/// What an attempt's phases need to know of the exchange.
pub(super) struct Exchange {
    /// The upstream connection came from the pool.
    reused: bool,
    /// A WebSocket upgrade may be answered with 101.
    upgrade: bool,
    /// A `HEAD` request: the response has no body.
    head_only: bool,
    /// Body bytes had left the client before this attempt began.
    body_streamed: bool,
}

/// The request body's progress across attempts.
struct Body {
    framing: BodyFraming,
    decoder: ChunkedDecoder,
    /// Body bytes (data, or raw chunked framing) still to come from the client.
    remaining: u64,
    data_total: u64,
    done: bool,
    /// Bytes of the body taken from the client beyond what `ubuf` holds.
    streamed: bool,
}

fn connect_error(e: &std::io::Error) -> ErrorStatus {
    if e.kind() == std::io::ErrorKind::TimedOut {
        ErrorStatus::GatewayTimeout
    } else {
        ErrorStatus::BadGateway
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
) -> Result<UpstreamConn, ErrorStatus> {
    let deadline = clock::deadline(group.connect_timeout_ms);
    let tcp =
        match monoio::time::timeout_at(deadline, monoio::net::TcpStream::connect_addr(server.addr))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(connect_error(&e)),
            Err(_) => return Err(ErrorStatus::GatewayTimeout),
        };
    let _ = tcp.set_nodelay(true);
    let Some(tls) = &group.tls else {
        return Ok(UpstreamConn::Plain(Plain::new(tcp, shard.ring())));
    };
    let fail = |why: HandshakeFail| {
        shard.stats.upstream_tls_failures[why as usize].inc();
        if why == HandshakeFail::Timeout {
            ErrorStatus::GatewayTimeout
        } else {
            ErrorStatus::BadGateway
        }
    };
    let config = shard.upstream_tls(tls, group.protocol);
    let (Some(config), Ok(name)) = (config, server_name(tls, server)) else {
        return Err(fail(HandshakeFail::Other));
    };
    match tls::connect(tcp, config, name, deadline).await {
        Ok(s) => Ok(UpstreamConn::Tls(s)),
        Err(why) => Err(fail(why)),
    }
}

/// A pooled HTTP/1.1 connection's place in its server's count.
pub(super) type Slot = Permit<UpstreamConn>;

/// What carries one request to a server.
pub(super) struct Carrier {
    pub conn: UpstreamConn,
    /// Made before: a pooled connection, or a stream on a running HTTP/2
    /// connection.
    pub reused: bool,
    /// The HTTP/1.1 connection's slot in its server's pool (`None` for
    /// an HTTP/2 stream).
    pub slot: Option<Slot>,
}

impl Carrier {
    /// A stream on an HTTP/2 connection (`reused`: a running one).
    fn h2(c: H2Conn, slot: StreamSlot, https: bool, reused: bool) -> Carrier {
        Carrier {
            conn: UpstreamConn::H2(Box::new(H2Call::new(c.send, c.live, slot, https))),
            reused,
            slot: None,
        }
    }
}

/// Why no connection to a server could be had.
enum NoConn {
    /// The server failed (connect refused or timed out, a handshake):
    /// counted against its passive health.
    Failed(ErrorStatus),
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
fn at_once(
    group: &UpstreamGroup,
    server: &UpstreamServer,
    shard: &Shard,
) -> Result<Carrier, First> {
    let https = group.tls.is_some();
    if group.protocol != UpstreamProtocol::Http1 {
        match shard.h2_upstreams.take(group, server.key) {
            Take::Stream(c, slot) => return Ok(Carrier::h2(c, slot, https, true)),
            // An `auto` server that agreed to HTTP/1.1 only: its pool.
            Take::Http1 => {}
            other => return Err(First::H2(other)),
        }
    }
    match shard.upstreams.checkout(group, server, clock::now_ms()) {
        Checkout::Idle(conn, slot) if matches!(conn, UpstreamConn::Tls(_)) == https => {
            Ok(Carrier {
                conn,
                reused: true,
                slot: Some(slot),
            })
        }
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
    group: &UpstreamGroup,
    server: &UpstreamServer,
    shard: &Shard,
    gone: impl std::future::Future<Output = ()>,
    waited: &mut Option<u64>,
) -> Result<Carrier, NoConn> {
    let https = group.tls.is_some();
    let deadline = clock::deadline(group.connect_timeout_ms);
    let pool = &shard.h2_upstreams;
    let mut take = match first {
        First::H1(c) => return http1_for(Some(c), group, server, shard, gone, waited).await,
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
                    return Err(NoConn::Failed(ErrorStatus::GatewayTimeout));
                }
            }
            Take::Open => break,
            Take::Http1 => return http1_for(None, group, server, shard, gone, waited).await,
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
                shard.upstreams.checkout(group, server, clock::now_ms())
            {
                slot.connected();
                return Ok(Carrier {
                    conn,
                    reused: false,
                    slot: Some(slot),
                });
            }
            drop(conn);
            return http1_for(None, group, server, shard, gone, waited).await;
        }
    }
    let live = pool.live_for(server.key);
    let (read, write) = conn.into_split();
    let streams = group.h2_streams_per_connection;
    match h2call::handshake(read, write, deadline, &live, streams).await {
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
    group: &UpstreamGroup,
    server: &UpstreamServer,
    shard: &Shard,
    gone: impl std::future::Future<Output = ()>,
    waited: &mut Option<u64>,
) -> Result<Carrier, NoConn> {
    let https = group.tls.is_some();
    let mut gone = std::pin::pin!(gone);
    loop {
        let checkout = first
            .take()
            .unwrap_or_else(|| shard.upstreams.checkout(group, server, clock::now_ms()));
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
            Got::Idle(c, slot) if matches!(c, UpstreamConn::Tls(_)) == https => {
                return Ok(Carrier {
                    conn: c,
                    reused: true,
                    slot: Some(slot),
                })
            }
            Got::Idle(c, mut slot) => {
                // Made before a reload turned TLS on or off.
                slot.closing(CloseReason::Discarded);
                drop((c, slot));
            }
            Got::Open(mut slot) => {
                let conn = connect(group, server, shard)
                    .await
                    .map_err(NoConn::Failed)?;
                slot.connected();
                return Ok(Carrier {
                    conn,
                    reused: false,
                    slot: Some(slot),
                });
            }
        }
    }
}

/// Ends when the client has gone away: an HTTP/2 stream it reset, or a
/// connection it closed (bytes it pipelined end the watch: they wait in
/// the socket for the next request).
async fn client_gone<S: Transport>(stream: &mut S) {
    if let Some(socket) = stream.socket() {
        if socket.readable(false).await.is_ok()
            && peer_closed(socket.as_raw_fd())
            && !stream.buffered()
        {
            return;
        }
        std::future::pending::<()>().await
    } else {
        stream.until_abandoned().await
    }
}

/// Whether the peer closed `fd` (EOF waiting), without consuming data.
pub(super) fn peer_closed(fd: i32) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: a one-byte peek into a stack buffer on a socket we own.
    let n = unsafe {
        libc::recv(
            fd,
            b.as_mut_ptr() as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n == 0
}

impl<S: Transport> Conn<S> {
    /// Proxies one request: its rewritten head is in `ubuf`, its body (if
    /// any) starts at `self.io.pos`.
    pub(super) async fn forward(
        &mut self,
        head: &ParsedHead,
        route: &Route,
        group: &UpstreamGroup,
        snap: &Snapshot,
        limits: RequestLimits,
        extras: Option<&HostExtras>,
    ) -> Result<(), End> {
        let replace = Replace::new(snap, extras);
        let idempotent = matches!(
            head.method,
            Method::Get | Method::Head | Method::Options | Method::Put | Method::Delete
        );
        let upgrade = head.upgrade && route.websocket;
        let mut body = Body {
            framing: head.framing,
            decoder: ChunkedDecoder::new(),
            remaining: match head.framing {
                BodyFraming::Length(n) => n,
                _ => 0,
            },
            data_total: 0,
            done: head.framing == BodyFraming::None,
            streamed: false,
        };
        // Body bytes already buffered travel with the head in one write.
        if let Err(status) = self.take_buffered_body(&mut body, &limits) {
            self.write_error(snap, replace.custom(), status, head, true);
            return Err(self.close_after_refusal(ErrorKind::Limit).await);
        }
        let failed = match self
            .try_servers(
                head,
                group,
                snap,
                &mut body,
                &limits,
                (upgrade, idempotent),
                &replace,
            )
            .await?
        {
            Some(failed) => failed,
            None => return Ok(()),
        };
        // No attempt produced a response.
        let close = !body.done || failed.replay_broken || head.close || self.shard.is_draining();
        self.write_error(snap, replace.custom(), failed.last, head, close);
        if close {
            let _ = self.flush().await;
            return Err(End::Done);
        }
        Ok(())
    }

    /// Tries servers picked by the balancer, at most [`MAX_ATTEMPTS`]:
    /// `None` once one answered (the connection goes on), why none did, or
    /// how the connection ends.
    #[allow(clippy::too_many_arguments)]
    async fn try_servers(
        &mut self,
        head: &ParsedHead,
        group: &UpstreamGroup,
        snap: &Snapshot,
        body: &mut Body,
        limits: &RequestLimits,
        (upgrade, idempotent): (bool, bool),
        replace: &Replace<'_>,
    ) -> Result<Option<NoAnswer>, End> {
        let shard = self.shard.clone();
        let mut tried = 0u64;
        let mut attempts = 0;
        let now_ms = clock::now_ms();
        let mut failed = NoAnswer {
            last: ErrorStatus::ServiceUnavailable,
            replay_broken: false,
        };
        while attempts < MAX_ATTEMPTS {
            let Some(idx) = shard.upstreams.pick(group, tried, &shard.board, now_ms) else {
                break;
            };
            attempts += 1;
            if idx < 64 {
                tried |= 1 << idx;
            }
            let server = &group.servers[idx];
            let mut waited = None;
            let got = match at_once(group, server, &shard) {
                Ok(c) => Ok(c),
                // Boxed: the rarer path (a new connection, a wait) keeps
                // its state out of the connection task's future.
                Err(first) => {
                    let gone = client_gone(self.io.stream_mut());
                    Box::pin(upstream_for(
                        first,
                        group,
                        server,
                        &shard,
                        gone,
                        &mut waited,
                    ))
                    .await
                }
            };
            if let (Some(ms), Some(rec)) = (waited, self.log.as_deref_mut()) {
                rec.queue_ms = Some(rec.queue_ms.unwrap_or(0) + ms);
            }
            let Carrier {
                conn: mut up,
                reused,
                mut slot,
            } = match got {
                Ok(c) => c,
                Err(NoConn::Failed(status)) => {
                    shard.upstreams.failure(group, server, clock::now_ms());
                    shard.stats.upstream_failures.inc();
                    failed.last = status;
                    continue;
                }
                // Not the server's fault: its passive health is left alone.
                Err(NoConn::QueueFull) => {
                    failed.last = ErrorStatus::ServiceUnavailable;
                    continue;
                }
                Err(NoConn::QueueTimeout) => {
                    failed.last = ErrorStatus::ServiceUnavailable;
                    break;
                }
                Err(NoConn::ClientGone) => return Err(End::Error(ErrorKind::Io)),
            };
            shard.upstreams.begin(server);
            let outcome = self
                .attempt(&mut up, reused, head, group, body, limits, upgrade, replace)
                .await;
            shard.upstreams.end(server);
            // What closes the connection unless it is pooled again
            // (`Error` unless said here).
            let closing = match &outcome {
                Attempt::Done { .. } | Attempt::ClientGone | Attempt::BadBody(_) => {
                    CloseReason::NotReusable
                }
                Attempt::Upgrade(_) => CloseReason::Upgrade,
                _ => CloseReason::Error,
            };
            if let Some(s) = slot.as_mut() {
                s.closing(closing);
            }
            let count = |c: bool| {
                if c {
                    shard.upstreams.failure(group, server, clock::now_ms());
                    shard.stats.upstream_failures.inc();
                }
            };
            match outcome {
                Attempt::Done { reusable, close } => {
                    shard.upstreams.success(server);
                    // An HTTP/2 call's connection stays with the shard's
                    // HTTP/2 connections; the call itself ends here.
                    if let (true, Some(slot)) = (reusable, slot) {
                        slot.pool().clone().put(up, slot, clock::now_ms());
                    }
                    return if close { Err(End::Done) } else { Ok(None) };
                }
                Attempt::Retry {
                    status,
                    count_failure,
                } => {
                    count(count_failure);
                    failed.last = status;
                    if !(idempotent || reused) {
                        break;
                    }
                    if reused && idx < 64 {
                        // A stale pooled connection: try this server again.
                        tried &= !(1u64 << idx);
                    }
                }
                Attempt::Fail {
                    status,
                    count_failure,
                } => {
                    count(count_failure);
                    failed.last = status;
                    failed.replay_broken = true;
                    break;
                }
                Attempt::Broken { count_failure } => {
                    count(count_failure);
                    return Err(End::Error(ErrorKind::Io));
                }
                Attempt::ClientGone => return Err(End::Error(ErrorKind::Io)),
                Attempt::BadBody(status) => {
                    self.write_error(snap, replace.custom(), status, head, true);
                    return Err(self.close_after_refusal(ErrorKind::Limit).await);
                }
                Attempt::Upgrade(pending) => {
                    shard.upstreams.success(server);
                    return Err(End::Upgrade(Box::new(super::Upgraded {
                        upstream: up,
                        pending,
                        leases: None,
                        websocket: None,
                        host: String::new(),
                    })));
                }
            }
        }
        Ok(Some(failed))
    }

    /// One try against one upstream connection, in three phases: send the
    /// request (`send_request`), read the response head
    /// (`response::read_response_head`), relay the body (`relay`), or
    /// switch to a tunnel after a 101.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &mut self,
        up: &mut UpstreamConn,
        reused: bool,
        head: &ParsedHead,
        group: &UpstreamGroup,
        body: &mut Body,
        limits: &RequestLimits,
        upgrade: bool,
        replace: &Replace<'_>,
    ) -> Attempt {
        if let Err(a) = self
            .send_request(up, reused, head, group, body, limits)
            .await
        {
            return a;
        }
        let exchange = Exchange {
            reused,
            upgrade,
            head_only: head.method == Method::Head,
            body_streamed: body.streamed,
        };
        let (resp, close) = match self
            .read_response_head(up, head, group, &exchange, replace)
            .await
        {
            Ok(r) => r,
            Err(a) => return a,
        };
        if resp.status == 101 {
            if self.flush().await.is_err() {
                return Attempt::ClientGone;
            }
            let pending = self.urbuf.split_off(resp.head_len);
            return Attempt::Upgrade(pending);
        }
        let reusable = resp.keep_alive && body.done;
        self.relay_body(up, &resp, reusable, close, group.read_timeout_ms)
            .await
    }

    /// Phase 1: the head and buffered body in one write (kept in `ubuf`
    /// for a replay), then the rest of the body streamed from the client.
    async fn send_request(
        &mut self,
        up: &mut UpstreamConn,
        reused: bool,
        head: &ParsedHead,
        group: &UpstreamGroup,
        body: &mut Body,
        limits: &RequestLimits,
    ) -> Result<(), Attempt> {
        let timeout_ms = group.read_timeout_ms;
        if self.io.stream_mut().abandoned() {
            // An HTTP/2 stream the client reset: nothing is sent upstream.
            return Err(Attempt::ClientGone);
        }
        if body.streamed {
            // The body is gone: a new attempt cannot resend it.
            return Err(Attempt::Fail {
                status: ErrorStatus::BadGateway,
                count_failure: false,
            });
        }
        let out = std::mem::take(&mut self.ubuf);
        let (res, out) = match self
            .io
            .deadline()
            .within(clock::deadline(timeout_ms), up.write_all_of(out))
            .await
        {
            Ok(r) => r,
            Err(_) => {
                return Err(Attempt::Retry {
                    status: ErrorStatus::GatewayTimeout,
                    count_failure: true,
                })
            }
        };
        self.ubuf = out;
        if res.is_err() {
            return Err(Attempt::Retry {
                status: ErrorStatus::BadGateway,
                count_failure: !reused,
            });
        }
        if !body.done {
            if head.expect_continue {
                self.io
                    .out()
                    .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                self.shard.stats.response(100);
                if self.flush().await.is_err() {
                    return Err(Attempt::ClientGone);
                }
            }
            if let Some(a) = self.stream_body(up, body, limits, timeout_ms).await {
                return Err(a);
            }
        }
        Ok(())
    }

    /// Gapura's own answer to a request no upstream answered (502, 503,
    /// 504) or whose body it refused (400, 413): the host's page for the
    /// status when it has one (`custom`), else the built-in page.
    fn write_error(
        &mut self,
        snap: &Snapshot,
        custom: Option<&gapura_gate::custom_pages::CustomPages>,
        status: ErrorStatus,
        head: &ParsedHead,
        close: bool,
    ) {
        let date = self.shard.date.line();
        let ctx = gapura_gate::WriteCtx {
            date_line: &date,
            head_only: head.method == Method::Head,
            close,
            keep_alive_10: head.keep_alive_10 && !close,
        };
        let id = super::request_id(&self.log, &self.shard);
        let copy = self.page_vars.as_deref().copied().unwrap_or_default();
        let vars = gapura_gate::custom_pages::PageVars {
            request_id: &id,
            host: copy.host(),
            cf_ray: copy.ray(),
        };
        gapura_gate::custom_pages::write_error_page(
            self.io.out(),
            &snap.pages,
            custom,
            status,
            head.wants_html,
            &vars,
            b"",
            &ctx,
        );
        self.shard.stats.response(status.code());
        self.log_status(status.code());
    }

    /// Moves the body bytes already in `rbuf` to `ubuf`.
    fn take_buffered_body(
        &mut self,
        body: &mut Body,
        limits: &RequestLimits,
    ) -> Result<(), ErrorStatus> {
        let avail = self.io.unread();
        match body.framing {
            BodyFraming::None => {}
            BodyFraming::Length(_) => {
                let take = (avail.len() as u64).min(body.remaining) as usize;
                self.ubuf.extend_from_slice(&avail[..take]);
                self.io.consume(take);
                body.remaining -= take as u64;
                body.done = body.remaining == 0;
            }
            BodyFraming::Chunked => {
                let mut off = 0;
                while off < avail.len() && !body.done {
                    let step = body
                        .decoder
                        .step(&avail[off..])
                        .map_err(|_| ErrorStatus::BadRequest)?;
                    body.data_total += step.data.len() as u64;
                    if !limits.body_allows(body.data_total) {
                        return Err(ErrorStatus::PayloadTooLarge);
                    }
                    off += step.consumed;
                    body.done = step.done;
                }
                self.ubuf.extend_from_slice(&avail[..off]);
                self.io.consume(off);
            }
        }
        Ok(())
    }

    /// Streams the rest of the request body from the client to `up`.
    async fn stream_body(
        &mut self,
        up: &mut UpstreamConn,
        body: &mut Body,
        limits: &RequestLimits,
        write_timeout_ms: u64,
    ) -> Option<Attempt> {
        let body_ms = self.shard.snapshot().server.body_timeout_ms;
        while !body.done {
            self.io.rewind_if_drained();
            let deadline = clock::deadline(body_ms);
            match self.read_client(deadline).await {
                Ok(n) if n > 0 => {}
                _ => return Some(Attempt::ClientGone),
            }
            body.streamed = true;
            self.ubuf.clear();
            if let Err(status) = self.take_buffered_body(body, limits) {
                return Some(Attempt::BadBody(status));
            }
            let out = std::mem::take(&mut self.ubuf);
            match self
                .io
                .deadline()
                .within(clock::deadline(write_timeout_ms), up.write_all_of(out))
                .await
            {
                Ok((Ok(_), out)) => self.ubuf = out,
                Ok((Err(_), _)) => {
                    return Some(Attempt::Fail {
                        status: ErrorStatus::BadGateway,
                        count_failure: true,
                    })
                }
                Err(_) => {
                    return Some(Attempt::Fail {
                        status: ErrorStatus::GatewayTimeout,
                        count_failure: true,
                    })
                }
            }
        }
        None
    }
}
