//! Rate limits shared across a fleet, through the real binary and a real
//! `redis-server` (Debian's package; `.ci/run` installs it): three nodes
//! hold one per-client limit together, a node carries on at its share
//! while Redis is killed and shares again once it is back, and a
//! three-node Redis Cluster serves as well as one server.
//!
//! The tests wait for events (a node's sync rounds in `/metrics`, its log
//! lines), never for fixed times.

mod common;

use common::gate::respond_host;
use common::*;
use gapura_fleet::testing::{RedisCluster, RedisServer};
use std::time::Duration;

/// A generous ceiling for a node's rounds and transitions.
const CEILING: Duration = Duration::from_secs(30);

fn fleet_profile(redis: &str, sync_ms: u64) -> String {
    profile(
        "",
        &format!(
            "[fleet]\nredis = {redis}\nsync_ms = {sync_ms}\nnodes_expected = 3\nnode = \"n\"\n\n\
             [[rate_limit]]\nname = \"client\"\nrequests = 300\nper = \"minute\"\nscope = \"fleet\"\n\n{}",
            respond_host("f.test", "default = true\nrate_limit = \"client\"")
        ),
    )
}

fn start_nodes(redis: &str, n: usize) -> Vec<Gapura> {
    let nodes: Vec<Gapura> = (0..n)
        .map(|_| Gapura::start(&fleet_profile(redis, 50)))
        .collect();
    for g in &nodes {
        assert!(
            g.wait_log("sharing fleet-scoped limits through", CEILING),
            "{}",
            g.log_text()
        );
    }
    nodes
}

fn rounds(g: &Gapura) -> u64 {
    g.metric("gapura_fleet_sync_rounds_total")
}

/// Waits until every node has run `n` more rounds than `before`.
fn wait_rounds(nodes: &[Gapura], n: u64) {
    let before: Vec<u64> = nodes.iter().map(rounds).collect();
    for (g, b) in nodes.iter().zip(before) {
        assert!(
            wait_until(CEILING, || rounds(g) >= b + n),
            "no sync rounds: {}",
            g.log_text()
        );
    }
}

/// One request from `src`, answered within a second (the ceiling of the
/// client's read): its status.
fn status_from(src: &str, g: &Gapura) -> u16 {
    let mut c = Client::connect_from(src, g.addr);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    c.send(b"GET / HTTP/1.1\r\nHost: f.test\r\nConnection: close\r\n\r\n");
    c.try_response(false)
        .expect("an answer within a second")
        .status
}

/// Sends `total` requests from `src` over the nodes in turn, in batches
/// of `batch`, each batch followed by two sync rounds of every node (the
/// pace of a client whose requests are spread over the fleet); how many
/// were admitted. Every answer is a 200 or a 429.
fn spread(nodes: &[Gapura], src: &str, total: usize, batch: usize) -> usize {
    let mut admitted = 0;
    for i in 0..total {
        match status_from(src, &nodes[i % nodes.len()]) {
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
    let admitted = spread(&nodes, "127.0.0.2", 600, 30);
    eprintln!("three nodes: {admitted} of 600 admitted");
    assert!(
        (300..=390).contains(&admitted),
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
    let admitted = spread(&nodes, "127.0.0.4", 450, 20);
    eprintln!("Redis back: {admitted} of 450 admitted over two nodes");
    assert!(
        (300..=360).contains(&admitted),
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
        let a = spread(&nodes, src, 450, 30);
        eprintln!("cluster: {src}: {a} of 450 admitted");
        assert!((300..=390).contains(&a), "{src}: {a} of 450 admitted");
        admitted += a;
    }
    assert!(admitted <= 780);
    for g in &nodes {
        assert_eq!(g.metric("gapura_fleet_fallback"), 0, "{}", g.log_text());
    }
}
