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
//! Modules: this one picks servers and sends the request; `carrier` gets
//! the connection to a server (the pools, the queue, a new connection);
//! `response` reads the response head; `relay` relays the body (to an
//! HTTP/2 client as frames: `tostream`); `h2` is
//! an attempt on an HTTP/2 upstream's stream, the request and its answer
//! as parts (`h2body`: the request's body as DATA frames).

mod carrier;
mod h2;
mod h2body;
mod relay;
mod response;
mod tostream;

use super::{Conn, End};
use crate::clock;
use crate::codec::chunked::ChunkedDecoder;
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::server::stats::ErrorKind;
use crate::transport::upstream::UpstreamConn;
use crate::transport::Transport;
use crate::transport::WriteAll;
use crate::upstream::pool::CloseReason;
use carrier::{Carrier, Dest, Link, NoConn};
use gapura_gate::limits::RequestLimits;
use gapura_gate::policy::HostExtras;
use gapura_gate::upstream::{Route, UpstreamGroup};
use gapura_gate::{ErrorStatus, Snapshot, UpstreamWhy};
use response::Replace;

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

/// The connection's end after a 101: a tunnel to `upstream`, with the
/// bytes it sent past its head.
fn upgraded(upstream: UpstreamConn, pending: Vec<u8>) -> End {
    End::Upgrade(Box::new(super::Upgraded {
        upstream,
        pending,
        leases: None,
        websocket: None,
        host: String::new(),
    }))
}

impl Attempt {
    /// What closes the attempt's HTTP/1.1 connection unless it is pooled
    /// again.
    fn closes_as(&self) -> CloseReason {
        match self {
            Attempt::Done { .. } | Attempt::ClientGone | Attempt::BadBody(_) => {
                CloseReason::NotReusable
            }
            Attempt::Upgrade(_) => CloseReason::Upgrade,
            _ => CloseReason::Error,
        }
    }
}

/// Why no server answered: the last failure's status, and whether the
/// request can no longer be sent whole (the connection closes then).
struct NoAnswer {
    last: ErrorStatus,
    /// Why, when the last failure could tell.
    why: Option<UpstreamWhy>,
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

impl Exchange {
    /// A 502 from an upstream that failed: tried again elsewhere when the
    /// server did nothing with the request (`untouched`) and no body byte
    /// left the client yet (a pooled connection's failure then not counted
    /// against the server), else the answer.
    fn bad_gateway(&self, untouched: bool) -> Attempt {
        if untouched && !self.body_streamed {
            Attempt::Retry {
                status: ErrorStatus::BadGateway,
                count_failure: !self.reused,
            }
        } else {
            Attempt::Fail {
                status: ErrorStatus::BadGateway,
                count_failure: true,
            }
        }
    }
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

/// A failure of `d.server`: counted against its passive health.
fn count_failure(d: Dest<'_>) {
    d.shard
        .upstream
        .pools
        .failure(d.group, d.server, clock::now_ms());
    d.shard.stats.upstream_failures.inc();
}

/// What a request does when no connection to `d.server` could be had:
/// `Ok(true)` tries another server, `Ok(false)` stops trying, `Err` ends
/// the connection. A failed server is counted against its passive health
/// and logged; a full or timed-out queue is not the server's fault.
fn no_conn(e: NoConn, failed: &mut NoAnswer, d: Dest<'_>) -> Result<bool, End> {
    let Dest {
        group,
        server,
        shard,
    } = d;
    match e {
        NoConn::Failed(why) => {
            count_failure(d);
            failed.last = why.status();
            failed.why = Some(why);
            shard.warn_upstream(&group.name, server.addr, why, tls_name(group, server));
            Ok(true)
        }
        NoConn::QueueFull | NoConn::QueueTimeout => {
            failed.last = ErrorStatus::ServiceUnavailable;
            failed.why = Some(UpstreamWhy::QueueTimeout);
            Ok(matches!(e, NoConn::QueueFull))
        }
        NoConn::ClientGone => Err(End::Error(ErrorKind::Io)),
    }
}

/// The name a server's certificate must hold, for the log: the group's
/// `server_name`, else the name the server was written with.
fn tls_name<'g>(
    group: &'g UpstreamGroup,
    server: &'g gapura_gate::upstream::UpstreamServer,
) -> Option<&'g str> {
    let tls = group.tls.as_ref()?;
    tls.server_name.as_deref().or(server.name.as_deref())
}

pub(super) use super::gone::peer_closed;

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
        // Body bytes already buffered travel with the head in one write
        // (after the HTTP/1.1 head, when one was written).
        let body_at = self.ubuf.len();
        if let Err(status) = self.take_buffered_body(&mut body, &limits) {
            self.write_error(snap, replace.custom(), status, head, true);
            return Err(self.close_after_refusal(ErrorKind::Limit).await);
        }
        let failed = match self
            .try_servers(
                head,
                group,
                snap,
                (&mut body, body_at),
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
        let why = match failed.why {
            Some(w) if w.status() == failed.last => Some(w),
            // No server could be tried at all.
            None if failed.last == ErrorStatus::ServiceUnavailable => Some(UpstreamWhy::NoServer),
            _ => None,
        };
        self.write_upstream_error(snap, replace.custom(), (failed.last, why), head, close);
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
        (body, body_at): (&mut Body, usize),
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
            why: None,
            replay_broken: false,
        };
        while attempts < MAX_ATTEMPTS {
            let Some(idx) = shard.upstream.pick(group, tried, now_ms) else {
                break;
            };
            attempts += 1;
            if idx < 64 {
                tried |= 1 << idx;
            }
            let server = &group.servers[idx];
            let dest = Dest {
                group,
                server,
                shard: &shard,
            };
            let count = |c: bool| c.then(|| count_failure(dest));
            let got = self.carrier(dest).await;
            let Carrier {
                mut link,
                reused,
                mut slot,
            } = match got {
                Ok(c) => c,
                Err(e) => match no_conn(e, &mut failed, dest)? {
                    true => continue,
                    false => break,
                },
            };
            shard.upstream.pools.begin(server);
            self.upstream_why = None;
            let outcome = match &mut link {
                Link::H1(up) => {
                    self.attempt(up, reused, head, group, body, limits, upgrade, replace)
                        .await
                }
                // Boxed: its state (two HTTP/2 streams, the body's pump)
                // stays out of the HTTP/1.1 path's future.
                Link::H2(call) => {
                    let body = (&mut *body, body_at);
                    Box::pin(self.attempt_h2(call, reused, head, group, body, limits, replace))
                        .await
                }
            };
            shard.upstream.pools.end(server);
            if let Some(s) = slot.as_mut() {
                s.closing(outcome.closes_as());
            }
            match outcome {
                Attempt::Done { reusable, close } => {
                    shard.upstream.pools.success(server);
                    // An HTTP/2 call's connection stays with the shard's
                    // HTTP/2 connections; the call itself ends here.
                    if let (true, Some(slot), Link::H1(up)) = (reusable, slot, link) {
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
                    self.note_why(&mut failed, status, group, server);
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
                    self.note_why(&mut failed, status, group, server);
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
                    shard.upstream.pools.success(server);
                    let Link::H1(up) = link else {
                        return Err(End::Error(ErrorKind::Io));
                    };
                    return Err(upgraded(up, pending));
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
        if self.io.stream_mut().exchange().is_some() {
            return self
                .relay_to_stream(up, &resp, reusable, close, group.read_timeout_ms)
                .await;
        }
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
                self.upstream_why = Some(UpstreamWhy::AnswerTimeout);
                return Err(Attempt::Retry {
                    status: ErrorStatus::GatewayTimeout,
                    count_failure: true,
                });
            }
        };
        self.ubuf = out;
        if res.is_err() {
            self.upstream_why = Some(UpstreamWhy::Reset);
            return Err(Attempt::Retry {
                status: ErrorStatus::BadGateway,
                count_failure: !reused,
            });
        }
        if !body.done {
            let at = self.io.out_len();
            if head.expect_continue && self.send_continue(at).await.is_err() {
                return Err(Attempt::ClientGone);
            }
            if let Some(a) = self.stream_body(up, body, limits, timeout_ms).await {
                return Err(a);
            }
        }
        Ok(())
    }

    /// The reason an attempt recorded (`upstream_why`) for the failure it
    /// ended with, noted for the page and logged (at most a line a second
    /// per upstream, server and reason).
    fn note_why(
        &mut self,
        failed: &mut NoAnswer,
        status: ErrorStatus,
        group: &UpstreamGroup,
        server: &gapura_gate::upstream::UpstreamServer,
    ) {
        failed.why = self.upstream_why.take().filter(|w| w.status() == status);
        if let Some(why) = failed.why {
            self.shard
                .warn_upstream(&group.name, server.addr, why, tls_name(group, server));
        }
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
        self.write_upstream_error(snap, custom, (status, None), head, close);
    }

    /// [`Self::write_error`], the built-in page in the words of why no
    /// upstream answered (`UpstreamWhy`) when that is known.
    fn write_upstream_error(
        &mut self,
        snap: &Snapshot,
        custom: Option<&gapura_gate::custom_pages::CustomPages>,
        (status, why): (ErrorStatus, Option<UpstreamWhy>),
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
        let (out, pages, html) = (self.io.answer(), &snap.pages, head.wants_html);
        match why {
            Some(why) => gapura_gate::custom_pages::write_upstream_error_page(
                out, pages, custom, why, html, &vars, &ctx,
            ),
            None => gapura_gate::custom_pages::write_error_page(
                out, pages, custom, status, html, &vars, None, &ctx,
            ),
        }
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
                    self.upstream_why = Some(UpstreamWhy::Reset);
                    return Some(Attempt::Fail {
                        status: ErrorStatus::BadGateway,
                        count_failure: true,
                    });
                }
                Err(_) => {
                    self.upstream_why = Some(UpstreamWhy::AnswerTimeout);
                    return Some(Attempt::Fail {
                        status: ErrorStatus::GatewayTimeout,
                        count_failure: true,
                    });
                }
            }
        }
        None
    }
}
