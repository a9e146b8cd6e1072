//! An HTTP/3 request stream as the transport of one request, served by
//! the same pipeline as HTTP/1.1 and HTTP/2 (`crate::server::conn`): its
//! head read from its decoded fields (`StreamHead`, as an HTTP/2 stream's),
//! its body from DATA frames (chunked for the pipeline when the request
//! gave no length), and Gapura's answers sent from their parts as a QPACK
//! HEADERS frame and DATA frames, never as HTTP/1.1 text.

use super::conn::{QConn, OUT_HIGH};
use super::endpoint::Wake;
use crate::codec::h3::frame::{self, code};
use crate::codec::h3::qpack;
use crate::codec::head::{HeadBounds, HeaderBuf, Parse};
use crate::exchange::connection_specific;
use crate::server::client::{ClientIo, READ_BUF_BYTES};
use crate::server::conn::Conn;
use crate::server::end::End;
use crate::server::h2stream::StreamHead;
use crate::server::shard::Shard;
use crate::transport::{init_bytes, ReadSpare, Transport, WriteAll};
use bytes::Bytes;
use gapura_gate::client::Peer;
use gapura_gate::sink::Parts;
use monoio::buf::IoBuf;
use monoio::net::TcpStream;
use quinn_proto::{ConnectionHandle, StreamId, VarInt};
use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::task::Poll;

/// What is left of the answer.
enum Left {
    Head,
    /// Body bytes still to come (a large body shared with the snapshot).
    Length(u64),
    Done,
}

/// One request stream of an HTTP/3 connection.
pub(super) struct H3Stream {
    conn: Rc<RefCell<QConn>>,
    id: StreamId,
    handle: ConnectionHandle,
    wake: Rc<Wake>,
    head: StreamHead,
    /// The head's values, then body bytes in the pipeline's framing.
    pending: Vec<u8>,
    ppos: usize,
    chunked: bool,
    body_done: bool,
    left: Left,
    head_only: bool,
    grpc: Option<[u8; 24]>,
}

/// Starts the task serving request stream `id`, whose head arrived.
pub(super) fn start(
    conn: &Rc<RefCell<QConn>>,
    id: StreamId,
    shard: &Rc<Shard>,
    wake: &Rc<Wake>,
    peer: Peer,
    serial: u64,
    bucket: &Rc<Cell<gapura_gate::quota::Bucket>>,
) {
    let (parts, has_body, handle) = {
        let mut c = conn.borrow_mut();
        let handle = c.handle;
        let Some(s) = c.streams.get_mut(&id) else {
            return;
        };
        let Some(parts) = s.head.take() else { return };
        (parts, !(s.fin && s.body.is_empty()), handle)
    };
    shard.stats.h3_streams.inc();
    let grpc = super::super::grpc::is_grpc(&parts.headers).then(|| shard.request_id());
    let head_only = parts.method == http::Method::HEAD;
    let chunked = has_body && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let mut pending = Vec::with_capacity(256);
    let head = StreamHead::lay_out(parts, chunked, &mut pending);
    let pipe = H3Stream {
        conn: conn.clone(),
        id,
        handle,
        wake: wake.clone(),
        head,
        pending,
        ppos: 0,
        chunked,
        body_done: !has_body,
        left: Left::Head,
        head_only,
        grpc,
    };
    monoio::spawn(serve(pipe, shard.clone(), peer, serial, bucket.clone()));
}

/// One request through the pipeline.
async fn serve(
    pipe: H3Stream,
    shard: Rc<Shard>,
    peer: Peer,
    serial: u64,
    bucket: Rc<Cell<gapura_gate::quota::Bucket>>,
) {
    let io = ClientIo::new(
        pipe,
        Vec::with_capacity(READ_BUF_BYTES),
        0,
        shard.conns.deadlines.register(),
    );
    let end = Conn::new(io, shard.clone(), peer, None, bucket, serial)
        .serve_stream()
        .await;
    if let End::Error(kind) = end {
        shard.stats.error(kind);
    }
}

fn varint(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::from_u32(0))
}

impl H3Stream {
    /// Queues `bytes` on the stream (`end`: the answer is whole), hands
    /// what QUIC takes to it, and waits while too much waits.
    async fn queue(&mut self, bytes: Vec<Bytes>, end: bool) -> io::Result<()> {
        {
            let mut c = self.conn.borrow_mut();
            let Some(s) = c.streams.get_mut(&self.id) else {
                return Err(io::ErrorKind::BrokenPipe.into());
            };
            if s.failed.is_some() {
                return Err(io::ErrorKind::ConnectionReset.into());
            }
            for b in bytes {
                s.out_len += b.len();
                s.out.push_back(b);
            }
            s.finish |= end;
            c.flush_stream(self.id);
        }
        self.wake.mark(self.handle);
        std::future::poll_fn(|cx| {
            let mut c = self.conn.borrow_mut();
            let Some(s) = c.streams.get_mut(&self.id) else {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            };
            if s.failed.is_some() {
                return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
            }
            if s.out_len < OUT_HIGH {
                return Poll::Ready(Ok(()));
            }
            s.writer = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Resets the stream: the answer could not be sent whole.
    fn reset(&mut self) {
        self.left = Left::Done;
        let mut c = self.conn.borrow_mut();
        if let Some(s) = c.streams.get_mut(&self.id) {
            s.failed.get_or_insert(code::INTERNAL_ERROR);
            s.out.clear();
            s.out_len = 0;
        }
        let _ = c.q.send_stream(self.id).reset(varint(code::INTERNAL_ERROR));
        drop(c);
        self.wake.mark(self.handle);
    }

    /// Sends an answer Gapura wrote as parts, once its head is whole: a
    /// HEADERS frame from its status and fields (the connection's own
    /// left out), then its body as a DATA frame. A gRPC call's refusal is
    /// its trailers-only answer.
    async fn send_answer(&mut self, parts: &mut Parts) -> io::Result<()> {
        if parts.is_empty() || !parts.ended {
            return Ok(());
        }
        if !matches!(self.left, Left::Head) {
            parts.clear();
            return Ok(());
        }
        let mut status = parts.status;
        let mut fields: Vec<(http::HeaderName, http::HeaderValue)> = parts
            .fields
            .drain(..)
            .filter(|(n, _)| !connection_specific(n.as_str().as_bytes()))
            .collect();
        let body = std::mem::take(&mut parts.body);
        parts.clear();
        if let Some(id) = self.grpc {
            if status >= 400 && !fields.iter().any(|(n, _)| n == "grpc-status") {
                let retry_after = fields
                    .iter()
                    .find(|(n, _)| n == http::header::RETRY_AFTER)
                    .map(|(_, v)| v.clone());
                let refusal = super::super::grpc::trailers_only(status, &id, retry_after.as_ref());
                status = refusal.status().as_u16();
                fields = refusal
                    .headers()
                    .iter()
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect();
                self.left = Left::Done;
                let head = headers_frame(status, &fields);
                return self.queue(vec![head], true).await;
            }
        }
        let declared = fields
            .iter()
            .find(|(n, _)| n == http::header::CONTENT_LENGTH)
            .and_then(|(_, v)| v.to_str().ok()?.parse::<u64>().ok());
        let (sent, total) = match self.head_only {
            true => (0, 0),
            false => {
                let sent = body.len() as u64;
                (sent, declared.unwrap_or(sent).max(sent))
            }
        };
        let mut frames = vec![headers_frame(status, &fields)];
        if sent > 0 {
            let mut h = Vec::with_capacity(16);
            frame::write_frame_head(&mut h, frame::DATA, total);
            frames.push(Bytes::from(h));
            frames.push(Bytes::from(body));
        }
        self.left = match total - sent {
            0 => Left::Done,
            more => Left::Length(more),
        };
        let end = matches!(self.left, Left::Done);
        self.queue(frames, end).await
    }

    /// Takes body bytes the connection read for this stream into
    /// `pending`, in the pipeline's framing; waits for some when none are
    /// there. `Ok(false)`: the body ended.
    async fn take_body(&mut self) -> io::Result<bool> {
        use std::io::Write as _;
        if self.body_done {
            return Ok(false);
        }
        let id = self.id;
        let handle = self.handle;
        let wake = self.wake.clone();
        let got = std::future::poll_fn(|cx| {
            let mut c = self.conn.borrow_mut();
            let Some(s) = c.streams.get_mut(&id) else {
                return Poll::Ready(Err(io::Error::from(io::ErrorKind::BrokenPipe)));
            };
            if s.failed.is_some() {
                return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
            }
            if !s.body.is_empty() {
                let body = std::mem::take(&mut s.body);
                // The connection may read more now.
                wake.mark(handle);
                return Poll::Ready(Ok(Some(body)));
            }
            if s.fin {
                return Poll::Ready(Ok(None));
            }
            s.reader = Some(cx.waker().clone());
            wake.mark(handle);
            Poll::Pending
        })
        .await?;
        match got {
            Some(bytes) => {
                if self.chunked {
                    let _ = write!(self.pending, "{:x}\r\n", bytes.len());
                    self.pending.extend_from_slice(&bytes);
                    self.pending.extend_from_slice(b"\r\n");
                } else {
                    self.pending.extend_from_slice(&bytes);
                }
            }
            None => {
                self.body_done = true;
                if self.chunked {
                    self.pending.extend_from_slice(b"0\r\n\r\n");
                }
            }
        }
        Ok(true)
    }
}

/// A HEADERS frame of an answer.
fn headers_frame(status: u16, fields: &[(http::HeaderName, http::HeaderValue)]) -> Bytes {
    let mut section = Vec::with_capacity(64 + fields.len() * 32);
    qpack::encode_response(
        &mut section,
        status,
        fields.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
    );
    let mut out = Vec::with_capacity(section.len() + 8);
    frame::write_frame_head(&mut out, frame::HEADERS, section.len() as u64);
    out.extend_from_slice(&section);
    Bytes::from(out)
}

impl Drop for H3Stream {
    /// The task ended: an answer not sent whole resets the stream, and a
    /// request body not read whole is refused (STOP_SENDING); the
    /// connection drops the stream once QUIC has what it needs.
    fn drop(&mut self) {
        let mut c = self.conn.borrow_mut();
        let Some(s) = c.streams.get_mut(&self.id) else {
            return;
        };
        s.done = true;
        let unfinished = !s.finish && s.failed.is_none();
        let unread = !s.fin;
        if unfinished {
            s.failed = Some(code::INTERNAL_ERROR);
            s.out.clear();
            s.out_len = 0;
        }
        if unfinished {
            let _ = c.q.send_stream(self.id).reset(varint(code::INTERNAL_ERROR));
        }
        if unread {
            let _ = c.q.recv_stream(self.id).stop(varint(code::NO_ERROR));
        }
        drop(c);
        self.wake.mark(self.handle);
    }
}

impl ReadSpare for H3Stream {
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
            match self.take_body().await {
                Ok(true) => {}
                Ok(false) => return (Ok(0), buf),
                Err(e) => return (Err(e), buf),
            }
        }
    }
}

impl WriteAll for H3Stream {
    /// Bytes are not an answer here: answers come as parts; anything else
    /// fails the stream.
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        if init_bytes(&buf).is_empty() {
            return (Ok(()), buf);
        }
        self.reset();
        (Err(io::ErrorKind::InvalidData.into()), buf)
    }

    async fn write_shared(&mut self, body: Bytes) -> io::Result<()> {
        match &mut self.left {
            Left::Done => Ok(()),
            Left::Head => {
                self.reset();
                Err(io::ErrorKind::InvalidData.into())
            }
            Left::Length(n) => {
                let take = (*n).min(body.len() as u64) as usize;
                *n -= take as u64;
                let end = *n == 0;
                if end {
                    self.left = Left::Done;
                }
                self.queue(vec![Bytes::slice(&body, ..take)], end).await
            }
        }
    }

    async fn close_write(&mut self) {
        match self.left {
            Left::Done => {}
            Left::Head | Left::Length(_) => self.reset(),
        }
    }
}

impl Transport for H3Stream {
    type ReadHalf = std::convert::Infallible;
    type WriteHalf = std::convert::Infallible;
    const TLS: bool = true;
    const PARTS: bool = true;
    type Parts = Parts;
    type Answers = Parts;
    #[inline]
    fn answers<'a>(_: &'a mut Vec<u8>, parts: &'a mut Parts) -> &'a mut Parts {
        parts
    }
    async fn send_parts(&mut self, parts: &mut Parts) -> io::Result<()> {
        self.send_answer(parts).await
    }
    fn parts_len(parts: &Parts) -> usize {
        parts.body.len()
    }
    fn parts_waiting(parts: &Parts) -> usize {
        if parts.is_empty() {
            0
        } else {
            parts.body.len() + 1
        }
    }
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
    /// HTTP/3 has no upgrade here: a stream is never a tunnel.
    fn into_split(self) -> Option<(Self::ReadHalf, Self::WriteHalf)> {
        None
    }
    fn abandoned(&mut self) -> bool {
        let c = self.conn.borrow();
        c.streams
            .get(&self.id)
            .is_none_or(|s| s.failed.is_some() && !s.finish)
    }
    async fn until_abandoned(&mut self) {
        std::future::poll_fn(|cx| {
            let mut c = self.conn.borrow_mut();
            match c.streams.get_mut(&self.id) {
                None => Poll::Ready(()),
                Some(s) if s.failed.is_some() => Poll::Ready(()),
                Some(s) => {
                    s.reader = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }
    #[inline]
    fn head<'h, 'b, const N: usize>(
        &'b self,
        unread: &'b [u8],
        headers: &'h mut HeaderBuf<'b, N>,
        bounds: &HeadBounds,
        _known: &mut crate::codec::KnownHost,
    ) -> Parse<'h, 'b> {
        self.head.head(unread, headers, bounds)
    }
    #[inline]
    fn request_id(&self) -> Option<[u8; 24]> {
        self.grpc
    }
}
