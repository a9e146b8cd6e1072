//! A connection on its shard's ring ([`super::engine`]): reads take the
//! bytes its multishot receive queued (copied into the caller's buffer, the
//! provided buffer given back at once), writes are sends on its registered
//! file. The TCP socket stays with the stream, for what the ring does not
//! do (readiness of the peer's end, shutdown, the close).

use super::engine::ShardRing;
use monoio::net::TcpStream;
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// One connection's place in the ring; its slot closes when dropped.
struct Handle {
    ring: Rc<ShardRing>,
    slot: u32,
    tcp: TcpStream,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.ring.close(self.slot);
    }
}

/// A client connection on its shard's ring.
pub struct RingStream(Rc<Handle>);

/// The reading half of a split [`RingStream`].
pub struct RingRead(Rc<Handle>);

/// The writing half of a split [`RingStream`].
pub struct RingWrite(Rc<Handle>);

impl RingStream {
    /// Moves `tcp` onto `ring`; it comes back when the ring's file table
    /// is full.
    pub fn open(ring: &Rc<ShardRing>, tcp: TcpStream) -> Result<RingStream, TcpStream> {
        match ring.open(tcp.as_raw_fd()) {
            Some(slot) => Ok(RingStream(Rc::new(Handle {
                ring: ring.clone(),
                slot,
                tcp,
            }))),
            None => Err(tcp),
        }
    }

    pub fn socket(&self) -> &TcpStream {
        &self.0.tcp
    }

    pub fn into_split(self) -> (RingRead, RingWrite) {
        (RingRead(self.0.clone()), RingWrite(self.0))
    }

    pub async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        read(&self.0, buf).await
    }

    /// Waits, holding no buffer, until a read would not wait.
    pub async fn ready(&mut self) {
        let h = &self.0;
        std::future::poll_fn(|cx| h.ring.poll_ready(h.slot, cx.waker())).await
    }

    pub async fn write_all_of<T: monoio::buf::IoBuf + 'static>(
        &mut self,
        buf: T,
    ) -> (io::Result<()>, T) {
        SendAll::new(&self.0, buf).await
    }

    pub fn close_write(&mut self) {
        shutdown_write(&self.0);
    }
}

impl RingRead {
    pub async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        read(&self.0, buf).await
    }
}

impl RingWrite {
    pub async fn write_all_of<T: monoio::buf::IoBuf + 'static>(
        &mut self,
        buf: T,
    ) -> (io::Result<()>, T) {
        SendAll::new(&self.0, buf).await
    }

    pub fn close_write(&mut self) {
        shutdown_write(&self.0);
    }
}

fn shutdown_write(h: &Handle) {
    // SAFETY: a plain system call on the stream's own descriptor; no
    // send is in flight (writes are awaited whole before it).
    unsafe { libc::shutdown(h.tcp.as_raw_fd(), libc::SHUT_WR) };
}

async fn read(h: &Handle, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
    let res = std::future::poll_fn(|cx| h.ring.poll_read(h.slot, &mut buf, cx.waker())).await;
    (res, buf)
}

/// Sends all of a buffer, one send in flight at a time. Dropped while a
/// send is in flight, it leaves the buffer with the slot until the kernel
/// is done with it.
struct SendAll<'a, T: monoio::buf::IoBuf + 'static> {
    h: &'a Handle,
    buf: Option<T>,
    at: usize,
    in_flight: bool,
}

impl<'a, T: monoio::buf::IoBuf + 'static> SendAll<'a, T> {
    fn new(h: &'a Handle, buf: T) -> Self {
        SendAll {
            h,
            buf: Some(buf),
            at: 0,
            in_flight: false,
        }
    }
}

impl<T: monoio::buf::IoBuf + 'static> Unpin for SendAll<'_, T> {}

impl<T: monoio::buf::IoBuf + 'static> Future for SendAll<'_, T> {
    type Output = (io::Result<()>, T);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = &mut *self;
        loop {
            if me.in_flight {
                let res = match me.h.ring.poll_sent(me.h.slot, cx.waker()) {
                    Poll::Ready(r) => r,
                    Poll::Pending => return Poll::Pending,
                };
                me.in_flight = false;
                let err = match res {
                    r if r < 0 => Some(io::Error::from_raw_os_error(-r)),
                    0 => Some(io::ErrorKind::WriteZero.into()),
                    r => {
                        me.at += r as usize;
                        None
                    }
                };
                if let Some(e) = err {
                    return Poll::Ready((Err(e), me.take()));
                }
            }
            let buf = me.buf.as_ref().expect("polled after completion");
            let total = buf.bytes_init();
            if me.at >= total {
                return Poll::Ready((Ok(()), me.take()));
            }
            // SAFETY: `at < total`: within the buffer's initialized bytes,
            // which stay in place (the buffer is held here or orphaned to
            // the slot) until the send completes.
            let ptr = unsafe { buf.read_ptr().add(me.at) };
            if let Err(e) = me.h.ring.start_send(me.h.slot, ptr, total - me.at) {
                return Poll::Ready((Err(e), me.take()));
            }
            me.in_flight = true;
        }
    }
}

impl<T: monoio::buf::IoBuf + 'static> SendAll<'_, T> {
    fn take(&mut self) -> T {
        self.buf.take().expect("polled after completion")
    }
}

impl<T: monoio::buf::IoBuf + 'static> Drop for SendAll<'_, T> {
    fn drop(&mut self) {
        if self.in_flight {
            if let Some(buf) = self.buf.take() {
                self.h.ring.orphan(self.h.slot, Box::new(buf));
            }
        }
    }
}
