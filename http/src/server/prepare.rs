//! Deciding a request head: the gate's chain for it, and everything that can
//! be written before its body is read (the start of a local answer, a whole
//! refusal, the upstream head), as a [`Plan`] the connection then carries
//! out. Synchronous on purpose: the head's header lines are borrowed from the
//! connection's buffer here, and every such borrow ends before the
//! connection awaits anything.

use super::accesslog::LogRecord;
use super::stats::ErrorKind;
use super::{Lines, Shard};
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::upstream::request::{write_request_head, Forwarding};
use gapura_gate::access::VerifyJob;
use gapura_gate::answer::WriteCtx;
use gapura_gate::chain::{NoTrace, Request, Start};
use gapura_gate::client::{HeaderLines, Peer};
use gapura_gate::custom_pages::PageVars;
use gapura_gate::limits::RequestLimits;
use gapura_gate::pages::RetryPage;
use gapura_gate::pow::{write_challenge_page, write_non_browser_page, Mint};
use gapura_gate::quota::{Bucket, QuotaTicket};
use gapura_gate::snapshot::{PowAsk, Verdict};
use gapura_gate::upstream::{Route, UpstreamGroup};
use gapura_gate::Answer;
use gapura_gate::{ErrorStatus, Snapshot};
use std::cell::Cell;

/// What `prepare` may touch: the connection's buffers, split so the
/// request's header lines (borrowed from `buf`) can be read meanwhile.
pub(super) struct Prep<'a> {
    pub shard: &'a Shard,
    /// The buffer from the head's first byte.
    pub buf: &'a [u8],
    pub wbuf: &'a mut Vec<u8>,
    pub ubuf: &'a mut Vec<u8>,
    pub peer: Peer,
    pub resume: Option<Resume>,
    /// The leases of a head decided again after its password check (its
    /// budgets were paid before the check).
    pub paid: Option<QuotaTicket>,
    pub page_vars: &'a mut PageCopy,
    /// The connection's request bucket (step 5).
    pub connection: &'a Cell<Bucket>,
    /// The request's access log record, while the profile logs.
    pub log: Option<&'a mut LogRecord>,
    /// The request's id when it has one already (the access log's).
    pub request_id: Option<[u8; 24]>,
    /// Where the request's host goes (for its latency).
    pub host_out: &'a mut Option<gapura_gate::HostId>,
    /// The identity lines a forward-auth provider gave this head (decided
    /// again after the call).
    pub identity: Option<std::sync::Arc<[u8]>>,
}

/// What a request's head decided, to be carried out once the borrows of
/// the head have ended.
pub(super) enum Plan<'s> {
    /// A local answer (`LocalPlan`).
    Local(LocalPlan<'s>),
    /// A refusal written whole; close once it is sent (the leases are held
    /// until then).
    RefuseClose(ErrorKind, Option<QuotaTicket>),
    /// Close without an answer.
    Drop,
    /// Check a password off the shard, then decide the head again.
    /// Boxed: the job carries a copy of the password, far larger than the
    /// other plans, and this path is about to wait for PBKDF2 anyway.
    /// The leases of the budgets stay held across the check.
    Verify {
        job: Box<VerifyJob>,
        list: u32,
        ticket: Option<QuotaTicket>,
    },
    /// Forwarding (`ForwardPlan`).
    Forward(ForwardPlan<'s>),
    /// Ask forward-auth provider `provider` (the call's request head is in
    /// `ubuf`), then decide the head again or relay its refusal. The
    /// leases of the budgets stay held across the call.
    Authenticate {
        /// The provider's index and the route's mode.
        provider: gapura_gate::policy::BlockRef,
        job: gapura_gate::auth::AuthJob,
        ticket: Option<QuotaTicket>,
        strip_authorization: bool,
    },
}

/// A local answer: its start is in `wbuf` at `resp_start`; the rest is
/// written after the body is read.
pub(super) struct LocalPlan<'s> {
    pub end: LocalEnd<'s>,
    pub status: u16,
    pub resp_start: usize,
    pub limits: RequestLimits,
    pub ticket: Option<QuotaTicket>,
    /// Close once it is sent (over the connection's request rate).
    pub close: bool,
}

/// Forwarding: the upstream head is in `ubuf`.
pub(super) struct ForwardPlan<'s> {
    pub route: &'s Route,
    pub group: &'s UpstreamGroup,
    pub limits: RequestLimits,
    pub ticket: Option<QuotaTicket>,
    /// The host's custom pages and upstream error replacement.
    pub extras: Option<&'s gapura_gate::policy::HostExtras>,
}

#[derive(Clone, Copy)]
pub(super) enum LocalEnd<'s> {
    /// The answer's connection line, blank line and body.
    Answer(&'s Answer),
    /// Only the connection line and blank line (redirects).
    HeadOnly,
    /// The whole 429 with its Retry-After (nothing was written before).
    RateLimited(&'s RetryPage, u32),
    /// The answer is already written whole.
    Written,
    /// Proof of work's verify endpoint: read the form (2 KiB at most),
    /// then write the 303 or the 403 (`powverify`).
    PowVerify(&'s gapura_gate::pow::ProofOfWork, std::net::IpAddr),
}

/// Decides a complete head and writes what can be written before its body.
/// Synchronous: everything borrowed from the head ends here. No allocation
/// once the buffers have capacity.
pub(super) fn prepare<'s>(
    p: Prep<'_>,
    snap: &'s Snapshot,
    head: &ParsedHead,
    lines: &[httparse::Header<'_>],
) -> Plan<'s> {
    let buf = p.buf;
    let shard = p.shard;
    let known_id = p.request_id;
    // The request's id: the access log's when it has one, so the page, the
    // upstream's header and the log line agree.
    let new_id = || known_id.unwrap_or_else(|| shard.request_id());
    let mut log = p.log;
    let host = head.host.clone().map(|r| &buf[r]);
    let path = &buf[head.path.clone()];
    let method = &buf[..buf.iter().position(|&b| b == b' ').unwrap_or(0)];
    let headers = Lines(lines);
    let req = Request {
        peer: p.peer,
        method,
        host,
        target: &buf[head.target.clone()],
        path,
        header_count: head.header_count,
        header_bytes: head.header_bytes,
        content_length: match head.framing {
            BodyFraming::Length(n) => Some(n),
            _ => None,
        },
        headers: &headers,
        connection: Some(p.connection),
    };
    let head_only = head.method == Method::Head;
    let date = p.shard.date.line();
    let resp_start = p.wbuf.len();
    let close_now = head.close || p.shard.is_draining();
    let whole_ctx = WriteCtx {
        date_line: &date,
        head_only,
        close: close_now,
        keep_alive_10: head.keep_alive_10 && !close_now,
    };
    // A head decided again after a password check.
    let mut start = Start::Beginning;
    let mut paid = p.paid;
    match p.resume {
        Some(Resume::Passed { list, generation }) if generation == snap.generation => {
            start = Start::AfterAccess {
                strip_authorization: snap
                    .gate
                    .access_lists
                    .get(list as usize)
                    .is_some_and(|l| !l.pass_credentials()),
            };
        }
        Some(Resume::Authed {
            generation,
            strip_authorization,
        }) if generation == snap.generation => {
            start = Start::AfterAuth {
                strip_authorization,
            };
        }
        Some(Resume::Failed { list, generation } | Resume::Busy { list, generation })
            if generation == snap.generation =>
        {
            if let Some(l) = snap.gate.access_lists.get(list as usize) {
                let busy = matches!(p.resume, Some(Resume::Busy { .. }));
                let page = if busy {
                    l.busy_page()
                } else {
                    l.challenge_page()
                };
                let answer = page.for_client(head.wants_html);
                answer.write_into(p.wbuf, &whole_ctx);
                answer.stamp(p.wbuf, head_only, new_id);
                if busy {
                    if let Some(c) = p.shard.gate_mut().access_counters.get_mut(list as usize) {
                        c.queue_refusals += 1;
                    }
                }
                if let (Some(rec), Some(settings)) = (log, &snap.server.access_log) {
                    rec.set_request(method, host.unwrap_or(b""), path, settings.log_query);
                    rec.client = Some(p.peer.addr());
                    rec.verdict = if busy { "refuse" } else { "challenge" };
                    rec.step = gapura_gate::chain::Block::Access.name();
                }
                return Plan::Local(LocalPlan {
                    end: LocalEnd::Written,
                    status: answer.status,
                    resp_start,
                    limits: snap.default_limits,
                    ticket: paid,
                    close: false,
                });
            }
        }
        // A reload meanwhile: decided from the beginning, paid again.
        _ => {
            if let Some(t) = paid.take() {
                p.shard.release_ticket(t);
            }
        }
    }
    let (decision, job, auth_job) = decide(shard, snap, &req, start);
    // After a password check the budgets' leases were taken before it.
    let ticket = decision.ticket.or(paid);
    *p.host_out = decision.host;
    note_decision(shard, snap, &decision, log.as_deref_mut(), &req);
    let cf_ray: &[u8] = if decision.via == gapura_gate::client::Arrival::Cloudflare {
        headers.lines("cf-ray").last().unwrap_or(b"")
    } else {
        b""
    };
    // A plan that does not carry the ticket gives its leases back now.
    let release = || {
        if let Some(t) = ticket {
            p.shard.release_ticket(t);
        }
    };
    let entry = decision.host.map(|id| &snap.entries[id as usize]);
    let custom = entry.and_then(|e| e.extras.pages.as_ref());
    let (end, status) = match decision.verdict {
        Verdict::Forward(route, group) => {
            p.ubuf.clear();
            let fwd = Forwarding {
                client: p.peer.addr(),
                proto: "http",
                host,
                path,
                host_header: &group.host_header,
                request_id: route.request_id,
                upgrade: head.upgrade && route.websocket,
                strip_authorization: decision.strip_authorization,
                strip: entry.map_or(&[], |e| &e.extras.identity_strip[..]),
                identity: decision
                    .identity
                    .as_deref()
                    .or(p.identity.as_deref())
                    .unwrap_or(b""),
            };
            let raw = &buf[..head.head_len];
            if write_request_head(raw, lines, &fwd, p.ubuf, &mut |o| match known_id {
                Some(id) => o.extend_from_slice(&id),
                None => shard.write_request_id(o),
            }) {
                if entry.is_some_and(|e| {
                    e.extras.replace_upstream != gapura_gate::custom_pages::ReplaceUpstream::Off
                }) {
                    p.page_vars.set(host.unwrap_or(b""), cf_ray);
                }
                return Plan::Forward(ForwardPlan {
                    route,
                    group,
                    limits: decision.limits,
                    ticket,
                    extras: entry.map(|e| &e.extras),
                });
            }
            let page = snap.pages.get(ErrorStatus::BadRequest, head.wants_html);
            page.write_into(p.wbuf, &close_ctx(&date, head_only));
            page.stamp(p.wbuf, head_only, new_id);
            p.shard.stats.response(400);
            if let Some(rec) = log {
                rec.status = 400;
            }
            return Plan::RefuseClose(ErrorKind::BadRequest, ticket);
        }
        Verdict::Respond(a) => {
            a.write_start(p.wbuf, &date);
            (LocalEnd::Answer(a), a.status)
        }
        Verdict::Redirect(r) => {
            r.write_start(p.wbuf, &buf[head.path.clone()], &date);
            (LocalEnd::HeadOnly, r.status)
        }
        Verdict::Drop => {
            release();
            return Plan::Drop;
        }
        Verdict::Verify(list) => match job {
            Some(job) => {
                return Plan::Verify {
                    job: Box::new(job),
                    list,
                    ticket,
                };
            }
            // The chain hands a Verify on only with its job; without one,
            // answer as a failed check would.
            None => {
                let page = snap.gate.access_lists[list as usize].challenge_page();
                let answer = page.for_client(head.wants_html);
                answer.write_into(p.wbuf, &whole_ctx);
                answer.stamp(p.wbuf, head_only, new_id);
                (LocalEnd::Written, answer.status)
            }
        },
        Verdict::Challenge(page) => {
            let answer = page.for_client(head.wants_html);
            answer.write_into(p.wbuf, &whole_ctx);
            answer.stamp(p.wbuf, head_only, new_id);
            (LocalEnd::Written, answer.status)
        }
        Verdict::Pow(pow, PowAsk::Challenge) => {
            let mut gate = shard.gate_mut();
            let now_s = gate.unix_s(shard.now_ms());
            let nonce = gate.pow_nonce();
            drop(gate);
            // The chain answers 503 itself when there is no key.
            if let Some(key) = &snap.gate.pow_key {
                let mint = Mint {
                    key,
                    pow,
                    client: decision.client,
                    now_s,
                    nonce,
                };
                write_challenge_page(p.wbuf, &mint, &new_id(), &whole_ctx);
            }
            (LocalEnd::Written, 403)
        }
        Verdict::Authenticate(b) => {
            if let (Some(job), Some(provider)) =
                (auth_job, snap.gate.auth_providers.get(b.index as usize))
            {
                p.ubuf.clear();
                crate::upstream::authcall::write_call(
                    provider,
                    method,
                    host.unwrap_or(b""),
                    req.target,
                    decision.client,
                    lines,
                    p.ubuf,
                );
                return Plan::Authenticate {
                    provider: b,
                    job,
                    ticket,
                    strip_authorization: decision.strip_authorization,
                };
            }
            // The chain hands Authenticate on only with its job.
            let page = snap.pages.get(ErrorStatus::BadGateway, head.wants_html);
            page.write_into(p.wbuf, &whole_ctx);
            page.stamp(p.wbuf, head_only, new_id);
            (LocalEnd::Written, 502)
        }
        // A remembered forward-auth refusal: its bytes as relayed, then close.
        Verdict::AuthRefusal => {
            let status = match &decision.relay {
                Some(r) => {
                    write_relay(p.wbuf, r, &date, head_only);
                    r.status
                }
                None => {
                    let page = snap.pages.get(ErrorStatus::BadGateway, head.wants_html);
                    page.write_into(p.wbuf, &close_ctx(&date, head_only));
                    502
                }
            };
            p.shard.stats.response(status);
            if let Some(rec) = log {
                rec.status = status;
            }
            return Plan::RefuseClose(ErrorKind::Limit, ticket);
        }
        Verdict::Pow(_, PowAsk::NotBrowser) => {
            let status = write_non_browser_page(p.wbuf, head.wants_html, &new_id(), &whole_ctx);
            (LocalEnd::Written, status)
        }
        // Answered once the form is read (`powverify`).
        Verdict::Pow(pow, PowAsk::Verify) => (LocalEnd::PowVerify(pow, decision.client), 303),
        Verdict::Maintenance(m) => {
            let id = new_id();
            let vars = PageVars {
                request_id: &id,
                host: host.unwrap_or(b""),
                cf_ray,
            };
            m.write_into(p.wbuf, head.wants_html, &vars, &whole_ctx);
            (LocalEnd::Written, m.status())
        }
        // The host's own 429 page, with the Retry-After of the refusal.
        Verdict::Refuse(ErrorStatus::TooManyRequests)
            if decision.retry_after_s > 0
                && head.wants_html
                && custom.is_some_and(|c| c.get(ErrorStatus::TooManyRequests).is_some()) =>
        {
            let id = new_id();
            let vars = PageVars {
                request_id: &id,
                host: host.unwrap_or(b""),
                cf_ray,
            };
            let mut line = [0u8; 36];
            let retry = retry_after_line(&mut line, decision.retry_after_s);
            if let Some(cp) = custom.and_then(|c| c.get(ErrorStatus::TooManyRequests)) {
                let ctx = WriteCtx {
                    close: close_now || decision.close,
                    ..whole_ctx
                };
                cp.write_into(p.wbuf, &vars, retry, &ctx);
            }
            (LocalEnd::Written, 429)
        }
        Verdict::Refuse(ErrorStatus::TooManyRequests) if decision.retry_after_s > 0 => (
            LocalEnd::RateLimited(
                snap.pages.rate_limited(head.wants_html),
                decision.retry_after_s,
            ),
            429,
        ),
        Verdict::Refuse(s) => {
            let page = Refusal {
                custom: custom.and_then(|c| c.get(s)).filter(|_| head.wants_html),
                builtin: snap.pages.get(s, head.wants_html),
            };
            // Limits close the connection once the page is sent.
            if is_limit(s) {
                let id = new_id();
                let vars = PageVars {
                    request_id: &id,
                    host: host.unwrap_or(b""),
                    cf_ray,
                };
                page.write_whole(p.wbuf, &vars, &close_ctx(&date, head_only));
                p.shard.stats.response(s.code());
                if let Some(rec) = log {
                    rec.status = s.code();
                }
                return Plan::RefuseClose(ErrorKind::Limit, ticket);
            }
            match page.custom {
                Some(cp) => {
                    let id = new_id();
                    let vars = PageVars {
                        request_id: &id,
                        host: host.unwrap_or(b""),
                        cf_ray,
                    };
                    cp.write_into(p.wbuf, &vars, b"", &whole_ctx);
                    (LocalEnd::Written, s.code())
                }
                // The rest is written after the body (`LocalEnd::Answer`).
                None => {
                    page.builtin.write_start(p.wbuf, &date);
                    (LocalEnd::Answer(page.builtin), s.code())
                }
            }
        }
    };
    Plan::Local(LocalPlan {
        end,
        status,
        resp_start,
        limits: decision.limits,
        ticket,
        close: decision.close,
    })
}

/// Runs the chain for the head on the shard's gate state (its rate slots
/// bound to the snapshot first); a `Verify` verdict's job comes with it.
#[inline(always)]
fn decide<'s, H: HeaderLines + ?Sized>(
    shard: &Shard,
    snap: &'s Snapshot,
    req: &Request<'_, H>,
    start: Start,
) -> (
    gapura_gate::chain::Decision<'s>,
    Option<VerifyJob>,
    Option<gapura_gate::auth::AuthJob>,
) {
    let mut gate = shard.gate_mut();
    let now_ms = if snap.gate.needs_clock() {
        shard.now_ms()
    } else {
        0
    };
    gate.adopt(snap, now_ms);
    let mut scratch = shard.scratch.borrow_mut();
    #[cfg(feature = "decide-timing")]
    let t0 = super::timing::stamp();
    let d = snap.decide_from(req, &mut gate, now_ms, &mut scratch, &mut NoTrace, start);
    #[cfg(feature = "decide-timing")]
    super::timing::record(t0, super::timing::stamp());
    let job = match d.verdict {
        Verdict::Verify(_) => gate.take_job(),
        _ => None,
    };
    let auth_job = match d.verdict {
        Verdict::Authenticate(_) => gate.auth.take_job(),
        _ => None,
    };
    (d, job, auth_job)
}

/// What a decision leaves behind besides its answer: the throttled warning
/// of a refusal, and the access log record's facts.
#[inline(always)]
fn note_decision<H: HeaderLines + ?Sized>(
    shard: &Shard,
    snap: &Snapshot,
    decision: &gapura_gate::chain::Decision<'_>,
    log: Option<&mut LogRecord>,
    req: &Request<'_, H>,
) {
    let refused = match decision.verdict {
        Verdict::Refuse(s) => Some(s.code()),
        Verdict::Drop => Some(0),
        _ => None,
    };
    if let Some(status) = refused {
        let host = decision
            .host
            .map_or("", |h| snap.entries[h as usize].label.as_str());
        shard.warn_refusal(
            decision.step,
            decision.policy,
            host,
            status,
            decision.client,
        );
    }
    if let (Some(rec), Some(settings)) = (log, &snap.server.access_log) {
        rec.set_request(
            req.method,
            req.host.unwrap_or(b""),
            req.path,
            settings.log_query,
        );
        rec.client = Some(decision.client);
        rec.verdict = decision.verdict.kind();
        rec.step = decision.step.name();
    }
}

/// A refusal's page: the host's own for a browser, else the built-in one.
struct Refusal<'s> {
    custom: Option<&'s gapura_gate::custom_pages::CustomPage>,
    builtin: &'s Answer,
}

impl Refusal<'_> {
    /// Writes the whole page (with its request id).
    fn write_whole(&self, out: &mut Vec<u8>, vars: &PageVars<'_>, ctx: &WriteCtx<'_>) {
        match self.custom {
            Some(cp) => cp.write_into(out, vars, b"", ctx),
            None => {
                self.builtin.write_into(out, ctx);
                if let Ok(id) = <&[u8; 24]>::try_from(vars.request_id) {
                    self.builtin.stamp(out, ctx.head_only, || *id);
                }
            }
        }
    }
}

/// Writes a relayed forward-auth answer: its head, Date, `Connection:
/// close`, the blank line and (unless `head_only`) its body.
pub(super) fn write_relay(
    out: &mut Vec<u8>,
    r: &gapura_gate::auth::Relay,
    date: &[u8],
    head_only: bool,
) {
    let (head, body) = r.bytes.split_at((r.head_len as usize).min(r.bytes.len()));
    out.extend_from_slice(head);
    out.extend_from_slice(date);
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// `Retry-After: N\r\n` in `buf`. No allocation.
fn retry_after_line(buf: &mut [u8; 36], seconds: u32) -> &[u8] {
    const NAME: &[u8] = b"Retry-After: ";
    let mut digits = [0u8; 20];
    let d = gapura_gate::pages::decimal(u64::from(seconds), &mut digits);
    let end = NAME.len() + d.len();
    buf[..NAME.len()].copy_from_slice(NAME);
    buf[NAME.len()..end].copy_from_slice(d);
    buf[end..end + 2].copy_from_slice(b"\r\n");
    &buf[..end + 2]
}

pub(super) fn close_ctx(date: &[u8], head_only: bool) -> WriteCtx<'_> {
    WriteCtx {
        date_line: date,
        head_only,
        close: true,
        keep_alive_10: false,
    }
}

pub(super) fn is_limit(s: ErrorStatus) -> bool {
    matches!(
        s,
        ErrorStatus::PayloadTooLarge | ErrorStatus::UriTooLong | ErrorStatus::HeaderFieldsTooLarge
    )
}

/// Copies of a request's `{host}` and `{cfRay}` (cut as pages cut them).
#[derive(Clone, Copy, Debug)]
pub(super) struct PageCopy {
    host: [u8; 253],
    host_len: u8,
    ray: [u8; 64],
    ray_len: u8,
}

impl Default for PageCopy {
    fn default() -> Self {
        PageCopy {
            host: [0; 253],
            host_len: 0,
            ray: [0; 64],
            ray_len: 0,
        }
    }
}

impl PageCopy {
    fn set(&mut self, host: &[u8], ray: &[u8]) {
        let h = host.len().min(self.host.len());
        self.host[..h].copy_from_slice(&host[..h]);
        self.host_len = h as u8;
        let r = ray.len().min(self.ray.len());
        self.ray[..r].copy_from_slice(&ray[..r]);
        self.ray_len = r as u8;
    }

    pub(super) fn host(&self) -> &[u8] {
        &self.host[..usize::from(self.host_len)]
    }

    pub(super) fn ray(&self) -> &[u8] {
        &self.ray[..usize::from(self.ray_len)]
    }
}

/// The outcome of a password check, for the head decided again.
#[derive(Clone, Copy, Debug)]
pub(super) enum Resume {
    Passed {
        list: u32,
        generation: u64,
    },
    Failed {
        list: u32,
        generation: u64,
    },
    /// The line was full or the wait ran out: 429, Retry-After 1.
    Busy {
        list: u32,
        generation: u64,
    },
    /// A forward-auth provider allowed the head.
    Authed {
        generation: u64,
        strip_authorization: bool,
    },
}
