//! A local answer: the host's own answer, a redirect or a refusal written
//! by the shard. One with no body to read that keeps the connection open
//! is written whole where its plan is made, without awaiting
//! (`answer_now`); the others read or drain their body first
//! (`answer_local`). Either way the answer's leases are held until the
//! flush that sends it.

use super::{request_id, BodyEnd, Conn, Step, WRITE_FLUSH_BYTES};
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::server::end::End;
use crate::server::leases::Leases;
use crate::server::prepare::{LocalEnd, LocalPlan, Plan};
use crate::server::stats::ErrorKind;
use crate::transport::Transport;
use gapura_gate::answer::{end_head, WriteCtx};
use gapura_gate::quota::QuotaTicket;
use gapura_gate::sink::{Sink, Wide};
use gapura_gate::Snapshot;

impl<S: Transport> Conn<S> {
    /// A local answer that reads no body and keeps the connection open,
    /// its head consumed and the answer written whole without awaiting,
    /// then held or flushed ([`Self::answered_at_once`]). Anything else is
    /// `None`, for [`Conn::execute`], with nothing written.
    pub(super) fn answer_now(
        &mut self,
        snap: &Snapshot,
        head: &ParsedHead,
        plan: &Plan<'_>,
    ) -> Option<Step> {
        let Plan::Local(local) = plan else {
            return None;
        };
        if head.framing != BodyFraming::None
            || matches!(local.end, LocalEnd::PowVerify(..))
            || local.close
            || self.closes_after(snap, head)
        {
            return None;
        }
        self.io.consume(head.head_len);
        if S::TLS && matches!(local.end, LocalEnd::Answer(_) | LocalEnd::HeadOnly) {
            let wide = self.wide(snap);
            wide.write(self.io.answer());
        }
        // The host's own keep-alive answer is one copy; the rest have their
        // end written by the general path.
        let rest = match local.end {
            LocalEnd::Answer(a) if !head.keep_alive_10 && head.method != Method::Head => {
                a.keep_alive_rest()
            }
            _ => None,
        };
        match rest {
            Some(rest) => self.io.answer().rest(rest),
            None => self.end_local_answer(local.end, head, false),
        }
        self.shard.stats.response(local.status);
        Some(self.answered_at_once(local.ticket))
    }

    /// After an answer written at once, with the leases of `ticket`: the
    /// next head, the leases held until the flush that sends the answer
    /// ([`Step::Answered`]); or that flush first when the buffer is full, a
    /// shared body must go out, or the connection holds as many leases as
    /// it keeps ([`Step::Flush`]).
    #[inline(always)]
    pub(super) fn answered_at_once(&mut self, ticket: Option<QuotaTicket>) -> Step {
        if self.io.out_len() >= WRITE_FLUSH_BYTES
            || self.io.has_shared()
            || (ticket.is_some() && self.held.is_full())
        {
            return Step::Flush(ticket.map(|t| Leases::new(self.shard.clone(), t)));
        }
        if let Some(t) = ticket {
            self.held.push_ticket(&self.shard, t);
        }
        Step::Answered
    }

    /// A local answer: drains the body against the limits, writes the rest
    /// of the answer, and keeps its leases until it is sent.
    pub(super) async fn answer_local(
        &mut self,
        snap: &Snapshot,
        head: &ParsedHead,
        local: &LocalPlan<'_>,
        leases: Option<Leases>,
    ) -> Result<(), End> {
        let head_only = head.method == Method::Head;
        let resp_start = local.resp_start;
        let body = match head.framing {
            BodyFraming::None => BodyEnd::Ok,
            // A refusal invites no body, and reads only a small one
            // (`decided::keeps_refused_body`); else it closes unread.
            _ if !local.admitted && local.close => BodyEnd::Unread,
            BodyFraming::Length(n) if !local.admitted => {
                self.drain_length(n, false, resp_start).await
            }
            BodyFraming::Length(n) => self.drain_length(n, head.expect_continue, resp_start).await,
            BodyFraming::Chunked => {
                self.drain_chunked(&local.limits, head.expect_continue, resp_start)
                    .await
            }
        };
        let unread = matches!(body, BodyEnd::Unread);
        match body {
            BodyEnd::Ok | BodyEnd::Unread => {}
            BodyEnd::Refuse(s) => {
                Sink::truncate(self.io.answer(), resp_start);
                return Err(self.refuse_body(snap, s, head.wants_html, head_only).await);
            }
            BodyEnd::End(end) => return Err(end),
        }
        let close = local.close || self.closes_after(snap, head);
        if S::TLS && matches!(local.end, LocalEnd::Answer(_) | LocalEnd::HeadOnly) {
            // The head so far ends with a whole header line.
            let wide = self.wide(snap);
            wide.write(self.io.answer());
        }
        self.end_local_answer(local.end, head, close);
        self.shard.stats.response(local.status);
        if unread {
            // Held until the answer is sent.
            let _leases = leases;
            let _ = self.close_after_refusal(ErrorKind::Limit).await;
            return Err(End::Done);
        }
        self.after_local_answer(close, leases).await
    }

    /// Whether the connection closes after this request's answer, decided
    /// once its body is read (a drain that began meanwhile closes too).
    pub(super) fn closes_after(&self, snap: &Snapshot, head: &ParsedHead) -> bool {
        let server = &snap.server;
        head.close
            || self.shard.is_draining()
            || (server.max_requests_per_connection != 0
                && self.served >= server.max_requests_per_connection)
    }

    /// After a local answer is written: close, flush a full buffer, or
    /// hold its leases until the flush that sends it.
    pub(super) async fn after_local_answer(
        &mut self,
        close: bool,
        leases: Option<Leases>,
    ) -> Result<(), End> {
        if close {
            self.flush().await?;
            self.io.close_write().await;
            return Err(End::Done);
        }
        if self.io.out_len() >= WRITE_FLUSH_BYTES || self.io.has_shared() {
            // A shared body goes out now: what a pipelined request writes
            // next must follow it.
            self.flush().await?;
        } else {
            self.hold_guard(leases).await?;
        }
        Ok(())
    }

    /// The answer-wide fields of the current request: its host's
    /// `Strict-Transport-Security` over TLS, the listener's `Alt-Svc`.
    pub(super) fn wide<'s>(&self, snap: &'s Snapshot) -> Wide<'s> {
        if !S::TLS {
            return Wide::default();
        }
        let host = self.req_host.and_then(|h| snap.entries.get(h as usize));
        Wide::new(host.map(|e| &e.extras.https.hsts), self.alt_svc)
    }

    /// Writes what a local answer still lacks once its body is read: the
    /// connection line, the blank line, the body, the request id.
    fn end_local_answer(&mut self, end: LocalEnd<'_>, head: &ParsedHead, close: bool) {
        let head_only = head.method == Method::Head;
        // The Date line is in the head already; only a page's own start
        // (a rate-limited answer) writes one here.
        let ctx = WriteCtx {
            date_line: b"",
            head_only,
            close,
            keep_alive_10: head.keep_alive_10 && !close,
        };
        match end {
            LocalEnd::Answer(a) => match a.shared_body().filter(|_| !head_only) {
                // A large body: sent from the snapshot's bytes, not copied.
                Some(body) => {
                    end_head(self.io.answer(), &ctx);
                    self.io.follow_with(body.clone());
                }
                None => {
                    let id = || request_id(&self.log, &self.shard);
                    let out = self.io.answer();
                    a.write_end(out, &ctx);
                    a.stamp(out.written_mut(), head_only, id);
                }
            },
            LocalEnd::HeadOnly => end_head(self.io.answer(), &ctx),
            LocalEnd::RateLimited(page, retry_after_s) => {
                let date = self.shard.date.line();
                let ctx = WriteCtx {
                    date_line: &date,
                    ..ctx
                };
                let id = || request_id(&self.log, &self.shard);
                let out = self.io.answer();
                page.write_into(out, retry_after_s, &ctx);
                page.stamp(out.written_mut(), head_only, id);
            }
            LocalEnd::Written | LocalEnd::PowVerify(..) => {}
        }
    }
}
