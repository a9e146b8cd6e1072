//! The chain's cost per step on the reference request (`gapura_bench::steps`:
//! the embedded default profile compiled, its protections on, a proxy host
//! beside its respond host, `GET /products/item-42?x=1` with eight typical
//! header lines, warm caches), and the whole chain's.
//!
//! `cargo bench -p gapura-bench --bench steps` (a few seconds). Each figure
//! is the median of 7 rounds of ns per request (200,000 requests a round).
//!
//! The steps are inlined into one function, so a step's cost in the chain
//! is a difference: the chain with the step's policy less the chain
//! without it (the proxy host with the default profile's protections: the
//! "base"); for the default profile's own steps (budgets, the client rate
//! limit), the base less the base with that protection off. Two medians
//! of a shared machine: a difference within a few ns of 0 is noise. The
//! steps that always run (client, host, path, route, request limits) are
//! timed alone, calling what the chain calls.
//!
//! A request here is what a shard does for it in the gate: the decision,
//! its leases given back, the clock moved 10 ms (the client rate limit's
//! pace, so nothing refuses).

use gapura_bench::measure;
use gapura_bench::steps::{Policy, Reference, ALL, CLIENT, TARGET};
use gapura_gate::chain::NoTrace;
use gapura_gate::client::Peer;
use gapura_gate::host::HostAction;
use gapura_gate::path::{canonical, MAX_PATH_BYTES};
use std::hint::black_box;

const ITERS: u64 = 200_000;

/// The median ns per request of the reference with `added` and `off`, on
/// `host`.
fn chain(name: &str, host: &[u8], added: &[Policy], off: &[&str]) -> f64 {
    let mut r = Reference::new(added, off);
    measure(name, ITERS, |_| {
        let (_, answered) = r.serve(black_box(host), &mut NoTrace);
        answered
    })
}

fn main() {
    let app: &[u8] = b"app.test";
    println!("-- the whole chain");
    let respond = chain("default profile, respond host", b"localhost", &[], &[]);
    let base = chain("base: proxy host, default protections", app, &[], &[]);
    let all = chain("proxy host, every step's policy", app, &ALL, &[]);
    let bare = chain(
        "proxy host, no protections",
        app,
        &[],
        &["global", "source", "connections", "client_rate"],
    );

    println!("-- steps that always run, alone");
    let r = Reference::new(&[], &[]);
    let headers = r.header_refs();
    let peer = Peer::tcp(CLIENT.parse().unwrap());
    let client = measure("2 client address (resolve)", ITERS, |_| {
        let c = r.snap.gate.client.resolve(black_box(peer), &headers[..]);
        c.addr.is_ipv4()
    });
    let host = measure("3 host (lookup)", ITERS, |_| {
        r.snap.hosts.lookup(black_box(Some(app))).is_some()
    });
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let path = measure("path (canonical)", ITERS, |_| {
        canonical(black_box(TARGET), &mut scratch).map_or(0, |p| p.len() as u64)
    });
    let entry = &r.snap.entries[r.snap.hosts.lookup(Some(app)).unwrap() as usize];
    let HostAction::Proxy(proxy) = &entry.action else {
        panic!("app.test proxies")
    };
    let route = measure("route (match)", ITERS, |_| {
        proxy.route(black_box(b"/products/item-42")).is_some()
    });
    let limits = entry.limits;
    let header_bytes = r.header_bytes;
    let req_limits = measure("8 request limits (check)", ITERS, |_| {
        limits
            .check_head(
                black_box(TARGET.len()),
                black_box(8),
                black_box(header_bytes),
            )
            .is_ok()
    });

    println!("-- the default profile's steps: base less base without");
    let no_budgets = chain(
        "base, protection off global, source",
        app,
        &[],
        &["global", "source"],
    );
    let no_rate = chain(
        "base, protection off client_rate",
        app,
        &[],
        &["client_rate"],
    );

    println!("-- each policy added to the base");
    let mut added = Vec::new();
    for p in ALL {
        added.push((p, chain(&format!("base + {p:?}"), app, &[p], &[])));
    }

    println!();
    println!("| step | ns per request (median) |");
    println!("|---|---:|");
    println!("| 2 client address (alone) | {client:.1} |");
    println!("| 3 host (alone) | {host:.1} |");
    println!("| canonical path (alone) | {path:.1} |");
    println!("| route (alone) | {route:.1} |");
    println!(
        "| 4 budgets (base less without) | {:.1} |",
        base - no_budgets
    );
    for (p, t) in &added {
        let name = match p {
            Policy::ConnectionRate => "5 connection rate",
            Policy::AccessAddress => "6 access list, addresses",
            Policy::RuleSet => "7 rule set (edge)",
            Policy::HttpsRedirect => "9 HTTPS redirect",
            Policy::Robots => "10 robots.txt",
            Policy::Maintenance => "11 maintenance, bypassed",
            Policy::AccessPassword => "6 + 12 access list, password (cache hit)",
            Policy::ForwardAuth => "14 forward-auth (remembered)",
            Policy::Identity => "15 identity dimensions (resource; no principal)",
            Policy::ProofOfWork => "16 proof of work (valid cookie)",
        };
        println!("| {name} (added less base) | {:.1} |", t - base);
    }
    println!("| 8 request limits (alone) | {req_limits:.1} |");
    println!(
        "| 13 client rate limit (base less without) | {:.1} |",
        base - no_rate
    );
    println!("| whole chain, default profile, respond host | {respond:.1} |");
    println!("| whole chain, proxy host, default protections | {base:.1} |");
    println!("| whole chain, proxy host, no protections | {bare:.1} |");
    println!("| whole chain, proxy host, every step's policy | {all:.1} |");
}
