//! The engine's script and round trip against a real `redis-server`.

use gapura_fleet::engine::{
    bucket_name, check, lease_name, window_name, Engine, Flush, Target, WindowFlush,
};
use gapura_fleet::testing::{RedisCluster, RedisServer};
use std::time::Duration;

fn target(addresses: Vec<String>, cluster: bool) -> Target {
    Target {
        addresses,
        cluster,
        password: None,
        timeout: Duration::from_secs(2),
    }
}

/// 300 a minute (200 ms a token), burst 300.
fn flush(key: u64, count: u64) -> Flush {
    Flush {
        identity: 7,
        key,
        count,
        interval_ns: 200_000_000,
        burst: 300,
    }
}

const FULL_US: i64 = 300 * 200_000;

#[test]
fn counts_from_two_nodes_drain_one_bucket() {
    let redis = RedisServer::start();
    let mut a = Engine::connect(&target(vec![redis.url()], false)).unwrap();
    let mut b = Engine::connect(&target(vec![redis.url()], false)).unwrap();
    assert_eq!(a.flush(&[]).unwrap(), Vec::<i64>::new(), "a PING");
    // An unknown key with nothing to add reads as full and stores nothing.
    assert_eq!(a.flush(&[flush(1, 0)]).unwrap(), [FULL_US]);
    assert_eq!(redis.cli(&["DBSIZE"]).trim(), "0");
    let ages = a.flush(&[flush(1, 100), flush(2, 1)]).unwrap();
    // The refill between the calls (µs) only adds age.
    assert!(
        (FULL_US - 100 * 200_000..FULL_US - 99 * 200_000).contains(&ages[0]),
        "{ages:?}"
    );
    let ages = b.flush(&[flush(1, 150)]).unwrap();
    let tokens = ages[0] / 200_000;
    assert!(
        (50..=51).contains(&tokens),
        "{tokens} tokens left of 300 - 250"
    );
    // Debt is held to one burst.
    let ages = b.flush(&[flush(1, 10_000)]).unwrap();
    assert!(
        ages[0] >= -FULL_US && ages[0] < -FULL_US + 1_000_000,
        "{ages:?}"
    );
    // The bucket expires once it would be full again: its TTL is at most
    // the time to refill the debt and a burst, plus a second.
    let ttl: i64 = redis
        .cli(&["PTTL", &bucket_name(7, 1)])
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 2 * FULL_US / 1000 + 1000, "{ttl}");
}

/// A budget window of 1 s.
fn window(key: u64, window: u64, count: u64) -> WindowFlush {
    WindowFlush {
        identity: 9,
        key,
        window,
        window_ms: 1_000,
        count,
        outstanding: 0,
        holder: 1,
        lease_ttl_ms: 2_000,
    }
}

/// A window's flush from `holder` whose leases hold `outstanding`.
fn leased(key: u64, count: u64, outstanding: u64, holder: u64) -> WindowFlush {
    WindowFlush {
        outstanding,
        holder,
        ..window(key, 100, count)
    }
}

#[test]
fn a_windows_count_includes_every_live_lease_and_a_lapsed_one_is_dropped() {
    let redis = RedisServer::start();
    let mut a = Engine::connect(&target(vec![redis.url()], false)).unwrap();
    let mut b = Engine::connect(&target(vec![redis.url()], false)).unwrap();
    let (_, counts) = a.exchange(&[], &[leased(1, 10, 30, 1)]).unwrap();
    assert_eq!(counts, [(10, 30)]);
    let (_, counts) = b.exchange(&[], &[leased(1, 5, 20, 2)]).unwrap();
    assert_eq!(counts, [(15, 50)], "a's and b's leases");
    // a's lease is spent or given back: only b's is held.
    let (_, counts) = a.exchange(&[], &[leased(1, 0, 0, 1)]).unwrap();
    assert_eq!(counts, [(15, 20)]);
    // A lease whose holder stopped exchanging long ago lapses.
    let leases = lease_name(9, 1, 100);
    redis.cli(&["HSET", &leases, "dead", "100 1000"]);
    let (_, counts) = b.exchange(&[], &[leased(1, 0, 20, 2)]).unwrap();
    assert_eq!(counts, [(15, 20)], "the lapsed 100 is not held");
    assert_eq!(redis.cli(&["HEXISTS", &leases, "dead"]).trim(), "0");
    let ttl: i64 = redis.cli(&["PTTL", &leases]).trim().parse().unwrap();
    assert!(ttl > 0 && ttl <= 3_000, "expires with its window: {ttl}");
}

#[test]
fn budget_windows_add_every_nodes_count_and_expire() {
    let redis = RedisServer::start();
    let mut a = Engine::connect(&target(vec![redis.url()], false)).unwrap();
    let mut b = Engine::connect(&target(vec![redis.url()], false)).unwrap();
    let (ages, counts) = a
        .exchange(&[flush(1, 1)], &[window(1, 100, 40), window(2, 100, 3)])
        .unwrap();
    assert_eq!(
        (ages.len(), counts),
        (1, vec![(40, 0), (3, 0)]),
        "rates, then windows"
    );
    let (_, counts) = b.exchange(&[], &[window(1, 100, 25)]).unwrap();
    assert_eq!(counts, [(65, 0)], "one window's count over two nodes");
    // Another window is another key: it starts from nothing.
    let (_, counts) = b.exchange(&[], &[window(1, 101, 0)]).unwrap();
    assert_eq!(counts, [(0, 0)]);
    let ttl: i64 = redis
        .cli(&["PTTL", &window_name(9, 1, 100)])
        .trim()
        .parse()
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 3_000,
        "expires two windows and a second on: {ttl}"
    );
    // A server that lost the script is given it again.
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    let (_, counts) = a.exchange(&[], &[window(1, 100, 1)]).unwrap();
    assert_eq!(counts, [(66, 0)]);
}

#[test]
fn a_server_that_lost_the_script_is_given_it_again() {
    let redis = RedisServer::start();
    let mut e = Engine::connect(&target(vec![redis.url()], false)).unwrap();
    e.load_script().unwrap();
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    let ages = e.flush(&[flush(5, 1)]).unwrap();
    assert_eq!(ages.len(), 1);
}

#[test]
fn a_killed_server_is_an_error_and_a_restarted_one_answers() {
    let mut redis = RedisServer::start();
    let t = target(vec![redis.url()], false);
    let mut e = Engine::connect(&t).unwrap();
    e.flush(&[flush(1, 1)]).unwrap();
    redis.kill();
    assert!(e.flush(&[flush(1, 1)]).is_err());
    assert!(Engine::connect(&t).is_err());
    redis.restart();
    let mut e = Engine::connect(&t).unwrap();
    // A restarted (empty) server has no script: loaded on NOSCRIPT.
    assert_eq!(e.flush(&[flush(1, 1)]).unwrap().len(), 1);
}

#[test]
fn a_three_node_cluster_takes_keys_on_every_slot() {
    let cluster = RedisCluster::start();
    let mut e = Engine::connect(&target(cluster.urls(), true)).unwrap();
    let keys: Vec<Flush> = (0..64).map(|k| flush(k * 0x9E37_79B9, 3)).collect();
    let ages = e.flush(&keys).unwrap();
    assert_eq!(ages.len(), 64);
    assert!(ages.iter().all(|&a| a <= FULL_US - 3 * 200_000 + 1_000_000));
    // The keys are spread over the three nodes.
    let held: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| n.cli(&["DBSIZE"]).trim().parse().unwrap())
        .collect();
    assert_eq!(held.iter().sum::<u64>(), 64);
    assert!(held.iter().all(|&n| n > 0), "{held:?}");
    // The second round reads what the first wrote.
    let again = e.flush(&keys).unwrap();
    assert!(again.iter().zip(&ages).all(|(b, a)| b < a));
}

#[test]
fn the_doctor_check_reads_version_cluster_state_and_a_round_trip() {
    let redis = RedisServer::start();
    let h = check(&target(vec![redis.url()], false)).unwrap();
    assert!(h.version.starts_with(|c: char| c.is_ascii_digit()), "{h:?}");
    assert_eq!(h.cluster_state, None);
    let cluster = RedisCluster::start();
    let h = check(&target(cluster.urls(), true)).unwrap();
    assert_eq!(h.cluster_state.as_deref(), Some("ok"));
    let mut gone = target(vec![redis.url()], false);
    gone.password = Some("wrong".into());
    assert!(
        check(&gone).is_err(),
        "AUTH with a password the server has not"
    );
}
