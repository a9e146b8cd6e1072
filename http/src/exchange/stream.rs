//! A client's stream, answered as parts: its answer's head, body pieces
//! and trailers are sent as frames from a head, bytes and fields, as the
//! client's window allows; its request body is read frame by frame.
//!
//! Two protocols carry such streams: HTTP/2 (h2's handles, here) and
//! HTTP/3 (a [`QuicSide`], which `crate::server::h3` implements over its
//! connection). The stream's request head is laid out for the pipeline by
//! the server side (`crate::server::muxstream`, `crate::server::h3`), which
//! also sends the answers Gapura writes itself from their parts
//! (`gapura_gate::sink::Parts`); what both share, the stream's handles and
//! its request body, is here.

use super::send_in_window;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};

/// Body bytes sent per wait for room.
const QUIC_PIECE: usize = 16 * 1024;

/// An HTTP/3 request stream's side of the exchange. Sends queue (a
/// bounded queue the connection drains as QUIC's windows allow); a
/// sender waits with [`QuicSide::poll_drained`] before queueing more.
pub trait QuicSide {
    /// Queues the answer's head; `end`: it is the whole answer.
    fn send_head(&mut self, status: u16, fields: &http::HeaderMap, end: bool) -> io::Result<()>;
    /// Queues body bytes; `end` ends the answer.
    fn send_data(&mut self, bytes: Bytes, end: bool) -> io::Result<()>;
    /// Queues trailers, ending the answer.
    fn send_trailers(&mut self, fields: &http::HeaderMap) -> io::Result<()>;
    /// Ready once what is queued is under the stream's bound.
    fn poll_drained(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// The request body's next bytes; `None` at its end.
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Vec<u8>>>>;
    /// Ready once the client gave up on the stream (or the connection
    /// ended).
    fn poll_abandoned(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// Resets the stream.
    fn reset(&mut self);
}

/// The protocol's handles.
enum Side {
    H2 {
        /// The request's body as the client sends it; `None` once it ended.
        body: Option<RecvStream>,
        respond: Option<SendResponse<Bytes>>,
        send: Option<SendStream<Bytes>>,
    },
    Quic {
        side: Box<dyn QuicSide>,
        head_sent: bool,
        body_done: bool,
    },
}

/// One client stream's handles.
pub struct ClientStream {
    side: Side,
    /// Body bytes not yet read by the pipeline, in the framing its head
    /// says (chunked when the request gave no length).
    pub(crate) pending: Vec<u8>,
    pub(crate) ppos: usize,
    /// The request gave no length: its body reaches the pipeline chunked.
    pub(crate) chunked: bool,
    /// The client reset the stream, or it ended in a stream error.
    reset: Rc<Cell<bool>>,
    /// The answer was sent whole as parts.
    answered: bool,
}

impl ClientStream {
    /// An HTTP/2 stream whose request body is `body` (`None`: it came with
    /// the head's END_STREAM).
    pub fn new(
        body: Option<RecvStream>,
        chunked: bool,
        respond: SendResponse<Bytes>,
        reset: Rc<Cell<bool>>,
    ) -> ClientStream {
        ClientStream {
            side: Side::H2 {
                body,
                respond: Some(respond),
                send: None,
            },
            pending: Vec::with_capacity(256),
            ppos: 0,
            chunked,
            reset,
            answered: false,
        }
    }

    /// An HTTP/3 stream; `body`: a request body may follow its head.
    pub fn quic(side: Box<dyn QuicSide>, body: bool, chunked: bool) -> ClientStream {
        ClientStream {
            side: Side::Quic {
                side,
                head_sent: false,
                body_done: !body,
            },
            pending: Vec::with_capacity(256),
            ppos: 0,
            chunked,
            reset: Rc::default(),
            answered: false,
        }
    }

    /// An h2 error as an I/O error, the stream marked reset when the
    /// client reset it.
    pub fn error(&self, e: h2::Error) -> io::Error {
        if e.is_reset() || e.is_remote() {
            self.reset.set(true);
        }
        io::Error::other(e)
    }

    /// Ready once the client reset the stream (or the connection ended).
    pub fn poll_abandoned(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let polled = match &mut self.side {
            Side::Quic { side, .. } => return side.poll_abandoned(cx),
            Side::H2 {
                respond: Some(r), ..
            } => r.poll_reset(cx),
            Side::H2 { send: Some(s), .. } => s.poll_reset(cx),
            Side::H2 { .. } => return Poll::Pending,
        };
        match polled {
            Poll::Ready(Ok(_)) => {
                self.reset.set(true);
                Poll::Ready(())
            }
            Poll::Ready(Err(e)) => {
                if e.is_reset() || e.is_remote() {
                    self.reset.set(true);
                }
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Waits until the client gives up on the stream.
    pub async fn until_abandoned(&mut self) {
        std::future::poll_fn(|cx| self.poll_abandoned(cx)).await
    }

    /// Resets the stream.
    pub fn reset_stream(&mut self, reason: Reason) {
        match &mut self.side {
            Side::H2 { send: Some(s), .. } => s.send_reset(reason),
            Side::H2 {
                respond: Some(r), ..
            } => r.send_reset(reason),
            Side::H2 { .. } => {}
            Side::Quic { side, .. } => side.reset(),
        }
    }

    /// Whether the answer's head went out.
    pub fn head_sent(&self) -> bool {
        match &self.side {
            Side::H2 { respond, .. } => respond.is_none(),
            Side::Quic { head_sent, .. } => *head_sent,
        }
    }

    /// What carries the stream, as the access log names it.
    pub fn protocol(&self) -> &'static str {
        match self.side {
            Side::H2 { .. } => "HTTP/2.0",
            Side::Quic { .. } => "HTTP/3",
        }
    }

    /// Whether the answer was sent whole as parts.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Whether the request body can be handed over whole as h2's stream
    /// ([`ClientStream::take_body`]): an HTTP/2 stream's can; an HTTP/3
    /// stream's is read through the pipeline.
    pub fn hands_over_body(&self) -> bool {
        matches!(self.side, Side::H2 { .. })
    }

    /// Sends the answer's head; `end`: it is the whole answer.
    pub fn send_head(&mut self, head: http::Response<()>, end: bool) -> io::Result<()> {
        match &mut self.side {
            Side::H2 { respond, send, .. } => {
                let Some(mut r) = respond.take() else {
                    return Err(io::ErrorKind::BrokenPipe.into());
                };
                match r.send_response(head, end) {
                    Ok(s) => *send = Some(s),
                    Err(e) => return Err(self.error(e)),
                }
            }
            Side::Quic {
                side, head_sent, ..
            } => {
                if *head_sent {
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                *head_sent = true;
                side.send_head(head.status().as_u16(), head.headers(), end)?;
            }
        }
        self.answered = end;
        Ok(())
    }

    /// Sends `len` bytes as DATA frames ([`send_in_window`]); `end` ends
    /// the answer.
    pub async fn send_frames(
        &mut self,
        len: usize,
        end: bool,
        piece: impl Fn(usize, usize) -> Bytes,
    ) -> io::Result<()> {
        let sent = match &mut self.side {
            Side::H2 { send, .. } => {
                let Some(send) = send.as_mut() else {
                    return Err(io::ErrorKind::BrokenPipe.into());
                };
                match send_in_window(send, len, end, piece).await {
                    Ok(()) => Ok(()),
                    Err(Some(e)) => Err(self.error(e)),
                    Err(None) => Err(io::ErrorKind::BrokenPipe.into()),
                }
            }
            Side::Quic {
                side, head_sent, ..
            } => {
                if !*head_sent {
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                send_quic(side.as_mut(), len, end, piece).await
            }
        };
        if sent.is_ok() {
            self.answered |= end;
        }
        sent
    }

    /// Sends shared bytes as DATA frames, each a slice of them.
    pub async fn send_bytes(&mut self, bytes: Bytes, end: bool) -> io::Result<()> {
        self.send_frames(bytes.len(), end, |at, n| bytes.slice(at..at + n))
            .await
    }

    /// Ends the answer with trailers.
    pub fn send_trailers(&mut self, fields: http::HeaderMap) -> io::Result<()> {
        match &mut self.side {
            Side::H2 { send, .. } => {
                let Some(send) = send.as_mut() else {
                    return Err(io::ErrorKind::BrokenPipe.into());
                };
                if let Err(e) = send.send_trailers(fields) {
                    return Err(self.error(e));
                }
            }
            Side::Quic { side, .. } => side.send_trailers(&fields)?,
        }
        self.answered = true;
        Ok(())
    }

    /// The request body's frames still to come (an HTTP/2 stream's), and
    /// the framed bytes the pipeline has not read: the body is then the
    /// caller's.
    pub fn take_body(&mut self) -> (Option<RecvStream>, Vec<u8>) {
        let mut rest = std::mem::take(&mut self.pending);
        rest.drain(..self.ppos);
        self.ppos = 0;
        let body = match &mut self.side {
            Side::H2 { body, .. } => body.take(),
            Side::Quic { .. } => None,
        };
        (body, rest)
    }

    /// The request body's next bytes, appended to `pending` in the
    /// pipeline's framing; `Ok(false)` once the body ended.
    pub async fn read_body(&mut self) -> io::Result<bool> {
        let ClientStream {
            side,
            pending,
            chunked,
            reset,
            ..
        } = self;
        match side {
            Side::H2 { body, .. } => {
                let Some(b) = body.as_mut() else {
                    return Ok(false);
                };
                match b.data().await {
                    Some(Ok(bytes)) => {
                        let _ = b.flow_control().release_capacity(bytes.len());
                        push_body(pending, *chunked, &bytes);
                    }
                    None => {
                        *body = None;
                        end_body(pending, *chunked);
                    }
                    Some(Err(e)) => {
                        *body = None;
                        if e.is_reset() || e.is_remote() {
                            reset.set(true);
                        }
                        return Err(io::Error::other(e));
                    }
                }
            }
            Side::Quic {
                side, body_done, ..
            } => {
                if *body_done {
                    return Ok(false);
                }
                match std::future::poll_fn(|cx| side.poll_body(cx)).await {
                    Ok(Some(bytes)) => push_body(pending, *chunked, &bytes),
                    Ok(None) => {
                        *body_done = true;
                        end_body(pending, *chunked);
                    }
                    Err(e) => {
                        *body_done = true;
                        return Err(e);
                    }
                }
            }
        }
        Ok(true)
    }
}

/// Body bytes in the pipeline's framing.
fn push_body(pending: &mut Vec<u8>, chunked: bool, bytes: &[u8]) {
    use std::io::Write as _;
    if bytes.is_empty() {
        return;
    }
    if chunked {
        // The chunk's size line, written in place.
        let _ = write!(pending, "{:x}\r\n", bytes.len());
        pending.extend_from_slice(bytes);
        pending.extend_from_slice(b"\r\n");
    } else {
        pending.extend_from_slice(bytes);
    }
}

/// The body's end in the pipeline's framing.
fn end_body(pending: &mut Vec<u8>, chunked: bool) {
    if chunked {
        pending.extend_from_slice(b"0\r\n\r\n");
    }
}

/// Sends `len` bytes on an HTTP/3 stream, a piece at a time, each once
/// the queue has room.
async fn send_quic(
    side: &mut dyn QuicSide,
    len: usize,
    end: bool,
    piece: impl Fn(usize, usize) -> Bytes,
) -> io::Result<()> {
    let mut at = 0;
    while at < len {
        std::future::poll_fn(|cx| side.poll_drained(cx)).await?;
        let n = (len - at).min(QUIC_PIECE);
        side.send_data(piece(at, n), end && at + n == len)?;
        at += n;
    }
    if end && len == 0 {
        side.send_data(Bytes::new(), true)?;
    }
    std::future::poll_fn(|cx| side.poll_drained(cx)).await
}
