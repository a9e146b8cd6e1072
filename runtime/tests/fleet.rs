//! Rate limits shared across a fleet, through the real binary and a real
//! `redis-server` (Debian's package; `.ci/run` installs it): three nodes
//! hold one per-client limit together, a node carries on at its share
//! while Redis is killed and shares again once it is back, and a
//! three-node Redis Cluster serves as well as one server.
//!
//! The tests wait for events (a node's sync rounds in `/metrics`, its log
//! lines), never for fixed times.

mod common;

use common::fleet::{start_node, wait_rounds, CEILING};
use common::gate::respond_host;
use common::*;
use gapura_fleet::testing::{RedisCluster, RedisServer};
use std::time::Duration;

fn fleet_profile(redis: &str, sync_ms: u64) -> String {
    let key = common::fleet::key_file();
    profile(
        "",
        &format!(
            "[fleet]\nredis = {redis}\nsync_ms = {sync_ms}\nnodes_expected = 3\nnode = \"n\"\nkey_file = {key:?}\n\n\
             [[rate_limit]]\nname = \"client\"\nrequests = 300\nper = \"minute\"\nscope = \"fleet\"\n\n{}",
            respond_host("f.test", "default = true\nrate_limit = \"client\"")
        ),
    )
}

fn start_nodes(redis: &str, n: usize) -> Vec<Gapura> {
    start_nodes_with(&fleet_profile(redis, 100), n)
}

/// `n` nodes of one profile, each once it has exchanged with Redis.
fn start_nodes_with(profile: &str, n: usize) -> Vec<Gapura> {
    let nodes: Vec<Gapura> = (0..n).map(|_| start_node(profile)).collect();
    nodes
}

/// Sync rounds that failed on any of `nodes` so far.
fn failed_rounds(nodes: &[Gapura]) -> u64 {
    nodes
        .iter()
        .map(|g| g.metric("gapura_fleet_sync_failures_total"))
        .sum()
}

/// The fewest admissions a run that began with `failed_before` failed
/// rounds may see: `exact` when every round of every node reached Redis.
/// A round that did not (a loaded machine past the round's timeout) holds
/// its node to its local share until the next good round, which refuses
/// more: then two thirds of `exact`, still far above a fleet that never
/// shared.
fn fewest(exact: usize, failed_before: u64, nodes: &[Gapura]) -> usize {
    let failed = failed_rounds(nodes) - failed_before;
    if failed == 0 {
        return exact;
    }
    eprintln!("{failed} sync rounds failed during the run");
    exact * 2 / 3
}

/// One request from `src`, answered within a second (the ceiling of the
/// client's read): its status.
fn status_from(src: &str, g: &Gapura) -> u16 {
    status_with(src, g, "")
}

/// `status_from` with header lines (each ending in CRLF).
fn status_with(src: &str, g: &Gapura, headers: &str) -> u16 {
    let mut c = Client::connect_from(src, g.addr);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    c.send(
        format!("GET / HTTP/1.1\r\nHost: f.test\r\n{headers}Connection: close\r\n\r\n").as_bytes(),
    );
    c.try_response(false)
        .expect("an answer within a second")
        .status
}

/// Sends `total` requests from `src` over the nodes in turn, in batches
/// of `batch`, each batch followed by two sync rounds of every node (the
/// pace of a client whose requests are spread over the fleet); how many
/// were admitted. Every answer is a 200 or a 429.
fn spread(nodes: &[Gapura], src: &str, total: usize, batch: usize) -> usize {
    spread_with(nodes, |_| (src.to_string(), String::new()), total, batch)
}

/// `spread` with each request's source and header lines from `client`.
fn spread_with(
    nodes: &[Gapura],
    client: impl Fn(usize) -> (String, String),
    total: usize,
    batch: usize,
) -> usize {
    let mut admitted = 0;
    for i in 0..total {
        let (src, headers) = client(i);
        match status_with(&src, &nodes[i % nodes.len()], &headers) {
            200 => admitted += 1,
            429 => {}
            s => panic!("answer {s}"),
        }
        if (i + 1) % batch == 0 {
            wait_rounds(nodes, 2);
        }
    }
    admitted
}

#[test]
fn three_nodes_hold_a_per_client_limit_together() {
    let redis = RedisServer::start();
    let nodes = start_nodes(&format!("\"{}\"", redis.url()), 3);
    // 600 requests at 300 a minute: each node alone would pass them all.
    let failed = failed_rounds(&nodes);
    let admitted = spread(&nodes, "127.0.0.2", 600, 30);
    eprintln!("three nodes: {admitted} of 600 admitted");
    let low = fewest(300, failed, &nodes);
    assert!(
        (low..=390).contains(&admitted),
        "{admitted} of 600 admitted"
    );
    for g in &nodes {
        assert!(g.metric("gapura_fleet_shared_keys") >= 1);
        assert_eq!(g.metric("gapura_fleet_fallback"), 0);
    }
}

#[test]
fn without_redis_each_node_holds_its_share_and_shares_again_when_it_returns() {
    let mut redis = RedisServer::start();
    let nodes = start_nodes(&format!("\"{}\"", redis.url()), 2);
    redis.kill();
    for g in &nodes {
        assert!(g.wait_log("cannot be used", CEILING), "{}", g.log_text());
        assert!(wait_until(CEILING, || g.metric("gapura_fleet_fallback") == 1));
    }
    // 300 a minute over nodes_expected = 3: a node alone passes 100.
    let mut admitted = 0;
    for _ in 0..150 {
        match status_from("127.0.0.3", &nodes[0]) {
            200 => admitted += 1,
            429 => {}
            s => panic!("answer {s} with Redis away"),
        }
    }
    eprintln!("Redis away: {admitted} of 150 admitted by one node");
    assert!((100..=103).contains(&admitted), "{admitted} admitted alone");
    assert!(
        nodes[0].log_text().matches("cannot be used").count() == 1,
        "logged once"
    );
    redis.restart();
    for g in &nodes {
        assert!(
            g.wait_log("answers again after", CEILING),
            "{}",
            g.log_text()
        );
        assert!(wait_until(CEILING, || g.metric("gapura_fleet_fallback") == 0));
        assert!(g.metric("gapura_fleet_sync_failures_total") >= 1);
    }
    // Shared again: a new client spread over both nodes gets the fleet's
    // 300 (and the refill while it runs), not 2 x 300.
    let failed = failed_rounds(&nodes);
    let admitted = spread(&nodes, "127.0.0.4", 450, 20);
    eprintln!("Redis back: {admitted} of 450 admitted over two nodes");
    let low = fewest(300, failed, &nodes);
    assert!(
        (low..=360).contains(&admitted),
        "{admitted} of 450 admitted"
    );
}

#[test]
fn a_three_node_redis_cluster_shares_as_one_server_does() {
    let cluster = RedisCluster::start();
    let list: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let nodes = start_nodes(&format!("[{}]", list.join(", ")), 3);
    let mut admitted = 0;
    // Several clients, so their keys land on several slots.
    for src in ["127.0.0.5", "127.0.0.6"] {
        let failed = failed_rounds(&nodes);
        let a = spread(&nodes, src, 450, 30);
        eprintln!("cluster: {src}: {a} of 450 admitted");
        let low = fewest(300, failed, &nodes);
        assert!((low..=390).contains(&a), "{src}: {a} of 450 admitted");
        admitted += a;
    }
    assert!(admitted <= 780);
    for g in &nodes {
        assert_eq!(g.metric("gapura_fleet_fallback"), 0, "{}", g.log_text());
    }
}

/// Budgets' window: an hour, so that a test's requests fall in one.
const WINDOW_MS: u64 = 3_600_000;

/// Three-node budgets over `redis` with `quota` (the `[quota.*]` tables).
fn budget_profile(redis: &str, quota: &str) -> String {
    let key = common::fleet::key_file();
    profile(
        "",
        &format!(
            "[fleet]\nredis = \"{redis}\"\nsync_ms = 100\nnodes_expected = 3\nnode = \"n\"\nkey_file = {key:?}\n\n\
             [quota]\nwindow_ms = {WINDOW_MS}\n\n{quota}\n{}",
            respond_host("f.test", "default = true")
        ),
    )
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Waits, when the budgets' window ends within five minutes, until the
/// next one starts (windows are cut from Unix time, the same on every
/// node), so that what follows counts in one window. Five: on a loaded
/// machine the suite's tests ran for two and a half minutes, and one that
/// began with two minutes left saw its window end under it.
fn away_from_a_boundary() {
    let left_ms = WINDOW_MS - unix_ms() % WINDOW_MS;
    if left_ms < 300_000 {
        // Into the next window, and two seconds past its start: a node's
        // clock a few milliseconds behind the test's would count the first
        // requests in the window before.
        let start = (unix_ms() / WINDOW_MS + 1) * WINDOW_MS + 2_000;
        assert!(wait_until(Duration::from_millis(left_ms + 10_000), || {
            unix_ms() >= start
        }));
    }
}

#[test]
fn three_nodes_hold_a_global_budget_together() {
    let redis = RedisServer::start();
    let quota = "[quota.global]\nrequests = 300\nscope = \"fleet\"\n";
    let nodes = start_nodes_with(&budget_profile(&redis.url(), quota), 3);
    away_from_a_boundary();
    // Each node alone would pass 300 of 600, three without sharing all.
    let failed = failed_rounds(&nodes);
    let admitted = spread(&nodes, "127.0.0.2", 600, 30);
    eprintln!("global budget over three nodes: {admitted} of 600 admitted");
    // Leases hand out only what nobody counted or holds: within a tenth
    // of the budget.
    let low = fewest(300, failed, &nodes);
    assert!((low..=330).contains(&admitted), "{admitted} of 600");
    for g in &nodes {
        assert!(g.metric("gapura_fleet_shared_keys") >= 1);
    }
}

#[test]
fn three_nodes_hold_source_and_identity_budgets_together() {
    let redis = RedisServer::start();
    let quota = "[quota.source]\nrequests = 100\nscope = \"fleet\"\n\n\
                 [quota.identity]\nheader = \"authorization\"\nrequests = 150\nscope = \"fleet\"\n";
    let nodes = start_nodes_with(&budget_profile(&redis.url(), quota), 3);
    away_from_a_boundary();
    let admitted = spread(&nodes, "127.0.0.3", 300, 15);
    eprintln!("source budget over three nodes: {admitted} of 300 admitted");
    assert!((100..=110).contains(&admitted), "source: {admitted} of 300");
    // One credential from ten networks (30 each, under their budget).
    let credential = |i: usize| {
        (
            format!("127.0.{}.1", i % 10 + 10),
            "Authorization: Bearer fleet\r\n".to_string(),
        )
    };
    let admitted = spread_with(&nodes, credential, 300, 15);
    eprintln!("identity budget over three nodes: {admitted} of 300 admitted");
    assert!(
        (150..=165).contains(&admitted),
        "identity: {admitted} of 300"
    );
}

#[test]
fn a_restarted_node_learns_the_fleets_count_again() {
    let redis = RedisServer::start();
    let quota = "[quota.global]\nrequests = 300\nscope = \"fleet\"\n";
    let profile = budget_profile(&redis.url(), quota);
    let mut nodes = start_nodes_with(&profile, 3);
    away_from_a_boundary();
    let mut admitted = spread(&nodes, "127.0.0.4", 150, 15);
    // A node is killed mid-run: the others keep sharing the budget.
    drop(nodes.pop());
    admitted += spread(&nodes, "127.0.0.4", 60, 15);
    for g in &nodes {
        assert_eq!(g.metric("gapura_fleet_fallback"), 0, "{}", g.log_text());
    }
    assert_eq!(admitted, 210, "all under the budget");
    // Started again, it counts from nothing until its own count shares
    // the key (300 / 16 = 18) and learns the fleet's 210 and more.
    nodes.push(start_node(&profile));
    admitted += spread(&nodes, "127.0.0.4", 300, 15);
    eprintln!("node restarted: {admitted} of 510 admitted");
    // The killed node's unspent share lapses from the engine within the
    // lease lifetime; the restarted one holds what the others left.
    assert!((300..=330).contains(&admitted), "{admitted} of 510");
    let last = &nodes[2];
    assert!(last.metric("gapura_fleet_shared_keys") >= 1);
    assert_eq!(
        status_from("127.0.0.4", last),
        429,
        "it holds the fleet's count"
    );
}

/// Writes `text` as `g`'s profile, reloads, and waits for `line` in its log.
fn reload_to(g: &Gapura, text: &str, line: &str) {
    std::fs::write(&g.profile, text).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log(line, CEILING), "{}", g.log_text());
}

#[test]
fn a_reload_moves_the_fleet_to_another_engine_and_refuses_what_needs_a_restart() {
    let first = RedisServer::start();
    let second = RedisServer::start();
    let g = start_node(&fleet_profile(&format!("\"{}\"", first.url()), 50));
    // A new engine and period, applied on SIGHUP.
    reload_to(
        &g,
        &fleet_profile(&format!("\"{}\"", second.url()), 40),
        &format!("reloaded: sharing through {} every 40 ms", second.url()),
    );
    assert!(g.wait_log("reloaded: generation 2", CEILING));
    // A client past the share threshold (300 / 16) is shared through the
    // new engine.
    for _ in 0..30 {
        assert_eq!(status_from("127.0.0.7", &g), 200);
    }
    assert!(
        wait_until(CEILING, || second.cli(&["DBSIZE"]).trim() != "0"),
        "nothing reached the new engine: {}",
        g.log_text()
    );
    assert_eq!(g.metric("gapura_fleet_fallback"), 0);
    // What cannot change under a running process is refused, with why.
    let resized = fleet_profile(&format!("\"{}\"", second.url()), 40)
        .replace("[fleet]\n", "[fleet]\nshared_keys = 128\n");
    reload_to(
        &g,
        &resized,
        "reload refused: fleet.shared_keys changes from 4096 to 128",
    );
    let alone = profile("", &respond_host("f.test", "default = true"));
    reload_to(&g, &alone, "reload refused: [fleet] is removed");
    assert_eq!(
        g.log_text().matches("reloaded: generation").count(),
        1,
        "the refused reloads published nothing"
    );
    assert_eq!(g.metric("gapura_fleet_fallback"), 0, "still sharing");
}

#[test]
fn explain_live_shows_a_shared_keys_local_and_fleet_counts() {
    let redis = RedisServer::start();
    let text = format!(
        "{}\n[quota]\nwindow_ms = {WINDOW_MS}\n\n[quota.global]\nrequests = 300\nscope = \"fleet\"\n",
        fleet_profile(&format!("\"{}\"", redis.url()), 50)
    );
    let nodes = start_nodes_with(&text, 2);
    away_from_a_boundary();
    // 20 a node: past both keys' share threshold (300 / 16).
    assert_eq!(spread(&nodes, "127.0.0.8", 40, 40), 40);
    let fleet_of = |g: &Gapura| {
        let live = g.live_view("f.test", "/", "127.0.0.8");
        live["shards"][0]["fleet"].clone()
    };
    for g in &nodes {
        // Once the node's timer took the round's view: its own 20 and
        // the other's, and each node's share (300 / 3) less its 20 held.
        assert!(
            wait_until(CEILING, || {
                let f = fleet_of(g);
                f[0]["fleet"] == 40
                    && f[0]["held"] == 160
                    && f[0]["local"] == 20
                    && f[0]["pending"] == 0
            }),
            "{}",
            fleet_of(g)
        );
        let f = fleet_of(g);
        assert_eq!(f[0]["level"], "global", "{f}");
        assert_eq!(f[1]["level"], "rate_limit", "{f}");
        assert_eq!(f[1]["name"], "client");
        assert_eq!(f[1]["shared"], true);
        // 300 less the fleet's 40, and the refill since (one per 200 ms).
        let tokens = f[1]["fleet"].as_u64().unwrap_or(0);
        assert!((260..=290).contains(&tokens), "{f}");
    }
    let out = std::process::Command::new(bin())
        .args(["explain", "--live", "--admin"])
        .arg(nodes[0].admin.to_string())
        .arg("--profile")
        .arg(&nodes[0].profile)
        .args(["--peer", "127.0.0.8", "GET", "http://f.test/"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(
            "fleet global: here 20, fleet 40 in the window and 160 held in leases, 0 not yet sent"
        ),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("fleet client: here "), "{said}");
}

#[test]
fn a_key_file_too_short_or_missing_stops_the_start() {
    let redis = RedisServer::start();
    let dir = common::TempDir::new();
    let short = dir.0.join("short.key");
    std::fs::write(&short, "tiny\n").unwrap();
    let good = fleet_profile(&format!("\"{}\"", redis.url()), 100);
    let key = common::fleet::key_file();
    for (file, says) in [
        (short.display().to_string(), "at least 16 characters"),
        (dir.0.join("absent.key").display().to_string(), "key_file"),
    ] {
        let text = good.replace(
            &format!("key_file = {key:?}"),
            &format!("key_file = {file:?}"),
        );
        let err = Gapura::try_start(&text, &[]).err().expect("refused");
        assert!(err.contains(says), "{err}");
    }
}
