//! Semantic checks of `proxy` hosts and their `[[host.route]]` entries.
//!
//! A route's path is compared with the request's canonical matching path,
//! so a route must itself be written canonically: a path the matcher could
//! never produce would be a route no request reaches. [`canonical_path`]
//! computes the canonical spelling; a path that differs from it is refused
//! with that spelling in the message (`route.path.notCanonical`), and a path
//! that has none (a query, a space, an escape of a byte no path holds) is
//! `route.path.invalid`. Routes carry one limits layer, `max_body_bytes`,
//! laid over the host's resolved limits when the profile is compiled.

use crate::error::Errors;
use crate::layer::LimitsLayer;
use crate::schema::{HeaderList, RawHost, RawLimits, RawRoute};
use crate::validate::{check_body_limit, choice};
use gapura_gate::upstream::{RequestId, RouteMatch, UpstreamId};
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// A route that passed its checks. `limits` sets `max_body_bytes` at most.
pub(crate) struct CheckedRoute {
    pub matcher: RouteMatch,
    pub upstream: UpstreamId,
    pub limits: LimitsLayer,
    pub websocket: bool,
    pub request_id: RequestId,
}

/// Checks a proxy host: refuses the fixed-answer fields and checks every
/// route. `span` is the host's, for a missing route.
pub(crate) fn check_proxy(
    h: &RawHost,
    base: &str,
    span: Range<usize>,
    upstreams: &HashMap<String, UpstreamId>,
    e: &mut Errors<'_>,
) -> Vec<CheckedRoute> {
    for (field, code, at) in [
        (
            "status",
            "host.status.unexpected",
            h.status.as_ref().map(|v| v.span()),
        ),
        (
            "body",
            "host.body.unexpected",
            h.body.as_ref().map(|v| v.span()),
        ),
        (
            "content_type",
            "host.content_type.unexpected",
            h.content_type.as_ref().map(|v| v.span()),
        ),
        (
            "target",
            "host.target.unexpected",
            h.target.as_ref().map(|v| v.span()),
        ),
        (
            "keep",
            "host.keep.unexpected",
            h.keep.as_ref().map(|v| v.span()),
        ),
        (
            "headers",
            "host.headers.unexpected",
            headers_span(h.headers.as_ref()),
        ),
    ] {
        if let Some(at) = at {
            e.push(
                code,
                format!("{base}.{field}"),
                at,
                format!(
                    "a proxy host has no {field}: its responses come from the upstream; \
                     this host has kind = \"proxy\""
                ),
            );
        }
    }
    if h.route.is_empty() {
        e.push(
            "host.routes.required",
            format!("{base}.route"),
            span,
            "a proxy host needs at least one [[host.route]], such as path = \"/\" and upstream = \"app\"",
        );
    }
    let mut first_at: HashMap<(bool, String), String> = HashMap::new();
    let mut routes = Vec::with_capacity(h.route.len());
    for (j, r) in h.route.iter().enumerate() {
        let path = format!("{base}.route[{j}]");
        routes.push(check_route(r, &path, upstreams, &mut first_at, e));
    }
    routes
}

/// Refuses the routes of a host that is not a proxy, one error per route.
pub(crate) fn refuse_routes(h: &RawHost, base: &str, kind: &str, e: &mut Errors<'_>) {
    for (j, r) in h.route.iter().enumerate() {
        e.push(
            "host.route.unexpected",
            format!("{base}.route[{j}]"),
            r.span(),
            format!("only a proxy host has routes; this host has kind = \"{kind}\""),
        );
    }
}

/// The span of the first header name; `None` for no or an empty table.
fn headers_span(headers: Option<&HeaderList>) -> Option<Range<usize>> {
    headers.and_then(|HeaderList(list)| list.first().map(|(name, _)| name.span()))
}

fn check_route(
    r: &Spanned<RawRoute>,
    base: &str,
    upstreams: &HashMap<String, UpstreamId>,
    first_at: &mut HashMap<(bool, String), String>,
    e: &mut Errors<'_>,
) -> CheckedRoute {
    let span = r.span();
    let r = r.get_ref();
    let exact = choice(
        e,
        &r.matching,
        &format!("{base}.match"),
        "route.match.invalid",
        &[("prefix", Some(false)), ("exact", Some(true))],
        None,
    )
    .or(r.matching.is_none().then_some(false));
    let path = check_path(r, base, span.clone(), e);
    if let (Some(p), Some(exact)) = (&path, exact) {
        // A prefix matches the same with or without its trailing '/'.
        let key = if exact || p.get_ref() == "/" {
            p.get_ref().clone()
        } else {
            p.get_ref().trim_end_matches('/').to_string()
        };
        match first_at.get(&(exact, key.clone())) {
            Some(first) => e.push(
                "route.path.duplicate",
                format!("{base}.path"),
                p.span(),
                format!(
                    "{} {:?} is already routed by {first}",
                    if exact { "exact path" } else { "prefix" },
                    p.get_ref()
                ),
            ),
            None => {
                first_at.insert((exact, key), base.to_string());
            }
        }
    }
    let path = path.map(Spanned::into_inner).unwrap_or_default();
    let matcher = if exact == Some(true) {
        RouteMatch::Exact(path)
    } else {
        RouteMatch::Prefix(path)
    };
    let upstream = match &r.upstream {
        None => {
            e.push(
                "route.upstream.required",
                format!("{base}.upstream"),
                span,
                "a route needs the name of an [[upstream]], such as upstream = \"app\"",
            );
            0
        }
        Some(u) => match upstreams.get(u.get_ref()) {
            Some(&id) => id,
            None => {
                let mut known: Vec<&str> = upstreams.keys().map(String::as_str).collect();
                known.sort_unstable();
                let known = if known.is_empty() {
                    "the profile has no [[upstream]]".to_string()
                } else {
                    format!("known: {}", known.join(", "))
                };
                e.push(
                    "route.upstream.unknown",
                    format!("{base}.upstream"),
                    u.span(),
                    format!("no [[upstream]] is named {:?} ({known})", u.get_ref()),
                );
                0
            }
        },
    };
    let request_id = choice(
        e,
        &r.request_id,
        &format!("{base}.request_id"),
        "route.request_id.invalid",
        &[
            ("keep", RequestId::Keep),
            ("generate", RequestId::Generate),
            ("off", RequestId::Off),
        ],
        RequestId::Keep,
    );
    CheckedRoute {
        matcher,
        upstream,
        limits: check_route_limits(&r.limits, &format!("{base}.limits"), e),
        websocket: r.websocket.as_ref().is_some_and(|w| *w.get_ref()),
        request_id,
    }
}

/// The route's path when present and canonical.
fn check_path(
    r: &RawRoute,
    base: &str,
    span: Range<usize>,
    e: &mut Errors<'_>,
) -> Option<Spanned<String>> {
    let path = format!("{base}.path");
    let Some(p) = &r.path else {
        e.push(
            "route.path.required",
            path,
            span,
            "a route needs a path, such as path = \"/\" (every request) or path = \"/api\"",
        );
        return None;
    };
    let v = p.get_ref();
    match canonical_path(v) {
        Err(why) => {
            e.push("route.path.invalid", path, p.span(), format!("{v:?} {why}"));
            None
        }
        Ok(c) if c != *v => {
            e.push(
                "route.path.notCanonical",
                path,
                p.span(),
                format!(
                    "{v:?} is not canonical: requests are matched on their canonical path, \
                     so write it as {c:?}"
                ),
            );
            None
        }
        Ok(_) => Some(p.clone()),
    }
}

/// A route's limits: `max_body_bytes` only.
fn check_route_limits(l: &RawLimits, prefix: &str, e: &mut Errors<'_>) -> LimitsLayer {
    for (field, code, at) in [
        (
            "max_header_count",
            "limits.route.max_header_count.unexpected",
            l.max_header_count.as_ref().map(|v| v.span()),
        ),
        (
            "max_header_bytes",
            "limits.route.max_header_bytes.unexpected",
            l.max_header_bytes.as_ref().map(|v| v.span()),
        ),
        (
            "max_url_bytes",
            "limits.route.max_url_bytes.unexpected",
            l.max_url_bytes.as_ref().map(|v| v.span()),
        ),
    ] {
        if let Some(at) = at {
            e.push(
                code,
                format!("{prefix}.{field}"),
                at,
                format!(
                    "a route sets only max_body_bytes: the request head is read before the \
                     route is known; set {field} on the host or in [defaults.limits]"
                ),
            );
        }
    }
    LimitsLayer {
        max_body_bytes: check_body_limit(&l.max_body_bytes, &format!("{prefix}.max_body_bytes"), e),
        ..LimitsLayer::default()
    }
}

/// The canonical spelling of a route path, or why it has none.
///
/// The path must start with `/` and be printable ASCII without spaces, with
/// no `?` or `#`. Then: `%XX` escapes are decoded (an escape must decode to
/// printable ASCII other than space, `%`, `?` and `#`), `\` becomes `/`,
/// letters are lowercased, `;parameters` are cut from every segment,
/// trailing dots are cut from every segment other than `.` and `..`, empty
/// segments (repeated `/`) and `.` segments are dropped and `..` removes the
/// segment before it (never above the root). A trailing `/` is kept when the
/// last segment was empty, `.` or `..`. O(len), allocates the result.
pub(crate) fn canonical_path(p: &str) -> Result<String, &'static str> {
    if !p.starts_with('/') {
        return Err("must start with '/'");
    }
    if !p.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces");
    }
    if p.contains(['?', '#']) {
        return Err("has a query or a fragment: routes match the path only");
    }
    let bytes = p.as_bytes();
    let mut decoded = String::with_capacity(p.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            decoded.push(char::from(b));
            i += 1;
            continue;
        }
        let hex = |k: usize| bytes.get(k).and_then(|&h| char::from(h).to_digit(16));
        let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
            return Err("has a '%' that is not followed by two hex digits");
        };
        let c = u8::try_from(hi * 16 + lo).map_or('\0', char::from);
        if !c.is_ascii_graphic() || matches!(c, '%' | '?' | '#') {
            return Err(
                "has an escape of a byte a route path cannot hold (a space, '%', '?', '#', \
                 a control or a non-ASCII byte)",
            );
        }
        decoded.push(c);
        i += 3;
    }
    let decoded = decoded.replace('\\', "/").to_ascii_lowercase();
    let mut segments: Vec<&str> = Vec::new();
    let mut trailing = false;
    for raw in decoded.split('/').skip(1) {
        let seg = raw.split(';').next().unwrap_or("");
        let seg = if seg == "." || seg == ".." {
            seg
        } else {
            seg.trim_end_matches('.')
        };
        trailing = matches!(seg, "" | "." | "..");
        match seg {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(decoded.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() || trailing {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_paths_are_their_own_spelling() {
        for p in [
            "/",
            "/api",
            "/api/",
            "/api/v2/users",
            "/a-b_c~d.e/f",
            "/.well-known/x",
        ] {
            assert_eq!(canonical_path(p).as_deref(), Ok(p), "{p:?}");
        }
    }

    #[test]
    fn redundant_spellings_have_one_canonical_form() {
        for (p, c) in [
            ("/API", "/api"),
            ("/a//b", "/a/b"),
            ("//a", "/a"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/../a", "/a"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/a\\b", "/a/b"),
            ("/a%2Fb", "/a/b"),
            ("/a%5cb", "/a/b"),
            ("/%41pi", "/api"),
            ("/a;jsessionid=1/b", "/a/b"),
            ("/a/;x", "/a/"),
            ("/admin.", "/admin"),
            ("/admin../x", "/admin/x"),
            ("/a/...", "/a/"),
            ("/a/%2e%2e/b", "/b"),
        ] {
            assert_eq!(canonical_path(p).as_deref(), Ok(c), "{p:?}");
        }
    }

    #[test]
    fn paths_without_a_canonical_form_are_refused() {
        for p in [
            "", "api", "/a b", "/é", "/a?b", "/a#b", "/a%", "/a%2", "/a%zz", "/a%20b", "/a%25",
            "/a%3f", "/a%00", "/a%ff", "/a\tb",
        ] {
            assert!(canonical_path(p).is_err(), "{p:?}");
        }
    }
}
