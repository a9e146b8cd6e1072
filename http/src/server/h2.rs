//! HTTP/2 on a client connection: the h2 codec drives the connection, and
//! each stream runs the same request pipeline as an HTTP/1.1 request.
//!
//! A stream is served by a [`Conn`] whose transport is the stream itself
//! ([`MuxStream`], `muxstream`): the pipeline reads the request's head from
//! its fields (never written and parsed as HTTP/1.1 text) and its body
//! from DATA frames; its answers go out as HEADERS and DATA frames from
//! their parts (an upstream's, or Gapura's own written into the stream's
//! `Parts`), with flow control. Prepare, the gate,
//! limits, leases, forwarding and
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
use super::muxstream::MuxStream;
use super::place::Place;
use super::shard::Shard;
use crate::transport::compat::Compat;
use crate::transport::Transport;
use bytes::Bytes;
use gapura_gate::client::Peer;
use gapura_gate::limits::OUTER_MAX_HEAD_BYTES;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// The window of the reset budget.
const RESET_WINDOW_MS: u64 = 10_000;
/// How often the driver looks for a drain, an idle or a slow head.
const TICK: Duration = Duration::from_millis(100);
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
    /// The listener's `Alt-Svc` (it serves HTTP/3 too).
    alt_svc: Option<&'static gapura_gate::sink::Lines>,
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
    alt_svc: Option<&'static gapura_gate::sink::Lines>,
) where
    S::ReadHalf: Unpin,
    S::WriteHalf: Unpin,
{
    let snap = shard.snapshot();
    let settings = snap.server.http2;
    shard.stats.h2_connections.inc();
    // A byte stream always splits.
    let Some((r, w)) = stream.into_split() else {
        return;
    };
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
        alt_svc,
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
    let pipe = MuxStream::<S>::new(parts, body, respond, reset.clone(), || shard.request_id());
    let io = ClientIo::new(
        pipe,
        Vec::with_capacity(READ_BUF_BYTES),
        0,
        shard.conns.deadlines.register(),
    );
    let end = Conn::new(
        io,
        shard.clone(),
        client_peer,
        None,
        shared.bucket.clone(),
        shared.connection,
    )
    .with_alt_svc(shared.alt_svc)
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
