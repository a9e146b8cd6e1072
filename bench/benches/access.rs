//! Access-list micro benchmarks: the decision with a 2,000-CIDR allow list
//! (an allowed address passing, a denied one refused), a credentialed
//! request answered from the verification cache (20 users, and 1,000 for
//! the constant-time name scan at its bound), the deferring decision that
//! builds a verification job, the cache probe and key alone, and one
//! PBKDF2 check at the default 600,000 iterations (the pool's cost).
//!
//! `cargo bench -p gapura-bench --bench access` (about three seconds). Each
//! figure is the median of 7 rounds of ns per operation; addresses rotate
//! over 4,096 probes inside the allow list.

use gapura_bench::measure;
use gapura_gate::access::basic::{read_authorization, Authorization};
use gapura_gate::access::cache::{CacheKeyer, VerifyCache};
use gapura_gate::access::password::{hash_password, Verifier, DEFAULT_ITERATIONS};
use gapura_gate::access::{AccessDecision, AccessList, AccessListParts, User};
use gapura_gate::cidr::{Cidr, CidrSet};
use gapura_gate::country::{AddressRules, Satisfy};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use gapura_gate::testing::TestRng as Rng;

/// 2,000 IPv4 networks, /16 to /32.
fn entries(r: &mut Rng) -> Vec<Cidr> {
    (0..2000)
        .map(|_| {
            let prefix = 16 + (r.next() % 17) as u8;
            let a = r.next() as u32 & (u32::MAX << (32 - prefix));
            Cidr::new(IpAddr::V4(Ipv4Addr::from(a)), prefix).unwrap()
        })
        .collect()
}

fn list(set: &CidrSet, satisfy: Satisfy, users: usize, verifier: Verifier) -> AccessList {
    let mut all = vec![User::new("alice", Some(verifier))];
    all.extend((1..users).map(|i| User::new(&format!("user-{i:04}"), Some(verifier))));
    // Alice last, so a scan that stopped early would show.
    all.rotate_left(1);
    AccessList::from_parts(AccessListParts {
        name: "bench".into(),
        rules: AddressRules {
            allow: set.clone(),
            deny: CidrSet::parse_list(&["192.0.2.0/24"]).unwrap(),
            ..AddressRules::default()
        },
        satisfy,
        users: all,
        ..AccessListParts::default()
    })
}

/// What every measurement shares: the allow list, the probes inside it,
/// the cache keyer, a cheap verifier and the header lines.
struct Fixture {
    set: CidrSet,
    probes: Vec<IpAddr>,
    mask: usize,
    verifier: Verifier,
    keyer: CacheKeyer,
    with_right: [(&'static str, &'static [u8]); 3],
    with_unknown: [(&'static str, &'static [u8]); 3],
    plain: [(&'static str, &'static [u8]); 2],
}

impl Fixture {
    fn new() -> Fixture {
        let mut r = Rng(0x152026);
        let cidrs = entries(&mut r);
        let set = CidrSet::from_cidrs(cidrs.iter().copied());
        let probes: Vec<IpAddr> = (0..4096)
            .map(|_| cidrs[(r.next() % cidrs.len() as u64) as usize].addr())
            .collect();
        println!(
            "allow list: {} entries, {} merged ranges",
            cidrs.len(),
            set.range_count()
        );
        let line = hash_password(b"wonderland", 10, b"bench-salt-bytes");
        let right: &[u8] = b"Basic YWxpY2U6d29uZGVybGFuZA==";
        let unknown: &[u8] = b"Basic bWFsbG9yeTp3b25kZXJsYW5k";
        let with_right: [(&str, &[u8]); 3] = [
            ("Host", b"example.com"),
            ("User-Agent", b"Mozilla/5.0 (X11; Linux x86_64)"),
            ("Authorization", right),
        ];
        Fixture {
            set,
            mask: probes.len() - 1,
            probes,
            verifier: Verifier::parse(&line).unwrap(),
            keyer: CacheKeyer::new(&[5; 32]),
            with_unknown: [with_right[0], with_right[1], ("Authorization", unknown)],
            plain: [with_right[0], with_right[1]],
            with_right,
        }
    }
}

fn main() {
    let f = Fixture::new();
    address_decisions(&f);
    password_decisions(&f);
    cache_and_header(&f);
    pbkdf2_check();
}

/// An allowed address passing a 2,000-CIDR list, a denied one refused.
fn address_decisions(f: &Fixture) {
    let Fixture {
        set,
        probes,
        mask,
        verifier,
        keyer,
        plain,
        ..
    } = f;
    let mask = *mask;
    let any = list(set, Satisfy::Any, 20, *verifier);
    let mut cache = VerifyCache::default();
    measure(
        "decide: allowed address passes (any, 2,000 CIDRs)",
        2_000_000,
        |i| {
            let out = any.decide(
                black_box(probes[i & mask]),
                None,
                &plain[..],
                Some(&mut cache),
                keyer,
                0,
            );
            matches!(out.decision, AccessDecision::Pass { .. })
        },
    );
    let denied: IpAddr = "192.0.2.9".parse().unwrap();
    measure("decide: denied address refused", 2_000_000, |_| {
        let out = any.decide(
            black_box(denied),
            None,
            &plain[..],
            Some(&mut cache),
            keyer,
            0,
        );
        matches!(out.decision, AccessDecision::Refuse)
    });
}

/// A credentialed request from the verification cache, and the deferring
/// decision for an unknown user, with 20 users and with 1,000.
fn password_decisions(f: &Fixture) {
    let Fixture {
        set,
        probes,
        mask,
        verifier,
        keyer,
        with_right,
        with_unknown,
        ..
    } = f;
    let mask = *mask;
    for users in [20, 1000] {
        let all = list(set, Satisfy::All, users, *verifier);
        let mut cache = VerifyCache::default();
        // Verify once per client so every probe is a cache hit.
        for &client in probes {
            if let AccessDecision::Verify(job) = all
                .decide(client, None, &with_right[..], Some(&mut cache), keyer, 0)
                .decision
            {
                assert!(job.run().is_ok());
                cache.insert(job.cache_key(), 0);
            }
        }
        let name = format!("decide: cache hit (all, 2,000 CIDRs, {users} users)");
        let mut now = 1u64;
        let iters = if users > 100 { 50_000 } else { 500_000 };
        measure(&name, iters, |i| {
            now += 1;
            let out = all.decide(
                black_box(probes[i & mask]),
                None,
                &with_right[..],
                Some(&mut cache),
                keyer,
                now / 1000,
            );
            matches!(out.decision, AccessDecision::Pass { .. })
        });
        let name = format!("decide: deferring, unknown user ({users} users)");
        measure(&name, iters, |i| {
            let out = all.decide(
                black_box(probes[i & mask]),
                None,
                &with_unknown[..],
                Some(&mut cache),
                keyer,
                0,
            );
            matches!(out.decision, AccessDecision::Verify(_))
        });
    }
}

/// The cache key, the Authorization read and the cache probe alone.
fn cache_and_header(f: &Fixture) {
    let Fixture {
        probes,
        mask,
        keyer,
        with_right,
        ..
    } = f;
    let mask = *mask;
    let mut cache = VerifyCache::default();
    let keys: Vec<u64> = probes
        .iter()
        .map(|&a| keyer.credentials_key(7, a, b"alice:wonderland"))
        .collect();
    for &k in &keys {
        cache.insert(k, 0);
    }
    measure("cache key (SHA-256, 16-byte credentials)", 1_000_000, |i| {
        keyer.credentials_key(7, black_box(probes[i & mask]), b"alice:wonderland") & 1 == 0
    });
    measure(
        "read Authorization: Basic (16-byte credentials)",
        2_000_000,
        |_| {
            matches!(
                read_authorization(black_box(&with_right[..])),
                Authorization::Basic(_)
            )
        },
    );
    measure("cache lookup (4,096 live entries, hit)", 5_000_000, |i| {
        cache.lookup(black_box(keys[i & mask]), 1)
    });
}

/// One PBKDF2 check at the default iterations: the pool's cost.
fn pbkdf2_check() {
    let real = Verifier::parse(&hash_password(
        b"wonderland",
        DEFAULT_ITERATIONS,
        b"bench-salt-bytes",
    ))
    .unwrap();
    let start = Instant::now();
    let runs = 3;
    for _ in 0..runs {
        assert!(black_box(&real).check(black_box(b"wonderland")));
    }
    println!(
        "{:<52} {:>9.1} ms/check",
        "PBKDF2-HMAC-SHA256, 600,000 iterations (pool)",
        start.elapsed().as_secs_f64() * 1000.0 / f64::from(runs)
    );
}
