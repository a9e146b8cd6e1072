//! The (rate limit, host) pairs: every host's and route's request policy
//! resolved over its checked gate keys (`gatekeys`).
//!
//! Every distinct (rate limit, host) pair in use is one [`RatePair`]: its
//! buckets are the same whichever of the host's routes a request takes, so
//! a route that resolves to the host's limit shares the host's pair, and
//! routes naming another limit share one pair for it. A pair's identity
//! ([`pair_identity`]) depends only on the two names, so a shard keeps its
//! buckets across reloads.

use crate::error::Errors;
use crate::gatekeys::RouteRate;
use crate::host::{CheckedAction, CheckedHost};
use crate::identity::pair_identity;
use gapura_gate::policy::{RatePair, RequestPolicy};
use gapura_gate::quota::Class;
use std::collections::HashMap;
use std::ops::Range;

/// Resolves every host's and route's policy over the layers, making one
/// pair per distinct (rate limit, host) in use, in order of first use.
/// `limit_names` are the rate limits' names by index. More pairs than
/// `policy_slots` is `rate_limit.slots.exhausted`, at `slots_at` (the
/// written `quota.policy_slots`) or else at the reference that needed one
/// more.
pub(crate) fn resolve_policies(
    entries: &mut [CheckedHost],
    limit_names: &[String],
    policy_slots: u16,
    slots_at: Option<Range<usize>>,
    e: &mut Errors<'_>,
) -> Vec<RatePair> {
    let mut pairs: Vec<RatePair> = Vec::new();
    let mut exhausted = false;
    for (i, host) in entries.iter_mut().enumerate() {
        // (limit) -> pair index, for this host.
        let mut of_host: HashMap<u32, u32> = HashMap::new();
        let label = host.label.clone();
        let mut pair = |limit: u32, (path, at): (String, &Range<usize>), e: &mut Errors<'_>| {
            if let Some(&p) = of_host.get(&limit) {
                return Some(p);
            }
            if pairs.len() >= usize::from(policy_slots) {
                if !exhausted {
                    exhausted = true;
                    let (path, at) = match &slots_at {
                        Some(s) => ("quota.policy_slots".to_string(), s.clone()),
                        None => (path, at.clone()),
                    };
                    e.push(
                        "rate_limit.slots.exhausted",
                        path,
                        at,
                        format!(
                            "the profile uses more (rate limit, host) pairs than \
                             quota.policy_slots ({policy_slots}); raise it"
                        ),
                    );
                }
                return None;
            }
            let name = limit_names.get(limit as usize).map_or("", String::as_str);
            let p = u32::try_from(pairs.len()).unwrap_or(u32::MAX);
            pairs.push(RatePair {
                identity: pair_identity(name, &label),
                limit,
            });
            of_host.insert(limit, p);
            Some(p)
        };
        let host_class = host.refs.class.unwrap_or(Class::Normal);
        let host_pair = host.refs.rate_limit.as_ref().and_then(|(l, at)| {
            let path = host.refs.rate_limit_path.clone();
            let path = path.unwrap_or_else(|| format!("host[{i}].rate_limit"));
            pair(*l, (path, at), e)
        });
        host.policy = RequestPolicy {
            rate_pair: host_pair,
            class: host_class,
            operation: None,
            ..RequestPolicy::default()
        };
        if let CheckedAction::Proxy { routes } = &mut host.action {
            for (j, r) in routes.iter_mut().enumerate() {
                let rate_pair = match &r.refs.rate_limit {
                    RouteRate::Inherit => host_pair,
                    RouteRate::Off => None,
                    RouteRate::Named(l, at) => {
                        pair(*l, (format!("host[{i}].route[{j}].rate_limit"), at), e)
                    }
                };
                r.policy = RequestPolicy {
                    rate_pair,
                    class: r.refs.class.unwrap_or(host_class),
                    operation: r.refs.operation,
                    ..RequestPolicy::default()
                };
            }
        }
    }
    pairs
}
