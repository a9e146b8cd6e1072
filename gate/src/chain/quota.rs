//! Step 7 of the chain: budgets, leases and the rate limit.
//!
//! Builds the request's keys (source prefix, identity, the policy's rate
//! buckets with their IPv6 tiers) and asks the shard's quota tables once.
//! Budgets and the rate limit keep separate modes: a refusal is carried out
//! under the mode of the level that refused, through [`Mode::apply`]. O(1)
//! table probes, no allocation.

use super::{is_robots, QuotaOutcome, Request, Step, Trace};
use crate::chain::GateState;
use crate::client::HeaderLines;
use crate::mode::Mode;
use crate::policy::{RateKey, RequestPolicy};
use crate::quota::{Level, QuotaDecision, QuotaRequest, QuotaTicket, RateCheck, SourcePrefix};
use crate::snapshot::Snapshot;
use std::net::IpAddr;

/// Most rate buckets one request takes (the main one and two IPv6 tiers).
const MAX_RATE_CHECKS: usize = 3;

impl Snapshot {
    /// Budgets, leases and rate. Ok(ticket) admits; Err(retry) refuses.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn quota_step<H: HeaderLines + ?Sized, T: Trace>(
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
                let rate_counters = limit.and_then(|l| state.rate_counters.get_mut(l));
                let Some(r) = mode.apply(Some(r), &mut state.counters.quota_shadow) else {
                    // Let through: a shadow hit, not a refusal (the tables
                    // counted one when they refused).
                    if let Some(c) = rate_counters {
                        c.shadow_hits += 1;
                    }
                    let refused = &mut state.quota.counters.refused[r.level as usize];
                    *refused = refused.saturating_sub(1);
                    if trace.enabled() {
                        trace.step(Step::Quota {
                            outcome: QuotaOutcome::Shadowed { level: r.level },
                        });
                    }
                    return Ok(None);
                };
                if let Some(c) = rate_counters {
                    c.refused += 1;
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
