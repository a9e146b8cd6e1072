//! Semantic checks of `[server]`: shards, driver, steering, the listeners
//! (`listen`, with their PROXY protocol and access-list keys) and the admin
//! listener, and the settings the gate reads from it (timeouts, the
//! unknown-host answer).

use crate::client::ProxyListener;
use crate::error::Errors;
use crate::schema::RawServer;
use crate::settings::{ClientRing, Driver, RuntimeSettings, Shards, Steering};
use crate::values::{as_u64, choice, int_in, IntOrString, Opt};
use gapura_gate::snapshot::{AccessLogSettings, LogFormat};
use gapura_gate::{ErrorStatus, ServerSettings};
use std::net::SocketAddr;

/// Checks `[server]`: the runtime's own settings (shards, driver, steering,
/// listeners, the admin listener, the drain timeout), then the settings
/// the connection loop and the gate read ([`check_connections`]).
pub(crate) fn check_server(
    s: &RawServer,
    udp_only: bool,
    e: &mut Errors<'_>,
) -> (
    RuntimeSettings,
    ServerSettings,
    Option<ProxyListener>,
    Option<crate::tls::TlsListener>,
) {
    let d = RuntimeSettings::default();
    let shards = check_shards(&s.shards, d.shards, e);
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
    let ring = choice(
        e,
        &s.ring,
        "server.ring",
        "server.ring.invalid",
        &[("on", ClientRing::On), ("off", ClientRing::Off)],
        d.ring,
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
    let (listen, proxy_protocol, proxy_listener, tls, tls_listener) =
        check_listen(s, &d, udp_only, e);
    let http3 = crate::http3::http3_listeners(s, &listen, &tls, e);
    let admin = check_admin(s, &d, &listen, e);
    let drain_timeout_ms = int_in(
        e,
        &s.drain_timeout_ms,
        "server.drain_timeout_ms",
        "server.drain_timeout_ms.range",
        (0, 600_000),
    )
    .map_or(d.drain_timeout_ms, as_u64);
    let runtime = RuntimeSettings {
        shards,
        driver,
        ring,
        steering,
        listen,
        proxy_protocol,
        tls,
        http3,
        admin_token_file: check_admin_token(s, admin, e),
        admin,
        drain_timeout_ms,
        pow_key_file: check_pow_key_file(s, e),
        udp_listen: Vec::new(),
        user: check_user(s, e),
        fleet: None,
        acme: None,
    };
    (
        runtime,
        check_connections(s, e),
        proxy_listener,
        tls_listener,
    )
}

/// `shards`: `"auto"` or a count from 1 to 1024; `default` when absent or
/// wrong.
fn check_shards(v: &Opt<IntOrString>, default: Shards, e: &mut Errors<'_>) -> Shards {
    let Some(v) = v else {
        return default;
    };
    match v.get_ref() {
        IntOrString::Str(x) if x == "auto" => Shards::Auto,
        IntOrString::Str(x) => {
            e.push(
                "server.shards.invalid",
                "server.shards",
                v.span(),
                format!("must be \"auto\" or a shard count from 1 to 1024, got {x:?}"),
            );
            default
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
                default
            }
        },
    }
}

/// What the connection loop and the gate read of `[server]`: the header,
/// idle, body and write timeouts, the per-connection and per-shard bounds,
/// and the unknown-host answer.
fn check_connections(s: &RawServer, e: &mut Errors<'_>) -> ServerSettings {
    let ds = ServerSettings::default();
    let timeout = |e: &mut Errors<'_>, v: &Opt<i64>, path, code, default: u64| {
        int_in(e, v, path, code, (1, 3_600_000)).map_or(default, as_u64)
    };
    ServerSettings {
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
        unknown_host: check_unknown_host(&s.unknown_host, ds.unknown_host, e),
        access_log: check_access_log(s, e),
        http2: check_http2(s, e),
        http3: gapura_gate::snapshot::Http3Settings::default(),
    }
}

/// `http2`, `http2_max_streams`, `http2_max_resets`,
/// `http2_max_control_frames`.
fn check_http2(s: &RawServer, e: &mut Errors<'_>) -> gapura_gate::snapshot::Http2Settings {
    let d = gapura_gate::snapshot::Http2Settings::default();
    gapura_gate::snapshot::Http2Settings {
        enabled: s.http2.as_ref().map_or(d.enabled, |v| *v.get_ref()),
        max_streams: int_in(
            e,
            &s.http2_max_streams,
            "server.http2_max_streams",
            "server.http2_max_streams.range",
            (1, 1_000),
        )
        .map_or(d.max_streams, |n| n as u32),
        max_resets: int_in(
            e,
            &s.http2_max_resets,
            "server.http2_max_resets",
            "server.http2_max_resets.range",
            (1, 100_000),
        )
        .map_or(d.max_resets, |n| n as u32),
        max_control_frames: int_in(
            e,
            &s.http2_max_control_frames,
            "server.http2_max_control_frames",
            "server.http2_max_control_frames.range",
            (1, 1_000_000),
        )
        .map_or(d.max_control_frames, |n| n as u32),
    }
}

/// `pow_key_file`: a file name, not blank.
fn check_pow_key_file(s: &RawServer, e: &mut Errors<'_>) -> Option<String> {
    let p = s.pow_key_file.as_ref()?;
    let path = p.get_ref();
    if path.trim().is_empty() || path.contains('\0') {
        e.push(
            "server.pow_key_file.invalid",
            "server.pow_key_file",
            p.span(),
            "the proof-of-work key's file must be a file name, not blank",
        );
        return None;
    }
    Some(path.clone())
}

/// `admin_token_file`: a file name; required when the admin listener is
/// bound to an address other than loopback (its `/metrics`, `/explain`
/// and `/heap` would otherwise answer anyone who can reach it).
fn check_admin_token(
    s: &RawServer,
    admin: Option<SocketAddr>,
    e: &mut Errors<'_>,
) -> Option<String> {
    let token = match &s.admin_token_file {
        Some(p) if p.get_ref().trim().is_empty() || p.get_ref().contains('\0') => {
            e.push(
                "server.admin_token_file.invalid",
                "server.admin_token_file",
                p.span(),
                "the admin token's file must be a file name, not blank",
            );
            return None;
        }
        Some(p) => Some(p.get_ref().clone()),
        None => None,
    };
    if let (Some(a), None) = (admin, &token) {
        if !a.ip().is_loopback() {
            let span = s.admin.as_ref().map_or(0..0, |v| v.span());
            e.push(
                "server.admin.token_required",
                "server.admin",
                span,
                format!(
                    "the admin listener on {a} is reachable beyond this machine: set \
                     [server] admin_token_file to a file holding a token (at least 16 \
                     characters; requests then send Authorization: Bearer TOKEN), or bind \
                     it to 127.0.0.1"
                ),
            );
        }
    }
    token
}

/// `user`: a system user name (1 to 32 of a-z, 0-9, '_' and '-', starting
/// with a letter or '_'; a trailing '$' allowed). Whether it exists is the
/// runtime's question.
fn check_user(s: &RawServer, e: &mut Errors<'_>) -> Option<String> {
    let u = s.user.as_ref()?;
    let name = u.get_ref();
    let body = name.strip_suffix('$').unwrap_or(name);
    let valid = (1..=32).contains(&name.len())
        && body
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && body
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !valid {
        e.push(
            "server.user.invalid",
            "server.user",
            u.span(),
            format!("`{name}` is not a user name: 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or '_', such as user = \"gapura\""),
        );
        return None;
    }
    Some(name.clone())
}

/// `access_log`: off unless written; a path is required.
fn check_access_log(s: &RawServer, e: &mut Errors<'_>) -> Option<AccessLogSettings> {
    let raw = s.access_log.as_ref()?;
    let a = raw.get_ref();
    let path = match &a.path {
        Some(p) if !p.get_ref().trim().is_empty() && !p.get_ref().contains('\0') => {
            p.get_ref().clone()
        }
        Some(p) => {
            e.push(
                "server.access_log.path.invalid",
                "server.access_log.path",
                p.span(),
                "the access log's path must be a file name, not blank",
            );
            return None;
        }
        None => {
            e.push(
                "server.access_log.path.required",
                "server.access_log.path",
                raw.span(),
                "an access log needs the file it writes, such as path = \"/var/log/gapura/access.log\"",
            );
            return None;
        }
    };
    let format = choice(
        e,
        &a.format,
        "server.access_log.format",
        "server.access_log.format.invalid",
        &[("json", LogFormat::Json), ("combined", LogFormat::Combined)],
        LogFormat::Json,
    );
    let hash_addresses = choice(
        e,
        &a.log_addresses,
        "server.access_log.log_addresses",
        "server.access_log.log_addresses.invalid",
        &[("plain", false), ("hash", true)],
        false,
    );
    Some(AccessLogSettings {
        path,
        format,
        hash_addresses,
        log_query: a.log_query.as_ref().is_some_and(|v| *v.get_ref()),
    })
}

/// `unknown_host`: 404 or 421.
fn check_unknown_host(v: &Opt<i64>, default: ErrorStatus, e: &mut Errors<'_>) -> ErrorStatus {
    let Some(v) = v else {
        return default;
    };
    match *v.get_ref() {
        404 => ErrorStatus::NotFound,
        421 => ErrorStatus::MisdirectedRequest,
        n => {
            e.push(
                "server.unknown_host.invalid",
                "server.unknown_host",
                v.span(),
                format!("must be 404 or 421, got {n}"),
            );
            default
        }
    }
}

const ADDRESS_FORM: &str = "IPv4:PORT or [IPv6]:PORT, such as \"127.0.0.1:8080\" or \"[::1]:8080\"";

/// What `listen` says: the addresses, those that expect a PROXY header,
/// the first of those as (flag path, flag span) for `[client]`'s checks,
/// the TLS listeners and the first of those.
type Listen = (
    Vec<SocketAddr>,
    Vec<SocketAddr>,
    Option<ProxyListener>,
    Vec<usize>,
    Option<crate::tls::TlsListener>,
);

fn check_listen(s: &RawServer, d: &RuntimeSettings, udp_only: bool, e: &mut Errors<'_>) -> Listen {
    let Some(list) = &s.listen else {
        return (d.listen.clone(), Vec::new(), None, Vec::new(), None);
    };
    if list.get_ref().is_empty() && !udp_only {
        e.push(
            "server.listen.empty",
            "server.listen",
            list.span(),
            "needs at least one address (an empty list only in a profile with [[udp]] relays)",
        );
    }
    let mut listen: Vec<SocketAddr> = Vec::new();
    let mut proxy: Vec<SocketAddr> = Vec::new();
    let mut first_proxy: Option<ProxyListener> = None;
    let mut tls: Vec<usize> = Vec::new();
    let mut first_tls: Option<crate::tls::TlsListener> = None;
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
                    if let Some(flag) = item.get_ref().tls() {
                        tls.push(listen.len() - 1);
                        first_tls.get_or_insert((format!("server.listen[{i}].tls"), flag));
                    }
                }
            },
        }
    }
    (listen, proxy, first_proxy, tls, first_tls)
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
