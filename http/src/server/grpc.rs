//! gRPC calls refused: what an HTTP/2 stream whose request is a gRPC call
//! (`content-type: application/grpc`, `+proto` and the like; not
//! gRPC-Web) sends instead of a refusal's page.
//!
//! A gRPC client reads its call's outcome from `grpc-status`, not from the
//! HTTP status, and a page's HTML or text is nothing it can read. So an
//! answer of 400 or more that carries no `grpc-status` of its own (a page
//! of the gate or of Gapura, or an HTTP/1.1 upstream's error) becomes a
//! trailers-only answer: one HEADERS frame that ends the stream, with
//! `:status: 200`, `content-type: application/grpc`, the gRPC status the
//! HTTP status maps to ([`grpc_status`]), and `grpc-message` naming the
//! HTTP status and the request's id, percent-encoded as the gRPC spec
//! asks. A `Retry-After` of whole seconds goes along as
//! `grpc-retry-pushback-ms`. The page's body is never sent. A 2xx or 3xx
//! answer, and any answer with a `grpc-status`, passes through unchanged.

use gapura_gate::answer::reason_phrase;
use http::{HeaderMap, HeaderValue};

/// Whether a request's fields make it a gRPC call: its `content-type` is
/// `application/grpc`, alone or followed by `+` (a subtype) or `;`.
/// gRPC-Web (`application/grpc-web`) is not: its trailers travel in the
/// body.
#[inline]
pub(super) fn is_grpc(fields: &HeaderMap) -> bool {
    let Some(v) = fields.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    let v = v.as_bytes();
    const GRPC: &[u8] = b"application/grpc";
    v.len() >= GRPC.len()
        && v[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(v.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// The gRPC status a refusal's HTTP status stands for. The statuses the
/// gRPC project's HTTP-to-gRPC mapping names map as it says, except where
/// Gapura knows the cause better: its 429 is a rate limit or budget
/// (RESOURCE_EXHAUSTED, as gRPC itself reports a quota, not UNAVAILABLE),
/// its 504 an upstream past its deadline (DEADLINE_EXCEEDED). Limits on the
/// request's size are RESOURCE_EXHAUSTED, as gRPC reports a message past
/// its limit.
pub(super) fn grpc_status(http_status: u16) -> u8 {
    match http_status {
        // INTERNAL: a malformed request from a gRPC library is a broken
        // invariant (the mapping document's 400), as is Gapura's own 500.
        400 | 500 => 13,
        // UNAUTHENTICATED
        401 => 16,
        // PERMISSION_DENIED
        403 => 7,
        // UNIMPLEMENTED: no such method here.
        404 | 405 | 501 => 12,
        // DEADLINE_EXCEEDED
        408 | 504 => 4,
        // RESOURCE_EXHAUSTED
        413 | 414 | 429 | 431 => 8,
        // UNAVAILABLE: another try may succeed.
        421 | 502 | 503 => 14,
        // UNKNOWN
        _ => 2,
    }
}

/// The trailers-only answer to a gRPC call refused with `http_status`:
/// its `grpc-message` names the status and `id`; `retry_after` is the
/// refusal's `Retry-After`, if any.
pub(super) fn trailers_only(
    http_status: u16,
    id: &[u8; 24],
    retry_after: Option<&HeaderValue>,
) -> http::Response<()> {
    let mut response = http::Response::new(());
    let fields = response.headers_mut();
    fields.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    let mut digits = [0u8; 20];
    let code = gapura_gate::pages::decimal(u64::from(grpc_status(http_status)), &mut digits);
    if let Ok(v) = HeaderValue::from_bytes(code) {
        fields.insert("grpc-status", v);
    }
    if let Ok(v) = HeaderValue::from_bytes(&message(http_status, id)) {
        fields.insert("grpc-message", v);
    }
    let pushback = retry_after
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    if let Some(s) = pushback {
        fields.insert(
            "grpc-retry-pushback-ms",
            HeaderValue::from(s.saturating_mul(1000)),
        );
    }
    response
}

/// `grpc-message`: `429 Too Many Requests (request ID)`, percent-encoded.
fn message(http_status: u16, id: &[u8; 24]) -> Vec<u8> {
    let mut text = Vec::with_capacity(64);
    gapura_gate::pages::push_decimal(&mut text, u64::from(http_status));
    let reason = reason_phrase(http_status);
    if !reason.is_empty() {
        text.push(b' ');
        text.extend_from_slice(reason.as_bytes());
    }
    text.extend_from_slice(b" (request ");
    text.extend_from_slice(id);
    text.push(b')');
    percent_encode(&text)
}

/// The gRPC spec's percent-encoding: bytes outside space to `~`, and `%`
/// itself, as `%XX`.
fn percent_encode(text: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(text.len());
    for &b in text {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(content_type: &str) -> HeaderMap {
        let mut f = HeaderMap::new();
        f.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_str(content_type).unwrap(),
        );
        f
    }

    #[test]
    fn grpc_calls_are_told_by_their_content_type() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC+json",
            "application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc(&fields(yes)), "{yes}");
        }
        for no in [
            "application/grpc-web",
            "application/grpc-web-text",
            "application/grpcx",
            "application/json",
            "text/html",
        ] {
            assert!(!is_grpc(&fields(no)), "{no}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn http_statuses_map_to_grpc_statuses() {
        let table = [
            (400, 13),
            (401, 16),
            (403, 7),
            (404, 12),
            (405, 12),
            (408, 4),
            (413, 8),
            (414, 8),
            (421, 14),
            (429, 8),
            (431, 8),
            (500, 13),
            (501, 12),
            (502, 14),
            (503, 14),
            (504, 4),
            (410, 2),
            (505, 2),
        ];
        for (http, grpc) in table {
            assert_eq!(grpc_status(http), grpc, "{http}");
        }
    }

    #[test]
    fn the_trailers_only_answer_names_the_status_and_the_request() {
        let id = *b"0123456789abcdef01234567";
        let r = trailers_only(429, &id, Some(&HeaderValue::from_static("7")));
        assert_eq!(r.status(), 200);
        let f = r.headers();
        assert_eq!(f["content-type"], "application/grpc");
        assert_eq!(f["grpc-status"], "8");
        assert_eq!(
            f["grpc-message"],
            "429 Too Many Requests (request 0123456789abcdef01234567)"
        );
        assert_eq!(f["grpc-retry-pushback-ms"], "7000");
        let r = trailers_only(403, &id, Some(&HeaderValue::from_static("soon")));
        assert_eq!(r.headers()["grpc-status"], "7");
        assert!(!r.headers().contains_key("grpc-retry-pushback-ms"));
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode(b"a b~"), b"a b~");
        assert_eq!(percent_encode("100% é\n".as_bytes()), b"100%25 %C3%A9%0A");
    }
}
