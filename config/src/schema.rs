//! The raw profile as serde reads it.
//!
//! This module holds the profile's root, `[server]`, `[defaults]`,
//! `[[host]]` and its routes, `[[upstream]]`, `[[udp]]`, `[[certificate]]`
//! and `[tls]`; `rawblocks` and `rawgate` hold the other tables. The raw
//! modules depend on nothing but the value shapes of `values`: the checks
//! of every block import them, never the other way round.
//!
//! These types mirror the TOML one to one and check only what serde checks:
//! known keys (`deny_unknown_fields` everywhere) and value types. Every
//! scalar and array is wrapped in [`Spanned`] so that the semantic checks in
//! `validate` can point at the offending value. Tables are not wrapped:
//! `toml` cannot give a span to a table written with dotted keys
//! (`limits.max_body_bytes = 1`), and no check needs one, except the hosts,
//! which are array elements and always have a span.

use crate::rawblocks::{
    host_level_keys, raw_layer, RawAccessList, RawAuthProvider, RawBundle, RawLimits, RawNameRef,
    RawRuleSet,
};
use crate::rawgate::{RawClient, RawFleet, RawProtection, RawQuota, RawRateLimit, RawRateRef};
use crate::values::{IntOrString, Opt, StrList};
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use std::fmt;
use toml::Spanned;

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub defaults: RawDefaults,
    #[serde(default)]
    pub host: Vec<Spanned<RawHost>>,
    #[serde(default)]
    pub upstream: Vec<Spanned<RawUpstream>>,
    #[serde(default)]
    pub quota: RawQuota,
    /// `[protection]`: which default protections are off.
    pub protection: Option<RawProtection>,
    #[serde(default)]
    pub rate_limit: Vec<Spanned<RawRateLimit>>,
    #[serde(default)]
    pub client: RawClient,
    #[serde(default)]
    pub access_list: Vec<Spanned<RawAccessList>>,
    #[serde(default)]
    pub rule_set: Vec<Spanned<RawRuleSet>>,
    #[serde(default)]
    pub auth_provider: Vec<Spanned<RawAuthProvider>>,
    #[serde(default)]
    pub udp: Vec<Spanned<RawUdp>>,
    #[serde(default)]
    pub bundle: Vec<Spanned<RawBundle>>,
    #[serde(default)]
    pub certificate: Vec<Spanned<RawCertificate>>,
    /// `[tls]`: settings of every TLS listener.
    pub tls: Option<RawTls>,
    /// `[fleet]`: limits shared across nodes through Redis.
    pub fleet: Option<RawFleet>,
    /// `[http3]`: HTTP/3 on the listeners with `http3 = true`.
    pub http3: Option<Spanned<RawHttp3>>,
    /// `[acme]`: certificates obtained and renewed from an ACME server.
    pub acme: Option<Spanned<RawAcme>>,
}

/// `[acme]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAcme {
    pub directory: Opt<String>,
    pub contact: Option<StrList>,
    pub state_dir: Opt<String>,
    pub challenges: Option<StrList>,
    pub ca_file: Opt<String>,
    pub shared_key_file: Opt<String>,
    pub on_demand: Option<Spanned<RawOnDemand>>,
}

/// `[acme] on_demand`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOnDemand {
    pub ask: Opt<String>,
    pub rate: Opt<String>,
}

/// `[http3]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp3 {
    pub max_streams: Opt<i64>,
    pub idle_timeout_ms: Opt<i64>,
    pub retry: Opt<String>,
    pub early_data: Opt<bool>,
}

/// `[server]`. Numbers are read as `i64` (TOML's integer) so that a negative
/// or huge value is a range error with its position, not a type error.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub shards: Opt<IntOrString>,
    pub driver: Opt<String>,
    pub ring: Opt<String>,
    pub steering: Opt<String>,
    pub listen: Option<Spanned<Vec<Spanned<RawListenEntry>>>>,
    pub admin: Opt<String>,
    pub drain_timeout_ms: Opt<i64>,
    pub header_timeout_ms: Opt<i64>,
    pub idle_timeout_ms: Opt<i64>,
    pub body_timeout_ms: Opt<i64>,
    pub write_timeout_ms: Opt<i64>,
    pub max_requests_per_connection: Opt<i64>,
    pub max_connections_per_shard: Opt<i64>,
    pub unknown_host: Opt<i64>,
    /// The access list checked at accept (its address side).
    pub access_list: Opt<String>,
    pub access_log: Option<Spanned<RawAccessLog>>,
    /// Proof of work's key: 32 random bytes, created 0600 when missing.
    pub pow_key_file: Opt<String>,
    pub admin_token_file: Opt<String>,
    pub http2: Opt<bool>,
    pub http2_max_streams: Opt<i64>,
    pub http2_max_resets: Opt<i64>,
    pub http2_max_control_frames: Opt<i64>,
    /// The user the process drops to once its ports are bound.
    pub user: Opt<String>,
}

/// `[server] access_log = { path, format, log_addresses, log_query }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccessLog {
    pub path: Opt<String>,
    pub format: Opt<String>,
    pub log_addresses: Opt<String>,
    pub log_query: Opt<bool>,
}

host_level_keys!(raw_layer! {
    /// `[defaults]`: every host-level setting (see `rawblocks::RawBundle`).
    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct RawDefaults {
        #[serde(default)]
        pub limits: RawLimits,
    } {
        pub rate_limit: Opt<String>,
        pub class: Opt<String>,
    } {}
});

host_level_keys!(raw_layer! {
    /// One `[[host]]`.
    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct RawHost {
        pub names: Option<StrList>,
        pub default: Opt<bool>,
        pub kind: Opt<String>,
        pub status: Opt<i64>,
        pub body: Opt<String>,
        pub content_type: Opt<String>,
        pub headers: Option<HeaderList>,
        pub target: Opt<String>,
        pub keep: Opt<String>,
        pub rate_limit: Opt<String>,
        pub class: Opt<String>,
        #[serde(default)]
        pub limits: RawLimits,
        /// The `[[bundle]]` this host stacks on.
        #[serde(rename = "use")]
        pub uses: Opt<String>,
    } {} {
        /// `[[host.route]]`, proxy hosts only.
        #[serde(default)]
        pub route: Vec<Spanned<RawRoute>>,
    }
});

/// One `[[host.route]]`. Its `limits` table has the shape of every limits
/// layer so that a field a route may not set is a semantic error with a
/// clear code, not an unknown key.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub path: Opt<String>,
    #[serde(rename = "match")]
    pub matching: Opt<String>,
    pub upstream: Opt<String>,
    pub websocket: Opt<bool>,
    /// The host's proof of work on this route, or not.
    pub proof_of_work: Opt<bool>,
    /// The forward-auth provider for this route, or `false`.
    pub auth: Opt<RawNameRef>,
    pub auth_mode: Opt<String>,
    pub request_id: Opt<String>,
    pub rate_limit: Opt<RawRateRef>,
    pub class: Opt<String>,
    pub operation: Opt<String>,
    #[serde(default)]
    pub limits: RawLimits,
    pub access_list: Opt<RawNameRef>,
    pub access_list_mode: Opt<String>,
    pub rule_set: Opt<RawNameRef>,
    pub rule_set_mode: Opt<String>,
}

/// One `[[upstream]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUpstream {
    pub name: Opt<String>,
    pub servers: Option<Spanned<Vec<Spanned<RawServerEntry>>>>,
    pub balance: Opt<String>,
    pub host_header: Opt<String>,
    pub connect_timeout_ms: Opt<i64>,
    pub response_header_timeout_ms: Opt<i64>,
    pub read_timeout_ms: Opt<i64>,
    pub max_idle_per_server: Opt<i64>,
    pub idle_timeout_ms: Opt<i64>,
    pub max_connections_per_server: Opt<i64>,
    pub max_queued_per_server: Opt<i64>,
    pub queue_timeout_ms: Opt<i64>,
    pub fail_threshold: Opt<i64>,
    pub fail_cooldown_ms: Opt<i64>,
    pub health: Option<RawHealth>,
    pub tls: Option<Spanned<RawUpstreamTls>>,
    pub protocol: Opt<String>,
    pub h2_streams_per_connection: Opt<i64>,
    pub h2_connections_per_server: Opt<i64>,
}

/// An upstream's `tls`: `true` (verify against the public roots) or a
/// table.
#[derive(Debug)]
pub(crate) enum RawUpstreamTls {
    Flag(bool),
    Table(RawUpstreamTlsTable),
}

/// The table form of an upstream's `tls`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUpstreamTlsTable {
    pub server_name: Opt<String>,
    pub ca_file: Opt<String>,
    pub client_cert: Opt<String>,
    pub client_key: Opt<String>,
    pub verify: Opt<bool>,
}

impl<'de> Deserialize<'de> for RawUpstreamTls {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawUpstreamTls;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false, or a table { server_name, ca_file, client_cert, client_key, verify }")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawUpstreamTls, E> {
                Ok(RawUpstreamTls::Flag(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawUpstreamTls, A::Error> {
                RawUpstreamTlsTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawUpstreamTls::Table)
            }
        }
        d.deserialize_any(V)
    }
}

/// `[upstream.health]`. `expect_status` is `"NNN"`, `"NNN-NNN"` or `NNN`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealth {
    pub path: Opt<String>,
    pub interval_ms: Opt<i64>,
    pub timeout_ms: Opt<i64>,
    pub expect_status: Opt<IntOrString>,
}

/// An element of `servers`: `"ADDRESS"` or `{ addr = "ADDRESS", weight = N }`.
#[derive(Debug)]
pub(crate) enum RawServerEntry {
    /// The string form; its span is the element's.
    Addr(String),
    Table(RawServerTable),
}

/// The table form of a server.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServerTable {
    pub addr: Spanned<String>,
    pub weight: Opt<i64>,
}

impl<'de> Deserialize<'de> for RawServerEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawServerEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address string or a table { addr = \"...\", weight = N }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawServerEntry, E> {
                Ok(RawServerEntry::Addr(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawServerEntry, A::Error> {
                RawServerTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawServerEntry::Table)
            }
        }
        d.deserialize_any(V)
    }
}

/// One `[[udp]]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUdp {
    pub name: Opt<String>,
    pub listen: Option<StrList>,
    pub servers: Option<Spanned<Vec<Spanned<RawServerEntry>>>>,
    pub balance: Opt<String>,
    pub max_datagram_bytes: Opt<i64>,
    pub session: Option<RawUdpSession>,
    pub window_ms: Opt<i64>,
    pub global: Option<RawUdpBudget>,
    pub prefix: Option<RawUdpBudget>,
    pub tracked_keys: Opt<i64>,
    pub tracked_reserve: Opt<i64>,
    pub operation: Option<Spanned<RawUdpOperation>>,
    pub classes: Option<Spanned<Vec<Spanned<RawUdpClass>>>>,
    pub auth: Option<Spanned<RawUdpEnvelope>>,
}

/// `session = { rate, burst, idle_timeout_ms, max_sessions, critical_reserve }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUdpSession {
    pub rate: Opt<i64>,
    pub burst: Opt<i64>,
    pub idle_timeout_ms: Opt<i64>,
    pub max_sessions: Opt<i64>,
    pub critical_reserve: Opt<i64>,
}

/// `global` / `prefix = { requests, optional, scope }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUdpBudget {
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub scope: Opt<String>,
}

/// `operation = { offset, bytes }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUdpOperation {
    pub offset: Opt<i64>,
    pub bytes: Opt<i64>,
}

/// One of `classes`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUdpClass {
    pub name: Opt<String>,
    pub values: Option<Spanned<Vec<Spanned<i64>>>>,
    pub requests: Opt<i64>,
    pub optional: Opt<i64>,
    pub scope: Opt<String>,
    pub critical: Opt<bool>,
}

/// `auth = { keys, max_age_ms, replay_window, key_budget, strip }`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUdpEnvelope {
    pub keys: Option<StrList>,
    pub max_age_ms: Opt<i64>,
    pub replay_window: Opt<i64>,
    pub key_budget: Opt<i64>,
    pub strip: Opt<bool>,
}

/// `headers = { Name = "value", ... }` in document order, names and values spanned.
#[derive(Debug, Default)]
pub(crate) struct HeaderList(pub Vec<(Spanned<String>, Spanned<String>)>);

impl<'de> Deserialize<'de> for HeaderList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HeaderList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of header names to string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeaderList, A::Error> {
                let mut list = Vec::new();
                while let Some(name) = map.next_key::<Spanned<String>>()? {
                    let value = map.next_value::<Spanned<String>>()?;
                    list.push((name, value));
                }
                Ok(HeaderList(list))
            }
        }
        d.deserialize_map(V)
    }
}

/// `[[certificate]]`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCertificate {
    pub names: Option<StrList>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub default: Opt<bool>,
    pub ocsp: Opt<String>,
    /// Obtained and renewed through `[acme]` instead of `cert` and `key`.
    pub acme: Opt<bool>,
}

/// `[tls]`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub min_version: Opt<String>,
    pub handshake_timeout_ms: Opt<i64>,
    pub session_tickets: Opt<bool>,
    pub ticket_rotation_s: Opt<i64>,
}

/// An element of `server.listen`: `"ADDRESS"` or
/// `{ addr = "ADDRESS", proxy_protocol = true }`.
#[derive(Debug)]
pub(crate) enum RawListenEntry {
    /// The string form; its span is the element's.
    Addr(String),
    Table(RawListenTable),
}

/// The table form of a listen entry.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListenTable {
    pub addr: Spanned<String>,
    pub proxy_protocol: Opt<bool>,
    /// TLS on this listener (`[[certificate]]` entries serve it).
    pub tls: Opt<bool>,
    /// HTTP/3 on the same port over UDP (needs `tls`).
    pub http3: Opt<bool>,
}

impl RawListenEntry {
    /// The address text, its span and the key path suffix that names it
    /// (`""` for the string form, `".addr"` for a table), given the
    /// element's span.
    pub(crate) fn addr(
        &self,
        element: std::ops::Range<usize>,
    ) -> (&str, std::ops::Range<usize>, &'static str) {
        match self {
            RawListenEntry::Addr(a) => (a, element, ""),
            RawListenEntry::Table(t) => (t.addr.get_ref(), t.addr.span(), ".addr"),
        }
    }

    /// `tls = true`, with the flag's span.
    pub(crate) fn tls(&self) -> Option<std::ops::Range<usize>> {
        match self {
            RawListenEntry::Table(RawListenTable { tls: Some(t), .. }) if *t.get_ref() => {
                Some(t.span())
            }
            _ => None,
        }
    }

    /// `http3 = true`, with the flag's span.
    pub(crate) fn http3(&self) -> Option<std::ops::Range<usize>> {
        match self {
            RawListenEntry::Table(RawListenTable { http3: Some(h), .. }) if *h.get_ref() => {
                Some(h.span())
            }
            _ => None,
        }
    }

    /// `proxy_protocol = true`, with the flag's span.
    pub(crate) fn proxy_protocol(&self) -> Option<std::ops::Range<usize>> {
        match self {
            RawListenEntry::Table(RawListenTable {
                proxy_protocol: Some(p),
                ..
            }) if *p.get_ref() => Some(p.span()),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for RawListenEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawListenEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "an address string or a table { addr = \"...\", proxy_protocol = true }",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawListenEntry, E> {
                Ok(RawListenEntry::Addr(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawListenEntry, A::Error> {
                RawListenTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawListenEntry::Table)
            }
        }
        d.deserialize_any(V)
    }
}
