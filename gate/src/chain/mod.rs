//! The request chain: every block in the order of docs/gate.md.
//!
//! [`Snapshot::decide`] is the one implementation the server and `gapura
//! explain` share. It is generic over a [`Trace`]: the server passes
//! [`NoTrace`], whose calls compile to nothing, and explain passes a
//! recorder. Mutable state is the shard's [`GateState`]; time is `now_ms`,
//! the shard's monotonic milliseconds. O(host + path + header lines read),
//! no allocation.
//!
//! The chain is two phases:
//!
//! - the facts (steps 2 and 3, then the canonical path and the route):
//!   [`Snapshot::decide_from`] learns who the client is and which host,
//!   route and policy apply. A request no host takes ends there
//!   (`steps::unknown_host`).
//! - the blocks (steps 4 to 16): one method each on `Flow`, the request's
//!   way through the host's blocks, each documented with when it runs and
//!   what its result means, each recording its own trace step. A block
//!   either lets the request go on or ends it with a verdict
//!   (`ControlFlow::Break`). `Flow::blocks` calls them in the order of
//!   the one list in `steps.rs` (`chain_order!`, which also makes
//!   [`ORDER`]): moving a line there reorders the chain (a test holds it
//!   to docs/gate.md's table). A host whose blocks are all off
//!   (`quiet_host`, learned once a snapshot by `GateState::adopt`) is
//!   decided by its request limits and its answer alone, as the blocks
//!   would decide it (the quiet lane; never under a recording trace).
//!
//! [`Snapshot::lane_answer`] decides a request to a quiet host, or to a
//! fixed answer whose only blocks are the budgets and the rate limit
//! (`paying_host`), where its head is parsed, as the chain would.
//!
//! Shadow mode is carried out by [`Mode::apply`] in every block that has
//! one.
//!
//! Modules: `decision` (what the chain is given and what it answers:
//! [`Request`], [`Decision`] and the deciding [`Block`]), `lane` (the
//! quiet and paying hosts' lanes), `steps` (the
//! blocks of steps 4 to 16; forward-auth's step in `auth`, the identity
//! dimensions' in `dims`, proof of work's in `pow`), `quota` (the work of steps 4 and 9: budgets, leases and the
//! rate limit), `state` (the shard's mutable gate state and counters),
//! `trace` (what explain records, every block's outcome included), `live`
//! (a running shard's tables as a request would meet them, read only) and
//! `tests` (the decision end to end on a small snapshot). Each imports what
//! it uses from the module that defines it; this one declares them,
//! re-exports their names and runs the first phase.

mod auth;
mod decision;
mod dims;
mod lane;
mod live;
mod pow;
mod quota;
mod state;
mod steps;
#[cfg(test)]
mod tests;
mod trace;

pub use decision::ORDER;
pub use decision::{Block, Decision, Request, Suspended};
pub use lane::{applies, paying_host, quiet_host, Lane, LaneHead, PAYING_RUNS, QUIET_RUNS};
pub use live::{FleetKeyLive, LiveView};
pub use state::{
    AccessCounters, ChainCounters, ConnectionCounters, ConnectionRefusal, ConnectionToken,
    GateState, RateLimitCounters, Start,
};
pub use trace::{AccessStepOutcome, AuthOutcome, NoTrace, PowOutcome, QuotaOutcome, Step, Trace};

use crate::client::{HeaderLines, Peer};
use crate::host::HostAction;
use crate::pages::ErrorStatus;
use crate::path::PathScratch;
use crate::policy::RequestPolicy;
use crate::quota::QuotaTicket;
use crate::snapshot::{HostEntry, Snapshot, Verdict};
use crate::upstream::Route;
use steps::Flow;

/// `GET` or `HEAD /robots.txt`: answered by the managed file, never ruled
/// on by a rule set, exempt from budgets and rate limits.
fn is_robots(method: &[u8], canonical: &[u8]) -> bool {
    (method == b"GET" || method == b"HEAD") && canonical == b"/robots.txt"
}

impl Snapshot {
    /// Runs the chain for one request head. Pure apart from `state`; no
    /// allocation. `scratch` holds a rewritten canonical path.
    pub fn decide<'s, H: HeaderLines + ?Sized, T: Trace>(
        &'s self,
        req: &Request<'_, H>,
        state: &mut GateState,
        now_ms: u64,
        scratch: &mut PathScratch,
        trace: &mut T,
    ) -> Decision<'s> {
        self.decide_from(req, state, now_ms, scratch, trace, Start::Beginning)
    }

    /// [`decide`](Self::decide) from a given step: after a verified
    /// password the chain goes on past the access list.
    pub fn decide_from<'s, H: HeaderLines + ?Sized, T: Trace>(
        &'s self,
        req: &Request<'_, H>,
        state: &mut GateState,
        now_ms: u64,
        scratch: &mut PathScratch,
        trace: &mut T,
        start: Start,
    ) -> Decision<'s> {
        // Step 2: the client address (facts only).
        let resolved = self.gate.client.resolve(req.peer, req.headers);
        if trace.enabled() {
            trace.step(Step::Client {
                peer: resolved.peer,
                client: resolved.addr,
                via: resolved.via,
            });
        }
        // Step 3: the host.
        let host = state
            .host_memo
            .lookup(&self.hosts, self.generation, req.host);
        let entry = host.map(|id| &self.entries[id as usize]);
        if trace.enabled() {
            trace.step(Step::Host {
                label: entry.map(|e| e.label.as_str()),
            });
        }
        let mut decision = Decision::new(
            (Verdict::Refuse(self.server.unknown_host), Block::Host),
            host,
            entry.map_or(self.default_limits, |e| e.limits),
            (resolved.addr, resolved.via),
        );
        // An ACME challenge of an order in flight: answered before every
        // block, for any host (the access log names the answer's step).
        if let Some(answer) = self.acme.http_answer(req.method, req.path) {
            decision.verdict = Verdict::Respond(answer);
            decision.step = Block::Answer;
            return decision;
        }
        let (Some(id), Some(entry)) = (host, entry) else {
            return self.unknown_host(decision, req, state, now_ms, trace);
        };
        // A host with every block off: the request limits, then its answer
        // (what the whole chain decides for it, without the blocks' checks).
        if start == Start::Beginning && !trace.enabled() && state.quiet(self, id) {
            return lane::quiet_decision(self, decision, entry, req);
        }
        // Asked once: the path and the budgets' step both read it.
        let budgets = self.gate.has_budgets();
        let Some(canonical) = self.canonical_path(entry, req.path, budgets, scratch, trace) else {
            decision.step = Block::Path;
            // Step 4 still: a path that cannot be made canonical pays too.
            if start != Start::Beginning
                || self.pays(&mut decision, req, &entry.policy, state, now_ms, trace)
            {
                decision.verdict = Verdict::Refuse(ErrorStatus::BadRequest);
            }
            return decision;
        };
        // Proof of work's verify endpoint is no route's.
        let verify = (entry.extras.pow.as_ref())
            .filter(|_| canonical == crate::pow::VERIFY_PATH && start == Start::Beginning);
        let route = match verify {
            Some(_) => None,
            None => self.route(entry, canonical, trace),
        };
        let mut flow = Flow {
            snap: self,
            req,
            state,
            trace,
            now_ms,
            start,
            entry,
            country: resolved.country,
            canonical,
            route,
            policy: route.map_or(&entry.policy, |r| &r.policy),
            robots: verify.is_none() && is_robots(req.method, canonical),
            budgets,
            marked: None,
            decision: &mut decision,
        };
        let Some(pow) = verify else {
            let verdict = flow.verdict();
            decision.verdict = verdict;
            return decision;
        };
        // The host's blocks through maintenance first: a refused address,
        // a rule set, the HTTPS redirect and maintenance stop it as they
        // stop any request.
        if let std::ops::ControlFlow::Break(v) = flow.blocks_through(Block::Maintenance) {
            decision.verdict = v;
            return decision;
        }
        self.pow_endpoint(decision, req, pow, state, trace)
    }

    /// Step 4 for a request no host's blocks see (an unknown host, a path
    /// that cannot be made canonical): its budgets under `policy`. False
    /// when refused (the decision is then the 429); true to go on.
    #[inline(always)]
    pub(super) fn pays<'s, H: HeaderLines + ?Sized, T: Trace>(
        &'s self,
        decision: &mut Decision<'s>,
        req: &Request<'_, H>,
        policy: &RequestPolicy,
        state: &mut GateState,
        now_ms: u64,
        trace: &mut T,
    ) -> bool {
        let budgets = self.gate.has_budgets();
        match self.budget_step(
            req.headers,
            policy,
            decision.client,
            false,
            state,
            now_ms,
            trace,
            budgets,
        ) {
            Ok(ticket) => {
                decision.ticket = ticket;
                true
            }
            Err((retry_after_s, level)) => {
                decision.retry_after_s = retry_after_s;
                decision.verdict = Verdict::Refuse(ErrorStatus::TooManyRequests);
                decision.step = Block::Budgets;
                decision.policy = Some(level);
                false
            }
        }
    }

    /// The proof-of-work verify endpoint, answered before route matching
    /// on a host where a route has proof of work, once the host's blocks
    /// through maintenance let it go on (its budgets paid under the host's
    /// policy): a `POST` is verified once its form is read and anything
    /// else is 403.
    fn pow_endpoint<'s, H: HeaderLines + ?Sized, T: Trace>(
        &'s self,
        mut decision: Decision<'s>,
        req: &Request<'_, H>,
        pow: &'s crate::pow::ProofOfWork,
        state: &mut GateState,
        trace: &mut T,
    ) -> Decision<'s> {
        decision.step = Block::ProofOfWork;
        let post = req.method == b"POST";
        if trace.enabled() {
            trace.step(Step::PowEndpoint { post });
        }
        decision.verdict = if post {
            Verdict::Pow(pow, crate::snapshot::PowAsk::Verify)
        } else {
            state.counters.pow.rejected[0] += 1;
            Verdict::Refuse(ErrorStatus::Forbidden)
        };
        decision
    }

    /// Step 4 for a request the parser refused (step 1: a malformed head,
    /// 400, 414 or 431): it pays the unknown-host policy's budgets from
    /// the peer's address, where the peer is the client (directly
    /// connected or named by a trusted PROXY header; a forwarding proxy's
    /// own prefix is never charged for a request it relayed). The answer
    /// stays the parser's; the ticket is given back when it is written.
    pub fn pay_unparsed(
        &self,
        peer: Peer,
        state: &mut GateState,
        now_ms: u64,
    ) -> Option<QuotaTicket> {
        let peer_is_client =
            self.gate.client.mode == crate::client::ClientMode::Direct || peer.via_proxy_protocol();
        if !peer_is_client || !self.gate.has_budgets() {
            return None;
        }
        let no_headers: [(&str, &[u8]); 0] = [];
        self.budget_step(
            &no_headers[..],
            &self.gate.unknown_host_policy,
            peer.addr(),
            false,
            state,
            now_ms,
            &mut NoTrace,
            true,
        )
        .ok()
        .flatten()
    }

    /// The canonical path, when something of the host reads it: routes
    /// match on it; rule sets and robots.txt read it; quotas read it for
    /// the robots.txt exemption and path-keyed rate limits. The host's own
    /// fields are asked first, the snapshot's budgets (six levels) last.
    /// `None`: the path cannot be made canonical (answer 400). `Some(b"")`
    /// when nothing reads it.
    #[inline(always)]
    fn canonical_path<'p, T: Trace>(
        &self,
        entry: &HostEntry,
        path: &'p [u8],
        budgets: bool,
        scratch: &'p mut PathScratch,
        trace: &mut T,
    ) -> Option<&'p [u8]> {
        let needs_path = matches!(entry.action, HostAction::Proxy(_))
            || entry.policy.rules.is_some()
            || entry.extras.robots.is_some()
            || entry.policy.rate_pair.is_some()
            || budgets;
        if !needs_path {
            return Some(b"");
        }
        match crate::path::canonical(path, scratch) {
            Ok(p) => {
                if trace.enabled() {
                    trace.step(Step::Path {
                        canonical: Ok(String::from_utf8_lossy(p).into_owned()),
                    });
                }
                Some(p)
            }
            Err(e) => {
                if trace.enabled() {
                    trace.step(Step::Path { canonical: Err(e) });
                }
                None
            }
        }
    }

    /// The route of a proxying host for the canonical path, for its policy
    /// and body limit. `None` for other hosts and for a path no route takes
    /// (answered 404 by step 17).
    #[inline(always)]
    fn route<'s, T: Trace>(
        &'s self,
        entry: &'s HostEntry,
        canonical: &[u8],
        trace: &mut T,
    ) -> Option<&'s Route> {
        let HostAction::Proxy(p) = &entry.action else {
            return None;
        };
        let route = p.route(canonical);
        if trace.enabled() {
            trace.step(Step::Route {
                index: route.map(|r| {
                    p.routes
                        .iter()
                        .position(|x| std::ptr::eq(x, r))
                        .unwrap_or(usize::MAX)
                }),
            });
        }
        route
    }
}
