//! The per-connection limits of a host layer: `connection_rate` (requests
//! on one connection) and `websocket` (messages in one tunnel). Both are
//! host-level settings, layered like the others and inherited by routes;
//! `requests = 0` or `messages_per_second = 0` turns a limit off.

use crate::error::Errors;
use crate::rawblocks::{RawConnectionRate, RawWebSocket};
use crate::values::{choice, int_in, size_in, Opt};
use gapura_gate::policy::{OnLimit, WebSocketLimits};
use gapura_gate::quota::rate::{MAX_BURST, MAX_RATE_PER_S};
use gapura_gate::quota::RatePolicy;

/// Largest `max_message_bytes`: 1 GiB.
const MAX_MESSAGE_BYTES: u64 = 1 << 30;

/// A rate per second with its burst (default: twice the rate, at least 1);
/// `Some(None)` for a rate of 0 (off), `None` when refused.
fn per_second(
    rate: &Opt<i64>,
    burst: &Opt<i64>,
    base: &str,
    rate_key: &str,
    e: &mut Errors<'_>,
) -> Option<Option<RatePolicy>> {
    let path = format!("{base}.{rate_key}");
    let code = if base.ends_with("websocket") {
        "host.websocket.range"
    } else {
        "host.connection_rate.range"
    };
    let n = int_in(e, rate, &path, code, (0, MAX_RATE_PER_S as i64))?;
    if n == 0 {
        return Some(None);
    }
    let b = match burst {
        Some(_) => int_in(
            e,
            burst,
            &format!("{base}.burst"),
            code,
            (1, MAX_BURST as i64),
        )?,
        None => (n * 2).min(MAX_BURST as i64),
    };
    RatePolicy::per_second(n as u64, b as u32).ok().map(Some)
}

/// `connection_rate` of a layer at `base`: `Some(None)` when set to 0.
pub(crate) fn check_connection_rate(
    raw: Option<&toml::Spanned<RawConnectionRate>>,
    base: &str,
    e: &mut Errors<'_>,
) -> Option<Option<RatePolicy>> {
    let raw = raw?;
    let base = format!("{base}.connection_rate");
    let r = raw.get_ref();
    if r.requests.is_none() {
        e.push(
            "host.connection_rate.range",
            format!("{base}.requests"),
            raw.span(),
            "requests is required (0 turns the limit off)",
        );
        return None;
    }
    per_second(&r.requests, &r.burst, &base, "requests", e)
}

/// `websocket` of a layer at `base`: `Some(None)` when every limit is off.
pub(crate) fn check_websocket(
    raw: Option<&toml::Spanned<RawWebSocket>>,
    base: &str,
    e: &mut Errors<'_>,
) -> Option<Option<WebSocketLimits>> {
    let raw = raw?;
    let base = format!("{base}.websocket");
    let w = raw.get_ref();
    let messages = match &w.messages_per_second {
        Some(_) => per_second(
            &w.messages_per_second,
            &w.burst,
            &base,
            "messages_per_second",
            e,
        )?,
        None => None,
    };
    let max_message_bytes = size_in(
        e,
        &w.max_message_bytes,
        &format!("{base}.max_message_bytes"),
        ("host.websocket.range", "host.websocket.invalid"),
        (1, MAX_MESSAGE_BYTES),
        true,
    )
    .filter(|n| *n > 0);
    let on_limit = choice(
        e,
        &w.on_limit,
        &format!("{base}.on_limit"),
        "host.websocket.on_limit.invalid",
        &[("drop", OnLimit::Drop), ("close", OnLimit::Close)],
        OnLimit::Drop,
    );
    if messages.is_none() && max_message_bytes.is_none() {
        return Some(None);
    }
    Some(Some(WebSocketLimits {
        messages,
        max_message_bytes,
        on_limit,
    }))
}
