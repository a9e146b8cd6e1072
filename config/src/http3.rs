//! Checks of HTTP/3: the listeners that serve it (`http3 = true` on a
//! `tls = true` entry of `server.listen`) and `[http3]`'s settings.

use crate::error::Errors;
use crate::schema::{RawHttp3, RawServer};
use crate::values::{choice, int_in};
use gapura_gate::snapshot::{Http3Settings, RetryMode};
use std::net::SocketAddr;
use toml::Spanned;

/// The positions in `listen` of the entries with `http3 = true`; each must
/// also say `tls = true` (QUIC is TLS 1.3 by construction).
pub(crate) fn http3_listeners(
    s: &RawServer,
    listen: &[SocketAddr],
    tls: &[usize],
    e: &mut Errors<'_>,
) -> Vec<usize> {
    let Some(list) = &s.listen else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // Positions in `listen` as `check_listen` assigned them: each entry
    // that parsed and was no duplicate took the next one.
    let mut at = 0;
    for (i, item) in list.get_ref().iter().enumerate() {
        let (text, _, _) = item.get_ref().addr(item.span());
        let Ok(addr) = text.parse::<SocketAddr>() else {
            continue;
        };
        if listen.get(at) != Some(&addr) {
            continue;
        }
        let here = at;
        at += 1;
        let Some(flag) = item.get_ref().http3() else {
            continue;
        };
        if !tls.contains(&here) {
            e.push(
                "server.listen.http3_without_tls",
                format!("server.listen[{i}].http3"),
                flag,
                "HTTP/3 is always encrypted: add tls = true to this listener (its certificates serve both)",
            );
            continue;
        }
        out.push(here);
    }
    out
}

/// `[http3]`: each key within its bounds; the defaults where absent.
pub(crate) fn check_http3(raw: Option<&Spanned<RawHttp3>>, e: &mut Errors<'_>) -> Http3Settings {
    let d = Http3Settings::default();
    let Some(raw) = raw.map(Spanned::get_ref) else {
        return d;
    };
    Http3Settings {
        max_streams: int_in(
            e,
            &raw.max_streams,
            "http3.max_streams",
            "http3.max_streams.range",
            (1, 1_000),
        )
        .map_or(d.max_streams, |n| n as u32),
        idle_timeout_ms: int_in(
            e,
            &raw.idle_timeout_ms,
            "http3.idle_timeout_ms",
            "http3.idle_timeout_ms.range",
            (1_000, 600_000),
        )
        .map_or(d.idle_timeout_ms, |n| n as u64),
        retry: choice(
            e,
            &raw.retry,
            "http3.retry",
            "http3.retry.invalid",
            &[
                ("auto", RetryMode::Auto),
                ("always", RetryMode::Always),
                ("never", RetryMode::Never),
            ],
            d.retry,
        ),
        early_data: raw
            .early_data
            .as_ref()
            .map_or(d.early_data, |v| *v.get_ref()),
    }
}
