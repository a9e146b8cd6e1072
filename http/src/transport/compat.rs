//! The poll-based I/O traits (`tokio::io::AsyncRead`/`AsyncWrite`) over a
//! transport's two halves, for the HTTP/2 codec (h2), which polls.
//!
//! A read in flight owns the read half and a write in flight owns the write
//! half (the ring's operations own their buffers), so reading and writing
//! proceed independently. Writes are gathered into one buffer and handed
//! to the transport on flush, or when the buffer passes [`WRITE_HIGH`]
//! (backpressure: `poll_write` waits for the write in flight then).

use super::{ReadSpare, WriteAll};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Read buffer per connection.
const READ_BYTES: usize = 16 * 1024;
/// Gathered writes past this wait for the write in flight.
pub const WRITE_HIGH: usize = 64 * 1024;
/// How long a closed connection's input is still read and dropped.
const LINGER_MS: u64 = 1000;
/// The most input read and dropped after the close.
const LINGER_BYTES: usize = 256 * 1024;

type Fut<T> = Pin<Box<dyn Future<Output = (T, io::Result<usize>, Vec<u8>)>>>;

enum Half<T> {
    Idle(T),
    Busy(Fut<T>),
    /// Only while a state is being replaced.
    Gone,
}

pub struct Compat<R: ReadSpare + 'static, W: WriteAll + 'static> {
    read: Half<R>,
    rbuf: Vec<u8>,
    rpos: usize,
    write: Half<W>,
    /// Bytes accepted from `poll_write`, not yet handed to a write.
    wbuf: Vec<u8>,
    /// The buffer of the last write, back for reuse.
    spare: Vec<u8>,
    write_error: Option<io::ErrorKind>,
}

impl<R: ReadSpare + 'static, W: WriteAll + 'static> Compat<R, W> {
    /// `early`: bytes already read from the read half, served first.
    pub fn new(read: R, write: W, early: Vec<u8>) -> Compat<R, W> {
        Compat {
            read: Half::Idle(read),
            rbuf: early,
            rpos: 0,
            write: Half::Idle(write),
            wbuf: Vec::new(),
            spare: Vec::new(),
            write_error: None,
        }
    }

    /// Polls the write in flight; `Ready` once none is.
    fn poll_write_done(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Half::Busy(f) = &mut self.write {
            match f.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready((w, res, mut buf)) => {
                    self.write = Half::Idle(w);
                    buf.clear();
                    self.spare = buf;
                    if let Err(e) = res {
                        self.write_error = Some(e.kind());
                    }
                }
            }
        }
        match self.write_error {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(())),
        }
    }

    /// Hands the gathered bytes to a write.
    fn start_write(&mut self) {
        if self.wbuf.is_empty() {
            return;
        }
        if let Half::Idle(mut w) = std::mem::replace(&mut self.write, Half::Gone) {
            let buf = std::mem::replace(&mut self.wbuf, std::mem::take(&mut self.spare));
            let n = buf.len();
            self.write = Half::Busy(Box::pin(async move {
                let (res, buf) = w.write_all_of(buf).await;
                (w, res.map(|()| n), buf)
            }));
        }
    }
}

/// What was written last (a GOAWAY, say) still reaches the peer when the
/// codec lets go of the connection: the write in flight and the gathered
/// bytes finish on their own task, then the write half closes, and what
/// the peer still sends is read and dropped for a moment (at most
/// [`LINGER_MS`] and [`LINGER_BYTES`]), so it reads those last bytes
/// rather than a reset.
impl<R: ReadSpare + 'static, W: WriteAll + 'static> Drop for Compat<R, W> {
    fn drop(&mut self) {
        let write = std::mem::replace(&mut self.write, Half::Gone);
        let read = std::mem::replace(&mut self.read, Half::Gone);
        let rest = std::mem::take(&mut self.wbuf);
        let finishing: Option<Fut<W>> = match write {
            Half::Busy(f) => Some(f),
            Half::Idle(w) => Some(Box::pin(async move { (w, Ok(0), Vec::new()) })),
            Half::Gone => None,
        };
        let Some(finishing) = finishing else {
            return;
        };
        monoio::spawn(async move {
            let (mut w, res, _) = finishing.await;
            if res.is_ok() && !rest.is_empty() {
                let _ = w.write_all_of(rest).await;
            }
            w.close_write().await;
            let deadline = crate::clock::deadline(LINGER_MS);
            let mut r = match read {
                Half::Idle(r) => r,
                Half::Busy(f) => match monoio::time::timeout_at(deadline, f).await {
                    Ok((r, _, _)) => r,
                    Err(_) => return,
                },
                Half::Gone => return,
            };
            let mut buf = Vec::with_capacity(READ_BYTES);
            let mut drained = 0;
            while drained < LINGER_BYTES {
                buf.clear();
                match monoio::time::timeout_at(deadline, r.read_spare(buf)).await {
                    Ok((Ok(n), b)) if n > 0 => {
                        drained += n;
                        buf = b;
                    }
                    _ => return,
                }
            }
        });
    }
}

impl<R: ReadSpare + Unpin + 'static, W: WriteAll + Unpin + 'static> AsyncRead for Compat<R, W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.rpos < this.rbuf.len() {
                let n = out.remaining().min(this.rbuf.len() - this.rpos);
                out.put_slice(&this.rbuf[this.rpos..this.rpos + n]);
                this.rpos += n;
                return Poll::Ready(Ok(()));
            }
            match std::mem::replace(&mut this.read, Half::Gone) {
                Half::Idle(mut r) => {
                    let mut buf = std::mem::take(&mut this.rbuf);
                    buf.clear();
                    this.rpos = 0;
                    if buf.capacity() < READ_BYTES {
                        buf.reserve(READ_BYTES);
                    }
                    this.read = Half::Busy(Box::pin(async move {
                        let (res, buf) = r.read_spare(buf).await;
                        (r, res, buf)
                    }));
                }
                Half::Busy(mut f) => match f.as_mut().poll(cx) {
                    Poll::Pending => {
                        this.read = Half::Busy(f);
                        return Poll::Pending;
                    }
                    Poll::Ready((r, res, buf)) => {
                        this.read = Half::Idle(r);
                        this.rbuf = buf;
                        match res {
                            // The end: nothing put.
                            Ok(0) => return Poll::Ready(Ok(())),
                            Ok(_) => {}
                            Err(e) => return Poll::Ready(Err(e)),
                        }
                    }
                },
                Half::Gone => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
            }
        }
    }
}

impl<R: ReadSpare + Unpin + 'static, W: WriteAll + Unpin + 'static> AsyncWrite for Compat<R, W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.wbuf.len() >= WRITE_HIGH {
            match this.poll_write_done(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            this.start_write();
        }
        if let Some(kind) = this.write_error {
            return Poll::Ready(Err(kind.into()));
        }
        this.wbuf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.poll_write_done(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            if this.wbuf.is_empty() {
                return Poll::Ready(Ok(()));
            }
            this.start_write();
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut *this).poll_flush(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        if let Half::Idle(mut w) = std::mem::replace(&mut this.write, Half::Gone) {
            this.write = Half::Busy(Box::pin(async move {
                w.close_write().await;
                (w, Ok(0), Vec::new())
            }));
        }
        this.poll_write_done(cx)
    }
}
