//! The request chain: every block in the order of docs/gate.md.
//!
//! [`Snapshot::decide`] is the one implementation the server and `gapura
//! explain` share. It is generic over a [`Trace`]: the server passes
//! [`NoTrace`], whose calls compile to nothing, and explain passes a
//! recorder. Mutable state is the shard's [`GateState`]; time is `now_ms`,
//! the shard's monotonic milliseconds. O(host + path + header lines read),
//! no allocation.

use crate::client::{Arrival, HeaderLines, Peer};
use crate::host::{HostAction, HostId};
use crate::limits::{LimitRefusal, RequestLimits};
use crate::mode::Mode;
use crate::pages::ErrorStatus;
use crate::path::{PathError, PathScratch};
use crate::policy::{RateKey, RequestPolicy};
use crate::quota::{
    Keyer, Level, Quota, QuotaDecision, QuotaRequest, QuotaSizes, QuotaTicket, RateCheck,
    SizeError, Slot, SourcePrefix,
};
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

/// One step of the chain, for explain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<'s> {
    Client {
        peer: IpAddr,
        client: IpAddr,
        via: Arrival,
    },
    Host {
        label: Option<&'s str>,
    },
    Path {
        canonical: Result<String, PathError>,
    },
    Route {
        index: Option<usize>,
    },
    Quota {
        outcome: QuotaOutcome,
    },
    RequestLimits {
        refusal: Option<LimitRefusal>,
    },
}

/// What the quota step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaOutcome {
    /// No budget or rate limit applies.
    NotApplied,
    /// `GET`/`HEAD /robots.txt` is never limited.
    Exempt,
    Admitted,
    Refused {
        level: Level,
        retry_after_s: u32,
    },
    /// Shadow mode: would have been refused, let through.
    Shadowed {
        level: Level,
    },
}

/// Receives the chain's steps. The server's is a no-op.
pub trait Trace {
    fn step(&mut self, step: Step<'_>);
    /// Whether steps are recorded (skips building their facts otherwise).
    fn enabled(&self) -> bool;
}

/// The server's trace: nothing recorded, nothing built.
pub struct NoTrace;

impl Trace for NoTrace {
    #[inline(always)]
    fn step(&mut self, _: Step<'_>) {}
    #[inline(always)]
    fn enabled(&self) -> bool {
        false
    }
}

/// Counters of the chain's blocks, owned by the shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainCounters {
    /// Quota refusals let through by shadow mode.
    pub quota_shadow: u64,
    /// Requests exempt from quotas (`robots.txt`).
    pub quota_exempt: u64,
}

/// A shard's mutable gate state: the quota tables, their keyer, the rate
/// slots bound for the snapshot it serves, and counters.
pub struct GateState {
    pub quota: Quota,
    keyer: Keyer,
    /// Slot per rate pair of the adopted snapshot.
    pair_slots: Vec<Option<Slot>>,
    adopted: u64,
    pub counters: ChainCounters,
}

impl GateState {
    /// Tables sized by `sizes` (allocates, once per shard), keys seeded by
    /// `seed` (random per process).
    pub fn new(sizes: &QuotaSizes, seed: [u8; 16]) -> Result<GateState, SizeError> {
        Ok(GateState {
            quota: Quota::new(sizes)?,
            keyer: Keyer::new(seed),
            pair_slots: Vec::new(),
            adopted: u64::MAX,
            counters: ChainCounters::default(),
        })
    }

    /// Small tables (a few KiB), for `gapura explain` and tests: one request
    /// or a handful, never a server's load.
    pub fn small() -> GateState {
        use crate::quota::Ceiling;
        let ceiling = |n| Ceiling::new(n, n / 8).expect("constant ceiling");
        let sizes = QuotaSizes {
            rate_entries: 1024,
            policy_slots: 1024,
            slot_grace_ms: 60_000,
            window_ms: 1000,
            window_keys: ceiling(1024),
            lease_keys: ceiling(1024),
            max_leases: 1024,
            operations: 64,
        };
        GateState::new(&sizes, [0x5a; 16]).expect("constant sizes")
    }

    /// Binds the snapshot's rate pairs to slots, once per generation: a
    /// pair keeps its slot (and buckets) across reloads; pairs gone are
    /// retired and swept after their grace. Allocates only on a new
    /// generation.
    pub fn adopt(&mut self, snap: &Snapshot, now_ms: u64) {
        if self.adopted == snap.generation {
            return;
        }
        self.adopted = snap.generation;
        let slots = self.quota.slots_mut();
        slots.begin_reload();
        self.pair_slots.clear();
        for pair in &snap.gate.rate_pairs {
            let policy = &snap.gate.rate_limits[pair.limit as usize].policy;
            self.pair_slots
                .push(slots.bind(pair.identity, *policy).ok());
        }
        slots.finish_reload(now_ms);
    }

    /// Sweeps retired rate slots, expired windows; bounded work per call.
    pub fn sweep(&mut self, now_ms: u64, budget: usize) {
        let _ = self.quota.sweep(now_ms, budget);
    }

    /// Gives a ticket's leases back. A second release does nothing.
    pub fn release(&mut self, ticket: QuotaTicket) {
        let _ = self.quota.release(ticket);
    }
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
    /// The password check to run off the shard (with `Verdict::Verify`).
    pub job: Option<crate::access::VerifyJob>,
    /// The access list took the credentials: remove `Authorization` before
    /// the upstream.
    pub strip_authorization: bool,
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
        // 3. The client address (facts only).
        let resolved = self.gate.client.resolve(req.peer, req.headers);
        let client = resolved.addr;
        if trace.enabled() {
            trace.step(Step::Client {
                peer: resolved.peer,
                client,
                via: resolved.via,
            });
        }
        // 2. The host.
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
            job: None,
            strip_authorization: false,
        };
        let Some(entry) = entry else {
            return self.finish_limits(decision, req, trace);
        };

        // The canonical path, when something reads it.
        // Routes match on it; quotas read it for the robots.txt exemption
        // and path-keyed rate limits.
        let needs_path = matches!(entry.action, HostAction::Proxy(_))
            || self.gate.has_budgets()
            || entry.policy.rate_pair.is_some();
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
        decision.verdict = match &entry.action {
            HostAction::Respond(a) => Verdict::Respond(a),
            HostAction::Redirect(r) => Verdict::Redirect(r),
            HostAction::Proxy(_) => match route {
                Some(r) => Verdict::Forward(r, &self.upstreams[r.upstream as usize]),
                None => Verdict::Refuse(ErrorStatus::NotFound),
            },
        };
        self.finish_limits(decision, req, trace)
    }

    /// Step 8: the target and header limits, then the declared body.
    fn finish_limits<'s, H: HeaderLines + ?Sized, T: Trace>(
        &'s self,
        mut decision: Decision<'s>,
        req: &Request<'_, H>,
        trace: &mut T,
    ) -> Decision<'s> {
        let limits = decision.limits;
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
        if let Some(r) = refusal {
            decision.verdict = Verdict::Refuse(limit_status(r));
        }
        decision
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
                if mode == Mode::Shadow {
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
