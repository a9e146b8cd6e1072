//! Semantic checks of `[[host]]` entries.
//!
//! Names go straight into the gate's [`HostTable`] so that what the profile
//! accepts is exactly what the gate can match; its refusals become
//! `host.name.invalid` and `host.name.duplicate`. Everything written into a
//! response (status, headers, body, redirect target) is checked here so the
//! precomputed bytes are always well-formed HTTP. Proxy hosts and their
//! routes are checked in `route`.

use crate::error::{key_path, Errors};
use crate::gatekeys::{check_host_refs, HostRefs, Known};
use crate::layer::LimitsLayer;
use crate::limits::check_limits;
use crate::route::{check_proxy, refuse_routes, CheckedRoute};
use crate::schema::{HeaderList, RawHost};
use crate::values::choice;
use gapura_gate::host::{valid_name, HostNameError, KeepTarget};
use gapura_gate::policy::RequestPolicy;
use gapura_gate::token::is_token;
use gapura_gate::upstream::UpstreamId;
use gapura_gate::{HostId, HostTable};
use std::collections::HashMap;
use std::ops::Range;
use toml::Spanned;

/// Largest `body` of a respond host: 1 MiB.
pub(crate) const MAX_RESPOND_BODY_BYTES: usize = 1 << 20;

/// Default `content_type` of a respond host.
pub(crate) const DEFAULT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// Response headers a profile may not set: the server frames and dates
/// every response itself.
const RESERVED_HEADERS: [&str; 6] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "date",
    "keep-alive",
    "upgrade",
];

/// Statuses a redirect host may answer with.
const REDIRECT_STATUSES: [u16; 5] = [301, 302, 303, 307, 308];

/// A host that passed its checks.
pub(crate) struct CheckedHost {
    /// The first name, for logs.
    pub label: String,
    pub limits: LimitsLayer,
    pub action: CheckedAction,
    /// `rate_limit` and `class`, checked.
    pub refs: HostRefs,
    /// Resolved over the layers by `policy::resolve_policies`.
    pub policy: RequestPolicy,
}

pub(crate) enum CheckedAction {
    Respond {
        status: u16,
        content_type: String,
        headers: Vec<(String, String)>,
        body: String,
    },
    Redirect {
        status: u16,
        target: String,
        keep: KeepTarget,
        headers: Vec<(String, String)>,
    },
    Proxy {
        routes: Vec<CheckedRoute>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Respond,
    Redirect,
    Proxy,
}

/// Checks every host and builds the host table. Returns one entry per host,
/// in order, even for hosts with errors (their entries are placeholders).
/// `upstreams` maps each upstream name to its id, for routes; `known` holds
/// the rate limits and operations hosts and routes may name.
pub(crate) fn check_hosts(
    hosts: &[Spanned<RawHost>],
    upstreams: &HashMap<String, UpstreamId>,
    known: &Known<'_>,
    e: &mut Errors<'_>,
) -> (HostTable, Vec<CheckedHost>) {
    let mut table = HostTable::default();
    let mut names_at: HashMap<String, String> = HashMap::new();
    let mut default_at: Option<String> = None;
    let mut entries = Vec::with_capacity(hosts.len());
    for (i, host) in hosts.iter().enumerate() {
        let base = format!("host[{i}]");
        let id = HostId::try_from(i).unwrap_or(HostId::MAX);
        let span = host.span();
        let h = host.get_ref();
        let label = check_names(h, &base, span.clone(), id, &mut table, &mut names_at, e);
        if let Some(d) = h.default.as_ref().filter(|d| *d.get_ref()) {
            let path = format!("{base}.default");
            match &default_at {
                Some(first) => e.push(
                    "host.default.duplicate",
                    path,
                    d.span(),
                    format!("{first} is already the default host; only one host may be"),
                ),
                None => {
                    table.set_default(id);
                    default_at = Some(base.clone());
                }
            }
        }
        let kind = match &h.kind {
            None => Some(Kind::Respond),
            Some(_) => choice(
                e,
                &h.kind,
                &format!("{base}.kind"),
                "host.kind.invalid",
                &[
                    ("respond", Some(Kind::Respond)),
                    ("redirect", Some(Kind::Redirect)),
                    ("proxy", Some(Kind::Proxy)),
                ],
                None,
            ),
        };
        let headers = match kind {
            Some(Kind::Proxy) => Vec::new(),
            _ => check_headers(h.headers.as_ref(), &base, kind, e),
        };
        match kind {
            Some(Kind::Respond) => refuse_routes(h, &base, "respond", e),
            Some(Kind::Redirect) => refuse_routes(h, &base, "redirect", e),
            Some(Kind::Proxy) | None => {}
        }
        let action = match kind {
            Some(Kind::Proxy) => CheckedAction::Proxy {
                routes: check_proxy(h, &base, span, upstreams, known, e),
            },
            Some(Kind::Redirect) => check_redirect(h, &base, span, headers, e),
            Some(Kind::Respond) => check_respond(h, &base, headers, e),
            None => CheckedAction::Respond {
                status: 200,
                content_type: String::new(),
                headers,
                body: String::new(),
            },
        };
        let limits = check_limits(&h.limits, &format!("{base}.limits"), e);
        let refs = check_host_refs(h, &base, known, e);
        entries.push(CheckedHost {
            label,
            limits,
            action,
            refs,
            policy: RequestPolicy::default(),
        });
    }
    (table, entries)
}

/// Adds a host's names to the table; returns its label (the first name).
fn check_names(
    h: &RawHost,
    base: &str,
    span: Range<usize>,
    id: HostId,
    table: &mut HostTable,
    names_at: &mut HashMap<String, String>,
    e: &mut Errors<'_>,
) -> String {
    let path = format!("{base}.names");
    let list = match &h.names {
        Some(list) if !list.get_ref().is_empty() => list,
        other => {
            let at = other.as_ref().map_or(span, |l| l.span());
            e.push(
                "host.names.required",
                path,
                at,
                "a host needs at least one name, such as names = [\"example.com\"]",
            );
            return String::new();
        }
    };
    for (j, name) in list.get_ref().iter().enumerate() {
        let path = format!("{path}[{j}]");
        let n = name.get_ref();
        let key = n.to_ascii_lowercase();
        let key = key.strip_suffix('.').unwrap_or(&key).to_string();
        match table.insert(n, id) {
            Ok(()) => {
                names_at.insert(key, path);
            }
            Err(HostNameError::Invalid) => e.push(
                "host.name.invalid",
                path,
                name.span(),
                format!(
                    "{n:?} is not a host name: use dot-separated labels of letters, digits, \
                     '-' and '_' (at most 63 bytes each, 253 in all), \"*.\" before a suffix \
                     for its subdomains, or an [IPv6] literal"
                ),
            ),
            Err(HostNameError::Duplicate) => {
                let first = names_at
                    .get(&key)
                    .map_or(String::new(), |p| format!(" at {p}"));
                e.push(
                    "host.name.duplicate",
                    path,
                    name.span(),
                    format!("{n:?} is already listed{first}"),
                );
            }
        }
    }
    list.get_ref()[0].get_ref().clone()
}

fn check_respond(
    h: &RawHost,
    base: &str,
    headers: Vec<(String, String)>,
    e: &mut Errors<'_>,
) -> CheckedAction {
    for (field, code, v) in [
        ("target", "host.target.unexpected", &h.target),
        ("keep", "host.keep.unexpected", &h.keep),
    ] {
        if let Some(v) = v {
            e.push(
                code,
                format!("{base}.{field}"),
                v.span(),
                format!("only a redirect host has a {field}; this host has kind = \"respond\""),
            );
        }
    }
    let status = match &h.status {
        None => 200,
        Some(v) => match u16::try_from(*v.get_ref()) {
            Ok(s @ 200..=599) => s,
            _ => {
                e.push(
                    "host.status.invalid",
                    format!("{base}.status"),
                    v.span(),
                    format!(
                        "a respond host's status must be between 200 and 599, got {}",
                        v.get_ref()
                    ),
                );
                200
            }
        },
    };
    let body = match &h.body {
        None => String::new(),
        Some(b) => {
            let path = format!("{base}.body");
            if b.get_ref().len() > MAX_RESPOND_BODY_BYTES {
                e.push(
                    "host.body.too_large",
                    path,
                    b.span(),
                    format!(
                        "is {} bytes; a respond body may be at most 1 MiB ({MAX_RESPOND_BODY_BYTES} bytes)",
                        b.get_ref().len()
                    ),
                );
            } else if !b.get_ref().is_empty() && (status == 204 || status == 304) {
                e.push(
                    "host.body.unexpected",
                    path,
                    b.span(),
                    format!("a {status} answer carries no body"),
                );
            }
            b.get_ref().clone()
        }
    };
    let content_type = match &h.content_type {
        None => DEFAULT_CONTENT_TYPE.to_string(),
        Some(ct) => {
            let v = ct.get_ref();
            if v.trim().is_empty() || !valid_header_value(v) {
                e.push(
                    "host.content_type.invalid",
                    format!("{base}.content_type"),
                    ct.span(),
                    format!("{v:?} is not a media type: use printable ASCII such as \"text/html; charset=utf-8\""),
                );
            }
            v.clone()
        }
    };
    CheckedAction::Respond {
        status,
        content_type,
        headers,
        body,
    }
}

fn check_redirect(
    h: &RawHost,
    base: &str,
    span: Range<usize>,
    headers: Vec<(String, String)>,
    e: &mut Errors<'_>,
) -> CheckedAction {
    for (field, code, v) in [
        ("body", "host.body.unexpected", &h.body),
        (
            "content_type",
            "host.content_type.unexpected",
            &h.content_type,
        ),
    ] {
        if let Some(v) = v {
            e.push(
                code,
                format!("{base}.{field}"),
                v.span(),
                format!("a redirect host has no {field}; this host has kind = \"redirect\""),
            );
        }
    }
    let status = match &h.status {
        None => 302,
        Some(v) => match u16::try_from(*v.get_ref()) {
            Ok(s) if REDIRECT_STATUSES.contains(&s) => s,
            _ => {
                e.push(
                    "host.status.invalid",
                    format!("{base}.status"),
                    v.span(),
                    format!(
                        "a redirect host's status must be 301, 302, 303, 307 or 308, got {}",
                        v.get_ref()
                    ),
                );
                302
            }
        },
    };
    let keep = choice(
        e,
        &h.keep,
        &format!("{base}.keep"),
        "host.keep.invalid",
        &[
            ("path_and_query", KeepTarget::PathAndQuery),
            ("path", KeepTarget::Path),
            ("nothing", KeepTarget::Nothing),
        ],
        KeepTarget::PathAndQuery,
    );
    let path = format!("{base}.target");
    let target = match &h.target {
        None => {
            e.push(
                "host.target.required",
                path,
                span,
                "a redirect host needs a target, such as target = \"https://example.com\"",
            );
            String::new()
        }
        Some(t) => {
            if let Err(why) = check_target(t.get_ref(), keep) {
                e.push(
                    "host.target.invalid",
                    path,
                    t.span(),
                    format!("{:?} {why}", t.get_ref()),
                );
            }
            t.get_ref().clone()
        }
    };
    CheckedAction::Redirect {
        status,
        target,
        keep,
        headers,
    }
}

/// Checks a redirect target: an absolute `http`/`https` URL with a valid
/// host, or a path starting with one `/`.
fn check_target(t: &str, keep: KeepTarget) -> Result<(), &'static str> {
    if t.is_empty() {
        return Err("is empty");
    }
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces (percent-encode anything else)");
    }
    if keep != KeepTarget::Nothing && t.contains(['?', '#']) {
        return Err(
            "has a query or fragment: the request's path would be appended after it; \
                    use keep = \"nothing\" or drop them",
        );
    }
    let rest = t
        .strip_prefix("https://")
        .or_else(|| t.strip_prefix("http://"));
    let Some(rest) = rest else {
        if t.starts_with("//") {
            return Err("starts with \"//\", which names a host: write an absolute URL");
        }
        if t.starts_with('/') {
            return Ok(());
        }
        return Err("must be an absolute URL starting with \"http://\" or \"https://\", or a path starting with '/'");
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains('@') {
        return Err("must not carry user information ('@')");
    }
    let (host, port) = match authority.rfind(':') {
        Some(c) if !authority[c..].contains(']') => (&authority[..c], Some(&authority[c + 1..])),
        _ => (authority, None),
    };
    if let Some(p) = port {
        if !p.bytes().all(|b| b.is_ascii_digit()) || !matches!(p.parse::<u16>(), Ok(1..)) {
            return Err("has an invalid port");
        }
    }
    if !valid_name(host) {
        return Err("has no valid host name after the scheme");
    }
    Ok(())
}

/// Checks the `headers` table; returns the (name, value) pairs in order.
fn check_headers(
    headers: Option<&HeaderList>,
    base: &str,
    kind: Option<Kind>,
    e: &mut Errors<'_>,
) -> Vec<(String, String)> {
    let Some(HeaderList(list)) = headers else {
        return Vec::new();
    };
    let parent = format!("{base}.headers");
    let mut out = Vec::with_capacity(list.len());
    for (name, value) in list {
        let n = name.get_ref();
        let path = key_path(&parent, n);
        let lower = n.to_ascii_lowercase();
        if !is_token(n) {
            e.push(
                "host.header.invalid",
                path,
                name.span(),
                format!("{n:?} is not a header name: use letters, digits and !#$%&'*+-.^_`|~"),
            );
        } else if RESERVED_HEADERS.contains(&lower.as_str()) {
            e.push(
                "host.header.reserved",
                path,
                name.span(),
                format!("{n} is set by the server and cannot be set here"),
            );
        } else if lower == "content-type" && kind == Some(Kind::Respond) {
            e.push(
                "host.header.reserved",
                path,
                name.span(),
                "set the Content-Type of a respond host with content_type",
            );
        } else if lower == "location" && kind == Some(Kind::Redirect) {
            e.push(
                "host.header.reserved",
                path,
                name.span(),
                "set the Location of a redirect host with target",
            );
        } else if !valid_header_value(value.get_ref()) {
            e.push(
                "host.header.invalid",
                path,
                value.span(),
                "a header value must be printable ASCII, spaces or tabs (no CR, LF or other control characters)",
            );
        }
        out.push((n.clone(), value.get_ref().clone()));
    }
    out
}

/// A header value we are willing to write: visible ASCII, space and tab.
fn valid_header_value(s: &str) -> bool {
    s.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_absolute_http_urls_or_paths() {
        let k = KeepTarget::PathAndQuery;
        assert_eq!(check_target("https://example.com", k), Ok(()));
        assert_eq!(check_target("http://example.com:8080/a", k), Ok(()));
        assert_eq!(check_target("https://[::1]:8443/", k), Ok(()));
        assert_eq!(check_target("https://10.0.0.1", k), Ok(()));
        assert_eq!(check_target("/elsewhere", k), Ok(()));
        assert_eq!(
            check_target("https://example.com/?a=1", KeepTarget::Nothing),
            Ok(())
        );
        for bad in [
            "",
            "example.com",
            "ftp://example.com",
            "//example.com",
            "https://",
            "https://user@example.com",
            "https://example.com:0",
            "https://example.com:x",
            "https://exa mple.com",
            "https://example.com/\r\nX: y",
            "https://example.com/?a=1",
            "/é",
        ] {
            assert!(check_target(bad, k).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn header_names_are_tokens_and_values_have_no_controls() {
        assert!(!is_token(""));
        assert!(!is_token("X:"));
        assert!(valid_header_value("max-age=63072000; includeSubDomains"));
        assert!(valid_header_value("a\tb"));
        assert!(!valid_header_value("a\r\nb"));
        assert!(!valid_header_value("a\u{7f}"));
        assert!(!valid_header_value("é"));
    }
}
