//! One request to an upstream over an HTTP/2 stream, seen by the proxy as
//! the byte stream of an HTTP/1.1 exchange, so that the balancer, retries,
//! timeouts, the gate's replacement pages and the relay exist once.
//!
//! What the proxy writes (its rewritten request head, then the body in its
//! framing) becomes the stream's HEADERS (the Host line as `:authority`,
//! connection-specific fields left out, `te: trailers` for a gRPC call)
//! and DATA frames, sent as the server's window allows. What the proxy
//! reads is the server's answer written as HTTP/1.1: its head, then its
//! body chunked with the server's trailers (`grpc-status`, ...) in the
//! last chunk's trailer section, or as it is when the server gave its
//! length. Receive windows are given back only as the proxy takes the
//! bytes, so a stream holds no more than one frame beyond its window.
//!
//! A gRPC call's `grpc-timeout` is read from its head: the proxy waits for
//! the answer no longer than it ([`H2Call::deadline`]).

use super::compat::Compat;
use super::{init_bytes, ReadSpare, WriteAll};
use crate::codec::chunked::ChunkedDecoder;
use bytes::Bytes;
use gapura_gate::limits::OUTER_MAX_HEADERS;
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use monoio::buf::IoBuf;
use monoio::time::Instant;
use std::cell::{Cell, RefCell};
use std::io::{self, Write as _};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// Receive window a stream opens with: what a server may send on one
/// stream beyond what its client has taken. Small, as a proxy's must be:
/// a stream whose client never reads holds this much (and a frame).
pub const STREAM_WINDOW: u32 = 16 * 1024;
/// Body bytes reserved per flow-control wait.
const SEND_CHUNK: usize = 16 * 1024;
/// Most bytes h2 buffers for one stream before the window opens.
const SEND_BUFFER: usize = 64 * 1024;
/// Most header lines a rewritten request head has (the client's, the
/// forwarding ones added).
const HEAD_LINES: usize = OUTER_MAX_HEADERS + 32;
/// Largest request head taken.
const MAX_HEAD_BYTES: usize = 256 * 1024;
/// Read buffer growth for the proxy's reads.
const READ_BYTES: usize = 16 * 1024;

/// Most wakers a server's waiting list holds before it wakes them all.
const WAITERS: usize = 1024;

/// Requests waiting for a stream of one server.
#[derive(Default)]
pub struct Waiters(RefCell<Vec<Waker>>);

impl Waiters {
    fn wake_one(&self) {
        let w = self.0.borrow_mut().pop();
        if let Some(w) = w {
            w.wake();
        }
    }

    pub fn wake_all(&self) {
        let all = std::mem::take(&mut *self.0.borrow_mut());
        for w in all {
            w.wake();
        }
    }

    pub fn any(&self) -> bool {
        !self.0.borrow().is_empty()
    }

    /// Ready once woken.
    pub async fn wait(&self) {
        let mut registered = false;
        std::future::poll_fn(|cx| {
            if registered {
                return Poll::Ready(());
            }
            registered = true;
            // Wakers of requests that stopped waiting (past their
            // deadline) stay until a wake: past WAITERS, every one is woken
            // (those still waiting take again and wait anew), so the list
            // stays bounded while no stream ends.
            if self.0.borrow().len() >= WAITERS {
                self.wake_all();
            }
            self.0.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// What a shard knows of one HTTP/2 connection while it runs.
pub struct H2Live {
    /// Streams taken (a request in flight on it).
    streams: Cell<u32>,
    /// The connection ended (closed, failed, or GOAWAY received).
    closed: Cell<bool>,
    /// When its last stream ended (the shard's milliseconds).
    idle_since_ms: Cell<u64>,
    /// Requests waiting for a stream of its server.
    waiters: Rc<Waiters>,
}

impl H2Live {
    pub fn new(waiters: Rc<Waiters>) -> Rc<H2Live> {
        Rc::new(H2Live {
            streams: Cell::new(0),
            closed: Cell::new(false),
            idle_since_ms: Cell::new(crate::clock::now_ms()),
            waiters,
        })
    }

    /// Takes a stream, given back when the slot drops.
    pub fn take_stream(self: &Rc<Self>) -> StreamSlot {
        self.streams.set(self.streams.get() + 1);
        StreamSlot { live: self.clone() }
    }

    pub fn streams(&self) -> u32 {
        self.streams.get()
    }

    /// Marks the connection ended: no new stream goes to it.
    pub fn close(&self) {
        self.closed.set(true);
        self.waiters.wake_all();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// No stream for `idle_ms` or longer.
    pub fn idle_for(&self, now_ms: u64, idle_ms: u64) -> bool {
        self.streams.get() == 0 && now_ms.saturating_sub(self.idle_since_ms.get()) >= idle_ms
    }
}

/// A stream taken on a connection.
pub struct StreamSlot {
    live: Rc<H2Live>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let n = self.live.streams.get().saturating_sub(1);
        self.live.streams.set(n);
        if n == 0 {
            self.live.idle_since_ms.set(crate::clock::now_ms());
        }
        self.live.waiters.wake_one();
    }
}

/// The HTTP/2 client handshake over a connection's two halves, within
/// `deadline`; the connection then runs as a task of its own on the
/// shard, and `live` is marked closed when it ends. The connection's
/// receive window is `streams` streams' windows, so streams whose clients
/// stop reading cannot shut it for the others.
pub async fn handshake<R: ReadSpare + Unpin + 'static, W: WriteAll + Unpin + 'static>(
    read: R,
    write: W,
    deadline: Instant,
    live: &Rc<H2Live>,
    streams: u32,
) -> io::Result<SendRequest<Bytes>> {
    let io = Compat::new(read, write, Vec::new());
    let mut b = h2::client::Builder::new();
    b.initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(
            streams
                .max(1)
                .saturating_mul(STREAM_WINDOW)
                .min(i32::MAX as u32),
        )
        .max_send_buffer_size(SEND_BUFFER)
        .enable_push(false)
        .reset_stream_duration(Duration::from_secs(5));
    let (send, conn) = match monoio::time::timeout_at(deadline, b.handshake::<_, Bytes>(io)).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return Err(io::Error::other(e)),
        Err(_) => return Err(io::ErrorKind::TimedOut.into()),
    };
    let l = live.clone();
    monoio::spawn(async move {
        let _ = conn.await;
        l.close();
    });
    Ok(send)
}

/// How much of the request is still to be sent.
enum Sending {
    /// The head's bytes so far.
    Head(Vec<u8>),
    Length(u64),
    Chunked(ChunkedDecoder),
    Done,
}

/// What the proxy reads next.
enum Reading {
    Head,
    /// The body as it is (the server gave its length).
    Raw,
    /// The body chunked, the trailers in the last chunk.
    Chunked,
    Done,
}

/// One request on a stream of an upstream's HTTP/2 connection.
pub struct H2Call {
    conn: SendRequest<Bytes>,
    live: Rc<H2Live>,
    _slot: StreamSlot,
    https: bool,
    sending: Sending,
    stream: Option<SendStream<Bytes>>,
    response: Option<ResponseFuture>,
    recv: Option<RecvStream>,
    reading: Reading,
    /// Bytes for the proxy's next reads.
    out: Vec<u8>,
    opos: usize,
    /// A DATA frame's bytes, read after `out` (as h2 holds them: never
    /// copied but into the proxy's buffer).
    data: Bytes,
    /// What follows `data` (a chunk's CRLF).
    after_data: &'static [u8],
    /// A gRPC call's `grpc-timeout`, from when the head was sent.
    deadline: Option<Instant>,
}

impl std::fmt::Debug for H2Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("H2Call")
    }
}

/// A request head read into what h2 sends.
struct Head {
    request: http::Request<()>,
    len: usize,
    sending: Sending,
    deadline: Option<Instant>,
}

impl H2Call {
    /// A call on `conn` (`https`: the URI's scheme), holding `slot`.
    pub fn new(
        conn: SendRequest<Bytes>,
        live: Rc<H2Live>,
        slot: StreamSlot,
        https: bool,
    ) -> H2Call {
        H2Call {
            conn,
            live,
            _slot: slot,
            https,
            sending: Sending::Head(Vec::new()),
            stream: None,
            response: None,
            recv: None,
            reading: Reading::Head,
            out: Vec::new(),
            opos: 0,
            data: Bytes::new(),
            after_data: b"",
            deadline: None,
        }
    }

    /// The latest the answer's head may come (a gRPC call's
    /// `grpc-timeout`).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn h2_error(&self, e: h2::Error) -> io::Error {
        if e.is_go_away() || e.is_io() {
            self.live.close();
        }
        io::Error::other(e)
    }

    /// Takes the proxy's bytes: the head until complete, then the body.
    async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let Sending::Head(head) = &mut self.sending else {
            return self.body(data).await;
        };
        head.extend_from_slice(data);
        let Some(parsed) = read_head(head, self.https)? else {
            if head.len() > MAX_HEAD_BYTES {
                return Err(io::ErrorKind::InvalidData.into());
            }
            return Ok(());
        };
        let rest = head.split_off(parsed.len);
        let end = matches!(parsed.sending, Sending::Done);
        self.sending = parsed.sending;
        self.deadline = parsed.deadline;
        std::future::poll_fn(|cx| self.conn.poll_ready(cx))
            .await
            .map_err(|e| self.h2_error(e))?;
        let (response, stream) = self
            .conn
            .send_request(parsed.request, end)
            .map_err(|e| self.h2_error(e))?;
        self.response = Some(response);
        self.stream = Some(stream);
        self.body(&rest).await
    }

    /// Sends body bytes by the request's framing.
    async fn body(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.sending {
            Sending::Head(_) | Sending::Done => Ok(()),
            Sending::Length(n) => {
                let take = (*n).min(data.len() as u64) as usize;
                *n -= take as u64;
                let end = *n == 0;
                if end {
                    self.sending = Sending::Done;
                }
                self.data(&data[..take], end).await
            }
            Sending::Chunked(decoder) => {
                // A request's trailers are not sent on (HTTP/2 to an
                // upstream carries none from an HTTP/1.1 client).
                let (mut spans, mut dropped) = (Vec::new(), Vec::new());
                let end = decoder
                    .spans(data, &mut spans, &mut dropped)
                    .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
                if end {
                    self.sending = Sending::Done;
                }
                for (a, b) in spans {
                    self.data(&data[a..b], false).await?;
                }
                if end {
                    self.data(&[], true).await?;
                }
                Ok(())
            }
        }
    }

    /// DATA frames as the server's window allows.
    async fn data(&mut self, bytes: &[u8], end: bool) -> io::Result<()> {
        let Some(send) = self.stream.as_mut() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        let piece = |at: usize, n: usize| Bytes::copy_from_slice(&bytes[at..at + n]);
        match send_in_window(send, bytes.len(), end, piece).await {
            Ok(()) => Ok(()),
            Err(Some(e)) => Err(self.h2_error(e)),
            Err(None) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Fills `out` (and `data`) with what the proxy reads next; `false` at
    /// the end.
    async fn next_out(&mut self) -> io::Result<bool> {
        match self.reading {
            Reading::Head => {
                let Some(response) = self.response.as_mut() else {
                    return Err(io::ErrorKind::BrokenPipe.into());
                };
                let response = response.await.map_err(|e| self.h2_error(e))?;
                self.response = None;
                let (parts, recv) = response.into_parts();
                let end = recv.is_end_stream();
                self.reading = write_response_head(&mut self.out, &parts, end);
                self.recv = Some(recv);
                Ok(true)
            }
            Reading::Raw | Reading::Chunked => {
                let Some(recv) = self.recv.as_mut() else {
                    return Ok(false);
                };
                let chunked = matches!(self.reading, Reading::Chunked);
                match recv.data().await {
                    Some(Ok(bytes)) => {
                        let _ = recv.flow_control().release_capacity(bytes.len());
                        if bytes.is_empty() {
                            return Ok(true);
                        }
                        if chunked {
                            let _ = write!(self.out, "{:x}\r\n", bytes.len());
                            self.after_data = b"\r\n";
                        }
                        self.data = bytes;
                        Ok(true)
                    }
                    Some(Err(e)) => Err(self.h2_error(e)),
                    None if chunked => {
                        let trailers = recv.trailers().await.map_err(|e| self.h2_error(e))?;
                        self.out.extend_from_slice(b"0\r\n");
                        for (name, value) in trailers.iter().flatten() {
                            push_field(&mut self.out, name.as_str(), value.as_bytes());
                        }
                        self.out.extend_from_slice(b"\r\n");
                        self.reading = Reading::Done;
                        Ok(true)
                    }
                    None => {
                        self.reading = Reading::Done;
                        Ok(false)
                    }
                }
            }
            Reading::Done => Ok(false),
        }
    }
}

/// Sends `len` bytes on `send` as DATA frames, `piece(at, n)` giving the
/// frame of bytes `at..at + n` once the peer's window (and h2's send
/// buffer) has room for `n`: what is held for a peer is bounded by its
/// window. `end` ends the stream with the last frame (an empty one when
/// `len` is 0). `Err(None)`: the stream is gone.
pub(crate) async fn send_in_window(
    send: &mut SendStream<Bytes>,
    len: usize,
    end: bool,
    piece: impl Fn(usize, usize) -> Bytes,
) -> Result<(), Option<h2::Error>> {
    let mut at = 0;
    while at < len {
        send.reserve_capacity((len - at).min(SEND_CHUNK));
        let n = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(n)) => n.min(len - at),
            Some(Err(e)) => return Err(Some(e)),
            None => return Err(None),
        };
        if n == 0 {
            continue;
        }
        send.send_data(piece(at, n), end && at + n == len)
            .map_err(Some)?;
        at += n;
    }
    if end && len == 0 {
        send.send_data(Bytes::new(), true).map_err(Some)?;
    }
    Ok(())
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The server's answer head as HTTP/1.1, and how its body is read: as
/// it is with the server's length, else chunked (trailers can follow);
/// an answer that ended with its head gets `content-length: 0` unless it
/// has a length of its own (a `HEAD` request's).
fn write_response_head(out: &mut Vec<u8>, parts: &http::response::Parts, end: bool) -> Reading {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in parts.headers.iter() {
        push_field(out, name.as_str(), value.as_bytes());
    }
    let length = parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let reading = if end {
        if !length {
            out.extend_from_slice(b"content-length: 0\r\n");
        }
        Reading::Done
    } else if length {
        Reading::Raw
    } else {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Reading::Chunked
    };
    out.extend_from_slice(b"\r\n");
    reading
}

/// Fields a request's HTTP/1.1 head has that HTTP/2 forbids or carries
/// otherwise (`host` becomes `:authority`).
fn left_out(name: &str) -> bool {
    [
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "te",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// A gRPC `grpc-timeout` value (1 to 8 digits and a unit: `H`, `M`, `S`,
/// `m`, `u`, `n`) as a duration.
pub fn grpc_timeout(v: &[u8]) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The request once its head is complete in `head`; `None` while partial.
fn read_head(head: &[u8], https: bool) -> io::Result<Option<Head>> {
    let invalid = || io::Error::from(io::ErrorKind::InvalidData);
    let mut lines = [httparse::EMPTY_HEADER; HEAD_LINES];
    let mut req = httparse::Request::new(&mut lines);
    let len = match req.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(invalid()),
    };
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return Err(invalid());
    };
    let mut fields = http::HeaderMap::with_capacity(req.headers.len() + 1);
    let mut authority = None;
    let mut sending = Sending::Done;
    let mut grpc = false;
    let mut deadline = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            authority = Some(h.value);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            sending = Sending::Chunked(ChunkedDecoder::new());
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(invalid)?;
            if n > 0 {
                sending = Sending::Length(n);
            }
        } else if h.name.eq_ignore_ascii_case("content-type") {
            grpc = h.value.starts_with(b"application/grpc");
        } else if h.name.eq_ignore_ascii_case("grpc-timeout") {
            deadline = grpc_timeout(h.value).map(|d| Instant::now() + d);
        }
        if left_out(h.name) {
            continue;
        }
        let name = http::HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| invalid())?;
        let value = http::HeaderValue::from_bytes(h.value).map_err(|_| invalid())?;
        fields.append(name, value);
    }
    if grpc {
        fields.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    }
    let uri = http::Uri::builder()
        .scheme(if https { "https" } else { "http" })
        .authority(authority.ok_or_else(invalid)?)
        .path_and_query(path)
        .build()
        .map_err(|_| invalid())?;
    let method = http::Method::from_bytes(method.as_bytes()).map_err(|_| invalid())?;
    let mut request = http::Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = fields;
    Ok(Some(Head {
        request,
        len,
        sending,
        deadline,
    }))
}

impl ReadSpare for H2Call {
    async fn read_spare(&mut self, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        if buf.len() == buf.capacity() {
            buf.reserve(READ_BYTES);
        }
        loop {
            let room = buf.capacity() - buf.len();
            if self.opos < self.out.len() {
                let n = room.min(self.out.len() - self.opos);
                buf.extend_from_slice(&self.out[self.opos..self.opos + n]);
                self.opos += n;
                return (Ok(n), buf);
            }
            if !self.data.is_empty() {
                let n = room.min(self.data.len());
                buf.extend_from_slice(&self.data.split_to(n));
                return (Ok(n), buf);
            }
            if !self.after_data.is_empty() {
                let n = room.min(self.after_data.len());
                buf.extend_from_slice(&self.after_data[..n]);
                self.after_data = &self.after_data[n..];
                return (Ok(n), buf);
            }
            self.out.clear();
            self.opos = 0;
            match self.next_out().await {
                Ok(true) => {}
                Ok(false) => return (Ok(0), buf),
                Err(e) => return (Err(e), buf),
            }
        }
    }
}

impl WriteAll for H2Call {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        let res = self.write(init_bytes(&buf)).await;
        (res, buf)
    }
    async fn close_write(&mut self) {}
}

impl ReadSpare for Box<H2Call> {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        (**self).read_spare(buf).await
    }
}

impl WriteAll for Box<H2Call> {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        (**self).write_all_of(buf).await
    }
    async fn close_write(&mut self) {}
}

/// A call cannot be split for a tunnel (HTTP/2 has no upgrade).
pub struct NoHalf;

impl ReadSpare for NoHalf {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        (Ok(0), buf)
    }
}

impl WriteAll for NoHalf {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        (Err(io::ErrorKind::Unsupported.into()), buf)
    }
    async fn close_write(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_digits_and_a_unit() {
        assert_eq!(grpc_timeout(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(grpc_timeout(b"100m"), Some(Duration::from_millis(100)));
        assert_eq!(grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"S", b"5", b"5s", b"123456789S", b"-1S", b"1.5S"] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_rewritten_head_becomes_the_streams_fields() {
        let raw = b"POST /pkg.Svc/Call HTTP/1.1\r\nHost: api.internal:8443\r\nconnection: keep-alive\r\ncontent-type: application/grpc\r\ngrpc-timeout: 2S\r\ntransfer-encoding: chunked\r\nX-Request-Id: abc\r\n\r\n5\r\nhello";
        let head = read_head(raw, true).unwrap().unwrap();
        assert_eq!(head.len, raw.len() - b"5\r\nhello".len());
        assert!(matches!(head.sending, Sending::Chunked(_)));
        assert!(head.deadline.is_some());
        let r = head.request;
        assert_eq!(r.method(), http::Method::POST);
        assert_eq!(
            r.uri().to_string(),
            "https://api.internal:8443/pkg.Svc/Call"
        );
        let names: Vec<&str> = r.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            ["content-type", "grpc-timeout", "x-request-id", "te"]
        );
        assert_eq!(r.headers()["te"], "trailers");
        assert!(read_head(b"GET / HTTP/1.1\r\nHost: a\r\n", false)
            .unwrap()
            .is_none());
        let get = read_head(
            b"GET /x?y HTTP/1.1\r\nHost: a\r\ncontent-length: 0\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert!(matches!(get.sending, Sending::Done));
        assert_eq!(get.request.uri().to_string(), "http://a/x?y");
        assert!(!get.request.headers().contains_key("te"));
        // No Host: nothing to send as the authority.
        assert!(read_head(b"GET / HTTP/1.1\r\n\r\n", false).is_err());
    }

    #[test]
    fn answers_are_written_with_their_framing() {
        let mut out = Vec::new();
        let (parts, ()) = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .body(())
            .unwrap()
            .into_parts();
        assert!(matches!(
            write_response_head(&mut out, &parts, false),
            Reading::Chunked
        ));
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        out.clear();
        assert!(matches!(
            write_response_head(&mut out, &parts, true),
            Reading::Done
        ));
        assert!(out.ends_with(b"content-length: 0\r\n\r\n"));
        out.clear();
        let (parts, ()) = http::Response::builder()
            .status(404)
            .header("content-length", "3")
            .body(())
            .unwrap()
            .into_parts();
        assert!(matches!(
            write_response_head(&mut out, &parts, false),
            Reading::Raw
        ));
        assert_eq!(out, b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\n");
    }
}
