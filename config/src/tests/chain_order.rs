//! The chain runs its steps in the order of docs/gate.md's table: a request
//! that passes every block records one trace step per block, and their
//! order is the table's.

use super::*;
use gapura_gate::chain::{GateState, Request, Step, Trace};
use gapura_gate::client::Peer;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::Verdict;

const GATE_MD: &str = include_str!("../../../docs/gate.md");

/// Every block of the chain applies, and the request passes each one.
const EVERY_BLOCK: &str = r#"
[quota.global]
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
        Step::Access { .. } => (8, "access list passwords"),
        Step::RateLimit { .. } => (9, "rate limit"),
        Step::ForwardAuth { .. } => (10, "forward-auth"),
        Step::ProofOfWork { .. } => (11, "proof of work"),
        // The verify endpoint is answered before the blocks.
        Step::PowEndpoint { .. } => return None,
        Step::RequestLimits { .. } => (12, "request limits of the host"),
        Step::HttpsRedirect { .. } => (13, "HTTPS redirect"),
        Step::Robots { .. } => (14, "managed `robots.txt`"),
        Step::Maintenance { .. } => (15, "maintenance"),
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
        scheme: b"http",
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
        (2..=15).collect::<Vec<_>>(),
        "one step per block, in order"
    );
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
    use gapura_gate::chain::Block;
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
