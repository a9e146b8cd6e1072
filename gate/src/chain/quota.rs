//! The chain's two quota blocks: the budgets (global, source prefix,
//! operation, their leases and the identity budget) as the first block,
//! before any access check, and the route's rate limit after the access
//! checks.
//!
//! Builds the request's keys (source prefix, identity, the policy's rate
//! buckets with their IPv6 tiers) and asks the shard's quota tables. Budgets
//! and the rate limit keep separate modes: a refusal is carried out under
//! the mode of the level that refused, through [`Mode::apply`]. O(1) table
//! probes, no allocation.

use super::state::GateState;
use super::trace::{QuotaOutcome, Step, Trace};
use crate::client::HeaderLines;
use crate::mode::Mode;
use crate::policy::{RateKey, RateLimitDef, RequestPolicy};
use crate::quota::{
    Domain, QuotaDecision, QuotaRequest, QuotaTicket, RateCheck, Refusal, SourcePrefix,
};
use crate::snapshot::Snapshot;
use std::net::IpAddr;

/// Most rate buckets one request takes (the main one and two IPv6 tiers).
const MAX_RATE_CHECKS: usize = 3;

/// What a quota block decided: admitted (with the leases of the budgets'
/// block), or refused with the Retry-After seconds and the name of what
/// refused (the budget's level, or the rate limit).
pub(super) type Paid<'n> = Result<Option<QuotaTicket>, (u32, &'n str)>;

impl Snapshot {
    /// The budgets' block (`headers`: the request's, for the identity
    /// budget): global, source prefix (or health), operation,
    /// their leases, and the identity budget. `exempt`: `GET`/`HEAD
    /// /robots.txt`, never limited. Runs for every request a host takes and
    /// for those none takes (with the unknown-host policy). `budgets`: the
    /// snapshot's [`has_budgets`](crate::policy::GatePolicy::has_budgets),
    /// asked once per decision by the caller.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn budget_step<H: HeaderLines + ?Sized, T: Trace>(
        &self,
        headers: &H,
        policy: &RequestPolicy,
        client: IpAddr,
        exempt: bool,
        state: &mut GateState,
        now_ms: u64,
        trace: &mut T,
        budgets: bool,
    ) -> Paid<'static> {
        let gate = &self.gate;
        if !budgets {
            trace_quota(trace, QuotaOutcome::NotApplied, Which::Budgets);
            return Ok(None);
        }
        if exempt {
            trace_quota(trace, QuotaOutcome::Exempt, Which::Budgets);
            return Ok(None);
        }
        // A fleet-scoped level's keys are the same on every node.
        let fleet = &gate.quota.fleet;
        let keyer_for = |shared: bool| {
            if shared {
                &state.fleet_keyer
            } else {
                &state.keyer
            }
        };
        let identity = gate
            .identity_header
            .as_deref()
            .and_then(|h| headers.lines(h).last())
            .filter(|v| !v.is_empty())
            .map(|v| keyer_for(fleet.identity.is_some()).identity(v));
        let source = state.source_key(
            fleet.source.is_some(),
            Domain::SourceBudget,
            client,
            SourcePrefix::BUDGET,
        );
        let request = QuotaRequest {
            class: policy.class,
            source,
            operation: policy.operation,
            identity,
            rate: &[],
        };
        // A fleet's windows are cut from Unix time, so its nodes agree on
        // them; a node's own count from the shard's clock, so its first
        // window starts with it.
        let window_now_ms = if fleet.any() {
            now_ms.saturating_add(state.unix_origin_ms)
        } else {
            now_ms
        };
        let decision =
            state
                .quota
                .admit_shared(&gate.quota, &request, &mut state.fleet, window_now_ms);
        let refusal = match decision {
            QuotaDecision::Admit(ticket) => {
                trace_quota(trace, QuotaOutcome::Admitted, Which::Budgets);
                return Ok(Some(ticket));
            }
            QuotaDecision::Refuse(r) => r,
        };
        refuse(state, refusal, gate.quota_mode, None, trace, Which::Budgets)
            .map_err(|retry| (retry, refusal.level.name()))
    }

    /// The rate limit's block: the token buckets of the policy's rate limit
    /// (the main one, then its IPv6 tiers, all or none). `exempt`: as for
    /// the budgets.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn rate_step<H: HeaderLines + ?Sized, T: Trace>(
        &self,
        headers: &H,
        policy: &RequestPolicy,
        client: IpAddr,
        canonical: &[u8],
        exempt: bool,
        state: &mut GateState,
        now_ms: u64,
        trace: &mut T,
    ) -> Result<(), (u32, &str)> {
        let gate = &self.gate;
        let Some(pair) = policy.rate_pair else {
            return Ok(());
        };
        if exempt {
            trace_quota(trace, QuotaOutcome::Exempt, Which::Rate);
            return Ok(());
        }
        let pair = pair as usize;
        let Some(def) = gate
            .rate_pairs
            .get(pair)
            .and_then(|p| gate.rate_limits.get(p.limit as usize))
        else {
            trace_quota(trace, QuotaOutcome::NotApplied, Which::Rate);
            return Ok(());
        };
        let limit = gate.rate_pairs[pair].limit as usize;
        let Some(slot) = state.pair_slots.get(pair).copied().flatten() else {
            // No bucket slot (they ran out while retired limits held
            // theirs): the limit fails closed, never off.
            return unbound(state, def.mode, limit, trace)
                .map_err(|retry| (retry, def.name.as_str()));
        };
        let slot = &slot;
        let key = match &def.key {
            RateKey::Ip => state.source_key(
                def.fleet.is_some(),
                Domain::RateSource,
                client,
                SourcePrefix::RATE,
            ),
            RateKey::IpPath => state.keyer_for(def.fleet.is_some()).source_path(
                client,
                SourcePrefix::RATE,
                canonical,
            ),
            RateKey::Header(name) => {
                let value = headers.lines(name).last();
                state.keyer_for(def.fleet.is_some()).header_or_source(
                    value,
                    client,
                    SourcePrefix::RATE,
                )
            }
        };
        let identity = gate.rate_pairs[pair].identity;
        let fleet = def.fleet.as_ref().map(|f| {
            let choice = state.fleet.choose(
                state.quota.rate(),
                (&def.policy, &f.local_share),
                *slot,
                identity,
                key,
                policy.class.may_use_reserve(),
                now_ms,
            );
            (choice, f)
        });
        // Every request of a fleet-scoped limit is decided under its local
        // share; a shared key's bucket holds this node's lease of what the
        // fleet had left (`quota::fleet`).
        let main = match fleet {
            Some((_, f)) => &f.local_share,
            None => &def.policy,
        };
        let first = RateCheck {
            policy: main,
            slot: *slot,
            key,
        };
        let refusal = match take_buckets(state, def, first, client, now_ms) {
            Ok(()) => {
                if let Some((choice, f)) = fleet {
                    state
                        .fleet
                        .record(choice, &def.policy, &f.local_share, now_ms);
                }
                if let Some(c) = state.rate_counters.get_mut(limit) {
                    c.allowed += 1;
                }
                trace_quota(trace, QuotaOutcome::Admitted, Which::Rate);
                return Ok(());
            }
            Err(r) => r,
        };
        refuse(state, refusal, def.mode, Some(limit), trace, Which::Rate)
            .map(|_| ())
            .map_err(|retry| (retry, def.name.as_str()))
    }
}

/// The rate limit's buckets, all or none: `first` (the limit's own), and
/// beside it an IPv6 client's tiers (the array of checks is built only
/// then).
#[inline(always)]
fn take_buckets(
    state: &mut GateState,
    def: &RateLimitDef,
    first: RateCheck<'_>,
    client: IpAddr,
    now_ms: u64,
) -> Result<(), Refusal> {
    let tiers = client.is_ipv6() && def.key == RateKey::Ip && !def.ipv6_tiers.is_empty();
    if !tiers {
        return state.quota.rate_limit(std::slice::from_ref(&first), now_ms);
    }
    let mut checks = [first; MAX_RATE_CHECKS];
    let mut n = 1;
    for (prefix, tier) in def.ipv6_tiers.iter().take(MAX_RATE_CHECKS - 1) {
        checks[n] = RateCheck {
            policy: tier,
            slot: first.slot,
            key: state
                .keyer_for(def.fleet.is_some())
                .source(Domain::RateSource, client, *prefix),
        };
        n += 1;
    }
    state.quota.rate_limit(&checks[..n], now_ms)
}

/// A rate limit without a bucket slot: refused (fail closed, Retry-After
/// 1 s) and counted, or let through in shadow mode. Cold.
#[cold]
fn unbound<T: Trace>(
    state: &mut GateState,
    mode: Mode,
    limit: usize,
    trace: &mut T,
) -> Result<(), u32> {
    state.counters.rate_unbound_refused += 1;
    let level = crate::quota::Level::Rate;
    state.quota.counters.refused[level as usize] += 1;
    state.quota.counters.untracked[level as usize] += 1;
    let r = crate::quota::Refusal {
        level,
        untracked: true,
        retry_after_s: 1,
    };
    refuse(state, r, mode, Some(limit), trace, Which::Rate).map(|_| ())
}

/// Records a quota block's outcome: the rate limit's or the budgets'.
#[inline(always)]
fn trace_quota<T: Trace>(trace: &mut T, outcome: QuotaOutcome, which: Which) {
    if trace.enabled() {
        trace.step(match which {
            Which::Budgets => Step::Budgets { outcome },
            Which::Rate => Step::RateLimit { outcome },
            Which::Identity => Step::Identity { outcome },
        });
    }
}

/// Which block a quota outcome is traced as.
#[derive(Clone, Copy)]
enum Which {
    Budgets,
    Rate,
    Identity,
}

/// Traces an admitted identity step (`super::dims`).
pub(super) fn trace_dims_admitted<T: Trace>(trace: &mut T) {
    trace_quota(trace, QuotaOutcome::Admitted, Which::Identity);
}

/// Carries out an identity dimension's refusal under `mode` (the identity
/// step, `super::dims`): `Err` with the Retry-After of the 429, or `Ok` in
/// shadow mode.
pub(super) fn refuse_dims<T: Trace>(
    state: &mut GateState,
    r: Refusal,
    mode: Mode,
    trace: &mut T,
) -> Result<(), u32> {
    refuse(state, r, mode, None, trace, Which::Identity).map(|_| ())
}

/// Carries out a refusal under `mode`: a 429 (`Err` with its Retry-After),
/// or in shadow mode a hit counted and the request let through (the tables
/// counted a refusal; it is taken back). `limit`: the rate limit that
/// refused, for its own counters.
#[inline(always)]
fn refuse<T: Trace>(
    state: &mut GateState,
    r: Refusal,
    mode: Mode,
    limit: Option<usize>,
    trace: &mut T,
    which: Which,
) -> Result<Option<QuotaTicket>, u32> {
    let rate_counters = limit.and_then(|l| state.rate_counters.get_mut(l));
    let Some(r) = mode.apply(Some(r), &mut state.counters.quota_shadow) else {
        if let Some(c) = rate_counters {
            c.shadow_hits += 1;
        }
        let refused = &mut state.quota.counters.refused[r.level as usize];
        *refused = refused.saturating_sub(1);
        trace_quota(trace, QuotaOutcome::Shadowed { level: r.level }, which);
        return Ok(None);
    };
    if let Some(c) = rate_counters {
        c.refused += 1;
    }
    trace_quota(
        trace,
        QuotaOutcome::Refused {
            level: r.level,
            retry_after_s: r.retry_after_s,
        },
        which,
    );
    Err(r.retry_after_s)
}
