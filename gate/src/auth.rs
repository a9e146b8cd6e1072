//! Forward-auth: a provider's endpoint asked before a request is forwarded
//! (the call itself is the server's), and what the gate keeps of its
//! answers: remembered allows in a fixed table per provider and shard.
//!
//! - [`AuthProvider`]: a compiled `[[auth_provider]]` (its endpoint, the
//!   client headers the call carries, the identity headers it copies,
//!   the cache's scope, time-to-live and size, the call's timeout).
//! - [`AuthCache`]: a fixed table of remembered allows (entries a power of
//!   two, probed four slots at a time; a writer replaces the same key, else
//!   an empty or lapsed slot, else the one that expires first). Memory is
//!   bounded and nothing is swept. Only allows are stored, each with the
//!   identity headers to add (shared, so a hit copies no bytes).
//! - The key ([`AuthState::keys`]): SipHash-1-3 (128 bits) under the
//!   shard's random secret over the length-framed fields the provider is
//!   sent: the grain, the client address, the scheme and host, every line
//!   of every header the call carries (counted, so an absent header and an
//!   empty one differ), and at request grain the method and the raw target.
//!   Two requests that differ in anything the provider sees never share an
//!   entry. A `host`-scoped provider stores an allow at host grain (no
//!   method, no target) only when it vouched for an identity (copied at
//!   least one header); a lookup probes host grain, then request grain.
//!
//! Pure: time comes in, no I/O; a lookup allocates nothing.

use crate::client::HeaderLines;
use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Calls to one provider running at once on one shard; past it, 503.
pub const MAX_CALLS: u32 = 64;
/// The largest refusal body relayed.
pub const MAX_RELAY_BODY: usize = 64 * 1024;
/// The most identity headers copied from one allow.
pub const MAX_COPIED: usize = 64;
/// The client headers every call carries, when the client sent them.
pub const STANDARD_HEADERS: [&str; 7] = [
    "cookie",
    "authorization",
    "proxy-authorization",
    "user-agent",
    "accept",
    "accept-language",
    "x-requested-with",
];

/// How an allow is remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Per method and target.
    Request,
    /// Per host, when the allow names an identity.
    Host,
}

/// A header name a provider owns: exact, or a prefix (`X-authentik-*`).
/// Compared ignoring case with `_` and `-` as one character, as CGI and
/// WSGI upstreams fold them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderMatch {
    /// Lower case, `_` written as `-`.
    pub name: Box<[u8]>,
    pub prefix: bool,
}

fn fold(b: u8) -> u8 {
    match b {
        b'_' => b'-',
        b => b.to_ascii_lowercase(),
    }
}

impl HeaderMatch {
    /// `"Remote-User"` or `"X-authentik-*"`.
    pub fn parse(s: &str) -> HeaderMatch {
        let (name, prefix) = match s.strip_suffix('*') {
            Some(p) => (p, true),
            None => (s, false),
        };
        HeaderMatch {
            name: name.bytes().map(fold).collect(),
            prefix,
        }
    }

    /// Whether header `name` is this one (or starts with this prefix).
    pub fn matches(&self, name: &[u8]) -> bool {
        let n = self.name.len();
        let eq = |a: &[u8]| a.iter().zip(self.name.iter()).all(|(x, y)| fold(*x) == *y);
        if self.prefix {
            name.len() >= n && eq(&name[..n])
        } else {
            name.len() == n && eq(name)
        }
    }
}

/// A compiled `[[auth_provider]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthProvider {
    pub name: String,
    /// The endpoint's address (resolved when the profile was compiled).
    pub addr: SocketAddr,
    /// Its `Host` header.
    pub authority: String,
    /// Path and query of the endpoint.
    pub path: String,
    /// Lower-case names of the client headers the call carries.
    pub send: Vec<Box<str>>,
    /// The identity headers copied from an allow.
    pub copy: Vec<HeaderMatch>,
    pub scope: Scope,
    /// How long an allow is remembered (0: not at all).
    pub ttl_ms: u64,
    /// How long a refusal or redirect is remembered (0: never, the
    /// built-in), per method and target.
    pub negative_ttl_ms: u64,
    /// Entries of the cache (a power of two).
    pub entries: u32,
    pub timeout_ms: u64,
    /// Where a browser the provider answers 401 is sent to sign in
    /// (`sign_in`); `None`: the 401 is relayed.
    pub sign_in: Option<SignIn>,
    /// TLS to the endpoint (an `https://` url, with the `tls` table of an
    /// upstream; its `server_name` is the url's host unless written);
    /// `None`: plaintext.
    pub tls: Option<Arc<crate::upstreamtls::UpstreamTls>>,
    /// A hash of everything above but the name: the cache and the idle
    /// connections survive a reload that keeps it.
    pub identity: u64,
}

/// A provider's sign-in page: a browser's 401 becomes a 302 to `url` with
/// the original URL in the query parameter `return_parameter` (the
/// oauth2-proxy `/oauth2/start?rd=` flow).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignIn {
    /// `https://...`, `http://...` or a path on the same host (`/...`).
    pub url: String,
    pub return_parameter: String,
}

impl SignIn {
    /// Whether a request for `host` and `target` is the sign-in page
    /// itself (never redirected to it: no loop). O(len).
    pub fn is_sign_in_page(&self, host: &[u8], target: &[u8]) -> bool {
        let (url_host, url_path) = match self
            .url
            .strip_prefix("https://")
            .or_else(|| self.url.strip_prefix("http://"))
        {
            Some(rest) => {
                let end = rest.find(['/', '?']).unwrap_or(rest.len());
                (Some(&rest[..end]), &rest[end..])
            }
            None => (None, self.url.as_str()),
        };
        let path = url_path.split('?').next().unwrap_or("");
        let path = if path.is_empty() { "/" } else { path };
        let same_host = url_host.is_none_or(|h| h.as_bytes().eq_ignore_ascii_case(host));
        same_host && target.starts_with(path.as_bytes())
    }

    /// Writes the redirect's `Location` value for the original request
    /// (`scheme://host target`) into `out`. O(len), allocates only if
    /// `out` must grow.
    pub fn write_location(&self, https: bool, host: &[u8], target: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(self.url.as_bytes());
        out.push(if self.url.contains('?') { b'&' } else { b'?' });
        out.extend_from_slice(self.return_parameter.as_bytes());
        out.push(b'=');
        let scheme: &[u8] = if https { b"https://" } else { b"http://" };
        for &b in scheme.iter().chain(host).chain(target) {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                out.push(b);
            } else {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
        }
    }
}

/// What a provider's answer left in the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remembered {
    /// An allow: the `Name: value\r\n` lines to add upstream (`None`: no
    /// header copied).
    Allow(Option<Arc<[u8]>>),
    /// A refusal or redirect answered again (`cache.negative_ttl_ms`).
    Refusal(Relay),
}

/// A relayed answer kept whole: its head (without Date and the connection
/// line) in both forms, then its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    pub status: u16,
    pub head: Arc<crate::sink::Lines>,
    pub body: Arc<[u8]>,
}

impl Relay {
    /// The answer `status` with `lines` (`Cache-Control: no-store` and its
    /// `Content-Length` added) and `body`. Allocates.
    pub fn new(status: u16, lines: &[(&[u8], &[u8])], body: &[u8]) -> Relay {
        let length = body.len().to_string();
        let mut all = lines.to_vec();
        all.push((b"Cache-Control", b"no-store"));
        all.push((b"Content-Length", length.as_bytes()));
        Relay {
            status,
            head: Arc::new(crate::sink::Lines::new(Some(status), &all)),
            body: Arc::from(body),
        }
    }

    /// What it holds: its head's bytes and its body.
    pub fn size(&self) -> usize {
        self.head.h1().len() + self.body.len()
    }

    /// Writes it: its head, Date, `Connection: close`, the blank line and
    /// (unless `head_only`) its body.
    pub fn write_into<O: crate::sink::Sink>(&self, out: &mut O, date: &[u8], head_only: bool) {
        out.head(self.status, &self.head);
        out.date(date);
        out.end(true, false);
        if !head_only {
            out.body(&self.body);
        }
    }
}

/// The largest relayed answer remembered (head and body): a refusal
/// table holds at most `entries` of them.
pub const MAX_REMEMBERED_REFUSAL: usize = 4096;

/// One table slot.
#[derive(Clone, Debug)]
struct Slot {
    /// 0: empty.
    key: u128,
    expires_ms: u64,
    what: Remembered,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            key: 0,
            expires_ms: 0,
            what: Remembered::Allow(None),
        }
    }
}

/// A fixed table of remembered allows.
#[derive(Clone, Debug)]
pub struct AuthCache {
    slots: Box<[Slot]>,
}

const PROBE: usize = 4;

impl AuthCache {
    /// `entries` rounded up to a power of two (at least [`PROBE`]).
    /// Allocates once.
    pub fn new(entries: u32) -> AuthCache {
        let n = (entries as usize).next_power_of_two().max(PROBE);
        AuthCache {
            slots: vec![Slot::default(); n].into_boxed_slice(),
        }
    }

    fn start(&self, key: u128) -> usize {
        (key as usize) & (self.slots.len() - 1)
    }

    /// What is remembered under `key` at `now_ms`. O(4), no allocation
    /// (the bytes are shared).
    pub fn get(&self, key: u128, now_ms: u64) -> Option<&Remembered> {
        let mask = self.slots.len() - 1;
        let s = self.start(key);
        (0..PROBE)
            .map(|i| &self.slots[(s + i) & mask])
            .find(|slot| slot.key == key && key != 0 && slot.expires_ms > now_ms)
            .map(|slot| &slot.what)
    }

    /// Remembers an answer until `expires_ms`.
    pub fn insert(&mut self, key: u128, expires_ms: u64, what: Remembered, now_ms: u64) {
        let mask = self.slots.len() - 1;
        let s = self.start(key);
        let mut pick = s;
        for i in 0..PROBE {
            let at = (s + i) & mask;
            let slot = &self.slots[at];
            if slot.key == key || slot.key == 0 || slot.expires_ms <= now_ms {
                pick = at;
                break;
            }
            if slot.expires_ms < self.slots[pick].expires_ms {
                pick = at;
            }
        }
        self.slots[pick] = Slot {
            key: key.max(1),
            expires_ms,
            what,
        };
    }
}

/// One provider's counters on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthCounters {
    /// 2xx answers (the request went on).
    pub allowed: u64,
    /// 401, 403 and 407 relayed.
    pub denied: u64,
    /// Redirects relayed.
    pub redirected: u64,
    pub cache_hits: u64,
    pub calls: u64,
    /// Failed calls (502).
    pub errors: u64,
    /// Calls past the timeout (504).
    pub timeouts: u64,
    /// Refused with 503: the provider's calls were all taken.
    pub busy: u64,
    /// Refusals and failures a shadowed route let through.
    pub shadow_hits: u64,
    /// Calls abandoned because the client went away first.
    pub abandoned: u64,
}

/// The call the last `Verdict::Authenticate` needs, taken by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthJob {
    pub provider: u32,
    pub request_key: u128,
    pub host_key: Option<u128>,
}

/// What a request tells the key.
pub struct KeyFacts<'a, H: HeaderLines + ?Sized> {
    pub client: IpAddr,
    pub scheme: &'a [u8],
    pub host: &'a [u8],
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub headers: &'a H,
}

/// One shard's forward-auth state: a cache and counters per provider of
/// the adopted snapshot (caches follow the provider's configuration,
/// counters its name, across reloads).
#[derive(Debug)]
pub struct AuthState {
    caches: Vec<AuthCache>,
    identities: Vec<u64>,
    pub counters: Vec<AuthCounters>,
    names: Vec<String>,
    secret: [u8; 16],
    /// The job of the last `Verdict::Authenticate`.
    pub(crate) pending: Option<AuthJob>,
    /// The identity lines of the provider's allow a request resumes with,
    /// set by the caller for one decision (the identity step reads them).
    pub resumed: Option<std::sync::Arc<[u8]>>,
}

impl AuthState {
    pub fn new(secret: [u8; 16]) -> AuthState {
        AuthState {
            caches: Vec::new(),
            identities: Vec::new(),
            counters: Vec::new(),
            names: Vec::new(),
            secret,
            pending: None,
            resumed: None,
        }
    }

    /// Takes the snapshot's providers (allocates on a new generation).
    pub fn adopt(&mut self, providers: &[AuthProvider]) {
        let mut caches = Vec::with_capacity(providers.len());
        let mut counters = Vec::with_capacity(providers.len());
        for p in providers {
            let kept = self
                .identities
                .iter()
                .position(|&id| id == p.identity)
                .map(|i| std::mem::replace(&mut self.caches[i], AuthCache::new(1)));
            caches.push(kept.unwrap_or_else(|| AuthCache::new(p.entries)));
            let c = self
                .names
                .iter()
                .position(|n| *n == p.name)
                .map(|i| self.counters[i])
                .unwrap_or_default();
            counters.push(c);
        }
        self.caches = caches;
        self.counters = counters;
        self.identities = providers.iter().map(|p| p.identity).collect();
        self.names = providers.iter().map(|p| p.name.clone()).collect();
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The request-grain key, and the host-grain one for a `host`-scoped
    /// provider. No allocation.
    pub fn keys<H: HeaderLines + ?Sized>(
        &self,
        p: &AuthProvider,
        f: &KeyFacts<'_, H>,
    ) -> (u128, Option<u128>) {
        use siphasher::sip128::{Hasher128, SipHasher13};
        fn put(h: &mut SipHasher13, b: &[u8]) {
            h.write_usize(b.len());
            h.write(b);
        }
        // What both grains share is hashed once; each grain then finishes
        // a copy of the state with its own fields.
        let mut h = SipHasher13::new_with_key(&self.secret);
        match f.client {
            IpAddr::V4(a) => put(&mut h, &a.octets()),
            IpAddr::V6(a) => put(&mut h, &a.octets()),
        }
        put(&mut h, f.scheme);
        put(&mut h, f.host);
        for name in &p.send {
            let mut n = 0u64;
            for line in f.headers.lines(name) {
                put(&mut h, line);
                n += 1;
            }
            h.write_u64(n);
        }
        let host = (p.scope == Scope::Host).then(|| {
            let mut g = h;
            put(&mut g, b"host");
            g.finish128().as_u128().max(1)
        });
        put(&mut h, b"request");
        put(&mut h, f.method);
        put(&mut h, f.target);
        (h.finish128().as_u128().max(1), host)
    }

    /// What provider `i` answered for these keys, while remembered (host
    /// grain first). Counts a hit.
    pub fn lookup(
        &mut self,
        i: usize,
        (request, host): (u128, Option<u128>),
        now_ms: u64,
    ) -> Option<Remembered> {
        let cache = self.caches.get(i)?;
        let hit = host
            .and_then(|k| cache.get(k, now_ms))
            .or_else(|| cache.get(request, now_ms))
            .cloned();
        if hit.is_some() {
            self.counters[i].cache_hits += 1;
        }
        hit
    }

    /// Remembers an allow of provider `p` (index `i`) for `job`: at host
    /// grain when the provider is host-scoped and named an identity, else
    /// at request grain. Nothing when the time-to-live is 0.
    pub fn remember(
        &mut self,
        i: usize,
        p: &AuthProvider,
        job: &AuthJob,
        identity: Option<Arc<[u8]>>,
        now_ms: u64,
    ) {
        if p.ttl_ms == 0 {
            return;
        }
        let key = match (job.host_key, &identity) {
            (Some(h), Some(_)) => h,
            _ => job.request_key,
        };
        if let Some(cache) = self.caches.get_mut(i) {
            cache.insert(key, now_ms + p.ttl_ms, Remembered::Allow(identity), now_ms);
        }
    }

    /// Remembers a refusal or redirect of provider `p` (index `i`) for
    /// `job`, per method and target, when `negative_ttl_ms` is set and the
    /// answer is at most [`MAX_REMEMBERED_REFUSAL`] bytes.
    pub fn remember_refusal(
        &mut self,
        i: usize,
        p: &AuthProvider,
        job: &AuthJob,
        relay: Relay,
        now_ms: u64,
    ) {
        if p.negative_ttl_ms == 0 || relay.size() > MAX_REMEMBERED_REFUSAL {
            return;
        }
        if let Some(cache) = self.caches.get_mut(i) {
            cache.insert(
                job.request_key,
                now_ms + p.negative_ttl_ms,
                Remembered::Refusal(relay),
                now_ms,
            );
        }
    }

    /// Takes the job of the last `Verdict::Authenticate`.
    pub fn take_job(&mut self) -> Option<AuthJob> {
        self.pending.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(scope: Scope) -> AuthProvider {
        AuthProvider {
            name: "sso".into(),
            addr: "127.0.0.1:9091".parse().unwrap(),
            authority: "127.0.0.1:9091".into(),
            path: "/api/verify".into(),
            send: STANDARD_HEADERS.iter().map(|s| (*s).into()).collect(),
            copy: vec![HeaderMatch::parse("Remote-User")],
            scope,
            ttl_ms: 1000,
            negative_ttl_ms: 0,
            entries: 8,
            timeout_ms: 2000,
            sign_in: None,
            tls: None,
            identity: 1,
        }
    }

    fn facts<'a>(
        headers: &'a [(&'a str, &'a [u8])],
        target: &'a [u8],
    ) -> KeyFacts<'a, [(&'a str, &'a [u8])]> {
        KeyFacts {
            client: "203.0.113.1".parse().unwrap(),
            scheme: b"http",
            host: b"a.test",
            method: b"GET",
            target,
            headers,
        }
    }

    #[test]
    fn header_names_fold_case_and_underscores() {
        let exact = HeaderMatch::parse("Remote-User");
        assert!(exact.matches(b"remote-user"));
        assert!(exact.matches(b"REMOTE_USER"));
        assert!(!exact.matches(b"remote-users"));
        let prefix = HeaderMatch::parse("X-authentik-*");
        assert!(prefix.matches(b"x_authentik_username"));
        assert!(prefix.matches(b"X-Authentik-Groups"));
        assert!(!prefix.matches(b"x-auth"));
    }

    #[test]
    fn keys_differ_in_everything_the_provider_sees() {
        let s = AuthState::new([1; 16]);
        let p = provider(Scope::Request);
        let a: [(&str, &[u8]); 1] = [("cookie", b"s=1")];
        let b: [(&str, &[u8]); 1] = [("cookie", b"s=2")];
        let empty: [(&str, &[u8]); 1] = [("cookie", b"")];
        let none: [(&str, &[u8]); 0] = [];
        let other: [(&str, &[u8]); 2] = [("cookie", b"s=1"), ("x-other", b"ignored")];
        let k = |h: &[(&str, &[u8])], t: &[u8]| s.keys(&p, &facts(h, t)).0;
        assert_ne!(k(&a, b"/"), k(&b, b"/"));
        assert_ne!(k(&a, b"/"), k(&a, b"/x"));
        assert_ne!(k(&empty, b"/"), k(&none, b"/"), "absent and empty differ");
        assert_eq!(
            k(&a, b"/"),
            k(&other, b"/"),
            "headers not sent do not count"
        );
        let mut f = facts(&a, b"/");
        f.client = "203.0.113.2".parse().unwrap();
        assert_ne!(s.keys(&p, &f).0, k(&a, b"/"));
        // An allow remembered for plain HTTP is not one for HTTPS.
        let mut f = facts(&a, b"/");
        f.scheme = b"https";
        assert_ne!(s.keys(&p, &f).0, k(&a, b"/"));
        assert_eq!(s.keys(&p, &facts(&a, b"/")).1, None);
        let host = provider(Scope::Host);
        let (r1, h1) = s.keys(&host, &facts(&a, b"/one"));
        let (r2, h2) = s.keys(&host, &facts(&a, b"/two"));
        assert_ne!(r1, r2);
        assert_eq!(h1, h2, "host grain ignores the target");
    }

    #[test]
    fn only_named_allows_are_remembered_at_host_grain() {
        let mut s = AuthState::new([2; 16]);
        let p = provider(Scope::Host);
        s.adopt(std::slice::from_ref(&p));
        let a: [(&str, &[u8]); 1] = [("cookie", b"s=1")];
        let one = s.keys(&p, &facts(&a, b"/one"));
        let two = s.keys(&p, &facts(&a, b"/two"));
        // Anonymous: request grain only.
        let job = AuthJob {
            provider: 0,
            request_key: one.0,
            host_key: one.1,
        };
        s.remember(0, &p, &job, None, 0);
        assert_eq!(s.lookup(0, one, 10), Some(Remembered::Allow(None)));
        assert_eq!(s.lookup(0, two, 10), None);
        // Named: the whole host.
        let lines: Arc<[u8]> = Arc::from(&b"Remote-User: ana\r\n"[..]);
        s.remember(0, &p, &job, Some(lines.clone()), 0);
        assert_eq!(s.lookup(0, two, 10), Some(Remembered::Allow(Some(lines))));
        assert_eq!(s.lookup(0, two, 1000), None, "lapsed");
        assert_eq!(s.counters[0].cache_hits, 2);
    }

    #[test]
    fn the_table_stays_bounded_and_replaces_the_first_to_expire() {
        let mut c = AuthCache::new(4);
        for k in 1..=100u128 {
            c.insert(k << 8, 1000 + k as u64, Remembered::Allow(None), 0);
        }
        assert_eq!(c.slots.len(), 4);
        assert!(c.get(100 << 8, 0).is_some());
        assert!(c.get(1 << 8, 0).is_none());
    }

    #[test]
    fn refusals_are_remembered_only_when_asked_and_small() {
        let mut s = AuthState::new([4; 16]);
        let mut p = provider(Scope::Request);
        s.adopt(std::slice::from_ref(&p));
        let job = AuthJob {
            provider: 0,
            request_key: 99,
            host_key: None,
        };
        // A body of `n` bytes.
        let relay = |n: usize| Relay::new(401, &[], &vec![b'x'; n]);
        s.remember_refusal(0, &p, &job, relay(10), 0);
        assert_eq!(
            s.lookup(0, (99, None), 1),
            None,
            "not without negative_ttl_ms"
        );
        p.negative_ttl_ms = 50;
        s.remember_refusal(0, &p, &job, relay(MAX_REMEMBERED_REFUSAL + 1), 0);
        assert_eq!(s.lookup(0, (99, None), 1), None, "too large");
        s.remember_refusal(0, &p, &job, relay(10), 0);
        assert_eq!(
            s.lookup(0, (99, None), 1),
            Some(Remembered::Refusal(relay(10)))
        );
        assert_eq!(s.lookup(0, (99, None), 50), None, "lapsed");
    }

    #[test]
    fn a_reload_keeps_the_cache_of_an_unchanged_provider() {
        let mut s = AuthState::new([3; 16]);
        let p = provider(Scope::Request);
        s.adopt(std::slice::from_ref(&p));
        let job = AuthJob {
            provider: 0,
            request_key: 77,
            host_key: None,
        };
        s.remember(0, &p, &job, None, 0);
        s.adopt(std::slice::from_ref(&p));
        assert!(s.lookup(0, (77, None), 1).is_some());
        let mut changed = p.clone();
        changed.identity = 2;
        s.adopt(std::slice::from_ref(&changed));
        assert!(
            s.lookup(0, (77, None), 1).is_none(),
            "a changed provider starts empty"
        );
    }

    #[test]
    fn the_sign_in_redirect_carries_the_original_url_and_spares_its_own_page() {
        let abs = SignIn {
            url: "https://sso.example/oauth2/start".into(),
            return_parameter: "rd".into(),
        };
        let mut out = Vec::new();
        abs.write_location(true, b"app.example", b"/a b?x=1&y", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "https://sso.example/oauth2/start?rd=https%3A%2F%2Fapp.example%2Fa%20b%3Fx%3D1%26y"
        );
        assert!(abs.is_sign_in_page(b"SSO.example", b"/oauth2/start?rd=x"));
        assert!(!abs.is_sign_in_page(b"app.example", b"/oauth2/start"));
        let rel = SignIn {
            url: "/oauth2/start?prompt=login".into(),
            return_parameter: "return_to".into(),
        };
        let mut out = Vec::new();
        rel.write_location(false, b"a.test", b"/", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "/oauth2/start?prompt=login&return_to=http%3A%2F%2Fa.test%2F"
        );
        assert!(rel.is_sign_in_page(b"a.test", b"/oauth2/start"));
        assert!(!rel.is_sign_in_page(b"a.test", b"/app"));
    }
}
