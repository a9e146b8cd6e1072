//! `[quota.tenant]`, `[quota.principal]` and `[quota.resource]`: the
//! identity dimensions the chain's identity step holds
//! ([`gapura_gate::quota::dims`]). A tenant's and a principal's key is a
//! header's value (on a route with forward-auth, as the provider's allow
//! copied it); a resource is the route. Each has a window budget
//! (`requests`, `optional`); the tenant and the principal a concurrency
//! lease (`concurrent`, `concurrent_optional`). `scope`: `"split"`
//! (default: each shard its share, the keys are not steered),
//! `"per_shard"`, or `"fleet"` (budgets shared through `[fleet]`'s
//! engine; leases stay the node's, split among its shards).

use crate::error::Errors;
use crate::quota::{fleet_scope, Fields};
use crate::rawgate::{RawDimBudget, RawQuota};
use crate::values::Opt;
use gapura_gate::quota::{Budget, Dim, QuotaLimits, Scope};
use gapura_gate::token::is_token;

/// A budget for one of `shards` shards under `scope`, and its fleet
/// share when `nodes` says the budget is the fleet's: (the budget each
/// shard holds, the local share).
fn spread(b: Budget, scope: Scope, shards: u32, nodes: Option<u32>) -> (Budget, Option<Budget>) {
    match nodes {
        Some(n) => (
            b,
            Some(b.for_shards(Scope::Split, n.saturating_mul(shards))),
        ),
        None => (b.for_shards(scope, shards), None),
    }
}

/// Checks the three tables into `limits.dims` (and their fleet shares);
/// returns the tenant's and the principal's header.
pub(crate) fn check_dims(
    q: &RawQuota,
    (shards, fleet): (u32, Option<u32>),
    max_leases: u32,
    limits: &mut QuotaLimits,
    e: &mut Errors<'_>,
) -> (Option<Box<str>>, Option<Box<str>>) {
    let mut tenant = None;
    if let Some(t) = &q.tenant {
        let (dim, share, header) = check_dim("quota.tenant", t, (shards, fleet), max_leases, e);
        (limits.dims.tenant, limits.fleet.tenant, tenant) = (dim, share, header);
    }
    let mut principal = None;
    if let Some(p) = &q.principal {
        let (dim, share, header) = check_dim("quota.principal", p, (shards, fleet), max_leases, e);
        (limits.dims.principal, limits.fleet.principal, principal) = (dim, share, header);
    }
    if let Some(r) = &q.resource {
        let path = "quota.resource.scope";
        let (scope, nodes) = fleet_scope(e, &r.scope, path, fleet, true);
        let budget = Fields::new("quota.resource", &r.requests, &r.optional).budget(e);
        if r.requests.is_none() {
            let at = (r.optional.as_ref().map(|v| v.span()))
                .or_else(|| r.scope.as_ref().map(|v| v.span()))
                .unwrap_or(0..0);
            e.push(
                "quota.resource.requests.required",
                "quota.resource.requests",
                at,
                "a resource budget needs requests (per route, per window)",
            );
        }
        if let Some(b) = budget {
            let (b, share) = spread(b, scope, shards, nodes);
            (limits.dims.resource, limits.fleet.resource) = (Some(b), share);
        }
    }
    (tenant, principal)
}

/// One header-keyed dimension: its limits, its fleet share, its header.
fn check_dim(
    base: &str,
    d: &RawDimBudget,
    (shards, fleet): (u32, Option<u32>),
    max_leases: u32,
    e: &mut Errors<'_>,
) -> (Dim, Option<Budget>, Option<Box<str>>) {
    let (scope, nodes) = fleet_scope(e, &d.scope, &format!("{base}.scope"), fleet, true);
    let requests = Fields::new(base, &d.requests, &d.optional).budget(e);
    let concurrent = Fields::new(base, &d.concurrent, &d.concurrent_optional)
        .concurrency(e, max_leases)
        .map(|b| b.for_shards(scope, shards));
    let header = header(base, &d.header, e);
    if d.header.is_none() {
        let at = [
            &d.requests,
            &d.concurrent,
            &d.optional,
            &d.concurrent_optional,
        ]
        .into_iter()
        .find_map(|v| v.as_ref().map(|v| v.span()))
        .unwrap_or(0..0);
        e.push(
            code(base, "header.required"),
            format!("{base}.header"),
            at,
            "an identity dimension needs the header it is read from, such as \
             header = \"x-auth-request-user\"",
        );
    }
    if d.requests.is_none() && d.concurrent.is_none() {
        e.push(
            code(base, "limit.required"),
            base,
            d.header.as_ref().map_or(0..0, |h| h.span()),
            "set requests (per window), concurrent (running at once), or both",
        );
    }
    let (requests, share) = match requests {
        Some(b) => {
            let (b, share) = spread(b, scope, shards, nodes);
            (Some(b), share)
        }
        None => (None, None),
    };
    (
        Dim {
            requests,
            concurrent,
        },
        share,
        header.filter(|_| requests.is_some() || concurrent.is_some()),
    )
}

/// The code of `what` under `base` (`quota.tenant.` or `quota.principal.`).
fn code(base: &str, what: &str) -> &'static str {
    match (base, what) {
        ("quota.tenant", "header.required") => "quota.tenant.header.required",
        ("quota.tenant", "header.invalid") => "quota.tenant.header.invalid",
        ("quota.tenant", _) => "quota.tenant.limit.required",
        ("quota.principal", "header.required") => "quota.principal.header.required",
        ("quota.principal", "header.invalid") => "quota.principal.header.invalid",
        _ => "quota.principal.limit.required",
    }
}

/// The header a dimension is read from, lowercase.
fn header(base: &str, h: &Opt<String>, e: &mut Errors<'_>) -> Option<Box<str>> {
    let h = h.as_ref()?;
    if is_token(h.get_ref()) {
        return Some(h.get_ref().to_ascii_lowercase().into_boxed_str());
    }
    e.push(
        code(base, "header.invalid"),
        format!("{base}.header"),
        h.span(),
        format!(
            "{:?} is not a header name: use letters, digits and !#$%&'*+-.^_`|~",
            h.get_ref()
        ),
    );
    None
}
