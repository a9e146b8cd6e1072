//! A connection whose receives come from its shard's ring
//! ([`super::engine`]): reads take the bytes its multishot receive queued
//! (copied into the caller's buffer, the provided buffer given back at
//! once). Writes, shutdown and the close stay with the runtime's TCP
//! stream.

use super::engine::ShardRing;
use crate::transport::{ReadSpare, WriteAll};
use monoio::buf::IoBuf;
use monoio::io::{OwnedReadHalf, OwnedWriteHalf, Splitable};
use monoio::net::TcpStream;
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;

/// A connection's receive on the ring; cancelled when dropped.
struct Recv {
    ring: Rc<ShardRing>,
    slot: u32,
}

impl Drop for Recv {
    fn drop(&mut self) {
        self.ring.close(self.slot);
    }
}

impl Recv {
    async fn read(&self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        let res =
            std::future::poll_fn(|cx| self.ring.poll_read(self.slot, &mut buf, cx.waker())).await;
        (res, buf)
    }
}

/// A TCP connection whose receives come from its shard's ring.
pub struct RingStream {
    /// Declared first: the receive is cancelled before the socket closes.
    recv: Recv,
    tcp: TcpStream,
}

/// The reading half of a split [`RingStream`].
pub struct RingRead {
    recv: Recv,
    _tcp: OwnedReadHalf<TcpStream>,
}

/// The writing half of a split [`RingStream`].
pub type RingWrite = OwnedWriteHalf<TcpStream>;

impl RingStream {
    /// Moves `tcp`'s receives onto `ring`; it comes back when the ring
    /// cannot take it.
    pub fn open(ring: &Rc<ShardRing>, tcp: TcpStream) -> Result<RingStream, TcpStream> {
        match ring.open(tcp.as_raw_fd()) {
            Some(slot) => Ok(RingStream {
                recv: Recv {
                    ring: ring.clone(),
                    slot,
                },
                tcp,
            }),
            None => Err(tcp),
        }
    }

    pub fn socket(&self) -> &TcpStream {
        &self.tcp
    }

    /// Whether received bytes wait unread (in the ring's buffers, where a
    /// peek on the socket cannot see them).
    pub fn buffered(&self) -> bool {
        self.recv.ring.buffered(self.recv.slot)
    }

    pub fn into_split(self) -> (RingRead, RingWrite) {
        let (r, w) = self.tcp.into_split();
        (
            RingRead {
                recv: self.recv,
                _tcp: r,
            },
            w,
        )
    }

    /// Waits, holding no buffer, until a read would not wait.
    pub async fn ready(&mut self) {
        let r = &self.recv;
        std::future::poll_fn(|cx| r.ring.poll_ready(r.slot, cx.waker())).await
    }
}

impl ReadSpare for RingStream {
    #[inline]
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        self.recv.read(buf).await
    }
}

impl WriteAll for RingStream {
    #[inline]
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        self.tcp.write_all_of(buf).await
    }
    async fn close_write(&mut self) {
        self.tcp.close_write().await
    }
}

impl ReadSpare for RingRead {
    #[inline]
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        self.recv.read(buf).await
    }
}
