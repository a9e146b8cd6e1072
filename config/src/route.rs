//! Semantic checks of `proxy` hosts and their `[[host.route]]` entries.
//!
//! A route's path is compared with the request's canonical matching path
//! (the gate's [`gapura_gate::path`]), so a route must itself be written as
//! a canonical path, decoded and in lowercase: any other spelling would be a
//! route no request reaches, or one that silently means something else. The
//! checks are the gate's own ([`compile_pattern`]) plus lowercase; a refused
//! path gets the canonical spelling to write in its message. Routes carry one
//! limits layer, `max_body_bytes`, laid over the host's resolved limits when
//! the profile is compiled.

use crate::error::Errors;
use crate::gatekeys::{check_route_refs, Known, RouteRefs};
use crate::layer::LimitsLayer;
use crate::limits::check_body_limit;
use crate::rawblocks::RawLimits;
use crate::schema::{HeaderList, RawHost, RawRoute};
use crate::values::choice;
use gapura_gate::path::{canonicalize, MAX_PATH_BYTES};
use gapura_gate::pathmatch::{compile_pattern, PatternError};
use gapura_gate::policy::RequestPolicy;
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
    /// `rate_limit`, `class` and `operation`, checked.
    pub refs: RouteRefs,
    /// Resolved over the host by `policy::resolve_policies`.
    pub policy: RequestPolicy,
}

/// Checks a proxy host: refuses the fixed-answer fields and checks every
/// route. `span` is the host's, for a missing route.
pub(crate) fn check_proxy(
    h: &RawHost,
    base: &str,
    span: Range<usize>,
    upstreams: &HashMap<String, UpstreamId>,
    known: &Known<'_>,
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
        routes.push(check_route(r, &path, upstreams, known, &mut first_at, e));
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
    known: &Known<'_>,
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
        let key = p.get_ref().clone();
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
        refs: check_route_refs(r, base, known, e),
        policy: RequestPolicy::default(),
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
    let spelling = || match canonical_spelling(v) {
        Some(c) => format!("write it as {c:?}"),
        None => "no route can be written for it".to_string(),
    };
    let (code, message) = match check_pattern(v) {
        Ok(()) => return Some(p.clone()),
        Err(PathProblem::Invalid) => (
            "route.path.invalid",
            format!(
                "{v:?} is not a path: it must start with '/' and hold no '?' or control character"
            ),
        ),
        Err(PathProblem::Encoded) => (
            "route.path.encoded",
            match canonical_spelling(v) {
                Some(c) => {
                    format!("{v:?} has '%' escapes: routes are written decoded; write it as {c:?}")
                }
                None => format!("{v:?} has '%' escapes: routes are written decoded, without them"),
            },
        ),
        Err(PathProblem::NotCanonical) => (
            "route.path.notCanonical",
            format!(
                "{v:?} is not canonical: requests are matched on their canonical path, so {}",
                spelling()
            ),
        ),
    };
    e.push(code, path, p.span(), message);
    None
}

/// Why a route path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathProblem {
    /// Not a path at all: empty, no leading `/`, a `?` or a control character.
    Invalid,
    /// Holds a `%`: routes are written decoded.
    Encoded,
    /// A path whose canonical spelling differs from it.
    NotCanonical,
}

/// Checks a route path the way the gate checks patterns
/// ([`compile_pattern`]), and further requires it in lowercase, so that a
/// route is written exactly as the canonical paths it is compared with.
pub(crate) fn check_pattern(p: &str) -> Result<(), PathProblem> {
    match compile_pattern(p) {
        Err(PatternError::Invalid) => Err(PathProblem::Invalid),
        Err(PatternError::Encoded) => Err(PathProblem::Encoded),
        Err(PatternError::NotCanonical) => Err(PathProblem::NotCanonical),
        Ok(_) if p.bytes().any(|b| b.is_ascii_uppercase()) => Err(PathProblem::NotCanonical),
        Ok(_) => Ok(()),
    }
}

/// The gate's canonical form of `p` when it is itself a valid route path:
/// the spelling to suggest. Allocates a 16 KiB scratch buffer.
pub(crate) fn canonical_spelling(p: &str) -> Option<String> {
    let mut scratch = vec![0u8; MAX_PATH_BYTES];
    let c = canonicalize(p.as_bytes(), &mut scratch).ok()?;
    let c = std::str::from_utf8(c).ok()?;
    (check_pattern(c) == Ok(())).then(|| c.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_lowercase_paths_are_routes() {
        for p in [
            "/",
            "/api",
            "/api/v2/users",
            "/a-b_c~d.e/f",
            "/.well-known/x",
            "/café",
            "/a b",
        ] {
            assert_eq!(check_pattern(p), Ok(()), "{p:?}");
        }
    }

    #[test]
    fn redundant_spellings_are_refused_with_their_canonical_form() {
        for (p, problem, c) in [
            ("/API", PathProblem::NotCanonical, "/api"),
            ("/api/", PathProblem::NotCanonical, "/api"),
            ("/a//b", PathProblem::NotCanonical, "/a/b"),
            ("//a", PathProblem::NotCanonical, "/a"),
            ("/a/./b", PathProblem::NotCanonical, "/a/b"),
            ("/a/../b", PathProblem::NotCanonical, "/b"),
            ("/../a", PathProblem::NotCanonical, "/a"),
            ("/a\\b", PathProblem::NotCanonical, "/a/b"),
            ("/a;jsessionid=1/b", PathProblem::NotCanonical, "/a/b"),
            ("/admin.", PathProblem::NotCanonical, "/admin"),
            ("/a/...", PathProblem::NotCanonical, "/a"),
            ("/a%2Fb", PathProblem::Encoded, "/a/b"),
            ("/%41pi", PathProblem::Encoded, "/api"),
            ("/a/%2e%2e/b", PathProblem::Encoded, "/b"),
        ] {
            assert_eq!(check_pattern(p), Err(problem), "{p:?}");
            assert_eq!(canonical_spelling(p).as_deref(), Some(c), "{p:?}");
        }
    }

    #[test]
    fn paths_without_a_writable_canonical_form_get_no_suggestion() {
        for p in ["/a%25", "/a%3f", "/a%zz", "/a%"] {
            assert_eq!(check_pattern(p), Err(PathProblem::Encoded), "{p:?}");
            assert_eq!(canonical_spelling(p), None, "{p:?}");
        }
        for p in ["", "api", "/a?b", "/a\tb", "/a\u{7f}"] {
            assert_eq!(check_pattern(p), Err(PathProblem::Invalid), "{p:?}");
        }
    }
}
