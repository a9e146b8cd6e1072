//! A plain HTTP/1.1 connection's stream (a client's, or an upstream's):
//! receiving from its shard's ring (`crate::uring`: one multishot receive
//! over provided buffers) where the shard has one, else on the runtime's
//! TCP stream alone. One type, so the connection pipeline exists once.

use super::{ReadSpare, Transport};
use crate::uring::stream::{RingRead, RingStream, RingWrite};
use monoio::io::{CancelHandle, OwnedReadHalf, OwnedWriteHalf};
use monoio::net::TcpStream;
use std::io;

/// A plain connection's stream.
pub enum Plain {
    Tcp(TcpStream),
    Ring(RingStream),
}

/// The reading half of a split [`Plain`].
pub enum PlainRead {
    Tcp(OwnedReadHalf<TcpStream>),
    Ring(RingRead),
}

/// The writing half of a split [`Plain`].
pub enum PlainWrite {
    Tcp(OwnedWriteHalf<TcpStream>),
    Ring(RingWrite),
}

impl std::fmt::Debug for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Plain::Tcp(s) => f.debug_tuple("Tcp").field(s).finish(),
            Plain::Ring(_) => f.write_str("Ring"),
        }
    }
}

impl Plain {
    /// `tcp` on `ring` when there is one with room, else as it is.
    pub fn new(tcp: TcpStream, ring: Option<&std::rc::Rc<crate::uring::ShardRing>>) -> Plain {
        match ring {
            Some(ring) => match RingStream::open(ring, tcp) {
                Ok(s) => Plain::Ring(s),
                Err(tcp) => Plain::Tcp(tcp),
            },
            None => Plain::Tcp(tcp),
        }
    }

    /// Whether the connection receives from the shard's ring.
    pub fn on_ring(&self) -> bool {
        matches!(self, Plain::Ring(_))
    }
}

either_stream!(read Tcp Ring: Plain);
either_stream!(read Tcp Ring: PlainRead);
either_stream!(write Tcp Ring: Plain);
either_stream!(write Tcp Ring: PlainWrite);

impl Plain {
    /// Its two halves.
    pub fn split(self) -> (PlainRead, PlainWrite) {
        match self {
            Plain::Tcp(s) => {
                let (r, w) = monoio::io::Splitable::into_split(s);
                (PlainRead::Tcp(r), PlainWrite::Tcp(w))
            }
            Plain::Ring(s) => {
                let (r, w) = s.into_split();
                (PlainRead::Ring(r), PlainWrite::Ring(w))
            }
        }
    }
}

impl Transport for Plain {
    type ReadHalf = PlainRead;
    type WriteHalf = PlainWrite;
    crate::transport::answers_as_bytes!();
    const TLS: bool = false;
    const PARKS: bool = true;
    async fn cancelable_read_spare(
        &mut self,
        buf: Vec<u8>,
        handle: CancelHandle,
    ) -> (io::Result<usize>, Vec<u8>) {
        match self {
            Plain::Tcp(s) => s.cancelable_read_spare(buf, handle).await,
            Plain::Ring(s) => s.read_spare(buf).await,
        }
    }
    fn buffered(&self) -> bool {
        match self {
            Plain::Tcp(_) => false,
            Plain::Ring(s) => s.buffered(),
        }
    }
    fn waits_unbuffered(&self) -> bool {
        self.on_ring()
    }
    async fn ready(&mut self) {
        if let Plain::Ring(s) = self {
            s.ready().await
        }
    }
    #[inline]
    fn socket(&self) -> Option<&TcpStream> {
        match self {
            Plain::Tcp(s) => Some(s),
            Plain::Ring(s) => Some(s.socket()),
        }
    }
    fn into_split(self) -> Option<(PlainRead, PlainWrite)> {
        Some(self.split())
    }
}
