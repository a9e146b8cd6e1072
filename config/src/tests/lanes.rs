//! The lanes (`gapura_gate::chain::quiet_host`, `paying_host`,
//! `Snapshot::lane_answer`): which hosts take them, and for a long run of
//! varied requests the paying lane's verdicts, leases, refusals and
//! counters against the whole chain's.

use super::*;
use gapura_gate::chain::{applies, paying_host, quiet_host, Block, ORDER, PAYING_RUNS, QUIET_RUNS};
use gapura_gate::client::Peer;
use gapura_gate::testing::lanes::LaneRun;
use gapura_gate::testing::xorshift64;
use gapura_gate::Snapshot;

/// A respond host with no block of its own, and the lists and the rate
/// limit a block may name.
const BASE: &str = r#"
[[access_list]]
name = "office"
allow = ["192.0.2.0/24"]

[[rule_set]]
name = "edge"

[[rule_set.rule]]
path.prefix = "/admin"
action = "deny"

[[rate_limit]]
name = "site"
requests = 100

[[host]]
names = ["a.test"]
kind = "respond"
status = 200
body = "a"
"#;

/// The blocks other than the budgets and the rate limit, each turned on
/// by a line of the host's.
const BLOCKS: [(&str, &str); 5] = [
    ("connection rate", "connection_rate = { requests = 10 }\n"),
    ("access list", "access_list = \"office\"\n"),
    ("rule set", "rule_set = \"edge\"\n"),
    ("robots.txt", "robots = \"disallow_all\"\n"),
    ("maintenance", "\n[host.maintenance]\nenabled = true\n"),
];

/// The host's lanes in a profile: quiet, paying.
fn lanes(src: &str) -> (bool, bool) {
    let c = ok(src);
    let entry = &c.snapshot.entries[0];
    (
        quiet_host(&c.snapshot, entry),
        paying_host(&c.snapshot, entry),
    )
}

/// The quiet lane (`quiet_host`) reads each block's setting apart from
/// the block: a respond host is quiet with every protection off, and
/// turning any one block on takes it off the lane.
#[test]
fn any_block_turned_on_takes_a_host_off_the_quiet_lane() {
    // The host's line first, then every protection off.
    let off = |toml: &str| format!("{BASE}{toml}\n[protection]\noff = [\"all\"]\n");
    let quiet = |src: &str| lanes(src).0;
    assert!(quiet(&off("")), "every block off");
    assert!(
        lanes(&off("")).1,
        "a quiet fixed answer is a paying host too"
    );
    let budgets = ("budgets", "\n[quota.global]\nrequests = 1000\n");
    let rate = ("rate limit", "rate_limit = \"site\"\n");
    for (block, toml) in BLOCKS.into_iter().chain([budgets, rate]) {
        assert!(!quiet(&off(toml)), "{block} on");
    }
    // Proof of work challenges proxy routes only (docs/profile.md): on a
    // respond host its block does nothing, and the host stays quiet.
    let pow = "proof_of_work = { enabled = true, difficulty = 8 }\n";
    assert!(quiet(&off(pow)), "proof of work on a respond host");
}

/// What turns `block` on for BASE's respond host (a line of the host's,
/// or a section after it), or why a respond host cannot have it on. One
/// exhaustive match: a block added to the chain must be named here, and
/// the test below then holds the lanes to it.
fn turn_on(block: Block) -> Result<&'static str, &'static str> {
    match block {
        Block::Budgets => Ok("\n[quota.global]\nrequests = 1000\n"),
        Block::ConnectionRate => Ok("connection_rate = { requests = 10 }\n"),
        Block::AccessAddress | Block::Access => Ok("access_list = \"office\"\n"),
        Block::RuleSet => Ok("rule_set = \"edge\"\n"),
        Block::HttpsRedirect => Ok("https_redirect = true\n"),
        Block::Robots => Ok("robots = \"disallow_all\"\n"),
        Block::Maintenance => Ok("\n[host.maintenance]\nenabled = true\n"),
        Block::RateLimit => Ok("rate_limit = \"site\"\n"),
        Block::RequestLimits => Err("every request is held to its limits"),
        Block::ForwardAuth => Err("forward-auth checks proxy routes only"),
        Block::Identity => Ok("\n[quota.tenant]\nheader = \"x-tenant\"\nrequests = 1000\n"),
        Block::ProofOfWork => Err("proof of work challenges proxy routes only"),
        Block::Host | Block::Path | Block::Answer => Err("not a host's block"),
    }
}

/// Every block of the chain's order, turned on alone on a respond host
/// with every protection off: it applies (`applies`), and the host keeps
/// a lane only where the lane runs that block itself.
#[test]
fn every_block_of_the_chain_takes_a_host_off_the_lanes_that_do_not_run_it() {
    let off = |toml: &str| format!("{BASE}{toml}\n[protection]\noff = [\"all\"]\n");
    let mut turned = 0;
    for block in ORDER {
        let Ok(toml) = turn_on(block) else {
            continue;
        };
        let c = ok(&off(toml));
        let (s, entry) = (&c.snapshot, &c.snapshot.entries[0]);
        assert!(applies(s, entry, block), "{block:?} applies once on");
        assert_eq!(
            quiet_host(s, entry),
            QUIET_RUNS.contains(&block),
            "{block:?}: the quiet lane"
        );
        assert_eq!(
            paying_host(s, entry),
            PAYING_RUNS.contains(&block),
            "{block:?}: the paying lane"
        );
        turned += 1;
    }
    assert_eq!(turned, 10, "the blocks a respond host can turn on");
    // With every block off, only the request limits apply.
    let c = ok(&off(""));
    let (s, entry) = (&c.snapshot, &c.snapshot.entries[0]);
    for block in ORDER {
        assert_eq!(
            applies(s, entry, block),
            block == Block::RequestLimits,
            "{block:?}"
        );
    }
}

/// The budgets and a rate limit keep a respond host on the paying lane;
/// any other block takes it off, as does an action that is not a fixed
/// answer. The embedded default profile's host is a paying host.
#[test]
fn any_block_but_the_budgets_and_the_rate_limit_takes_a_host_off_the_paying_lane() {
    // The default's budgets, and a rate limit.
    let paying_src = format!("{BASE}rate_limit = \"site\"\n");
    let paying = |src: &str| lanes(src).1;
    assert!(paying(&paying_src), "budgets and a rate limit");
    assert!(!lanes(&paying_src).0, "not quiet");
    for (block, toml) in BLOCKS {
        assert!(!paying(&format!("{paying_src}{toml}")), "{block} on");
    }
    let redirect = paying_src.replace(
        "kind = \"respond\"\nstatus = 200\nbody = \"a\"",
        "kind = \"redirect\"\nstatus = 301\ntarget = \"https://example.com\"",
    );
    assert!(!paying(&redirect), "a redirect");
    // The embedded default's host, under its protections, is one.
    assert!(paying(crate::DEFAULT_PROFILE), "the embedded default");
    let c = ok(crate::DEFAULT_PROFILE);
    assert!(c.snapshot.gate.has_budgets());
}

/// Budgets small enough to refuse within the run, every level the lane
/// pays (global, source, identity, their concurrency), and hosts with a
/// rate limit of each key, in shadow, and with IPv6 tiers.
fn profile(client: &str) -> String {
    format!(
        r#"{client}
[quota]
window_ms = 1000

[quota.global]
requests = 60
concurrent = 64

[quota.source]
requests = 12
concurrent = 2

[quota.identity]
header = "authorization"
requests = 7

[[rate_limit]]
name = "ip"
requests = 20
per = "minute"
burst = 5
ipv6_tiers = [{{ prefix = 56, requests = 30, burst = 8 }}]

[[rate_limit]]
name = "path"
requests = 30
per = "minute"
burst = 3
key = "ip_path"

[[rate_limit]]
name = "user"
requests = 30
per = "minute"
burst = 4
key = "header"
header = "x-user"

[[rate_limit]]
name = "quiet"
requests = 1
per = "hour"
mode = "shadow"

[[host]]
names = ["ip.test"]
kind = "respond"
status = 200
body = "ip"
rate_limit = "ip"
limits = {{ max_url_bytes = 256, max_header_count = 8 }}

[[host]]
names = ["path.test"]
kind = "respond"
status = 201
body = "path"
rate_limit = "path"

[[host]]
names = ["user.test"]
kind = "respond"
status = 202
body = "user"
rate_limit = "user"

[[host]]
names = ["shadow.test"]
kind = "respond"
status = 203
body = "shadow"
rate_limit = "quiet"

[[host]]
names = ["budgets.test"]
kind = "respond"
status = 200
body = "budgets"
default = true

[[host]]
names = ["ruled.test"]
kind = "respond"
status = 206
body = "ruled"
rate_limit = "ip"
connection_rate = {{ requests = 10 }}
"#
    )
}

/// One state's run: each request decided by the lane where it answers,
/// else by the chain (`lane`), or always by the chain; the leases of the
/// last two requests held, then given back in order.
fn run(s: &Snapshot, lane: bool) -> LaneRun<'_> {
    let mut r = LaneRun::new(s, lane);
    let peers: [Peer; 6] = [
        "192.0.2.1",
        "192.0.2.9",
        "198.51.100.3",
        "2001:db8::1",
        "2001:db8:0:1::5",
        "127.0.0.1",
    ]
    .map(|a| Peer::tcp(a.parse().unwrap()));
    let hosts: [&[u8]; 7] = [
        b"ip.test",
        b"path.test",
        b"user.test",
        b"shadow.test",
        b"budgets.test",
        b"ruled.test",
        b"nobody.test",
    ];
    // Over ip.test's 256 bytes of target.
    let long = [b'/'; 300];
    let paths: [&[u8]; 6] = [
        b"/",
        b"/a/../b?q",
        b"/robots.txt",
        b"/%2e%2e/..",
        &long,
        b"/a",
    ];
    let auth: (&str, &[u8]) = ("authorization", b"Bearer t1");
    let user: (&str, &[u8]) = ("x-user", b"u1");
    let xff: (&str, &[u8]) = ("x-forwarded-for", b"203.0.113.7");
    // The last over ip.test's 8 lines.
    let many = [auth, user, xff, xff, user, user, auth, user, auth];
    let header_sets: [&[(&str, &[u8])]; 5] = [&[], &[auth], &[user], &[xff], &many];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..3000u64 {
        let x = xorshift64(&mut seed);
        let pick = |n: usize, shift: u32| (x >> shift) as usize % n;
        let peer = peers[pick(peers.len(), 0)];
        let host = hosts[pick(hosts.len(), 8)];
        let path = paths[pick(paths.len(), 16)];
        let headers = header_sets[pick(header_sets.len(), 24)];
        r.get((peer, host, path), headers, i * 23, 2);
    }
    r
}

/// The same 3,000 requests through the lane (where it answers) and
/// through the chain alone, on two states: every outcome is the same,
/// and so are the chain's, the budgets' and the rate limits' counters.
/// Of those the lane decides, hundreds are answered and hundreds refused,
/// by each level of the budgets and by the rate limits alike; the shadow
/// limit's hits are counted.
#[test]
fn the_paying_lane_decides_and_pays_what_the_chain_does() {
    let clients = [
        "",
        "[client]\nmode = \"x_forwarded_for\"\ntrusted_proxies = [\"127.0.0.0/16\"]\n",
    ];
    for client in clients {
        let src = profile(client);
        let compiled = ok(&src);
        let lane = run(&compiled.snapshot, true);
        let whole = run(&compiled.snapshot, false);
        assert_eq!(whole.by_lane, (0, 0));
        lane.assert_same_as(&whole, &format!("{client:?}"));
        let (answered, refused) = lane.by_lane;
        let (whole, whole_state) = (&whole.outcomes, &whole.state);
        assert!(answered > 300 && refused > 300, "{answered} {refused}");
        // Each level refused some: every budget the lane pays, the
        // concurrency, two of the rate limits.
        for (step, level) in [
            ("budgets", "global"),
            ("budgets", "source"),
            ("budgets", "identity"),
            ("budgets", "concurrent_source"),
            ("rate_limit", "ip"),
            ("rate_limit", "user"),
        ] {
            assert!(
                whole
                    .iter()
                    .any(|o| o.0 == "refuse" && o.5 == step && o.6.as_deref() == Some(level)),
                "{client:?}: {step} {level}"
            );
        }
        assert!(whole_state.counters.quota_shadow > 0, "{client:?}");
    }
}
