//! The raw `[quota]`, `[protection]`, `[[rate_limit]]`, `[client]` and
//! `[fleet]` tables and the gate keys of hosts and routes, as serde reads them.
//!
//! Like `schema`, these mirror the TOML one to one, closed to unknown keys,
//! every scalar and array [`Spanned`]; `validate` and the modules it calls
//! (`quota`, `ratelimit`, `client`, `gatekeys`) check the values. The
//! shapes that take two types (`cloudflare_ranges`, a route's
//! `rate_limit`) have their own visitors so that either form keeps its span.

use crate::values::{Opt, StrList};
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use std::fmt;
use toml::Spanned;

/// `[fleet]`: the engine fleet-scoped limits are shared through.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFleet {
    /// One `redis://` or `rediss://` address, or a list of them (a Redis
    /// Cluster's seed nodes): its shape is checked by `fleet`.
    pub redis: Opt<toml::Value>,
    pub password_file: Opt<String>,
    pub key_file: Opt<String>,
    pub node: Opt<String>,
    pub sync_ms: Opt<i64>,
    pub nodes_expected: Opt<i64>,
    pub shared_keys: Opt<i64>,
    /// One profile for the fleet (`fleetprofile`).
    pub profile: Opt<String>,
    pub publisher_key: Opt<String>,
    pub state_dir: Opt<String>,
    pub profile_poll_ms: Opt<i64>,
    pub profile_max_bytes: Opt<i64>,
}

/// `[quota]`: one shard's table sizes, the budgets and the operations.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuota {
    pub rate_table_entries: Opt<i64>,
    pub policy_slots: Opt<i64>,
    pub slot_grace_ms: Opt<i64>,
    pub window_ms: Opt<i64>,
    pub tracked_keys: Opt<i64>,
    pub critical_reserve: Opt<i64>,
    pub lease_tracked_keys: Opt<i64>,
    pub lease_critical_reserve: Opt<i64>,
    pub max_leases: Opt<i64>,
    pub mode: Opt<String>,
    pub global: Option<RawGlobalBudget>,
    pub source: Option<RawSourceBudget>,
    pub health: Option<RawHealthBudget>,
    pub identity: Option<RawIdentityBudget>,
    /// The identity dimensions (`dims`).
    pub tenant: Option<RawDimBudget>,
    pub principal: Option<RawDimBudget>,
    pub resource: Option<RawResourceBudget>,
    #[serde(default)]
    pub operation: Vec<Spanned<RawOperation>>,
    /// The operation a request no host takes counts in.
    pub unknown_host_operation: Opt<String>,
    pub connections: Option<RawConnections>,
}

/// `[quota.connections]`: per source prefix, checked at accept.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConnections {
    pub concurrent: Opt<i64>,
    pub per_second: Opt<i64>,
    pub burst: Opt<i64>,
    pub mode: Opt<String>,
}

/// `[quota.global]`: requests per window and requests running, on the shard.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGlobalBudget {
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub concurrent: Opt<i64>,
    pub concurrent_optional: Opt<i64>,
    pub scope: Opt<String>,
}

/// `[quota.source]`: per source prefix (steered, so exact on a node; its
/// `scope` is `"per_shard"` or `"fleet"`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSourceBudget {
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub concurrent: Opt<i64>,
    pub concurrent_optional: Opt<i64>,
    pub scope: Opt<String>,
}

/// `[quota.health]`: health-probe requests per source prefix. Probes may
/// use the whole budget, so there is no `optional`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealthBudget {
    pub requests: Opt<i64>,
}

/// `[quota.identity]`: requests per window per credential fingerprint.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIdentityBudget {
    pub header: Opt<String>,
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub scope: Opt<String>,
}

/// `[quota.tenant]` or `[quota.principal]`: an identity dimension read
/// from a header.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDimBudget {
    pub header: Opt<String>,
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub concurrent: Opt<i64>,
    pub concurrent_optional: Opt<i64>,
    pub scope: Opt<String>,
}

/// `[quota.resource]`: a budget per route.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResourceBudget {
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub scope: Opt<String>,
}

/// One `[[quota.operation]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOperation {
    pub name: Opt<String>,
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub concurrent: Opt<i64>,
    pub concurrent_optional: Opt<i64>,
    pub scope: Opt<String>,
}

/// `[protection]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProtection {
    /// Dimensions with no default: any of `protection::DIMENSIONS`, or `"all"`.
    pub off: Option<StrList>,
}

/// One `[[rate_limit]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRateLimit {
    pub name: Opt<String>,
    pub requests: Opt<i64>,
    pub per: Opt<String>,
    pub burst: Opt<i64>,
    pub key: Opt<String>,
    pub header: Opt<String>,
    pub scope: Opt<String>,
    pub ipv6_tiers: Option<Spanned<Vec<Spanned<RawTier>>>>,
    pub mode: Opt<String>,
}

/// One element of `ipv6_tiers`: `{ prefix = 56, requests = 100, burst = 200 }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTier {
    pub prefix: Opt<i64>,
    pub requests: Opt<i64>,
    pub burst: Opt<i64>,
}

/// `[client]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClient {
    pub mode: Opt<String>,
    pub trusted_proxies: Option<StrList>,
    pub cloudflare_ranges: Opt<RawRanges>,
    pub proxy_protocol_peers: Option<StrList>,
}

/// `cloudflare_ranges = "builtin"` or a list of networks.
#[derive(Debug)]
pub(crate) enum RawRanges {
    Word(String),
    List(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for RawRanges {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawRanges;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"builtin\" or an array of addresses and networks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawRanges, E> {
                Ok(RawRanges::Word(v.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawRanges, A::Error> {
                Vec::<Spanned<String>>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(RawRanges::List)
            }
        }
        d.deserialize_any(V)
    }
}

/// A route's `rate_limit`: a name, or `false` for none.
#[derive(Debug)]
pub(crate) enum RawRateRef {
    Name(String),
    Flag(bool),
}

impl<'de> Deserialize<'de> for RawRateRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawRateRef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the name of a [[rate_limit]], or false")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawRateRef, E> {
                Ok(RawRateRef::Name(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawRateRef, E> {
                Ok(RawRateRef::Flag(v))
            }
        }
        d.deserialize_any(V)
    }
}
