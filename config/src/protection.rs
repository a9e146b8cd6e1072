//! Protective defaults: what a profile gets for each protection dimension it
//! leaves out, unless `[protection] off` names the dimension.
//!
//! Applied to the raw profile before any check, as if the operator had
//! written the values, so every later check, code and compiled table is the
//! same for a written and a defaulted setting. The values are modest and
//! sized from the machine (`Environment::cores`, `Environment::memory_bytes`):
//!
//! | dimension | default when left out | why |
//! |---|---|---|
//! | `global` | `[quota.global] requests = 20000 x cores` per window, `concurrent = min(1024 x cores, max_leases)`, split over shards | well above what a core serves of real traffic, so only a flood reaches it; it keeps the process answering when one does |
//! | `source` | `[quota.source] requests = 1000` per window per IPv4 /24 or IPv6 /56, `concurrent = 128` | a busy office behind one NAT stays under it; one network cannot take the shard |
//! | `connections` | `[quota.connections] concurrent = 256, per_second = 50, burst = 100` per prefix | browsers open 6 to 8 connections per host; a prefix opening hundreds a second is not browsing |
//! | `client_rate` | `[[rate_limit]] name = "client"`, 100 requests a second per client address (IPv6 /64), burst 200, on every host whose layers name no rate limit | a page with a hundred assets loads in one burst; a script hammering one address is held to it |
//! | tracked keys | `[quota] tracked_keys` and `lease_tracked_keys`: 1/256 of the machine's memory over the shards at 64 bytes a key, 16 Ki to 1 Mi per shard, reserve 1/16 | bounded state sized to the machine, with the critical reserve kept |
//!
//! The tracked-key ceiling is not a dimension that can be off: the tables
//! always exist; only their size is defaulted.

use crate::env::Environment;
use crate::error::Errors;
use crate::rawgate::{RawConnections, RawGlobalBudget, RawRateLimit, RawSourceBudget};
use crate::schema::RawProfile;
use crate::values::IntOrString;
use toml::Spanned;

/// The dimensions `[protection] off` may name.
pub const DIMENSIONS: [&str; 4] = ["global", "source", "connections", "client_rate"];

/// The name of the default per-client rate limit.
pub const CLIENT_RATE_LIMIT: &str = "client";

/// Memory assumed when the runtime could not read it: 1 GiB.
pub const FALLBACK_MEMORY_BYTES: u64 = 1 << 30;

fn sp<T>(v: T) -> Option<Spanned<T>> {
    Some(Spanned::new(0..0, v))
}

/// Fills the dimensions the profile leaves out and `[protection] off` does
/// not name; returns the dimensions that are off, in `DIMENSIONS` order.
pub(crate) fn apply(
    raw: &mut RawProfile,
    env: &Environment<'_>,
    e: &mut Errors<'_>,
) -> Vec<&'static str> {
    let mut off: Vec<&'static str> = Vec::new();
    if let Some(list) = raw.protection.as_ref().and_then(|p| p.off.as_ref()) {
        for (i, name) in list.get_ref().iter().enumerate() {
            match name.get_ref().as_str() {
                "all" => off.extend(DIMENSIONS),
                n => match DIMENSIONS.iter().find(|d| **d == n) {
                    Some(d) => off.push(d),
                    None => e.push(
                        "protection.off.unknown",
                        format!("protection.off[{i}]"),
                        name.span(),
                        format!(
                            "{n:?} is not a protection dimension: use {}, or \"all\"",
                            DIMENSIONS.join(", ")
                        ),
                    ),
                },
            }
        }
    }
    off.sort_by_key(|d| DIMENSIONS.iter().position(|x| x == d));
    off.dedup();
    let on = |d: &str| !off.contains(&d);
    let cores = i64::from(env.cores.max(1));
    let shards = match raw.server.shards.as_ref().map(|s| s.get_ref()) {
        Some(IntOrString::Int(n)) => (*n).clamp(1, 1024),
        _ => cores,
    };
    let q = &mut raw.quota;
    if on("global") && q.global.is_none() {
        let max_leases = q
            .max_leases
            .as_ref()
            .map_or(16_384, |v| *v.get_ref())
            .max(1);
        q.global = Some(RawGlobalBudget {
            requests: sp(20_000 * cores),
            concurrent: sp((1_024 * cores).min(max_leases)),
            ..Default::default()
        });
    }
    if on("source") && q.source.is_none() {
        q.source = Some(RawSourceBudget {
            requests: sp(1_000),
            concurrent: sp(128),
            ..Default::default()
        });
    }
    if on("connections") && q.connections.is_none() {
        q.connections = Some(RawConnections {
            concurrent: sp(256),
            per_second: sp(50),
            burst: sp(100),
            mode: None,
        });
    }
    // Tracked keys: 1/256 of memory over the shards, 64 bytes a key (both
    // tables, each twice the ceiling at 16 bytes an entry).
    let per_shard = (env.memory_bytes / 256 / shards as u64 / 64).clamp(16_384, 1 << 20) as i64;
    let reserve = per_shard / 16;
    if q.tracked_keys.is_none() && q.critical_reserve.is_none() {
        q.tracked_keys = sp(per_shard);
        q.critical_reserve = sp(reserve);
    }
    if q.lease_tracked_keys.is_none() && q.lease_critical_reserve.is_none() {
        q.lease_tracked_keys = sp(per_shard);
        q.lease_critical_reserve = sp(reserve);
    }
    let named = |r: &Spanned<RawRateLimit>| {
        r.get_ref()
            .name
            .as_ref()
            .is_some_and(|n| n.get_ref() == CLIENT_RATE_LIMIT)
    };
    if on("client_rate") && raw.defaults.rate_limit.is_none() && !raw.rate_limit.iter().any(named) {
        raw.rate_limit.push(Spanned::new(
            0..0,
            RawRateLimit {
                name: sp(CLIENT_RATE_LIMIT.to_string()),
                requests: sp(100),
                per: sp("second".to_string()),
                burst: sp(200),
                key: sp("ip".to_string()),
                ..Default::default()
            },
        ));
        raw.defaults.rate_limit = sp(CLIENT_RATE_LIMIT.to_string());
    }
    warn_unprotected(raw, &off, e);
    off
}

/// A warning for each dimension `[protection] off` leaves without any
/// protection (the profile writes none of its own in its place): fine for
/// a load-testing profile, a hole on an exposed edge.
fn warn_unprotected(raw: &RawProfile, off: &[&'static str], e: &mut Errors<'_>) {
    let Some(list) = raw.protection.as_ref().and_then(|p| p.off.as_ref()) else {
        return;
    };
    let q = &raw.quota;
    for &dim in off {
        let (written, meaning) = match dim {
            "global" => (
                q.global.is_some(),
                "no global budget: a flood from everywhere at once meets nothing but the machine's limits",
            ),
            "source" => (
                q.source.is_some(),
                "no source budget: one network can take the shard",
            ),
            "connections" => (
                q.connections.is_some(),
                "no connection limits: a network can hold and open connections up to max_connections_per_shard",
            ),
            _ => (
                raw.defaults.rate_limit.is_some()
                    || !raw.rate_limit.is_empty(),
                "no per-client rate limit: a host that names none lets one client send as fast as it can",
            ),
        };
        if written {
            continue;
        }
        e.warn(
            "protection.off",
            "protection.off",
            list.span(),
            format!(
                "the default {dim} protection is off and this profile writes none in its place: \
                 {meaning} (fine for measuring; on an exposed edge leave it on or write your own)"
            ),
        );
    }
}
