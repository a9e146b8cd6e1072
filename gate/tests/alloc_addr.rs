//! Proves that CIDR lookups, client resolution (a PROXY source among them),
//! country parsing and the access-list address decision allocate nothing.
//! A counting global allocator counts the allocations of the current thread
//! while a closure runs.

use gapura_gate::cidr::{Cidr, CidrSet};
use gapura_gate::client::{
    cloudflare_ranges, ClientMode, ClientPolicy, ForwardedHeader, Peer, ResolvedClient,
};
use gapura_gate::country::{access_step, AddressRules, Country, CountryRules, Satisfy};
use std::hint::black_box;
use std::net::IpAddr;

mod common;
use common::allocations;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn the_counter_sees_an_allocation() {
    assert_eq!(allocations(|| Vec::<u8>::with_capacity(8)), 1);
}

#[test]
fn cidr_lookups_allocate_nothing() {
    let entries: Vec<String> = (0..2000u32)
        .map(|i| format!("{}.{}.{}.0/24", 10 + i / 65536, (i / 256) % 256, i % 256))
        .collect();
    let set = CidrSet::parse_list(&entries).unwrap();
    let v6 = CidrSet::parse_list(&["2001:db8::/32", "::/0"]).unwrap();
    let probes = [
        ip("10.0.7.9"),
        ip("192.0.2.1"),
        ip("::ffff:10.0.0.1"),
        ip("2001:db8::1"),
    ];
    let n = allocations(|| {
        let mut hits = 0;
        for _ in 0..100 {
            for &a in &probes {
                hits += usize::from(set.contains(black_box(a)));
                hits += usize::from(v6.contains(black_box(a)));
            }
        }
        hits
    });
    assert_eq!(n, 0);
    let c = Cidr::parse("10.0.0.0/8").unwrap();
    assert_eq!(allocations(|| c.contains(black_box(ip("10.1.2.3")))), 0);
}

#[test]
fn client_resolution_allocates_nothing() {
    let trusted = CidrSet::parse_list(&["10.0.0.5"]).unwrap();
    let xff = ClientPolicy {
        mode: ClientMode::TrustedProxy(ForwardedHeader::XForwardedFor),
        trusted_proxies: trusted.clone(),
        ..ClientPolicy::default()
    };
    let fwd = ClientPolicy {
        mode: ClientMode::TrustedProxy(ForwardedHeader::Forwarded),
        trusted_proxies: trusted,
        ..ClientPolicy::default()
    };
    let cf = ClientPolicy {
        mode: ClientMode::Cloudflare,
        cloudflare_ranges: cloudflare_ranges(),
        proxy_protocol_peers: CidrSet::parse_list(&["10.0.0.9"]).unwrap(),
        ..ClientPolicy::default()
    };
    let h: &[(&str, &[u8])] = &[
        ("Host", b"a.test"),
        ("X-Forwarded-For", b"203.0.113.7, 198.51.100.9"),
        ("x-forwarded-for", b" 1.1.1.1 ,  [2001:db8::1]:443 "),
        (
            "Forwarded",
            b"for=192.0.2.43, for=\"[2001:db8::\\31]:4711\";proto=https",
        ),
        ("CF-Connecting-IP", b"2001:db8::77"),
        ("CF-IPCountry", b"de"),
        ("CF-Ray", b"8a1b2c3d4e5f6789-FRA"),
    ];
    let mut last: Option<ResolvedClient<'_>> = None;
    let n = allocations(|| {
        for peer in ["10.0.0.5", "::ffff:10.0.0.5", "172.64.1.1", "198.51.100.1"] {
            let peer = Peer::tcp(ip(peer));
            for p in [&xff, &fwd, &cf] {
                last = Some(p.resolve(peer, black_box(h)));
            }
        }
        let src = Some("198.51.100.4:5555".parse().unwrap());
        let peer = cf.accept_proxy_header(ip("10.0.0.9"), src).unwrap();
        cf.resolve(peer, h)
    });
    assert_eq!(n, 0);
    assert!(last.is_some());
}

#[test]
fn country_checks_allocate_nothing() {
    let rules = AddressRules {
        allow: CidrSet::parse_list(&["192.0.2.0/24"]).unwrap(),
        deny: CidrSet::parse_list(&["192.0.2.66"]).unwrap(),
        countries: CountryRules::parse(&["DE", "XX"], &["T1", "RU"]).unwrap(),
    };
    let n = allocations(|| {
        let mut steps = 0;
        for header in [&b"DE"[..], b"ru", b"T1", b"XX", b"", b"garbage"] {
            let c = Country::from_header(black_box(header));
            for addr in [ip("192.0.2.1"), ip("192.0.2.66"), ip("198.51.100.1")] {
                let check = rules.check(black_box(addr), Some(c));
                for satisfy in [Satisfy::All, Satisfy::Any] {
                    let step = access_step(check.verdict, true, satisfy, false);
                    steps += step as usize;
                }
            }
        }
        steps + rules.check(ip("192.0.2.1"), None).verdict.as_str().len()
    });
    assert_eq!(n, 0);
}
