//! After a relayed `101 Switching Protocols`: bytes both ways until either
//! side closes or neither has sent anything for the idle timeout.

use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::TcpStream;
use monoio::time::Instant;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

const TUNNEL_BUF_BYTES: usize = 16 * 1024;

/// Copies until one side ends; both connections close when this returns.
pub async fn tunnel(
    client: TcpStream,
    client_pending: Vec<u8>,
    upstream: TcpStream,
    upstream_pending: Vec<u8>,
    idle_ms: u64,
) {
    let idle = Duration::from_millis(idle_ms);
    let last = Rc::new(Cell::new(Instant::now()));
    let (mut cr, mut cw) = client.into_split();
    let (mut ur, mut uw) = upstream.into_split();
    if !client_pending.is_empty() && uw.write_all(client_pending).await.0.is_err() {
        return;
    }
    if !upstream_pending.is_empty() && cw.write_all(upstream_pending).await.0.is_err() {
        return;
    }
    let up = copy(&mut cr, &mut uw, last.clone(), idle);
    let down = copy(&mut ur, &mut cw, last, idle);
    monoio::select! {
        _ = up => {},
        _ = down => {},
    }
}

async fn copy<R: AsyncReadRent, W: AsyncWriteRent>(
    from: &mut R,
    to: &mut W,
    last: Rc<Cell<Instant>>,
    idle: Duration,
) {
    let mut buf = Vec::with_capacity(TUNNEL_BUF_BYTES);
    loop {
        buf.clear();
        // Wait at most until the whole tunnel has been idle for `idle`. The
        // read stays in flight across the checks: dropping it would cancel
        // it, and bytes it had just received would be lost.
        let read = from.read(buf);
        let mut read = std::pin::pin!(read);
        let (res, b) = loop {
            let deadline = last.get() + idle;
            match monoio::time::timeout_at(deadline, &mut read).await {
                Ok(r) => break r,
                // The other direction was active: keep waiting.
                Err(_) if last.get() + idle > Instant::now() => {}
                Err(_) => return,
            }
        };
        buf = b;
        match res {
            Ok(n) if n > 0 => {}
            _ => {
                let _ = to.shutdown().await;
                return;
            }
        }
        last.set(Instant::now());
        let (res, b) = to.write_all(buf).await;
        buf = b;
        if res.is_err() {
            return;
        }
    }
}
