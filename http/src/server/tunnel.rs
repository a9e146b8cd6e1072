//! After a relayed `101 Switching Protocols`: bytes both ways until either
//! side closes or neither has sent anything for the idle timeout.
//!
//! When the host limits WebSocket messages (`websocket`), the client's
//! direction is read frame by frame from the headers
//! (`codec::websocket`): a message over the rate or the size is dropped
//! whole, or the tunnel is closed with 1008 or 1009 (a close frame to each
//! side), as the host says. Every drop and close is counted.

use super::shard::Shard;
use crate::codec::websocket::{Judge, Scanner, Verdict, MAX_HEADER};
use crate::transport::{ReadSpare, Transport, WriteAll};
use gapura_gate::policy::{OnLimit, WebSocketLimits};
use gapura_gate::quota::Bucket;
use monoio::buf::IoBuf;
use monoio::time::Instant;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

const TUNNEL_BUF_BYTES: usize = 16 * 1024;

/// The message limits of one tunnel and the shard that counts them.
pub(super) struct Messages {
    pub limits: WebSocketLimits,
    pub shard: Rc<Shard>,
    pub bucket: Bucket,
    /// For the warning line: the host's label and the client.
    pub host: String,
    pub client: std::net::IpAddr,
}

impl Messages {
    fn over(&self, code: u16) -> Verdict {
        match self.limits.on_limit {
            OnLimit::Drop => Verdict::Drop,
            OnLimit::Close => Verdict::Close(code),
        }
    }
}

impl Judge for Messages {
    fn message(&mut self, declared: u64, _control: bool) -> Verdict {
        if !self.fits(declared) {
            return self.over(crate::codec::websocket::CLOSE_TOO_BIG);
        }
        if let Some(p) = &self.limits.messages {
            if !self.bucket.try_take(p, self.shard.now_ms()).allowed {
                return self.over(crate::codec::websocket::CLOSE_POLICY);
            }
        }
        Verdict::Pass
    }

    fn fits(&mut self, total: u64) -> bool {
        self.limits.max_message_bytes.is_none_or(|m| total <= m)
    }
}

/// Copies until one side ends; both connections close when this returns.
pub async fn tunnel<S: Transport>(
    client: S,
    client_pending: Vec<u8>,
    upstream: crate::transport::upstream::UpstreamConn,
    upstream_pending: Vec<u8>,
    idle_ms: u64,
    messages: Option<Messages>,
) {
    let idle = Duration::from_millis(idle_ms);
    let last = Rc::new(Cell::new(Instant::now()));
    // An HTTP/2 stream is never upgraded: it has no halves.
    let Some((mut cr, mut cw)) = client.into_split() else {
        return;
    };
    let (mut ur, mut uw) = upstream.split();
    if !upstream_pending.is_empty() && cw.write_all_of(upstream_pending).await.0.is_err() {
        return;
    }
    let Some(mut messages) = messages else {
        if !client_pending.is_empty() && uw.write_all_of(client_pending).await.0.is_err() {
            return;
        }
        let up = copy(&mut cr, &mut uw, last.clone(), idle);
        let down = copy(&mut ur, &mut cw, last, idle);
        monoio::select! {
            _ = up => {},
            _ = down => {},
        }
        return;
    };
    let closed = {
        let up = copy_messages(
            &mut cr,
            &mut uw,
            client_pending,
            &mut messages,
            last.clone(),
            idle,
        );
        let down = copy(&mut ur, &mut cw, last, idle);
        monoio::select! {
            code = up => code,
            _ = down => None,
        }
    };
    if let Some(code) = closed {
        messages.shard.stats.websocket_closed.inc();
        messages
            .shard
            .warn_websocket("closed", &messages.host, messages.client);
        let [hi, lo] = code.to_be_bytes();
        // To the client unmasked; to the upstream masked with a zero key,
        // as a client's frame must be.
        let _ = cw.write_all_of(vec![0x88, 2, hi, lo]).await;
        let _ = uw.write_all_of(vec![0x88, 0x82, 0, 0, 0, 0, hi, lo]).await;
        cw.close_write().await;
        uw.close_write().await;
    }
}

/// Waits for `read`, at most until the whole tunnel has been idle for
/// `idle`. The read stays in flight across the checks: dropping it would
/// cancel it, and bytes it had just received would be lost. `None` once
/// idle.
async fn read_while_active<F: std::future::Future>(
    read: F,
    last: &Cell<Instant>,
    idle: Duration,
) -> Option<F::Output> {
    let mut read = std::pin::pin!(read);
    loop {
        let deadline = last.get() + idle;
        match monoio::time::timeout_at(deadline, &mut read).await {
            Ok(r) => return Some(r),
            // The other direction was active: keep waiting.
            Err(_) if last.get() + idle > Instant::now() => {}
            Err(_) => return None,
        }
    }
}

async fn copy<R: ReadSpare, W: WriteAll>(
    from: &mut R,
    to: &mut W,
    last: Rc<Cell<Instant>>,
    idle: Duration,
) {
    let mut buf = Vec::with_capacity(TUNNEL_BUF_BYTES);
    loop {
        buf.clear();
        let Some((res, b)) = read_while_active(from.read_spare(buf), &last, idle).await else {
            return;
        };
        buf = b;
        match res {
            Ok(n) if n > 0 => {}
            _ => {
                to.close_write().await;
                return;
            }
        }
        last.set(Instant::now());
        let (res, b) = to.write_all_of(buf).await;
        buf = b;
        if res.is_err() {
            return;
        }
    }
}

/// The client's direction of a WebSocket tunnel with message limits:
/// frames scanned from their headers, dropped messages cut out. Returns
/// the close status when a limit closes the tunnel.
async fn copy_messages<R: ReadSpare, W: WriteAll>(
    from: &mut R,
    to: &mut W,
    pending: Vec<u8>,
    messages: &mut Messages,
    last: Rc<Cell<Instant>>,
    idle: Duration,
) -> Option<u16> {
    let mut scanner = Scanner::default();
    let mut buf = pending;
    buf.reserve(TUNNEL_BUF_BYTES.saturating_sub(buf.len()).max(MAX_HEADER));
    // Bytes already buffered (sent right after the upgrade) come first.
    let mut fresh = !buf.is_empty();
    loop {
        if !fresh {
            let read = from.read_spare(buf);
            let (res, b) = read_while_active(read, &last, idle).await?;
            buf = b;
            match res {
                Ok(n) if n > 0 => {}
                _ => {
                    to.close_write().await;
                    return None;
                }
            }
            last.set(Instant::now());
        }
        fresh = false;
        let got = scanner.scan(&mut buf, messages);
        if got.dropped > 0 {
            messages
                .shard
                .stats
                .websocket_dropped
                .add(u64::from(got.dropped));
            messages
                .shard
                .warn_websocket("dropped", &messages.host, messages.client);
        }
        if got.keep > 0 {
            let (res, slice) = to.write_all_of(buf.slice(0..got.keep)).await;
            buf = slice.into_inner();
            if res.is_err() {
                return None;
            }
        }
        if got.close.is_some() {
            return got.close;
        }
        // An unfinished frame header waits at the front for the rest.
        let len = buf.len();
        buf.copy_within(len - got.pending..len, 0);
        buf.truncate(got.pending);
    }
}
