//! A UDP relay's budgets shared across a fleet, through the real binary,
//! a real UDP upstream and a real `redis-server` (Debian's package;
//! `.ci/run` installs it): three nodes relaying for one game hold its
//! global budget and a source prefix's budget together, and a node whose
//! Redis is away holds the relay to its local share.
//!
//! The tests wait for events (the relays' counters and the nodes' sync
//! rounds in `/metrics`, log lines), never for fixed times.

mod common;

use common::fleet::{start_node, wait_rounds, CEILING};
use common::gate::metric_sample;
use common::udp::{relay_addr, Upstream};
use common::{profile, wait_until, Gapura, HELLO_HOST};
use gapura_fleet::testing::RedisServer;
use std::net::{SocketAddr, UdpSocket};

/// The relays' window: an hour, so a run stays inside one.
const WINDOW_MS: u64 = 3_600_000;

/// Two relays: `wide` with a fleet-scoped global budget of 300, `near`
/// with a fleet-scoped prefix budget of 100, both per hour.
fn node_profile(redis: &str, up: SocketAddr) -> String {
    let key = common::fleet::key_file();
    let relay = |name: &str, budget: &str| {
        format!(
            "[[udp]]\nname = \"{name}\"\nlisten = [\"127.0.0.1:0\"]\nservers = [\"{up}\"]\n\
             window_ms = {WINDOW_MS}\nsession = {{ rate = 0 }}\n{budget}\n\n"
        )
    };
    profile(
        "",
        &format!(
            "[fleet]\nredis = \"{redis}\"\nsync_ms = 100\nnodes_expected = 3\nnode = \"n\"\nkey_file = {key:?}\n\n\
             {HELLO_HOST}\n{}{}",
            relay("wide", "global = { requests = 300, scope = \"fleet\" }"),
            relay("near", "prefix = { requests = 100, scope = \"fleet\" }"),
        ),
    )
}

fn sample(g: &Gapura, family: &str, relay: &str, reason: Option<&str>) -> u64 {
    let reason = reason.map_or(String::new(), |r| format!(",reason=\"{r}\""));
    metric_sample(
        g,
        &format!("{family}{{relay=\"{relay}\",shard=\"0\"{reason}}}"),
    )
    .unwrap_or(0)
}

/// Datagrams of `relay` a node relayed.
fn forwarded(g: &Gapura, relay: &str) -> u64 {
    sample(g, "gapura_udp_forwarded_total", relay, None)
}

/// Datagrams of `relay` a node has decided: relayed, or dropped by a
/// budget.
fn decided(g: &Gapura, relay: &str) -> u64 {
    let dropped = |reason| sample(g, "gapura_udp_dropped_total", relay, Some(reason));
    forwarded(g, relay) + dropped("global_budget") + dropped("prefix_budget")
}

/// Sends `total` datagrams of `relay` from `src` over the nodes in turn,
/// in batches of `batch`; after each batch, waits until every node has
/// decided what it was sent, then for two sync rounds of every node (the
/// pace of a client spread over the fleet). How many were relayed.
fn spread(nodes: &[Gapura], relay: &str, src: &str, total: usize, batch: usize) -> u64 {
    let client = UdpSocket::bind(format!("{src}:0")).unwrap();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|g| relay_addr(g, relay)).collect();
    let before: Vec<u64> = nodes.iter().map(|g| decided(g, relay)).collect();
    let relayed: u64 = nodes.iter().map(|g| forwarded(g, relay)).sum();
    let mut sent = vec![0u64; nodes.len()];
    for i in 0..total {
        let n = i % nodes.len();
        client
            .send_to(format!("move {i}").as_bytes(), addrs[n])
            .unwrap();
        sent[n] += 1;
        if (i + 1) % batch == 0 || i + 1 == total {
            for (k, g) in nodes.iter().enumerate() {
                let want = before[k] + sent[k];
                assert!(
                    wait_until(CEILING, || decided(g, relay) >= want),
                    "node {k} did not decide its datagrams: {}",
                    g.log_text()
                );
            }
            wait_rounds(nodes, 2);
        }
    }
    nodes.iter().map(|g| forwarded(g, relay)).sum::<u64>() - relayed
}

#[test]
fn three_relaying_nodes_hold_a_global_and_a_prefix_budget_together() {
    let redis = RedisServer::start();
    let up = Upstream::start(1);
    let profile = node_profile(&redis.url(), up.addr);
    let nodes: Vec<Gapura> = (0..3).map(|_| start_node(&profile)).collect();
    // Each node alone would relay all 150 it gets of 450 (its global
    // budget is 300): 450 in all.
    let relayed = spread(&nodes, "wide", "127.0.0.2", 450, 30);
    eprintln!("relay global budget over three nodes: {relayed} of 450 relayed");
    // Leases hand out only what nobody counted or holds: within a tenth.
    assert!((300..=330).contains(&relayed), "{relayed} of 450");
    for g in &nodes {
        assert!(g.metric("gapura_fleet_shared_keys") >= 1);
        assert_eq!(g.metric("gapura_fleet_fallback"), 0);
    }
    // One source prefix's 100 an hour, over the three nodes.
    let relayed = spread(&nodes, "near", "127.0.0.3", 200, 20);
    eprintln!("relay prefix budget over three nodes: {relayed} of 200 relayed");
    assert!((100..=110).contains(&relayed), "{relayed} of 200");
    // The keys reached Redis under the relays' own names.
    let keys = redis.cli(&["--scan", "--pattern", "gapura:w:*"]);
    assert!(keys.lines().count() >= 2, "window keys in Redis: {keys}");
}

#[test]
fn without_redis_a_relaying_node_holds_its_share() {
    let mut redis = RedisServer::start();
    let up = Upstream::start(1);
    let g = start_node(&node_profile(&redis.url(), up.addr));
    redis.kill();
    assert!(g.wait_log("cannot be used", CEILING), "{}", g.log_text());
    assert!(wait_until(CEILING, || g.metric("gapura_fleet_fallback") == 1));
    // The shard applies the failed rounds' views on its next timers.
    let failed = g.metric("gapura_fleet_sync_failures_total");
    assert!(wait_until(CEILING, || g
        .metric("gapura_fleet_sync_failures_total")
        >= failed + 2));
    // 300 an hour over nodes_expected = 3, one shard: 100 alone.
    let client = UdpSocket::bind("127.0.0.4:0").unwrap();
    let at = relay_addr(&g, "wide");
    for i in 0..150 {
        client.send_to(format!("move {i}").as_bytes(), at).unwrap();
    }
    assert!(
        wait_until(CEILING, || decided(&g, "wide") >= 150),
        "{}",
        g.log_text()
    );
    let relayed = forwarded(&g, "wide");
    eprintln!("Redis away: {relayed} of 150 relayed by one node");
    assert_eq!(relayed, 100);
    assert_eq!(
        sample(
            &g,
            "gapura_udp_dropped_total",
            "wide",
            Some("global_budget")
        ),
        50
    );
    assert!(g.metric("gapura_fleet_fallback_decisions_total") >= 150);
}
