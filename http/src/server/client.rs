//! The client side of a connection, with one owner: its stream (plain TCP
//! or TLS), its read and write buffers, the head's deadline, the
//! connection's deadline entry (`deadline`: every wait of the connection,
//! its upstream exchange's too, runs under it) and the bytes sent, and the
//! operations on them (read under a deadline, flush under the write
//! timeout, write a page, relay a buffer, close).
//!
//! The read buffer starts small and grows only while a head is incomplete;
//! unparsed bytes start at `pos`, so pipelined requests are parsed from an
//! offset without moving bytes. Answers are appended to `wbuf` and flushed
//! together.

use super::deadline::Deadline;
use super::end::{End, ReadFail};
use super::shard::WRITE_BUF_BYTES;
use super::stats::ErrorKind;
use crate::clock;
use crate::transport::Transport;
use gapura_gate::answer::Answer;
use gapura_gate::answer::WriteCtx;
use gapura_gate::sink::Sink;
use monoio::time::Instant;

/// Initial read buffer; it grows only for large heads.
pub(super) const READ_BUF_BYTES: usize = 4096;
/// How long an idle plain connection waits with its read buffer before it
/// parks: the read is cancelled, the buffer goes back to the shard, and
/// the connection waits for readability holding none.
pub(super) const PARK_MS: u64 = 1000;
/// Idle connections park only while their shard holds more connections
/// than this: below it the memory is small and the cancellable read's
/// bookkeeping is not worth its cost on every request.
pub(super) const PARK_ABOVE: u32 = 512;

/// Counts a parked connection's wake (or end) when dropped.
struct Unpark<'a>(&'a super::stats::Counter);

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        self.0.inc();
    }
}

/// The client side of one connection. Its fields are its own: the rest of
/// the connection layer reads and consumes the read buffer, appends to the
/// write buffer and waits on the stream only through the methods below,
/// so "who may touch the read buffer" has one answer.
pub(super) struct ClientIo<S: Transport> {
    stream: S,
    rbuf: Vec<u8>,
    /// Start of unparsed bytes in `rbuf`.
    pos: usize,
    wbuf: Vec<u8>,
    /// An answer written as parts (an HTTP/2 stream's; nothing for a byte
    /// stream).
    parts: S::Parts,
    /// A body that follows `wbuf`, shared with the snapshot (a large
    /// built-in answer's): sent by the next flush, never copied.
    shared: Option<bytes::Bytes>,
    /// Bytes handed to the stream so far.
    sent: u64,
    /// When the head being read must be complete.
    head_deadline: Option<Instant>,
    /// Cancels an idle read to park (`read_idle`); made on the first.
    canceller: Option<monoio::io::Canceller>,
    /// The connection's one deadline: each wait sets it and clears it.
    deadline: Deadline,
}

/// The read buffer: what was read and not yet consumed, and the room to
/// read into.
impl<S: Transport> ClientIo<S> {
    /// The bytes read and not consumed yet (the next head, a body's start).
    #[inline]
    pub(super) fn unread(&self) -> &[u8] {
        &self.rbuf[self.pos..]
    }

    /// Whether every byte read has been consumed.
    #[inline]
    pub(super) fn drained(&self) -> bool {
        self.pos == self.rbuf.len()
    }

    /// Consumes the next `n` unread bytes.
    #[inline]
    pub(super) fn consume(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.rbuf.len());
        self.pos += n;
    }

    /// Once every byte read is consumed, the next read starts at the
    /// buffer's start (room for body bytes).
    #[inline]
    pub(super) fn rewind_if_drained(&mut self) {
        if self.drained() {
            self.rbuf.clear();
            self.pos = 0;
        }
    }

    /// The unread bytes, taken out of the buffer (a tunnel's or an HTTP/2
    /// connection's first bytes).
    pub(super) fn take_unread(&mut self) -> Vec<u8> {
        let rest = self.rbuf.split_off(self.pos);
        self.pos = self.rbuf.len();
        rest
    }

    /// Forgets everything read, keeping room to read into (a lingering
    /// close discards what the client still sends).
    pub(super) fn discard_read(&mut self) {
        self.rbuf.clear();
        self.pos = 0;
        if self.rbuf.capacity() == 0 {
            self.rbuf.reserve(READ_BUF_BYTES);
        }
    }

    /// Before waiting for the next request on a drained connection: an
    /// empty buffer, shrunk back when a large head grew it.
    pub(super) fn start_over(&mut self, shrink_above: usize) {
        self.rbuf.clear();
        self.pos = 0;
        if self.rbuf.capacity() > shrink_above {
            self.rbuf = Vec::with_capacity(READ_BUF_BYTES);
        }
    }

    /// Before reading more of a partial head: its bytes moved to the
    /// buffer's start, and the buffer grown when full (up to `max_bytes`
    /// plus a read's room).
    pub(super) fn make_room(&mut self, max_bytes: usize) {
        if self.pos > 0 {
            self.rbuf.copy_within(self.pos.., 0);
            self.rbuf.truncate(self.rbuf.len() - self.pos);
            self.pos = 0;
        }
        if self.rbuf.len() == self.rbuf.capacity() {
            let grown =
                (self.rbuf.capacity() * 2).clamp(READ_BUF_BYTES, max_bytes + READ_BUF_BYTES);
            self.rbuf.reserve_exact(grown - self.rbuf.len());
        }
    }

    /// When the head being read must be complete: set at its first byte.
    pub(super) fn head_deadline(&mut self, header_timeout_ms: u64) -> Instant {
        *self
            .head_deadline
            .get_or_insert_with(|| clock::deadline(header_timeout_ms))
    }

    /// A new head began (its first bytes came): its deadline starts now.
    pub(super) fn head_begins(&mut self, header_timeout_ms: u64) {
        self.head_deadline = Some(clock::deadline(header_timeout_ms));
    }

    /// The head was read whole: no head deadline until the next one.
    pub(super) fn head_done(&mut self) {
        self.head_deadline = None;
    }
}

/// The write side: answers appended to the write buffer, flushed
/// together.
impl<S: Transport> ClientIo<S> {
    /// The write buffer, to append bytes to (an upstream's answer relayed
    /// to a byte stream, an interim answer).
    #[inline]
    pub(super) fn out(&mut self) -> &mut Vec<u8> {
        &mut self.wbuf
    }

    /// Where Gapura's own answers are written: the write buffer of a byte
    /// stream, the parts of an HTTP/2 stream ([`Transport::answers`]).
    #[inline(always)]
    pub(super) fn answer(&mut self) -> &mut S::Answers {
        S::answers(&mut self.wbuf, &mut self.parts)
    }

    /// The stream, the unread bytes and where answers are written together
    /// (a head is read from the first two while its answer is written into
    /// the third).
    #[inline]
    pub(super) fn head_view(&mut self) -> (&S, &[u8], &mut S::Answers) {
        (
            &self.stream,
            &self.rbuf[self.pos..],
            S::answers(&mut self.wbuf, &mut self.parts),
        )
    }

    /// Bytes waiting to be sent: in the write buffer, and of an answer
    /// written as parts (which counts one more, so that one with no body
    /// still waits).
    #[inline]
    pub(super) fn out_len(&self) -> usize {
        self.wbuf.len() + S::parts_waiting(&self.parts)
    }

    /// The write buffer, taken (the connection holds none while idle).
    pub(super) fn take_out(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.wbuf)
    }

    /// A write buffer to append to (after [`ClientIo::take_out`]).
    pub(super) fn set_out(&mut self, buf: Vec<u8>) {
        self.wbuf = buf;
    }

    /// A large shared body follows what the write buffer holds.
    pub(super) fn follow_with(&mut self, body: bytes::Bytes) {
        self.shared = Some(body);
    }

    /// Whether a shared body waits for the next flush.
    pub(super) fn has_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Counts bytes of an answer sent as parts, not through the buffer.
    #[inline]
    pub(super) fn count_sent(&mut self, n: u64) {
        self.sent += n;
    }

    /// Bytes of answers handed to the stream or waiting to be: where the
    /// next answer's bytes begin in the connection's count.
    #[inline]
    pub(super) fn bytes_out(&self) -> u64 {
        self.sent + (self.wbuf.len() + S::parts_len(&self.parts)) as u64
    }
}

/// The stream and the connection's deadline.
impl<S: Transport> ClientIo<S> {
    #[inline]
    pub(super) fn stream(&self) -> &S {
        &self.stream
    }

    #[inline]
    pub(super) fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The stream and the connection's deadline, together (a wait on the
    /// stream under the deadline).
    pub(super) fn stream_and_deadline(&mut self) -> (&mut S, &Deadline) {
        (&mut self.stream, &self.deadline)
    }

    /// The connection's deadline entry.
    #[inline]
    pub(super) fn deadline(&self) -> &Deadline {
        &self.deadline
    }

    /// The stream and the unread bytes, for what takes the connection
    /// over (HTTP/2, a tunnel).
    pub(super) fn into_stream(self) -> (S, Vec<u8>) {
        let (stream, rest, _) = self.into_parts();
        (stream, rest)
    }

    /// The stream, the unread bytes and the connection's deadline entry
    /// (a TLS handshake takes the stream over and keeps the deadline).
    pub(super) fn into_parts(mut self) -> (S, Vec<u8>, Deadline) {
        let mut rbuf = std::mem::take(&mut self.rbuf);
        rbuf.drain(..self.pos);
        (self.stream, rbuf, self.deadline)
    }
}

impl<S: Transport> ClientIo<S> {
    /// `rbuf` may already hold bytes read from the socket.
    pub(super) fn new(stream: S, rbuf: Vec<u8>, pos: usize, deadline: Deadline) -> ClientIo<S> {
        ClientIo {
            stream,
            rbuf,
            pos,
            wbuf: Vec::with_capacity(WRITE_BUF_BYTES),
            parts: S::Parts::default(),
            shared: None,
            sent: 0,
            head_deadline: None,
            canceller: None,
            deadline,
        }
    }

    /// A connection that holds no buffer yet (a TLS connection before its
    /// client has said anything): they are allocated when first needed.
    pub(super) fn bare(stream: S, deadline: Deadline) -> ClientIo<S> {
        ClientIo {
            stream,
            rbuf: Vec::new(),
            pos: 0,
            wbuf: Vec::new(),
            parts: S::Parts::default(),
            shared: None,
            sent: 0,
            head_deadline: None,
            canceller: None,
            deadline,
        }
    }

    /// The same connection over another stream (`f` wraps this one).
    pub(super) fn map_stream<T: Transport>(self, f: impl FnOnce(S) -> T) -> ClientIo<T> {
        ClientIo {
            stream: f(self.stream),
            rbuf: self.rbuf,
            pos: self.pos,
            wbuf: self.wbuf,
            parts: T::Parts::default(),
            shared: self.shared,
            sent: self.sent,
            head_deadline: self.head_deadline,
            canceller: self.canceller,
            deadline: self.deadline,
        }
    }

    /// Reads the next request's first bytes into `rbuf` (empty) on an idle
    /// connection, by `deadline` (the idle timeout). While the shard holds
    /// more than [`PARK_ABOVE`] connections, a connection quiet for
    /// [`PARK_MS`] parks: its read is cancelled (bytes that came first are
    /// kept: they end the read), `rbuf` goes back to `shard`'s spare
    /// buffers, and it waits for readability holding no buffer, then
    /// borrows one and reads. Plain TCP only ([`Transport::PARKS`]).
    pub(super) async fn read_idle(
        &mut self,
        deadline: Instant,
        shard: &super::shard::Shard,
    ) -> Result<usize, ReadFail> {
        if !S::PARKS || shard.open_connections() <= PARK_ABOVE {
            return self.read_more(deadline).await;
        }
        let park_at = clock::deadline(PARK_MS);
        if park_at >= deadline {
            return self.read_more(deadline).await;
        }
        if self.stream.waits_unbuffered() {
            return self.read_idle_unbuffered(park_at, deadline, shard).await;
        }
        let handle = self
            .canceller
            .get_or_insert_with(monoio::io::Canceller::new)
            .handle();
        let (res, buf) = {
            let read = self
                .stream
                .cancelable_read_spare(std::mem::take(&mut self.rbuf), handle);
            let mut read = std::pin::pin!(read);
            match self.deadline.within(park_at, &mut read).await {
                Ok(done) => done,
                Err(_) => {
                    // Cancelled, not dropped: a read the kernel completed
                    // first still hands over its bytes.
                    if let Some(c) = self.canceller.take() {
                        self.canceller = Some(c.cancel());
                    }
                    read.await
                }
            }
        };
        match res {
            Ok(n) => {
                self.rbuf = buf;
                return Ok(n);
            }
            Err(e) if e.raw_os_error() == Some(libc::ECANCELED) => {
                // Parked: nothing held, not even the canceller.
                shard.return_buf(buf);
                self.canceller = None;
            }
            Err(_) => return Err(ReadFail::Io),
        }
        let Some(socket) = self.stream.socket() else {
            return Err(ReadFail::Io);
        };
        shard.stats.parks.inc();
        let _parked = Unpark(&shard.stats.unparks);
        match self.deadline.within(deadline, socket.readable(false)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(ReadFail::Io),
            Err(_) => return Err(ReadFail::Timeout),
        }
        self.rbuf = shard.lend_buf();
        self.read_more(deadline).await
    }

    /// [`ClientIo::read_idle`] on a stream that waits for bytes holding
    /// no buffer (the ring's): quiet until `park_at`, the read buffer goes
    /// back to the shard; a buffer is borrowed again once bytes came.
    async fn read_idle_unbuffered(
        &mut self,
        park_at: Instant,
        deadline: Instant,
        shard: &super::shard::Shard,
    ) -> Result<usize, ReadFail> {
        if self
            .deadline
            .within(park_at, self.stream.ready())
            .await
            .is_ok()
        {
            return self.read_more(deadline).await;
        }
        shard.return_buf(std::mem::take(&mut self.rbuf));
        shard.stats.parks.inc();
        let parked = Unpark(&shard.stats.unparks);
        if self
            .deadline
            .within(deadline, self.stream.ready())
            .await
            .is_err()
        {
            return Err(ReadFail::Timeout);
        }
        drop(parked);
        self.rbuf = shard.lend_buf();
        self.read_more(deadline).await
    }

    /// Reads into the spare capacity of `rbuf`. A timed-out read takes its
    /// buffer with it; the caller closes the connection then.
    pub(super) async fn read_more(&mut self, deadline: Instant) -> Result<usize, ReadFail> {
        let buf = std::mem::take(&mut self.rbuf);
        match self
            .deadline
            .within(deadline, self.stream.read_spare(buf))
            .await
        {
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

    /// Sends `wbuf` whole, then the shared body that follows it, under
    /// the write timeout.
    pub(super) async fn flush(&mut self, write_timeout_ms: u64) -> Result<(), End> {
        if S::PARTS && self.shared.is_none() && self.out_len() == 0 {
            // Nothing waits (an upstream's answer went out as frames).
            return Ok(());
        }
        if self.shared.is_some() || S::PARTS {
            // On its own allocation: the common flush future stays small.
            return Box::pin(self.flush_shared(write_timeout_ms)).await;
        }
        let buf = std::mem::take(&mut self.wbuf);
        self.sent += buf.len() as u64;
        let deadline = clock::deadline(write_timeout_ms);
        match self
            .deadline
            .within(deadline, self.stream.write_all_of(buf))
            .await
        {
            Ok((Ok(()), mut buf)) => {
                buf.clear();
                self.wbuf = buf;
                Ok(())
            }
            Ok((Err(_), _)) => Err(End::Error(ErrorKind::Io)),
            Err(_) => Err(End::Error(ErrorKind::WriteTimeout)),
        }
    }

    /// [`ClientIo::flush`] with an answer written as parts or a shared body
    /// after `wbuf`: all under one write timeout.
    async fn flush_shared(&mut self, write_timeout_ms: u64) -> Result<(), End> {
        let buf = std::mem::take(&mut self.wbuf);
        let shared = self.shared.take();
        let parts_len = S::parts_len(&self.parts);
        self.sent += (buf.len() + parts_len + shared.as_ref().map_or(0, |b| b.len())) as u64;
        let deadline = clock::deadline(write_timeout_ms);
        let (stream, parts) = (&mut self.stream, &mut self.parts);
        let write = async move {
            let (mut res, buf) = stream.write_all_of(buf).await;
            if res.is_ok() {
                res = stream.send_parts(parts).await;
            }
            match (res, shared) {
                (Ok(()), Some(body)) => (stream.write_shared(body).await, buf),
                (res, _) => (res, buf),
            }
        };
        match self.deadline.within(deadline, write).await {
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
        match self
            .deadline
            .within(deadline, self.stream.write_all_of(buf))
            .await
        {
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
        let out = self.answer();
        page.write_into(out, ctx);
        page.stamp(out.written_mut(), ctx.head_only, id);
    }
}
