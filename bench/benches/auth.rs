//! Forward-auth micro benchmarks: a remembered allow (the key over what the
//! provider is sent, then the table probe) for a browser-like request, at
//! request grain and at host grain, and a miss.
//!
//! `cargo bench -p gapura-bench --bench auth`. Each figure is the median of
//! 7 rounds of ns per operation.

use gapura_bench::measure;
use gapura_gate::auth::{
    AuthJob, AuthProvider, AuthState, HeaderMatch, KeyFacts, Scope, STANDARD_HEADERS,
};
use std::hint::black_box;
use std::sync::Arc;

fn provider(scope: Scope) -> AuthProvider {
    AuthProvider {
        name: "sso".into(),
        addr: "127.0.0.1:9091".parse().unwrap(),
        authority: "127.0.0.1:9091".into(),
        path: "/api/authz/forward-auth".into(),
        send: STANDARD_HEADERS.iter().map(|s| (*s).into()).collect(),
        copy: vec![HeaderMatch::parse("Remote-User")],
        scope,
        ttl_ms: 30_000,
        negative_ttl_ms: 0,
        entries: 4096,
        timeout_ms: 2000,
        sign_in: None,
        tls: None,
        identity: 1,
    }
}

fn main() {
    let headers: [(&str, &[u8]); 4] = [
        ("cookie", b"authelia_session=V2hhdCBhIGxvbmcgc2Vzc2lvbiBjb29raWUgdGhpcyBpcw; theme=dark; lang=en"),
        ("user-agent", b"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"),
        ("accept", b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
        ("accept-language", b"en-GB,en;q=0.9"),
    ];
    let facts = KeyFacts {
        client: "203.0.113.7".parse().unwrap(),
        scheme: b"http",
        host: b"app.test",
        method: b"GET",
        target: b"/products/item-42?x=1",
        headers: &headers[..],
    };
    for (name, scope) in [
        ("request grain", Scope::Request),
        ("host grain", Scope::Host),
    ] {
        let p = provider(scope);
        let mut s = AuthState::new([9; 16]);
        s.adopt(std::slice::from_ref(&p));
        let (request_key, host_key) = s.keys(&p, &facts);
        let job = AuthJob {
            provider: 0,
            request_key,
            host_key,
        };
        let lines: Arc<[u8]> = Arc::from(&b"Remote-User: ana\r\n"[..]);
        s.remember(0, &p, &job, Some(lines), 0);
        measure(&format!("remembered allow, {name}"), 200_000, |_| {
            let keys = s.keys(&p, black_box(&facts));
            s.lookup(0, keys, 1).is_some() as u64
        });
    }
    let p = provider(Scope::Request);
    let mut s = AuthState::new([9; 16]);
    s.adopt(std::slice::from_ref(&p));
    measure("miss (the call follows)", 200_000, |_| {
        let keys = s.keys(&p, black_box(&facts));
        s.lookup(0, keys, 1).is_some() as u64
    });
}
