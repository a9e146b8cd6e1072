//! The gate keys of hosts and routes (`rate_limit`, `class`, `operation`)
//! and the (rate limit, host) pairs they make.
//!
//! Layering is host → route: a route inherits its host's `rate_limit` and
//! `class` unless it sets its own (`rate_limit = false` turns the host's
//! limit off for that route). Every distinct (rate limit, host) pair in use
//! is one [`RatePair`]: its buckets are the same whichever of the host's
//! routes a request takes, so a route that resolves to the host's limit
//! shares the host's pair, and routes naming another limit share one pair
//! for it. A pair's identity ([`pair_identity`]) depends only on the two
//! names, so a shard keeps its buckets across reloads.

use crate::error::Errors;
use crate::host::{CheckedAction, CheckedHost};
use crate::identity::pair_identity;
use crate::names::known_list;
use crate::rawgate::RawRateRef;
use crate::schema::{RawHost, RawRoute};
use crate::values::{choice, Opt};
use gapura_gate::policy::{RatePair, RequestPolicy};
use gapura_gate::quota::Class;
use std::collections::HashMap;
use std::ops::Range;

/// The names hosts and routes may refer to.
pub(crate) struct Known<'a> {
    /// Rate limit name → index.
    pub rate_limits: &'a HashMap<String, u32>,
    /// Operation name → id.
    pub operations: &'a HashMap<String, u16>,
}

/// A host's gate keys after their checks.
#[derive(Clone, Debug, Default)]
pub(crate) struct HostRefs {
    /// The limit's index and the span of the reference.
    pub rate_limit: Option<(u32, Range<usize>)>,
    /// The reference's key path when a lower layer (`[defaults]`, a
    /// bundle) wrote it; `None`: the host's own `rate_limit`.
    pub rate_limit_path: Option<String>,
    pub class: Option<Class>,
}

/// A route's `rate_limit`.
#[derive(Clone, Debug, Default)]
pub(crate) enum RouteRate {
    /// Not set: the host's.
    #[default]
    Inherit,
    /// `false`: none.
    Off,
    /// A limit's index and the span of the reference.
    Named(u32, Range<usize>),
}

/// A route's gate keys after their checks.
#[derive(Clone, Debug, Default)]
pub(crate) struct RouteRefs {
    pub rate_limit: RouteRate,
    pub class: Option<Class>,
    pub operation: Option<u16>,
}

pub(crate) fn class(
    e: &mut Errors<'_>,
    v: &Opt<String>,
    path: &str,
    code: &'static str,
) -> Option<Class> {
    v.as_ref()?;
    choice(
        e,
        v,
        path,
        code,
        &[
            ("normal", Some(Class::Normal)),
            ("critical", Some(Class::Critical)),
            ("health", Some(Class::Health)),
        ],
        None,
    )
}

/// A rate limit named at `path`; None (with an error) when unknown.
pub(crate) fn rate_limit(
    e: &mut Errors<'_>,
    name: &str,
    at: Range<usize>,
    path: String,
    code: &'static str,
    known: &Known<'_>,
) -> Option<(u32, Range<usize>)> {
    match known.rate_limits.get(name) {
        Some(&i) => Some((i, at)),
        None => {
            e.push(
                code,
                path,
                at,
                format!(
                    "no [[rate_limit]] is named {name:?} ({})",
                    known_list(known.rate_limits, "rate_limit")
                ),
            );
            None
        }
    }
}

/// Checks a host's `rate_limit` and `class`.
pub(crate) fn check_host_refs(
    h: &RawHost,
    base: &str,
    known: &Known<'_>,
    e: &mut Errors<'_>,
) -> HostRefs {
    let rate_limit = h.rate_limit.as_ref().and_then(|r| {
        rate_limit(
            e,
            r.get_ref(),
            r.span(),
            format!("{base}.rate_limit"),
            "host.rate_limit.unknown",
            known,
        )
    });
    HostRefs {
        rate_limit,
        rate_limit_path: None,
        class: class(e, &h.class, &format!("{base}.class"), "host.class.invalid"),
    }
}

/// Checks a route's `rate_limit`, `class` and `operation`.
pub(crate) fn check_route_refs(
    r: &RawRoute,
    base: &str,
    known: &Known<'_>,
    e: &mut Errors<'_>,
) -> RouteRefs {
    let path = format!("{base}.rate_limit");
    let rate_limit = match &r.rate_limit {
        None => RouteRate::Inherit,
        Some(v) => match v.get_ref() {
            RawRateRef::Flag(false) => RouteRate::Off,
            RawRateRef::Flag(true) => {
                e.push(
                    "route.rate_limit.invalid",
                    path,
                    v.span(),
                    "a route's rate_limit is the name of a [[rate_limit]], or false for none; \
                     leave it out to use the host's",
                );
                RouteRate::Inherit
            }
            RawRateRef::Name(n) => {
                match rate_limit(e, n, v.span(), path, "route.rate_limit.unknown", known) {
                    Some((i, at)) => RouteRate::Named(i, at),
                    None => RouteRate::Inherit,
                }
            }
        },
    };
    let operation = r.operation.as_ref().and_then(|o| {
        let id = known.operations.get(o.get_ref()).copied();
        if id.is_none() {
            e.push(
                "route.operation.unknown",
                format!("{base}.operation"),
                o.span(),
                format!(
                    "no [[quota.operation]] is named {:?} ({})",
                    o.get_ref(),
                    known_list(known.operations, "quota.operation")
                ),
            );
        }
        id
    });
    RouteRefs {
        rate_limit,
        class: class(e, &r.class, &format!("{base}.class"), "route.class.invalid"),
        operation,
    }
}

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
