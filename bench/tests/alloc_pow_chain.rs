//! Proof of work through the whole chain allocates nothing: a valid
//! cookie, a missing one (the challenge), a forged one and a client that is
//! not a browser. A counting global allocator proves it.

use gapura_bench::reference::{snapshot, CHROME};
use gapura_gate::chain::{GateState, NoTrace, Request};
use gapura_gate::client::Peer;
use gapura_gate::mode::Mode;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::pow::{host_id, mint_cookie, PowKey, ProofOfWork};
use gapura_gate::snapshot::PowAsk;
use gapura_gate::Verdict;

#[path = "../../gate/tests/common/mod.rs"]
mod counting;
use counting::allocations;

#[test]
fn proof_of_work_decisions_allocate_nothing() {
    let mut snap = snapshot();
    let key = PowKey::new(&[8; 32]);
    let pow = ProofOfWork {
        difficulty: 16,
        lifetime_s: 3600,
        when: None,
        mode: Mode::Enforce,
        host: host_id("app.test"),
    };
    snap.entries[0].policy.pow = Some(pow);
    snap.gate.pow_key = Some(key.clone());
    snap.gate.pow_in_use = true;
    let mut state = GateState::small();
    state.unix_origin_ms = 1_800_000_000_000;
    state.adopt(&snap, 0);
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    // The reference trusts 10.0.0.0/8 to name the client.
    let client = "203.0.113.7".parse().unwrap();
    let valid = mint_cookie(&key, pow.host, client, 1_800_000_000 + 60, 16);
    let valid = [b"theme=dark; gapura_pow=".as_slice(), &valid].concat();
    let forged = [b"gapura_pow=".as_slice(), &[b'A'; 35]].concat();
    let html: &[u8] = b"text/html,application/xhtml+xml";
    let json: &[u8] = b"application/json";
    type Case<'a> = (&'a str, &'a [u8], &'a [u8], Option<PowAsk>);
    let cases: [Case<'_>; 4] = [
        ("valid cookie", &valid, html, None),
        ("no cookie", b"", html, Some(PowAsk::Challenge)),
        ("forged cookie", &forged, html, Some(PowAsk::Challenge)),
        ("not a browser", b"", json, Some(PowAsk::NotBrowser)),
    ];
    for (name, cookie, accept, want) in cases {
        let headers: [(&str, &[u8]); 4] = [
            ("user-agent", CHROME),
            ("x-forwarded-for", b"203.0.113.7"),
            ("accept", accept),
            ("cookie", cookie),
        ];
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
        let _ = snap.decide(&req, &mut state, 0, &mut scratch, &mut NoTrace);
        let mut got = None;
        let used = allocations(|| {
            let d = snap.decide(&req, &mut state, 0, &mut scratch, &mut NoTrace);
            got = Some(match d.verdict {
                Verdict::Pow(_, ask) => Some(ask),
                Verdict::Respond(a) => {
                    assert_eq!(a.status, 200, "{name}");
                    None
                }
                other => panic!("{name}: unexpected {other:?}"),
            });
        });
        assert_eq!(got, Some(want), "{name}");
        assert_eq!(used, 0, "{name}: {used} allocations");
    }
    assert_eq!(state.counters.pow.cookies_valid, 2);
    assert_eq!(state.counters.pow.cookies_refused, 2);
    assert_eq!(state.counters.pow.challenges, 4);
    assert_eq!(state.counters.pow.non_browser, 2);
}
