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
//!
//! The connection's state is this module's: its phases are its child
//! modules, `body` (a body read locally), `forward` (proxying), `local`
//! (a local answer written), `verify`
//! (waiting for a password check), `forwardauth` (what a provider's answer
//! does), `powverify` (proof of work's verify endpoint), `lane` (a quiet or
//! paying host's answer written where its head is parsed), `latency` (an answered
//! request counted in its host's latency histogram), `gone` (whether the
//! client went away while its request waits elsewhere), and nothing else
//! reads or writes a connection's fields.

mod body;
mod forward;
mod forwardauth;
mod gone;
pub(super) mod lane;
mod latency;
mod local;
mod powverify;
mod verify;

use super::accesslog::LogRecord;
use super::client::ClientIo;
use super::end::{End, ReadFail, Upgraded};
use super::leases::{Held, Leases};
use super::prepare::{prepare, ForwardPlan, LocalEnd, PageCopy, Plan, Prep, Resumption};
use super::shard::{Shard, SHRINK_ABOVE_BYTES};
use super::stats::ErrorKind;
use crate::clock;
use crate::codec::head::{header_buf, HeadError, Parse, ParsedHead};
use crate::codec::KnownHost;
use crate::transport::Transport;
use gapura_gate::answer::WriteCtx;
use gapura_gate::chain::Lane;
use gapura_gate::client::Peer;
use gapura_gate::limits::OUTER_MAX_HEAD_BYTES;
use gapura_gate::quota::QuotaTicket;
use gapura_gate::sink::Sink;
use gapura_gate::{ErrorStatus, Snapshot};
use monoio::time::Instant;
use std::rc::Rc;

/// Flush the write buffer early once pipelined answers fill this much.
pub(super) const WRITE_FLUSH_BYTES: usize = 64 * 1024;
/// Unread input discarded at most after a refusal, before closing.
pub(super) const LINGER_BYTES: usize = 256 * 1024;
/// Longest wait for that input.
pub(super) const LINGER_MS: u64 = 1000;

/// What the body handling of one request concluded.
enum BodyEnd {
    /// Body consumed; the connection may continue.
    Ok,
    /// Refuse with this page and close.
    Refuse(ErrorStatus),
    /// Not read (a refusal's): answer, then close.
    Unread,
    End(End),
}

/// What the buffered bytes make of the next request. Small, and an
/// explicit one-byte tag read as it was written (as [`Plan`]'s): a head
/// with a plan to carry out is handed over beside it.
#[repr(u8)]
enum Step {
    /// No complete head yet.
    More,
    /// The parser refused the head.
    Refuse(HeadError),
    /// A complete head and what it decided, in the caller's place for them.
    Planned,
    /// A local answer written whole; its leases are held until the flush
    /// that sends it ([`Conn::answered_at_once`]).
    Answered,
    /// A local answer written whole; the buffer goes out first, its
    /// leases with it ([`Conn::answered_at_once`]).
    Flush(Option<Leases>),
}

pub(super) struct Conn<S: Transport> {
    /// The client's stream, buffers and head deadline.
    io: ClientIo<S>,
    shard: Rc<Shard>,
    /// Upstream request bytes (proxying only; allocated on first use).
    ubuf: Vec<u8>,
    /// Upstream response bytes (proxying only; allocated on first use).
    urbuf: Vec<u8>,
    /// An HTTP/2 upstream's request head (allocated on first use).
    uhead: Option<Box<crate::exchange::uphead::UpHead>>,
    /// Why the current attempt at an upstream got no answer, where its
    /// phases could tell (`forward`: the page's words and the log line).
    upstream_why: Option<gapura_gate::UpstreamWhy>,
    busy: bool,
    served: u64,
    /// The last `Host` value the parser found valid on this connection.
    known_host: KnownHost,
    /// The head in the buffer, suspended for a check made off the
    /// decision, and how it resumes. Boxed: rare (after a password check
    /// or a provider's answer), and every head moves this field into its
    /// decision.
    resume: Option<Box<Resumption>>,
    /// The leases of answers written into `wbuf` and not yet sent.
    held: Held,
    /// The connection's request bucket (a host's `connection_rate`),
    /// shared by the streams of an HTTP/2 connection.
    bucket: Rc<std::cell::Cell<gapura_gate::quota::Bucket>>,
    /// The connection's serial on its shard (the access log's `connection`).
    serial: u64,
    /// The current request's access log facts (while the profile logs).
    log: Option<Box<LogRecord>>,
    /// The current request's host and when its head was complete (its
    /// answer's latency).
    req_host: Option<gapura_gate::HostId>,
    req_start: Instant,
    /// A reading of the clock taken in this wake of the connection's task
    /// (when its bytes came in, or after a wait): requests decided and
    /// answered before the task waits again share it, one clock read for
    /// a batch of pipelined requests. `None` once the task has waited.
    woke_at: Option<Instant>,
    /// The peer the gate sees: the TCP peer, or a trusted PROXY header's source.
    client_peer: Peer,
    /// The connection's place in its prefix's concurrency limit.
    /// The connection's place on its shard (`None` for an HTTP/2 stream:
    /// its connection's driver holds it).
    place: Option<super::place::Place>,
    /// The current request's page variables, kept for an answer written
    /// after its head's bytes are gone (an upstream error replaced).
    page_vars: Option<Box<PageCopy>>,
    /// The listener's `Alt-Svc`, where it serves HTTP/3 too.
    alt_svc: Option<&'static gapura_gate::sink::Lines>,
}

impl<S: Transport> Conn<S> {
    pub(super) fn new(
        io: ClientIo<S>,
        shard: Rc<Shard>,
        client_peer: Peer,
        place: Option<super::place::Place>,
        bucket: Rc<std::cell::Cell<gapura_gate::quota::Bucket>>,
        serial: u64,
    ) -> Conn<S> {
        Conn {
            io,
            shard,
            ubuf: Vec::new(),
            uhead: None,
            upstream_why: None,
            urbuf: Vec::new(),
            busy: false,
            served: 0,
            resume: None,
            held: Held::default(),
            bucket,
            serial,
            log: None,
            req_host: None,
            req_start: clock::precise_now(),
            woke_at: None,
            client_peer,
            place,
            page_vars: None,
            known_host: KnownHost::default(),
            alt_svc: None,
        }
    }

    /// Its answers carry the listener's `Alt-Svc`.
    pub(super) fn with_alt_svc(
        mut self,
        alt_svc: Option<&'static gapura_gate::sink::Lines>,
    ) -> Self {
        self.alt_svc = alt_svc;
        self
    }

    /// Serves an HTTP/2 stream's one request; the connection's counters
    /// are its driver's.
    pub(super) async fn serve_stream(mut self) -> End {
        let end = self.run().await;
        self.set_busy(false);
        end
    }

    /// Counts the connection's end, after the tunnel's whole life when it
    /// was upgraded.
    pub(super) async fn finish(mut self, end: End) {
        let shard = self.shard.clone();
        let place = self.place.take();
        if let End::Upgrade(up) = end {
            let Upgraded {
                upstream,
                pending,
                leases,
                websocket,
                host,
            } = *up;
            let client_pending = self.io.take_unread();
            let idle_ms = shard.snapshot().server.idle_timeout_ms;
            shard.stats.upgrades.inc();
            self.held.release_all();
            let client = self.client_peer.addr();
            let messages = websocket.map(|limits| super::tunnel::Messages {
                limits,
                shard: shard.clone(),
                bucket: Default::default(),
                host,
                client,
            });
            let (stream, _) = self.io.into_stream();
            // Its own allocation: the connection's task stays small while idle.
            Box::pin(super::tunnel::tunnel(
                stream,
                client_pending,
                upstream,
                pending,
                idle_ms,
                messages,
            ))
            .await;
            // The request ends with its tunnel, and the connection too:
            // its place drops.
            drop(leases);
            drop(place);
            return;
        }
        if let Some(place) = place {
            place.end(&end);
        }
    }

    pub(super) fn set_busy(&mut self, busy: bool) {
        if self.busy != busy {
            self.busy = busy;
            self.shard.add_busy(if busy { 1 } else { -1 });
        }
    }

    pub(super) async fn run(&mut self) -> End {
        loop {
            let snap = self.shard.snapshot();
            // A head with a plan to carry out lands here, so that what the
            // common steps move is small.
            let mut planned = None;
            // The gate's clock, read once for the answers written at once.
            let mut gate_ms = None;
            let mut step = self.decide(&snap, &mut planned, &mut gate_ms);
            // The answers written at once of a pipelined batch share the
            // snapshot the batch began with.
            let mut instant = latency::Instant0::default();
            while let Step::Answered = step {
                self.finish_log(&snap);
                self.record_latency_in_wake(&mut instant);
                step = self.decide(&snap, &mut planned, &mut gate_ms);
            }
            instant.count(&self.shard);
            match step {
                Step::More => {
                    // No snapshot held while the connection waits.
                    drop(snap);
                    self.woke_at = None;
                    if let Err(end) = self.wait_for_more().await {
                        return end;
                    }
                }
                Step::Refuse(e) => return self.refuse_unparsed(e).await,
                // Taken by the loop above.
                Step::Answered => {}
                Step::Flush(leases) => {
                    let done = self.after_local_answer(false, leases).await;
                    self.woke_at = None;
                    self.finish_log(&snap);
                    self.record_latency();
                    if let Err(end) = done {
                        return end;
                    }
                }
                Step::Planned => {
                    let Some((head, plan)) = planned.take() else {
                        return End::Error(ErrorKind::BadRequest);
                    };
                    match plan {
                        Plan::Verify { .. } | Plan::Authenticate { .. } => {
                            // The head stays in the buffer, decided again
                            // once the check is made.
                            self.woke_at = None;
                            if let Err(end) = Box::pin(self.defer(&snap, plan, &head)).await {
                                return end;
                            }
                        }
                        Plan::Drop => {
                            self.shard.stats.gate_drops.inc();
                            self.finish_log(&snap);
                            return End::Done;
                        }
                        // By reference: each field is then read as it was
                        // written, not copied whole straight after the
                        // writes (a copy that straddles them waits for them
                        // to reach the cache).
                        ref plan => {
                            self.io.consume(head.head_len);
                            // Polled where it is made (a future moved into a
                            // wrapper would be copied whole), noting whether it
                            // waited: one that did not took no time but the CPU's.
                            let (done, waited) = {
                                let mut waited = false;
                                let mut exec = std::pin::pin!(self.execute(&snap, &head, plan));
                                let done = std::future::poll_fn(|cx| {
                                    let polled = std::future::Future::poll(exec.as_mut(), cx);
                                    waited |= polled.is_pending();
                                    polled
                                })
                                .await;
                                (done, waited)
                            };
                            if waited {
                                self.woke_at = None;
                            }
                            self.finish_log(&snap);
                            self.record_latency();
                            if let Err(end) = done {
                                return end;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Parses the buffered head and decides it. Not async: the header
    /// array (4 KiB) lives on this call's stack, not in the connection
    /// task's state across its awaits.
    fn decide<'s>(
        &mut self,
        snap: &'s Snapshot,
        planned: &mut Option<(ParsedHead, Plan<'s>)>,
        gate_ms: &mut Option<u64>,
    ) -> Step {
        let mut headers = header_buf::<{ super::bounds::REQUEST_LINES }>();
        let before = self.io.bytes_out();
        // The head is read from the unread bytes while its answer may be
        // written into the write buffer.
        let (stream, unread, wbuf) = self.io.head_view();
        let parsed = stream.head(
            unread,
            &mut headers,
            &super::bounds::HEAD_BOUNDS,
            &mut self.known_host,
        );
        // The head is read where the parser wrote it, not moved out.
        let (head, lines) = match &parsed {
            Parse::Partial => return Step::More,
            Parse::Error(e) => return Step::Refuse(*e),
            Parse::Complete(head, lines) => (head, *lines),
        };
        let mut decided = None;
        if self.resume.is_none() {
            let conn = (&*self.shard, self.served, self.client_peer);
            match lane::lane_answer::<S>(conn, snap, (head, unread, lines), gate_ms) {
                Some(Lane::Answer {
                    host,
                    answer,
                    rest,
                    ticket,
                }) => {
                    let date = self.shard.date.line();
                    match wbuf.h1() {
                        Some(bytes) => super::put::extend(bytes, [answer.head(), &date, rest]),
                        None => {
                            answer.write_start(wbuf, &date);
                            wbuf.rest(rest);
                        }
                    }
                    self.lane_answered(host, head.head_len, answer.status);
                    return self.answered_at_once(ticket);
                }
                Some(Lane::Decided(d)) => decided = Some(d),
                None => {}
            }
        }
        let resume = self.resume.take();
        if resume.is_none() {
            self.shard.stats.requests.inc();
            self.served += 1;
            // Not `self.now()`: the buffers are borrowed.
            self.req_start = *self.woke_at.get_or_insert_with(clock::precise_now);
            // Asked here: without an access log nothing of it is computed.
            if snap.server.access_log.is_some() {
                begin_log(
                    &mut self.log,
                    &self.shard,
                    (before, self.serial),
                    snap,
                    (self.req_start.into_std(), stream.request_id()),
                    stream.protocol(),
                );
            }
        }
        let request_id = self
            .log
            .as_deref()
            .map(|r| r.request_id)
            .or_else(|| stream.request_id());
        let plan = prepare(
            Prep {
                shard: &self.shard,
                buf: unread,
                wbuf,
                ubuf: &mut self.ubuf,
                uhead: &mut self.uhead,
                peer: self.client_peer,
                resume,
                page_vars: &mut self.page_vars,
                connection: &self.bucket,
                log: if snap.server.access_log.is_some() {
                    self.log.as_deref_mut()
                } else {
                    None
                },
                request_id,
                host_out: &mut self.req_host,
                tls: S::TLS,
                gate_ms,
                decided,
            },
            snap,
            head,
            lines,
        );
        self.set_busy(true);
        self.io.head_done();
        if let Plan::Local(local) = &plan {
            self.log_status(local.status);
        }
        // A local answer without a body is written here, not through a
        // future: a pipelined batch of them is answered without awaiting,
        // and the plan is read where it was written, never moved.
        match self.answer_now(snap, head, &plan) {
            Some(step) => step,
            None => {
                *planned = Some((head.clone(), plan));
                Step::Planned
            }
        }
    }

    /// A head the parser refused (400, 414, 431): it pays its budgets all
    /// the same, gets its page, and the connection closes.
    async fn refuse_unparsed(&mut self, e: HeadError) -> End {
        let (status, kind) = match e {
            HeadError::Malformed(_) => (ErrorStatus::BadRequest, ErrorKind::BadRequest),
            HeadError::UrlTooLong => (ErrorStatus::UriTooLong, ErrorKind::Limit),
            HeadError::TooLarge => (ErrorStatus::HeaderFieldsTooLarge, ErrorKind::Limit),
        };
        self.shard.stats.requests.inc();
        let snap = self.shard.snapshot();
        let now_ms = self.shard.now_ms();
        let paid = snap.pay_unparsed(self.client_peer, &mut self.shard.gate_mut(), now_ms);
        self.hold(paid).await;
        self.begin_log(&snap);
        self.write_page(&snap, status, false, false);
        if let Some(rec) = self.log.as_deref_mut() {
            rec.client = Some(self.client_peer.addr());
            rec.verdict = "refuse";
            rec.step = "parser";
        }
        self.finish_log(&snap);
        self.close_after_refusal(kind).await
    }

    /// No complete head is buffered: flush answers, then read more under the
    /// idle or header deadline.
    async fn wait_for_more(&mut self) -> Result<(), End> {
        if self.io.out_len() > 0 {
            self.flush().await?;
        }
        let idle = self.io.drained();
        if idle {
            self.shard.return_buf(self.io.take_out());
            self.io.start_over(SHRINK_ABOVE_BYTES);
            if !self.shard.is_draining() {
                self.set_busy(false);
            } else if self.served > 0 {
                self.set_busy(false);
                return Err(End::Done);
            } else {
                // A connection accepted as the drain began stays busy
                // until its first request is answered: its client is owed
                // an answer (the drain's timeout bounds the wait).
                self.set_busy(true);
            }
        }
        self.io.make_room(OUTER_MAX_HEAD_BYTES);
        let server = &self.shard.snapshot().server;
        let deadline = if idle {
            clock::deadline(server.idle_timeout_ms)
        } else {
            self.io.head_deadline(server.header_timeout_ms)
        };
        let header_timeout_ms = server.header_timeout_ms;
        let read = if idle {
            self.io.read_idle(deadline, &self.shard).await
        } else {
            self.read_more(deadline).await
        };
        match read {
            Ok(0) => Err(if idle {
                End::Done
            } else {
                End::Error(ErrorKind::Io)
            }),
            Ok(_) => {
                if idle {
                    self.io.set_out(self.shard.lend_buf());
                    self.set_busy(true);
                    self.io.head_begins(header_timeout_ms);
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
        self.io.read_client(deadline).await
    }

    /// Reads into the spare capacity of `rbuf` ([`ClientIo::read_more`]).
    pub(super) async fn read_more(&mut self, deadline: Instant) -> Result<usize, ReadFail> {
        self.io.read_more(deadline).await
    }

    /// Sends the pending answers; their requests end here.
    pub(super) async fn flush(&mut self) -> Result<(), End> {
        let ms = self.shard.snapshot().server.write_timeout_ms;
        self.shard.stats.writes.inc();
        self.io.flush(ms).await?;
        self.held.release_all();
        Ok(())
    }

    pub(super) fn write_page(
        &mut self,
        snap: &Snapshot,
        status: ErrorStatus,
        html: bool,
        head_only: bool,
    ) {
        let date = self.shard.date.line();
        let ctx = WriteCtx {
            date_line: &date,
            head_only,
            close: true,
            keep_alive_10: false,
        };
        let (log, shard) = (&self.log, &self.shard);
        self.io.write_page(snap.pages.get(status, html), &ctx, || {
            request_id(log, shard)
        });
        self.shard.stats.response(status.code());
        self.log_status(status.code());
    }

    /// After a refusal that closes: flush, stop writing, discard what the
    /// peer still sends for a moment so it reads the answer rather than a
    /// reset, then close.
    pub(super) async fn close_after_refusal(&mut self, kind: ErrorKind) -> End {
        if self.flush().await.is_err() {
            return End::Error(kind);
        }
        self.io.close_write().await;
        let deadline = clock::deadline(LINGER_MS);
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            self.io.discard_read();
            match self.read_more(deadline).await {
                Ok(n) if n > 0 => discarded += n,
                _ => break,
            }
        }
        End::Error(kind)
    }

    /// Carries out a plan: the body, then the rest of the answer, or the
    /// forwarding.
    async fn execute(
        &mut self,
        snap: &Snapshot,
        head: &ParsedHead,
        plan: &Plan<'_>,
    ) -> Result<(), End> {
        let leases =
            |ticket: Option<QuotaTicket>| ticket.map(|t| Leases::new(self.shard.clone(), t));
        match plan {
            Plan::RefuseClose(kind, ticket) => {
                // Held until the refusal is sent.
                let _leases = leases(*ticket);
                Err(self.close_after_refusal(*kind).await)
            }
            Plan::Drop | Plan::Verify { .. } | Plan::Authenticate { .. } => Err(End::Done),
            Plan::Forward(f) => {
                let held = leases(f.ticket);
                // The exchange's state in one of the shard's reused
                // allocations: an idle connection's task does not carry it.
                let slots = self.shard.upstream.slots.clone();
                slots.place(self.forward_plan(snap, head, f, held)).await
            }
            Plan::Local(local) => {
                let held = leases(local.ticket);
                if let LocalEnd::PowVerify(pow, client) = local.end {
                    return self.answer_pow_verify(snap, head, pow, client, held).await;
                }
                self.answer_local(snap, head, local, held).await
            }
        }
    }

    /// Forwards along the plan's route, its leases held for the request's
    /// life (a tunnel's whole life after an upgrade).
    async fn forward_plan(
        &mut self,
        snap: &Snapshot,
        head: &ParsedHead,
        f: &ForwardPlan<'_>,
        held: Option<Leases>,
    ) -> Result<(), End> {
        // The upstream's time is read only for a log line that writes it.
        let started = self
            .log
            .as_deref()
            .filter(|r| r.active())
            .map(|_| std::time::Instant::now());
        let forwarded = self
            .forward(head, f.route, f.group, snap, f.limits, f.extras)
            .await;
        if let (Some(rec), Some(started)) = (self.log.as_deref_mut(), started) {
            rec.upstream_ms = Some(started.elapsed().as_millis() as u64);
        }
        match forwarded {
            // The tunnel holds them for its life.
            Err(End::Upgrade(mut up)) => {
                up.leases = held;
                up.websocket = f.extras.and_then(|e| e.websocket);
                if up.websocket.is_some() {
                    up.host = self
                        .req_host
                        .and_then(|h| snap.entries.get(h as usize))
                        .map(|e| e.label.clone())
                        .unwrap_or_default();
                }
                Err(End::Upgrade(up))
            }
            // An answer of the proxy's own still in the buffer.
            Ok(()) if self.io.out_len() > 0 => {
                self.hold_guard(held).await?;
                Ok(())
            }
            other => other,
        }
    }

    /// Starts the access log record of a new request (when the profile
    /// logs): its start, its id, the bytes before it.
    fn begin_log(&mut self, snap: &Snapshot) {
        // Without an access log, no clock read and no id.
        if snap.server.access_log.is_none() {
            return;
        }
        let before = self.io.bytes_out();
        begin_log(
            &mut self.log,
            &self.shard,
            (before, self.serial),
            snap,
            (std::time::Instant::now(), self.io.stream().request_id()),
            self.io.stream().protocol(),
        );
    }

    /// Writes the current request's access log line.
    pub(super) fn finish_log(&mut self, snap: &Snapshot) {
        let (Some(settings), Some(rec)) = (&snap.server.access_log, self.log.as_deref()) else {
            return;
        };
        if !rec.active() {
            return;
        }
        let bytes = (self.io.bytes_out()).saturating_sub(rec.sent_before);
        self.shard.log_request(settings, rec, bytes);
        if let Some(rec) = self.log.as_deref_mut() {
            rec.end();
        }
    }

    /// The status of the current request's answer, for its log line.
    pub(super) fn log_status(&mut self, status: u16) {
        if let Some(rec) = self.log.as_deref_mut() {
            rec.status = status;
        }
    }

    /// Keeps an answer's leases until the flush that sends it (flushing
    /// first when the connection already holds as many as it keeps).
    pub(super) async fn hold_guard(&mut self, leases: Option<Leases>) -> Result<(), End> {
        if let Some(l) = leases {
            if self.held.is_full() {
                self.flush().await?;
            }
            self.held.push(l);
        }
        Ok(())
    }

    /// [`Conn::hold_guard`] for a ticket of an answer about to be flushed
    /// by a close (a failed flush ends the connection, and the guard with it).
    async fn hold(&mut self, ticket: Option<QuotaTicket>) {
        let leases = ticket.map(|t| Leases::new(self.shard.clone(), t));
        let _ = self.hold_guard(leases).await;
    }
}

/// Starts the access log record of a new request (when the profile logs):
/// its start, its id (the transport's when it gave the request one, else
/// a new one), the connection's serial and the bytes sent and queued on it
/// before it.
fn begin_log(
    log: &mut Option<Box<LogRecord>>,
    shard: &Shard,
    (before, serial): (u64, u64),
    snap: &Snapshot,
    (start, id): (std::time::Instant, Option<[u8; 24]>),
    protocol: &'static str,
) {
    if snap.server.access_log.is_none() {
        return;
    }
    let id = id.unwrap_or_else(|| shard.request_id());
    let rec = log
        .get_or_insert_with(Default::default)
        .begin(before, id, start);
    rec.connection = serial;
    rec.protocol = protocol;
}

/// The current request's id: the access log's while the profile logs, so a
/// page, the upstream's header and the log line agree; else a fresh one.
pub(super) fn request_id(log: &Option<Box<LogRecord>>, shard: &Shard) -> [u8; 24] {
    match log.as_deref() {
        Some(rec) if rec.active() => rec.request_id,
        _ => shard.request_id(),
    }
}
