//! The connection loop: read, parse, decide, answer, repeat.
//!
//! One task per connection, on its shard. The read buffer starts small and
//! grows only while a head is incomplete, up to the parser's outer bound;
//! requests already buffered (pipelining) are parsed from an offset without
//! moving bytes, and their answers are appended to one write buffer that is
//! flushed once no complete request is left, so answers ready together go
//! out in one write. Bodies of requests answered locally are drained and
//! counted against the host's limit, never stored.
//!
//! Timeouts: the idle timeout covers the wait for a request's first byte;
//! the header timeout is one deadline for the whole head from its first byte
//! (a trickle cannot extend it); the body timeout bounds each body read; the
//! write timeout each write. A timed-out connection is closed.

use super::stats::ErrorKind;
use super::Shard;
use crate::codec::chunked::ChunkedDecoder;
use crate::codec::head::{parse_head, BodyFraming, HeadError, Parse, ParsedHead};
use gapura_gate::answer::{end_head, WriteCtx};
use gapura_gate::limits::{RequestLimits, OUTER_MAX_HEAD_BYTES};
use gapura_gate::snapshot::{RequestFacts, Verdict};
use gapura_gate::{ErrorStatus, Snapshot};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::time::Instant;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

/// Initial read buffer; it grows only for large heads.
const READ_BUF_BYTES: usize = 4096;
/// A buffer grown past this is given back once the connection is idle.
const SHRINK_ABOVE_BYTES: usize = 16 * 1024;
/// Initial write buffer.
const WRITE_BUF_BYTES: usize = 4096;
/// Flush the write buffer early once pipelined answers fill this much.
const WRITE_FLUSH_BYTES: usize = 64 * 1024;
/// Unread input discarded at most after a refusal, before closing.
const LINGER_BYTES: usize = 256 * 1024;
/// Longest wait for that input.
const LINGER_MS: u64 = 1000;

const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Why a connection ended (for counters; never shown to the peer).
#[derive(Debug)]
pub(super) enum End {
    /// Orderly: close requested, peer closed between requests, draining.
    Done,
    Idle,
    Error(ErrorKind),
    /// A 101 was relayed: tunnel to this upstream connection, which already
    /// sent these bytes past its head.
    Upgrade(TcpStream, Vec<u8>),
}

pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) shard: Rc<Shard>,
    pub(super) rbuf: Vec<u8>,
    /// Start of unparsed bytes in `rbuf`.
    pub(super) pos: usize,
    pub(super) wbuf: Vec<u8>,
    /// Upstream request bytes (proxying only; allocated on first use).
    pub(super) ubuf: Vec<u8>,
    /// Upstream response bytes (proxying only; allocated on first use).
    pub(super) urbuf: Vec<u8>,
    busy: bool,
    pub(super) served: u64,
    head_deadline: Option<Instant>,
}

/// Serves one accepted connection until it ends. Never panics on input.
pub async fn serve(stream: TcpStream, peer: SocketAddr, shard: Rc<Shard>) {
    let _ = stream.set_nodelay(true);
    shard.stats.connections_accepted.inc();
    shard.open.set(shard.open.get() + 1);
    let mut conn = Conn {
        stream,
        peer,
        shard: shard.clone(),
        rbuf: Vec::with_capacity(READ_BUF_BYTES),
        pos: 0,
        wbuf: Vec::with_capacity(WRITE_BUF_BYTES),
        ubuf: Vec::new(),
        urbuf: Vec::new(),
        busy: false,
        served: 0,
        head_deadline: None,
    };
    let end = conn.run().await;
    conn.set_busy(false);
    match end {
        End::Done => {}
        End::Idle => shard.stats.idle_timeouts.inc(),
        End::Error(kind) => shard.stats.error(kind),
        End::Upgrade(upstream, pending) => {
            let client_pending = conn.rbuf.split_off(conn.pos);
            let idle_ms = shard.snapshot().server.idle_timeout_ms;
            shard.stats.upgrades.inc();
            super::tunnel::tunnel(conn.stream, client_pending, upstream, pending, idle_ms).await;
        }
    }
    shard.open.set(shard.open.get() - 1);
    shard.stats.connections_closed.inc();
}

/// What the body handling of one request concluded.
enum BodyEnd {
    /// Body consumed; the connection may continue.
    Ok,
    /// Refuse with this page and close.
    Refuse(ErrorStatus),
    End(End),
}

impl Conn {
    fn set_busy(&mut self, busy: bool) {
        if self.busy != busy {
            self.busy = busy;
            self.shard.add_busy(if busy { 1 } else { -1 });
        }
    }

    async fn run(&mut self) -> End {
        loop {
            let parsed = parse_head(&self.rbuf[self.pos..]);
            match parsed {
                Parse::Partial => {
                    if let Err(end) = self.wait_for_more().await {
                        return end;
                    }
                }
                Parse::Error(e) => {
                    let (status, kind) = match e {
                        HeadError::Malformed(_) => (ErrorStatus::BadRequest, ErrorKind::BadRequest),
                        HeadError::UrlTooLong => (ErrorStatus::UriTooLong, ErrorKind::Limit),
                        HeadError::TooLarge => {
                            (ErrorStatus::HeaderFieldsTooLarge, ErrorKind::Limit)
                        }
                    };
                    self.shard.stats.requests.inc();
                    let snap = self.shard.snapshot();
                    self.write_page(&snap, status, false, false);
                    return self.close_after_refusal(kind).await;
                }
                Parse::Complete(head) => {
                    if let Err(end) = self.handle(head).await {
                        return end;
                    }
                }
            }
        }
    }

    /// No complete head is buffered: flush answers, then read more under the
    /// idle or header deadline.
    async fn wait_for_more(&mut self) -> Result<(), End> {
        if !self.wbuf.is_empty() {
            self.flush().await?;
        }
        let idle = self.pos == self.rbuf.len();
        if idle {
            self.rbuf.clear();
            self.pos = 0;
            if self.rbuf.capacity() > SHRINK_ABOVE_BYTES {
                self.rbuf = Vec::with_capacity(READ_BUF_BYTES);
            }
            self.set_busy(false);
            if self.shard.is_draining() {
                return Err(End::Done);
            }
        } else if self.pos > 0 {
            self.rbuf.copy_within(self.pos.., 0);
            self.rbuf.truncate(self.rbuf.len() - self.pos);
            self.pos = 0;
        }
        if self.rbuf.len() == self.rbuf.capacity() {
            let grown = (self.rbuf.capacity() * 2).min(OUTER_MAX_HEAD_BYTES + READ_BUF_BYTES);
            self.rbuf.reserve_exact(grown - self.rbuf.len());
        }
        let server = &self.shard.snapshot().server;
        let deadline = if idle {
            Instant::now() + Duration::from_millis(server.idle_timeout_ms)
        } else {
            *self.head_deadline.get_or_insert_with(|| {
                Instant::now() + Duration::from_millis(server.header_timeout_ms)
            })
        };
        let header_timeout_ms = server.header_timeout_ms;
        match self.read_more(deadline).await {
            Ok(0) => Err(if idle {
                End::Done
            } else {
                End::Error(ErrorKind::Io)
            }),
            Ok(_) => {
                if idle {
                    self.set_busy(true);
                    self.head_deadline =
                        Some(Instant::now() + Duration::from_millis(header_timeout_ms));
                }
                Ok(())
            }
            Err(ReadFail::Timeout) => Err(if idle {
                End::Idle
            } else {
                End::Error(ErrorKind::HeaderTimeout)
            }),
            Err(ReadFail::Io) => Err(End::Error(ErrorKind::Io)),
        }
    }

    /// Reads client bytes into `rbuf`'s spare room (growing it when full).
    pub(super) async fn read_client(&mut self, deadline: Instant) -> Result<usize, ()> {
        if self.rbuf.len() == self.rbuf.capacity() {
            self.rbuf.reserve(READ_BUF_BYTES);
        }
        self.read_more(deadline).await.map_err(|_| ())
    }

    /// Reads into the spare capacity of `rbuf`. A timed-out read takes its
    /// buffer with it; the caller closes the connection then.
    async fn read_more(&mut self, deadline: Instant) -> Result<usize, ReadFail> {
        let buf = std::mem::take(&mut self.rbuf);
        let len = buf.len();
        let cap = buf.capacity();
        let read = self.stream.read(buf.slice_mut(len..cap));
        match monoio::time::timeout_at(deadline, read).await {
            Ok((res, slice)) => {
                self.rbuf = slice.into_inner();
                res.map_err(|_| ReadFail::Io)
            }
            Err(_) => Err(ReadFail::Timeout),
        }
    }

    pub(super) async fn flush(&mut self) -> Result<(), End> {
        let buf = std::mem::take(&mut self.wbuf);
        let ms = self.shard.snapshot().server.write_timeout_ms;
        self.shard.stats.writes.inc();
        let deadline = Instant::now() + Duration::from_millis(ms);
        match monoio::time::timeout_at(deadline, self.stream.write_all(buf)).await {
            Ok((Ok(_), mut buf)) => {
                buf.clear();
                self.wbuf = buf;
                Ok(())
            }
            Ok((Err(_), _)) => Err(End::Error(ErrorKind::Io)),
            Err(_) => Err(End::Error(ErrorKind::WriteTimeout)),
        }
    }

    fn write_page(&mut self, snap: &Snapshot, status: ErrorStatus, html: bool, head_only: bool) {
        let date = self.shard.date.line();
        let ctx = WriteCtx {
            date_line: &date,
            head_only,
            close: true,
            keep_alive_10: false,
        };
        snap.pages
            .get(status, html)
            .write_into(&mut self.wbuf, &ctx);
        self.shard.stats.response(status.code());
    }

    /// After a refusal that closes: flush, stop writing, discard what the
    /// peer still sends for a moment so it reads the answer rather than a
    /// reset, then close.
    pub(super) async fn close_after_refusal(&mut self, kind: ErrorKind) -> End {
        if self.flush().await.is_err() {
            return End::Error(kind);
        }
        let _ = self.stream.shutdown().await;
        let deadline = Instant::now() + Duration::from_millis(LINGER_MS);
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            self.rbuf.clear();
            self.pos = 0;
            if self.rbuf.capacity() == 0 {
                self.rbuf.reserve(READ_BUF_BYTES);
            }
            match self.read_more(deadline).await {
                Ok(n) if n > 0 => discarded += n,
                _ => break,
            }
        }
        End::Error(kind)
    }

    /// Answers one complete head, including its body.
    async fn handle(&mut self, head: ParsedHead) -> Result<(), End> {
        let snap = self.shard.snapshot();
        let shard = self.shard.clone();
        let stats = &shard.stats;
        stats.requests.inc();
        self.set_busy(true);
        self.head_deadline = None;
        let base = self.pos;
        let buf = &self.rbuf[base..];
        let facts = RequestFacts {
            host: head.host.clone().map(|r| &buf[r]),
            target: &buf[head.target.clone()],
            path: &buf[head.path.clone()],
            header_count: head.header_count,
            header_bytes: head.header_bytes,
            content_length: match head.framing {
                BodyFraming::Length(n) => Some(n),
                _ => None,
            },
        };
        let decision = {
            let mut scratch = shard.scratch.borrow_mut();
            snap.decide(&facts, &mut scratch)
        };
        self.served += 1;
        if let Verdict::Forward(route, group) = decision.verdict {
            let limits = decision.limits;
            return self.forward(&head, route, group, &snap, limits).await;
        }
        let head_only = head.method == crate::codec::head::Method::Head;
        let (status, refusal_closes) = match decision.verdict {
            Verdict::Respond(a) => (a.status, false),
            Verdict::Redirect(r) => (r.status, false),
            Verdict::Refuse(s) => (s.code(), is_limit(s)),
            Verdict::Forward(..) => (0, false),
        };
        let page = match decision.verdict {
            Verdict::Refuse(s) => Some(snap.pages.get(s, head.wants_html)),
            _ => None,
        };
        let date = self.shard.date.line();
        let resp_start = self.wbuf.len();
        match (decision.verdict, page) {
            (_, Some(p)) => p.write_start(&mut self.wbuf, &date),
            (Verdict::Respond(a), _) => a.write_start(&mut self.wbuf, &date),
            (Verdict::Redirect(r), _) => {
                r.write_start(&mut self.wbuf, &buf[head.path.clone()], &date)
            }
            (Verdict::Refuse(_), None) | (Verdict::Forward(..), _) => {}
        }
        self.pos += head.head_len;
        if refusal_closes {
            end_head(&mut self.wbuf, &close_ctx(&date, head_only));
            if let Some(p) = page {
                if !head_only {
                    self.wbuf.extend_from_slice(p.body());
                }
            }
            stats.response(status);
            return Err(self.close_after_refusal(ErrorKind::Limit).await);
        }
        let body = match head.framing {
            BodyFraming::None => BodyEnd::Ok,
            BodyFraming::Length(n) => self.drain_length(n, head.expect_continue, resp_start).await,
            BodyFraming::Chunked => {
                self.drain_chunked(&decision.limits, head.expect_continue, resp_start)
                    .await
            }
        };
        match body {
            BodyEnd::Ok => {}
            BodyEnd::Refuse(s) => {
                self.wbuf.truncate(resp_start);
                self.write_page(&snap, s, head.wants_html, head_only);
                let kind = if s == ErrorStatus::PayloadTooLarge {
                    ErrorKind::Limit
                } else {
                    ErrorKind::BadRequest
                };
                return Err(self.close_after_refusal(kind).await);
            }
            BodyEnd::End(end) => return Err(end),
        }
        // Decided after the body: a drain that began meanwhile closes too.
        let server = &snap.server;
        let close = head.close
            || self.shard.is_draining()
            || (server.max_requests_per_connection != 0
                && self.served >= server.max_requests_per_connection);
        let ctx = WriteCtx {
            date_line: &date,
            head_only,
            close,
            keep_alive_10: head.keep_alive_10 && !close,
        };
        match (decision.verdict, page) {
            (_, Some(p)) => p.write_end(&mut self.wbuf, &ctx),
            (Verdict::Respond(a), _) => a.write_end(&mut self.wbuf, &ctx),
            _ => end_head(&mut self.wbuf, &ctx),
        }
        self.shard.stats.response(status);
        if close {
            self.flush().await?;
            let _ = self.stream.shutdown().await;
            return Err(End::Done);
        }
        if self.wbuf.len() >= WRITE_FLUSH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Before reading a body the client holds back for `100 Continue`: write
    /// the answers queued before this request, then the interim response.
    async fn send_continue(&mut self, resp_start: usize) -> Result<(), End> {
        let answer = self.wbuf.split_off(resp_start);
        self.wbuf.extend_from_slice(CONTINUE_100);
        self.shard.stats.response(100);
        self.flush().await?;
        self.wbuf = answer;
        Ok(())
    }

    /// Makes room for body bytes: everything before `pos` is consumed.
    fn recycle_for_body(&mut self) {
        if self.pos == self.rbuf.len() {
            self.rbuf.clear();
            self.pos = 0;
        }
    }

    async fn read_body(&mut self) -> Result<usize, End> {
        self.recycle_for_body();
        let ms = self.shard.snapshot().server.body_timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(ms);
        match self.read_more(deadline).await {
            Ok(0) => Err(End::Error(ErrorKind::Io)),
            Ok(n) => Ok(n),
            Err(ReadFail::Timeout) => Err(End::Error(ErrorKind::BodyTimeout)),
            Err(ReadFail::Io) => Err(End::Error(ErrorKind::Io)),
        }
    }

    async fn drain_length(&mut self, len: u64, expect: bool, resp_start: usize) -> BodyEnd {
        let mut remaining = len;
        let avail = (self.rbuf.len() - self.pos) as u64;
        if avail == 0 && expect {
            if let Err(end) = self.send_continue(resp_start).await {
                return BodyEnd::End(end);
            }
        }
        loop {
            let avail = (self.rbuf.len() - self.pos) as u64;
            let take = avail.min(remaining);
            self.pos += take as usize;
            remaining -= take;
            if remaining == 0 {
                return BodyEnd::Ok;
            }
            if let Err(end) = self.read_body().await {
                return BodyEnd::End(end);
            }
        }
    }

    async fn drain_chunked(
        &mut self,
        limits: &RequestLimits,
        expect: bool,
        resp_start: usize,
    ) -> BodyEnd {
        let mut decoder = ChunkedDecoder::new();
        let mut total: u64 = 0;
        if self.pos == self.rbuf.len() && expect {
            if let Err(end) = self.send_continue(resp_start).await {
                return BodyEnd::End(end);
            }
        }
        loop {
            while self.pos < self.rbuf.len() {
                match decoder.step(&self.rbuf[self.pos..]) {
                    Ok(step) => {
                        total = total.saturating_add(step.data.len() as u64);
                        self.pos += step.consumed;
                        if !limits.body_allows(total) {
                            return BodyEnd::Refuse(ErrorStatus::PayloadTooLarge);
                        }
                        if step.done {
                            return BodyEnd::Ok;
                        }
                    }
                    Err(_) => return BodyEnd::Refuse(ErrorStatus::BadRequest),
                }
            }
            if let Err(end) = self.read_body().await {
                return BodyEnd::End(end);
            }
        }
    }
}

fn close_ctx(date: &[u8], head_only: bool) -> WriteCtx<'_> {
    WriteCtx {
        date_line: date,
        head_only,
        close: true,
        keep_alive_10: false,
    }
}

enum ReadFail {
    Timeout,
    Io,
}

fn is_limit(s: ErrorStatus) -> bool {
    matches!(
        s,
        ErrorStatus::PayloadTooLarge | ErrorStatus::UriTooLong | ErrorStatus::HeaderFieldsTooLarge
    )
}
