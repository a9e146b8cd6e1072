//! Micro benchmarks of the gate's quota tables: a rate check on one key and
//! on a 64 Ki working set, the full budget + lease + rate decision, and the
//! keyed hashing that feeds them. Plain `std::time` harness: each case runs
//! several rounds after a warm-up and prints the median ns per operation.
//!
//! `cargo bench -p gapura-bench --bench quota` (add `-- quick` for fewer
//! iterations).

use gapura_gate::quota::{
    Budget, Ceiling, Class, Domain, Keyer, LeaseLimits, OperationLimits, Quota, QuotaDecision,
    QuotaLimits, QuotaRequest, QuotaSizes, RateCheck, RatePolicy, RateTable, Slot, SourcePrefix,
};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

const ROUNDS: usize = 7;

/// Median ns per op of `f` run `iters` times per round. `f` gets a running
/// operation index, `op`, that keeps increasing across rounds and cases
/// (time is derived from it, so it never goes back).
fn bench(name: &str, iters: u64, op: &mut u64, mut f: impl FnMut(u64)) {
    for _ in 0..iters / 4 {
        f(*op);
        *op += 1;
    }
    let mut per_op: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f(*op);
                *op += 1;
            }
            start.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    per_op.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{name:<48} {:>8.1} ns/op  (min {:.1}, max {:.1}; {ROUNDS} x {iters})",
        per_op[ROUNDS / 2],
        per_op[0],
        per_op[ROUNDS - 1]
    );
}

/// The shard clock of operation `op`: one ms per 256 operations.
fn now_ms(op: u64) -> u64 {
    op >> 8
}

/// splitmix64: well-spread keys, as the keyed hash gives.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let n = if quick { 200_000 } else { 2_000_000 };
    println!("quota micro benchmarks (median of {ROUNDS} rounds)");
    let mut op = 0u64;

    let keyer = Keyer::new(*b"bench-seed-12345");
    let v4 = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, 6));
    bench("key: IPv4 source (SipHash-1-3, 20 B)", n, &mut op, |i| {
        black_box(keyer.source(Domain::RateSource, black_box(v4), SourcePrefix::RATE) ^ i);
    });
    bench("key: IPv6 /64 source", n, &mut op, |i| {
        black_box(keyer.source(Domain::RateSource, black_box(v6), SourcePrefix::RATE) ^ i);
    });

    // A never-hit limit: every check is allowed.
    let open = RatePolicy::per_second(1_000_000, 1_000_000).unwrap();
    let slot = Slot::new(1).unwrap();

    let mut t = RateTable::new(1 << 18).unwrap();
    let key = mix(1);
    bench("rate: try_acquire, one key (hit)", n, &mut op, |i| {
        let _ = black_box(t.try_acquire(&open, slot, black_box(key), now_ms(i)));
    });

    let tight = RatePolicy::per_minute(1, 1).unwrap();
    let mut t = RateTable::new(1 << 18).unwrap();
    bench("rate: try_acquire, one key (refused)", n, &mut op, |i| {
        let _ = black_box(t.try_acquire(&tight, slot, black_box(key), now_ms(i)));
    });

    let keys: Vec<u64> = (0..1u64 << 16).map(mix).collect();
    let mut t = RateTable::new(1 << 18).unwrap();
    bench(
        "rate: try_acquire, 64 Ki keys in 256 Ki table",
        n,
        &mut op,
        |i| {
            let k = keys[(i & 0xffff) as usize];
            let _ = black_box(t.try_acquire(&open, slot, k, now_ms(i)));
        },
    );

    let mut t = RateTable::new(1 << 18).unwrap();
    let mut fresh = 1u64 << 40;
    bench(
        "rate: try_acquire, unique keys (miss/evict)",
        n,
        &mut op,
        |i| {
            fresh += 1;
            let _ = black_box(t.try_acquire(&open, slot, mix(fresh), now_ms(i)));
        },
    );

    bench_decisions(n, &mut op, open, key, &keys);
}

/// The full decision: global + source + operation budgets, global +
/// source + operation leases, identity budget, one rate bucket (`open`);
/// and the release at the request's end: one client (`key`), and many
/// (`keys`).
fn bench_decisions(n: u64, op: &mut u64, open: RatePolicy, key: u64, keys: &[u64]) {
    let ceiling = Ceiling::new(1 << 16, 1 << 12).unwrap();
    let mut q = Quota::new(&QuotaSizes {
        rate_entries: 1 << 18,
        policy_slots: 256,
        slot_grace_ms: 60_000,
        window_ms: 1_000,
        window_keys: ceiling,
        lease_keys: ceiling,
        max_leases: 16_384,
        operations: 8,
    })
    .unwrap();
    let big = |v| Some(Budget::flat(v).unwrap());
    let limits = QuotaLimits {
        global: Some(Budget::new(u32::MAX, u32::MAX - 1).unwrap()),
        source: big(u32::MAX),
        health: big(1_000),
        identity: big(u32::MAX),
        operations: vec![
            OperationLimits {
                requests: big(u32::MAX),
                concurrent: big(16_384),
            };
            8
        ]
        .into_boxed_slice(),
        leases: LeaseLimits {
            global: big(16_384),
            per_key: big(16_384),
        },
        fleet: Default::default(),
        dims: Default::default(),
    };
    let rate_slot = q.slots_mut().bind(42, open).unwrap();
    let run = |q: &mut Quota, source: u64, rate_key: u64, identity: Option<u64>, now: u64| {
        let checks = [RateCheck {
            policy: &open,
            slot: rate_slot,
            key: rate_key,
        }];
        let r = QuotaRequest {
            class: Class::Normal,
            source,
            operation: Some(3),
            identity,
            rate: &checks,
        };
        match q.decide(&limits, &r, now) {
            QuotaDecision::Admit(t) => {
                black_box(q.release(t));
            }
            QuotaDecision::Refuse(r) => panic!("refused {r:?}"),
        }
    };
    bench("decide: budgets + leases + rate, one client", n, op, |i| {
        run(&mut q, black_box(key), key, None, now_ms(i));
    });
    bench("decide: + identity budget, one client", n, op, |i| {
        run(&mut q, black_box(key), key, Some(key ^ 1), now_ms(i));
    });
    bench(
        "decide: budgets + leases + rate, 64 Ki clients",
        n,
        op,
        |i| {
            let k = keys[(i & 0xffff) as usize];
            // Sources by /24 (256 clients each), rate by client.
            run(
                &mut q,
                keys[((i & 0xffff) >> 8) as usize],
                k,
                None,
                now_ms(i),
            );
        },
    );
}
