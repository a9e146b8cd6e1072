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

use super::conn::{Conn, End};
use super::stats::ErrorKind;
use crate::clock;
use crate::codec::chunked::ChunkedDecoder;
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::transport::Transport;
use crate::upstream::response::{
    parse_response, resp_header_buf, write_client_head, RespFraming, RespParse,
};
use gapura_gate::custom_pages::{
    replace_upstream, write_error_page, PageVars, ReplaceUpstream, UpstreamHead,
};
use gapura_gate::limits::RequestLimits;
use gapura_gate::policy::HostExtras;
use gapura_gate::upstream::{Route, UpstreamGroup, UpstreamServer};
use gapura_gate::{ErrorStatus, Snapshot};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::time::Instant;
use std::os::fd::AsRawFd;

/// Most servers tried for one request.
const MAX_ATTEMPTS: u32 = 4;
/// Upstream read buffer.
const UPSTREAM_BUF_BYTES: usize = 16 * 1024;
/// How long a response may take before the client is watched for aborts.
const WATCH_AFTER_MS: u64 = 20;

/// How one attempt ended.
enum Attempt {
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

async fn connect(server: &UpstreamServer, timeout_ms: u64) -> std::io::Result<TcpStream> {
    match monoio::time::timeout_at(
        clock::deadline(timeout_ms),
        TcpStream::connect_addr(server.addr),
    )
    .await
    {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
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
        let shard = self.shard.clone();
        let replace = Replace {
            extras: extras.filter(|x| x.replace_upstream != ReplaceUpstream::Off),
            pages: &snap.pages,
        };
        let head_only = head.method == Method::Head;
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
            self.write_error(snap, status, head, true);
            return Err(self.close_after_refusal(ErrorKind::Limit).await);
        }

        let mut tried = 0u64;
        let mut attempts = 0;
        let mut last = ErrorStatus::ServiceUnavailable;
        let mut replay_broken = false;
        while attempts < MAX_ATTEMPTS {
            let Some(idx) = shard.upstreams.pick(group, tried, &shard.board) else {
                break;
            };
            attempts += 1;
            if idx < 64 {
                tried |= 1 << idx;
            }
            let server = &group.servers[idx];
            let (mut up, reused) = match shard.upstreams.take_idle(server) {
                Some(s) => (s, true),
                None => match connect(server, group.connect_timeout_ms).await {
                    Ok(s) => (s, false),
                    Err(e) => {
                        shard.upstreams.failure(group, server);
                        shard.stats.upstream_failures.inc();
                        last = connect_error(&e);
                        continue;
                    }
                },
            };
            shard.upstreams.begin(server);
            let outcome = self
                .attempt(
                    &mut up, reused, head, group, &mut body, &limits, upgrade, head_only, &replace,
                )
                .await;
            shard.upstreams.end(server);
            let count = |c: bool| {
                if c {
                    shard.upstreams.failure(group, server);
                    shard.stats.upstream_failures.inc();
                }
            };
            match outcome {
                Attempt::Done { reusable, close } => {
                    shard.upstreams.success(server);
                    if reusable {
                        shard.upstreams.put_idle(group, server, up);
                    } else {
                        drop(up);
                    }
                    if close {
                        return Err(End::Done);
                    }
                    return Ok(());
                }
                Attempt::Retry {
                    status,
                    count_failure,
                } => {
                    count(count_failure);
                    last = status;
                    if !(idempotent || reused) {
                        break;
                    }
                    if reused {
                        // A stale pooled connection: try this server again.
                        if idx < 64 {
                            tried &= !(1u64 << idx);
                        }
                    }
                }
                Attempt::Fail {
                    status,
                    count_failure,
                } => {
                    count(count_failure);
                    last = status;
                    replay_broken = true;
                    break;
                }
                Attempt::Broken { count_failure } => {
                    count(count_failure);
                    return Err(End::Error(ErrorKind::Io));
                }
                Attempt::ClientGone => return Err(End::Error(ErrorKind::Io)),
                Attempt::BadBody(status) => {
                    self.write_error(snap, status, head, true);
                    return Err(self.close_after_refusal(ErrorKind::Limit).await);
                }
                Attempt::Upgrade(pending) => {
                    shard.upstreams.success(server);
                    return Err(End::Upgrade(Box::new(super::conn::Upgraded {
                        upstream: up,
                        pending,
                        leases: None,
                        websocket: None,
                        host: String::new(),
                    })));
                }
            }
        }
        // No attempt produced a response.
        let close = !body.done || replay_broken || head.close || self.shard.is_draining();
        self.write_error(snap, last, head, close);
        if close {
            let _ = self.flush().await;
            return Err(End::Done);
        }
        Ok(())
    }

    fn write_error(
        &mut self,
        snap: &Snapshot,
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
        let page = snap.pages.get(status, head.wants_html);
        page.write_into(&mut self.io.wbuf, &ctx);
        page.stamp(&mut self.io.wbuf, ctx.head_only, || {
            super::conn::request_id(&self.log, &self.shard)
        });
        self.shard.stats.response(status.code());
        self.log_status(status.code());
    }

    /// Moves the body bytes already in `rbuf` to `ubuf`.
    fn take_buffered_body(
        &mut self,
        body: &mut Body,
        limits: &RequestLimits,
    ) -> Result<(), ErrorStatus> {
        let avail = &self.io.rbuf[self.io.pos..];
        match body.framing {
            BodyFraming::None => {}
            BodyFraming::Length(_) => {
                let take = (avail.len() as u64).min(body.remaining) as usize;
                self.ubuf.extend_from_slice(&avail[..take]);
                self.io.pos += take;
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
                self.io.pos += off;
            }
        }
        Ok(())
    }

    /// One try against one upstream connection.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &mut self,
        up: &mut TcpStream,
        reused: bool,
        head: &ParsedHead,
        group: &UpstreamGroup,
        body: &mut Body,
        limits: &RequestLimits,
        upgrade: bool,
        head_only: bool,
        replace: &Replace<'_>,
    ) -> Attempt {
        let read_timeout = group.read_timeout_ms;
        // 1. The head and buffered body, in one write (kept for a replay).
        if body.streamed {
            // The body is gone: a new attempt cannot resend it.
            return Attempt::Fail {
                status: ErrorStatus::BadGateway,
                count_failure: false,
            };
        }
        let out = std::mem::take(&mut self.ubuf);
        let (res, out) = match monoio::time::timeout_at(
            clock::deadline(read_timeout),
            up.write_all(out),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => {
                return Attempt::Retry {
                    status: ErrorStatus::GatewayTimeout,
                    count_failure: true,
                }
            }
        };
        self.ubuf = out;
        if res.is_err() {
            return Attempt::Retry {
                status: ErrorStatus::BadGateway,
                count_failure: !reused,
            };
        }
        // 2. The rest of the body, streamed.
        if !body.done {
            if head.expect_continue {
                self.io
                    .wbuf
                    .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                self.shard.stats.response(100);
                if self.flush().await.is_err() {
                    return Attempt::ClientGone;
                }
            }
            if let Some(a) = self.stream_body(up, body, limits, read_timeout).await {
                return a;
            }
        }
        // 3. The response head.
        if self.urbuf.capacity() == 0 {
            self.urbuf = Vec::with_capacity(UPSTREAM_BUF_BYTES);
        }
        self.urbuf.clear();
        let deadline = clock::deadline(group.response_header_timeout_ms);
        let server = &self.shard.snapshot().server;
        let close_anyway = head.close
            || self.shard.is_draining()
            || (server.max_requests_per_connection != 0
                && self.served >= server.max_requests_per_connection);
        let (resp, close) = loop {
            // Parse and, when complete, write the client's head in one step
            // while the lines are borrowed.
            let mut lines = resp_header_buf();
            let outcome = match parse_response(&self.urbuf, &mut lines, head_only) {
                RespParse::Complete(r, reason, lines) => {
                    let close = close_anyway || r.framing == RespFraming::Close;
                    let interim = r.status / 100 == 1 && r.status != 101;
                    if r.status == 101 && !upgrade {
                        return Attempt::Fail {
                            status: ErrorStatus::BadGateway,
                            count_failure: true,
                        };
                    }
                    if let Some(status) = replace.status(&r, lines, upgrade) {
                        // The host's page instead of the upstream's error:
                        // its body is dropped unread, so the connection is
                        // not pooled.
                        let date = self.shard.date.line();
                        let id = self.shard.request_id();
                        let ctx = gapura_gate::WriteCtx {
                            date_line: &date,
                            head_only,
                            close,
                            keep_alive_10: head.keep_alive_10 && !close,
                        };
                        let copy = self.page_vars;
                        let vars = PageVars {
                            request_id: &id,
                            host: copy.host(),
                            cf_ray: copy.ray(),
                        };
                        write_error_page(
                            &mut self.io.wbuf,
                            replace.pages,
                            replace.extras.and_then(|x| x.pages.as_ref()),
                            status,
                            head.wants_html,
                            &vars,
                            b"",
                            &ctx,
                        );
                        self.shard.stats.response(r.status);
                        self.log_status(r.status);
                        if self.flush().await.is_err() {
                            return Attempt::ClientGone;
                        }
                        return Attempt::Done {
                            reusable: false,
                            close,
                        };
                    }
                    write_client_head(
                        r.status,
                        reason,
                        lines,
                        &mut self.io.wbuf,
                        close && !interim,
                    );
                    Some((r, close, interim))
                }
                RespParse::Malformed => {
                    return Attempt::Fail {
                        status: ErrorStatus::BadGateway,
                        count_failure: true,
                    }
                }
                RespParse::Partial => None,
            };
            if let Some((r, close, interim)) = outcome {
                self.shard.stats.response(r.status);
                if !interim {
                    self.log_status(r.status);
                }
                if !interim {
                    break (r, close);
                }
                // Interim (100, 103): passed on; read on.
                self.urbuf.drain(..r.head_len);
                if self.flush().await.is_err() {
                    return Attempt::ClientGone;
                }
                continue;
            }
            let got_nothing = self.urbuf.is_empty();
            match self.read_upstream(up, deadline).await {
                Ok(0) | Err(UpRead::Io) => {
                    return if got_nothing && !body.streamed {
                        Attempt::Retry {
                            status: ErrorStatus::BadGateway,
                            count_failure: !reused,
                        }
                    } else {
                        Attempt::Fail {
                            status: ErrorStatus::BadGateway,
                            count_failure: true,
                        }
                    };
                }
                Ok(_) => {}
                Err(UpRead::Timeout) => {
                    return Attempt::Fail {
                        status: ErrorStatus::GatewayTimeout,
                        count_failure: true,
                    }
                }
                Err(UpRead::ClientGone) => return Attempt::ClientGone,
            }
        };
        // 4. A 101 switches to a tunnel.
        if resp.status == 101 {
            if self.flush().await.is_err() {
                return Attempt::ClientGone;
            }
            let pending = self.urbuf.split_off(resp.head_len);
            return Attempt::Upgrade(pending);
        }
        // 5. The body.
        let mut reusable = resp.keep_alive && body.done;
        let start = resp.head_len;
        match resp.framing {
            RespFraming::None => {
                reusable &= self.urbuf.len() == start;
                if self.flush().await.is_err() {
                    return Attempt::ClientGone;
                }
            }
            RespFraming::Length(n) => {
                let have = (self.urbuf.len() - start) as u64;
                let take = have.min(n) as usize;
                self.io
                    .wbuf
                    .extend_from_slice(&self.urbuf[start..start + take]);
                reusable &= have <= n;
                if self.flush().await.is_err() {
                    return Attempt::ClientGone;
                }
                let mut remaining = n - take as u64;
                while remaining > 0 {
                    self.urbuf.clear();
                    match self.read_upstream_plain(up, read_timeout).await {
                        Ok(0) | Err(_) => {
                            return Attempt::Broken {
                                count_failure: true,
                            }
                        }
                        Ok(_) => {}
                    }
                    let have = self.urbuf.len() as u64;
                    if have > remaining {
                        self.urbuf.truncate(remaining as usize);
                        reusable = false;
                    }
                    remaining -= self.urbuf.len() as u64;
                    if !self.relay_urbuf().await {
                        return Attempt::ClientGone;
                    }
                }
            }
            RespFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new();
                let mut off = start;
                loop {
                    let mut done = false;
                    while off < self.urbuf.len() {
                        match decoder.step(&self.urbuf[off..]) {
                            Ok(step) => {
                                off += step.consumed;
                                if step.done {
                                    done = true;
                                    break;
                                }
                            }
                            Err(_) => {
                                // Forward what was valid, then cut the client off.
                                self.urbuf.truncate(off);
                                let _ = self.flush_with_urbuf(start).await;
                                return Attempt::Broken {
                                    count_failure: true,
                                };
                            }
                        }
                    }
                    reusable &= !done || off == self.urbuf.len();
                    self.urbuf.truncate(off);
                    if !self.flush_with_urbuf(start).await {
                        return Attempt::ClientGone;
                    }
                    if done {
                        break;
                    }
                    self.urbuf.clear();
                    off = 0;
                    match self.read_upstream_plain(up, read_timeout).await {
                        Ok(0) | Err(_) => {
                            return Attempt::Broken {
                                count_failure: true,
                            }
                        }
                        Ok(_) => {}
                    }
                }
            }
            RespFraming::Close => {
                reusable = false;
                self.io.wbuf.extend_from_slice(&self.urbuf[start..]);
                if self.flush().await.is_err() {
                    return Attempt::ClientGone;
                }
                loop {
                    self.urbuf.clear();
                    match self.read_upstream_plain(up, read_timeout).await {
                        Ok(0) => break,
                        Err(_) => {
                            return Attempt::Broken {
                                count_failure: true,
                            }
                        }
                        Ok(_) => {}
                    }
                    if !self.relay_urbuf().await {
                        return Attempt::ClientGone;
                    }
                }
            }
        }
        Attempt::Done { reusable, close }
    }

    /// Appends `urbuf[from..]` to the pending answer and flushes both.
    async fn flush_with_urbuf(&mut self, from: usize) -> bool {
        if from == 0 && self.io.wbuf.is_empty() {
            return self.relay_urbuf().await;
        }
        self.io.wbuf.extend_from_slice(&self.urbuf[from..]);
        self.flush().await.is_ok()
    }

    /// Writes `urbuf` to the client as is.
    async fn relay_urbuf(&mut self) -> bool {
        if self.urbuf.is_empty() {
            return true;
        }
        let buf = std::mem::take(&mut self.urbuf);
        let ms = self.shard.snapshot().server.write_timeout_ms;
        match self.io.send(buf, ms).await {
            Some(buf) => {
                self.urbuf = buf;
                true
            }
            None => false,
        }
    }

    /// Streams the rest of the request body from the client to `up`.
    async fn stream_body(
        &mut self,
        up: &mut TcpStream,
        body: &mut Body,
        limits: &RequestLimits,
        write_timeout_ms: u64,
    ) -> Option<Attempt> {
        let body_ms = self.shard.snapshot().server.body_timeout_ms;
        while !body.done {
            if self.io.pos == self.io.rbuf.len() {
                self.io.rbuf.clear();
                self.io.pos = 0;
            }
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
            match monoio::time::timeout_at(clock::deadline(write_timeout_ms), up.write_all(out))
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

    /// Reads from the upstream into `urbuf`'s spare room under `deadline`,
    /// watching the client for an abort once the answer takes a while.
    async fn read_upstream(
        &mut self,
        up: &mut TcpStream,
        deadline: Instant,
    ) -> Result<usize, UpRead> {
        if self.urbuf.len() == self.urbuf.capacity() {
            if self.urbuf.len() >= crate::upstream::response::MAX_RESPONSE_HEAD_BYTES {
                return Err(UpRead::Io);
            }
            self.urbuf.reserve(self.urbuf.len());
        }
        let buf = std::mem::take(&mut self.urbuf);
        let (len, cap) = (buf.len(), buf.capacity());
        let read = up.read(buf.slice_mut(len..cap));
        let mut read = std::pin::pin!(read);
        let quick = clock::deadline(WATCH_AFTER_MS);
        let first = monoio::time::timeout_at(quick.min(deadline), &mut read).await;
        let (res, slice) = match first {
            Ok(r) => r,
            Err(_) => {
                let mut watching = true;
                loop {
                    if watching {
                        monoio::select! {
                            r = &mut read => break r,
                            _ = self.io.stream.socket().readable(false) => {
                                if peer_closed(self.io.stream.socket().as_raw_fd()) {
                                    return Err(UpRead::ClientGone);
                                }
                                // Pipelined bytes: stop watching, they wait in the socket.
                                watching = false;
                            }
                            _ = monoio::time::sleep_until(deadline) => return Err(UpRead::Timeout),
                        }
                    } else {
                        match monoio::time::timeout_at(deadline, &mut read).await {
                            Ok(r) => break r,
                            Err(_) => return Err(UpRead::Timeout),
                        }
                    }
                }
            }
        };
        self.urbuf = slice.into_inner();
        res.map_err(|_| UpRead::Io)
    }

    /// Reads a body chunk from the upstream into the empty `urbuf`.
    async fn read_upstream_plain(
        &mut self,
        up: &mut TcpStream,
        timeout_ms: u64,
    ) -> Result<usize, UpRead> {
        let buf = std::mem::take(&mut self.urbuf);
        let cap = buf.capacity();
        match monoio::time::timeout_at(clock::deadline(timeout_ms), up.read(buf.slice_mut(0..cap)))
            .await
        {
            Ok((res, slice)) => {
                self.urbuf = slice.into_inner();
                res.map_err(|_| UpRead::Io)
            }
            Err(_) => Err(UpRead::Timeout),
        }
    }
}

/// The host's upstream error replacement, when it has one.
struct Replace<'a> {
    extras: Option<&'a HostExtras>,
    pages: &'a gapura_gate::ErrorPages,
}

impl Replace<'_> {
    /// The page that replaces this response, if any. O(headers) only when
    /// replacement is on; the plain path is one `None` check.
    fn status(
        &self,
        r: &crate::upstream::response::RespHead,
        lines: &[httparse::Header<'_>],
        upgrade: bool,
    ) -> Option<ErrorStatus> {
        let x = self.extras?;
        if r.status < 400 {
            return None;
        }
        let content_type = lines
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-type"))
            .map(|h| h.value);
        replace_upstream(
            x.replace_upstream,
            &UpstreamHead {
                status: r.status,
                content_type,
                is_upgrade: upgrade,
            },
        )
    }
}

enum UpRead {
    Io,
    Timeout,
    ClientGone,
}
