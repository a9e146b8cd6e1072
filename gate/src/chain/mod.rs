//! The request chain: every block in the order of docs/gate.md.
//!
//! [`Snapshot::decide`] is the one implementation the server and `gapura
//! explain` share. It is generic over a [`Trace`]: the server passes
//! [`NoTrace`], whose calls compile to nothing, and explain passes a
//! recorder. Mutable state is the shard's [`GateState`]; time is `now_ms`,
//! the shard's monotonic milliseconds. O(host + path + header lines read),
//! no allocation.

mod state;
mod trace;

pub use state::{
    AccessCounters, ChainCounters, ConnectionCounters, ConnectionRefusal, ConnectionToken,
    GateState, RateLimitCounters, Start,
};
pub use trace::{AccessStepOutcome, NoTrace, QuotaOutcome, Step, Trace};

use crate::access::{AccessDecision, CredentialsFact};
use crate::client::{Arrival, HeaderLines, Peer};
use crate::country::RuleVerdict;
use crate::host::{HostAction, HostId};
use crate::limits::{LimitRefusal, RequestLimits};
use crate::maintenance::MaintenanceCounters;
use crate::mode::Mode;
use crate::pages::ErrorStatus;
use crate::path::PathScratch;
use crate::policy::{RateKey, RequestPolicy};
use crate::quota::{Level, QuotaDecision, QuotaRequest, QuotaTicket, RateCheck, SourcePrefix};
use crate::ruleset::{RuleRefusal, RuleRequest};
use crate::snapshot::{limit_status, Snapshot, Verdict};
use crate::upstream::Route;
use std::net::IpAddr;

/// Most rate buckets one request takes (the main one and two IPv6 tiers).
const MAX_RATE_CHECKS: usize = 3;

/// A request as the chain sees it. Borrowed, no copies.
pub struct Request<'a, H: HeaderLines + ?Sized> {
    pub peer: Peer,
    pub method: &'a [u8],
    pub host: Option<&'a [u8]>,
    /// Raw target as sent.
    pub target: &'a [u8],
    /// Path and query (origin form).
    pub path: &'a [u8],
    pub header_count: usize,
    pub header_bytes: usize,
    pub content_length: Option<u64>,
    pub headers: &'a H,
}

/// The chain's answer for one request.
#[derive(Debug)]
pub struct Decision<'s> {
    pub verdict: Verdict<'s>,
    pub host: Option<HostId>,
    /// The limits that apply while the body is read.
    pub limits: RequestLimits,
    /// The resolved client address.
    pub client: IpAddr,
    /// Leases held for the request's life: release them when it ends.
    pub ticket: Option<QuotaTicket>,
    /// Retry-After seconds of a 429.
    pub retry_after_s: u32,
    /// The access list took the credentials: remove `Authorization` before
    /// the upstream.
    pub strip_authorization: bool,
    /// How the client address was learned (Cloudflare: `CF-Ray` is trusted).
    pub via: Arrival,
}

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
        // 2. The client address (facts only).
        let resolved = self.gate.client.resolve(req.peer, req.headers);
        let client = resolved.addr;
        if trace.enabled() {
            trace.step(Step::Client {
                peer: resolved.peer,
                client,
                via: resolved.via,
            });
        }
        // 3. The host.
        let host = self.hosts.lookup(req.host);
        let entry = host.map(|id| &self.entries[id as usize]);
        if trace.enabled() {
            trace.step(Step::Host {
                label: entry.map(|e| e.label.as_str()),
            });
        }
        let mut limits = entry.map_or(self.default_limits, |e| e.limits);
        let mut decision = Decision {
            verdict: Verdict::Refuse(self.server.unknown_host),
            host,
            limits,
            client,
            ticket: None,
            retry_after_s: 0,
            strip_authorization: false,
            via: resolved.via,
        };
        let Some(entry) = entry else {
            return self.finish_limits(decision, req, trace);
        };

        // The canonical path, when something reads it.
        // Routes match on it; quotas read it for the robots.txt exemption
        // and path-keyed rate limits.
        // The host's own fields first; the snapshot's budgets (six levels)
        // last.
        let needs_path = matches!(entry.action, HostAction::Proxy(_))
            // A rule set never rules on robots.txt: telling it apart needs the path.
            || entry.policy.rules.is_some()
            || entry.extras.robots.is_some()
            || entry.policy.rate_pair.is_some()
            || self.gate.has_budgets();
        let canonical: &[u8] = if needs_path {
            match crate::path::canonical(req.path, scratch) {
                Ok(p) => p,
                Err(e) => {
                    if trace.enabled() {
                        trace.step(Step::Path { canonical: Err(e) });
                    }
                    decision.verdict = Verdict::Refuse(ErrorStatus::BadRequest);
                    return decision;
                }
            }
        } else {
            b""
        };
        if trace.enabled() && needs_path {
            trace.step(Step::Path {
                canonical: Ok(String::from_utf8_lossy(canonical).into_owned()),
            });
        }
        // The route, for its policy and body limit.
        let route: Option<&Route> = match &entry.action {
            HostAction::Proxy(p) => p.route(canonical),
            _ => None,
        };
        if trace.enabled() {
            if let HostAction::Proxy(p) = &entry.action {
                trace.step(Step::Route {
                    index: route.map(|r| {
                        p.routes
                            .iter()
                            .position(|x| std::ptr::eq(x, r))
                            .unwrap_or(usize::MAX)
                    }),
                });
            }
        }
        let policy: &RequestPolicy = route.map_or(&entry.policy, |r| &r.policy);
        let robots = is_robots(req.method, canonical);

        if let Start::AfterAccess {
            strip_authorization,
        } = start
        {
            decision.strip_authorization = strip_authorization;
            if trace.enabled() {
                if let Some(b) = policy.access {
                    trace.step(Step::Access {
                        list: self.gate.access_lists[b.index as usize].name(),
                        outcome: AccessStepOutcome::Verified,
                        credentials: CredentialsFact::Deferred,
                        mode: b.mode,
                    });
                }
            }
        } else {
            // 4. The access list's address side.
            if let Some(b) = policy.access {
                let list = &self.gate.access_lists[b.index as usize];
                let refused = list.address_only_verdict(client);
                if refused.is_none() && list.address_decides_all() {
                    // Step 6 has nothing left to ask: the list passed.
                    state.access_counters[b.index as usize].allowed += 1;
                }
                if trace.enabled() {
                    trace.step(Step::AccessAddress {
                        list: list.name(),
                        refused,
                        mode: b.mode,
                    });
                }
                if let Some(r) = refused {
                    let counters = &mut state.access_counters[b.index as usize];
                    if b.mode == Mode::Shadow {
                        // Counted once: here when step 6 will not run,
                        // else by step 6.
                        if list.address_decides_all() {
                            counters.shadow_hits += 1;
                        }
                    } else {
                        decision.verdict = match r {
                            crate::access::AddressRefusal::Drop => {
                                counters.dropped += 1;
                                Verdict::Drop
                            }
                            crate::access::AddressRefusal::Deny => {
                                counters.refused += 1;
                                Verdict::Refuse(ErrorStatus::Forbidden)
                            }
                        };
                        return decision;
                    }
                }
            }
            // 5. The rule set (robots.txt is never ruled on).
            if let Some(b) = policy.rules {
                let i = b.index as usize;
                let set = &self.gate.rule_sets[i];
                let (rule, action, refusal) = if robots {
                    (None, None, None)
                } else {
                    let rr = RuleRequest {
                        method: req.method,
                        path: canonical,
                        user_agents: req.headers.lines("user-agent"),
                    };
                    let d = set.decide(
                        &rr,
                        &mut state.regex_caches[i],
                        &mut state.rule_counters[i],
                        b.mode,
                    );
                    (d.outcome.rule, d.outcome.action, d.refusal)
                };
                if trace.enabled() {
                    trace.step(Step::RuleSet {
                        set: &self.gate.rule_set_names[i],
                        rule,
                        action,
                        mode: b.mode,
                        exempt: robots,
                    });
                }
                match refusal {
                    Some(RuleRefusal::Deny) => {
                        decision.verdict = Verdict::Refuse(ErrorStatus::Forbidden);
                        return decision;
                    }
                    Some(RuleRefusal::Drop) => {
                        decision.verdict = Verdict::Drop;
                        return decision;
                    }
                    None => {}
                }
            }
            // 6. The access list in full: country and credentials. A list
            // without either was decided whole by step 4.
            if let Some(b) = policy
                .access
                .filter(|b| !self.gate.access_lists[b.index as usize].address_decides_all())
            {
                let i = b.index as usize;
                let list = &self.gate.access_lists[i];
                let out = list.decide(
                    client,
                    resolved.country,
                    req.headers,
                    Some(&mut state.verify_cache),
                    &state.cache_keyer,
                    now_ms,
                );
                let counters = &mut state.access_counters[i];
                if out.credentials == CredentialsFact::CacheHit {
                    counters.cache_hits += 1;
                }
                let shadow = b.mode == Mode::Shadow;
                let (outcome, verdict) = match out.decision {
                    AccessDecision::Pass {
                        strip_authorization,
                    } => {
                        counters.allowed += 1;
                        decision.strip_authorization = strip_authorization;
                        (AccessStepOutcome::Pass, None)
                    }
                    AccessDecision::Refuse => (
                        AccessStepOutcome::Refuse,
                        Some(Verdict::Refuse(ErrorStatus::Forbidden)),
                    ),
                    AccessDecision::Drop => (AccessStepOutcome::Drop, Some(Verdict::Drop)),
                    AccessDecision::Challenge(page) => {
                        (AccessStepOutcome::Challenge, Some(Verdict::Challenge(page)))
                    }
                    AccessDecision::Verify(job) => {
                        if shadow {
                            // A shadowed list never costs a verification.
                            (AccessStepOutcome::Verify, Some(Verdict::Verify(b.index)))
                        } else {
                            counters.verifications += 1;
                            // Kept in the shard's state, not in the decision:
                            // the job is large and most decisions have none.
                            state.pending_job = Some(job);
                            (AccessStepOutcome::Verify, Some(Verdict::Verify(b.index)))
                        }
                    }
                };
                if trace.enabled() {
                    trace.step(Step::Access {
                        list: list.name(),
                        outcome,
                        credentials: out.credentials,
                        mode: b.mode,
                    });
                }
                if let Some(v) = verdict {
                    if shadow {
                        counters.shadow_hits += 1;
                    } else {
                        match v {
                            Verdict::Refuse(_) => counters.refused += 1,
                            Verdict::Drop => counters.dropped += 1,
                            Verdict::Challenge(_) => counters.challenged += 1,
                            _ => {}
                        }
                        decision.verdict = v;
                        return decision;
                    }
                }
            }
        }

        // 7. Budgets, leases and the rate limit.
        match self.quota_step(req, policy, client, canonical, state, now_ms, trace) {
            Ok(ticket) => decision.ticket = ticket,
            Err(retry_after_s) => {
                decision.verdict = Verdict::Refuse(ErrorStatus::TooManyRequests);
                decision.retry_after_s = retry_after_s;
                return decision;
            }
        }

        // 8. The host's request limits; the route's body limit.
        if let Some(r) = route {
            limits.max_body_bytes = r.limits.max_body_bytes;
        }
        decision.limits = limits;
        if let Some(r) = self.limit_refusal(&limits, req, trace) {
            decision.verdict = Verdict::Refuse(limit_status(r));
            return decision;
        }
        // 9. The managed robots.txt.
        if let Some(r) = &entry.extras.robots {
            let answer = if robots {
                r.answer(req.method, canonical)
            } else {
                None
            };
            if trace.enabled() && r.is_managed() {
                trace.step(Step::Robots {
                    served: answer.is_some(),
                });
            }
            if let Some(a) = answer {
                state.counters.robots_served += 1;
                decision.verdict = Verdict::Respond(a);
                return decision;
            }
        }
        // 10. Maintenance.
        if let (Some(m), Some(id)) = (&entry.extras.maintenance, host) {
            let bypassed = m.bypass.is_some_and(|i| {
                self.gate.access_lists[i as usize]
                    .rules()
                    .check(client, resolved.country)
                    .verdict
                    == RuleVerdict::Allowed
            });
            let mut scratch_counters = MaintenanceCounters::default();
            let counters = state
                .maintenance_counters
                .get_mut(id as usize)
                .unwrap_or(&mut scratch_counters);
            let outcome = m.page.decide(bypassed, m.mode, counters);
            if trace.enabled() {
                trace.step(Step::Maintenance { outcome });
            }
            if outcome.serves() {
                decision.verdict = Verdict::Maintenance(&m.page);
                return decision;
            }
        }
        // 11. The host's answer.
        decision.verdict = match &entry.action {
            HostAction::Respond(a) => Verdict::Respond(a),
            HostAction::Redirect(r) => Verdict::Redirect(r),
            HostAction::Proxy(_) => match route {
                Some(r) => Verdict::Forward(r, &self.upstreams[r.upstream as usize]),
                None => Verdict::Refuse(ErrorStatus::NotFound),
            },
        };
        decision
    }

    /// Step 8 for a request no host takes: its limits, else the unknown-host answer.
    fn finish_limits<'s, H: HeaderLines + ?Sized, T: Trace>(
        &'s self,
        mut decision: Decision<'s>,
        req: &Request<'_, H>,
        trace: &mut T,
    ) -> Decision<'s> {
        if let Some(r) = self.limit_refusal(&decision.limits, req, trace) {
            decision.verdict = Verdict::Refuse(limit_status(r));
        }
        decision
    }

    /// Step 8: the target and header limits, then the declared body.
    fn limit_refusal<H: HeaderLines + ?Sized, T: Trace>(
        &self,
        limits: &RequestLimits,
        req: &Request<'_, H>,
        trace: &mut T,
    ) -> Option<LimitRefusal> {
        let refusal = limits
            .check_head(req.target.len(), req.header_count, req.header_bytes)
            .err()
            .or_else(|| {
                req.content_length
                    .and_then(|n| limits.check_declared_body(n).err())
            });
        if trace.enabled() {
            trace.step(Step::RequestLimits { refusal });
        }
        refusal
    }

    /// Budgets, leases and rate. Ok(ticket) admits; Err(retry) refuses.
    #[allow(clippy::too_many_arguments)]
    fn quota_step<H: HeaderLines + ?Sized, T: Trace>(
        &self,
        req: &Request<'_, H>,
        policy: &RequestPolicy,
        client: IpAddr,
        canonical: &[u8],
        state: &mut GateState,
        now_ms: u64,
        trace: &mut T,
    ) -> Result<Option<QuotaTicket>, u32> {
        let gate = &self.gate;
        let budgets = gate.has_budgets();
        if !budgets && policy.rate_pair.is_none() {
            if trace.enabled() {
                trace.step(Step::Quota {
                    outcome: QuotaOutcome::NotApplied,
                });
            }
            return Ok(None);
        }
        if is_robots(req.method, canonical) {
            state.counters.quota_exempt += 1;
            if trace.enabled() {
                trace.step(Step::Quota {
                    outcome: QuotaOutcome::Exempt,
                });
            }
            return Ok(None);
        }
        let keyer = &state.keyer;
        // Rate buckets of the policy (the main one, then IPv6 tiers).
        let mut checks: [Option<RateCheck<'_>>; MAX_RATE_CHECKS] = [None; MAX_RATE_CHECKS];
        let mut n = 0;
        let mut rate_mode = Mode::Enforce;
        if let Some(pair) = policy.rate_pair {
            let pair = pair as usize;
            if let (Some(def), Some(Some(slot))) = (
                gate.rate_pairs
                    .get(pair)
                    .and_then(|p| gate.rate_limits.get(p.limit as usize)),
                state.pair_slots.get(pair),
            ) {
                rate_mode = def.mode;
                let key = match &def.key {
                    RateKey::Ip => {
                        keyer.source(crate::quota::Domain::RateSource, client, SourcePrefix::RATE)
                    }
                    RateKey::IpPath => keyer.source_path(client, SourcePrefix::RATE, canonical),
                    RateKey::Header(name) => {
                        let value = req.headers.lines(name).last();
                        keyer.header_or_source(value, client, SourcePrefix::RATE)
                    }
                };
                checks[0] = Some(RateCheck {
                    policy: &def.policy,
                    slot: *slot,
                    key,
                });
                n = 1;
                if client.is_ipv6() && def.key == RateKey::Ip {
                    for (prefix, tier) in &def.ipv6_tiers {
                        if n < MAX_RATE_CHECKS {
                            checks[n] = Some(RateCheck {
                                policy: tier,
                                slot: *slot,
                                key: keyer.source(
                                    crate::quota::Domain::RateSource,
                                    client,
                                    *prefix,
                                ),
                            });
                            n += 1;
                        }
                    }
                }
            }
        }
        let rate_arr: [RateCheck<'_>; MAX_RATE_CHECKS];
        let rate: &[RateCheck<'_>] = match checks[0] {
            None => &[],
            Some(first) => {
                rate_arr = [
                    first,
                    checks[1].unwrap_or(first),
                    checks[2].unwrap_or(first),
                ];
                &rate_arr[..n]
            }
        };
        let identity = gate
            .identity_header
            .as_deref()
            .and_then(|h| req.headers.lines(h).last())
            .filter(|v| !v.is_empty())
            .map(|v| keyer.identity(v));
        let request = QuotaRequest {
            class: policy.class,
            source: keyer.source(
                crate::quota::Domain::SourceBudget,
                client,
                SourcePrefix::BUDGET,
            ),
            operation: policy.operation,
            identity,
            rate,
        };
        let empty = crate::quota::QuotaLimits::default();
        let limits = if budgets { &gate.quota } else { &empty };
        match state.quota.decide(limits, &request, now_ms) {
            QuotaDecision::Admit(ticket) => {
                if trace.enabled() {
                    trace.step(Step::Quota {
                        outcome: QuotaOutcome::Admitted,
                    });
                }
                Ok(Some(ticket))
            }
            QuotaDecision::Refuse(r) => {
                // The rate limit has its own mode; budgets the quota's.
                let mode = if r.level == Level::Rate {
                    rate_mode
                } else {
                    gate.quota_mode
                };
                // The rate limit that refused, for its own counters.
                let limit = (r.level == Level::Rate)
                    .then_some(policy.rate_pair)
                    .flatten()
                    .and_then(|p| gate.rate_pairs.get(p as usize))
                    .map(|p| p.limit as usize);
                if let Some(c) = limit.and_then(|l| state.rate_counters.get_mut(l)) {
                    if mode == Mode::Shadow {
                        c.shadow_hits += 1;
                    } else {
                        c.refused += 1;
                    }
                }
                if mode == Mode::Shadow {
                    // Let through: a shadow hit, not a refusal (the tables
                    // counted one when they refused).
                    let refused = &mut state.quota.counters.refused[r.level as usize];
                    *refused = refused.saturating_sub(1);
                    state.counters.quota_shadow += 1;
                    if trace.enabled() {
                        trace.step(Step::Quota {
                            outcome: QuotaOutcome::Shadowed { level: r.level },
                        });
                    }
                    return Ok(None);
                }
                if trace.enabled() {
                    trace.step(Step::Quota {
                        outcome: QuotaOutcome::Refused {
                            level: r.level,
                            retry_after_s: r.retry_after_s,
                        },
                    });
                }
                Err(r.retry_after_s)
            }
        }
    }
}
