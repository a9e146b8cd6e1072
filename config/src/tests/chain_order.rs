//! The chain runs its steps in the order of docs/gate.md's table: a request
//! that passes every block records one trace step per block, and their
//! order is the table's.

use super::*;
use gapura_gate::chain::{Block, GateState, Request, Step, Trace};
use gapura_gate::client::Peer;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::Verdict;

const GATE_MD: &str = include_str!("../../../docs/gate.md");

/// Every block of the chain applies, and the request passes each one.
const EVERY_BLOCK: &str = r#"
[quota.global]
requests = 1000

[quota.tenant]
header = "x-tenant"
requests = 1000

[[rate_limit]]
name = "site"
requests = 100
per = "second"

[[access_list]]
name = "office"
allow = ["192.0.2.0/24"]
satisfy = "any"
users = [
  { name = "alice", password_hash = "$pbkdf2-sha256$i=100000$4oIHnorXlottSFKouWKuKg$tDCbfNfDmlED4CXmuasw/mB3qPueQOt0glrBdB1jrCk" },
]

[[rule_set]]
name = "edge"

[[rule_set.rule]]
path.prefix = "/admin"
action = "deny"

[[auth_provider]]
name = "sso"
url = "http://127.0.0.1:9091/verify"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["a.test"]
kind = "proxy"
access_list = "office"
rule_set = "edge"
rate_limit = "site"
robots = "disallow_all"
connection_rate = { requests = 10 }
proof_of_work = { enabled = true, difficulty = 8 }
auth = "sso"
https_redirect = true

[host.maintenance]
enabled = true
mode = "shadow"

  [[host.route]]
  path = "/"
  upstream = "app"
"#;

/// Each traced step and the number of its row in docs/gate.md, with the
/// words that row's step column starts with.
fn row_of(step: &Step<'_>) -> Option<(u32, &'static str)> {
    Some(match step {
        Step::Client { .. } => (2, "client address"),
        Step::Host { .. } => (3, "host"),
        // Facts that belong to the host step: no row of their own.
        Step::Path { .. } | Step::Route { .. } => return None,
        Step::Budgets { .. } => (4, "budgets, leases and identity budget"),
        Step::ConnectionRate { .. } => (5, "the connection's request rate"),
        Step::AccessAddress { .. } => (6, "address refusal of the access list"),
        Step::RuleSet { .. } => (7, "rule set"),
        Step::RequestLimits { .. } => (8, "request limits of the host"),
        Step::HttpsRedirect { .. } => (9, "HTTPS redirect"),
        Step::Robots { .. } => (10, "managed `robots.txt`"),
        Step::Maintenance { .. } => (11, "maintenance"),
        Step::Access { .. } => (12, "access list passwords"),
        Step::RateLimit { .. } => (13, "rate limit"),
        Step::ForwardAuth { .. } => (14, "forward-auth"),
        Step::Identity { .. } => (15, "identity dimensions"),
        Step::ProofOfWork { .. } => (16, "proof of work"),
        // The verify endpoint is answered before the blocks.
        Step::PowEndpoint { .. } => return None,
    })
}

/// The block of each row from 4 to 16.
fn block_of_row(n: u32) -> Option<Block> {
    Some(match n {
        4 => Block::Budgets,
        5 => Block::ConnectionRate,
        6 => Block::AccessAddress,
        7 => Block::RuleSet,
        8 => Block::RequestLimits,
        9 => Block::HttpsRedirect,
        10 => Block::Robots,
        11 => Block::Maintenance,
        12 => Block::Access,
        13 => Block::RateLimit,
        14 => Block::ForwardAuth,
        15 => Block::Identity,
        16 => Block::ProofOfWork,
        _ => return None,
    })
}

/// (number, step) of each row of docs/gate.md's chain table.
fn table_rows() -> Vec<(u32, String)> {
    let table = &GATE_MD[GATE_MD
        .find("## The chain, in order")
        .expect("the chain's section")..];
    table
        .lines()
        .filter_map(|l| {
            let mut cells = l.split('|').map(str::trim).skip(1);
            let n = cells.next()?.parse().ok()?;
            Some((n, cells.next()?.to_string()))
        })
        .collect()
}

#[derive(Default)]
struct Rows(Vec<(u32, &'static str)>);

impl Trace for Rows {
    fn step(&mut self, step: Step<'_>) {
        self.0.extend(row_of(&step));
    }
    fn enabled(&self) -> bool {
        true
    }
}

#[test]
fn the_chain_runs_its_blocks_in_the_order_of_the_gate_doc() {
    let mut c = ok(EVERY_BLOCK);
    let key = gapura_gate::pow::PowKey::new(&[3; 32]);
    c.snapshot.gate.pow_key = Some(key.clone());
    let s = &c.snapshot;
    let mut state = GateState::small();
    state.adopt(s, 0);
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let host = gapura_gate::pow::host_id("a.test");
    let client = "192.0.2.1".parse().unwrap();
    let cookie = gapura_gate::pow::mint_cookie(&key, host, client, 3600, 8);
    let cookie = [b"gapura_pow=".as_slice(), &cookie].concat();
    let headers: [(&str, &[u8]); 2] = [("user-agent", b"curl/8"), ("cookie", &cookie)];
    let connection = std::cell::Cell::new(gapura_gate::quota::Bucket::default());
    let req = Request {
        peer: Peer::tcp("192.0.2.1".parse().unwrap()),
        method: b"GET",
        host: Some(b"a.test"),
        target: b"/x",
        path: b"/x",
        header_count: 2,
        header_bytes: 30,
        content_length: None,
        headers: &headers[..],
        connection: Some(&connection),
        // Over TLS: the HTTPS redirect lets it through.
        tls: true,
    };
    // A remembered allow for this request.
    let provider = &s.gate.auth_providers[0];
    let facts = gapura_gate::auth::KeyFacts {
        client,
        // The request came over TLS.
        scheme: b"https",
        host: b"a.test",
        method: b"GET",
        target: b"/x",
        headers: &headers[..],
    };
    let (request_key, host_key) = state.auth.keys(provider, &facts);
    let job = gapura_gate::auth::AuthJob {
        provider: 0,
        request_key,
        host_key,
    };
    state.auth.remember(0, provider, &job, None, 0);
    let mut rows = Rows::default();
    let d = s.decide(&req, &mut state, 0, &mut scratch, &mut rows);
    assert!(
        matches!(d.verdict, Verdict::Forward(..)),
        "every block lets the request through: {:?}",
        d.verdict
    );
    let ran: Vec<u32> = rows.0.iter().map(|r| r.0).collect();
    assert_eq!(
        ran,
        (2..=16).collect::<Vec<_>>(),
        "one step per block, in order"
    );
    // The order a resumed request's steps are counted in is this one.
    let blocks: Vec<Block> = rows.0.iter().filter_map(|r| block_of_row(r.0)).collect();
    assert_eq!(blocks, gapura_gate::chain::ORDER);
    let doc = table_rows();
    for (n, words) in &rows.0 {
        let (_, step) = doc
            .iter()
            .find(|(m, _)| m == n)
            .unwrap_or_else(|| panic!("docs/gate.md has no row {n}"));
        assert!(
            step.starts_with(words),
            "row {n} of docs/gate.md is {step:?}, the chain runs {words:?} there"
        );
    }
}

#[test]
fn every_step_name_is_distinct_and_below_the_count() {
    let all = [
        Block::Host,
        Block::Path,
        Block::Budgets,
        Block::ConnectionRate,
        Block::AccessAddress,
        Block::RuleSet,
        Block::Access,
        Block::RateLimit,
        Block::ForwardAuth,
        Block::Identity,
        Block::ProofOfWork,
        Block::RequestLimits,
        Block::HttpsRedirect,
        Block::Robots,
        Block::Maintenance,
        Block::Answer,
    ];
    assert_eq!(all.len(), Block::COUNT);
    let mut names: Vec<&str> = all.iter().map(|b| b.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Block::COUNT);
    assert!(all.iter().all(|b| (*b as usize) < Block::COUNT));
}

/// One request through the chain: its verdict's name and status.
fn decide_one(
    s: &gapura_gate::Snapshot,
    state: &mut GateState,
    (method, host, path): (&[u8], &[u8], &[u8]),
    headers: &[(&str, &[u8])],
    tls: bool,
    now_ms: u64,
) -> (&'static str, u16) {
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let req = Request {
        peer: Peer::tcp("192.0.2.1".parse().unwrap()),
        method,
        host: Some(host),
        target: path,
        path,
        header_count: headers.len(),
        header_bytes: 30,
        content_length: None,
        headers,
        connection: None,
        tls,
    };
    state.adopt(s, now_ms);
    let d = s.decide(
        &req,
        state,
        now_ms,
        &mut scratch,
        &mut gapura_gate::chain::NoTrace,
    );
    if let Some(t) = d.ticket {
        state.release(t);
    }
    let status = match d.verdict {
        Verdict::Respond(a) => a.status,
        Verdict::HttpsRedirect(_) => 308,
        Verdict::Refuse(st) => st.code(),
        Verdict::Maintenance(m) => m.status(),
        Verdict::Challenge(_) | Verdict::Pow(..) => 403,
        Verdict::Verify(_) | Verdict::Authenticate(_) => 0,
        _ => 1,
    };
    (d.verdict.kind(), status)
}

/// A host behind a password, a provider and proof of work that redirects
/// plain HTTP to HTTPS.
const CREDENTIALS_BEHIND_REDIRECT: &str = r#"
[server]
pow_key_file = "/nonexistent/pow.key"

[[rate_limit]]
name = "site"
requests = 1
per = "minute"

[[access_list]]
name = "office"
users = [
  { name = "alice", password_hash = "$pbkdf2-sha256$i=100000$4oIHnorXlottSFKouWKuKg$tDCbfNfDmlED4CXmuasw/mB3qPueQOt0glrBdB1jrCk" },
]

[[auth_provider]]
name = "sso"
url = "http://127.0.0.1:9091/verify"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["pw.test"]
kind = "proxy"
access_list = "office"
https_redirect = true
robots = "disallow_all"
  [[host.route]]
  path = "/"
  upstream = "app"

[[host]]
names = ["sso.test"]
kind = "proxy"
auth = "sso"
rate_limit = "site"
https_redirect = true
  [[host.route]]
  path = "/"
  upstream = "app"

[[host]]
names = ["pow.test"]
kind = "proxy"
proof_of_work = { enabled = true, difficulty = 8 }
https_redirect = true
  [[host.route]]
  path = "/"
  upstream = "app"
"#;

#[test]
fn plain_http_is_redirected_before_any_password_provider_or_challenge() {
    let mut c = ok(CREDENTIALS_BEHIND_REDIRECT);
    c.snapshot.gate.pow_key = Some(gapura_gate::pow::PowKey::new(&[3; 32]));
    let s = &c.snapshot;
    let mut state = GateState::small();
    let html: [(&str, &[u8]); 2] = [
        ("accept", b"text/html"),
        ("authorization", b"Basic YWxpY2U6c2VjcmV0"),
    ];
    for host in [&b"pw.test"[..], b"sso.test", b"pow.test"] {
        assert_eq!(
            decide_one(s, &mut state, (b"GET", host, b"/x"), &html, false, 0),
            ("https_redirect", 308),
            "{}",
            String::from_utf8_lossy(host)
        );
    }
    // Over TLS the same requests meet the password, the provider and the
    // challenge.
    assert_eq!(
        decide_one(s, &mut state, (b"GET", b"pw.test", b"/x"), &html, true, 0).0,
        "verify"
    );
    assert_eq!(
        decide_one(s, &mut state, (b"GET", b"sso.test", b"/x"), &html, true, 0).0,
        "authenticate"
    );
    assert_eq!(
        decide_one(s, &mut state, (b"GET", b"pow.test", b"/x"), &html, true, 0).0,
        "pow_challenge"
    );
}

#[test]
fn a_managed_robots_txt_is_served_on_a_host_behind_a_password() {
    let c = ok(CREDENTIALS_BEHIND_REDIRECT);
    let s = &c.snapshot;
    let mut state = GateState::small();
    assert_eq!(
        decide_one(
            s,
            &mut state,
            (b"GET", b"pw.test", b"/robots.txt"),
            &[],
            true,
            0
        ),
        ("respond", 200)
    );
    assert_eq!(state.counters.robots_served, 1);
}

const MAINTENANCE_BEFORE_THE_ROUTE: &str = r#"
[[rate_limit]]
name = "site"
requests = 1
per = "minute"

[[auth_provider]]
name = "sso"
url = "http://127.0.0.1:9091/verify"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["m.test"]
kind = "proxy"
auth = "sso"
rate_limit = "site"

[host.maintenance]
enabled = true

  [[host.route]]
  path = "/"
  upstream = "app"
"#;

#[test]
fn maintenance_answers_before_the_provider_and_the_rate_limit() {
    let mut c = ok(MAINTENANCE_BEFORE_THE_ROUTE);
    let s = &c.snapshot;
    let mut state = GateState::small();
    for _ in 0..3 {
        assert_eq!(
            decide_one(s, &mut state, (b"GET", b"m.test", b"/"), &[], false, 0),
            ("maintenance", 503)
        );
    }
    // No rate-limit token was spent: with maintenance off, the first
    // request goes on to the provider.
    let text = MAINTENANCE_BEFORE_THE_ROUTE.replace("enabled = true", "enabled = false");
    c = ok(&text);
    assert_eq!(
        decide_one(
            &c.snapshot,
            &mut state,
            (b"GET", b"m.test", b"/"),
            &[],
            false,
            0
        )
        .0,
        "authenticate"
    );
}

#[test]
fn robots_txt_pays_the_budgets_and_is_exempt_from_the_rate_limit_only() {
    // One shard: the global budget is the shard's whole.
    let c = ok_with(
        r#"
[quota]
window_ms = 60000

[quota.global]
requests = 5

[[rate_limit]]
name = "site"
requests = 1
per = "minute"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["r.test"]
kind = "proxy"
rate_limit = "site"
robots = "passthrough"
  [[host.route]]
  path = "/"
  upstream = "app"
"#,
        1,
    );
    let s = &c.snapshot;
    let mut state = GateState::small();
    // Past the rate limit of 1 a minute: robots.txt is not rate limited...
    for i in 0..5 {
        assert_eq!(
            decide_one(
                s,
                &mut state,
                (b"GET", b"r.test", b"/robots.txt"),
                &[],
                false,
                0
            ),
            ("forward", 1),
            "request {i}"
        );
    }
    // ...but it paid the global budget of 5 like any request.
    assert_eq!(
        decide_one(
            s,
            &mut state,
            (b"GET", b"r.test", b"/robots.txt"),
            &[],
            false,
            0
        ),
        ("refuse", 429)
    );
    assert_eq!(
        decide_one(s, &mut state, (b"GET", b"r.test", b"/page"), &[], false, 0),
        ("refuse", 429)
    );
}
