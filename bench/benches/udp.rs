//! The UDP relay's decision per datagram: what dropping costs (oversized,
//! over a prefix budget, over the tracked-prefix ceiling, over a session's
//! bucket, a malformed envelope, a forged one) and what relaying a datagram
//! of a known session costs. The decision only: the kernel's part (the
//! receive that brought the datagram) is measured by bench/udp.py.
//!
//! `cargo bench -p gapura-bench --bench udp`. Each figure is the median of
//! 7 rounds of ns per datagram, on one thread (user time).

use gapura_bench::measure;
use gapura_gate::quota::{Budget, Ceiling, RatePolicy};
use gapura_gate::udp::{EnvelopeKey, EnvelopePolicy};
use gapura_udp::envelope::seal;
use gapura_udp::testing::policy;
use gapura_udp::{Inbound, Relay};
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

const SEED: [u8; 16] = [3; 16];
const UNIX: u64 = 1_800_000_000_000;

fn forwarded(i: Inbound) -> u64 {
    matches!(i, Inbound::Forward { .. }) as u64
}

fn main() {
    let servers: Vec<SocketAddr> = vec!["127.0.0.1:7001".parse().unwrap()];
    let src: SocketAddr = "203.0.113.7:4000".parse().unwrap();
    let payload = [0x42u8; 64];

    let mut open = policy(&servers);
    open.session.rate = None;
    open.budgets.global = Some(Budget::flat(u32::MAX).unwrap());
    open.budgets.prefix = Some(Budget::flat(u32::MAX).unwrap());
    let mut r = Relay::new(Arc::new(open.clone()), SEED, Default::default());
    r.inbound(src, &payload, 0, UNIX);
    measure("relay: a known session's datagram (64 B)", 2_000_000, |i| {
        forwarded(r.inbound(black_box(src), black_box(&payload), i as u64 / 1_000, UNIX))
    });

    let mut r = Relay::new(Arc::new(open.clone()), SEED, Default::default());
    let big = [0u8; 2_000];
    measure("drop: oversized", 2_000_000, |i| {
        forwarded(r.inbound(black_box(src), black_box(&big), i as u64, UNIX))
    });

    let mut spent = open.clone();
    spent.budgets.prefix = Some(Budget::flat(1).unwrap());
    let mut r = Relay::new(Arc::new(spent), SEED, Default::default());
    r.inbound(src, &payload, 0, UNIX);
    measure("drop: over the source prefix's budget", 2_000_000, |_| {
        forwarded(r.inbound(black_box(src), black_box(&payload), 500, UNIX))
    });

    let mut full = open.clone();
    full.budgets.tracked = Ceiling::new(16, 0).unwrap();
    let mut r = Relay::new(Arc::new(full), SEED, Default::default());
    for n in 0..16u32 {
        let s = SocketAddr::new(std::net::Ipv4Addr::from(n << 8).into(), 1);
        r.inbound(s, &payload, 0, UNIX);
    }
    measure(
        "drop: a new prefix past the tracked ceiling",
        2_000_000,
        |i| {
            let s = SocketAddr::new(
                std::net::Ipv4Addr::from(((i as u32) | 1 << 20) << 8).into(),
                1,
            );
            forwarded(r.inbound(black_box(s), black_box(&payload), 500, UNIX))
        },
    );

    let mut bucket = open.clone();
    bucket.session.rate = Some(RatePolicy::per_second(1, 1).unwrap());
    let mut r = Relay::new(Arc::new(bucket), SEED, Default::default());
    r.inbound(src, &payload, 0, UNIX);
    measure("drop: over the session's bucket", 2_000_000, |_| {
        forwarded(r.inbound(black_box(src), black_box(&payload), 500, UNIX))
    });

    let key = EnvelopeKey::new(&[9; 32]);
    let mut sealed = open;
    sealed.envelope = Some(EnvelopePolicy {
        key_files: Vec::new(),
        keys: vec![key.clone()],
        max_age_ms: 5_000,
        replay_window: 1_024,
        key_budget: None,
        strip: true,
    });
    let mut r = Relay::new(Arc::new(sealed), SEED, Default::default());
    let mut good = Vec::new();
    seal(&key, 0, UNIX, 1, &payload, &mut good);
    let mut forged = good.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    measure("drop: not an envelope (random bytes)", 2_000_000, |i| {
        forwarded(r.inbound(black_box(src), black_box(&payload), i as u64, UNIX))
    });
    measure("drop: a forged envelope (HMAC checked)", 1_000_000, |i| {
        forwarded(r.inbound(black_box(src), black_box(&forged), i as u64, UNIX))
    });
    let mut n = 1u64;
    measure(
        "relay: a valid envelope (HMAC, replay window)",
        500_000,
        |i| {
            n += 1;
            seal(&key, 0, UNIX, n, &payload, &mut good);
            forwarded(r.inbound(black_box(src), black_box(&good), i as u64, UNIX))
        },
    );
}
