//! The byte streams a client connection runs over: plain TCP (`plain`:
//! the runtime's stream, receiving from the shard's own ring or not), or
//! TLS over TCP (`tls`); an upstream connection is either (`upstream`,
//! which also builds the rustls client configuration an upstream's `tls`
//! asks for), and an HTTP/2 connection to an upstream runs over one
//! (`h2client`: its handshake, its streams in flight); `certs` reads certificates and keys, `tickets` keeps the
//! session-ticket keys, `compat` adapts a stream to the h2 codec. The
//! connection loop, the proxy and the tunnel are written once against
//! [`Transport`] and its halves.
//!
//! Reads fill a `Vec`'s spare capacity (its length grows by what was read);
//! writes hand a buffer over and get it back, as the ring's operations do.
//! A transport always has its TCP socket at hand ([`Transport::socket`]):
//! the proxy watches it for the client going away while an upstream answer
//! is awaited.

use crate::codec::head::{parse_head_known, HeadBounds, HeaderBuf, Parse};
use crate::codec::KnownHost;
use gapura_gate::sink::Sink;

/// Reading and writing on a stream that is one of several kinds (an enum
/// whose variants each hold a stream): the same call on the variant.
macro_rules! either_stream {
    (read $($v:ident)+: $t:ident) => {
        impl $crate::transport::ReadSpare for $t {
            #[inline]
            async fn read_spare(&mut self, buf: Vec<u8>) -> (std::io::Result<usize>, Vec<u8>) {
                match self {
                    $($t::$v(s) => $crate::transport::ReadSpare::read_spare(s, buf).await,)+
                }
            }
        }
    };
    (write $($v:ident)+: $t:ident) => {
        impl $crate::transport::WriteAll for $t {
            #[inline]
            async fn write_all_of<T: monoio::buf::IoBuf + 'static>(
                &mut self,
                buf: T,
            ) -> (std::io::Result<()>, T) {
                match self {
                    $($t::$v(s) => $crate::transport::WriteAll::write_all_of(s, buf).await,)+
                }
            }
            async fn close_write(&mut self) {
                match self {
                    $($t::$v(s) => $crate::transport::WriteAll::close_write(s).await,)+
                }
            }
        }
    };
}

pub mod certs;
pub mod compat;
pub mod h2client;
pub mod plain;
pub mod tickets;
pub mod tls;
pub mod upstream;

use monoio::buf::{IoBuf, IoBufMut};
use monoio::io::{
    AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, CancelHandle, CancelableAsyncReadRent,
    OwnedReadHalf, OwnedWriteHalf,
};
use monoio::net::TcpStream;
use std::io;

/// What a transport reads with.
// The futures are polled on their shard's thread only: no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait ReadSpare {
    /// Reads into `buf`'s spare capacity; `Ok(0)` at the end of the stream.
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>);
}

/// What a transport writes with.
#[allow(async_fn_in_trait)]
pub trait WriteAll {
    /// Writes all of `buf`.
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T);
    /// Ends the writing direction (a TLS close_notify first).
    async fn close_write(&mut self);
    /// Writes all of `body`, bytes shared with the snapshot. A byte
    /// stream writes them as they are; an HTTP/2 stream sends slices of
    /// them as DATA frames, copying nothing.
    async fn write_shared(&mut self, body: bytes::Bytes) -> io::Result<()> {
        self.write_all_of(body).await.0
    }
}

/// A client connection's stream.
#[allow(async_fn_in_trait)]
pub trait Transport: ReadSpare + WriteAll + 'static {
    type ReadHalf: ReadSpare + 'static;
    type WriteHalf: WriteAll + 'static;
    /// Whether answers are written as parts ([`Transport::send_parts`]).
    const PARTS: bool = false;
    /// What the connection keeps of an answer being written as parts
    /// (`()` for a byte stream, whose answers are bytes in its write
    /// buffer).
    type Parts: Default + 'static;
    /// Where Gapura's own answers are written ([`Transport::answers`]).
    type Answers: Sink;
    /// Where Gapura's own answers are written: the write buffer of a byte
    /// stream (HTTP/1.1 bytes), else the parts (an HTTP/2 stream's head,
    /// fields and body, sent by [`Transport::send_parts`]).
    fn answers<'a>(wbuf: &'a mut Vec<u8>, parts: &'a mut Self::Parts) -> &'a mut Self::Answers;
    /// Sends the answer written as parts, once whole; nothing for a byte
    /// stream.
    async fn send_parts(&mut self, parts: &mut Self::Parts) -> io::Result<()> {
        let _ = parts;
        Ok(())
    }
    /// Body bytes written as parts and not sent yet.
    fn parts_len(parts: &Self::Parts) -> usize {
        let _ = parts;
        0
    }
    /// [`Transport::parts_len`], plus one while an answer is written as
    /// parts at all (0: nothing waits).
    fn parts_waiting(parts: &Self::Parts) -> usize {
        let _ = parts;
        0
    }
    /// Whether the bytes travel encrypted (`X-Forwarded-Proto: https`).
    const TLS: bool;
    /// The TCP socket underneath (readiness, peeking); `None` for an
    /// HTTP/2 stream, which shares its connection's.
    fn socket(&self) -> Option<&TcpStream>;
    /// Two halves that read and write independently (a tunnel); `None`
    /// for a transport that has no such halves (an HTTP/2 stream: HTTP/2
    /// has no upgrade).
    fn into_split(self) -> Option<(Self::ReadHalf, Self::WriteHalf)>;
    /// Whether an idle connection may stop its read and give the buffer
    /// back while it waits ([`Transport::cancelable_read_spare`] cancels
    /// without losing bytes). Plain TCP does; TLS keeps buffers of its own.
    const PARKS: bool = false;
    /// [`ReadSpare::read_spare`] that `handle` can cancel: the read then
    /// ends with its bytes when they came first, else with `ECANCELED`.
    async fn cancelable_read_spare(
        &mut self,
        buf: Vec<u8>,
        handle: CancelHandle,
    ) -> (io::Result<usize>, Vec<u8>) {
        let _ = handle;
        self.read_spare(buf).await
    }
    /// Whether [`Transport::ready`] waits for bytes holding no buffer (the
    /// ring keeps received bytes in its own): an idle connection then
    /// waits that way and reads once bytes came.
    fn waits_unbuffered(&self) -> bool {
        false
    }
    /// Waits until a read would not wait (only where
    /// [`Transport::waits_unbuffered`]).
    async fn ready(&mut self) {}
    /// Whether received bytes wait unread outside the socket (in the
    /// ring's buffers), where a peek on the socket cannot see them.
    fn buffered(&self) -> bool {
        false
    }
    /// Whether the peer has given up on this request (an HTTP/2 stream
    /// the client reset); answers at once. A byte stream cannot tell
    /// (its end is watched on the socket).
    fn abandoned(&mut self) -> bool {
        false
    }
    /// Waits until the peer gives up on this request; never ends where
    /// [`Transport::abandoned`] cannot tell.
    async fn until_abandoned(&mut self) {
        std::future::pending::<()>().await
    }
    /// The stream's handles when it answers as parts (an HTTP/2 stream:
    /// an upstream's answer is sent as frames, its request body read as
    /// frames); `None` for a byte stream, whose answers are bytes.
    #[inline(always)]
    fn exchange(&mut self) -> Option<&mut crate::exchange::stream::ClientStream> {
        None
    }
    /// The id the transport gave its request, when it names the request
    /// outside the answer's bytes (a gRPC call on an HTTP/2 stream: its
    /// refusal's `grpc-message`): the request then goes by it (the access
    /// log's id, the upstream's `X-Request-Id`, the pages'). A byte
    /// stream gives none.
    #[inline(always)]
    fn request_id(&self) -> Option<[u8; 24]> {
        None
    }
    /// What carries the request, as the access log names it.
    #[inline(always)]
    fn protocol(&self) -> &'static str {
        "HTTP/1.1"
    }
    /// The next request's head at the start of `unread`, its lines written
    /// into `headers`: parsed from the bytes on a byte stream; built from
    /// the request's fields by a transport that carries them (an HTTP/2
    /// stream), never written and parsed as text. `known`: the
    /// connection's last valid `Host` value (a byte stream's parser checks
    /// a new one only).
    #[inline(always)]
    fn head<'h, 'b, const N: usize>(
        &'b self,
        unread: &'b [u8],
        headers: &'h mut HeaderBuf<'b, N>,
        bounds: &HeadBounds,
        known: &mut KnownHost,
    ) -> Parse<'h, 'b> {
        parse_head_known(unread, headers, bounds, known)
    }
}

async fn read_spare_raw<R: AsyncReadRent>(r: &mut R, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
    let len = buf.len();
    let cap = buf.capacity();
    let (res, slice) = r.read(buf.slice_mut(len..cap)).await;
    (res, slice.into_inner())
}

async fn write_all_raw<W: AsyncWriteRent, T: IoBuf + 'static>(
    w: &mut W,
    buf: T,
) -> (io::Result<()>, T) {
    let (res, buf) = w.write_all(buf).await;
    (res.map(|_| ()), buf)
}

/// No half: a transport without halves (`Transport::into_split` is
/// `None`) names this type, which has no value.
impl ReadSpare for std::convert::Infallible {
    async fn read_spare(&mut self, _: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        match *self {}
    }
}

impl WriteAll for std::convert::Infallible {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, _: T) -> (io::Result<()>, T) {
        match *self {}
    }
    async fn close_write(&mut self) {
        match *self {}
    }
}

/// A byte stream's answers: HTTP/1.1 bytes in its write buffer.
macro_rules! answers_as_bytes {
    () => {
        type Parts = ();
        type Answers = Vec<u8>;
        #[inline(always)]
        fn answers<'a>(wbuf: &'a mut Vec<u8>, _: &'a mut ()) -> &'a mut Vec<u8> {
            wbuf
        }
    };
}
pub(crate) use answers_as_bytes;

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl ReadSpare for $t {
            // The read's own future, not one around it: a layer fewer
            // to poll on every read.
            #[inline]
            fn read_spare(
                &mut self,
                buf: Vec<u8>,
            ) -> impl std::future::Future<Output = (io::Result<usize>, Vec<u8>)> {
                read_spare_raw(self, buf)
            }
        }
    )*};
}

macro_rules! plain_write {
    ($($t:ty),*) => {$(
        impl WriteAll for $t {
            // The write's own future, not one around it.
            #[inline]
            fn write_all_of<T: IoBuf + 'static>(
                &mut self,
                buf: T,
            ) -> impl std::future::Future<Output = (io::Result<()>, T)> {
                write_all_raw(self, buf)
            }
            async fn close_write(&mut self) {
                let _ = AsyncWriteRent::shutdown(self).await;
            }
        }
    )*};
}

plain!(TcpStream, OwnedReadHalf<TcpStream>);
plain_write!(TcpStream, OwnedWriteHalf<TcpStream>);

impl Transport for TcpStream {
    type ReadHalf = OwnedReadHalf<TcpStream>;
    type WriteHalf = OwnedWriteHalf<TcpStream>;
    crate::transport::answers_as_bytes!();
    const TLS: bool = false;
    const PARKS: bool = true;
    async fn cancelable_read_spare(
        &mut self,
        buf: Vec<u8>,
        handle: CancelHandle,
    ) -> (io::Result<usize>, Vec<u8>) {
        let (len, cap) = (buf.len(), buf.capacity());
        let (res, slice) = self.cancelable_read(buf.slice_mut(len..cap), handle).await;
        (res, slice.into_inner())
    }
    #[inline]
    fn socket(&self) -> Option<&TcpStream> {
        Some(self)
    }
    fn into_split(self) -> Option<(Self::ReadHalf, Self::WriteHalf)> {
        Some(monoio::io::Splitable::into_split(self))
    }
}

/// `buf`'s initialized bytes.
pub(crate) fn init_bytes<T: IoBuf>(buf: &T) -> &[u8] {
    // SAFETY: `IoBuf` promises `bytes_init` initialized bytes at `read_ptr`
    // for as long as the buffer is borrowed.
    unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) }
}
