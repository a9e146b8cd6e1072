use super::*;
use crate::cidr::CidrSet;
use crate::country::CountryRules;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use password::hash_password;

const SECRET: [u8; 32] = [3; 32];
/// Low iterations keep the tests fast; the profile validator refuses them.
const ITERATIONS: u32 = 10;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn user(name: &str, password: &str) -> User {
    let line = hash_password(password.as_bytes(), ITERATIONS, b"salt-for-tests!!");
    User::new(name, Some(Verifier::parse(&line).unwrap()))
}

fn list(allow: &[&str], deny: &[&str], satisfy: Satisfy, drop_denied: bool) -> AccessList {
    AccessList::from_parts(AccessListParts {
        name: "staff".into(),
        rules: AddressRules {
            allow: CidrSet::parse_list(allow).unwrap(),
            deny: CidrSet::parse_list(deny).unwrap(),
            countries: CountryRules::default(),
        },
        drop_denied,
        satisfy,
        pass_credentials: false,
        realm: Some("Staff".into()),
        users: vec![user("alice", "wonderland"), User::new("locked", None)],
    })
}

fn basic(raw: &str) -> Vec<u8> {
    format!("Basic {}", STANDARD.encode(raw)).into_bytes()
}

/// What happens to one request, with a cold or warm `cache`, as a word:
/// the job (if any) is run inline and a success fills the cache.
fn run(
    l: &AccessList,
    addr: &str,
    country: Option<Country>,
    auth: Option<&[u8]>,
    cache: &mut VerifyCache,
    now_ms: u64,
) -> String {
    let keyer = CacheKeyer::new(&SECRET);
    let headers: Vec<(&str, &[u8])> = auth.map(|a| ("Authorization", a)).into_iter().collect();
    let out = l.decide(ip(addr), country, &headers[..], Some(cache), &keyer, now_ms);
    match out.decision {
        AccessDecision::Pass {
            strip_authorization,
        } => if strip_authorization {
            "pass+strip"
        } else {
            "pass"
        }
        .to_string(),
        AccessDecision::Refuse => "refuse".into(),
        AccessDecision::Drop => "drop".into(),
        AccessDecision::Challenge(page) => {
            assert_eq!(page.text.status, 401);
            format!("challenge:{}", out.credentials.as_str())
        }
        AccessDecision::Verify(job) => {
            let result = job.run();
            if result.is_ok() {
                cache.insert(job.cache_key(), now_ms);
            }
            format!("verify:{}", result.as_str())
        }
    }
}

const DENIED: &str = "192.0.2.66";
const ALLOWED: &str = "192.0.2.10";
const OUTSIDE: &str = "198.51.100.1";

/// The credentials every address is tried with, and their names.
fn credential_cases() -> Vec<(&'static str, Option<Vec<u8>>)> {
    vec![
        ("none", None),
        ("bearer", Some(b"Bearer abc".to_vec())),
        ("unreadable", Some(b"Basic %%%".to_vec())),
        ("unknown", Some(basic("mallory:wonderland"))),
        ("locked", Some(basic("locked:anything"))),
        ("wrong", Some(basic("alice:rabbit"))),
        ("right", Some(basic("alice:wonderland"))),
    ]
}

fn matrix(l: &AccessList) -> Vec<String> {
    let mut rows = Vec::new();
    for addr in [DENIED, ALLOWED, OUTSIDE] {
        let mut cache = VerifyCache::with_capacity(64);
        for (name, auth) in credential_cases() {
            let got = run(l, addr, None, auth.as_deref(), &mut cache, 1_000);
            rows.push(format!("{addr} {name} -> {got}"));
        }
        // The right password again: now from the cache.
        let again = run(
            l,
            addr,
            None,
            Some(&basic("alice:wonderland")),
            &mut cache,
            2_000,
        );
        rows.push(format!("{addr} right again -> {again}"));
    }
    rows
}

fn expect(addr: &str, outcomes: [&str; 8]) -> Vec<String> {
    let names = [
        "none",
        "bearer",
        "unreadable",
        "unknown",
        "locked",
        "wrong",
        "right",
        "right again",
    ];
    names
        .iter()
        .zip(outcomes)
        .map(|(n, o)| format!("{addr} {n} -> {o}"))
        .collect()
}

const ASKED: [&str; 8] = [
    "challenge:missing",
    "challenge:missing",
    "challenge:unreadable",
    "verify:unknown_user",
    "verify:no_password",
    "verify:wrong_password",
    "verify:ok",
    "pass+strip",
];

#[test]
fn satisfy_all_needs_the_address_and_the_password() {
    let l = list(&["192.0.2.0/24"], &[DENIED], Satisfy::All, false);
    let mut want = expect(DENIED, ["refuse"; 8]);
    want.extend(expect(ALLOWED, ASKED));
    want.extend(expect(OUTSIDE, ["refuse"; 8]));
    assert_eq!(matrix(&l), want);
}

#[test]
fn satisfy_any_takes_the_address_or_the_password() {
    let l = list(&["192.0.2.0/24"], &[DENIED], Satisfy::Any, false);
    let mut want = expect(DENIED, ["refuse"; 8]);
    // An allowed address consumed nothing: nothing is stripped.
    want.extend(expect(ALLOWED, ["pass"; 8]));
    want.extend(expect(OUTSIDE, ASKED));
    assert_eq!(matrix(&l), want);
}

#[test]
fn drop_denied_aborts_wherever_the_address_refuses() {
    let all = list(&["192.0.2.0/24"], &[DENIED], Satisfy::All, true);
    let mut want = expect(DENIED, ["drop"; 8]);
    want.extend(expect(ALLOWED, ASKED));
    want.extend(expect(OUTSIDE, ["drop"; 8]));
    assert_eq!(matrix(&all), want);
    let any = list(&["192.0.2.0/24"], &[DENIED], Satisfy::Any, true);
    let mut want = expect(DENIED, ["drop"; 8]);
    want.extend(expect(ALLOWED, ["pass"; 8]));
    want.extend(expect(OUTSIDE, ASKED));
    assert_eq!(matrix(&any), want);
}

#[test]
fn users_without_address_rules_ask_everyone_under_either_mode() {
    for satisfy in [Satisfy::All, Satisfy::Any] {
        let l = list(&[], &[], satisfy, false);
        let mut want = expect(DENIED, ASKED);
        want.extend(expect(ALLOWED, ASKED));
        want.extend(expect(OUTSIDE, ASKED));
        assert_eq!(matrix(&l), want, "{satisfy:?}");
    }
}

#[test]
fn address_rules_without_users_never_ask() {
    let mut l = list(&["192.0.2.0/24"], &[DENIED], Satisfy::Any, false);
    l.users = Box::new([]);
    let mut want = expect(DENIED, ["refuse"; 8]);
    want.extend(expect(ALLOWED, ["pass"; 8]));
    want.extend(expect(OUTSIDE, ["refuse"; 8]));
    assert_eq!(matrix(&l), want);
}

fn country_list(satisfy: Satisfy, drop_denied: bool) -> AccessList {
    AccessList::from_parts(AccessListParts {
        name: "geo".into(),
        rules: AddressRules {
            countries: CountryRules::parse(&["DE"], &["RU"]).unwrap(),
            ..AddressRules::default()
        },
        drop_denied,
        satisfy,
        users: vec![user("alice", "wonderland")],
        ..AccessListParts::default()
    })
}

#[test]
fn a_denied_country_with_a_valid_password_under_any_is_refused() {
    let ru = Country::parse_code("RU");
    let right = basic("alice:wonderland");
    let mut cache = VerifyCache::with_capacity(64);
    let l = country_list(Satisfy::Any, false);
    assert_eq!(run(&l, OUTSIDE, ru, Some(&right), &mut cache, 0), "refuse");
    let dropping = country_list(Satisfy::Any, true);
    assert_eq!(
        run(&dropping, OUTSIDE, ru, Some(&right), &mut cache, 0),
        "drop"
    );
    // The password was never looked at.
    let keyer = CacheKeyer::new(&SECRET);
    let headers: [(&str, &[u8]); 1] = [("authorization", &right)];
    let out = l.decide(ip(OUTSIDE), ru, &headers[..], None, &keyer, 0);
    assert_eq!(out.credentials, CredentialsFact::NotAsked);
    assert_eq!(out.address.country, crate::country::RuleVerdict::Denied);
    // A country merely outside the allow list may sign in instead.
    let fr = Country::parse_code("FR");
    assert_eq!(
        run(&l, OUTSIDE, fr, Some(&right), &mut cache, 0),
        "verify:ok"
    );
    assert_eq!(
        run(&l, OUTSIDE, fr, None, &mut cache, 0),
        "challenge:missing"
    );
    let de = Country::parse_code("DE");
    assert_eq!(run(&l, OUTSIDE, de, None, &mut cache, 0), "pass");
}

fn job_for(l: &AccessList, addr: &str, auth: &[u8]) -> VerifyJob {
    let keyer = CacheKeyer::new(&SECRET);
    let headers: [(&str, &[u8]); 1] = [("authorization", auth)];
    let mut cache = VerifyCache::with_capacity(64);
    match l
        .decide(ip(addr), None, &headers[..], Some(&mut cache), &keyer, 0)
        .decision
    {
        AccessDecision::Verify(job) => job,
        other => panic!("expected a job, got {other:?}"),
    }
}

#[test]
fn an_unknown_name_still_gets_a_verification_that_always_fails() {
    let l = list(&[], &[], Satisfy::All, false);
    let real = job_for(&l, ALLOWED, &basic("alice:wonderland"));
    for name in ["mallory", "Alice", "alic", "alice ", "locked"] {
        let job = job_for(&l, ALLOWED, &basic(&format!("{name}:wonderland")));
        let want = if name == "locked" {
            Subject::NoPassword
        } else {
            Subject::UnknownUser
        };
        assert_eq!(job.subject(), want, "{name}");
        // As costly as a real check, shared as a real one is, never a pass.
        assert_eq!(job.iterations(), real.iterations());
        assert_eq!(job.share_key(), job.cache_key());
        assert!(!job.run().is_ok());
        assert_ne!(job.cache_key(), 0);
    }
    // Even a cache entry under a dummy job's key is never believed.
    let keyer = CacheKeyer::new(&SECRET);
    let mut cache = VerifyCache::with_capacity(64);
    let unknown = basic("mallory:x");
    let job = job_for(&l, ALLOWED, &unknown);
    cache.insert(job.cache_key(), 0);
    let headers: [(&str, &[u8]); 1] = [("authorization", &unknown)];
    let out = l.decide(ip(ALLOWED), None, &headers[..], Some(&mut cache), &keyer, 1);
    assert!(matches!(out.decision, AccessDecision::Verify(_)));
}

#[test]
fn the_dummy_costs_what_the_costliest_user_costs() {
    let slow = User::new(
        "bob",
        Some(Verifier::parse(&hash_password(b"pw", 25, b"another-salt")).unwrap()),
    );
    let l = AccessList::from_parts(AccessListParts {
        name: "x".into(),
        users: vec![user("alice", "wonderland"), slow],
        ..AccessListParts::default()
    });
    assert_eq!(job_for(&l, ALLOWED, &basic("nobody:pw")).iterations(), 25);
    let none = AccessList::from_parts(AccessListParts {
        name: "x".into(),
        users: vec![User::new("locked", None)],
        ..AccessListParts::default()
    });
    assert_eq!(
        job_for(&none, ALLOWED, &basic("locked:pw")).iterations(),
        DEFAULT_ITERATIONS
    );
}

#[test]
fn jobs_for_identical_credentials_share_a_key_and_others_do_not() {
    let l = list(&[], &[], Satisfy::All, false);
    let a = job_for(&l, ALLOWED, &basic("alice:wonderland"));
    let b = job_for(&l, ALLOWED, &basic("alice:wonderland"));
    assert_eq!(a.share_key(), b.share_key());
    assert_eq!(a.share_key(), a.cache_key());
    assert_ne!(
        a.share_key(),
        job_for(&l, ALLOWED, &basic("alice:rabbit")).share_key()
    );
    assert_ne!(
        a.share_key(),
        job_for(&l, OUTSIDE, &basic("alice:wonderland")).share_key()
    );
    assert_eq!(a.client_key(), b.client_key());
    assert_eq!(
        format!("{a:?}"),
        "VerifyJob { subject: User, iterations: 10, .. }"
    );
}

#[test]
fn a_cache_hit_passes_without_verification_and_strips_credentials() {
    let l = list(&[], &[], Satisfy::All, false);
    let keyer = CacheKeyer::new(&SECRET);
    let right = basic("alice:wonderland");
    let headers: [(&str, &[u8]); 1] = [("authorization", &right)];
    let mut cache = VerifyCache::with_capacity(64);
    let job = job_for(&l, ALLOWED, &right);
    assert_eq!(job.run(), VerifyResult::Ok);
    cache.insert(job.cache_key(), 10_000);
    let out = l.decide(
        ip(ALLOWED),
        None,
        &headers[..],
        Some(&mut cache),
        &keyer,
        20_000,
    );
    assert!(matches!(
        out.decision,
        AccessDecision::Pass {
            strip_authorization: true
        }
    ));
    assert_eq!(out.credentials, CredentialsFact::CacheHit);
    // Another client with the same credentials is not covered.
    let out = l.decide(
        ip(OUTSIDE),
        None,
        &headers[..],
        Some(&mut cache),
        &keyer,
        20_000,
    );
    assert!(matches!(out.decision, AccessDecision::Verify(_)));
    // Explain passes no cache: it neither reads nor refreshes it.
    let before = cache.expiry_of(job.cache_key());
    let out = l.decide(ip(ALLOWED), None, &headers[..], None, &keyer, 200_000);
    assert!(matches!(out.decision, AccessDecision::Verify(_)));
    assert_eq!(cache.expiry_of(job.cache_key()), before);
    // Past the TTL the entry is gone.
    let out = l.decide(
        ip(ALLOWED),
        None,
        &headers[..],
        Some(&mut cache),
        &keyer,
        10_000 + cache::TTL_MS,
    );
    assert!(matches!(out.decision, AccessDecision::Verify(_)));
}

#[test]
fn a_changed_password_finds_no_old_cache_entry() {
    let l = list(&[], &[], Satisfy::All, false);
    let old = job_for(&l, ALLOWED, &basic("alice:wonderland"));
    let line = hash_password(b"wonderland", ITERATIONS, b"a-fresh-salt-now");
    let changed = AccessList::from_parts(AccessListParts {
        name: "staff".into(),
        users: vec![User::new("alice", Some(Verifier::parse(&line).unwrap()))],
        ..AccessListParts::default()
    });
    let new = job_for(&changed, ALLOWED, &basic("alice:wonderland"));
    assert_ne!(old.cache_key(), new.cache_key());
}

#[test]
fn pass_credentials_keeps_the_header_after_a_pass() {
    let mut l = list(&[], &[], Satisfy::All, false);
    l.pass_credentials = true;
    assert!(l.pass_credentials());
    let mut cache = VerifyCache::with_capacity(64);
    let right = basic("alice:wonderland");
    assert_eq!(
        run(&l, ALLOWED, None, Some(&right), &mut cache, 0),
        "verify:ok"
    );
    assert_eq!(run(&l, ALLOWED, None, Some(&right), &mut cache, 1), "pass");
    assert!(matches!(
        l.after_verification(VerifyResult::Ok),
        AccessDecision::Pass {
            strip_authorization: false
        }
    ));
    let strict = list(&[], &[], Satisfy::All, false);
    assert!(!strict.pass_credentials());
    assert!(matches!(
        strict.after_verification(VerifyResult::Ok),
        AccessDecision::Pass {
            strip_authorization: true
        }
    ));
    for r in [
        VerifyResult::WrongPassword,
        VerifyResult::UnknownUser,
        VerifyResult::NoPassword,
    ] {
        assert!(matches!(
            strict.after_verification(r),
            AccessDecision::Challenge(_)
        ));
    }
}

#[test]
fn malformed_authorization_headers_are_challenged() {
    let l = list(&[], &[], Satisfy::All, false);
    let keyer = CacheKeyer::new(&SECRET);
    let mut huge = b"Basic ".to_vec();
    huge.extend(std::iter::repeat_n(b'Q', 5000));
    let cases: Vec<(Vec<u8>, CredentialsFact)> = vec![
        (
            b"Basic !!".to_vec(),
            CredentialsFact::Unreadable(Unreadable::Base64),
        ),
        (
            basic("alicewonderland"),
            CredentialsFact::Unreadable(Unreadable::NoColon),
        ),
        (huge, CredentialsFact::Unreadable(Unreadable::TooLong)),
        (
            format!("Basic {}", STANDARD.encode(b"alice:\xff\xfe")).into_bytes(),
            CredentialsFact::Unreadable(Unreadable::NotUtf8),
        ),
        (
            basic(&format!("{}:pw", "a".repeat(65))),
            CredentialsFact::Unreadable(Unreadable::Name),
        ),
        (
            b"Basic".to_vec(),
            CredentialsFact::Unreadable(Unreadable::Empty),
        ),
        (b"Negotiate abc".to_vec(), CredentialsFact::Missing),
        (b"".to_vec(), CredentialsFact::Missing),
    ];
    for (value, want) in cases {
        let headers: [(&str, &[u8]); 1] = [("authorization", &value)];
        let out = l.decide(ip(ALLOWED), None, &headers[..], None, &keyer, 0);
        assert!(
            matches!(out.decision, AccessDecision::Challenge(_)),
            "{want:?}"
        );
        assert_eq!(out.credentials, want);
    }
    let right = basic("alice:wonderland");
    let twice: [(&str, &[u8]); 2] = [("authorization", &right), ("Authorization", &right)];
    let out = l.decide(ip(ALLOWED), None, &twice[..], None, &keyer, 0);
    assert_eq!(
        out.credentials,
        CredentialsFact::Unreadable(Unreadable::Repeated)
    );
}

#[test]
fn the_challenge_and_busy_pages_are_precomputed() {
    let l = list(&[], &[], Satisfy::All, false);
    for html in [false, true] {
        let page = l.challenge_page();
        let a = if html { &page.html } else { &page.text };
        let head = std::str::from_utf8(a.head()).unwrap();
        assert!(head.starts_with("HTTP/1.1 401 Unauthorized\r\n"));
        assert!(head.contains("\r\nWWW-Authenticate: Basic realm=\"Staff\", charset=\"UTF-8\"\r\n"));
        assert!(head.contains("\r\nCache-Control: no-store\r\n"));
        let busy = if html {
            &l.busy_page().html
        } else {
            &l.busy_page().text
        };
        let head = std::str::from_utf8(busy.head()).unwrap();
        assert!(head.starts_with("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n"));
    }
    assert_eq!(
        l.challenge_page().text.body(),
        b"401 Unauthorized\nauthentication required\nrequest ------------------------\n"
    );
    // The realm defaults to the list's name.
    let unnamed = AccessList::from_parts(AccessListParts {
        name: "office".into(),
        ..AccessListParts::default()
    });
    assert_eq!(unnamed.realm(), "office");
    assert!(std::str::from_utf8(unnamed.challenge_page().text.head())
        .unwrap()
        .contains("realm=\"office\""));
}

#[test]
fn the_address_alone_decides_at_accept_only_when_nothing_else_can_matter() {
    let mut no_users = list(&["192.0.2.0/24"], &[DENIED], Satisfy::All, false);
    no_users.users = Box::new([]);
    assert_eq!(
        no_users.address_only_verdict(ip(DENIED)),
        Some(AddressRefusal::Deny)
    );
    assert_eq!(
        no_users.address_only_verdict(ip(OUTSIDE)),
        Some(AddressRefusal::Deny)
    );
    assert_eq!(no_users.address_only_verdict(ip(ALLOWED)), None);
    let dropping = list(&["192.0.2.0/24"], &[DENIED], Satisfy::Any, true);
    assert_eq!(
        dropping.address_only_verdict(ip(DENIED)),
        Some(AddressRefusal::Drop)
    );
    // Under `any` an address outside the allow list may still sign in.
    assert_eq!(dropping.address_only_verdict(ip(OUTSIDE)), None);
    assert_eq!(dropping.address_only_verdict(ip(ALLOWED)), None);
    // Country rules alone never decide at accept.
    let geo = country_list(Satisfy::All, true);
    assert_eq!(geo.address_only_verdict(ip(OUTSIDE)), None);
    // A denied address decides whatever the country.
    let mut both = country_list(Satisfy::Any, true);
    both.rules.deny = CidrSet::parse_list(&[DENIED]).unwrap();
    assert_eq!(
        both.address_only_verdict(ip(DENIED)),
        Some(AddressRefusal::Drop)
    );
}

#[test]
fn users_print_without_secrets() {
    let u = user("alice", "wonderland");
    assert_eq!(
        format!("{u:?}"),
        "User { name: \"alice\", has_password: true }"
    );
    assert_eq!(u.name(), b"alice");
    assert!(!User::new("x", None).has_password());
}

#[test]
fn names_match_exactly_at_any_index_and_length() {
    let mut users: Vec<User> = (0..50).map(|i| user(&format!("user{i}"), "pw")).collect();
    users.push(user("alice", "wonderland"));
    let l = AccessList::from_parts(AccessListParts {
        name: "many".into(),
        users,
        ..AccessListParts::default()
    });
    assert_eq!(l.find_user(b"alice"), (50, true));
    assert_eq!(l.find_user(b"user0"), (0, true));
    assert_eq!(l.find_user(b"user49"), (49, true));
    // Zero padding never makes a longer or shorter name equal.
    assert!(!l.find_user(b"alice\0").1);
    assert!(!l.find_user(b"alic").1);
    assert_eq!(l.find_user(b"user4"), (4, true));
    assert!(!l.find_user(&[b'a'; 64]).1);
    let job = job_for(&l, ALLOWED, &basic("alice\0:wonderland"));
    assert_eq!(job.subject(), Subject::UnknownUser);
    let job = job_for(&l, ALLOWED, &basic("alice:wonderland"));
    assert_eq!(job.run(), VerifyResult::Ok);
}

#[test]
fn identical_requests_join_one_job_whether_or_not_the_name_exists() {
    use super::line::{LineConfig, VerifyLine};
    let l = list(&[], &[], Satisfy::All, false);
    // Counted in jobs, not by the clock: three identical requests for a
    // real user and three for a name nobody has make one job each.
    for creds in ["alice:wrong", "mallory:wrong"] {
        let mut line: VerifyLine<()> = VerifyLine::new(LineConfig::for_cores(2));
        let mut joined = Vec::new();
        for _ in 0..3 {
            let job = job_for(&l, ALLOWED, &basic(creds));
            let e = line
                .enqueue(job.share_key(), job.client_key(), (), 0)
                .unwrap();
            joined.push(e.joined);
        }
        assert_eq!(joined, [false, true, true], "{creds}");
    }
}
