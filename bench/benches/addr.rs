//! Address micro benchmarks: CIDR lookup in a 2,000-entry set, client
//! resolution through a trusted proxy and through Cloudflare, and the
//! access-list address check with country rules.
//!
//! `cargo bench -p gapura-bench --bench addr` (about two seconds). Each
//! figure is the median of 7 rounds of ns per operation. Lookups rotate over
//! 4,096 probe addresses, half of them inside the set, so the search path is
//! not predictable; the "one address" line repeats a single probe, the
//! branch-predictor-friendly case, for comparison with figures measured
//! that way.

use gapura_bench::measure;
use gapura_gate::cidr::{Cidr, CidrSet};
use gapura_gate::client::{cloudflare_ranges, ClientMode, ClientPolicy, ForwardedHeader, Peer};
use gapura_gate::country::{AddressRules, Country, CountryRules};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use gapura_gate::testing::TestRng as Rng;

/// 2,000 networks: 1,500 IPv4 (/16 to /32) and 500 IPv6 (/32 to /64).
fn entries(r: &mut Rng) -> Vec<Cidr> {
    (0..2000)
        .map(|i| {
            if i < 1500 {
                let prefix = 16 + (r.next() % 17) as u8;
                let a = r.next() as u32 & (u32::MAX << (32 - prefix));
                Cidr::new(IpAddr::V4(Ipv4Addr::from(a)), prefix).unwrap()
            } else {
                let prefix = 32 + (r.next() % 33) as u8;
                let a = (0x2000u128 << 112 | u128::from(r.next()) << 64)
                    & (u128::MAX << (128 - prefix));
                Cidr::new(IpAddr::V6(Ipv6Addr::from(a)), prefix).unwrap()
            }
        })
        .collect()
}

/// 4,096 probes: half the first address of an entry, half random.
fn probes(r: &mut Rng, cidrs: &[Cidr]) -> Vec<IpAddr> {
    (0..4096)
        .map(|i| {
            if i % 2 == 0 {
                cidrs[(r.next() % cidrs.len() as u64) as usize].addr()
            } else if i % 4 == 1 {
                IpAddr::V4(Ipv4Addr::from(r.next() as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(
                    0x2000u128 << 112 | u128::from(r.next()) << 64,
                ))
            }
        })
        .collect()
}

fn main() {
    let mut r = Rng(0x152026);
    let cidrs = entries(&mut r);
    let set = CidrSet::from_cidrs(cidrs.iter().copied());
    let probes = probes(&mut r, &cidrs);
    let hits = probes.iter().filter(|&&a| set.contains(a)).count();
    println!(
        "CIDR set: {} entries, {} merged ranges; {} probes, {} inside",
        cidrs.len(),
        set.range_count(),
        probes.len(),
        hits
    );
    let mask = probes.len() - 1;
    measure(
        "cidr_contains (2,000 entries, 4,096 probes)",
        2_000_000,
        |i| set.contains(black_box(probes[i & mask])),
    );
    let one = probes[0];
    measure(
        "cidr_contains (2,000 entries, one address)",
        2_000_000,
        |_| set.contains(black_box(one)),
    );

    let xff = ClientPolicy {
        mode: ClientMode::TrustedProxy(ForwardedHeader::XForwardedFor),
        trusted_proxies: CidrSet::parse_list(&["10.0.0.5"]).unwrap(),
        ..ClientPolicy::default()
    };
    let headers: &[(&str, &[u8])] = &[
        ("Host", b"example.com"),
        ("User-Agent", b"Mozilla/5.0 (X11; Linux x86_64)"),
        ("Accept", b"text/html"),
        ("X-Forwarded-For", b"203.0.113.7, 198.51.100.9"),
        ("CF-Connecting-IP", b"2001:db8::77"),
        ("CF-IPCountry", b"DE"),
        ("CF-Ray", b"8a1b2c3d4e5f6789-FRA"),
    ];
    let proxy = Peer::tcp("10.0.0.5".parse().unwrap());
    measure(
        "resolve (trusted proxy, X-Forwarded-For)",
        1_000_000,
        |_| {
            xff.resolve(black_box(proxy), black_box(headers))
                .addr
                .is_ipv4()
        },
    );
    let cf = ClientPolicy {
        mode: ClientMode::Cloudflare,
        cloudflare_ranges: cloudflare_ranges(),
        ..ClientPolicy::default()
    };
    let edge = Peer::tcp("172.64.1.1".parse().unwrap());
    measure(
        "resolve (Cloudflare, with country and ray)",
        1_000_000,
        |_| {
            cf.resolve(black_box(edge), black_box(headers))
                .addr
                .is_ipv4()
        },
    );

    let rules = AddressRules {
        allow: set.clone(),
        deny: CidrSet::parse_list(&["192.0.2.0/24"]).unwrap(),
        countries: CountryRules::parse(&["DE", "FR", "XX"], &["T1"]).unwrap(),
    };
    let de = Country::parse_code("DE");
    measure(
        "address check (2,000 allow, deny, countries)",
        2_000_000,
        |i| rules.check(black_box(probes[i & mask]), de).verdict as u8 == 1,
    );
}
