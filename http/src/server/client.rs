//! The client side of a connection, with one owner: its stream (plain TCP
//! or TLS), its read and write buffers, the head's deadline and the bytes
//! sent, and the operations on them (read under a deadline, flush under the
//! write timeout, write a page, relay a buffer, close).
//!
//! The read buffer starts small and grows only while a head is incomplete;
//! unparsed bytes start at `pos`, so pipelined requests are parsed from an
//! offset without moving bytes. Answers are appended to `wbuf` and flushed
//! together.

use super::conn::{End, ReadFail};
use super::stats::ErrorKind;
use crate::clock;
use crate::transport::Transport;
use gapura_gate::answer::Answer;
use gapura_gate::answer::WriteCtx;
use monoio::time::Instant;

/// Initial read buffer; it grows only for large heads.
pub(super) const READ_BUF_BYTES: usize = 4096;
/// Initial write buffer.
pub(super) const WRITE_BUF_BYTES: usize = 4096;

pub(super) struct ClientIo<S> {
    pub(super) stream: S,
    pub(super) rbuf: Vec<u8>,
    /// Start of unparsed bytes in `rbuf`.
    pub(super) pos: usize,
    pub(super) wbuf: Vec<u8>,
    /// Bytes handed to the stream so far.
    pub(super) sent: u64,
    /// When the head being read must be complete.
    pub(super) head_deadline: Option<Instant>,
}

impl<S: Transport> ClientIo<S> {
    /// `rbuf` may already hold bytes read from the socket.
    pub(super) fn new(stream: S, rbuf: Vec<u8>, pos: usize) -> ClientIo<S> {
        ClientIo {
            stream,
            rbuf,
            pos,
            wbuf: Vec::with_capacity(WRITE_BUF_BYTES),
            sent: 0,
            head_deadline: None,
        }
    }

    /// Reads into the spare capacity of `rbuf`. A timed-out read takes its
    /// buffer with it; the caller closes the connection then.
    pub(super) async fn read_more(&mut self, deadline: Instant) -> Result<usize, ReadFail> {
        let buf = std::mem::take(&mut self.rbuf);
        match monoio::time::timeout_at(deadline, self.stream.read_spare(buf)).await {
            Ok((res, buf)) => {
                self.rbuf = buf;
                res.map_err(|_| ReadFail::Io)
            }
            Err(_) => Err(ReadFail::Timeout),
        }
    }

    /// Reads client bytes into `rbuf`'s spare room (growing it when full).
    pub(super) async fn read_client(&mut self, deadline: Instant) -> Result<usize, ()> {
        if self.rbuf.len() == self.rbuf.capacity() {
            self.rbuf.reserve(READ_BUF_BYTES);
        }
        self.read_more(deadline).await.map_err(|_| ())
    }

    /// Sends `wbuf` whole under the write timeout.
    pub(super) async fn flush(&mut self, write_timeout_ms: u64) -> Result<(), End> {
        let buf = std::mem::take(&mut self.wbuf);
        self.sent += buf.len() as u64;
        let deadline = clock::deadline(write_timeout_ms);
        match monoio::time::timeout_at(deadline, self.stream.write_all_of(buf)).await {
            Ok((Ok(()), mut buf)) => {
                buf.clear();
                self.wbuf = buf;
                Ok(())
            }
            Ok((Err(_), _)) => Err(End::Error(ErrorKind::Io)),
            Err(_) => Err(End::Error(ErrorKind::WriteTimeout)),
        }
    }

    /// Sends `buf` whole under the write timeout; it comes back on success.
    pub(super) async fn send(&mut self, buf: Vec<u8>, write_timeout_ms: u64) -> Option<Vec<u8>> {
        self.sent += buf.len() as u64;
        let deadline = clock::deadline(write_timeout_ms);
        match monoio::time::timeout_at(deadline, self.stream.write_all_of(buf)).await {
            Ok((Ok(()), buf)) => Some(buf),
            _ => None,
        }
    }

    /// Ends the writing direction (a TLS close_notify first).
    pub(super) async fn close_write(&mut self) {
        self.stream.close_write().await;
    }

    /// Appends an error page with its request id.
    pub(super) fn write_page(
        &mut self,
        page: &Answer,
        ctx: &WriteCtx<'_>,
        id: impl FnOnce() -> [u8; 24],
    ) {
        page.write_into(&mut self.wbuf, ctx);
        page.stamp(&mut self.wbuf, ctx.head_only, id);
    }
}
