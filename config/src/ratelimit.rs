//! Semantic checks of `[[rate_limit]]`: named token-bucket policies,
//! compiled into the gate's [`RateLimitDef`].
//!
//! The rate is `requests` per `per` (a second, a minute or an hour) with a
//! bucket of `burst` (default: `requests`, at most 1 048 575); the gate's
//! [`RatePolicy::new`] holds the bounds (1/16384 to 1 000 000 tokens per
//! second) and names the codes. A header-keyed limit is seen by each shard
//! only in part, so with `scope = "split"` (its default) its policy is
//! divided by the shard count here, and a rate that the division takes
//! under the bound is refused with the shard count in the message. An
//! address-keyed limit defaults to `per_shard` (steering keeps a direct
//! client on one shard: exact); `scope = "split"` divides it too, for
//! clients that arrive through proxies and so on any shard
//! (docs/limits.md states both bounds). `scope = "fleet"` holds the whole
//! limit on every shard against the fleet's count, shared through the
//! engine `[fleet]` names, and the limit divided by `nodes_expected` while
//! the engine is away (docs/fleet.md).

use crate::codes::ProfileCode;
use crate::error::Errors;
use crate::names::BlockKind;
use crate::rawgate::{RawRateLimit, RawTier};
use crate::values::choice;
use gapura_gate::mode::Mode;
use gapura_gate::policy::{RateKey, RateLimitDef};
use gapura_gate::quota::fleet::FleetRate;
use gapura_gate::quota::rate::MAX_BURST;
use gapura_gate::quota::{RatePolicy, Scope, SourcePrefix};
use gapura_gate::token::is_token;
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// The checked rate limits, in profile order (index = the limit's number in
/// `GatePolicy::rate_limits`), and the index of every valid name.
pub(crate) struct RateLimits {
    pub defs: Vec<RateLimitDef>,
    pub ids: HashMap<String, u32>,
    /// Address-keyed limits each shard holds whole (`scope = "per_shard"`,
    /// written or by default): their path and span, for the warning a
    /// profile behind proxies gets (`warn_per_shard_behind_proxies`).
    pub per_shard_address: Vec<(String, Range<usize>)>,
}

/// Warns of address-keyed limits held whole per shard in a profile whose
/// clients arrive through proxies (a trusted proxy, Cloudflare, the PROXY
/// protocol) on more than one shard: steering then hashes the proxy's
/// address, so one client's requests can land on every shard and get up
/// to `shards` times the limit.
pub(crate) fn warn_per_shard_behind_proxies(
    rates: &RateLimits,
    shards: u32,
    behind_proxies: bool,
    e: &mut Errors<'_>,
) {
    if shards <= 1 || !behind_proxies {
        return;
    }
    for (base, span) in &rates.per_shard_address {
        e.warn(
            "rate_limit.scope.per_shard_behind_proxies",
            format!("{base}.scope"),
            span.clone(),
            format!(
                "clients arrive through proxies and each of the {shards} shards holds this \
                 limit whole, so one client can get up to {shards} times it; scope = \"split\" \
                 holds it to the limit on this node, scope = \"fleet\" across nodes"
            ),
        );
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Ip,
    IpPath,
    Header,
}

/// Checks every `[[rate_limit]]` for one of `shards` shards; `fleet`: the
/// nodes `[fleet]` expects, when it is written (`scope = "fleet"` needs
/// it). Returns one definition per entry, in order, even for entries with
/// errors.
pub(crate) fn check_rate_limits(
    raw: &[Spanned<RawRateLimit>],
    shards: u32,
    fleet: Option<u32>,
    e: &mut Errors<'_>,
) -> RateLimits {
    let mut defs = Vec::with_capacity(raw.len());
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut per_shard_address = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let base = format!("rate_limit[{i}]");
        let span = r.span();
        let r = r.get_ref();
        let name = RATE_LIMIT
            .check(
                &r.name,
                &base,
                span.clone(),
                |v| ids.get(v).map(|&i| i as usize),
                e,
            )
            .map(|n| n.get_ref().clone());
        if let Some(n) = &name {
            ids.insert(n.clone(), u32::try_from(i).unwrap_or(u32::MAX));
        }
        let name = name.unwrap_or_default();
        let (def, per_shard) = check_limit(r, name, &base, span.clone(), (shards, fleet), e);
        if per_shard {
            let at = r.scope.as_ref().map_or(span, |v| v.span());
            per_shard_address.push((base, at));
        }
        defs.push(def);
    }
    RateLimits {
        defs,
        ids,
        per_shard_address,
    }
}

const RATE_LIMIT: BlockKind = BlockKind {
    key: "rate_limit",
    noun: "rate limit",
    codes: [
        "rate_limit.name.required",
        "rate_limit.name.invalid",
        "rate_limit.name.duplicate",
    ],
    required: "a rate limit needs a name that hosts and routes refer to, such as name = \"api\"",
};

/// A placeholder for a limit with errors (never compiled).
fn placeholder() -> RatePolicy {
    RatePolicy::per_second(1, 1).expect("constant policy")
}

fn check_limit(
    r: &RawRateLimit,
    name: String,
    base: &str,
    span: Range<usize>,
    (shards, fleet_nodes): (u32, Option<u32>),
    e: &mut Errors<'_>,
) -> (RateLimitDef, bool) {
    let per_ms = choice(
        e,
        &r.per,
        &format!("{base}.per"),
        "rate_limit.per.invalid",
        &[
            ("second", Some(1_000u64)),
            ("minute", Some(60_000)),
            ("hour", Some(3_600_000)),
        ],
        None,
    )
    .or(r.per.is_none().then_some(1_000));
    let key = choice(
        e,
        &r.key,
        &format!("{base}.key"),
        "rate_limit.key.invalid",
        &[
            ("ip", Some(Key::Ip)),
            ("ip_path", Some(Key::IpPath)),
            ("header", Some(Key::Header)),
        ],
        None,
    )
    .or(r.key.is_none().then_some(Key::Ip));
    let mode = choice(
        e,
        &r.mode,
        &format!("{base}.mode"),
        "rate_limit.mode.invalid",
        &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
        Mode::Enforce,
    );
    let policy = check_policy((&r.requests, &r.burst), per_ms, base, span, e);
    let header = check_header(r, base, key, e);
    let (scope, fleet) = check_scope(r, base, key, fleet_nodes, e);
    let fleet = match (policy, fleet) {
        (Some(p), Some(nodes)) => {
            // Held alone: the node's share, and a header's clients over
            // every shard share it again.
            let parts = if key == Some(Key::Header) {
                nodes.saturating_mul(shards)
            } else {
                nodes
            };
            split(p, parts, r, base, e).map(|local_share| FleetRate { local_share })
        }
        _ => None,
    };
    let policy = match (policy, scope) {
        (Some(p), Scope::Split) if shards > 1 => split(p, shards, r, base, e),
        (p, _) => p,
    };
    let mut ipv6_tiers = check_tiers(r, base, key, per_ms, e);
    if scope == Scope::Split && shards > 1 {
        ipv6_tiers = ipv6_tiers
            .into_iter()
            .filter_map(|(prefix, p)| split(p, shards, r, base, e).map(|s| (prefix, s)))
            .collect();
    }
    let per_shard_address = scope == Scope::PerShard && fleet.is_none() && key != Some(Key::Header);
    let key = match (key, header) {
        (Some(Key::IpPath), _) => RateKey::IpPath,
        (Some(Key::Header), Some(h)) => RateKey::Header(h.into_boxed_str()),
        _ => RateKey::Ip,
    };
    let def = RateLimitDef {
        name,
        policy: policy.unwrap_or_else(placeholder),
        key,
        ipv6_tiers,
        mode,
        fleet,
    };
    (def, per_shard_address)
}

/// `requests` and `burst` (default: `requests`, clamped) per `per_ms`:
/// the policy, or None after an error. `span` is the entry's, for a
/// missing `requests`.
fn check_policy(
    (requests, burst): (&Option<Spanned<i64>>, &Option<Spanned<i64>>),
    per_ms: Option<u64>,
    base: &str,
    span: Range<usize>,
    e: &mut Errors<'_>,
) -> Option<RatePolicy> {
    let requests_path = format!("{base}.requests");
    let n = match requests {
        None => {
            e.push(
                "rate_limit.requests.required",
                requests_path.clone(),
                span,
                "a rate limit needs requests (tokens per `per`), such as requests = 20",
            );
            None
        }
        Some(v) => match u64::try_from(*v.get_ref()) {
            Ok(n @ 1..) => Some(n),
            _ => {
                e.push(
                    "rate_limit.requests.invalid",
                    requests_path.clone(),
                    v.span(),
                    format!("must be 1 or more, got {}", v.get_ref()),
                );
                None
            }
        },
    };
    let b = match burst {
        None => n.map(|n| u32::try_from(n.min(u64::from(MAX_BURST))).unwrap_or(MAX_BURST)),
        Some(v) => match u32::try_from(*v.get_ref()) {
            Ok(b @ 1..=MAX_BURST) => Some(b),
            _ => {
                e.push(
                    "rate_limit.burst.invalid",
                    format!("{base}.burst"),
                    v.span(),
                    format!("must be between 1 and {MAX_BURST}, got {}", v.get_ref()),
                );
                None
            }
        },
    };
    let (n, b, per_ms) = (n?, b?, per_ms?);
    match RatePolicy::new(n, per_ms, b) {
        Ok(p) => Some(p),
        Err(err) => {
            let at = requests.as_ref().map_or(0..0, |v| v.span());
            e.push(
                err.code(),
                requests_path,
                at,
                format!(
                    "{n} per {} is {}; a rate must be between 1/16384 and 1000000 per second",
                    per_name(per_ms),
                    per_second_text(n, per_ms)
                ),
            );
            None
        }
    }
}

fn per_name(per_ms: u64) -> &'static str {
    match per_ms {
        1_000 => "second",
        60_000 => "minute",
        _ => "hour",
    }
}

/// `n` per `per_ms` as tokens per second, in words, exactly.
fn per_second_text(n: u64, per_ms: u64) -> String {
    let scaled = u128::from(n) * 1000;
    let per_ms = u128::from(per_ms);
    if scaled % per_ms == 0 {
        format!("{} per second", scaled / per_ms)
    } else if per_ms % scaled == 0 {
        format!("one every {} seconds", per_ms / scaled)
    } else {
        format!("{n} every {per_ms} ms")
    }
}

/// The policy one of `shards` shards enforces with `scope = "split"`.
fn split(
    p: RatePolicy,
    shards: u32,
    r: &RawRateLimit,
    base: &str,
    e: &mut Errors<'_>,
) -> Option<RatePolicy> {
    match p.split(shards) {
        Ok(s) => Some(s),
        Err(err) => {
            let at = r
                .scope
                .as_ref()
                .map(|v| v.span())
                .or(r.requests.as_ref().map(|v| v.span()))
                .unwrap_or(0..0);
            let path = if r.scope.is_some() {
                format!("{base}.scope")
            } else {
                format!("{base}.requests")
            };
            e.push(
                err.code(),
                path,
                at,
                format!(
                    "split over {shards} shards, {} per {} is {} on each shard, under \
                     1/16384 per second: raise requests or use scope = \"per_shard\"",
                    p.requests(),
                    per_name(p.per_ms()),
                    per_second_text(p.requests(), p.per_ms() * u64::from(shards))
                ),
            );
            None
        }
    }
}

/// `header`: required exactly for `key = "header"`. Lowercase.
fn check_header(
    r: &RawRateLimit,
    base: &str,
    key: Option<Key>,
    e: &mut Errors<'_>,
) -> Option<String> {
    let path = format!("{base}.header");
    match (&r.header, key) {
        (None, Some(Key::Header)) => {
            let at = r.key.as_ref().map_or(0..0, |k| k.span());
            e.push(
                "rate_limit.header.required",
                path,
                at,
                "key = \"header\" needs the header's name, such as header = \"x-api-key\"",
            );
            None
        }
        (Some(h), Some(Key::Ip | Key::IpPath)) => {
            e.push(
                "rate_limit.header.unexpected",
                path,
                h.span(),
                "only a limit with key = \"header\" reads a header",
            );
            None
        }
        (Some(h), _) if !is_token(h.get_ref()) => {
            e.push(
                "rate_limit.header.invalid",
                path,
                h.span(),
                format!(
                    "{:?} is not a header name: use letters, digits and !#$%&'*+-.^_`|~",
                    h.get_ref()
                ),
            );
            None
        }
        (Some(h), _) => Some(h.get_ref().to_ascii_lowercase()),
        (None, _) => None,
    }
}

/// `scope`: `split` by default for header keys (a header's client lands
/// on any shard), `per_shard` for address keys (steered to one shard:
/// exact for direct clients); either may be written. `fleet` (with a
/// `[fleet]`, whose `nodes_expected` is `fleet_nodes`): every shard holds
/// the whole limit against the fleet's count (docs/fleet.md); returned as
/// `per_shard` with the node count.
fn check_scope(
    r: &RawRateLimit,
    base: &str,
    key: Option<Key>,
    fleet_nodes: Option<u32>,
    e: &mut Errors<'_>,
) -> (Scope, Option<u32>) {
    let default = if key == Some(Key::Header) {
        Scope::Split
    } else {
        Scope::PerShard
    };
    let path = format!("{base}.scope");
    let scope = choice(
        e,
        &r.scope,
        &path,
        "rate_limit.scope.invalid",
        &[
            ("split", Some(Scope::Split)),
            ("per_shard", Some(Scope::PerShard)),
            ("fleet", None),
        ],
        Some(default),
    );
    match (scope, fleet_nodes) {
        (Some(s), _) => (s, None),
        (None, Some(nodes)) => (Scope::PerShard, Some(nodes)),
        (None, None) => {
            let at = r.scope.as_ref().map_or(0..0, |v| v.span());
            e.push(
                "rate_limit.scope.fleet",
                path,
                at,
                "scope = \"fleet\" shares the limit through the engine [fleet] names: \
                 add a [fleet] section, or use \"per_shard\" or \"split\"",
            );
            (default, None)
        }
    }
}

/// `ipv6_tiers`: /56 and /48 buckets of a `key = "ip"` limit, each once,
/// at the limit's `per`.
fn check_tiers(
    r: &RawRateLimit,
    base: &str,
    key: Option<Key>,
    per_ms: Option<u64>,
    e: &mut Errors<'_>,
) -> Vec<(SourcePrefix, RatePolicy)> {
    let Some(list) = &r.ipv6_tiers else {
        return Vec::new();
    };
    let path = format!("{base}.ipv6_tiers");
    if matches!(key, Some(Key::IpPath | Key::Header)) {
        e.push(
            "rate_limit.tier.unexpected",
            path.clone(),
            list.span(),
            "only a limit with key = \"ip\" has IPv6 tiers",
        );
    }
    let mut tiers: Vec<(SourcePrefix, RatePolicy)> = Vec::new();
    let mut seen: Vec<u8> = Vec::new();
    for (j, t) in list.get_ref().iter().enumerate() {
        let tbase = format!("{path}[{j}]");
        let span = t.span();
        let t: &RawTier = t.get_ref();
        let prefix = match &t.prefix {
            None => {
                e.push(
                    "rate_limit.tier.invalid",
                    format!("{tbase}.prefix"),
                    span.clone(),
                    "a tier needs its prefix: 56 or 48",
                );
                None
            }
            Some(p) => {
                let (prefix, bits) = match *p.get_ref() {
                    56 => (Some(SourcePrefix::TIER_56), 56u8),
                    48 => (Some(SourcePrefix::TIER_48), 48),
                    _ => (None, 0),
                };
                if prefix.is_none() {
                    e.push(
                        "rate_limit.tier.invalid",
                        format!("{tbase}.prefix"),
                        p.span(),
                        format!("a tier's prefix is 56 or 48, got {}", p.get_ref()),
                    );
                    None
                } else if seen.contains(&bits) {
                    e.push(
                        "rate_limit.tier.invalid",
                        format!("{tbase}.prefix"),
                        p.span(),
                        format!("the /{bits} tier is already given"),
                    );
                    None
                } else {
                    seen.push(bits);
                    prefix
                }
            }
        };
        let policy = check_policy((&t.requests, &t.burst), per_ms, &tbase, span, e);
        if let (Some(prefix), Some(policy)) = (prefix, policy) {
            tiers.push((prefix, policy));
        }
    }
    tiers
}
