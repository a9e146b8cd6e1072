//! A stream of an HTTP/2 or HTTP/3 connection as the transport of one
//! request.
//!
//! The request reaches the pipeline as itself: its head is read from the
//! stream's fields ([`Transport::head`], [`fields_head`]), never written
//! and parsed as HTTP/1.1 text. The values a head's ranges point to (the
//! method and path, the authority, the cookies joined into one line as
//! RFC 9113 §8.2.3 asks of a gateway to HTTP/1.1) are laid side by side at
//! the start of the stream's input, the body's bytes after them (DATA
//! frames; chunked when no length was given, as an HTTP/1.1 upstream
//! needs it). Answers are sent as parts, straight to the stream's frames:
//! an upstream's by the proxy (`crate::exchange::stream`), Gapura's own
//! (a host's answer, a refusal, a page, a redirect) as the pipeline wrote
//! them into [`Parts`], with flow control (h2's handles, or an HTTP/3
//! stream's [`crate::exchange::stream::QuicSide`]). No answer is written as
//! HTTP/1.1 text and read back. A gRPC call's refusal is sent as a
//! trailers-only answer (`grpc`).

use super::client::READ_BUF_BYTES;
use crate::codec::fields::{fields_head, FieldsLayout};
use crate::codec::head::{HeadBounds, HeaderBuf, Parse};
use crate::exchange::connection_specific;
use crate::exchange::stream::ClientStream;
use crate::transport::{init_bytes, ReadSpare, Transport, WriteAll};
use bytes::Bytes;
use gapura_gate::sink::Parts;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use monoio::buf::IoBuf;
use monoio::net::TcpStream;
use std::cell::Cell;
use std::io;
use std::ops::Range;
use std::rc::Rc;
use std::task::Waker;

/// A stream's request head: its fields, and where the values its lines
/// point to lie at the start of the stream's input.
pub(super) struct StreamHead {
    fields: http::HeaderMap,
    layout: FieldsLayout,
    /// The Host line's value: `:authority`, else the first `host` field.
    authority: Option<Range<usize>>,
    /// Whether the authority came from `:authority` (every `host` field is
    /// then left out, as a gateway to HTTP/1.1 does).
    authority_is_pseudo: bool,
    /// Every `cookie` field, joined by `; `.
    cookie: Option<Range<usize>>,
    /// The body has no length: it reaches the pipeline chunked.
    chunked: bool,
}

impl StreamHead {
    /// Lays the request's values out in `input` (empty): the method, a
    /// space and the path (for CONNECT the authority, which the pipeline
    /// refuses), the authority, the cookies joined.
    pub(super) fn lay_out(
        parts: http::request::Parts,
        chunked: bool,
        input: &mut Vec<u8>,
    ) -> StreamHead {
        let authority = parts.uri.authority().map(|a| a.as_str());
        input.extend_from_slice(parts.method.as_str().as_bytes());
        input.push(b' ');
        let target_start = input.len();
        match parts.uri.path_and_query() {
            _ if parts.method == http::Method::CONNECT => {
                input.extend_from_slice(authority.unwrap_or("").as_bytes())
            }
            Some(pq) => input.extend_from_slice(pq.as_str().as_bytes()),
            None => input.push(b'/'),
        }
        let target_len = input.len() - target_start;
        let host_field = parts.headers.get(http::header::HOST).map(|v| v.as_bytes());
        let authority_bytes = authority.map(str::as_bytes).or(host_field);
        let authority_range = authority_bytes.map(|a| {
            let at = input.len();
            input.extend_from_slice(a);
            at..input.len()
        });
        let mut cookies = parts
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .peekable();
        let cookie = cookies.peek().is_some().then(|| {
            let at = input.len();
            for (i, v) in cookies.enumerate() {
                if i > 0 {
                    input.extend_from_slice(b"; ");
                }
                input.extend_from_slice(v.as_bytes());
            }
            at..input.len()
        });
        StreamHead {
            layout: FieldsLayout {
                method_len: parts.method.as_str().len(),
                target_len,
                head_len: input.len(),
            },
            authority: authority_range,
            authority_is_pseudo: authority.is_some(),
            cookie,
            chunked,
            fields: parts.headers,
        }
    }

    /// The head, once its values are in `unread`: the Host line first, the
    /// fields (the `host` fields the authority stands for and the cookies
    /// left out), the joined cookies, and `Transfer-Encoding: chunked` for a
    /// body without a length.
    pub(super) fn head<'h, 'b, const N: usize>(
        &'b self,
        unread: &'b [u8],
        headers: &'h mut HeaderBuf<'b, N>,
        bounds: &HeadBounds,
    ) -> Parse<'h, 'b> {
        if unread.len() < self.layout.head_len {
            return Parse::Partial;
        }
        let line = |name: &'static str, at: &Option<Range<usize>>| {
            at.clone().map(|r| httparse::Header {
                name,
                value: &unread[r],
            })
        };
        // The first `host` field is the authority when there is no
        // `:authority`; a second one is still a line (and refused as a
        // duplicate Host).
        let mut hosts_left_out = if self.authority_is_pseudo {
            usize::MAX
        } else {
            1
        };
        let fields = self
            .fields
            .iter()
            .filter(move |(name, _)| {
                if *name == http::header::HOST {
                    let out = hosts_left_out > 0;
                    hosts_left_out = hosts_left_out.saturating_sub(1);
                    return !out;
                }
                *name != http::header::COOKIE
            })
            .map(|(name, value)| httparse::Header {
                name: name.as_str(),
                value: value.as_bytes(),
            });
        let chunked = self.chunked.then_some(httparse::Header {
            name: "transfer-encoding",
            value: b"chunked",
        });
        let lines = line("host", &self.authority)
            .into_iter()
            .chain(fields)
            .chain(line("cookie", &self.cookie))
            .chain(chunked);
        fields_head(unread, self.layout, lines, headers, bounds)
    }
}

/// What is left of the answer.
enum Left {
    /// Its head is not sent yet.
    Head,
    /// Body bytes still to come (a large body shared with the snapshot).
    Length(u64),
    Done,
}

/// A stream of a multiplexed connection (HTTP/2, HTTP/3) as the
/// transport of one request. `S` is the connection's transport (what it
/// says of encryption).
pub(super) struct MuxStream<S> {
    /// The request's head.
    head: StreamHead,
    /// The stream's handles and its request body (its input: the head's
    /// values, then body pieces).
    x: ClientStream,
    left: Left,
    head_only: bool,
    /// A gRPC call's request id (the access log's, its upstream's
    /// `X-Request-Id`, and what its refusal's `grpc-message` names);
    /// `None` for any other request.
    grpc: Option<[u8; 24]>,
    _transport: std::marker::PhantomData<S>,
}

impl<S> MuxStream<S> {
    /// The stream of a request the client sent: its head laid out as the
    /// stream's first input, its body after. A gRPC call takes its request
    /// id from `grpc_id`.
    pub(super) fn new(
        parts: http::request::Parts,
        body: RecvStream,
        respond: SendResponse<Bytes>,
        reset: Rc<Cell<bool>>,
        grpc_id: impl FnOnce() -> [u8; 24],
    ) -> MuxStream<S> {
        let body = (!body.is_end_stream()).then_some(body);
        let more = body.is_some();
        Self::laid_out(parts, more, grpc_id, |chunked| {
            ClientStream::new(body, chunked, respond, reset)
        })
    }

    /// The stream of an HTTP/3 request: as [`MuxStream::new`], its
    /// handles the connection's (`side`); `body`: a body may follow.
    pub(super) fn quic(
        parts: http::request::Parts,
        side: Box<dyn crate::exchange::stream::QuicSide>,
        body: bool,
        grpc_id: impl FnOnce() -> [u8; 24],
    ) -> MuxStream<S> {
        Self::laid_out(parts, body, grpc_id, |chunked| {
            ClientStream::quic(side, body, chunked)
        })
    }

    /// A request's stream: its head laid out as its first input, its
    /// handles from `handles` (told whether the body goes chunked: a body
    /// may follow and the request gave no length).
    fn laid_out(
        parts: http::request::Parts,
        body: bool,
        grpc_id: impl FnOnce() -> [u8; 24],
        handles: impl FnOnce(bool) -> ClientStream,
    ) -> MuxStream<S> {
        let grpc = super::grpc::is_grpc(&parts.headers).then(grpc_id);
        let head_only = parts.method == http::Method::HEAD;
        let chunked = body && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
        let mut x = handles(chunked);
        let head = StreamHead::lay_out(parts, chunked, &mut x.pending);
        MuxStream {
            head,
            x,
            left: Left::Head,
            head_only,
            grpc,
            _transport: std::marker::PhantomData,
        }
    }

    fn reset_stream(&mut self, reason: Reason) {
        self.x.reset_stream(reason);
        self.left = Left::Done;
    }

    /// Sends an answer Gapura wrote as parts, once its head is whole: its
    /// HEADERS from the status and fields (the connection's own fields
    /// left out), then its body as DATA frames as the peer's window
    /// allows. A body that is longer than the parts hold (a large body
    /// shared with the snapshot follows, [`WriteAll::write_shared`]) leaves
    /// the stream open for it. A gRPC call's refusal is sent as a
    /// trailers-only answer instead.
    async fn send_answer(&mut self, parts: &mut Parts) -> io::Result<()> {
        if parts.is_empty() || !parts.ended {
            return Ok(());
        }
        if !matches!(self.left, Left::Head) {
            // One answer a stream.
            parts.clear();
            return Ok(());
        }
        let status = parts.status;
        let mut fields = http::HeaderMap::with_capacity(parts.fields.len());
        for (name, value) in parts.fields.drain(..) {
            if !connection_specific(name.as_str().as_bytes()) {
                fields.append(name, value);
            }
        }
        let body = Bytes::from(std::mem::take(&mut parts.body));
        parts.clear();
        if let Some(id) = self.grpc {
            if status >= 400 && !fields.contains_key("grpc-status") {
                let retry_after = fields.get(http::header::RETRY_AFTER);
                let refusal = super::grpc::trailers_only(status, &id, retry_after);
                self.left = Left::Done;
                return self.x.send_head(refusal, true);
            }
        }
        let declared = fields
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let (sent, total) = match self.head_only {
            true => (0, 0),
            false => {
                let sent = body.len() as u64;
                (sent, declared.unwrap_or(sent).max(sent))
            }
        };
        let mut response = http::Response::new(());
        *response.status_mut() =
            http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        *response.headers_mut() = fields;
        self.x.send_head(response, total == 0)?;
        self.left = match total - sent {
            0 => Left::Done,
            more => Left::Length(more),
        };
        if sent > 0 {
            self.x.send_bytes(body, total == sent).await?;
        }
        Ok(())
    }
}

impl<S> ReadSpare for MuxStream<S> {
    async fn read_spare(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        if buf.len() == buf.capacity() {
            buf.reserve(READ_BUF_BYTES);
        }
        loop {
            let x = &mut self.x;
            if x.ppos < x.pending.len() {
                let n = (buf.capacity() - buf.len()).min(x.pending.len() - x.ppos);
                buf.extend_from_slice(&x.pending[x.ppos..x.ppos + n]);
                x.ppos += n;
                if x.ppos == x.pending.len() {
                    x.pending.clear();
                    x.ppos = 0;
                }
                return (Ok(n), buf);
            }
            match x.read_body().await {
                Ok(true) => {}
                // The request ends the stream's input.
                Ok(false) => return (Ok(0), buf),
                Err(e) => return (Err(e), buf),
            }
        }
    }
}

impl<S> WriteAll for MuxStream<S> {
    /// Bytes are not an answer here: Gapura's own answers come as parts
    /// ([`Transport::send_parts`]), an upstream's through the stream's
    /// handles; anything else fails the stream.
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        if init_bytes(&buf).is_empty() {
            return (Ok(()), buf);
        }
        self.reset_stream(Reason::INTERNAL_ERROR);
        (Err(io::ErrorKind::InvalidData.into()), buf)
    }

    async fn write_shared(&mut self, body: Bytes) -> io::Result<()> {
        match &mut self.left {
            Left::Done => Ok(()),
            Left::Head => {
                self.reset_stream(Reason::INTERNAL_ERROR);
                Err(io::ErrorKind::InvalidData.into())
            }
            Left::Length(n) => {
                let take = (*n).min(body.len() as u64) as usize;
                *n -= take as u64;
                let end = *n == 0;
                if end {
                    self.left = Left::Done;
                }
                self.x.send_bytes(Bytes::slice(&body, ..take), end).await
            }
        }
    }

    async fn close_write(&mut self) {
        match self.left {
            Left::Done => {}
            // Answered as parts (an upstream's answer relayed).
            Left::Head if self.x.answered() => {}
            // No answer, or a truncated one: the stream fails.
            Left::Head | Left::Length(_) => self.reset_stream(Reason::INTERNAL_ERROR),
        }
    }
}

impl<S: Transport> Transport for MuxStream<S> {
    type ReadHalf = std::convert::Infallible;
    type WriteHalf = std::convert::Infallible;
    const TLS: bool = S::TLS;
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
    /// HTTP/2 has no upgrade: a stream is never a tunnel.
    fn into_split(self) -> Option<(Self::ReadHalf, Self::WriteHalf)> {
        None
    }
    fn abandoned(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(Waker::noop());
        self.x.poll_abandoned(&mut cx).is_ready()
    }
    async fn until_abandoned(&mut self) {
        self.x.until_abandoned().await
    }
    #[inline]
    fn exchange(&mut self) -> Option<&mut ClientStream> {
        Some(&mut self.x)
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
    fn protocol(&self) -> &'static str {
        self.x.protocol()
    }
}
