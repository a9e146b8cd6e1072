//! The balancer, the idle pool and passive health, with time passed in and
//! numbers in place of connections.

use super::*;
use crate::upstream::pool::Permit;
use gapura_gate::upstream::HostHeader;

fn group(weights: &[u32], balance: Balance) -> UpstreamGroup {
    UpstreamGroup {
        name: "app".into(),
        servers: weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| UpstreamServer {
                addr: ([127, 0, 0, 1], 9000 + i as u16).into(),
                name: None,
                weight,
                key: 100 + i as u64,
                health_slot: i as u32 + 1,
            })
            .collect(),
        balance,
        host_header: HostHeader::PassThrough,
        connect_timeout_ms: 1000,
        response_header_timeout_ms: 1000,
        read_timeout_ms: 1000,
        max_idle_per_server: 2,
        idle_timeout_ms: 5_000,
        max_connections_per_server: 8,
        max_queued_per_server: 8,
        queue_timeout_ms: 1000,
        fail_threshold: 2,
        fail_cooldown_ms: 10_000,
        active_health: None,
        tls: None,
        protocol: Default::default(),
        h2_streams_per_connection: 100,
        h2_connections_per_server: 2,
    }
}

fn picks(u: &Upstreams<u32>, g: &UpstreamGroup, n: usize, now: u64) -> Vec<usize> {
    let board = HealthBoard::default();
    (0..n).map(|_| u.pick(g, 0, &board, now).unwrap()).collect()
}

#[test]
fn weighted_round_robin_is_smooth() {
    let u = Upstreams::<u32>::default();
    let g = group(&[5, 1, 1], Balance::RoundRobin);
    // nginx's smooth weighted round robin: a a b a c a a, repeating.
    assert_eq!(
        picks(&u, &g, 14, 0),
        [0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0]
    );
}

#[test]
fn tried_servers_are_skipped_and_none_is_left_at_the_end() {
    let u = Upstreams::<u32>::default();
    let g = group(&[1, 1, 1], Balance::RoundRobin);
    let board = HealthBoard::default();
    assert_eq!(u.pick(&g, 0b011, &board, 0), Some(2));
    assert_eq!(u.pick(&g, 0b111, &board, 0), None);
}

#[test]
fn least_outstanding_follows_requests_in_flight_relative_to_weight() {
    let u = Upstreams::<u32>::default();
    let g = group(&[1, 2], Balance::LeastOutstanding);
    let board = HealthBoard::default();
    let (a, b) = (&g.servers[0], &g.servers[1]);
    u.begin(a);
    assert_eq!(u.pick(&g, 0, &board, 0), Some(1));
    u.begin(b);
    // 1/1 against 1/2: the heavier server still has room.
    assert_eq!(u.pick(&g, 0, &board, 0), Some(1));
    u.begin(b);
    u.begin(b);
    assert_eq!(u.pick(&g, 0, &board, 0), Some(0));
    u.end(b);
    u.end(b);
    u.end(b);
    u.end(b); // never below zero
    assert_eq!(u.pick(&g, 0, &board, 0), Some(1));
}

#[test]
fn failures_take_a_server_out_for_its_cooldown_then_a_probe_brings_it_back() {
    let u = Upstreams::<u32>::default();
    let g = group(&[1, 1], Balance::RoundRobin);
    let board = HealthBoard::default();
    let bad = &g.servers[0];
    assert!(
        !u.failure(&g, bad, 1_000),
        "one failure is below the threshold"
    );
    assert!(u.failure(&g, bad, 1_000), "the second takes it out");
    for now in [1_000, 5_000, 10_999] {
        assert_eq!(u.pick(&g, 0, &board, now), Some(1), "out until 11000");
    }
    // Every untried server out: the one whose cooldown ends first is probed.
    assert_eq!(u.pick(&g, 0b10, &board, 2_000), Some(0));
    // Once the cooldown is over it is picked again.
    assert_eq!(picks(&u, &g, 2, 11_000), [0, 1]);
    // A success forgets the failures at once.
    u.failure(&g, bad, 20_000);
    u.success(bad);
    assert!(!u.failure(&g, bad, 20_000), "counting starts over");
}

#[test]
fn a_lone_server_is_never_taken_out_and_the_health_board_is_obeyed() {
    let u = Upstreams::<u32>::default();
    let one = group(&[1], Balance::RoundRobin);
    for _ in 0..5 {
        assert!(!u.failure(&one, &one.servers[0], 0));
    }
    let g = group(&[1, 1], Balance::RoundRobin);
    let board = HealthBoard::default();
    board.set_down(g.servers[1].health_slot, true);
    for _ in 0..3 {
        assert_eq!(u.pick(&g, 0, &board, 0), Some(0));
    }
    // Both down by the board: the first is still tried.
    board.set_down(g.servers[0].health_slot, true);
    assert_eq!(u.pick(&g, 0, &board, 0), Some(0));
}

/// A connection made under a fresh slot of `s`'s pool.
fn opened(u: &Upstreams<u32>, g: &UpstreamGroup, s: &UpstreamServer, at: u64) -> Permit<u32> {
    match u.checkout(g, s, at) {
        Checkout::Open(mut p) => {
            p.connected();
            p
        }
        _ => panic!("a slot to open a connection"),
    }
}

#[test]
fn a_failure_empties_the_server_pool_and_its_counts_stay() {
    let u = Upstreams::<u32>::default();
    let g = group(&[1], Balance::RoundRobin);
    let s = &g.servers[0];
    let permits: Vec<_> = (0..3).map(|_| opened(&u, &g, s, 0)).collect();
    for (n, p) in permits.into_iter().enumerate() {
        p.pool().clone().put(n as u32, p, 1_000);
    }
    assert_eq!(u.idle_connections(), 2, "max_idle_per_server");
    match u.checkout(&g, s, 2_000) {
        Checkout::Idle(1, p) => drop(p),
        _ => panic!("the newest first"),
    }
    u.failure(&g, s, 3_000);
    assert!(matches!(u.checkout(&g, s, 3_000), Checkout::Open(_)));
    let c = u.pool_counts(s.key);
    assert_eq!((c.open, c.idle, c.opened), (0, 0, 3));
    assert_eq!(
        c.closed.map(|n| n as u32),
        [0, 1, 0, 1, 1, 0],
        "pool full, the error, discarded"
    );
}

#[test]
fn the_sweeper_forgets_servers_with_nothing_to_remember() {
    let u = Upstreams::<u32>::default();
    let g = group(&[1, 1], Balance::LeastOutstanding);
    u.begin(&g.servers[0]);
    u.end(&g.servers[0]);
    u.failure(&g, &g.servers[1], 0);
    u.failure(&g, &g.servers[1], 0);
    let live = |_: u64| false;
    u.sweep(1, live);
    assert_eq!(
        u.servers.borrow().len(),
        1,
        "the failed server is remembered"
    );
    u.sweep(10_000, live);
    assert!(u.servers.borrow().is_empty(), "its cooldown is over");
    let p = opened(&u, &g, &g.servers[0], 0);
    p.pool().clone().put(7, p, 0);
    u.sweep(1, live);
    assert_eq!(
        u.pools.borrow().len(),
        1,
        "a pool holding a connection stays"
    );
    u.sweep(10_000, |k| k == g.servers[0].key);
    assert_eq!(u.idle_connections(), 0, "expired");
    assert_eq!(
        u.pools.borrow().len(),
        1,
        "a server in the profile keeps its counts"
    );
    u.sweep(10_001, live);
    assert!(u.pools.borrow().is_empty(), "gone with its server");
    // The rotation counters of least outstanding go too.
    let board = HealthBoard::default();
    u.pick(&g, 0, &board, 1);
    assert_eq!(u.rotation.borrow().len(), 1);
    u.sweep(2, live);
    assert!(u.rotation.borrow().is_empty());
}
