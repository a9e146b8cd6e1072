//! Replacing an upstream's error bodies with the host's pages.
//!
//! Decided from the upstream response's head alone, before any body byte is
//! read: when it applies, the caller discards the body unread (closing that
//! upstream connection), drops [`REPLACED_RESPONSE_HEADERS`], keeps the
//! status and the other headers (cookies, `Retry-After`), and writes the
//! page through [`super::write_error_page`].

use crate::pages::ErrorStatus;

/// The host setting `error_pages.replace_upstream` (built-in `off`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplaceUpstream {
    #[default]
    Off,
    /// Only `text/html` error bodies.
    Html,
    /// Every error body, JSON included: an explicit choice.
    Any,
}

impl ReplaceUpstream {
    pub fn parse(s: &str) -> Option<ReplaceUpstream> {
        match s {
            "off" => Some(ReplaceUpstream::Off),
            "html" => Some(ReplaceUpstream::Html),
            "any" => Some(ReplaceUpstream::Any),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReplaceUpstream::Off => "off",
            ReplaceUpstream::Html => "html",
            ReplaceUpstream::Any => "any",
        }
    }
}

/// What the decision reads of an upstream response.
#[derive(Clone, Copy, Debug, Default)]
pub struct UpstreamHead<'a> {
    pub status: u16,
    /// The `Content-Type` value, if any.
    pub content_type: Option<&'a [u8]>,
    /// The request asked to upgrade the connection (WebSocket and the like).
    pub is_upgrade: bool,
}

/// Headers that describe the discarded body; a replaced response drops them.
pub const REPLACED_RESPONSE_HEADERS: &[&str] = &[
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "content-range",
    "content-language",
    "content-location",
    "content-disposition",
    "content-md5",
    "content-security-policy",
    "accept-ranges",
    "etag",
    "last-modified",
];

/// The page that replaces this upstream response, or `None` to pass it on.
/// It applies when the status has a customizable page and the mode takes
/// the content type (`html`: `text/html`; `any`: anything, none included);
/// never to an upgrade, `text/event-stream` or `application/grpc*`. Media
/// types compare ignoring case and parameters. O(content type), no
/// allocation; the success path pays one range check on the status.
#[inline]
pub fn replace_upstream(mode: ReplaceUpstream, head: &UpstreamHead<'_>) -> Option<ErrorStatus> {
    if mode == ReplaceUpstream::Off || head.status < 400 || head.is_upgrade {
        return None;
    }
    let status = ErrorStatus::from_code(head.status).filter(|s| super::is_customizable(*s))?;
    let media = head.content_type.map(media_type).unwrap_or(b"");
    if media.eq_ignore_ascii_case(b"text/event-stream")
        || media.len() >= 16 && media[..16].eq_ignore_ascii_case(b"application/grpc")
    {
        return None;
    }
    match mode {
        ReplaceUpstream::Html if !media.eq_ignore_ascii_case(b"text/html") => None,
        _ => Some(status),
    }
}

/// The media type of a `Content-Type` value: before any `;`, trimmed.
fn media_type(v: &[u8]) -> &[u8] {
    let end = v.iter().position(|&b| b == b';').unwrap_or(v.len());
    v[..end].trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, ct: Option<&'static str>) -> UpstreamHead<'static> {
        UpstreamHead {
            status,
            content_type: ct.map(str::as_bytes),
            is_upgrade: false,
        }
    }

    #[test]
    fn html_mode_replaces_html_error_bodies_only() {
        let m = ReplaceUpstream::Html;
        assert_eq!(
            replace_upstream(m, &head(502, Some("text/html; charset=utf-8"))),
            Some(ErrorStatus::BadGateway)
        );
        assert_eq!(
            replace_upstream(m, &head(404, Some(" TEXT/HTML "))),
            Some(ErrorStatus::NotFound)
        );
        assert_eq!(
            replace_upstream(m, &head(404, Some("application/json"))),
            None
        );
        assert_eq!(replace_upstream(m, &head(404, None)), None);
        assert_eq!(replace_upstream(m, &head(404, Some("text/htmlx"))), None);
    }

    #[test]
    fn any_mode_replaces_every_error_body_with_a_page() {
        let m = ReplaceUpstream::Any;
        assert_eq!(
            replace_upstream(m, &head(503, Some("application/json"))),
            Some(ErrorStatus::ServiceUnavailable)
        );
        assert_eq!(
            replace_upstream(m, &head(429, None)),
            Some(ErrorStatus::TooManyRequests)
        );
    }

    #[test]
    fn statuses_without_a_customizable_page_pass() {
        for status in [200, 204, 301, 304, 400, 401, 405, 410, 500, 501] {
            assert_eq!(
                replace_upstream(ReplaceUpstream::Any, &head(status, Some("text/html"))),
                None,
                "{status}"
            );
        }
    }

    #[test]
    fn streams_grpc_and_upgrades_are_never_replaced() {
        for ct in [
            "text/event-stream",
            "Text/Event-Stream; charset=utf-8",
            "application/grpc",
            "application/grpc+proto",
            "application/grpc-web",
        ] {
            assert_eq!(
                replace_upstream(ReplaceUpstream::Any, &head(503, Some(ct))),
                None,
                "{ct}"
            );
        }
        let upgrade = UpstreamHead {
            is_upgrade: true,
            ..head(403, Some("text/html"))
        };
        assert_eq!(replace_upstream(ReplaceUpstream::Any, &upgrade), None);
        assert_eq!(
            replace_upstream(ReplaceUpstream::Off, &head(502, Some("text/html"))),
            None
        );
    }

    #[test]
    fn modes_round_trip() {
        for m in [
            ReplaceUpstream::Off,
            ReplaceUpstream::Html,
            ReplaceUpstream::Any,
        ] {
            assert_eq!(ReplaceUpstream::parse(m.as_str()), Some(m));
        }
    }
}
