//! HTTP/2 on a client connection: the h2 codec drives the connection, and
//! each stream runs the same request pipeline as an HTTP/1.1 request.
//!
//! A stream is served by a [`Conn`] whose transport is the stream itself
//! ([`H2Stream`]): reading it yields the request as an HTTP/1.1 head (the
//! pseudo-headers as the request line and `Host`, cookies joined) and its
//! body (DATA frames, chunked when no length was given); what the pipeline
//! writes (an HTTP/1.1 response: a local answer, a page, or an upstream's
//! relayed answer) is parsed back into the response HEADERS and DATA frames,
//! with flow control. Prepare, the gate, limits, leases, forwarding and
//! pages are the HTTP/1.1 code, not a copy: a 429 or 403 is a stream's
//! answer, never a connection error.
//!
//! Defences: at most `http2_max_streams` open streams; the header list
//! bounded by the parser's outer bound (h2 also bounds CONTINUATION frames
//! by it); streams reset by the client, or ending in a stream error, are
//! budgeted per connection (`http2_max_resets` per 10 s), past which the
//! connection gets GOAWAY `ENHANCE_YOUR_CALM`. A reset is counted wherever
//! it is noticed: at accept (h2 hands out streams reset before they were
//! accepted; they are never served), before the request goes upstream
//! (never forwarded), while the upstream answer is awaited (the exchange
//! ends), or on any stream error. h2 itself holds at most
//! `http2_max_resets + 1` (20 to 1,024) reset streams waiting to be
//! accepted and closes the connection past that, those counted too; frames
//! that cost work without a request (SETTINGS, PING, PRIORITY, empty DATA)
//! are budgeted below the codec (`h2scan`, `http2_max_control_frames`). The
//! preface and SETTINGS must arrive within the header timeout; an idle
//! connection (no open stream) is closed with GOAWAY after the idle
//! timeout; a draining shard sends GOAWAY and lets open streams finish.

use super::client::{ClientIo, READ_BUF_BYTES};
use super::conn::Conn;
use super::end::End;
use super::h2scan::Scanned;
use super::place::Place;
use super::shard::Shard;
use crate::codec::chunked::ChunkedDecoder;
use crate::transport::compat::Compat;
use crate::transport::{init_bytes, ReadSpare, Transport, WriteAll};
use crate::upstream::response::{parse_response, resp_header_buf, RespFraming, RespParse};
use bytes::Bytes;
use gapura_gate::client::Peer;
use gapura_gate::limits::OUTER_MAX_HEAD_BYTES;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use monoio::buf::IoBuf;
use monoio::net::TcpStream;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// The window of the reset budget.
const RESET_WINDOW_MS: u64 = 10_000;
/// How often the driver looks for a drain, an idle or a slow head.
const TICK: Duration = Duration::from_millis(100);
/// Response bytes reserved per flow-control wait.
const SEND_CHUNK: usize = 16 * 1024;
/// Per-stream send buffer in h2.
const SEND_BUFFER: usize = 64 * 1024;

/// What one connection's streams share with its driver.
#[derive(Default)]
struct Shared {
    /// The connection's request bucket (a host's `connection_rate`
    /// counts the requests of every stream).
    bucket: Rc<Cell<gapura_gate::quota::Bucket>>,
    /// The connection's serial (the access log's `connection`).
    connection: u64,
    open: Cell<u32>,
    /// Resets in the current window, and when it began.
    resets: Cell<u32>,
    window_start_ms: Cell<u64>,
}

impl Shared {
    /// Counts a stream reset by the client or ended by a stream error.
    fn reset(&self, now_ms: u64) {
        if now_ms.saturating_sub(self.window_start_ms.get()) >= RESET_WINDOW_MS {
            self.window_start_ms.set(now_ms);
            self.resets.set(0);
        }
        self.resets.set(self.resets.get() + 1);
    }
}

/// Serves an HTTP/2 connection whose connection-level checks passed.
/// `early`: bytes already read (the preface, for h2c).
pub(super) async fn serve<S: Transport>(
    stream: S,
    early: Vec<u8>,
    shard: Rc<Shard>,
    client_peer: Peer,
    place: Place,
) where
    S::ReadHalf: Unpin,
    S::WriteHalf: Unpin,
{
    let snap = shard.snapshot();
    let settings = snap.server.http2;
    shard.stats.h2_connections.inc();
    let (r, w) = stream.into_split();
    let mut r = Scanned::new(r, settings.max_control_frames);
    let mut early = early;
    if let Some(cut) = r.scan(&early) {
        early.truncate(cut);
    }
    let flooded = r.flooded.clone();
    let head_since = r.head_since.clone();
    let io = Compat::new(r, w, early);
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_streams)
        .max_header_list_size(OUTER_MAX_HEAD_BYTES as u32)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(pending_resets(settings.max_resets));
    let handshake = builder.handshake::<_, Bytes>(io);
    let deadline = crate::clock::deadline(snap.server.header_timeout_ms);
    let mut conn = match monoio::time::timeout_at(deadline, handshake).await {
        Ok(Ok(c)) => c,
        Ok(Err(_)) | Err(_) => {
            shard.stats.h2_errors.inc();
            return;
        }
    };
    let shared = Rc::new(Shared {
        connection: shard.next_connection(),
        ..Shared::default()
    });
    let queue = Rc::new(Queue::default());
    // The workers end with the connection.
    let _closing = CloseOnDrop(queue.clone());
    let idle = Duration::from_millis(snap.server.idle_timeout_ms);
    let mut last_active = monoio::time::Instant::now();
    let mut shutting = false;
    let mut streams = 0u64;
    // One timer for the connection's life, not one per stream.
    let mut tick = std::pin::pin!(monoio::time::sleep(TICK));
    loop {
        let quiet = shared.open.get() == 0;
        let next = monoio::select! {
            next = conn.accept() => Some(next),
            _ = &mut tick => {
                tick.as_mut().reset(monoio::time::Instant::now() + TICK);
                None
            }
        };
        match next {
            Some(Some(Ok(stream))) => {
                last_active = monoio::time::Instant::now();
                streams += 1;
                take_stream::<S>(stream, &shard, client_peer, &shared, &queue);
            }
            Some(Some(Err(e))) => {
                count_end(&e, &shard, settings.max_resets, streams, client_peer);
                break;
            }
            Some(None) => break,
            None => {}
        }
        let ending = ending(
            &shared,
            &flooded,
            &head_since,
            &snap,
            &shard,
            streams,
            client_peer,
        );
        if let Some(reason) = ending {
            conn.abrupt_shutdown(reason);
            // Sends the GOAWAY; the connection ends with it.
            let flush = async { while let Some(Ok(_)) = conn.accept().await {} };
            let _ = monoio::time::timeout(Duration::from_millis(1000), flush).await;
            break;
        }
        if !shutting && (shard.is_draining() || (quiet && last_active.elapsed() >= idle)) {
            // GOAWAY: open streams finish, no new one starts.
            conn.graceful_shutdown();
            shutting = true;
        }
        if shared.open.get() > 0 {
            last_active = monoio::time::Instant::now();
        }
    }
    drop(place);
}

/// A stream the codec handed over: counted and dropped when the client
/// already reset it (rapid reset: never queued, never served), else queued
/// for a worker (one more started when every worker is busy, at most one
/// per stream the connection may have open).
fn take_stream<S: Transport>(
    mut stream: Incoming,
    shard: &Rc<Shard>,
    client_peer: Peer,
    shared: &Rc<Shared>,
    queue: &Rc<Queue>,
) where
    S::ReadHalf: Unpin,
    S::WriteHalf: Unpin,
{
    shard.stats.h2_streams.inc();
    if reset_already(&mut stream.1) {
        shard.stats.h2_resets.inc();
        shared.reset(crate::clock::now_ms());
        return;
    }
    shared.open.set(shared.open.get() + 1);
    if !queue.push(stream) {
        monoio::spawn(worker::<S>(
            queue.clone(),
            shard.clone(),
            client_peer,
            shared.clone(),
        ));
    }
}

/// Counts how the codec ended the connection: its own `ENHANCE_YOUR_CALM`
/// (with h2's pending-reset bound, the streams it held count as resets),
/// or a protocol error.
fn count_end(e: &h2::Error, shard: &Shard, max_resets: u32, streams: u64, client_peer: Peer) {
    if e.reason() == Some(Reason::ENHANCE_YOUR_CALM) {
        shard.stats.h2_calm.inc();
        if e.to_string().contains("too_many_resets") {
            let held = pending_resets(max_resets) as u64 + 1;
            shard.stats.h2_resets.add(held);
            shard.warn_h2_calm("resets", streams + held, client_peer.addr());
        }
    } else if !e.is_io() && !e.is_go_away() {
        shard.stats.h2_errors.inc();
    }
}

/// Whether the connection must end now, and with which GOAWAY: past the
/// reset budget or a control-frame flood (`ENHANCE_YOUR_CALM`, counted and
/// logged), or a header block trickled past the header timeout.
fn ending(
    shared: &Shared,
    flooded: &Cell<bool>,
    head_since: &Cell<Option<u64>>,
    snap: &gapura_gate::Snapshot,
    shard: &Shard,
    streams: u64,
    client_peer: Peer,
) -> Option<Reason> {
    if shared.resets.get() > snap.server.http2.max_resets || flooded.get() {
        if flooded.get() {
            shard.stats.h2_floods.inc();
        }
        shard.stats.h2_calm.inc();
        let why = if flooded.get() {
            "control frames"
        } else {
            "resets"
        };
        shard.warn_h2_calm(why, streams, client_peer.addr());
        return Some(Reason::ENHANCE_YOUR_CALM);
    }
    let slow_head = head_since
        .get()
        .is_some_and(|t| crate::clock::now_ms().saturating_sub(t) >= snap.server.header_timeout_ms);
    if slow_head {
        shard.stats.error(super::stats::ErrorKind::HeaderTimeout);
        return Some(Reason::NO_ERROR);
    }
    None
}

/// A new stream and its response handle.
type Incoming = (http::Request<RecvStream>, SendResponse<Bytes>);

/// Streams waiting for a worker, and the workers waiting for a stream.
///
/// A stream is served by one of the connection's worker tasks, each a loop
/// that takes the next stream and runs it through the pipeline. A worker's
/// task (whose state holds the whole pipeline's, several KiB) is made once
/// and reused: a task per stream would allocate and move that state for
/// every request.
#[derive(Default)]
struct Queue {
    waiting: RefCell<VecDeque<Incoming>>,
    idle: RefCell<Vec<Waker>>,
    closed: Cell<bool>,
}

impl Queue {
    /// Queues a stream for an idle worker; false when none is idle (the
    /// caller starts one, which takes it).
    fn push(&self, stream: Incoming) -> bool {
        self.waiting.borrow_mut().push_back(stream);
        match self.idle.borrow_mut().pop() {
            Some(w) => {
                w.wake();
                true
            }
            None => false,
        }
    }

    /// The next stream; `None` once the connection has ended.
    async fn next(&self) -> Option<Incoming> {
        std::future::poll_fn(|cx| {
            if let Some(s) = self.waiting.borrow_mut().pop_front() {
                return Poll::Ready(Some(s));
            }
            if self.closed.get() {
                return Poll::Ready(None);
            }
            let mut idle = self.idle.borrow_mut();
            if !idle.iter().any(|w| w.will_wake(cx.waker())) {
                idle.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }

    fn close(&self) {
        self.closed.set(true);
        self.waiting.borrow_mut().clear();
        for w in self.idle.borrow_mut().drain(..) {
            w.wake();
        }
    }
}

/// Ends the workers when the connection's driver returns.
struct CloseOnDrop(Rc<Queue>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Serves the connection's streams one after another.
async fn worker<S: Transport>(
    queue: Rc<Queue>,
    shard: Rc<Shard>,
    client_peer: Peer,
    shared: Rc<Shared>,
) {
    while let Some((request, respond)) = queue.next().await {
        serve_stream::<S>(request, respond, &shard, client_peer, &shared).await;
    }
}

/// One stream through the request pipeline.
async fn serve_stream<S: Transport>(
    request: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
    shard: &Rc<Shard>,
    client_peer: Peer,
    shared: &Shared,
) {
    let mut respond = respond;
    if reset_already(&mut respond) {
        // Reset before its turn (rapid reset): counted, never served.
        shard.stats.h2_resets.inc();
        shared.reset(crate::clock::now_ms());
        shared.open.set(shared.open.get().saturating_sub(1));
        return;
    }
    let reset = Rc::new(Cell::new(false));
    let (parts, body) = request.into_parts();
    let head_only = parts.method == http::Method::HEAD;
    let body = (!body.is_end_stream()).then_some(body);
    let chunked = body.is_some() && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let mut head = Vec::with_capacity(512);
    request_head(&parts, chunked, &mut head);
    let pipe = H2Stream::<S> {
        pending: head,
        ppos: 0,
        body,
        chunked,
        respond: Some(respond),
        send: None,
        resp_head: Vec::new(),
        left: Left::Head,
        head_only,
        reset: reset.clone(),
        _transport: std::marker::PhantomData,
    };
    let io = ClientIo::new(
        pipe,
        Vec::with_capacity(READ_BUF_BYTES),
        0,
        shard.deadlines.register(),
    );
    let end = Conn::new(
        io,
        shard.clone(),
        client_peer,
        None,
        shared.bucket.clone(),
        shared.connection,
    )
    .serve_stream()
    .await;
    if let End::Error(kind) = end {
        shard.stats.error(kind);
    }
    if reset.get() {
        shard.stats.h2_resets.inc();
        shared.reset(crate::clock::now_ms());
    }
    shared.open.set(shared.open.get().saturating_sub(1));
}

/// How many streams reset by the client h2 may hold waiting to be
/// accepted before it ends the connection itself: enough that the reset
/// budget, which counts each of them, is what ends it.
fn pending_resets(max_resets: u32) -> usize {
    (max_resets as usize + 1).clamp(20, 1024)
}

/// Whether the client reset the stream before its answer began (h2 hands
/// out streams the client reset after opening them, so that each is
/// accounted). Polls without waiting.
fn reset_already(respond: &mut SendResponse<Bytes>) -> bool {
    let mut cx = std::task::Context::from_waker(Waker::noop());
    matches!(respond.poll_reset(&mut cx), Poll::Ready(_))
}

/// Writes the request as an HTTP/1.1 head: the request line from the
/// pseudo-headers, `Host` from `:authority`, the fields (cookies joined
/// into one line, as RFC 9113 §8.2.3 asks of a gateway to HTTP/1.1), and
/// `Transfer-Encoding: chunked` for a body without a length.
pub(super) fn request_head(parts: &http::request::Parts, chunked: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    let authority = parts.uri.authority().map(|a| a.as_str());
    match parts.uri.path_and_query() {
        _ if parts.method == http::Method::CONNECT => {
            out.extend_from_slice(authority.unwrap_or("").as_bytes())
        }
        Some(pq) => out.extend_from_slice(pq.as_str().as_bytes()),
        None => out.push(b'/'),
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(a) = authority {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    for (name, value) in &parts.headers {
        if name == http::header::HOST && authority.is_some() {
            continue;
        }
        if name == http::header::COOKIE {
            cookies += 1;
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        out.extend_from_slice(b"cookie: ");
        for (i, v) in parts
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .enumerate()
        {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(v.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// What is left of the response body.
enum Left {
    /// The head is not complete yet.
    Head,
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the pipeline closes the stream.
    Close,
    Done,
}

/// An HTTP/2 stream as the transport of one request.
pub(super) struct H2Stream<S> {
    /// Request bytes not yet read: the head, then body pieces.
    pending: Vec<u8>,
    ppos: usize,
    body: Option<RecvStream>,
    chunked: bool,
    respond: Option<SendResponse<Bytes>>,
    send: Option<SendStream<Bytes>>,
    resp_head: Vec<u8>,
    left: Left,
    head_only: bool,
    /// The client reset the stream, or it ended in a stream error.
    reset: Rc<Cell<bool>>,
    _transport: std::marker::PhantomData<S>,
}

impl<S> H2Stream<S> {
    fn h2_error(&self, e: h2::Error) -> io::Error {
        if e.is_reset() || e.is_remote() {
            self.reset.set(true);
        }
        io::Error::other(e)
    }

    /// Ready once the client reset the stream (or the connection ended).
    fn poll_abandoned(&mut self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let polled = if let Some(r) = self.respond.as_mut() {
            r.poll_reset(cx)
        } else if let Some(s) = self.send.as_mut() {
            s.poll_reset(cx)
        } else {
            return Poll::Pending;
        };
        match polled {
            Poll::Ready(Ok(_)) => {
                self.reset.set(true);
                Poll::Ready(())
            }
            Poll::Ready(Err(e)) => {
                if e.is_reset() || e.is_remote() {
                    self.reset.set(true);
                }
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn reset_stream(&mut self, reason: Reason) {
        if let Some(s) = self.send.as_mut() {
            s.send_reset(reason);
        } else if let Some(r) = self.respond.as_mut() {
            r.send_reset(reason);
        }
        self.left = Left::Done;
    }

    /// Parses the response head once complete and sends it as HEADERS;
    /// returns the body bytes that came with it.
    fn take_head(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            let mut lines = resp_header_buf();
            let (status, head_len, framing, headers) =
                match parse_response(&self.resp_head, &mut lines, self.head_only) {
                    RespParse::Partial => return Ok(None),
                    RespParse::Malformed => {
                        self.reset_stream(Reason::INTERNAL_ERROR);
                        return Err(io::ErrorKind::InvalidData.into());
                    }
                    RespParse::Complete(r, _, lines) => {
                        let mut headers = http::HeaderMap::with_capacity(lines.len());
                        for h in lines.iter() {
                            if hop_by_hop(h.name) {
                                continue;
                            }
                            let (Ok(n), Ok(v)) = (
                                http::HeaderName::from_bytes(h.name.as_bytes()),
                                http::HeaderValue::from_bytes(h.value),
                            ) else {
                                continue;
                            };
                            headers.append(n, v);
                        }
                        (r.status, r.head_len, r.framing, headers)
                    }
                };
            if status / 100 == 1 {
                // Interim answers (100 Continue) are not relayed.
                self.resp_head.drain(..head_len);
                continue;
            }
            self.left = match framing {
                RespFraming::None | RespFraming::Length(0) => Left::Done,
                RespFraming::Length(n) => Left::Length(n),
                RespFraming::Chunked => Left::Chunked(ChunkedDecoder::new()),
                RespFraming::Close => Left::Close,
            };
            let mut response = http::Response::new(());
            *response.status_mut() =
                http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
            *response.headers_mut() = headers;
            let end = matches!(self.left, Left::Done);
            let Some(mut respond) = self.respond.take() else {
                return Err(io::ErrorKind::BrokenPipe.into());
            };
            let send = respond
                .send_response(response, end)
                .map_err(|e| self.h2_error(e))?;
            self.send = Some(send);
            let rest = self.resp_head.split_off(head_len);
            self.resp_head = Vec::new();
            return Ok(Some(rest));
        }
    }

    /// Sends body bytes by the response's framing.
    async fn body(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.left {
            Left::Head | Left::Done => Ok(()),
            Left::Close => self.data(data, false).await,
            Left::Length(n) => {
                let take = (*n).min(data.len() as u64) as usize;
                *n -= take as u64;
                let end = *n == 0;
                if end {
                    self.left = Left::Done;
                }
                self.data(&data[..take], end).await
            }
            Left::Chunked(decoder) => {
                let mut at = 0;
                let mut spans = Vec::new();
                let mut end = false;
                while at < data.len() && !end {
                    match decoder.step(&data[at..]) {
                        Ok(step) => {
                            spans.push((at + step.data.start, at + step.data.end));
                            at += step.consumed;
                            end = step.done;
                        }
                        Err(_) => {
                            self.reset_stream(Reason::INTERNAL_ERROR);
                            return Err(io::ErrorKind::InvalidData.into());
                        }
                    }
                }
                if end {
                    self.left = Left::Done;
                }
                let last = spans.len().saturating_sub(1);
                for (i, (a, b)) in spans.into_iter().enumerate() {
                    self.data(&data[a..b], end && i == last).await?;
                }
                Ok(())
            }
        }
    }

    /// DATA frames as the peer's window allows, each a copy of what the
    /// window takes of `bytes` (never more).
    async fn data(&mut self, bytes: &[u8], end: bool) -> io::Result<()> {
        self.frames(bytes.len(), end, |at, n| {
            Bytes::copy_from_slice(&bytes[at..at + n])
        })
        .await
    }

    /// DATA frames of shared bytes as the peer's window allows: each a
    /// slice of `bytes`, nothing copied. A stream whose window stays shut
    /// holds only the reference.
    async fn data_shared(&mut self, bytes: Bytes, end: bool) -> io::Result<()> {
        self.frames(bytes.len(), end, |at, n| Bytes::slice(&bytes, at..at + n))
            .await
    }

    /// Sends `len` bytes as DATA frames, `piece(at, n)` giving the frame
    /// of bytes `at..at + n` once the window (and h2's send buffer) has
    /// room for `n`: what is held for a peer is bounded by its window.
    async fn frames(
        &mut self,
        len: usize,
        end: bool,
        piece: impl Fn(usize, usize) -> Bytes,
    ) -> io::Result<()> {
        let Some(send) = self.send.as_mut() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        let mut sent_end = false;
        let mut at = 0;
        while at < len {
            send.reserve_capacity((len - at).min(SEND_CHUNK));
            let cap = std::future::poll_fn(|cx| send.poll_capacity(cx)).await;
            let n = match cap {
                Some(Ok(n)) => n.min(len - at),
                Some(Err(e)) => return Err(self.h2_error(e)),
                None => return Err(io::ErrorKind::BrokenPipe.into()),
            };
            if n == 0 {
                continue;
            }
            let last = end && at + n == len;
            if let Err(e) = send.send_data(piece(at, n), last) {
                return Err(self.h2_error(e));
            }
            sent_end |= last;
            at += n;
        }
        if end && !sent_end {
            // The end after an empty piece.
            if let Err(e) = send.send_data(Bytes::new(), true) {
                return Err(self.h2_error(e));
            }
        }
        Ok(())
    }
}

/// Connection-specific fields HTTP/2 forbids.
fn hop_by_hop(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "te",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

impl<S> ReadSpare for H2Stream<S> {
    async fn read_spare(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        if buf.len() == buf.capacity() {
            buf.reserve(READ_BUF_BYTES);
        }
        loop {
            if self.ppos < self.pending.len() {
                let n = (buf.capacity() - buf.len()).min(self.pending.len() - self.ppos);
                buf.extend_from_slice(&self.pending[self.ppos..self.ppos + n]);
                self.ppos += n;
                if self.ppos == self.pending.len() {
                    self.pending.clear();
                    self.ppos = 0;
                }
                return (Ok(n), buf);
            }
            let Some(body) = self.body.as_mut() else {
                // The request ends the stream's input.
                return (Ok(0), buf);
            };
            match body.data().await {
                Some(Ok(bytes)) => {
                    let _ = body.flow_control().release_capacity(bytes.len());
                    if bytes.is_empty() {
                        continue;
                    }
                    if self.chunked {
                        // The chunk's size line, written in place.
                        let _ = write!(self.pending, "{:x}\r\n", bytes.len());
                        self.pending.extend_from_slice(&bytes);
                        self.pending.extend_from_slice(b"\r\n");
                    } else {
                        self.pending.extend_from_slice(&bytes);
                    }
                }
                None => {
                    self.body = None;
                    if self.chunked {
                        self.pending.extend_from_slice(b"0\r\n\r\n");
                    }
                }
                Some(Err(e)) => {
                    self.body = None;
                    let e = self.h2_error(e);
                    return (Err(e), buf);
                }
            }
        }
    }
}

impl<S> WriteAll for H2Stream<S> {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        let data = init_bytes(&buf);
        let res = if matches!(self.left, Left::Head) {
            self.resp_head.extend_from_slice(data);
            match self.take_head() {
                Ok(Some(rest)) => self.body(&rest).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            self.body(data).await
        };
        (res, buf)
    }

    async fn write_shared(&mut self, body: Bytes) -> io::Result<()> {
        match &mut self.left {
            // No head yet: the bytes go through the parser.
            Left::Head | Left::Chunked(_) => self.write_all_of(body).await.0,
            Left::Done => Ok(()),
            Left::Close => self.data_shared(body, false).await,
            Left::Length(n) => {
                let take = (*n).min(body.len() as u64) as usize;
                *n -= take as u64;
                let end = *n == 0;
                if end {
                    self.left = Left::Done;
                }
                self.data_shared(Bytes::slice(&body, ..take), end).await
            }
        }
    }

    async fn close_write(&mut self) {
        match self.left {
            Left::Done => {}
            // The body ends where the answer's writer stopped.
            Left::Close => {
                let _ = self.data(&[], true).await;
                self.left = Left::Done;
            }
            // No answer, or a truncated one: the stream fails.
            Left::Head | Left::Length(_) | Left::Chunked(_) => {
                self.reset_stream(Reason::INTERNAL_ERROR)
            }
        }
    }
}

/// A stream cannot be split for a tunnel (HTTP/2 has no upgrade).
pub(super) struct NoHalf;

impl ReadSpare for NoHalf {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        (Ok(0), buf)
    }
}

impl WriteAll for NoHalf {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        (Err(io::ErrorKind::Unsupported.into()), buf)
    }
    async fn close_write(&mut self) {}
}

impl<S: Transport> Transport for H2Stream<S> {
    type ReadHalf = NoHalf;
    type WriteHalf = NoHalf;
    const TLS: bool = S::TLS;
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
    fn into_split(self) -> (NoHalf, NoHalf) {
        (NoHalf, NoHalf)
    }
    fn abandoned(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(Waker::noop());
        self.poll_abandoned(&mut cx).is_ready()
    }
    async fn until_abandoned(&mut self) {
        std::future::poll_fn(|cx| self.poll_abandoned(cx)).await
    }
}
