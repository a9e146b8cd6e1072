//! Semantic checks of `[fleet]`: the engine (Redis or Valkey, one server
//! or a Redis Cluster) through which fleet-scoped limits are shared, and
//! how often a node exchanges its counts (docs/fleet.md).
//!
//! What is checked here is the text only: the addresses' scheme and shape,
//! the numbers' ranges, the node's name. Nothing connects: the runtime's
//! reconciler does, and `gapura doctor` checks the engine itself.

use crate::error::Errors;
use crate::rawgate::RawFleet;
use crate::settings::FleetSettings;
use crate::values::{as_u64, int_in};

/// Bounds of `sync_ms`: often enough for a hot key, rarely enough for the
/// engine (docs/fleet.md sizes it).
pub(crate) const SYNC_MS_BOUNDS: (i64, i64) = (10, 10_000);
/// Bounds of `nodes_expected`.
pub(crate) const NODES_BOUNDS: (i64, i64) = (1, 1024);
/// Bounds of `shared_keys` (per shard).
pub(crate) const SHARED_KEYS_BOUNDS: (i64, i64) = (64, 1 << 20);
/// `sync_ms` when not written.
pub(crate) const DEFAULT_SYNC_MS: u64 = 100;

/// Checks `[fleet]`; `None` when absent or with errors (recorded).
pub(crate) fn check_fleet(raw: Option<&RawFleet>, e: &mut Errors<'_>) -> Option<FleetSettings> {
    let f = raw?;
    let before = e.error_count();
    let redis = check_redis(f, e);
    let sync_ms = int_in(
        e,
        &f.sync_ms,
        "fleet.sync_ms",
        "fleet.sync_ms.range",
        SYNC_MS_BOUNDS,
    )
    .map_or(DEFAULT_SYNC_MS, as_u64);
    let nodes_expected = match &f.nodes_expected {
        None => {
            e.push(
                "fleet.nodes_expected.required",
                "fleet.nodes_expected",
                0..0,
                "[fleet] needs nodes_expected, the node count whose share of each limit a \
                 node enforces while the engine is away, such as nodes_expected = 3",
            );
            None
        }
        Some(_) => int_in(
            e,
            &f.nodes_expected,
            "fleet.nodes_expected",
            "fleet.nodes_expected.range",
            NODES_BOUNDS,
        ),
    };
    let shared_keys = int_in(
        e,
        &f.shared_keys,
        "fleet.shared_keys",
        "fleet.shared_keys.range",
        SHARED_KEYS_BOUNDS,
    )
    .map_or(gapura_gate::quota::fleet::DEFAULT_SHARED_KEYS, |n| {
        as_u64(n) as usize
    });
    let node = f.node.as_ref().and_then(|n| {
        let v = n.get_ref();
        if valid_node(v) {
            Some(v.clone())
        } else {
            e.push(
                "fleet.node.invalid",
                "fleet.node",
                n.span(),
                format!(
                    "{v:?} is not a node name: use 1 to 64 of letters, digits, '.', '_' and '-'"
                ),
            );
            None
        }
    });
    let password_file = f.password_file.as_ref().and_then(|p| {
        if p.get_ref().trim().is_empty() {
            e.push(
                "fleet.password_file.invalid",
                "fleet.password_file",
                p.span(),
                "a password file needs a file name",
            );
            None
        } else {
            Some(p.get_ref().clone())
        }
    });
    let key_file = f.key_file.as_ref().and_then(|p| {
        if p.get_ref().trim().is_empty() {
            e.push(
                "fleet.key_file.invalid",
                "fleet.key_file",
                p.span(),
                "a key file needs a file name",
            );
            None
        } else {
            Some(p.get_ref().clone())
        }
    });
    let redis_span = f.redis.as_ref().map_or(0..0, |r| r.span());
    if f.password_file.is_none() && f.key_file.is_none() {
        e.push(
            "fleet.secret.required",
            "fleet.key_file",
            redis_span.clone(),
            "[fleet] needs a secret every node has, to key what it stores in Redis: \
             password_file (the engine's password) or key_file (a file whose first line \
             is at least 16 characters); without one, whoever reads Redis could test \
             addresses against its keys",
        );
    }
    let profile = crate::fleetprofile::check_profile(f, e);
    if e.error_count() != before {
        return None;
    }
    warn_reachable(redis.as_ref(), f.password_file.is_some(), redis_span, e);
    Some(FleetSettings {
        redis: redis?,
        password_file,
        key_file,
        node,
        sync_ms,
        nodes_expected: nodes_expected.map(|n| as_u64(n) as u32)?,
        shared_keys,
        profile,
    })
}

/// Whether a `redis://` or `rediss://` address names this host only.
pub fn loopback(address: &str) -> bool {
    let rest = address.split_once("://").map_or(address, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => rest.split([':', '/']).next().unwrap_or(""),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Warnings for a Redis others can reach: `redis://` (no TLS) to
/// another host, and no password.
fn warn_reachable(
    redis: Option<&(Vec<String>, bool)>,
    password: bool,
    span: std::ops::Range<usize>,
    e: &mut Errors<'_>,
) {
    let Some((list, _)) = redis else { return };
    let remote: Vec<&String> = list.iter().filter(|a| !loopback(a)).collect();
    if let Some(a) = remote.iter().find(|a| a.starts_with("redis://")) {
        e.warn(
            "fleet.redis.plaintext",
            "fleet.redis",
            span.clone(),
            format!(
                "{a} is another host without TLS: the counts, the password and the sealed \
                 certificates cross the network in the clear (use rediss://)"
            ),
        );
    }
    if !remote.is_empty() && !password {
        e.warn(
            "fleet.password_file.missing",
            "fleet.password_file",
            span,
            "Redis on another host without a password: anyone who reaches it can read and \
             write the fleet's counts (set requirepass and password_file)",
        );
    }
}

/// `redis`: one address, or a list of a Redis Cluster's nodes; each
/// `redis://` or `rediss://` with a host. Returns the addresses and
/// whether they name a cluster.
fn check_redis(f: &RawFleet, e: &mut Errors<'_>) -> Option<(Vec<String>, bool)> {
    let Some(v) = &f.redis else {
        e.push(
            "fleet.redis.required",
            "fleet.redis",
            0..0,
            "[fleet] needs redis, the engine's address, such as redis = \"redis://10.0.0.9:6379\"",
        );
        return None;
    };
    let (list, cluster) = match v.get_ref() {
        toml::Value::String(s) => (vec![s.clone()], false),
        toml::Value::Array(a) if !a.is_empty() => {
            let mut out = Vec::with_capacity(a.len());
            for item in a {
                match item.as_str() {
                    Some(s) => out.push(s.to_string()),
                    None => {
                        e.push(
                            "fleet.redis.invalid",
                            "fleet.redis",
                            v.span(),
                            "a list of addresses holds strings, such as \
                             [\"redis://10.0.0.9:7000\", \"redis://10.0.0.10:7000\"]",
                        );
                        return None;
                    }
                }
            }
            (out, true)
        }
        _ => {
            e.push(
                "fleet.redis.invalid",
                "fleet.redis",
                v.span(),
                "redis is an address (\"redis://host:port\") or a list of a cluster's nodes",
            );
            return None;
        }
    };
    for a in &list {
        if let Err(why) = address_problem(a) {
            e.push(
                "fleet.redis.invalid",
                "fleet.redis",
                v.span(),
                format!("{a:?}: {why}"),
            );
            return None;
        }
    }
    Some((list, cluster))
}

/// Why an address is not `redis://host[:port][/db]` or `rediss://…`.
/// A password in the address is refused: it belongs in `password_file`.
fn address_problem(a: &str) -> Result<(), &'static str> {
    let rest = a
        .strip_prefix("redis://")
        .or_else(|| a.strip_prefix("rediss://"))
        .ok_or("an address starts with redis:// (or rediss:// for TLS)")?;
    if rest.contains('@') {
        return Err("put the password in password_file, not in the address");
    }
    let host = rest.split('/').next().unwrap_or("");
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !n.ends_with(']') || n.starts_with('[') => (n, Some(p)),
        _ => (host, None),
    };
    if name.is_empty() {
        return Err("the address names no host");
    }
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |p| p == 0) {
            return Err("the port is not 1 to 65535");
        }
    }
    Ok(())
}

fn valid_node(v: &str) -> bool {
    (1..=64).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::address_problem;

    #[test]
    fn addresses_are_redis_urls_without_passwords() {
        assert!(address_problem("redis://127.0.0.1:6379").is_ok());
        assert!(address_problem("rediss://cache.example:6380/2").is_ok());
        assert!(address_problem("redis://[::1]:6379").is_ok());
        assert!(address_problem("redis://host").is_ok());
        assert!(address_problem("http://host:6379").is_err());
        assert!(address_problem("redis://:secret@host:6379").is_err());
        assert!(address_problem("redis://:6379").is_err());
        assert!(address_problem("redis://host:0").is_err());
        assert!(address_problem("redis://host:99999").is_err());
    }
}
