//! The gate's reference `decide`: trusted-proxy resolution, a 2,000-CIDR
//! access list, a 50-rule set, a managed robots.txt, maintenance off, on a
//! `respond` host; the whole chain as the server runs it (`NoTrace`).
//!
//! `cargo bench -p gapura-bench --bench decide` (a few seconds). Each figure
//! is the median of 7 rounds of ns per call.
//!
//! The warm figures keep every table in the caches. A server's shard does
//! not: between two requests the kernel's network work and the rest of the
//! request evict most of them. The cold figures write 4 MiB between two
//! calls (evicting the core's caches) and time each call alone, less the
//! cost of reading the clock twice; each is the median of 7 rounds of
//! 2,000 calls.

use gapura_bench::measure;
use gapura_bench::reference::{snapshot, CHROME};
use gapura_gate::chain::{GateState, NoTrace, Request};
use gapura_gate::client::Peer;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::Verdict;
use std::hint::black_box;
use std::time::Instant;

/// Writes `buf` through, so the caches hold it instead of the gate's tables.
fn evict(buf: &mut [u64]) {
    for (i, x) in buf.iter_mut().enumerate().step_by(8) {
        *x = x.wrapping_add(i as u64);
    }
    black_box(&buf[0]);
}

/// Median of 7 rounds of the mean ns of `f` run alone after an eviction,
/// less the same measurement of an empty call.
fn cold(name: &str, buf: &mut [u64], mut f: impl FnMut() -> bool) -> f64 {
    let mut round = |f: &mut dyn FnMut() -> bool| {
        let mut total = 0u128;
        let mut sink = 0u64;
        for _ in 0..2_000 {
            evict(buf);
            let t = Instant::now();
            sink += u64::from(f());
            total += t.elapsed().as_nanos();
        }
        black_box(sink);
        total as f64 / 2_000.0
    };
    let mut rounds: Vec<f64> = (0..7)
        .map(|_| round(&mut f) - round(&mut || black_box(true)))
        .collect();
    rounds.sort_by(f64::total_cmp);
    println!(
        "{name:<52} {:>9.1} ns/op  (min {:.1}, max {:.1})",
        rounds[3], rounds[0], rounds[6]
    );
    rounds[3]
}

fn main() {
    let snap = snapshot();
    let mut state = GateState::small();
    state.adopt(&snap, 0);
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let peer = Peer::tcp("10.0.0.1".parse().unwrap());
    let mut buf = vec![0u64; 4 << 17];
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
            connection: None,
            tls: false,
        };
        measure(&format!("decide, {name}"), 200_000, |_| {
            let d = snap.decide(black_box(&req), &mut state, 0, &mut scratch, &mut NoTrace);
            matches!(d.verdict, Verdict::Respond(_))
        });
        cold(&format!("decide, cold caches, {name}"), &mut buf, || {
            let d = snap.decide(black_box(&req), &mut state, 0, &mut scratch, &mut NoTrace);
            matches!(d.verdict, Verdict::Respond(_))
        });
    }
}
