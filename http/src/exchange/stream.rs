//! A client's HTTP/2 stream, answered as parts: its answer's HEADERS,
//! DATA and trailers are sent from a head, body pieces and fields, as the
//! client's window allows; its request body is read frame by frame.
//!
//! The stream's request head is laid out for the pipeline by
//! `crate::server::h2stream`, which also sends the answers Gapura writes
//! itself from their parts (`gapura_gate::sink::Parts`); what both share,
//! the stream's handles and its request body, is here.

use super::send_in_window;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::task::Poll;

/// One client stream's handles.
pub struct ClientStream {
    /// The request's body as the client sends it; `None` once it ended.
    body: Option<RecvStream>,
    /// Body bytes not yet read by the pipeline, in the framing its head
    /// says (chunked when the request gave no length).
    pub(crate) pending: Vec<u8>,
    pub(crate) ppos: usize,
    /// The request gave no length: its body reaches the pipeline chunked.
    pub(crate) chunked: bool,
    respond: Option<SendResponse<Bytes>>,
    send: Option<SendStream<Bytes>>,
    /// The client reset the stream, or it ended in a stream error.
    reset: Rc<Cell<bool>>,
    /// The answer was sent whole as parts.
    answered: bool,
}

impl ClientStream {
    /// A stream whose request body is `body` (`None`: it came with the
    /// head's END_STREAM).
    pub fn new(
        body: Option<RecvStream>,
        chunked: bool,
        respond: SendResponse<Bytes>,
        reset: Rc<Cell<bool>>,
    ) -> ClientStream {
        ClientStream {
            body,
            pending: Vec::with_capacity(256),
            ppos: 0,
            chunked,
            respond: Some(respond),
            send: None,
            reset,
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
    pub fn poll_abandoned(&mut self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let polled = if let Some(r) = self.respond.as_mut() {
            r.poll_reset(cx)
        } else if let Some(s) = self.send.as_mut() {
            s.poll_reset(cx)
        } else {
            return Poll::Pending;
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
        if let Some(s) = self.send.as_mut() {
            s.send_reset(reason);
        } else if let Some(r) = self.respond.as_mut() {
            r.send_reset(reason);
        }
    }

    /// Whether the answer's head went out.
    pub fn head_sent(&self) -> bool {
        self.respond.is_none()
    }

    /// Whether the answer was sent whole as parts.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Sends the answer's head; `end`: it is the whole answer.
    pub fn send_head(&mut self, head: http::Response<()>, end: bool) -> io::Result<()> {
        let Some(mut respond) = self.respond.take() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        let send = respond
            .send_response(head, end)
            .map_err(|e| self.error(e))?;
        self.send = Some(send);
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
        let Some(send) = self.send.as_mut() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        match send_in_window(send, len, end, piece).await {
            Ok(()) => {
                self.answered |= end;
                Ok(())
            }
            Err(Some(e)) => Err(self.error(e)),
            Err(None) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Sends shared bytes as DATA frames, each a slice of them.
    pub async fn send_bytes(&mut self, bytes: Bytes, end: bool) -> io::Result<()> {
        self.send_frames(bytes.len(), end, |at, n| bytes.slice(at..at + n))
            .await
    }

    /// Ends the answer with trailers.
    pub fn send_trailers(&mut self, fields: http::HeaderMap) -> io::Result<()> {
        let Some(send) = self.send.as_mut() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        match send.send_trailers(fields) {
            Ok(()) => {
                self.answered = true;
                Ok(())
            }
            Err(e) => Err(self.error(e)),
        }
    }

    /// The request body's frames still to come, and the framed bytes the
    /// pipeline has not read: the body is then the caller's.
    pub fn take_body(&mut self) -> (Option<RecvStream>, Vec<u8>) {
        let mut rest = std::mem::take(&mut self.pending);
        rest.drain(..self.ppos);
        self.ppos = 0;
        (self.body.take(), rest)
    }

    /// The request body's next bytes, appended to `pending` in the
    /// pipeline's framing; `Ok(false)` once the body ended.
    pub async fn read_body(&mut self) -> io::Result<bool> {
        use std::io::Write as _;
        let Some(body) = self.body.as_mut() else {
            return Ok(false);
        };
        match body.data().await {
            Some(Ok(bytes)) => {
                let _ = body.flow_control().release_capacity(bytes.len());
                if bytes.is_empty() {
                    return Ok(true);
                }
                if self.chunked {
                    // The chunk's size line, written in place.
                    let _ = write!(self.pending, "{:x}\r\n", bytes.len());
                    self.pending.extend_from_slice(&bytes);
                    self.pending.extend_from_slice(b"\r\n");
                } else {
                    self.pending.extend_from_slice(&bytes);
                }
                Ok(true)
            }
            None => {
                self.body = None;
                if self.chunked {
                    self.pending.extend_from_slice(b"0\r\n\r\n");
                }
                Ok(true)
            }
            Some(Err(e)) => {
                self.body = None;
                Err(self.error(e))
            }
        }
    }
}
