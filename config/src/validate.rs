//! Semantic checks of the raw profile: `[server]` and the limits layers.
//!
//! Every check records its error and goes on with a placeholder value, so a
//! single run reports every problem of the profile; the result is only
//! compiled when no error was recorded. Hosts are checked in `host` (proxy
//! hosts and routes in `route`), upstream groups in `upstream`, `[quota]` in
//! `quota`, `[[rate_limit]]` in `ratelimit`, `[client]` in `client`, the
//! hosts' and routes' gate keys in `policy`, `[[access_list]]` in `access`,
//! `[[rule_set]]` in `ruleset`, and the layered host-level settings
//! (`[defaults]`, `[[bundle]]`) in `hostlayer` and `blocks`.

use crate::access::check_access_lists;
use crate::blocks::{finish, layer_hosts};
use crate::client::{check_client, ProxyListener};
use crate::env::Environment;
use crate::error::Errors;
use crate::host::{check_hosts, CheckedHost};
use crate::hostlayer::Names;
use crate::layer::LimitsLayer;
use crate::policy::{resolve_policies, Known};
use crate::quota::check_quota;
use crate::ratelimit::check_rate_limits;
use crate::ruleset::check_rule_sets;
use crate::schema::{IntOrString, Opt, RawLimits, RawProfile, RawServer};
use crate::settings::{Driver, RuntimeSettings, Shards, Steering};
use crate::size::{format_size, parse_size, SizeError};
use crate::upstream::check_upstreams;
use gapura_gate::policy::{GatePolicy, HostExtras};
use gapura_gate::{ErrorStatus, HostTable, ServerSettings, UpstreamGroup};
use std::net::SocketAddr;

/// A profile that passed every check, ready to compile.
pub(crate) struct Checked {
    pub runtime: RuntimeSettings,
    pub server: ServerSettings,
    /// Client resolution, quotas, rate limits and their pairs, per shard.
    pub gate: GatePolicy,
    /// `[defaults.limits]` (not yet merged over the built-ins).
    pub defaults: LimitsLayer,
    pub hosts: HostTable,
    /// One per `[[host]]`, in order: index = `HostId`.
    pub entries: Vec<CheckedHost>,
    /// One per `[[upstream]]`, in order: index = `UpstreamId`.
    pub upstreams: Vec<UpstreamGroup>,
    /// One per `[[host]]`, in order.
    pub extras: Vec<HostExtras>,
}

/// Checks the whole profile; `env.cores` is the shard count when `shards`
/// is `"auto"`, `env.resolver` resolves upstream names. The result is
/// meaningful only when `errors` stays empty.
pub(crate) fn check(raw: &RawProfile, env: &Environment<'_>, errors: &mut Errors<'_>) -> Checked {
    let (runtime, server, proxy_listener) = check_server(&raw.server, errors);
    let shards = match runtime.shards {
        Shards::Count(n) => n,
        Shards::Auto => env.cores.max(1),
    };
    let defaults = check_limits(&raw.defaults.limits, "defaults.limits", errors);
    let upstreams = check_upstreams(&raw.upstream, env.resolver, errors);
    let quota = check_quota(&raw.quota, shards, errors);
    let rates = check_rate_limits(&raw.rate_limit, shards, errors);
    let client = check_client(&raw.client, proxy_listener.as_ref(), errors);
    let known = Known {
        rate_limits: &rates.ids,
        operations: &quota.operation_ids,
    };
    let (hosts, mut entries) = check_hosts(&raw.host, &upstreams.ids, &known, errors);
    let lists = check_access_lists(&raw.access_list, &raw.client.mode, errors);
    let sets = check_rule_sets(&raw.rule_set, errors);
    let layers = layer_hosts(
        raw,
        &Names {
            lists: &lists.ids,
            sets: &sets,
            known: &known,
        },
        &mut entries,
        errors,
    );
    let names: Vec<String> = rates.defs.iter().map(|d| d.name.clone()).collect();
    let rate_pairs = resolve_policies(
        &mut entries,
        &names,
        quota.sizes.policy_slots,
        quota.policy_slots_at.clone(),
        errors,
    );
    let blocks = finish(raw, lists, sets, &layers, &mut entries, errors);
    let gate = GatePolicy {
        client,
        quota_sizes: quota.sizes,
        quota: quota.limits,
        quota_mode: quota.mode,
        identity_header: quota.identity_header,
        rate_limits: rates.defs,
        rate_pairs,
        operations: quota.operations,
        connections: quota.connections,
        access_lists: blocks.access_lists,
        rule_sets: blocks.rule_sets,
        rule_set_names: blocks.rule_set_names,
        accept_list: blocks.accept_list,
    };
    Checked {
        runtime,
        server,
        gate,
        defaults,
        hosts,
        entries,
        upstreams: upstreams.groups,
        extras: blocks.extras,
    }
}

fn check_server(
    s: &RawServer,
    e: &mut Errors<'_>,
) -> (RuntimeSettings, ServerSettings, Option<ProxyListener>) {
    let d = RuntimeSettings::default();
    let shards = match &s.shards {
        None => d.shards,
        Some(v) => match v.get_ref() {
            IntOrString::Str(x) if x == "auto" => Shards::Auto,
            IntOrString::Str(x) => {
                e.push(
                    "server.shards.invalid",
                    "server.shards",
                    v.span(),
                    format!("must be \"auto\" or a shard count from 1 to 1024, got {x:?}"),
                );
                d.shards
            }
            IntOrString::Int(n) => match u32::try_from(*n) {
                Ok(n @ 1..=1024) => Shards::Count(n),
                _ => {
                    e.push(
                        "server.shards.range",
                        "server.shards",
                        v.span(),
                        format!("must be \"auto\" or between 1 and 1024, got {n}"),
                    );
                    d.shards
                }
            },
        },
    };
    let driver = choice(
        e,
        &s.driver,
        "server.driver",
        "server.driver.invalid",
        &[
            ("auto", Driver::Auto),
            ("io_uring", Driver::IoUring),
            ("epoll", Driver::Epoll),
        ],
        d.driver,
    );
    let steering = choice(
        e,
        &s.steering,
        "server.steering",
        "server.steering.invalid",
        &[
            ("source", Steering::Source),
            ("prefix", Steering::Prefix),
            ("kernel", Steering::Kernel),
        ],
        d.steering,
    );
    let (listen, proxy_protocol, proxy_listener) = check_listen(s, &d, e);
    let admin = check_admin(s, &d, &listen, e);
    let drain_timeout_ms = int_in(
        e,
        &s.drain_timeout_ms,
        "server.drain_timeout_ms",
        "server.drain_timeout_ms.range",
        (0, 600_000),
    )
    .map_or(d.drain_timeout_ms, as_u64);

    let ds = ServerSettings::default();
    let timeout = |e: &mut Errors<'_>, v: &Opt<i64>, path, code, default: u64| {
        int_in(e, v, path, code, (1, 3_600_000)).map_or(default, as_u64)
    };
    let server = ServerSettings {
        header_timeout_ms: timeout(
            e,
            &s.header_timeout_ms,
            "server.header_timeout_ms",
            "server.header_timeout_ms.range",
            ds.header_timeout_ms,
        ),
        idle_timeout_ms: timeout(
            e,
            &s.idle_timeout_ms,
            "server.idle_timeout_ms",
            "server.idle_timeout_ms.range",
            ds.idle_timeout_ms,
        ),
        body_timeout_ms: timeout(
            e,
            &s.body_timeout_ms,
            "server.body_timeout_ms",
            "server.body_timeout_ms.range",
            ds.body_timeout_ms,
        ),
        write_timeout_ms: timeout(
            e,
            &s.write_timeout_ms,
            "server.write_timeout_ms",
            "server.write_timeout_ms.range",
            ds.write_timeout_ms,
        ),
        max_requests_per_connection: int_in(
            e,
            &s.max_requests_per_connection,
            "server.max_requests_per_connection",
            "server.max_requests_per_connection.range",
            (0, i64::MAX),
        )
        .map_or(ds.max_requests_per_connection, as_u64),
        max_connections_per_shard: int_in(
            e,
            &s.max_connections_per_shard,
            "server.max_connections_per_shard",
            "server.max_connections_per_shard.range",
            (1, 1_048_576),
        )
        .map_or(ds.max_connections_per_shard, |n| {
            u32::try_from(n).unwrap_or(u32::MAX)
        }),
        unknown_host: match &s.unknown_host {
            None => ds.unknown_host,
            Some(v) => match *v.get_ref() {
                404 => ErrorStatus::NotFound,
                421 => ErrorStatus::MisdirectedRequest,
                n => {
                    e.push(
                        "server.unknown_host.invalid",
                        "server.unknown_host",
                        v.span(),
                        format!("must be 404 or 421, got {n}"),
                    );
                    ds.unknown_host
                }
            },
        },
    };
    let runtime = RuntimeSettings {
        shards,
        driver,
        steering,
        listen,
        proxy_protocol,
        admin,
        drain_timeout_ms,
    };
    (runtime, server, proxy_listener)
}

const ADDRESS_FORM: &str = "IPv4:PORT or [IPv6]:PORT, such as \"127.0.0.1:8080\" or \"[::1]:8080\"";

/// The listen addresses, those that expect a PROXY header, and the first
/// of those as (flag path, flag span) for `[client]`'s checks.
fn check_listen(
    s: &RawServer,
    d: &RuntimeSettings,
    e: &mut Errors<'_>,
) -> (Vec<SocketAddr>, Vec<SocketAddr>, Option<ProxyListener>) {
    let Some(list) = &s.listen else {
        return (d.listen.clone(), Vec::new(), None);
    };
    if list.get_ref().is_empty() {
        e.push(
            "server.listen.empty",
            "server.listen",
            list.span(),
            "needs at least one address",
        );
    }
    let mut listen: Vec<SocketAddr> = Vec::new();
    let mut proxy: Vec<SocketAddr> = Vec::new();
    let mut first_proxy: Option<ProxyListener> = None;
    let mut first_at: Vec<usize> = Vec::new();
    for (i, item) in list.get_ref().iter().enumerate() {
        let (text, span, suffix) = item.get_ref().addr(item.span());
        let path = format!("server.listen[{i}]{suffix}");
        match text.parse::<SocketAddr>() {
            Err(_) => e.push(
                "server.listen.invalid",
                path,
                span,
                format!("{text:?} is not a socket address: use {ADDRESS_FORM}"),
            ),
            Ok(a) => match listen.iter().position(|&b| b == a && a.port() != 0) {
                Some(k) => e.push(
                    "server.listen.duplicate",
                    path,
                    span,
                    format!("{a} is already listed at server.listen[{}]", first_at[k]),
                ),
                None => {
                    listen.push(a);
                    first_at.push(i);
                    if let Some(flag) = item.get_ref().proxy_protocol() {
                        proxy.push(a);
                        first_proxy
                            .get_or_insert((format!("server.listen[{i}].proxy_protocol"), flag));
                    }
                }
            },
        }
    }
    (listen, proxy, first_proxy)
}

fn check_admin(
    s: &RawServer,
    d: &RuntimeSettings,
    listen: &[SocketAddr],
    e: &mut Errors<'_>,
) -> Option<SocketAddr> {
    let admin = match &s.admin {
        None => d.admin,
        Some(v) if v.get_ref() == "off" => None,
        Some(v) => match v.get_ref().parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                e.push(
                    "server.admin.invalid",
                    "server.admin",
                    v.span(),
                    format!(
                        "{:?} is not a socket address: use \"off\" or {ADDRESS_FORM}",
                        v.get_ref()
                    ),
                );
                None
            }
        },
    };
    let Some(a) = admin.filter(|a| a.port() != 0) else {
        return admin;
    };
    if !listen.contains(&a) {
        return admin;
    }
    match &s.admin {
        Some(v) => e.push(
            "server.admin.conflict",
            "server.admin",
            v.span(),
            format!("{a} is also a listen address; the admin listener needs its own"),
        ),
        None => {
            // The default admin address collides: point at the listen entry.
            let (k, at) = s
                .listen
                .as_ref()
                .and_then(|l| {
                    l.get_ref()
                        .iter()
                        .enumerate()
                        .map(|(k, i)| (k, i.get_ref().addr(i.span())))
                        .find(|(_, (text, _, _))| text.parse() == Ok(a))
                })
                .map_or((0, 0..0), |(k, (_, span, _))| (k, span));
            e.push(
                "server.admin.conflict",
                "server.admin",
                at,
                format!(
                    "the admin listener's default address {a} is also listed in server.listen[{k}]; \
                     set server.admin to another address or \"off\""
                ),
            );
        }
    }
    admin
}

/// Checks one limits layer (`[defaults.limits]` or a host's `limits`).
pub(crate) fn check_limits(l: &RawLimits, prefix: &str, e: &mut Errors<'_>) -> LimitsLayer {
    use gapura_gate::limits::{HEADER_BYTES_BOUNDS, HEADER_COUNT_BOUNDS, URL_BYTES_BOUNDS};
    let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    LimitsLayer {
        max_body_bytes: check_body_limit(&l.max_body_bytes, &format!("{prefix}.max_body_bytes"), e),
        max_header_count: int_in(
            e,
            &l.max_header_count,
            &format!("{prefix}.max_header_count"),
            "limits.max_header_count.range",
            (
                i64::from(HEADER_COUNT_BOUNDS.0),
                i64::from(HEADER_COUNT_BOUNDS.1),
            ),
        )
        .map(|n| narrow(as_u64(n))),
        max_header_bytes: size_in(
            e,
            &l.max_header_bytes,
            &format!("{prefix}.max_header_bytes"),
            (
                "limits.max_header_bytes.range",
                "limits.max_header_bytes.invalid",
            ),
            (
                u64::from(HEADER_BYTES_BOUNDS.0),
                u64::from(HEADER_BYTES_BOUNDS.1),
            ),
            false,
        )
        .map(narrow),
        max_url_bytes: size_in(
            e,
            &l.max_url_bytes,
            &format!("{prefix}.max_url_bytes"),
            ("limits.max_url_bytes.range", "limits.max_url_bytes.invalid"),
            (u64::from(URL_BYTES_BOUNDS.0), u64::from(URL_BYTES_BOUNDS.1)),
            false,
        )
        .map(narrow),
    }
}

/// A `max_body_bytes` value of any layer; `None` when absent or refused.
pub(crate) fn check_body_limit(
    v: &Opt<IntOrString>,
    path: &str,
    e: &mut Errors<'_>,
) -> Option<u64> {
    size_in(
        e,
        v,
        path,
        (
            "limits.max_body_bytes.range",
            "limits.max_body_bytes.invalid",
        ),
        (1, gapura_gate::limits::MAX_BODY_BYTES_BOUND),
        true,
    )
}

/// One of a fixed set of words.
pub(crate) fn choice<T: Copy>(
    e: &mut Errors<'_>,
    v: &Opt<String>,
    path: &str,
    code: &'static str,
    options: &[(&str, T)],
    default: T,
) -> T {
    let Some(v) = v else {
        return default;
    };
    if let Some(&(_, t)) = options.iter().find(|(name, _)| name == v.get_ref()) {
        return t;
    }
    let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
    e.push(
        code,
        path,
        v.span(),
        format!("must be one of {}, got {:?}", names.join(", "), v.get_ref()),
    );
    default
}

/// An integer within `lo..=hi`; `None` when absent or refused.
pub(crate) fn int_in(
    e: &mut Errors<'_>,
    v: &Opt<i64>,
    path: &str,
    code: &'static str,
    (lo, hi): (i64, i64),
) -> Option<i64> {
    let v = v.as_ref()?;
    let n = *v.get_ref();
    if (lo..=hi).contains(&n) {
        return Some(n);
    }
    let message = if hi == i64::MAX {
        format!("must be at least {lo}, got {n}")
    } else {
        format!("must be between {lo} and {hi}, got {n}")
    };
    e.push(code, path, v.span(), message);
    None
}

/// A byte size within `lo..=hi` (or 0 when `zero_is_none`); `None` when
/// absent or refused.
fn size_in(
    e: &mut Errors<'_>,
    v: &Opt<IntOrString>,
    path: &str,
    (range_code, invalid_code): (&'static str, &'static str),
    (lo, hi): (u64, u64),
    zero_is_none: bool,
) -> Option<u64> {
    let v = v.as_ref()?;
    let bounds = if zero_is_none {
        format!(
            "0 (no limit) or between {} and {}",
            format_size(lo),
            format_size(hi)
        )
    } else {
        format!("between {} and {}", format_size(lo), format_size(hi))
    };
    let n = match v.get_ref() {
        IntOrString::Int(n) => match u64::try_from(*n) {
            Ok(n) => n,
            Err(_) => {
                e.push(
                    range_code,
                    path,
                    v.span(),
                    format!("must be {bounds}, got {n}"),
                );
                return None;
            }
        },
        IntOrString::Str(s) => match parse_size(s) {
            Ok(n) => n,
            Err(SizeError::Invalid) => {
                e.push(
                    invalid_code,
                    path,
                    v.span(),
                    format!(
                        "{s:?} is not a size: use a number of bytes, optionally with a unit \
                         (B, KiB, MiB, GiB, TiB), such as \"10 MiB\""
                    ),
                );
                return None;
            }
            Err(SizeError::Overflow) => {
                e.push(
                    range_code,
                    path,
                    v.span(),
                    format!("must be {bounds}, got {s:?}"),
                );
                return None;
            }
        },
    };
    if (zero_is_none && n == 0) || (lo..=hi).contains(&n) {
        return Some(n);
    }
    e.push(
        range_code,
        path,
        v.span(),
        format!("must be {bounds}, got {}", format_size(n)),
    );
    None
}

/// A checked non-negative integer as `u64`.
fn as_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
