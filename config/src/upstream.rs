//! Semantic checks of `[[upstream]]` groups, compiled straight into the
//! gate's [`UpstreamGroup`].
//!
//! Server addresses are IP literals or `name:port`; names are resolved once,
//! when the profile is compiled, by the caller's [`Resolver`] (the runtime's
//! asks the system resolver off its control thread, with a timeout), and
//! every address a name resolves to becomes a server of the same weight. Nothing connects: a server only has to parse and
//! resolve. Each server gets a stable [`server_key`] so that per-shard state
//! (pools, balancer counters, passive health) follows it across reloads.

use crate::env::{CertificateLoader, Resolver};
use crate::error::Errors;
use crate::identity::server_key;
use crate::names::BlockKind;
use crate::schema::{RawHealth, RawServerEntry, RawUpstream};
use crate::upstreamtls::check_upstream_tls;
use crate::values::{as_u64, choice, int_in, IntOrString, Opt};
use gapura_gate::host::valid_name;
use gapura_gate::upstream::{ActiveHealth, Balance, HostHeader, UpstreamId, UpstreamProtocol};
use gapura_gate::{UpstreamGroup, UpstreamServer};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use toml::Spanned;

/// Defaults of an `[[upstream]]`.
pub(crate) const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
pub(crate) const DEFAULT_RESPONSE_HEADER_TIMEOUT_MS: u64 = 60_000;
pub(crate) const DEFAULT_READ_TIMEOUT_MS: u64 = 60_000;
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_SERVER: u32 = 1_024;
/// A queued request's connection or stream exists already (bounded by the
/// server's connection limits): the queue adds a few dozen bytes each, so
/// its default bound is as wide as a shard's connections.
pub(crate) const DEFAULT_MAX_QUEUED_PER_SERVER: u32 = 16_384;
pub(crate) const DEFAULT_IDLE_TIMEOUT_MS: u64 = 30_000;
pub(crate) const DEFAULT_FAIL_THRESHOLD: u32 = 3;
pub(crate) const DEFAULT_FAIL_COOLDOWN_MS: u64 = 10_000;
pub(crate) const DEFAULT_H2_STREAMS_PER_CONNECTION: u32 = 100;
pub(crate) const DEFAULT_H2_CONNECTIONS_PER_SERVER: u32 = 16;

/// Defaults of an `[upstream.health]`.
pub(crate) const DEFAULT_HEALTH_PATH: &str = "/";
pub(crate) const DEFAULT_HEALTH_INTERVAL_MS: u64 = 2_000;
pub(crate) const DEFAULT_HEALTH_TIMEOUT_MS: u64 = 1_000;
pub(crate) const DEFAULT_HEALTH_EXPECT: (u16, u16) = (200, 399);

/// Every timeout of a group: 1 ms to 10 minutes.
const TIMEOUT_BOUNDS: (i64, i64) = (1, 600_000);

/// The checked groups, in profile order (index = [`UpstreamId`]), and the
/// id of every valid name (the first group of a duplicated name).
pub(crate) struct Upstreams {
    pub groups: Vec<UpstreamGroup>,
    pub ids: HashMap<String, UpstreamId>,
}

/// Checks every group and resolves its servers. Returns one group per
/// `[[upstream]]`, in order, even for groups with errors.
pub(crate) fn check_upstreams(
    raw: &[Spanned<RawUpstream>],
    resolver: &dyn Resolver,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Upstreams {
    let mut groups = Vec::with_capacity(raw.len());
    let mut ids: HashMap<String, UpstreamId> = HashMap::new();
    for (i, u) in raw.iter().enumerate() {
        let base = format!("upstream[{i}]");
        let span = u.span();
        let u = u.get_ref();
        let name = UPSTREAM
            .check(
                &u.name,
                &base,
                span.clone(),
                |v| ids.get(v).map(|&id| id as usize),
                e,
            )
            .map(|n| n.get_ref().clone());
        if let Some(n) = &name {
            ids.insert(
                n.clone(),
                UpstreamId::try_from(i).unwrap_or(UpstreamId::MAX),
            );
        }
        let name = name.unwrap_or_default();
        let mut group = check_group(u, name, &base, span, resolver, e);
        group.tls = check_upstream_tls(u.tls.as_ref(), &base, loader, e);
        if group.protocol == UpstreamProtocol::Auto && group.tls.is_none() {
            if let Some(p) = &u.protocol {
                e.push(
                    "upstream.protocol.auto_without_tls",
                    format!("{base}.protocol"),
                    p.span(),
                    "protocol = \"auto\" picks HTTP/2 or HTTP/1.1 by ALPN, which needs tls; \
                     write \"h2\" for HTTP/2 without TLS (prior knowledge) or \"http1\""
                        .to_string(),
                );
            }
        }
        groups.push(group);
    }
    Upstreams { groups, ids }
}

const UPSTREAM: BlockKind = BlockKind {
    key: "upstream",
    noun: "upstream",
    codes: [
        "upstream.name.required",
        "upstream.name.invalid",
        "upstream.name.duplicate",
    ],
    required: "an upstream needs a name that routes refer to, such as name = \"app\"",
};

fn check_group(
    u: &RawUpstream,
    name: String,
    base: &str,
    span: Range<usize>,
    resolver: &dyn Resolver,
    e: &mut Errors<'_>,
) -> UpstreamGroup {
    let servers = check_servers(&u.servers, &name, base, span, resolver, e);
    let balance = check_balance(&u.balance, base, e);
    let host_header = check_host_header(&u.host_header, base, e);
    let mut ms = |v: &Opt<i64>, field: &str, code, bounds, default: u64| {
        int_in(e, v, &format!("{base}.{field}"), code, bounds).map_or(default, as_u64)
    };
    let connect_timeout_ms = ms(
        &u.connect_timeout_ms,
        "connect_timeout_ms",
        "upstream.connect_timeout_ms.range",
        TIMEOUT_BOUNDS,
        DEFAULT_CONNECT_TIMEOUT_MS,
    );
    let response_header_timeout_ms = ms(
        &u.response_header_timeout_ms,
        "response_header_timeout_ms",
        "upstream.response_header_timeout_ms.range",
        TIMEOUT_BOUNDS,
        DEFAULT_RESPONSE_HEADER_TIMEOUT_MS,
    );
    let read_timeout_ms = ms(
        &u.read_timeout_ms,
        "read_timeout_ms",
        "upstream.read_timeout_ms.range",
        TIMEOUT_BOUNDS,
        DEFAULT_READ_TIMEOUT_MS,
    );
    let idle_timeout_ms = ms(
        &u.idle_timeout_ms,
        "idle_timeout_ms",
        "upstream.idle_timeout_ms.range",
        TIMEOUT_BOUNDS,
        DEFAULT_IDLE_TIMEOUT_MS,
    );
    let fail_cooldown_ms = ms(
        &u.fail_cooldown_ms,
        "fail_cooldown_ms",
        "upstream.fail_cooldown_ms.range",
        (1, 3_600_000),
        DEFAULT_FAIL_COOLDOWN_MS,
    );
    let fail_threshold = ms(
        &u.fail_threshold,
        "fail_threshold",
        "upstream.fail_threshold.range",
        (0, 1_000),
        u64::from(DEFAULT_FAIL_THRESHOLD),
    );
    let h2_streams_per_connection = ms(
        &u.h2_streams_per_connection,
        "h2_streams_per_connection",
        "upstream.h2_streams_per_connection.range",
        (1, 10_000),
        u64::from(DEFAULT_H2_STREAMS_PER_CONNECTION),
    );
    let h2_connections_per_server = ms(
        &u.h2_connections_per_server,
        "h2_connections_per_server",
        "upstream.h2_connections_per_server.range",
        (1, 1_000),
        u64::from(DEFAULT_H2_CONNECTIONS_PER_SERVER),
    );
    let pool = check_pool(u, base, connect_timeout_ms, e);
    let protocol = choice(
        e,
        &u.protocol,
        &format!("{base}.protocol"),
        "upstream.protocol.invalid",
        &[
            ("http1", UpstreamProtocol::Http1),
            ("h2", UpstreamProtocol::H2),
            ("auto", UpstreamProtocol::Auto),
        ],
        UpstreamProtocol::Http1,
    );
    let active_health = u
        .health
        .as_ref()
        .map(|h| check_health(h, &format!("{base}.health"), e));
    UpstreamGroup {
        name,
        servers,
        balance,
        host_header,
        connect_timeout_ms,
        response_header_timeout_ms,
        read_timeout_ms,
        max_idle_per_server: pool.max_idle,
        idle_timeout_ms,
        max_connections_per_server: pool.max_connections,
        max_queued_per_server: pool.max_queued,
        queue_timeout_ms: pool.queue_timeout_ms,
        fail_threshold: narrow(fail_threshold),
        fail_cooldown_ms,
        active_health,
        tls: None,
        protocol,
        h2_streams_per_connection: narrow(h2_streams_per_connection),
        h2_connections_per_server: narrow(h2_connections_per_server),
    }
}

/// A group's HTTP/1.1 pool settings (docs/profile.md, "The connection
/// pool").
struct Pool {
    max_connections: u32,
    max_idle: u32,
    max_queued: u32,
    queue_timeout_ms: u64,
}

/// The pool settings of the group under `base`: each unset one takes its
/// default, two of them from the group's other settings.
fn check_pool(u: &RawUpstream, base: &str, connect_timeout_ms: u64, e: &mut Errors<'_>) -> Pool {
    let mut ms = |v: &Opt<i64>, field: &str, code, bounds, default: u64| {
        int_in(e, v, &format!("{base}.{field}"), code, bounds).map_or(default, as_u64)
    };
    let max_connections = ms(
        &u.max_connections_per_server,
        "max_connections_per_server",
        "upstream.max_connections_per_server.range",
        (1, 65_536),
        u64::from(DEFAULT_MAX_CONNECTIONS_PER_SERVER),
    );
    Pool {
        max_connections: narrow(max_connections),
        // Unset: every connection stays pooled while it is idle for less
        // than `idle_timeout_ms`, however many a burst opened.
        max_idle: narrow(ms(
            &u.max_idle_per_server,
            "max_idle_per_server",
            "upstream.max_idle_per_server.range",
            (0, 65_536),
            max_connections,
        )),
        max_queued: narrow(ms(
            &u.max_queued_per_server,
            "max_queued_per_server",
            "upstream.max_queued_per_server.range",
            (0, 65_536),
            u64::from(DEFAULT_MAX_QUEUED_PER_SERVER),
        )),
        // Unset: the connect timeout, as a request waiting for a
        // connection waits for one to be made.
        queue_timeout_ms: ms(
            &u.queue_timeout_ms,
            "queue_timeout_ms",
            "upstream.queue_timeout_ms.range",
            TIMEOUT_BOUNDS,
            connect_timeout_ms,
        ),
    }
}

/// `balance` of an upstream group or a UDP relay under `base`.
pub(crate) fn check_balance(v: &Opt<String>, base: &str, e: &mut Errors<'_>) -> Balance {
    choice(
        e,
        v,
        &format!("{base}.balance"),
        "upstream.balance.invalid",
        &[
            ("round_robin", Balance::RoundRobin),
            ("least_outstanding", Balance::LeastOutstanding),
        ],
        Balance::RoundRobin,
    )
}

/// Parses and resolves `servers` (of an upstream group or a UDP relay);
/// refuses an address reached twice.
pub(crate) fn check_servers(
    list: &Option<Spanned<Vec<Spanned<RawServerEntry>>>>,
    name: &str,
    base: &str,
    span: Range<usize>,
    resolver: &dyn Resolver,
    e: &mut Errors<'_>,
) -> Vec<UpstreamServer> {
    let path = format!("{base}.servers");
    let list = match list {
        Some(list) if !list.get_ref().is_empty() => list,
        other => {
            let at = other.as_ref().map_or(span, |l| l.span());
            e.push(
                "upstream.servers.empty",
                path,
                at,
                "an upstream needs at least one server, such as servers = [\"127.0.0.1:9000\"]",
            );
            return Vec::new();
        }
    };
    let mut servers: Vec<UpstreamServer> = Vec::new();
    let mut first_at: HashMap<SocketAddr, String> = HashMap::new();
    for (j, item) in list.get_ref().iter().enumerate() {
        let item_path = format!("{path}[{j}]");
        let (addr, addr_path, addr_span, weight) = match item.get_ref() {
            RawServerEntry::Addr(a) => (a, item_path.clone(), item.span(), 1),
            RawServerEntry::Table(t) => {
                let weight = int_in(
                    e,
                    &t.weight,
                    &format!("{item_path}.weight"),
                    "upstream.server.weight.range",
                    (1, 1_000),
                )
                .map_or(1, |w| narrow(as_u64(w)));
                (
                    t.addr.get_ref(),
                    format!("{item_path}.addr"),
                    t.addr.span(),
                    weight,
                )
            }
        };
        let written_name = match parse_server(addr) {
            Ok(ServerAddr::Name(host, _)) => Some(host.to_ascii_lowercase()),
            _ => None,
        };
        let resolved = match parse_server(addr) {
            Err(why) => {
                e.push(
                    "upstream.server.invalid",
                    addr_path,
                    addr_span,
                    format!("{addr:?} {why}"),
                );
                continue;
            }
            Ok(ServerAddr::Literal(a)) => vec![a],
            Ok(ServerAddr::Name(host, port)) => match resolve(resolver, host, port) {
                Ok(list) => list,
                Err(why) => {
                    e.push(
                        "upstream.server.unresolved",
                        addr_path,
                        addr_span,
                        format!("{host:?} did not resolve: {why}"),
                    );
                    continue;
                }
            },
        };
        if let Some((a, first)) = resolved
            .iter()
            .find_map(|a| first_at.get(a).map(|f| (a, f)))
        {
            let via = if addr.parse::<SocketAddr>().is_ok() {
                String::new()
            } else {
                format!(" ({addr:?} resolves to it)")
            };
            e.push(
                "upstream.server.duplicate",
                addr_path,
                addr_span,
                format!("{a} is already a server of this upstream, from {first}{via}"),
            );
            continue;
        }
        for a in resolved {
            first_at.insert(a, item_path.clone());
            servers.push(UpstreamServer {
                addr: a,
                name: written_name.clone(),
                weight,
                key: server_key(name, a),
                health_slot: 0,
            });
        }
    }
    if servers.len() > MAX_SERVERS {
        e.push(
            "upstream.servers.tooMany",
            path,
            list.span(),
            format!(
                "{} servers (names resolved): at most {MAX_SERVERS} per upstream, the servers \
                 one request's retries keep apart",
                servers.len()
            ),
        );
        servers.truncate(MAX_SERVERS);
    }
    servers
}

/// The most servers one upstream group holds: a request's retries mark
/// the servers they tried in one 64-bit mask.
pub(crate) const MAX_SERVERS: usize = 64;

/// A server address as written.
#[derive(Debug, PartialEq, Eq)]
enum ServerAddr<'a> {
    Literal(SocketAddr),
    Name(&'a str, u16),
}

/// Parses `IPv4:PORT`, `[IPv6]:PORT` or `NAME:PORT`.
fn parse_server(s: &str) -> Result<ServerAddr<'_>, &'static str> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        if a.ip().is_unspecified() || a.ip().is_multicast() {
            return Err("is not an address to connect to (unspecified or multicast)");
        }
        if a.port() == 0 {
            return Err("needs a port from 1 to 65535");
        }
        return Ok(ServerAddr::Literal(a));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(
            "needs a port: use IPv4:PORT, [IPv6]:PORT or NAME:PORT, such as \"127.0.0.1:9000\"",
        );
    };
    if host.starts_with('[') || host.contains(':') {
        return Err("is not a valid [IPv6]:PORT address");
    }
    if !valid_name(host) {
        return Err("has no valid host name: use IPv4:PORT, [IPv6]:PORT or NAME:PORT");
    }
    match port.parse::<u16>() {
        Ok(p @ 1..) if port.bytes().all(|b| b.is_ascii_digit()) => Ok(ServerAddr::Name(host, p)),
        _ => Err("needs a port from 1 to 65535"),
    }
}

/// Every address `host` resolves to, in the resolver's order, without
/// repeats.
fn resolve(resolver: &dyn Resolver, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for a in resolver.resolve(host, port)? {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    if out.is_empty() {
        return Err("no addresses".to_string());
    }
    Ok(out)
}

fn check_host_header(v: &Opt<String>, base: &str, e: &mut Errors<'_>) -> HostHeader {
    let Some(v) = v else {
        return HostHeader::PassThrough;
    };
    let s = v.get_ref();
    if s == "pass" {
        return HostHeader::PassThrough;
    }
    if !valid_authority(s) {
        e.push(
            "upstream.host_header.invalid",
            format!("{base}.host_header"),
            v.span(),
            format!(
                "{s:?} is neither \"pass\" nor a HOST or HOST:PORT (a host name or an [IPv6] \
                 literal, port 1 to 65535)"
            ),
        );
    }
    HostHeader::Rewrite(s.clone())
}

/// `host` or `host:port`, host a name or `[IPv6]` literal.
fn valid_authority(s: &str) -> bool {
    let (host, port) = match s.rfind(':') {
        Some(c) if !s[c..].contains(']') => (&s[..c], Some(&s[c + 1..])),
        _ => (s, None),
    };
    let port_ok = port.is_none_or(|p| {
        p.bytes().all(|b| b.is_ascii_digit()) && matches!(p.parse::<u16>(), Ok(1..))
    });
    port_ok && valid_name(host)
}

fn check_health(h: &RawHealth, base: &str, e: &mut Errors<'_>) -> ActiveHealth {
    let path = match &h.path {
        None => DEFAULT_HEALTH_PATH.to_string(),
        Some(p) => {
            let v = p.get_ref();
            if !v.starts_with('/') || !v.bytes().all(|b| b.is_ascii_graphic()) {
                e.push(
                    "upstream.health.path.invalid",
                    format!("{base}.path"),
                    p.span(),
                    format!(
                        "{v:?} is not a request path: start with '/' and use printable ASCII \
                         without spaces (percent-encode anything else)"
                    ),
                );
            }
            v.clone()
        }
    };
    let interval = int_in(
        e,
        &h.interval_ms,
        &format!("{base}.interval_ms"),
        "upstream.health.interval_ms.range",
        (100, 3_600_000),
    );
    let timeout = int_in(
        e,
        &h.timeout_ms,
        &format!("{base}.timeout_ms"),
        "upstream.health.timeout_ms.range",
        (1, 60_000),
    );
    let interval_ms = interval.map_or(DEFAULT_HEALTH_INTERVAL_MS, as_u64);
    let timeout_ms = timeout.map_or(DEFAULT_HEALTH_TIMEOUT_MS, as_u64);
    // Compare only values that passed their own range (or defaults).
    let interval_ok = h.interval_ms.is_none() || interval.is_some();
    let timeout_ok = h.timeout_ms.is_none() || timeout.is_some();
    if interval_ok && timeout_ok && timeout_ms >= interval_ms {
        let (path, at) = match (&h.timeout_ms, &h.interval_ms) {
            (Some(t), _) => (format!("{base}.timeout_ms"), t.span()),
            (None, Some(i)) => (format!("{base}.interval_ms"), i.span()),
            // Both defaults: never equal.
            (None, None) => (format!("{base}.timeout_ms"), 0..0),
        };
        let interval_from = if h.interval_ms.is_some() {
            ""
        } else {
            ", the default"
        };
        e.push(
            "upstream.health.timeout_ms.range",
            path,
            at,
            format!(
                "timeout_ms ({timeout_ms}) must be less than interval_ms ({interval_ms}{interval_from})"
            ),
        );
    }
    let expect_status = match &h.expect_status {
        None => DEFAULT_HEALTH_EXPECT,
        Some(v) => match parse_status_range(v.get_ref()) {
            Some(r) => r,
            None => {
                let shown = match v.get_ref() {
                    IntOrString::Int(n) => n.to_string(),
                    IntOrString::Str(s) => format!("{s:?}"),
                };
                e.push(
                    "upstream.health.expect_status.invalid",
                    format!("{base}.expect_status"),
                    v.span(),
                    format!(
                        "must be a status \"NNN\" or a range \"NNN-NNN\" within 100..=599, low \
                         end first, got {shown}"
                    ),
                );
                DEFAULT_HEALTH_EXPECT
            }
        },
    };
    ActiveHealth {
        path,
        interval_ms,
        timeout_ms,
        expect_status,
    }
}

/// `200`, `"200"` or `"200-399"`, within 100..=599, low end first.
fn parse_status_range(v: &IntOrString) -> Option<(u16, u16)> {
    let status = |s: &str| -> Option<u16> {
        if s.len() != 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok().filter(|n| (100..=599).contains(n))
    };
    let (lo, hi) = match v {
        IntOrString::Int(n) => {
            let n = u16::try_from(*n).ok().filter(|n| (100..=599).contains(n))?;
            (n, n)
        }
        IntOrString::Str(s) => match s.split_once('-') {
            Some((a, b)) => (status(a)?, status(b)?),
            None => {
                let n = status(s)?;
                (n, n)
            }
        },
    };
    (lo <= hi).then_some((lo, hi))
}

fn narrow(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_are_literals_or_names_with_ports() {
        assert_eq!(
            parse_server("127.0.0.1:9001"),
            Ok(ServerAddr::Literal("127.0.0.1:9001".parse().unwrap()))
        );
        assert_eq!(
            parse_server("[::1]:9002"),
            Ok(ServerAddr::Literal("[::1]:9002".parse().unwrap()))
        );
        assert_eq!(
            parse_server("localhost:9003"),
            Ok(ServerAddr::Name("localhost", 9003))
        );
        assert_eq!(
            parse_server("app-1.internal:80"),
            Ok(ServerAddr::Name("app-1.internal", 80))
        );
        for bad in [
            "",
            "127.0.0.1",
            "localhost",
            "127.0.0.1:0",
            "localhost:0",
            "localhost:65536",
            "localhost:+80",
            "::1:80",
            "[::1]",
            "[zz]:80",
            "0.0.0.0:80",
            "[::]:80",
            "224.0.0.1:80",
            "bad name:80",
            "a..b:80",
            "http://a:80",
        ] {
            assert!(parse_server(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn host_header_values_are_hosts_with_optional_ports() {
        for good in ["app.internal", "app.internal:8080", "[::1]:80", "10.0.0.1"] {
            assert!(valid_authority(good), "{good:?}");
        }
        for bad in [
            "",
            "a b",
            "app:0",
            "app:x",
            "app:",
            "*.app",
            "http://app",
            "[zz]",
        ] {
            assert!(!valid_authority(bad), "{bad:?}");
        }
    }

    #[test]
    fn status_ranges_are_one_status_or_low_high() {
        let s = |v: &str| parse_status_range(&IntOrString::Str(v.into()));
        assert_eq!(s("200"), Some((200, 200)));
        assert_eq!(s("200-399"), Some((200, 399)));
        assert_eq!(s("100-599"), Some((100, 599)));
        assert_eq!(parse_status_range(&IntOrString::Int(204)), Some((204, 204)));
        for bad in [
            "",
            "2xx",
            "99",
            "600",
            "399-200",
            "200-",
            "200 - 399",
            "0200",
        ] {
            assert_eq!(s(bad), None, "{bad:?}");
        }
        assert_eq!(parse_status_range(&IntOrString::Int(600)), None);
    }
}
