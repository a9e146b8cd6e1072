//! The gate's reference `decide`: trusted-proxy resolution, a 2,000-CIDR
//! access list, a 50-rule set, a managed robots.txt, maintenance off, on a
//! `respond` host; the whole chain as the server runs it (`NoTrace`).
//!
//! `cargo bench -p gapura-bench --bench decide` (a few seconds). Each figure
//! is the median of 7 rounds of ns per call.

use gapura_bench::measure;
use gapura_bench::reference::{snapshot, CHROME};
use gapura_gate::chain::{GateState, NoTrace, Request};
use gapura_gate::client::Peer;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::Verdict;
use std::hint::black_box;

fn main() {
    let snap = snapshot();
    let mut state = GateState::small();
    state.adopt(&snap, 0);
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let peer = Peer::tcp("10.0.0.1".parse().unwrap());
    type Case<'a> = (&'a str, &'a [u8], &'a [u8], &'a [u8]);
    let cases: [Case<'_>; 5] = [
        (
            "pass: GET /products/item-42?x=1",
            b"GET",
            b"/products/item-42?x=1",
            CHROME,
        ),
        ("pass: GET /", b"GET", b"/", CHROME),
        (
            "deny: prefix /wp-admin/setup.php",
            b"GET",
            b"/wp-admin/setup.php",
            CHROME,
        ),
        (
            "deny: user agent GPTBot",
            b"GET",
            b"/",
            b"Mozilla/5.0 (compatible; GPTBot/1.2)",
        ),
        ("robots.txt answer", b"GET", b"/robots.txt", CHROME),
    ];
    for (name, method, path, ua) in cases {
        let headers: [(&str, &[u8]); 3] = [
            ("host", b"app.test"),
            ("user-agent", ua),
            ("x-forwarded-for", b"203.0.113.7"),
        ];
        let req = Request {
            peer,
            method,
            host: Some(b"app.test"),
            target: path,
            path,
            header_count: 3,
            header_bytes: 60,
            content_length: None,
            headers: &headers[..],
        };
        measure(&format!("decide, {name}"), 200_000, |_| {
            let d = snap.decide(black_box(&req), &mut state, 0, &mut scratch, &mut NoTrace);
            matches!(d.verdict, Verdict::Respond(_))
        });
    }
}
