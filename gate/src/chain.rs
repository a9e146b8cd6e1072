//! The request chain: every block in the order of docs/gate.md.
//!
//! [`Snapshot::decide`] is the one implementation the server and `gapura
//! explain` share. It is generic over a [`Trace`]: the server passes
//! [`NoTrace`], whose calls compile to nothing, and explain passes a
//! recorder. Mutable state is the shard's [`GateState`]; time is `now_ms`,
//! the shard's monotonic milliseconds. O(host + path + header lines read),
//! no allocation.

use crate::access::cache::{CacheKeyer, VerifyCache};
use crate::access::{AccessDecision, CredentialsFact};
use crate::client::{Arrival, HeaderLines, Peer};
use crate::country::RuleVerdict;
use crate::host::{HostAction, HostId};
use crate::limits::{LimitRefusal, RequestLimits};
use crate::maintenance::{MaintenanceCounters, MaintenanceOutcome};
use crate::mode::Mode;
use crate::pages::ErrorStatus;
use crate::path::{PathError, PathScratch};
use crate::policy::{RateKey, RequestPolicy};
use crate::quota::{
    Keyer, Level, Quota, QuotaDecision, QuotaRequest, QuotaSizes, QuotaTicket, RateCheck,
    SizeError, Slot, SourcePrefix,
};
use crate::ruleset::{RegexCaches, RuleRefusal, RuleRequest, RuleSetCounters};
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
    /// The access list's address side, before the rule set.
    AccessAddress {
        list: &'s str,
        refused: Option<crate::access::AddressRefusal>,
        mode: Mode,
    },
    RuleSet {
        set: &'s str,
        rule: Option<usize>,
        action: Option<crate::ruleset::Action>,
        mode: Mode,
        exempt: bool,
    },
    /// The access list in full: address, country, credentials.
    Access {
        list: &'s str,
        outcome: AccessStepOutcome,
        credentials: CredentialsFact,
        mode: Mode,
    },
    Robots {
        served: bool,
    },
    Maintenance {
        outcome: MaintenanceOutcome,
    },
}

/// What the access step decided, for explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessStepOutcome {
    Pass,
    Refuse,
    Drop,
    Challenge,
    /// A password must be verified (explain stops here: it never runs PBKDF2).
    Verify,
    /// Verified off the shard and resumed.
    Verified,
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
    /// Managed robots.txt answers.
    pub robots_served: u64,
}

/// One access list's counters on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessCounters {
    pub allowed: u64,
    pub refused: u64,
    pub dropped: u64,
    pub challenged: u64,
    pub cache_hits: u64,
    pub verifications: u64,
    pub verify_failures: u64,
    /// Refused because the verification line was full or the wait ran out.
    pub queue_refusals: u64,
    pub shadow_hits: u64,
}

/// Where the chain starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    Beginning,
    /// After a password verified off the shard: the access list passed.
    AfterAccess {
        strip_authorization: bool,
    },
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
    /// Per rule set of the adopted snapshot: regex caches and counters.
    regex_caches: Vec<RegexCaches>,
    pub rule_counters: Vec<RuleSetCounters>,
    /// Per access list of the adopted snapshot.
    pub access_counters: Vec<AccessCounters>,
    /// Per host of the adopted snapshot.
    pub maintenance_counters: Vec<MaintenanceCounters>,
    /// Names the counters above were kept under, to carry them across a
    /// reload (lists and sets by name, hosts by label).
    rule_names: Vec<String>,
    access_names: Vec<String>,
    host_names: Vec<String>,
    pub verify_cache: VerifyCache,
    pub cache_keyer: CacheKeyer,
    /// Accept-time tables: open connections and new connections per prefix.
    conn_leases: crate::quota::LeaseTable,
    conn_rate: crate::quota::RateTable,
    pub connection_counters: ConnectionCounters,
}

/// Accept-time refusals on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionCounters {
    pub refused_concurrent: u64,
    pub refused_rate: u64,
    pub shadow_hits: u64,
}

/// Which accept-time limit refused a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionRefusal {
    Concurrent,
    Rate,
}

/// A connection's hold on its prefix's concurrency: give it back with
/// [`GateState::release_connection`] when the connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionToken(crate::quota::LeaseToken);

impl GateState {
    /// Tables sized by `sizes` (allocates, once per shard), keys seeded by
    /// `seed` (random per process).
    pub fn new(sizes: &QuotaSizes, seed: [u8; 16]) -> Result<GateState, SizeError> {
        let mut secret = [0u8; 32];
        secret[..16].copy_from_slice(&seed);
        for (i, b) in seed.iter().enumerate() {
            secret[16 + i] = b.rotate_left(3) ^ 0xa5;
        }
        Ok(GateState {
            quota: Quota::new(sizes)?,
            keyer: Keyer::new(seed),
            pair_slots: Vec::new(),
            adopted: u64::MAX,
            counters: ChainCounters::default(),
            regex_caches: Vec::new(),
            rule_counters: Vec::new(),
            access_counters: Vec::new(),
            maintenance_counters: Vec::new(),
            rule_names: Vec::new(),
            access_names: Vec::new(),
            host_names: Vec::new(),
            verify_cache: VerifyCache::with_capacity(crate::access::cache::DEFAULT_CAPACITY),
            cache_keyer: CacheKeyer::new(&secret),
            conn_leases: crate::quota::LeaseTable::new(sizes.max_leases, sizes.lease_keys, 0),
            conn_rate: crate::quota::RateTable::new((sizes.rate_entries / 16).max(1024))
                .map_err(|_| SizeError::RateEntries)?,
            connection_counters: ConnectionCounters::default(),
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
        // Per-block state follows the blocks by name across the reload.
        fn carry<C: Copy + Default>(old_names: &[String], old: &[C], new_names: &[&str]) -> Vec<C> {
            new_names
                .iter()
                .map(|n| {
                    old_names
                        .iter()
                        .position(|o| o == n)
                        .and_then(|i| old.get(i).copied())
                        .unwrap_or_default()
                })
                .collect()
        }
        let gate = &snap.gate;
        let rule_names: Vec<&str> = gate.rule_set_names.iter().map(String::as_str).collect();
        self.rule_counters = carry(&self.rule_names, &self.rule_counters, &rule_names);
        self.rule_names = rule_names.iter().map(|s| s.to_string()).collect();
        self.regex_caches = gate
            .rule_sets
            .iter()
            .map(|s| s.new_regex_caches())
            .collect();
        let access_names: Vec<&str> = gate.access_lists.iter().map(|l| l.name()).collect();
        self.access_counters = carry(&self.access_names, &self.access_counters, &access_names);
        self.access_names = access_names.iter().map(|s| s.to_string()).collect();
        let host_names: Vec<&str> = snap.entries.iter().map(|e| e.label.as_str()).collect();
        self.maintenance_counters =
            carry(&self.host_names, &self.maintenance_counters, &host_names);
        self.host_names = host_names.iter().map(|s| s.to_string()).collect();
    }

    /// The names the per-block counters are kept under (rule sets, access
    /// lists, hosts), for metrics.
    pub fn rule_set_names(&self) -> &[String] {
        &self.rule_names
    }

    pub fn access_list_names(&self) -> &[String] {
        &self.access_names
    }

    pub fn host_names(&self) -> &[String] {
        &self.host_names
    }

    /// Admits a new connection from `addr` under the snapshot's connection
    /// limits: `Ok(Some(token))` holds a concurrency place, `Ok(None)` means
    /// nothing is counted, `Err` says which limit refused (close it now).
    /// O(probe), no allocation.
    pub fn admit_connection(
        &mut self,
        limits: Option<&crate::policy::ConnectionLimits>,
        addr: IpAddr,
        now_ms: u64,
    ) -> Result<Option<ConnectionToken>, ConnectionRefusal> {
        let Some(l) = limits else {
            return Ok(None);
        };
        let shadow = l.mode == Mode::Shadow;
        if let Some(policy) = &l.rate {
            let key = self.keyer.source(
                crate::quota::Domain::ConnectionRate,
                addr,
                SourcePrefix::BUDGET,
            );
            let slot = Slot::new(1).expect("1 is a slot");
            if !self
                .conn_rate
                .try_acquire(policy, slot, key, now_ms)
                .allowed
            {
                if shadow {
                    self.connection_counters.shadow_hits += 1;
                } else {
                    self.connection_counters.refused_rate += 1;
                    return Err(ConnectionRefusal::Rate);
                }
            }
        }
        if let Some(n) = l.concurrent {
            let key = self.keyer.source(
                crate::quota::Domain::ConnectionLease,
                addr,
                SourcePrefix::BUDGET,
            );
            let per_key = crate::quota::Budget::new(n.max(1), n.max(1)).ok();
            let limits = crate::quota::LeaseLimits {
                global: None,
                per_key,
            };
            match self
                .conn_leases
                .acquire(crate::quota::Class::Normal, &limits, key, None)
            {
                Ok(t) => return Ok(Some(ConnectionToken(t))),
                Err(_) if shadow => self.connection_counters.shadow_hits += 1,
                Err(_) => {
                    self.connection_counters.refused_concurrent += 1;
                    return Err(ConnectionRefusal::Concurrent);
                }
            }
        }
        Ok(None)
    }

    /// Gives a connection's place back. A second release does nothing.
    pub fn release_connection(&mut self, token: ConnectionToken) {
        let _ = self.conn_leases.release(token.0);
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
            via: resolved.via,
        };
        let Some(entry) = entry else {
            return self.finish_limits(decision, req, trace);
        };

        // The canonical path, when something reads it.
        // Routes match on it; quotas read it for the robots.txt exemption
        // and path-keyed rate limits.
        let needs_path = matches!(entry.action, HostAction::Proxy(_))
            || self.gate.has_budgets()
            || entry.policy.rate_pair.is_some()
            || entry.extras.robots.is_some()
            // A rule set never rules on robots.txt: telling it apart needs the path.
            || entry.policy.rules.is_some();
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
                            decision.job = Some(job);
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
