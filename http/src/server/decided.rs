//! A decided head's plan: where its answer is written ([`Out`]) and what
//! the chain's verdict makes of it ([`Decided`]): the upstream head of a
//! forward, a forward-auth call's head, or a local answer (the host's, a
//! refusal's page, proof of work's pages), written before the body is read
//! where it can be. Synchronous, like `prepare`; no allocation once the
//! buffers have capacity.

use super::accesslog::LogRecord;
use super::prepare::{close_ctx, is_limit, ForwardPlan, LocalEnd, LocalPlan, PageCopy, Plan};
use super::shard::Shard;
use super::stats::ErrorKind;
use crate::codec::head::{Method, ParsedHead};
use crate::exchange::uphead::UpHead;
use crate::upstream::request::{write_request_head, Forwarding};
use gapura_gate::answer::WriteCtx;
use gapura_gate::chain::Request;
use gapura_gate::client::HeaderLines;
use gapura_gate::custom_pages::PageVars;
use gapura_gate::pow::{write_challenge_page, write_non_browser_page, Mint};
use gapura_gate::quota::QuotaTicket;
use gapura_gate::sink::Sink;
use gapura_gate::snapshot::{PowAsk, Verdict};
use gapura_gate::upstream::{Route, UpstreamGroup, UpstreamProtocol};
use gapura_gate::Answer;
use gapura_gate::{ErrorStatus, Snapshot};

/// Where a decided head's answer is written, and what every answer reads.
pub(super) struct Out<'a, W: Sink> {
    /// Where Gapura's own answers are written (the connection's write
    /// buffer, or an HTTP/2 stream's parts).
    pub wbuf: &'a mut W,
    /// Where this request's answer starts in `wbuf` ([`Sink::mark`]).
    pub resp_start: usize,
    pub head: &'a ParsedHead,
    pub date: &'a [u8],
    /// The head asks to close, or the shard drains.
    pub close_now: bool,
    pub shard: &'a Shard,
    /// The access log's id for the request, when it has one.
    pub known_id: Option<[u8; 24]>,
}

impl<'a, W: Sink> Out<'a, W> {
    fn head_only(&self) -> bool {
        self.head.method == Method::Head
    }

    /// The request's id: the access log's when it has one, so the page,
    /// the upstream's header and the log line agree.
    fn new_id(&self) -> [u8; 24] {
        self.known_id.unwrap_or_else(|| self.shard.request_id())
    }

    /// The connection as the head leaves it.
    fn whole(&self) -> WriteCtx<'a> {
        WriteCtx {
            date_line: self.date,
            head_only: self.head_only(),
            close: self.close_now,
            keep_alive_10: self.head.keep_alive_10 && !self.close_now,
        }
    }

    fn closing(&self) -> WriteCtx<'a> {
        close_ctx(self.date, self.head_only())
    }

    /// Writes `answer` whole under `ctx` with the request's id; its status.
    fn stamped(&mut self, answer: &Answer, ctx: &WriteCtx<'_>) -> u16 {
        answer.write_into(self.wbuf, ctx);
        let id = || self.known_id.unwrap_or_else(|| self.shard.request_id());
        answer.stamp(self.wbuf.written_mut(), ctx.head_only, id);
        answer.status
    }

    /// A refusal is coming: unless its body is one the connection reads
    /// to stay open ([`keeps_refused_body`]), the answer closes it.
    pub(super) fn refuse_body(&mut self) {
        if !keeps_refused_body(self.head) {
            self.close_now = true;
        }
    }

    /// The answer to a head whose password check failed (the list's
    /// challenge again) or found the line full (its 429).
    pub(super) fn refused_after_check<'s, H: HeaderLines + ?Sized>(
        &mut self,
        snap: &'s Snapshot,
        (list, busy): (u32, bool),
        paid: Option<QuotaTicket>,
        log: Option<&mut LogRecord>,
        req: &Request<'_, H>,
    ) -> Plan<'s> {
        self.refuse_body();
        let l = &snap.gate.access_lists[list as usize];
        let page = if busy {
            l.busy_page()
        } else {
            l.challenge_page()
        };
        let whole = self.whole();
        let status = self.stamped(page.for_client(self.head.wants_html), &whole);
        if let (Some(rec), Some(settings)) = (log, &snap.server.access_log) {
            rec.set_request(
                req.method,
                req.host.unwrap_or(b""),
                req.path,
                settings.log_query,
            );
            rec.client = Some(req.peer.addr());
            rec.verdict = if busy { "refuse" } else { "challenge" };
            rec.step = gapura_gate::chain::Block::Access.name();
        }
        Plan::Local(LocalPlan {
            end: LocalEnd::Written,
            status,
            resp_start: self.resp_start,
            limits: snap.default_limits,
            ticket: paid,
            close: self.close_now,
            admitted: false,
        })
    }

    /// A refusal written whole that closes the connection once sent.
    fn refuse_close<'s>(
        &mut self,
        status: u16,
        kind: ErrorKind,
        ticket: Option<QuotaTicket>,
        log: Option<&mut LogRecord>,
    ) -> Plan<'s> {
        self.shard.stats.response(status);
        if let Some(rec) = log {
            rec.status = status;
        }
        Plan::RefuseClose(kind, ticket)
    }
}

/// The most body a refused request may declare and still keep its
/// connection: it is read and discarded (within the body timeout). A
/// larger body, one without a length (chunked) or one held back for
/// `Expect: 100-continue` is never invited or read: the refusal says
/// `Connection: close`, and after it the connection only lingers
/// (`conn::LINGER_BYTES`, `conn::LINGER_MS`) so the client reads the
/// answer rather than a reset.
pub(super) const REFUSED_BODY_BYTES: u64 = 64 * 1024;

/// Whether a refused request's body is read so its connection stays open.
pub(super) fn keeps_refused_body(head: &ParsedHead) -> bool {
    match head.framing {
        crate::codec::head::BodyFraming::None => true,
        crate::codec::head::BodyFraming::Length(n) => {
            n <= REFUSED_BODY_BYTES && !head.expect_continue
        }
        crate::codec::head::BodyFraming::Chunked => false,
    }
}

/// A head and what the chain decided for it.
pub(super) struct Decided<'d, 's, H: HeaderLines + ?Sized> {
    pub snap: &'s Snapshot,
    pub req: &'d Request<'d, H>,
    pub lines: &'d [httparse::Header<'d>],
    /// The buffer from the head's first byte.
    pub buf: &'d [u8],
    /// `CF-Ray` of a trusted Cloudflare peer, for pages.
    pub cf_ray: &'d [u8],
    pub entry: Option<&'s gapura_gate::snapshot::HostEntry>,
    pub decision: &'d gapura_gate::chain::Decision<'s>,
    pub ticket: Option<QuotaTicket>,
    /// A provider's identity lines from a call made before this decision.
    pub identity: Option<&'d [u8]>,
}

/// An HTTP/2 upstream's request head, into `uhead` (made on first use).
/// Not inlined: the HTTP/1.1 path's forwarding stays as small as it was.
#[inline(never)]
fn write_fields(
    raw: &[u8],
    lines: &[httparse::Header<'_>],
    fwd: &Forwarding<'_>,
    uhead: &mut Option<Box<UpHead>>,
    new_id: &mut dyn FnMut(&mut Vec<u8>),
) -> bool {
    let h = uhead.get_or_insert_with(Box::default);
    h.clear();
    write_request_head(raw, lines, fwd, &mut **h, new_id)
}

impl<'d, 's, H: HeaderLines + ?Sized> Decided<'d, 's, H> {
    /// A page's `{requestId}`, `{host}` and `{cfRay}`.
    fn vars<'x>(&'x self, id: &'x [u8; 24]) -> PageVars<'x> {
        PageVars {
            request_id: id,
            host: self.req.host.unwrap_or(b""),
            cf_ray: self.cf_ray,
        }
    }

    /// Forwarding: the upstream head written into `ubuf` as HTTP/1.1
    /// text for a group that speaks HTTP/1.1, into `uhead` as an HTTP/2
    /// request's fields for one that speaks HTTP/2, both for `auto` (a
    /// head it cannot be written for is 400 and closes).
    pub(super) fn forward<W: Sink>(
        &self,
        out: &mut Out<'_, W>,
        (ubuf, uhead): (&mut Vec<u8>, &mut Option<Box<UpHead>>),
        page_vars: &mut Option<Box<PageCopy>>,
        (route, group): (&'s Route, &'s UpstreamGroup),
        log: Option<&mut LogRecord>,
    ) -> Plan<'s> {
        let (d, head, entry) = (self.decision, out.head, self.entry);
        ubuf.clear();
        let fwd = Forwarding {
            client: self.req.peer.addr(),
            trusted: matches!(
                d.via,
                gapura_gate::client::Arrival::TrustedProxy
                    | gapura_gate::client::Arrival::Cloudflare
            ),
            proto: if self.req.tls { "https" } else { "http" },
            host: self.req.host,
            path: self.req.path,
            host_header: &group.host_header,
            request_id: route.request_id,
            upgrade: head.upgrade && route.websocket,
            strip_authorization: d.strip_authorization,
            strip: entry.map_or(&[], |e| &e.extras.identity_strip[..]),
            identity: d.identity.as_deref().or(self.identity).unwrap_or(b""),
        };
        let raw = &self.buf[..head.head_len];
        // One id for both heads (`auto`).
        let (mut id, shard) = (out.known_id, out.shard);
        let mut new_id =
            |o: &mut Vec<u8>| o.extend_from_slice(id.get_or_insert_with(|| shard.request_id()));
        let mut written = true;
        if group.protocol != UpstreamProtocol::H2 {
            written = write_request_head(raw, self.lines, &fwd, ubuf, &mut new_id);
        }
        if written && group.protocol != UpstreamProtocol::Http1 {
            written = write_fields(raw, self.lines, &fwd, uhead, &mut new_id);
        }
        if written {
            // The host's pages name the host: for an upstream error they
            // replace, or for Gapura's own 502, 503 and 504.
            if entry.is_some_and(|e| {
                e.extras.replace_upstream != gapura_gate::custom_pages::ReplaceUpstream::Off
                    || e.extras.pages.is_some()
            }) {
                page_vars
                    .get_or_insert_with(Box::default)
                    .set(self.req.host.unwrap_or(b""), self.cf_ray);
            }
            return Plan::Forward(ForwardPlan {
                route,
                group,
                limits: d.limits,
                ticket: self.ticket,
                extras: entry.map(|e| &e.extras),
            });
        }
        let page = self
            .snap
            .pages
            .get(ErrorStatus::BadRequest, head.wants_html);
        let closing = out.closing();
        out.stamped(page, &closing);
        out.refuse_close(400, ErrorKind::BadRequest, self.ticket, log)
    }

    /// Asking a forward-auth provider: the call's request head written
    /// into `ubuf`; `None` for a provider the snapshot does not have.
    pub(super) fn authenticate(
        &self,
        ubuf: &mut Vec<u8>,
        provider: gapura_gate::policy::BlockRef,
        job: gapura_gate::auth::AuthJob,
    ) -> Option<Plan<'s>> {
        let p = self.snap.gate.auth_providers.get(provider.index as usize)?;
        ubuf.clear();
        crate::upstream::authcall::write_call(
            p,
            self.req.method,
            self.req.host.unwrap_or(b""),
            self.req.target,
            self.decision.client,
            self.lines,
            self.req.tls,
            ubuf,
        );
        Some(Plan::Authenticate {
            provider,
            job,
            ticket: self.ticket,
            suspended: self.decision.suspended,
        })
    }

    /// A local answer: its start (or the whole of it) written into `out`,
    /// with how it ends once the body is read; `Err` for a refusal written
    /// whole that closes.
    /// A local answer's plan. A refusal (anything but the host's own
    /// answer or redirect, or proof of work's form) invites no body and
    /// reads only a small one (`keeps_refused_body`).
    pub(super) fn local_plan<W: Sink>(
        &self,
        out: &mut Out<'_, W>,
        log: Option<&mut LogRecord>,
    ) -> Plan<'s> {
        let admitted = matches!(
            self.decision.verdict,
            Verdict::Respond(_) | Verdict::Redirect(_) | Verdict::Pow(_, PowAsk::Verify)
        );
        if !admitted {
            out.refuse_body();
        }
        match self.local(out, log) {
            Ok((end, status)) => Plan::Local(LocalPlan {
                end,
                status,
                resp_start: out.resp_start,
                limits: self.decision.limits,
                ticket: self.ticket,
                close: self.decision.close || out.close_now,
                admitted,
            }),
            Err(plan) => plan,
        }
    }

    pub(super) fn local<W: Sink>(
        &self,
        out: &mut Out<'_, W>,
        log: Option<&mut LogRecord>,
    ) -> Result<(LocalEnd<'s>, u16), Plan<'s>> {
        let (snap, d) = (self.snap, self.decision);
        let whole = out.whole();
        let html = out.head.wants_html;
        Ok(match d.verdict {
            Verdict::Respond(a) => {
                match out.wbuf.h1() {
                    // `Answer::write_start`, with one capacity check.
                    Some(bytes) => super::put::extend(bytes, [a.head(), out.date]),
                    None => a.write_start(out.wbuf, out.date),
                }
                (LocalEnd::Answer(a), a.status)
            }
            Verdict::Redirect(r) => {
                r.write_start(out.wbuf, self.req.path, out.date);
                (LocalEnd::HeadOnly, r.status)
            }
            Verdict::HttpsRedirect(port) => {
                let authority = self.req.host.and_then(gapura_gate::tls::redirect_authority);
                let Some(authority) = authority else {
                    // No name to send the client to.
                    return self.refusal(out, ErrorStatus::BadRequest, log);
                };
                gapura_gate::tls::write_https_redirect(
                    out.wbuf,
                    authority,
                    port,
                    self.req.path,
                    out.date,
                );
                (LocalEnd::HeadOnly, 308)
            }
            // Without the job the chain hands on with it: as a failed check.
            Verdict::Verify(list) => {
                let page = snap.gate.access_lists[list as usize].challenge_page();
                (
                    LocalEnd::Written,
                    out.stamped(page.for_client(html), &whole),
                )
            }
            Verdict::Challenge(page) => (
                LocalEnd::Written,
                out.stamped(page.for_client(html), &whole),
            ),
            Verdict::Pow(pow, ask) => self.pow(out, pow, ask),
            // Without the job the chain hands on with it: the call fails.
            Verdict::Authenticate(_) => {
                let page = snap.pages.get(ErrorStatus::BadGateway, html);
                (LocalEnd::Written, out.stamped(page, &whole))
            }
            // A remembered forward-auth refusal: its bytes as relayed, then
            // close.
            Verdict::AuthRefusal => {
                let status = match &d.relay {
                    Some(r) => {
                        r.write_into(out.wbuf, out.date, out.head_only());
                        r.status
                    }
                    None => {
                        let closing = out.closing();
                        out.stamped(snap.pages.get(ErrorStatus::BadGateway, html), &closing)
                    }
                };
                return Err(out.refuse_close(status, ErrorKind::Limit, self.ticket, log));
            }
            Verdict::Maintenance(m) => {
                let id = out.new_id();
                m.write_into(out.wbuf, html, &self.vars(&id), &whole);
                (LocalEnd::Written, m.status())
            }
            Verdict::Refuse(s) => return self.refusal(out, s, log),
            // `prepare` carries these out itself and never asks here.
            Verdict::Forward(..) | Verdict::Drop => return Err(Plan::Drop),
        })
    }

    /// Proof of work's answers: the challenge page (a fresh challenge), the
    /// 403 of a client that is not a browser, or the verify endpoint's form
    /// to read.
    fn pow<W: Sink>(
        &self,
        out: &mut Out<'_, W>,
        pow: &'s gapura_gate::pow::ProofOfWork,
        ask: PowAsk,
    ) -> (LocalEnd<'s>, u16) {
        let whole = out.whole();
        match ask {
            PowAsk::Challenge => {
                let shard = out.shard;
                let mut gate = shard.gate_mut();
                let now_s = gate.unix_s(shard.now_ms());
                let nonce = gate.pow_nonce();
                drop(gate);
                // The chain answers 503 itself when there is no key.
                if let Some(key) = &self.snap.gate.pow_key {
                    let mint = Mint {
                        key,
                        pow,
                        client: self.decision.client,
                        now_s,
                        nonce,
                    };
                    let id = out.new_id();
                    write_challenge_page(out.wbuf, &mint, &id, &whole);
                }
                (LocalEnd::Written, 403)
            }
            PowAsk::NotBrowser => {
                let id = out.new_id();
                let status = write_non_browser_page(out.wbuf, out.head.wants_html, &id, &whole);
                (LocalEnd::Written, status)
            }
            // Answered once the form is read (`powverify`).
            PowAsk::Verify => (LocalEnd::PowVerify(pow, self.decision.client), 303),
        }
    }

    /// A refusal's page: the host's own for a browser, else the built-in
    /// one; a 429 with its `Retry-After`; a limit's page written whole,
    /// closing (`Err`).
    fn refusal<W: Sink>(
        &self,
        out: &mut Out<'_, W>,
        s: ErrorStatus,
        log: Option<&mut LogRecord>,
    ) -> Result<(LocalEnd<'s>, u16), Plan<'s>> {
        let (snap, d) = (self.snap, self.decision);
        let html = out.head.wants_html;
        let custom = match self.entry {
            Some(e) => e.extras.pages.as_ref(),
            None => snap.gate.unknown_host_pages.as_ref(),
        };
        let whole = out.whole();
        if s == ErrorStatus::TooManyRequests && d.retry_after_s > 0 {
            // The host's own 429 page, with the Retry-After of the refusal.
            if let Some(cp) = custom.and_then(|c| c.get(s)).filter(|_| html) {
                let id = out.new_id();
                let ctx = WriteCtx {
                    close: out.close_now || d.close,
                    ..whole
                };
                cp.write_into(out.wbuf, &self.vars(&id), Some(d.retry_after_s), &ctx);
                return Ok((LocalEnd::Written, 429));
            }
            let page = snap.pages.rate_limited(html);
            return Ok((LocalEnd::RateLimited(page, d.retry_after_s), 429));
        }
        let page = Refusal {
            custom: custom.and_then(|c| c.get(s)).filter(|_| html),
            builtin: snap.pages.get(s, html),
        };
        // Limits close the connection once the page is sent.
        if is_limit(s) {
            let id = out.new_id();
            let closing = out.closing();
            page.write_whole(out.wbuf, &self.vars(&id), &closing);
            return Err(out.refuse_close(s.code(), ErrorKind::Limit, self.ticket, log));
        }
        match page.custom {
            Some(cp) => {
                let id = out.new_id();
                cp.write_into(out.wbuf, &self.vars(&id), None, &whole);
                Ok((LocalEnd::Written, s.code()))
            }
            // The rest is written after the body (`LocalEnd::Answer`).
            None => {
                page.builtin.write_start(out.wbuf, out.date);
                Ok((LocalEnd::Answer(page.builtin), s.code()))
            }
        }
    }
}

/// A refusal's page: the host's own for a browser, else the built-in one.
struct Refusal<'s> {
    custom: Option<&'s gapura_gate::custom_pages::CustomPage>,
    builtin: &'s Answer,
}

impl Refusal<'_> {
    /// Writes the whole page (with its request id).
    fn write_whole<W: Sink>(&self, out: &mut W, vars: &PageVars<'_>, ctx: &WriteCtx<'_>) {
        match self.custom {
            Some(cp) => cp.write_into(out, vars, None, ctx),
            None => {
                self.builtin.write_into(out, ctx);
                if let Ok(id) = <&[u8; 24]>::try_from(vars.request_id) {
                    self.builtin.stamp(out.written_mut(), ctx.head_only, || *id);
                }
            }
        }
    }
}
