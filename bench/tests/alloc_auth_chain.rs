//! Forward-auth through the whole chain allocates nothing: a remembered
//! allow (its identity lines shared, not copied) and the deferring
//! decision that hands the call to the server. A counting global allocator
//! proves it.

use gapura_bench::reference::{snapshot, CHROME};
use gapura_gate::auth::{AuthJob, AuthProvider, HeaderMatch, KeyFacts, Scope, STANDARD_HEADERS};
use gapura_gate::chain::{GateState, NoTrace, Request};
use gapura_gate::client::Peer;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::Verdict;
use std::sync::Arc;

#[path = "../../gate/tests/common/mod.rs"]
mod counting;
use counting::allocations;

#[test]
fn forward_auth_decisions_allocate_nothing() {
    let mut snap = snapshot();
    snap.gate.auth_providers = vec![AuthProvider {
        name: "sso".into(),
        addr: "127.0.0.1:9091".parse().unwrap(),
        authority: "127.0.0.1:9091".into(),
        path: "/api/verify".into(),
        send: STANDARD_HEADERS.iter().map(|s| (*s).into()).collect(),
        copy: vec![HeaderMatch::parse("Remote-User")],
        scope: Scope::Host,
        ttl_ms: 30_000,
        negative_ttl_ms: 0,
        entries: 1024,
        timeout_ms: 2000,
        sign_in: None,
        tls: None,
        identity: 7,
    }];
    snap.entries[0].policy.auth = Some(gapura_gate::policy::BlockRef {
        index: 0,
        mode: gapura_gate::mode::Mode::Enforce,
    });
    let mut state = GateState::small();
    state.adopt(&snap, 0);
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let request = |cookie: &'static [u8]| -> [(&'static str, &'static [u8]); 3] {
        [
            ("user-agent", CHROME),
            ("x-forwarded-for", b"203.0.113.7"),
            ("cookie", cookie),
        ]
    };
    let known = request(b"session=ana");
    let stranger = request(b"session=eve");
    // The provider vouched for ana on another page: host grain.
    let facts = KeyFacts {
        client: "203.0.113.7".parse().unwrap(),
        scheme: b"http",
        host: b"app.test",
        method: b"GET",
        target: b"/elsewhere",
        headers: &known[..],
    };
    let p = &snap.gate.auth_providers[0];
    let (request_key, host_key) = state.auth.keys(p, &facts);
    let job = AuthJob {
        provider: 0,
        request_key,
        host_key,
    };
    let lines: Arc<[u8]> = Arc::from(&b"Remote-User: ana\r\n"[..]);
    state.auth.remember(0, p, &job, Some(lines.clone()), 0);
    for (name, headers, remembered) in
        [("remembered", &known, true), ("deferred", &stranger, false)]
    {
        let req = Request {
            peer: Peer::tcp("10.0.0.1".parse().unwrap()),
            method: b"GET",
            host: Some(b"app.test"),
            target: b"/products/item-42",
            path: b"/products/item-42",
            header_count: headers.len(),
            header_bytes: 120,
            content_length: None,
            headers: &headers[..],
            connection: None,
            tls: false,
        };
        let _ = snap.decide(&req, &mut state, 1, &mut scratch, &mut NoTrace);
        let _ = state.auth.take_job();
        let mut got = None;
        let used = allocations(|| {
            let d = snap.decide(&req, &mut state, 1, &mut scratch, &mut NoTrace);
            got = Some((
                matches!(d.verdict, Verdict::Respond(_)),
                d.identity.is_some(),
            ));
        });
        assert_eq!(used, 0, "{name}: {used} allocations");
        assert_eq!(got, Some((remembered, remembered)), "{name}");
        assert_eq!(state.auth.take_job().is_some(), !remembered, "{name}");
    }
}
