//! An HTTP/3 request stream's side of the exchange ([`QuicSide`]): the
//! pipeline serves the request through a [`MuxStream`] as it serves an
//! HTTP/2 stream (its head read from its decoded fields, Gapura's own
//! answers and an upstream's sent from their parts), and this side turns
//! those sends into HEADERS and DATA frames queued on the connection's
//! stream, and hands the request's DATA payloads to the pipeline.

use super::conn::{QConn, OUT_HIGH};
use super::endpoint::Wake;
use crate::codec::h3::frame::{self, code};
use crate::codec::h3::qpack;
use crate::exchange::connection_specific;
use crate::exchange::stream::QuicSide;
use crate::server::client::{ClientIo, READ_BUF_BYTES};
use crate::server::conn::Conn;
use crate::server::end::End;
use crate::server::muxstream::MuxStream;
use crate::server::shard::Shard;
use crate::transport::tls::TlsStream;
use bytes::Bytes;
use gapura_gate::client::Peer;
use quinn_proto::{ConnectionHandle, StreamId, VarInt};
use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};

/// One request stream of an HTTP/3 connection, as the exchange sees it.
struct H3Side {
    conn: Rc<RefCell<QConn>>,
    id: StreamId,
    handle: ConnectionHandle,
    wake: Rc<Wake>,
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
    let (parts, body, handle, early) = {
        let mut c = conn.borrow_mut();
        let handle = c.handle;
        let Some(s) = c.streams.get_mut(&id) else {
            return;
        };
        let Some(parts) = s.head.take() else { return };
        (parts, !(s.fin && s.body.is_empty()), handle, s.early)
    };
    shard.stats.h3_streams.inc();
    let mut side = H3Side {
        conn: conn.clone(),
        id,
        handle,
        wake: wake.clone(),
    };
    if early {
        if !safe(&parts.method) {
            // A request in 0-RTT data may be a replay: only a safe one is
            // served from it (RFC 8470 §5.2).
            shard.stats.h3_early_refused.inc();
            return too_early(&mut side, shard);
        }
        shard.stats.h3_early_requests.inc();
    }
    let pipe = MuxStream::<TlsStream>::quic(parts, Box::new(side), body, || shard.request_id());
    monoio::spawn(serve(pipe, shard.clone(), peer, serial, bucket.clone()));
}

/// Methods served from early data: those that change nothing, whose replay
/// is harmless (stricter than "idempotent": PUT and DELETE are not served
/// from it either).
fn safe(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

/// Answers 425 Too Early: the client retries once its handshake is done.
fn too_early(side: &mut H3Side, shard: &Shard) {
    const BODY: &[u8] =
        b"425 Too Early: send this request again once the connection is established.\n";
    let mut fields = http::HeaderMap::with_capacity(3);
    fields.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    fields.insert(
        http::header::CONTENT_LENGTH,
        http::HeaderValue::from(BODY.len()),
    );
    if let Ok(date) =
        http::HeaderValue::from_bytes(gapura_gate::sink::date_value(&shard.date.line()))
    {
        fields.insert(http::header::DATE, date);
    }
    shard.stats.response(425);
    let _ = side
        .send_head(425, &fields, false)
        .and_then(|()| side.send_data(Bytes::from_static(BODY), true));
}

/// One request through the pipeline.
async fn serve(
    pipe: MuxStream<TlsStream>,
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

/// A field section's frame: an answer's head (`status`) or trailers.
fn headers_frame(status: Option<u16>, fields: &http::HeaderMap) -> Bytes {
    let mut section = Vec::with_capacity(64 + fields.len() * 32);
    let lines = fields
        .iter()
        .filter(|(n, _)| !connection_specific(n.as_str().as_bytes()))
        .map(|(n, v)| (n.as_str(), v.as_bytes()));
    match status {
        Some(s) => qpack::encode_response(&mut section, s, lines),
        None => qpack::encode_trailers(&mut section, lines),
    }
    let mut out = Vec::with_capacity(section.len() + 8);
    frame::write_frame_head(&mut out, frame::HEADERS, section.len() as u64);
    out.extend_from_slice(&section);
    Bytes::from(out)
}

impl H3Side {
    /// Queues frames on the stream (`end`: the answer is whole) and hands
    /// QUIC what it takes now.
    fn queue(&mut self, frames: &[Bytes], end: bool) -> io::Result<()> {
        let mut c = self.conn.borrow_mut();
        let Some(s) = c.streams.get_mut(&self.id) else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        if s.failed.is_some() {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        for b in frames.iter().filter(|b| !b.is_empty()) {
            s.out_len += b.len();
            s.out.push_back(b.clone());
        }
        s.finish |= end;
        c.flush_stream(self.id);
        drop(c);
        self.wake.mark(self.handle);
        Ok(())
    }
}

impl QuicSide for H3Side {
    fn send_head(&mut self, status: u16, fields: &http::HeaderMap, end: bool) -> io::Result<()> {
        self.queue(&[headers_frame(Some(status), fields)], end)
    }

    fn send_data(&mut self, bytes: Bytes, end: bool) -> io::Result<()> {
        if bytes.is_empty() {
            return self.queue(&[], end);
        }
        let mut h = Vec::with_capacity(16);
        frame::write_frame_head(&mut h, frame::DATA, bytes.len() as u64);
        self.queue(&[Bytes::from(h), bytes], end)
    }

    fn send_trailers(&mut self, fields: &http::HeaderMap) -> io::Result<()> {
        self.queue(&[headers_frame(None, fields)], true)
    }

    fn poll_drained(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
    }

    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Vec<u8>>>> {
        let mut c = self.conn.borrow_mut();
        let Some(s) = c.streams.get_mut(&self.id) else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        if s.failed.is_some() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        // The connection reads more once this is taken (or to fill it).
        self.wake.mark(self.handle);
        if !s.body.is_empty() {
            return Poll::Ready(Ok(Some(std::mem::take(&mut s.body))));
        }
        if s.fin {
            return Poll::Ready(Ok(None));
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_abandoned(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut c = self.conn.borrow_mut();
        match c.streams.get_mut(&self.id) {
            None => Poll::Ready(()),
            Some(s) if s.failed.is_some() => Poll::Ready(()),
            Some(s) => {
                s.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    fn reset(&mut self) {
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
}

impl Drop for H3Side {
    /// The request's task ended: an answer not sent whole resets the
    /// stream, and a request body not read whole is refused
    /// (STOP_SENDING); the connection drops the stream once QUIC has what
    /// it needs.
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
            let _ = c.q.send_stream(self.id).reset(varint(code::INTERNAL_ERROR));
        }
        if unread {
            let _ = c.q.recv_stream(self.id).stop(varint(code::NO_ERROR));
        }
        drop(c);
        self.wake.mark(self.handle);
    }
}
