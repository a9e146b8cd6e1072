use super::*;
use crate::quota::fleet::FleetView;
use crate::quota::fleetwindow::BudgetLevel;
use crate::quota::Ceiling;
use crate::udp::{SessionPolicy, UdpBudgetPolicy, UdpClass, UdpDrop, UdpPolicy};
use crate::upstream::Balance;
use std::collections::HashMap;
use std::net::IpAddr;

const FLEET_SEED: [u8; 16] = [9; 16];
const WINDOW_MS: u64 = 60_000;
/// The relays' clocks start at this Unix time: window 1000.
const ORIGIN_MS: u64 = 1_000 * WINDOW_MS;

/// A relay with a fleet-scoped global budget of 160 (alone: 160 / 4) and
/// prefix budget of 32 (alone: 32 / 4).
fn policy(name: &str) -> UdpPolicy {
    let global = Budget::flat(160).unwrap();
    let prefix = Budget::flat(32).unwrap();
    UdpPolicy {
        name: name.into(),
        listen: Vec::new(),
        servers: Vec::new(),
        balance: Balance::RoundRobin,
        max_datagram_bytes: 64,
        budgets: UdpBudgetPolicy {
            window_ms: WINDOW_MS,
            global: Some(global),
            prefix: Some(prefix),
            tracked: Ceiling::new(64, 8).unwrap(),
            fleet: UdpFleetBudgets::new(
                name,
                WINDOW_MS,
                Some(Budget::flat(40).unwrap()),
                Some(Budget::flat(8).unwrap()),
            ),
        },
        operation: None,
        classes: vec![UdpClass::other()],
        session: SessionPolicy {
            rate: None,
            idle_timeout_ms: 30_000,
            ceiling: Ceiling::new(16, 2).unwrap(),
        },
        envelope: None,
    }
}

/// One node's relay: its own process seed, the fleet's seed.
fn node(p: &UdpPolicy, process_seed: u8) -> (UdpBudgets, Keyer) {
    let mut b = UdpBudgets::new(p);
    b.enable_fleet(UdpFleet::enable(FLEET_SEED, 64, ORIGIN_MS));
    (b, Keyer::new([process_seed; 16]))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Per window key: what the fleet counted, each node's outstanding lease.
type Engine = HashMap<(u64, u64, u64), (u64, HashMap<u8, u32>)>;

/// Hands node `name`'s shared counts over as the engine would take them:
/// adds them to `engine`, keeps its outstanding leases, and returns the
/// view of the engine's counts (counted and held).
fn exchange(b: &mut UdpBudgets, name: u8, engine: &mut Engine, round: u64) -> FleetView {
    let deltas = b.shared_windows().deltas();
    b.shared_windows().begin_flight();
    for d in &deltas {
        let (counted, held) = engine.entry((d.identity, d.key, d.window)).or_default();
        *counted += u64::from(d.count);
        held.insert(name, d.outstanding);
    }
    b.shared_windows().end_flight();
    let counts = engine
        .iter()
        .map(|(k, (n, held))| (*k, n + held.values().map(|&h| u64::from(h)).sum::<u64>()))
        .collect();
    FleetView {
        round,
        counts,
        ..FleetView::default()
    }
}

#[test]
fn two_nodes_share_a_relays_global_budget_through_the_engine() {
    let p = policy("game");
    let (mut a, ka) = node(&p, 1);
    let (mut b, kb) = node(&p, 2);
    let mut engine = Engine::new();
    let admit = |n: &mut UdpBudgets, k: &Keyer, net: u32, count: u32| {
        (0..count)
            .filter(|i| {
                let src = ip(&format!("10.{net}.{}.1", i % 50));
                n.admit(&p, k, src, b"x", 5).is_ok()
            })
            .count()
    };
    // Each node shares the global key once it counted 1/16 of 160 (10)
    // and holds it to its share (160 / 4) until its leases start; leases
    // then hand out what the fleet has not reserved, never more.
    let mut per_round = Vec::new();
    for round in 1..=20u64 {
        let n = admit(&mut a, &ka, 0, 100) + admit(&mut b, &kb, 1, 100);
        per_round.push(n);
        exchange(&mut a, 1, &mut engine, round);
        let view = exchange(&mut b, 2, &mut engine, round);
        a.take_view(&view);
        b.take_view(&view);
    }
    assert_eq!(per_round[0], 80, "each node its share: {per_round:?}");
    let admitted: usize = per_round.iter().sum();
    assert!((155..=160).contains(&admitted), "{per_round:?}");
    assert_eq!(
        a.admit(&p, &ka, ip("10.99.0.1"), b"x", 6),
        Err(UdpDrop::GlobalBudget),
    );
}

#[test]
fn a_prefix_is_the_same_key_on_every_node() {
    let p = policy("game");
    let (mut a, ka) = node(&p, 1);
    let (mut b, kb) = node(&p, 2);
    let mut engine = Engine::new();
    let admit = |n: &mut UdpBudgets, k: &Keyer, src: &str, count: u32| {
        (0..count)
            .filter(|_| n.admit(&p, k, ip(src), b"x", 0).is_ok())
            .count()
    };
    // Another address of the same /24 on another node, with another
    // process seed: one key in the engine.
    // Each reserves its share (32 / 4) once it shares the key.
    assert_eq!(admit(&mut a, &ka, "192.0.2.1", 20), 8);
    assert_eq!(admit(&mut b, &kb, "192.0.2.200", 2), 2);
    exchange(&mut a, 1, &mut engine, 1);
    let view = exchange(&mut b, 2, &mut engine, 1);
    // 8 + 2 counted, 0 + 6 held: one key.
    assert_eq!(view.counts.values().filter(|&&n| n == 16).count(), 1);
    // The other node's 8 is in the key: a's lease is a quarter of what
    // neither counted nor holds, (32 - 16) / 4.
    a.take_view(&view);
    a.take_view(&FleetView { round: 4, ..view });
    assert_eq!(admit(&mut a, &ka, "192.0.2.1", 20), 4);
}

#[test]
fn with_the_engine_away_a_relay_holds_its_local_share() {
    let p = policy("game");
    let (mut a, ka) = node(&p, 1);
    a.take_view(&FleetView {
        round: 1,
        fallback: true,
        ..FleetView::default()
    });
    let admitted = (0..100u32)
        .filter(|i| {
            let src = ip(&format!("10.0.{}.1", i % 50));
            a.admit(&p, &ka, src, b"x", 0).is_ok()
        })
        .count();
    assert_eq!(admitted, 40, "160 / 4");
    assert!(a.fleet().fallback_decisions >= 100);
}

#[test]
fn windows_are_cut_from_unix_time_and_end_with_it() {
    let p = policy("game");
    let (mut a, ka) = node(&p, 1);
    for _ in 0..8 {
        assert!(a.admit(&p, &ka, ip("192.0.2.1"), b"x", 0).is_ok());
    }
    let deltas = a.shared_windows().deltas();
    assert!(deltas.iter().all(|d| d.window == 1_000), "{deltas:?}");
    // The relay's clock at the window's end is Unix time's.
    a.roll(ORIGIN_MS + WINDOW_MS);
    assert_eq!(
        a.shared_windows().shared(),
        0,
        "forgotten with their window"
    );
    assert!(a.admit(&p, &ka, ip("192.0.2.1"), b"x", WINDOW_MS).is_ok());
}

#[test]
fn relays_and_http_budgets_never_share_a_key() {
    let a = UdpFleetBudgets::new("game", WINDOW_MS, None, None);
    let b = UdpFleetBudgets::new("voice", WINDOW_MS, None, None);
    let c = UdpFleetBudgets::new("game", 1_000, None, None);
    let mut ids = vec![
        a.global_identity,
        a.prefix_identity,
        b.global_identity,
        b.prefix_identity,
        c.global_identity,
        c.prefix_identity,
        BudgetLevel::Global.identity(WINDOW_MS),
        BudgetLevel::Source.identity(WINDOW_MS),
    ];
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8);
    assert_eq!(a, UdpFleetBudgets::new("game", WINDOW_MS, None, None));
}

#[test]
fn a_reload_keeps_the_relays_shared_keys() {
    let p = policy("game");
    let (mut a, ka) = node(&p, 1);
    for _ in 0..8 {
        assert!(a.admit(&p, &ka, ip("192.0.2.1"), b"x", 0).is_ok());
    }
    let shared = a.shared_windows().shared();
    assert!(shared >= 1);
    // Another share (nodes_expected) keeps the counts.
    let mut shares = p.clone();
    shares.budgets.fleet.global = Some(Budget::flat(20).unwrap());
    assert!(a.fits(&shares));
    let mut q = p.clone();
    q.budgets.tracked = Ceiling::new(128, 8).unwrap();
    assert!(!a.fits(&q));
    a.renew(&q);
    assert_eq!(a.shared_windows().shared(), shared);
    // A relay that is no longer fleet-scoped counts from its own clock
    // again: new counters.
    let mut local = p.clone();
    local.budgets.fleet = UdpFleetBudgets::default();
    assert!(!a.fits(&local));
}
