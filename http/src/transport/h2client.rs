//! The client side of an HTTP/2 connection to an upstream: its handshake
//! (small stream windows, as a proxy's must be), what a shard knows of it
//! while it runs ([`H2Live`]: streams in flight, closed, idle since), a
//! stream taken on it ([`StreamSlot`]) and the requests waiting for one
//! ([`Waiters`]). A request on a stream is sent and answered as parts by
//! the proxy (`crate::server::conn::forward`), never as HTTP/1.1 text.

use super::compat::Compat;
use super::{ReadSpare, WriteAll};
use bytes::Bytes;
use h2::client::SendRequest;
use monoio::time::Instant;
use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// Receive window a stream opens with: what a server may send on one
/// stream beyond what its client has taken. Small, as a proxy's must be:
/// a stream whose client never reads holds this much (and a frame).
pub const STREAM_WINDOW: u32 = 16 * 1024;
/// Most bytes h2 buffers for one stream before the window opens.
const SEND_BUFFER: usize = 64 * 1024;

/// Most wakers a server's waiting list holds before it wakes them all.
const WAITERS: usize = 1024;

/// Requests waiting for a stream of one server.
#[derive(Default)]
pub struct Waiters(RefCell<Vec<Waker>>);

impl Waiters {
    fn wake_one(&self) {
        let w = self.0.borrow_mut().pop();
        if let Some(w) = w {
            w.wake();
        }
    }

    pub fn wake_all(&self) {
        let all = std::mem::take(&mut *self.0.borrow_mut());
        for w in all {
            w.wake();
        }
    }

    pub fn any(&self) -> bool {
        !self.0.borrow().is_empty()
    }

    /// Ready once woken.
    pub async fn wait(&self) {
        let mut registered = false;
        std::future::poll_fn(|cx| {
            if registered {
                return Poll::Ready(());
            }
            registered = true;
            // Wakers of requests that stopped waiting (past their
            // deadline) stay until a wake: past WAITERS, every one is woken
            // (those still waiting take again and wait anew), so the list
            // stays bounded while no stream ends.
            if self.0.borrow().len() >= WAITERS {
                self.wake_all();
            }
            self.0.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// What a shard knows of one HTTP/2 connection while it runs.
pub struct H2Live {
    /// Streams taken (a request in flight on it).
    streams: Cell<u32>,
    /// The connection ended (closed, failed, or GOAWAY received).
    closed: Cell<bool>,
    /// When its last stream ended (the shard's milliseconds).
    idle_since_ms: Cell<u64>,
    /// Requests waiting for a stream of its server.
    waiters: Rc<Waiters>,
}

impl H2Live {
    pub fn new(waiters: Rc<Waiters>) -> Rc<H2Live> {
        Rc::new(H2Live {
            streams: Cell::new(0),
            closed: Cell::new(false),
            idle_since_ms: Cell::new(crate::clock::now_ms()),
            waiters,
        })
    }

    /// Takes a stream, given back when the slot drops.
    pub fn take_stream(self: &Rc<Self>) -> StreamSlot {
        self.streams.set(self.streams.get() + 1);
        StreamSlot { live: self.clone() }
    }

    pub fn streams(&self) -> u32 {
        self.streams.get()
    }

    /// Marks the connection ended: no new stream goes to it.
    pub fn close(&self) {
        self.closed.set(true);
        self.waiters.wake_all();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// No stream for `idle_ms` or longer.
    pub fn idle_for(&self, now_ms: u64, idle_ms: u64) -> bool {
        self.streams.get() == 0 && now_ms.saturating_sub(self.idle_since_ms.get()) >= idle_ms
    }
}

/// A stream taken on a connection.
pub struct StreamSlot {
    live: Rc<H2Live>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let n = self.live.streams.get().saturating_sub(1);
        self.live.streams.set(n);
        if n == 0 {
            self.live.idle_since_ms.set(crate::clock::now_ms());
        }
        self.live.waiters.wake_one();
    }
}

/// The HTTP/2 client handshake over a connection's two halves, within
/// `deadline`; the connection then runs as a task of its own on the
/// shard, and `live` is marked closed when it ends. The connection's
/// receive window is `streams` streams' windows, so streams whose clients
/// stop reading cannot shut it for the others.
pub async fn handshake<R: ReadSpare + Unpin + 'static, W: WriteAll + Unpin + 'static>(
    read: R,
    write: W,
    deadline: Instant,
    live: &Rc<H2Live>,
    streams: u32,
) -> io::Result<SendRequest<Bytes>> {
    let io = Compat::new(read, write, Vec::new());
    let mut b = h2::client::Builder::new();
    b.initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(
            streams
                .max(1)
                .saturating_mul(STREAM_WINDOW)
                .min(i32::MAX as u32),
        )
        .max_send_buffer_size(SEND_BUFFER)
        .enable_push(false)
        .reset_stream_duration(Duration::from_secs(5));
    let (send, conn) = match monoio::time::timeout_at(deadline, b.handshake::<_, Bytes>(io)).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Err(io::Error::other(e)),
        Err(_) => return Err(io::ErrorKind::TimedOut.into()),
    };
    let l = live.clone();
    monoio::spawn(async move {
        let _ = conn.await;
        l.close();
    });
    Ok(send)
}
