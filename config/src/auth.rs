//! `[[auth_provider]]`: forward-auth providers, checked and compiled into
//! the gate's [`AuthProvider`]; and the `auth` key of host levels and
//! routes (a provider's name, or `false`).
//!
//! A preset fills what the product documents: the endpoint's path when the
//! URL has none, the identity headers copied and the cache's scope.
//! Authelia: `/api/authz/forward-auth`, `Remote-User`, `Remote-Groups`,
//! `Remote-Name`, `Remote-Email`, request scope. authentik (the proxy
//! outpost): `/outpost.goauthentik.io/auth/traefik`, `X-authentik-*`, host
//! scope. oauth2-proxy: `/oauth2/auth`, `X-Auth-Request-User`, `-Email`,
//! `-Groups`, `-Preferred-Username`, host scope, and the sign-in page
//! `/oauth2/start` (`rd`) unless `sign_in` is written. None: the URL as written,
//! no header copied unless listed, request scope.
//!
//! An `https://` url (port 443 unless written) makes the call over TLS,
//! with the `tls` table of an upstream (`crate::upstreamtls`): verified
//! for the url's host unless `tls.server_name` names another, against
//! `tls.ca_file` or the public roots, with `tls.client_cert` when given.

use crate::env::{CertificateLoader, Resolver};
use crate::error::Errors;
use crate::names::BlockKind;
use crate::rawblocks::{RawAuthCache, RawAuthProvider, RawSignIn};
use crate::schema::RawUpstreamTls;
use crate::upstreamtls::check_upstream_tls;
use crate::values::{choice, int_in, Opt, StrList};
use gapura_gate::auth::{AuthProvider, HeaderMatch, Scope, STANDARD_HEADERS};
use gapura_gate::upstream::{UpstreamRoots, UpstreamTls};
use std::collections::HashMap;
use std::sync::Arc;
use toml::Spanned;

const AUTH_PROVIDER: BlockKind = BlockKind {
    key: "auth_provider",
    noun: "auth provider",
    codes: [
        "authProvider.name.required",
        "authProvider.name.invalid",
        "authProvider.name.duplicate",
    ],
    required: "an auth provider needs a name, such as name = \"sso\"",
};

/// The checked providers: the compiled ones in profile order, and name →
/// index among them.
#[derive(Default)]
pub(crate) struct AuthProviders {
    pub compiled: Vec<AuthProvider>,
    pub ids: HashMap<String, u32>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Preset {
    None,
    Authelia,
    Authentik,
    OAuth2Proxy,
}

impl Preset {
    /// The sign-in page a browser the provider refuses is sent to, where
    /// the product has one on the protected host: oauth2-proxy's
    /// `/oauth2/start?rd=` (its `/oauth2/` paths routed to it).
    fn sign_in(self) -> Option<gapura_gate::auth::SignIn> {
        (self == Preset::OAuth2Proxy).then(|| gapura_gate::auth::SignIn {
            url: "/oauth2/start".to_string(),
            return_parameter: "rd".to_string(),
        })
    }

    fn path(self) -> &'static str {
        match self {
            Preset::None => "/",
            Preset::Authelia => "/api/authz/forward-auth",
            Preset::Authentik => "/outpost.goauthentik.io/auth/traefik",
            Preset::OAuth2Proxy => "/oauth2/auth",
        }
    }

    fn copy(self) -> &'static [&'static str] {
        match self {
            Preset::None => &[],
            Preset::Authelia => &[
                "Remote-User",
                "Remote-Groups",
                "Remote-Name",
                "Remote-Email",
            ],
            Preset::Authentik => &["X-authentik-*"],
            Preset::OAuth2Proxy => &[
                "X-Auth-Request-User",
                "X-Auth-Request-Email",
                "X-Auth-Request-Groups",
                "X-Auth-Request-Preferred-Username",
            ],
        }
    }

    fn scope(self) -> Scope {
        match self {
            Preset::Authentik | Preset::OAuth2Proxy => Scope::Host,
            _ => Scope::Request,
        }
    }
}

/// Checks every provider.
pub(crate) fn check_auth_providers(
    raw: &[Spanned<RawAuthProvider>],
    resolver: &dyn Resolver,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> AuthProviders {
    let mut out = AuthProviders::default();
    let mut first: HashMap<String, usize> = HashMap::new();
    for (i, r) in raw.iter().enumerate() {
        let base = format!("auth_provider[{i}]");
        let name = AUTH_PROVIDER.check(
            &r.get_ref().name,
            &base,
            r.span(),
            |n| first.get(n).copied(),
            e,
        );
        if let Some(n) = name {
            first.insert(n.get_ref().clone(), i);
        }
        let p = check_provider(r, &base, resolver, loader, e);
        if let (Some(n), Some(mut p)) = (name, p) {
            p.name = n.get_ref().clone();
            out.ids.insert(p.name.clone(), out.compiled.len() as u32);
            out.compiled.push(p);
        }
    }
    out
}

fn check_provider(
    r: &Spanned<RawAuthProvider>,
    base: &str,
    resolver: &dyn Resolver,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Option<AuthProvider> {
    let p = r.get_ref();
    let preset = choice(
        e,
        &p.preset,
        &format!("{base}.preset"),
        "authProvider.preset.invalid",
        &[
            ("none", Preset::None),
            ("authelia", Preset::Authelia),
            ("authentik", Preset::Authentik),
            ("oauth2-proxy", Preset::OAuth2Proxy),
        ],
        Preset::None,
    );
    let endpoint = check_url(&p.url, base, r.span(), preset, resolver, e);
    let tls = endpoint
        .as_ref()
        .map(|u| check_tls(p.tls.as_ref(), u, base, loader, e));
    let copy = match &p.copy_headers {
        Some(list) => check_headers(list, &format!("{base}.copy_headers"), true, e),
        None => Some(
            preset
                .copy()
                .iter()
                .map(|s| HeaderMatch::parse(s))
                .collect(),
        ),
    };
    let extra = match &p.request_headers {
        Some(list) => check_headers(list, &format!("{base}.request_headers"), false, e),
        None => Some(Vec::new()),
    };
    let CacheSettings {
        ttl_ms,
        negative_ttl_ms,
        entries,
        scope,
    } = check_cache(p.cache.as_ref(), base, preset, e);
    let timeout_ms = int_in(
        e,
        &p.timeout_ms,
        &format!("{base}.timeout_ms"),
        "authProvider.timeout_ms.range",
        (1, 30_000),
    )
    .unwrap_or(5000);
    let (endpoint, copy, extra, tls) = (endpoint?, copy?, extra?, tls?);
    let Endpoint {
        addr,
        authority,
        path,
        ..
    } = endpoint;
    let tls = tls.ok()?;
    let mut send: Vec<Box<str>> = STANDARD_HEADERS.iter().map(|s| (*s).into()).collect();
    for h in extra {
        let name = String::from_utf8_lossy(&h.name).into_owned();
        if !send.iter().any(|s| **s == *name) {
            send.push(name.into());
        }
    }
    let mut p = AuthProvider {
        name: String::new(),
        addr,
        authority,
        path,
        send,
        copy,
        scope,
        ttl_ms: ttl_ms as u64,
        negative_ttl_ms: negative_ttl_ms as u64,
        entries: (entries as u32).next_power_of_two(),
        timeout_ms: timeout_ms as u64,
        sign_in: check_sign_in(p.sign_in.as_ref(), base, e)?.or_else(|| preset.sign_in()),
        tls,
        identity: 0,
    };
    p.identity = identity(&p);
    Some(p)
}

/// A provider's configuration identity: its settings (a reload that keeps
/// them keeps its idle connections and calls).
fn identity(p: &AuthProvider) -> u64 {
    let mut h = gapura_gate::hash::Fnv1a::new();
    h.write(format!("{:?}", p).as_bytes());
    // The client certificate's bytes, which its debug form leaves out: a
    // new one is a new provider (its idle connections are not used).
    if let Some(c) = p.tls.as_ref().and_then(|t| t.client.as_ref()) {
        for der in c.chain.iter().chain(std::iter::once(&c.key)) {
            h.write(der);
        }
    }
    h.finish()
}

/// A provider's `cache` table, checked (defaults where it says nothing).
struct CacheSettings {
    ttl_ms: i64,
    negative_ttl_ms: i64,
    entries: i64,
    scope: Scope,
}

fn check_cache(
    cache: Option<&RawAuthCache>,
    base: &str,
    preset: Preset,
    e: &mut Errors<'_>,
) -> CacheSettings {
    let none = Opt::None;
    let field = |f: fn(&RawAuthCache) -> &Opt<i64>| cache.map_or(&none, f);
    let ttl_ms = int_in(
        e,
        field(|c| &c.ttl_ms),
        &format!("{base}.cache.ttl_ms"),
        "authProvider.cache.ttl_ms.range",
        (0, 300_000),
    )
    .unwrap_or(10_000);
    let negative_ttl_ms = int_in(
        e,
        field(|c| &c.negative_ttl_ms),
        &format!("{base}.cache.negative_ttl_ms"),
        "authProvider.cache.negative_ttl_ms.range",
        (0, 300_000),
    )
    .unwrap_or(0);
    let entries = int_in(
        e,
        field(|c| &c.entries),
        &format!("{base}.cache.entries"),
        "authProvider.cache.entries.range",
        (16, 65_536),
    )
    .unwrap_or(4096);
    let no_scope = Opt::None;
    let scope = choice(
        e,
        cache.map_or(&no_scope, |c| &c.scope),
        &format!("{base}.cache.scope"),
        "authProvider.cache.scope.invalid",
        &[
            ("request", Some(Scope::Request)),
            ("host", Some(Scope::Host)),
        ],
        None,
    )
    .unwrap_or(preset.scope());
    CacheSettings {
        ttl_ms,
        negative_ttl_ms,
        entries,
        scope,
    }
}

/// A checked `url`.
struct Endpoint {
    addr: std::net::SocketAddr,
    /// As written: the call's `Host`.
    authority: String,
    /// Path and query (the preset's path when the url has none).
    path: String,
    /// The host without brackets or port, lower case.
    host: String,
    https: bool,
}

/// `tls` beside an `https://` url (absent: `tls = true`); on an
/// `http://` one, none. `Err` when it is refused (pushed).
fn check_tls(
    raw: Option<&Spanned<RawUpstreamTls>>,
    url: &Endpoint,
    base: &str,
    loader: &dyn CertificateLoader,
    e: &mut Errors<'_>,
) -> Result<Option<Arc<UpstreamTls>>, ()> {
    let off = matches!(raw.map(Spanned::get_ref), Some(RawUpstreamTls::Flag(false)));
    match raw {
        Some(r) if !url.https || off => {
            let why = if url.https {
                "an https:// url is always TLS: leave tls out, or write http:// for plaintext"
            } else {
                "tls needs an https:// url: this one is plaintext http://"
            };
            e.push(
                "authProvider.tls.scheme",
                format!("{base}.tls"),
                r.span(),
                why,
            );
            return Err(());
        }
        _ if !url.https => return Ok(None),
        _ => {}
    }
    let before = e.error_count();
    let tls = match raw {
        Some(r) => check_upstream_tls(Some(r), base, loader, e),
        None => Some(Arc::new(UpstreamTls {
            server_name: None,
            roots: UpstreamRoots::Public,
            client: None,
            verify: true,
            label: String::new(),
        })),
    };
    match tls {
        Some(mut tls) if e.error_count() == before => {
            if tls.server_name.is_none() {
                Arc::make_mut(&mut tls).server_name = Some(url.host.clone());
            }
            Ok(Some(tls))
        }
        _ => Err(()),
    }
}

/// `url`: `http://HOST[:PORT]/PATH` or `https://...` (port 443 unless
/// written), resolved now. The preset's path when the URL has none.
fn check_url(
    url: &Opt<String>,
    base: &str,
    span: std::ops::Range<usize>,
    preset: Preset,
    resolver: &dyn Resolver,
    e: &mut Errors<'_>,
) -> Option<Endpoint> {
    let path = format!("{base}.url");
    let Some(u) = url else {
        e.push(
            "authProvider.url.required",
            path,
            span,
            "an auth provider needs its endpoint, such as url = \"http://127.0.0.1:9091\"",
        );
        return None;
    };
    let text = u.get_ref();
    let bad = |e: &mut Errors<'_>, why: &str| {
        e.push(
            "authProvider.url.invalid",
            &path,
            u.span(),
            format!("{text:?}: {why}"),
        );
    };
    if text.len() > 512 {
        bad(e, "longer than 512 characters");
        return None;
    }
    let (rest, https) = match (text.strip_prefix("http://"), text.strip_prefix("https://")) {
        (Some(rest), _) => (rest, false),
        (_, Some(rest)) => (rest, true),
        _ => {
            bad(e, "use an http:// or https:// address");
            return None;
        }
    };
    let (authority, target) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty()
        || authority.contains('@')
        || text.contains('#')
        || target.bytes().any(|b| !(0x21..0x7f).contains(&b))
    {
        bad(e, "a host, an optional port and a path; no credentials, fragment, spaces or control characters");
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse::<u16>() {
            Ok(p) if p > 0 => (h, p),
            _ => {
                bad(e, "the port must be 1 to 65535");
                return None;
            }
        },
        _ => (authority, if https { 443 } else { 80 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if https && host.parse::<std::net::IpAddr>().is_err() && !gapura_gate::host::valid_name(host) {
        bad(
            e,
            "an https:// url's host must be a DNS name or an IP address (its certificate names it)",
        );
        return None;
    }
    let addr = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => std::net::SocketAddr::new(ip, port),
        Err(_) => match resolver.resolve(host, port) {
            Ok(addrs) if !addrs.is_empty() => addrs[0],
            Ok(_) => {
                e.push(
                    "authProvider.url.unresolved",
                    &path,
                    u.span(),
                    format!("{host:?} has no addresses"),
                );
                return None;
            }
            Err(why) => {
                e.push(
                    "authProvider.url.unresolved",
                    &path,
                    u.span(),
                    format!("{host:?} does not resolve: {why}"),
                );
                return None;
            }
        },
    };
    let target = if target.is_empty() || target == "/" {
        preset.path().to_string()
    } else {
        target.to_string()
    };
    Some(Endpoint {
        addr,
        authority: authority.to_string(),
        path: target,
        host: host.to_ascii_lowercase(),
        https,
    })
}

/// Names the proxy owns: never sent by, or copied from, a provider.
const OWNED: [&str; 13] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "forwarded",
    "x-real-ip",
    "x-request-id",
    "proxy-connection",
    "expect",
];
const CREDENTIALS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

fn check_headers(
    list: &StrList,
    path: &str,
    copy: bool,
    e: &mut Errors<'_>,
) -> Option<Vec<HeaderMatch>> {
    let items = list.get_ref();
    if items.len() > 32 {
        e.push(
            "authProvider.headers.tooMany",
            path,
            list.span(),
            format!("{} headers: at most 32", items.len()),
        );
        return None;
    }
    let mut out: Vec<HeaderMatch> = Vec::new();
    let mut ok = true;
    for (j, item) in items.iter().enumerate() {
        let at = format!("{path}[{j}]");
        let raw = item.get_ref().trim();
        let (name, prefix) = match raw.strip_suffix('*') {
            Some(p) => (p, true),
            None => (raw, false),
        };
        let token = gapura_gate::token::is_token(name);
        let lower = name.to_ascii_lowercase().replace('_', "-");
        let owned = OWNED.contains(&lower.as_str()) || lower.starts_with("x-forwarded-");
        if !token || owned || (prefix && (!copy || name.len() < 3)) {
            e.push(
                "authProvider.header.invalid",
                &at,
                item.span(),
                format!("{raw:?}: a header name (a token) the proxy does not own; a prefix ending in * only in copy_headers, at least three characters"),
            );
            ok = false;
            continue;
        }
        if copy
            && CREDENTIALS.iter().any(|c| {
                if prefix {
                    c.starts_with(lower.as_str())
                } else {
                    *c == lower
                }
            })
        {
            e.push(
                "authProvider.header.credential",
                &at,
                item.span(),
                format!(
                    "{raw:?} would let a provider replace the client's credentials: not copied"
                ),
            );
            ok = false;
            continue;
        }
        let m = HeaderMatch::parse(&lower);
        if !out.contains(&m) {
            out.push(m);
        }
    }
    ok.then_some(out)
}

/// `auth` of a layer: `Some(Some(i))` a provider, `Some(None)` off.
pub(crate) fn check_auth_ref(
    v: &Opt<crate::rawblocks::RawNameRef>,
    path: &str,
    code: &'static str,
    providers: &AuthProviders,
    e: &mut Errors<'_>,
) -> Option<Option<u32>> {
    use crate::rawblocks::RawNameRef;
    let v = v.as_ref()?;
    match v.get_ref() {
        RawNameRef::Flag(false) => Some(None),
        RawNameRef::Flag(true) => {
            e.push(code, path, v.span(), "name a provider, or false for none");
            None
        }
        RawNameRef::Name(n) => match providers.ids.get(n) {
            Some(&i) => Some(Some(i)),
            None => {
                let mut known: Vec<&str> = providers.ids.keys().map(String::as_str).collect();
                known.sort_unstable();
                e.push(
                    code,
                    path,
                    v.span(),
                    format!(
                        "no [[auth_provider]] is named {n:?} (known: {})",
                        known.join(", ")
                    ),
                );
                None
            }
        },
    }
}

/// `sign_in`: `url` an `http://` or `https://` URL or a path (`/...`),
/// printable without spaces; `return_parameter` a query parameter name
/// (default `rd`). `Some(None)` when absent, `None` on an error.
fn check_sign_in(
    raw: Option<&Spanned<RawSignIn>>,
    base: &str,
    e: &mut Errors<'_>,
) -> Option<Option<gapura_gate::auth::SignIn>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    let s = raw.get_ref();
    let url = match &s.url {
        Some(u)
            if (u.get_ref().starts_with("https://")
                || u.get_ref().starts_with("http://")
                || u.get_ref().starts_with('/'))
                && !u.get_ref().starts_with("//")
                && u.get_ref().bytes().all(|b| b.is_ascii_graphic()) =>
        {
            u.get_ref().clone()
        }
        other => {
            e.push(
                "authProvider.sign_in.url.invalid",
                format!("{base}.sign_in.url"),
                other.as_ref().map_or(raw.span(), |u| u.span()),
                "the sign-in page: an https:// or http:// URL, or a path on the same host \
                 (\"/oauth2/start\"), without spaces",
            );
            return None;
        }
    };
    let return_parameter = match &s.return_parameter {
        None => "rd".to_string(),
        Some(p)
            if !p.get_ref().is_empty()
                && p.get_ref().len() <= 64
                && p.get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b)) =>
        {
            p.get_ref().clone()
        }
        Some(p) => {
            e.push(
                "authProvider.sign_in.return_parameter.invalid",
                format!("{base}.sign_in.return_parameter"),
                p.span(),
                "a query parameter name: 1 to 64 letters, digits, '-', '.', '_' or '~'",
            );
            return None;
        }
    };
    Some(Some(gapura_gate::auth::SignIn {
        url,
        return_parameter,
    }))
}
