//! Deciding a request head: the gate's chain for it, and everything that can
//! be written before its body is read (the start of a local answer, a whole
//! refusal, the upstream head), as a [`Plan`] the connection then carries
//! out. Synchronous on purpose: the head's header lines are borrowed from the
//! connection's buffer here, and every such borrow ends before the
//! connection awaits anything.

use super::accesslog::LogRecord;
use super::bounds::Lines;
use super::decided::{Decided, Out};
use super::leases::Leases;
use super::shard::Shard;
use super::stats::ErrorKind;
use crate::codec::head::{BodyFraming, ParsedHead};
use gapura_gate::access::VerifyJob;
use gapura_gate::answer::WriteCtx;
use gapura_gate::chain::{NoTrace, Request, Start, Suspended};
use gapura_gate::client::{HeaderLines, Peer};
use gapura_gate::limits::RequestLimits;
use gapura_gate::pages::RetryPage;
use gapura_gate::quota::{Bucket, QuotaTicket};
use gapura_gate::sink::Sink;
use gapura_gate::snapshot::Verdict;
use gapura_gate::upstream::{Route, UpstreamGroup};
use gapura_gate::Answer;
use gapura_gate::{ErrorStatus, Snapshot};
use std::cell::Cell;
use std::sync::Arc;

/// What `prepare` may touch: the connection's buffers, split so the
/// request's header lines (borrowed from `buf`) can be read meanwhile.
pub(super) struct Prep<'a, 's, W: Sink> {
    pub shard: &'a Shard,
    /// The buffer from the head's first byte.
    pub buf: &'a [u8],
    /// Where Gapura's own answers are written.
    pub wbuf: &'a mut W,
    pub ubuf: &'a mut Vec<u8>,
    /// An HTTP/2 upstream's request head (`auto` and `h2` groups).
    pub uhead: &'a mut Option<Box<crate::exchange::uphead::UpHead>>,
    pub peer: Peer,
    /// A head decided again after a check made off the decision.
    pub resume: Option<Box<Resumption>>,
    /// Made on first use (a host that replaces upstream errors).
    pub page_vars: &'a mut Option<Box<PageCopy>>,
    /// The connection's request bucket (step 5).
    pub connection: &'a Cell<Bucket>,
    /// The request's access log record, while the profile logs.
    pub log: Option<&'a mut LogRecord>,
    /// The request's id when it has one already (the access log's).
    pub request_id: Option<[u8; 24]>,
    /// Where the request's host goes (for its latency).
    pub host_out: &'a mut Option<gapura_gate::HostId>,
    /// The connection is TLS.
    pub tls: bool,
    /// The gate's clock for the answers a wake of the connection writes at
    /// once on one snapshot: read on the first decision, then kept (the
    /// coarse clock moves once a tick; a batch takes microseconds). The
    /// gate state adopts the snapshot with that first decision: no other
    /// decision runs between those of one wake.
    pub gate_ms: &'a mut Option<u64>,
    /// The head's decision when a lane made it (a paying host's refusal):
    /// the chain does not run again.
    pub decided: Option<gapura_gate::chain::Decision<'s>>,
}

/// What a request's head decided, to be carried out once the borrows of
/// the head have ended. An explicit one-byte tag: the connection reads
/// which plan it got straight after `prepare` wrote it, and a tag kept in
/// a niche of the payload's fields is read as a wider load than the
/// stores that wrote it (a load that must wait for them to reach the
/// cache).
#[repr(u8)]
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
        /// Where the chain resumes once verified.
        suspended: Option<Suspended>,
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
        /// Where the chain resumes once the provider allowed the head.
        suspended: Option<Suspended>,
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
    /// Close once it is sent (over the connection's request rate, or a
    /// refusal whose body is not read).
    pub close: bool,
    /// The gate admitted the request (the host's own answer): its body is
    /// invited (`100 Continue`) and drained. A refusal's is not
    /// ([`super::decided::keeps_refused_body`]).
    pub admitted: bool,
}

/// Forwarding: the upstream head is in `ubuf` (HTTP/1.1) or `uhead` (HTTP/2).
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
/// once the buffers have capacity. The steps: the head as the chain reads
/// it, how a head decided again resumes (`resumed`), the chain (`decide`),
/// then the plan: forwarding, a deferred check, or a local answer
/// (`Decided`).
pub(super) fn prepare<'s, W: Sink>(
    p: Prep<'_, 's, W>,
    snap: &'s Snapshot,
    head: &ParsedHead,
    lines: &[httparse::Header<'_>],
) -> Plan<'s> {
    let Prep {
        shard,
        buf,
        wbuf,
        ubuf,
        uhead,
        peer,
        resume,
        page_vars,
        connection,
        mut log,
        request_id,
        host_out,
        tls,
        gate_ms,
        decided,
    } = p;
    let headers = Lines(lines);
    let req = Request {
        peer,
        method: head
            .method
            .token()
            .unwrap_or_else(|| &buf[..buf.iter().position(|&b| b == b' ').unwrap_or(0)]),
        host: head.host.clone().map(|r| &buf[r]),
        target: &buf[head.target.clone()],
        path: &buf[head.path.clone()],
        header_count: head.header_count,
        header_bytes: head.header_bytes,
        content_length: match head.framing {
            BodyFraming::Length(n) => Some(n),
            _ => None,
        },
        headers: &headers,
        connection: Some(connection),
        tls,
    };
    let date = shard.date.line();
    let mut out = Out {
        resp_start: wbuf.mark(),
        wbuf,
        head,
        date: &date,
        close_now: head.close || shard.is_draining(),
        shard,
        known_id: request_id,
    };
    let (start, paid, identity) = match resumed(shard, snap, resume) {
        Ok(resumed) => resumed,
        Err((list, busy, paid)) => {
            return out.refused_after_check(snap, (list, busy), paid, log, &req);
        }
    };
    let decision = match decided {
        Some(d) => d,
        None => decide_resumed(shard, snap, &req, (start, identity.clone()), gate_ms),
    };
    // After a check the budgets' leases were taken before it; the
    // identity dimensions' after it.
    let ticket = QuotaTicket::merge(decision.ticket, paid);
    *host_out = decision.host;
    note_decision(shard, snap, &decision, log.as_deref_mut(), &req);
    let d = Decided {
        snap,
        req: &req,
        lines,
        buf,
        cf_ray: if decision.via == gapura_gate::client::Arrival::Cloudflare {
            headers.lines("cf-ray").last().unwrap_or(b"")
        } else {
            b""
        },
        entry: decision.host.map(|id| &snap.entries[id as usize]),
        decision: &decision,
        ticket,
        identity: identity.as_deref(),
    };
    // The checks made off the decision; without their job (the chain hands
    // one on with each) they are answered locally. The jobs are taken only
    // for their verdicts: a decision is not moved beside them.
    match decision.verdict {
        Verdict::Verify(list) => {
            if let Some(job) = shard.gate_mut().take_job() {
                return Plan::Verify {
                    job: Box::new(job),
                    list,
                    ticket,
                    suspended: decision.suspended,
                };
            }
        }
        Verdict::Authenticate(b) => {
            let job = shard.gate_mut().auth.take_job();
            if let Some(plan) = job.and_then(|job| d.authenticate(ubuf, b, job)) {
                return plan;
            }
        }
        _ => {}
    }
    match decision.verdict {
        Verdict::Forward(route, group) => {
            d.forward(&mut out, (ubuf, uhead), page_vars, (route, group), log)
        }
        Verdict::Drop => {
            // A plan that does not carry the ticket gives its leases back now.
            if let Some(t) = ticket {
                shard.release_ticket(t);
            }
            Plan::Drop
        }
        _ => d.local_plan(&mut out, log),
    }
}

/// How a head decided again starts: after a passed password check or a
/// provider's allow, from where the chain suspended it (the budgets'
/// leases paid before it, the provider's identity lines with it); a check
/// that failed or found the line full is answered (`Err`: the list,
/// whether it was busy, the leases). A reload meanwhile decides from the
/// beginning, and the leases are paid again.
#[allow(clippy::type_complexity)]
fn resumed(
    shard: &Shard,
    snap: &Snapshot,
    resume: Option<Box<Resumption>>,
) -> Result<(Start, Option<QuotaTicket>, Option<Arc<[u8]>>), (u32, bool, Option<QuotaTicket>)> {
    let Some(r) = resume else {
        return Ok((Start::Beginning, None, None));
    };
    let r = *r;
    let mut paid = r.leases.and_then(Leases::into_ticket);
    let current = r.generation == snap.generation;
    match r.outcome {
        Resume::Passed(s) if current => return Ok((Start::Resume(s), paid, r.identity)),
        Resume::Failed { list } | Resume::Busy { list }
            if current && snap.gate.access_lists.get(list as usize).is_some() =>
        {
            return Err((list, matches!(r.outcome, Resume::Busy { .. }), paid));
        }
        _ => {}
    }
    if let Some(t) = paid.take() {
        shard.release_ticket(t);
    }
    Ok((Start::Beginning, None, None))
}

/// Runs the chain for the head on the shard's gate state (its rate slots
/// bound to the snapshot first). A `Verify` or `Authenticate` verdict's
/// job stays in the gate state until the plan takes it.
#[inline(always)]
/// [`decide`], the identity lines a resumed request carries (a provider's
/// allow) handed to the chain's identity step for this decision.
fn decide_resumed<'s, H: HeaderLines + ?Sized>(
    shard: &Shard,
    snap: &'s Snapshot,
    req: &Request<'_, H>,
    (start, identity): (Start, Option<Arc<[u8]>>),
    gate_ms: &mut Option<u64>,
) -> gapura_gate::chain::Decision<'s> {
    shard.gate_mut().auth.resumed = identity;
    let d = decide(shard, snap, req, start, gate_ms);
    shard.gate_mut().auth.resumed = None;
    d
}

fn decide<'s, H: HeaderLines + ?Sized>(
    shard: &Shard,
    snap: &'s Snapshot,
    req: &Request<'_, H>,
    start: Start,
    gate_ms: &mut Option<u64>,
) -> gapura_gate::chain::Decision<'s> {
    let (mut gate, now_ms) = adopted_gate(shard, snap, gate_ms);
    let mut scratch = shard.scratch.borrow_mut();
    #[cfg(feature = "decide-timing")]
    let t0 = super::timing::stamp();
    let d = snap.decide_from(req, &mut gate, now_ms, &mut scratch, &mut NoTrace, start);
    #[cfg(feature = "decide-timing")]
    super::timing::record(t0, super::timing::stamp());
    d
}

/// The shard's gate state with `snap` adopted (its rate slots bound, its
/// hosts' lanes learned), and the gate's clock: both once a wake, on the
/// first decision (`gate_ms` then keeps the clock for the others).
#[inline(always)]
pub(super) fn adopted_gate<'a>(
    shard: &'a Shard,
    snap: &Snapshot,
    gate_ms: &mut Option<u64>,
) -> (std::cell::RefMut<'a, gapura_gate::chain::GateState>, u64) {
    let mut gate = shard.gate_mut();
    let now_ms = match *gate_ms {
        Some(now_ms) => now_ms,
        None => {
            let now_ms = if snap.gate.needs_clock() {
                shard.now_ms()
            } else {
                0
            };
            let unbound = gate.adopt(snap, now_ms);
            if unbound > 0 {
                shard.warn_rate_unbound(unbound, snap.generation);
            }
            *gate_ms = Some(now_ms);
            now_ms
        }
    };
    (gate, now_ms)
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
    pub(super) fn set(&mut self, host: &[u8], ray: &[u8]) {
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

/// How a check made off the decision ended, for the head decided again.
#[derive(Clone, Copy, Debug)]
pub(super) enum Resume {
    /// A password verified or a provider's allow: the chain resumes where
    /// it suspended the head.
    Passed(Suspended),
    Failed {
        list: u32,
    },
    /// The line was full or the wait ran out: 429, Retry-After 1.
    Busy {
        list: u32,
    },
}

/// A head suspended for a check made off the decision, waiting in the
/// buffer to be decided again: one value, resumed in one place
/// (`resumed`).
pub(super) struct Resumption {
    pub outcome: Resume,
    /// The snapshot that suspended it (a reload meanwhile starts over).
    pub generation: u64,
    /// The leases its budgets took before the check.
    pub leases: Option<Leases>,
    /// The identity lines a forward-auth provider gave it.
    pub identity: Option<Arc<[u8]>>,
}
