//! Proves that every synchronous access-list decision allocates nothing:
//! a pass, an allowed address, each refusal (403, drop, 401 for missing and
//! unreadable credentials), a cache hit, and the deferring decision that
//! produces the verification job (for a real user and for a name nobody
//! has). The cache and the line, which the runtime touches around a
//! deferred check, allocate nothing either. A counting global allocator
//! counts the allocations of the current thread while a closure runs.

use gapura_gate::access::cache::{CacheKeyer, VerifyCache};
use gapura_gate::access::line::{LineConfig, VerifyLine};
use gapura_gate::access::password::{hash_password, Verifier};
use gapura_gate::access::{
    AccessDecision, AccessList, AccessListParts, AccessOutcome, User, VerifyJob, VerifyResult,
};
use gapura_gate::cidr::CidrSet;
use gapura_gate::country::{AddressRules, Country, CountryRules, Satisfy};
use std::net::IpAddr;

mod common;
use common::allocations;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn basic(raw: &str) -> Vec<u8> {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
    .into_bytes()
}

/// 2,000 /24 networks allowed, one address denied, a country deny list,
/// two users (one locked).
fn list(satisfy: Satisfy, drop_denied: bool) -> AccessList {
    let allow: Vec<String> = (0..2000u32)
        .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256))
        .collect();
    let line = hash_password(b"wonderland", 10, b"allocation-salt!");
    AccessList::from_parts(AccessListParts {
        name: "staff".into(),
        rules: AddressRules {
            allow: CidrSet::parse_list(&allow).unwrap(),
            deny: CidrSet::parse_list(&["10.0.0.66"]).unwrap(),
            countries: CountryRules::parse(&[] as &[&str], &["RU"]).unwrap(),
        },
        drop_denied,
        satisfy,
        pass_credentials: false,
        realm: None,
        users: vec![
            User::new("alice", Some(Verifier::parse(&line).unwrap())),
            User::new("locked", None),
        ],
    })
}

fn kind(out: &AccessOutcome<'_>) -> &'static str {
    match &out.decision {
        AccessDecision::Pass { .. } => "pass",
        AccessDecision::Refuse => "refuse",
        AccessDecision::Drop => "drop",
        AccessDecision::Challenge(_) => "challenge",
        AccessDecision::Verify(_) => "verify",
    }
}

const SECRET: [u8; 32] = [9; 32];

/// (name, list, client, country, header lines, expected kind)
type Case<'a> = (
    &'a str,
    &'a AccessList,
    &'a str,
    Option<Country>,
    Vec<(&'a str, Vec<u8>)>,
    &'a str,
);

#[test]
fn the_counter_sees_an_allocation() {
    assert_eq!(allocations(|| Vec::<u8>::with_capacity(8)), 1);
}

#[test]
fn synchronous_decisions_allocate_nothing() {
    let any = list(Satisfy::Any, false);
    let all = list(Satisfy::All, false);
    let dropping = list(Satisfy::All, true);
    let open = AccessList::from_parts(AccessListParts {
        name: "open".into(),
        ..AccessListParts::default()
    });
    let keyer = CacheKeyer::new(&SECRET);
    let mut cache = VerifyCache::with_capacity(4096);
    let right = basic("alice:wonderland");
    let unknown = basic("mallory:wonderland");
    let mut huge = b"Basic ".to_vec();
    huge.extend(std::iter::repeat_n(b'A', 5000));
    let ru = Country::parse_code("RU");
    let header = |v: &[u8]| -> Vec<(&'static str, Vec<u8>)> { vec![("authorization", v.to_vec())] };
    let cases: Vec<Case<'_>> = vec![
        ("pass, no rules", &open, "192.0.2.1", None, vec![], "pass"),
        (
            "allowed address under any",
            &any,
            "10.3.7.9",
            None,
            header(&right),
            "pass",
        ),
        (
            "denied address",
            &any,
            "10.0.0.66",
            None,
            header(&right),
            "refuse",
        ),
        (
            "denied country",
            &any,
            "10.3.7.9",
            ru,
            header(&right),
            "refuse",
        ),
        (
            "outside the allow list under all",
            &all,
            "192.0.2.1",
            None,
            vec![],
            "refuse",
        ),
        ("drop", &dropping, "10.0.0.66", None, vec![], "drop"),
        (
            "missing credentials",
            &all,
            "10.3.7.9",
            None,
            vec![],
            "challenge",
        ),
        (
            "another scheme",
            &all,
            "10.3.7.9",
            None,
            header(b"Bearer x"),
            "challenge",
        ),
        (
            "bad base64",
            &all,
            "10.3.7.9",
            None,
            header(b"Basic %%%"),
            "challenge",
        ),
        (
            "no colon",
            &all,
            "10.3.7.9",
            None,
            header(&basic("alice")),
            "challenge",
        ),
        (
            "huge value",
            &all,
            "10.3.7.9",
            None,
            header(&huge),
            "challenge",
        ),
        (
            "non-UTF-8",
            &all,
            "10.3.7.9",
            None,
            header(b"Basic YWxpY2U6/w=="),
            "challenge",
        ),
        (
            "deferring: a real user",
            &all,
            "10.3.7.9",
            None,
            header(&right),
            "verify",
        ),
        (
            "deferring: a name nobody has",
            &all,
            "10.3.7.9",
            None,
            header(&unknown),
            "verify",
        ),
        (
            "deferring: a user without a hash",
            &all,
            "10.3.7.9",
            None,
            header(&basic("locked:x")),
            "verify",
        ),
    ];
    for (name, l, addr, country, headers, want) in &cases {
        let lines: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, &v[..])).collect();
        let client = ip(addr);
        // Warm up once (lazy statics, CPU feature detection).
        let out = l.decide(client, *country, &lines[..], Some(&mut cache), &keyer, 0);
        assert_eq!(kind(&out), *want, "{name}");
        drop(out);
        let n = allocations(|| {
            let out = l.decide(client, *country, &lines[..], Some(&mut cache), &keyer, 1);
            kind(&out)
        });
        assert_eq!(n, 0, "{name}");
    }
}

#[test]
fn a_cache_hit_allocates_nothing() {
    let all = list(Satisfy::All, false);
    let keyer = CacheKeyer::new(&SECRET);
    let mut cache = VerifyCache::with_capacity(4096);
    let right = basic("alice:wonderland");
    let lines: [(&str, &[u8]); 1] = [("authorization", &right)];
    let client = ip("10.3.7.9");
    let AccessDecision::Verify(job) = all
        .decide(client, None, &lines[..], Some(&mut cache), &keyer, 0)
        .decision
    else {
        panic!("expected a job")
    };
    assert_eq!(job.run(), VerifyResult::Ok);
    let key = job.cache_key();
    assert_eq!(allocations(|| cache.insert(key, 0)), 0);
    let n = allocations(|| {
        let out = all.decide(client, None, &lines[..], Some(&mut cache), &keyer, 1_000);
        assert!(matches!(
            out.decision,
            AccessDecision::Pass {
                strip_authorization: true
            }
        ));
    });
    assert_eq!(n, 0);
    assert_eq!(
        allocations(|| all.after_verification(VerifyResult::Ok).is_pass()),
        0
    );
}

trait IsPass {
    fn is_pass(&self) -> bool;
}
impl IsPass for AccessDecision<'_> {
    fn is_pass(&self) -> bool {
        matches!(self, AccessDecision::Pass { .. })
    }
}

#[test]
fn accept_time_checks_allocate_nothing() {
    let dropping = list(Satisfy::All, true);
    for addr in ["10.0.0.66", "192.0.2.1", "10.3.7.9", "2001:db8::1"] {
        let a = ip(addr);
        assert_eq!(
            allocations(|| dropping.address_only_verdict(a)),
            0,
            "{addr}"
        );
    }
}

#[test]
fn the_line_allocates_nothing_after_construction() {
    let all = list(Satisfy::All, false);
    let keyer = CacheKeyer::new(&SECRET);
    let right = basic("alice:wonderland");
    let lines: [(&str, &[u8]); 1] = [("authorization", &right)];
    let job = || -> VerifyJob {
        match all
            .decide(ip("10.3.7.9"), None, &lines[..], None, &keyer, 0)
            .decision
        {
            AccessDecision::Verify(job) => job,
            _ => panic!("expected a job"),
        }
    };
    let mut line: VerifyLine<VerifyJob> = VerifyLine::new(LineConfig::for_cores(2));
    let (a, b, c) = (job(), job(), job());
    let n = allocations(|| {
        let first = line.enqueue(a.share_key(), a.client_key(), a, 0).unwrap();
        let twin = line.enqueue(b.share_key(), b.client_key(), b, 1).unwrap();
        assert!(twin.joined);
        let (id, running) = line.next_job().unwrap();
        let waiters = line.complete(id).count();
        drop(running);
        let third = line.enqueue(c.share_key(), c.client_key(), c, 2).unwrap();
        line.cancel(third.ticket);
        let _ = line.expire(20_000);
        (first, waiters)
    });
    assert_eq!(n, 0);
}
