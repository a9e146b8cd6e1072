//! The reference chain of the gate's benchmarks and allocation tests: a
//! client behind a trusted proxy (`X-Forwarded-For`), a 2,000-CIDR access
//! list, a 50-rule set (paths, globs, a regex, methods, user agents), a
//! managed robots.txt and no maintenance, on one `respond` host; and a
//! second host whose list asks for a password.

use gapura_gate::access::password::{hash_password, Verifier};
use gapura_gate::access::{AccessList, AccessListParts, User};
use gapura_gate::cidr::{Cidr, CidrSet};
use gapura_gate::client::{ClientMode, ClientPolicy, ForwardedHeader};
use gapura_gate::country::{AddressRules, Satisfy};
use gapura_gate::host::{HostAction, HostTable};
use gapura_gate::limits::RequestLimits;
use gapura_gate::mode::Mode;
use gapura_gate::pages::ErrorPages;
use gapura_gate::policy::{BlockRef, GatePolicy, HostExtras, RequestPolicy};
use gapura_gate::robots::{Robots, RobotsMode, AI_CRAWLERS};
use gapura_gate::ruleset::{Action, PathPatternKind, RuleSet, RuleSpec, KNOWN_SCANNERS};
use gapura_gate::snapshot::{HostEntry, ServerSettings};
use gapura_gate::{Answer, Snapshot};
use std::net::{IpAddr, Ipv4Addr};

/// The password of the reference user `alice` (hashed at a low iteration
/// count: the benchmarks never run PBKDF2 on the request path).
pub const PASSWORD: &str = "correct horse";

/// 50 rules: 24 exact or prefix paths, 16 globs, 4 method rules, 3
/// user-agent rules, 2 allows and 1 regex, in an operator-like order.
pub fn fifty_rules() -> Vec<RuleSpec> {
    use PathPatternKind::*;
    let deny = || RuleSpec::new(Action::Deny);
    let mut rules = vec![
        RuleSpec::new(Action::Allow).path(Exact, "/wp-admin/admin-ajax.php"),
        RuleSpec::new(Action::Allow).path(Prefix, "/.well-known"),
        deny().user_agent_contains(KNOWN_SCANNERS),
        deny().user_agent_contains(AI_CRAWLERS),
        deny().user_agent_empty().methods(&["POST", "PUT"]),
        deny().methods(&["TRACE"]),
        deny().methods(&["TRACK"]),
        deny().methods(&["CONNECT"]),
        deny().methods(&["PROPFIND"]).path(Prefix, "/"),
    ];
    for p in [
        "/wp-admin",
        "/wp-login.php",
        "/xmlrpc.php",
        "/phpmyadmin",
        "/pma",
        "/.git",
        "/.svn",
        "/.hg",
        "/server-status",
        "/server-info",
        "/cgi-bin",
        "/actuator",
        "/vendor/phpunit",
        "/solr/admin",
        "/manager/html",
        "/console",
        "/.aws",
        "/.ssh",
        "/boaform",
        "/hnap1",
    ] {
        rules.push(deny().path(Prefix, p));
    }
    for p in ["/config.json", "/.ds_store", "/web.config", "/id_rsa"] {
        rules.push(RuleSpec::new(Action::Drop).path(Exact, p));
    }
    for g in [
        "/**/.env",
        "/**/.env.*",
        "/**/*.php",
        "/**/*.asp",
        "/**/*.aspx",
        "/**/*.jsp",
        "/**/*.cgi",
        "/**/.git/**",
        "/**/wp-includes/**",
        "/**/*.sql",
        "/**/*.tar.gz",
        "/**/*.zip",
        "/**/backup*",
        "/**/dump*",
        "/*/admin/*",
        "/**/.htpasswd",
    ] {
        rules.push(deny().path(Glob, g));
    }
    rules.push(deny().path(Regex, r"\.(bak|old|orig|save|swp|tmp)$"));
    assert_eq!(rules.len(), 50);
    rules
}

/// 2,000 IPv4 networks, /16 to /32, plus 203.0.113.0/24 (the clients).
pub fn allow_list() -> CidrSet {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        gapura_gate::testing::xorshift64(&mut x);
        x
    };
    let mut cidrs: Vec<Cidr> = (0..1999)
        .map(|_| {
            let prefix = 16 + (next() % 17) as u8;
            let a = next() as u32 & (u32::MAX << (32 - prefix));
            Cidr::new(IpAddr::V4(Ipv4Addr::from(a)), prefix).expect("masked network")
        })
        .collect();
    cidrs.push(Cidr::parse("203.0.113.0/24").expect("literal"));
    CidrSet::from_cidrs(cidrs)
}

fn respond(body: &str) -> HostAction {
    HostAction::Respond(Answer::new(
        200,
        &[("Content-Type", "text/plain")],
        body.as_bytes(),
    ))
}

/// The reference snapshot: host `app.test` (index 0) with the list, the
/// set and robots; host `auth.test` (index 1) whose list has the user
/// `alice`.
pub fn snapshot() -> Snapshot {
    let mut hosts = HostTable::default();
    hosts.insert("app.test", 0).expect("name");
    hosts.insert("auth.test", 1).expect("name");
    let open = AccessList::from_parts(AccessListParts {
        name: "reference".into(),
        rules: AddressRules {
            allow: allow_list(),
            deny: CidrSet::parse_list(&["192.0.2.0/24"]).expect("literal"),
            ..AddressRules::default()
        },
        ..AccessListParts::default()
    });
    let stored = hash_password(PASSWORD.as_bytes(), 100_000, b"reference-salt");
    let verifier = Verifier::parse(&stored).expect("hash");
    let users = AccessList::from_parts(AccessListParts {
        name: "users".into(),
        satisfy: Satisfy::All,
        users: vec![User::new("alice", Some(verifier))],
        ..AccessListParts::default()
    });
    let set = RuleSet::compile(&fifty_rules()).expect("the reference rules compile");
    let policy = |list: u32| RequestPolicy {
        access: Some(BlockRef {
            index: list,
            mode: Mode::Enforce,
        }),
        rules: Some(BlockRef {
            index: 0,
            mode: Mode::Enforce,
        }),
        ..RequestPolicy::default()
    };
    let extras = || HostExtras {
        robots: Some(Robots::compile(RobotsMode::BlockAiCrawlers, None).expect("robots")),
        ..HostExtras::default()
    };
    Snapshot {
        generation: 1,
        server: ServerSettings::default(),
        hosts,
        entries: vec![
            HostEntry {
                label: "app.test".into(),
                limits: RequestLimits::default(),
                action: respond("ok"),
                policy: policy(0),
                extras: extras(),
            },
            HostEntry {
                label: "auth.test".into(),
                limits: RequestLimits::default(),
                action: respond("secret"),
                policy: policy(1),
                extras: extras(),
            },
        ],
        default_limits: RequestLimits::default(),
        pages: ErrorPages::builtin(),
        upstreams: Vec::new(),
        gate: GatePolicy {
            client: ClientPolicy {
                mode: ClientMode::TrustedProxy(ForwardedHeader::XForwardedFor),
                trusted_proxies: CidrSet::parse_list(&["10.0.0.0/8"]).expect("literal"),
                ..ClientPolicy::default()
            },
            access_lists: vec![open, users],
            rule_sets: vec![set],
            rule_set_names: vec!["reference".into()],
            ..GatePolicy::default()
        },
        udp: Vec::new(),
        tls: None,
        acme: Default::default(),
    }
}

/// A browser's user agent.
pub const CHROME: &[u8] = b"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
