//! Semantic checks of `[quota]`: one shard's table sizes, the budgets and
//! concurrency limits, and the operations routes name.
//!
//! Bounds are the gate's own (docs/limits.md), so a profile that passes
//! cannot make a constructor in `gapura_gate::quota` fail. Budgets on keys
//! a shard cannot see all of (global, identity, operations) are divided
//! here by the shard count when their `scope` is `"split"`, so the snapshot
//! holds per-shard values; source and health budgets are keyed by the
//! steered source and are never divided.

use crate::error::{key_path, Errors};
use crate::names::valid_policy_name;
use crate::rawgate::{RawIdentityBudget, RawQuota};
use crate::values::{choice, int_in, Opt};
use gapura_gate::mode::Mode;
use gapura_gate::policy::default_quota_sizes;
use gapura_gate::quota::lease::MAX_LEASES;
use gapura_gate::quota::rate::MAX_RATE_ENTRIES;
use gapura_gate::quota::tracked::MAX_TRACKED_KEYS;
use gapura_gate::quota::window::WINDOW_MS_BOUNDS;
use gapura_gate::quota::{Budget, Ceiling, OperationLimits, QuotaLimits, QuotaSizes, Scope};
use gapura_gate::token::is_token;
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// Smallest `rate_table_entries` a profile may ask for.
pub(crate) const MIN_RATE_TABLE_ENTRIES: i64 = 1024;
/// Most `[[quota.operation]]` entries (the shard's operation counters).
pub(crate) const MAX_OPERATIONS: usize = 64;
/// A count per window: 1..=u32::MAX.
const COUNT_BOUNDS: (i64, i64) = (1, u32::MAX as i64);

/// `[quota]` after its checks, divided for one of `shards` shards.
pub(crate) struct CheckedQuota {
    pub sizes: QuotaSizes,
    pub limits: QuotaLimits,
    pub mode: Mode,
    /// Lowercase; set only with an identity budget.
    pub identity_header: Option<Box<str>>,
    /// The tenant's and the principal's headers (lowercase), when set.
    pub dim_headers: (Option<Box<str>>, Option<Box<str>>),
    /// Operation names, index = operation id.
    pub operations: Vec<String>,
    pub operation_ids: HashMap<String, u16>,
    /// `quota.unknown_host_operation`: what a request no host takes counts in.
    pub unknown_host_operation: Option<u16>,
    /// `quota.policy_slots` when written, for `rate_limit.slots.exhausted`.
    pub policy_slots_at: Option<Range<usize>>,
    pub connections: Option<gapura_gate::policy::ConnectionLimits>,
}

/// `[quota.connections]`: connections open at once and new connections
/// per second per source prefix, refused at accept.
fn check_connections(
    q: &RawQuota,
    e: &mut Errors<'_>,
) -> Option<gapura_gate::policy::ConnectionLimits> {
    let c = q.connections.as_ref()?;
    let concurrent = int_in(
        e,
        &c.concurrent,
        "quota.connections.concurrent",
        "quota.connections.concurrent.range",
        (1, 1 << 20),
    )
    .map(|n| n as u32);
    let per_second = int_in(
        e,
        &c.per_second,
        "quota.connections.per_second",
        "quota.connections.per_second.range",
        (1, 1_000_000),
    );
    let burst = int_in(
        e,
        &c.burst,
        "quota.connections.burst",
        "quota.connections.burst.range",
        (1, 1_048_575),
    );
    let mode = choice(
        e,
        &c.mode,
        "quota.connections.mode",
        "quota.connections.mode.invalid",
        &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
        Mode::Enforce,
    );
    let rate = per_second.and_then(|r| {
        let burst = burst.unwrap_or(r).min(1_048_575) as u32;
        gapura_gate::quota::RatePolicy::per_second(r as u64, burst).ok()
    });
    Some(gapura_gate::policy::ConnectionLimits {
        concurrent,
        rate,
        mode,
    })
}

/// `[quota.identity]`: its budget into `limits` (and its fleet share),
/// and the credential header it is keyed by.
fn check_identity(
    i: &RawIdentityBudget,
    (shards, fleet): (u32, Option<u32>),
    limits: &mut QuotaLimits,
    e: &mut Errors<'_>,
) -> Option<Box<str>> {
    let (scope, nodes) = fleet_scope(e, &i.scope, "quota.identity.scope", fleet, true);
    let budget = Fields::new("quota.identity", &i.requests, &i.optional).budget(e);
    let header = i.header.as_ref().and_then(|h| {
        if is_token(h.get_ref()) {
            Some(h.get_ref().to_ascii_lowercase())
        } else {
            e.push(
                "quota.identity.header.invalid",
                "quota.identity.header",
                h.span(),
                format!(
                    "{:?} is not a header name: use letters, digits and !#$%&'*+-.^_`|~",
                    h.get_ref()
                ),
            );
            None
        }
    });
    match (&i.header, &i.requests) {
        (None, Some(r)) => e.push(
            "quota.identity.header.required",
            "quota.identity.header",
            r.span(),
            "an identity budget needs the credential header it is keyed by, \
             such as header = \"authorization\"",
        ),
        (Some(h), None) => e.push(
            "quota.identity.requests.required",
            "quota.identity.requests",
            h.span(),
            "an identity header needs a budget: set requests (per window)",
        ),
        _ => {}
    }
    if let (Some(b), Some(h)) = (budget, header) {
        limits.identity = Some(b.for_shards(scope, shards));
        if let Some(nodes) = nodes {
            limits.identity = Some(b);
            limits.fleet.identity = Some(b.for_shards(Scope::Split, nodes.saturating_mul(shards)));
        }
        return Some(h.into_boxed_str());
    }
    None
}

/// Checks `[quota]` for one of `shards` shards; `fleet`: the nodes
/// `[fleet]` expects, when it is written (`scope = "fleet"` needs it).
pub(crate) fn check_quota(
    q: &RawQuota,
    (shards, fleet): (u32, Option<u32>),
    e: &mut Errors<'_>,
) -> CheckedQuota {
    let sizes = check_sizes(q, e);
    let mode = choice(
        e,
        &q.mode,
        "quota.mode",
        "quota.mode.invalid",
        &[("enforce", Mode::Enforce), ("shadow", Mode::Shadow)],
        Mode::Enforce,
    );
    let max_leases = sizes.max_leases;
    let mut limits = QuotaLimits::default();
    if let Some(g) = &q.global {
        let (scope, nodes) = fleet_scope(e, &g.scope, "quota.global.scope", fleet, true);
        let b = Fields::new("quota.global", &g.requests, &g.optional);
        let budget = b.budget(e);
        limits.global = budget.map(|b| b.for_shards(scope, shards));
        if let (Some(b), Some(nodes)) = (budget, nodes) {
            // Each shard holds the whole budget against the fleet's count;
            // alone, its share of the node's share.
            limits.global = Some(b);
            limits.fleet.global = Some(b.for_shards(Scope::Split, nodes.saturating_mul(shards)));
        }
        let c = Fields::new("quota.global", &g.concurrent, &g.concurrent_optional);
        limits.leases.global = c
            .concurrency(e, max_leases)
            .map(|b| b.for_shards(scope, shards));
    }
    if let Some(s) = &q.source {
        let (_, nodes) = fleet_scope(e, &s.scope, "quota.source.scope", fleet, false);
        limits.source = Fields::new("quota.source", &s.requests, &s.optional).budget(e);
        if let (Some(b), Some(nodes)) = (limits.source, nodes) {
            // A source is steered to one shard of each node.
            limits.fleet.source = Some(b.for_shards(Scope::Split, nodes));
        }
        limits.leases.per_key = Fields::new("quota.source", &s.concurrent, &s.concurrent_optional)
            .concurrency(e, max_leases);
    }
    if let Some(h) = &q.health {
        limits.health = Fields::new("quota.health", &h.requests, &None).budget(e);
    }
    let identity_header = q
        .identity
        .as_ref()
        .and_then(|i| check_identity(i, (shards, fleet), &mut limits, e));
    let dim_headers = crate::dims::check_dims(q, (shards, fleet), max_leases, &mut limits, e);
    let (operations, operation_ids, op_limits) = check_operations(q, shards, max_leases, e);
    // Operations that limit nothing leave the tables out of the chain.
    if op_limits.iter().any(|o| *o != OperationLimits::default()) {
        limits.operations = op_limits.into_boxed_slice();
    }
    let connections = check_connections(q, e);
    warn_ceilings(q, &sizes, &limits, e);
    let unknown_host_operation = q.unknown_host_operation.as_ref().and_then(|o| {
        let id = operation_ids.get(o.get_ref()).copied();
        if id.is_none() {
            e.push(
                "quota.unknown_host_operation.unknown",
                "quota.unknown_host_operation",
                o.span(),
                format!(
                    "no [[quota.operation]] is named {:?}: name one of the profile's operations",
                    o.get_ref()
                ),
            );
        }
        id
    });
    CheckedQuota {
        unknown_host_operation,
        connections,
        sizes,
        limits,
        mode,
        identity_header,
        dim_headers,
        operations,
        operation_ids,
        policy_slots_at: q.policy_slots.as_ref().map(|v| v.span()),
    }
}

fn check_sizes(q: &RawQuota, e: &mut Errors<'_>) -> QuotaSizes {
    let d = default_quota_sizes();
    let as_u64 = |n: i64| u64::try_from(n).unwrap_or(0);
    let as_u32 = |n: i64| u32::try_from(n).unwrap_or(0);
    let rate_entries = match &q.rate_table_entries {
        Some(v) => {
            let n = *v.get_ref();
            let max = MAX_RATE_ENTRIES as i64;
            if (MIN_RATE_TABLE_ENTRIES..=max).contains(&n) && n.count_ones() == 1 {
                usize::try_from(n).unwrap_or(d.rate_entries)
            } else {
                e.push(
                    "quota.rate_table_entries.range",
                    "quota.rate_table_entries",
                    v.span(),
                    format!(
                        "must be a power of two between {MIN_RATE_TABLE_ENTRIES} and {max}, got {n}"
                    ),
                );
                d.rate_entries
            }
        }
        None => d.rate_entries,
    };
    let policy_slots = int_in(
        e,
        &q.policy_slots,
        "quota.policy_slots",
        "quota.policy_slots.range",
        (1, i64::from(u16::MAX)),
    )
    .map_or(d.policy_slots, |n| u16::try_from(n).unwrap_or(u16::MAX));
    let slot_grace_ms = int_in(
        e,
        &q.slot_grace_ms,
        "quota.slot_grace_ms",
        "quota.slot_grace_ms.range",
        (0, 3_600_000),
    )
    .map_or(d.slot_grace_ms, as_u64);
    let window_ms = int_in(
        e,
        &q.window_ms,
        "quota.window_ms",
        "quota.window_ms.range",
        (WINDOW_MS_BOUNDS.0 as i64, WINDOW_MS_BOUNDS.1 as i64),
    )
    .map_or(d.window_ms, as_u64);
    let window_keys = ceiling(
        e,
        ("quota.tracked_keys", &q.tracked_keys),
        ("quota.critical_reserve", &q.critical_reserve),
        d.window_keys,
    );
    let lease_keys = ceiling(
        e,
        ("quota.lease_tracked_keys", &q.lease_tracked_keys),
        ("quota.lease_critical_reserve", &q.lease_critical_reserve),
        d.lease_keys,
    );
    let max_leases = int_in(
        e,
        &q.max_leases,
        "quota.max_leases",
        "quota.max_leases.range",
        (1, i64::from(MAX_LEASES)),
    )
    .map_or(d.max_leases, as_u32);
    QuotaSizes {
        rate_entries,
        policy_slots,
        slot_grace_ms,
        window_ms,
        window_keys,
        lease_keys,
        max_leases,
        operations: d.operations,
    }
}

/// Warns when a tracked-key ceiling cannot hold what the budgets beside it
/// admit on a shard: more sources with a running request than the lease
/// table may track (`[quota.source] concurrent` tracks each), or more
/// sources with a request in a window than the window table may track (a
/// `[quota.source]` budget tracks each). Past a ceiling a new source fails
/// closed before the budget it would be counted against is reached.
fn warn_ceilings(q: &RawQuota, sizes: &QuotaSizes, limits: &QuotaLimits, e: &mut Errors<'_>) {
    use gapura_gate::quota::Class;
    let span = |v: &Opt<i64>| v.as_ref().map_or(0..0, |s| s.span());
    if limits.leases.per_key.is_some() {
        let running = limits
            .leases
            .global
            .map_or(sizes.max_leases, |g| g.limit().min(sizes.max_leases));
        let room = sizes.lease_keys.limit(Class::Normal);
        if room < running {
            e.warn(
                "quota.lease_tracked_keys.small",
                "quota.lease_tracked_keys",
                span(&q.lease_tracked_keys),
                format!(
                    "{running} requests may run at once on a shard, each from its own source, but \
                     the lease table tracks {room} sources (lease_tracked_keys less its reserve): \
                     past it a new source fails closed before the concurrency limit is reached"
                ),
            );
        }
    }
    if let (Some(_), Some(global)) = (limits.source, limits.global) {
        let room = sizes.window_keys.limit(Class::Normal);
        if room < global.limit() {
            e.warn(
                "quota.tracked_keys.small",
                "quota.tracked_keys",
                span(&q.tracked_keys),
                format!(
                    "the global budget admits {} requests a window on a shard, each possibly from \
                     its own source, but the window table tracks {room} sources (tracked_keys less \
                     its reserve): past it a new source fails closed before the global budget is \
                     spent",
                    global.limit()
                ),
            );
        }
    }
}

/// A tracked-key ceiling: `max_keys` in 1..=8 Mi, the reserve below it
/// (default: a sixteenth of a written `max_keys`, else the built-in).
pub(crate) fn ceiling(
    e: &mut Errors<'_>,
    (keys_path, keys): (&str, &Opt<i64>),
    (reserve_path, reserve): (&str, &Opt<i64>),
    default: Ceiling,
) -> Ceiling {
    let max_keys = int_in(
        e,
        keys,
        keys_path,
        "quota.tracked_keys.range",
        (1, i64::from(MAX_TRACKED_KEYS)),
    )
    .map(|n| u32::try_from(n).unwrap_or(1));
    let max = max_keys.unwrap_or(default.max_keys());
    let critical_reserve = match reserve {
        None => match max_keys {
            Some(m) => m / 16,
            None => default.critical_reserve(),
        },
        Some(r) => {
            let n = *r.get_ref();
            match u32::try_from(n) {
                Ok(n) if n < max => n,
                _ => {
                    e.push(
                        "quota.critical_reserve.range",
                        reserve_path,
                        r.span(),
                        format!("must be at least 0 and less than {keys_path} ({max}), got {n}"),
                    );
                    0
                }
            }
        }
    };
    Ceiling::new(max, critical_reserve).unwrap_or(default)
}

/// `scope` of a budget: `"split"` (the default) or `"per_shard"`.
pub(crate) fn scope(e: &mut Errors<'_>, v: &Opt<String>, path: &str) -> Scope {
    choice(
        e,
        v,
        path,
        "quota.scope.invalid",
        &[("split", Scope::Split), ("per_shard", Scope::PerShard)],
        Scope::Split,
    )
}

/// `scope` of a budget that may be shared across a fleet: `"split"` (the
/// default) or `"per_shard"` where `split` is true (global, identity),
/// `"per_shard"` alone otherwise (source: steered, exact on a node), or
/// `"fleet"` with a `[fleet]` (whose `nodes_expected` is `fleet`): then
/// returned as `split` (what a budget's concurrency keeps) with the node
/// count (docs/fleet.md).
pub(crate) fn fleet_scope(
    e: &mut Errors<'_>,
    v: &Opt<String>,
    path: &str,
    fleet: Option<u32>,
    split: bool,
) -> (Scope, Option<u32>) {
    let local: &[(&str, Option<Scope>)] = if split {
        &[
            ("split", Some(Scope::Split)),
            ("per_shard", Some(Scope::PerShard)),
            ("fleet", None),
        ]
    } else {
        &[("per_shard", Some(Scope::PerShard)), ("fleet", None)]
    };
    let default = if split { Scope::Split } else { Scope::PerShard };
    match choice(e, v, path, "quota.scope.invalid", local, Some(default)) {
        Some(s) => (s, None),
        None => match fleet {
            Some(nodes) => (Scope::Split, Some(nodes)),
            None => {
                e.push(
                    "quota.scope.fleet",
                    path,
                    v.as_ref().map_or(0..0, |v| v.span()),
                    "scope = \"fleet\" shares the budget through the engine [fleet] names: \
                     add a [fleet] section, or use a scope of this node",
                );
                (default, None)
            }
        },
    }
}

/// A full threshold and its optional-work threshold, under `base`:
/// `requests`/`optional` or `concurrent`/`concurrent_optional`.
pub(crate) struct Fields<'a> {
    base: &'a str,
    full: &'a Opt<i64>,
    optional: &'a Opt<i64>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(base: &'a str, full: &'a Opt<i64>, optional: &'a Opt<i64>) -> Fields<'a> {
        Fields {
            base,
            full,
            optional,
        }
    }

    /// `requests` and `optional`: a budget per window.
    pub(crate) fn budget(&self, e: &mut Errors<'_>) -> Option<Budget> {
        self.check(
            e,
            ("requests", "optional"),
            "quota.requests.range",
            COUNT_BOUNDS.1,
        )
    }

    /// `concurrent` and `concurrent_optional`: at most `max_leases`.
    pub(crate) fn concurrency(&self, e: &mut Errors<'_>, max_leases: u32) -> Option<Budget> {
        self.check(
            e,
            ("concurrent", "concurrent_optional"),
            "quota.concurrent.range",
            i64::from(max_leases),
        )
    }

    fn check(
        &self,
        e: &mut Errors<'_>,
        (full_key, optional_key): (&str, &str),
        full_code: &'static str,
        max: i64,
    ) -> Option<Budget> {
        let full_path = key_path(self.base, full_key);
        let optional_path = key_path(self.base, optional_key);
        let full = match self.full {
            Some(v) => {
                let n = *v.get_ref();
                if (1..=max).contains(&n) {
                    Some(n)
                } else {
                    let why = if max == COUNT_BOUNDS.1 {
                        String::new()
                    } else {
                        " (quota.max_leases)".to_string()
                    };
                    e.push(
                        full_code,
                        full_path,
                        v.span(),
                        format!("must be between 1 and {max}{why}, got {n}"),
                    );
                    None
                }
            }
            None => None,
        };
        let optional = match (self.optional, self.full) {
            (None, _) => None,
            (Some(o), None) => {
                e.push(
                    "quota.optional.unexpected",
                    optional_path,
                    o.span(),
                    format!("{optional_key} is a part of {full_key}: set {full_key} too"),
                );
                None
            }
            (Some(o), Some(_)) => {
                let n = *o.get_ref();
                let hi = full.unwrap_or(max);
                if (1..=hi).contains(&n) {
                    Some(n)
                } else {
                    e.push(
                        "quota.optional.range",
                        optional_path,
                        o.span(),
                        format!("must be between 1 and {full_key} ({hi}), got {n}"),
                    );
                    None
                }
            }
        };
        let full = u32::try_from(full?).ok()?;
        let optional = optional.map_or(full, |n| u32::try_from(n).unwrap_or(full));
        Budget::new(full, optional).ok()
    }
}

/// `[[quota.operation]]`: names, ids and per-shard limits.
fn check_operations(
    q: &RawQuota,
    shards: u32,
    max_leases: u32,
    e: &mut Errors<'_>,
) -> (Vec<String>, HashMap<String, u16>, Vec<OperationLimits>) {
    let mut names = Vec::new();
    let mut ids: HashMap<String, u16> = HashMap::new();
    let mut limits = Vec::new();
    for (i, op) in q.operation.iter().enumerate() {
        let base = format!("quota.operation[{i}]");
        let span = op.span();
        let op = op.get_ref();
        if i == MAX_OPERATIONS {
            e.push(
                "quota.operation.too_many",
                base.clone(),
                span.clone(),
                format!(
                    "a profile may name at most {MAX_OPERATIONS} operations; this is number {}",
                    q.operation.len()
                ),
            );
        }
        let name = check_operation_name(&op.name, &base, span, &ids, e);
        let scope = scope(e, &op.scope, &format!("{base}.scope"));
        let requests = Fields::new(&base, &op.requests, &op.optional).budget(e);
        let concurrent =
            Fields::new(&base, &op.concurrent, &op.concurrent_optional).concurrency(e, max_leases);
        if i >= MAX_OPERATIONS {
            continue;
        }
        let id = u16::try_from(i).unwrap_or(u16::MAX);
        if let Some(n) = name {
            ids.insert(n.clone(), id);
            names.push(n);
        } else {
            names.push(String::new());
        }
        limits.push(OperationLimits {
            requests: requests.map(|b| b.for_shards(scope, shards)),
            concurrent: concurrent.map(|b| b.for_shards(scope, shards)),
        });
    }
    (names, ids, limits)
}

fn check_operation_name(
    name: &Option<Spanned<String>>,
    base: &str,
    span: Range<usize>,
    ids: &HashMap<String, u16>,
    e: &mut Errors<'_>,
) -> Option<String> {
    let path = format!("{base}.name");
    let Some(n) = name else {
        e.push(
            "quota.operation.name.required",
            path,
            span,
            "an operation needs a name that routes refer to, such as name = \"login\"",
        );
        return None;
    };
    let v = n.get_ref();
    if !valid_policy_name(v) {
        e.push(
            "quota.operation.name.invalid",
            path,
            n.span(),
            format!("{v:?} is not an operation name: use 1 to 64 of a-z, 0-9, '_' and '-'"),
        );
        return None;
    }
    if let Some(&first) = ids.get(v) {
        e.push(
            "quota.operation.name.duplicate",
            path,
            n.span(),
            format!("{v:?} is already the name of quota.operation[{first}]"),
        );
        return None;
    }
    Some(v.clone())
}
