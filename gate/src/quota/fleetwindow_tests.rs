use super::*;
use crate::quota::fleet::{FleetState, FleetView};
use crate::quota::{Ceiling, Class, Quota, QuotaDecision, QuotaLimits, QuotaRequest, QuotaSizes};
use std::collections::HashMap;

const WINDOW_MS: u64 = 1_000;

fn quota() -> Quota {
    let c = Ceiling::new(1024, 64).unwrap();
    Quota::new(&QuotaSizes {
        rate_entries: 1024,
        policy_slots: 16,
        slot_grace_ms: 1_000,
        window_ms: WINDOW_MS,
        window_keys: c,
        lease_keys: c,
        max_leases: 1024,
        operations: 0,
    })
    .unwrap()
}

/// A global budget of `limit`, fleet-scoped with a local share of
/// `limit / nodes`.
fn global(limit: u32, nodes: u32) -> QuotaLimits {
    let whole = Budget::flat(limit).unwrap();
    QuotaLimits {
        global: Some(whole),
        fleet: FleetBudgets {
            global: Some(Budget::flat((limit / nodes).max(1)).unwrap()),
            ..FleetBudgets::default()
        },
        ..QuotaLimits::default()
    }
}

fn req(source: u64) -> QuotaRequest<'static> {
    QuotaRequest {
        class: Class::Normal,
        source,
        operation: None,
        identity: None,
        rate: &[],
    }
}

/// One node of a simulated fleet: one shard and its reconciler, whose
/// engine is a map of window keys (`INCRBY`).
struct Node {
    quota: Quota,
    /// The rate side of `FleetState::apply` (no rate limit here).
    rate: crate::quota::RateTable,
    fleet: FleetState,
    merged: HashMap<(u64, u64, u64), u64>,
    included: u64,
    view: Option<FleetView>,
    round: u64,
    admitted: u64,
}

type Engine = HashMap<(u64, u64, u64), u64>;

impl Node {
    fn new() -> Node {
        Node {
            quota: quota(),
            rate: crate::quota::RateTable::new(16).unwrap(),
            fleet: FleetState::with_capacity(64),
            merged: HashMap::new(),
            included: 0,
            view: None,
            round: 0,
            admitted: 0,
        }
    }

    fn request(&mut self, limits: &QuotaLimits, now_ms: u64) -> bool {
        let d = self
            .quota
            .admit_shared(limits, &req(7), &mut self.fleet, now_ms);
        let ok = matches!(d, QuotaDecision::Admit(_));
        if let QuotaDecision::Admit(t) = d {
            self.quota.release(t);
            self.admitted += 1;
        }
        ok
    }

    /// What `GateState::fleet_sync` does.
    fn shard_timer(&mut self, now_ms: u64) {
        if let Some(view) = &self.view {
            let quota = &mut self.quota;
            if self.fleet.apply(view, 0, &mut self.rate, now_ms, 0) && !view.fallback {
                let gid = BudgetLevel::Global.identity(WINDOW_MS);
                self.fleet.windows.apply(
                    |i, k, w| view.count(i, k, w),
                    |i, k, w, n| quota.set_fleet_count(i == gid, k, w, n),
                );
            }
        }
        self.fleet.windows.roll(now_ms / WINDOW_MS);
        let merged = &mut self.merged;
        let included = &mut self.included;
        self.fleet.hand_off(0, now_ms, |b| {
            for d in b.windows {
                *merged.entry((d.identity, d.key, d.window)).or_default() += u64::from(d.count);
            }
            *included = b.seq;
            true
        });
    }

    fn reconcile(&mut self, engine: &mut Engine, reachable: bool) {
        self.round += 1;
        let mut view = FleetView {
            round: self.round,
            fallback: !reachable,
            included: vec![self.included],
            ..FleetView::default()
        };
        if reachable {
            for (k, n) in self.merged.iter_mut() {
                let total = engine.entry(*k).or_default();
                *total += *n;
                view.counts.insert(*k, *total);
                *n = 0;
            }
        }
        self.view = Some(view);
    }
}

/// `nodes` nodes share a global budget; requests arrive every `gap_ms` at
/// the nodes in turn for `ms`; timers every `sync_ms`. What each window
/// admitted, fleet-wide.
fn run(nodes: usize, limit: u32, gap_ms: u64, sync_ms: u64, ms: u64, reachable: bool) -> Vec<u64> {
    let limits = global(limit, nodes as u32);
    let mut fleet: Vec<Node> = (0..nodes).map(|_| Node::new()).collect();
    let mut engine = Engine::new();
    let mut per_window = vec![0u64; (ms / WINDOW_MS) as usize + 1];
    let mut next = 0;
    for now in 0..ms {
        if now % gap_ms == 0 {
            if fleet[next % nodes].request(&limits, now) {
                per_window[(now / WINDOW_MS) as usize] += 1;
            }
            next += 1;
        }
        for (i, n) in fleet.iter_mut().enumerate() {
            let phase = (i as u64 * 7) % sync_ms;
            if now % sync_ms == phase {
                n.shard_timer(now);
            }
            if now % sync_ms == (phase + sync_ms / 2) % sync_ms {
                n.reconcile(&mut engine, reachable);
            }
        }
    }
    per_window
}

#[test]
fn three_nodes_hold_a_global_budget_within_the_overshoot_bound() {
    // 300 per second at 3000 requests a second over three nodes: alone
    // each would pass 300, together 900.
    let windows = run(3, 300, 1, 20, 10_000, true);
    // Overshoot: the others' rate (2000/s) x two sync intervals = 80.
    for (i, n) in windows.iter().enumerate().take(10) {
        assert!((300..=380).contains(n), "window {i}: {n} admitted");
    }
}

#[test]
fn without_the_engine_each_node_holds_its_local_share() {
    let windows = run(3, 300, 1, 20, 5_000, false);
    for (i, n) in windows.iter().enumerate().skip(1).take(4) {
        assert_eq!(*n, 300, "window {i}: 3 x 100");
    }
}

#[test]
fn a_key_is_shared_once_it_reaches_a_sixteenth_of_its_limit() {
    let mut w = FleetWindows::with_capacity(16);
    let id = BudgetLevel::Source.identity(WINDOW_MS);
    assert_eq!(
        w.choose(false, (id, 9), (3, WINDOW_MS), 5, 160, false),
        WindowChoice::Local
    );
    let c = w.choose(false, (id, 9), (3, WINDOW_MS), 9, 160, false);
    assert!(matches!(c, WindowChoice::Shared(_)));
    w.record(c);
    assert_eq!(
        w.pending(id, 9, 3),
        Some((10, 0, None)),
        "what it counted travels"
    );
    // The next window starts from this shard's count there.
    let c = w.choose(false, (id, 9), (4, WINDOW_MS), 0, 160, false);
    w.record(c);
    assert_eq!(w.pending(id, 9, 4), Some((1, 0, None)));
    w.roll(5);
    assert_eq!(w.shared(), 0, "a window's entries end with it");
}

#[test]
fn a_full_set_holds_new_keys_to_their_share_without_new_state() {
    let mut w = FleetWindows::with_capacity(8);
    let id = BudgetLevel::Identity.identity(WINDOW_MS);
    let shared = (0..64u64)
        .filter(|k| {
            matches!(
                w.choose(false, (id, k << 20), (1, WINDOW_MS), 10, 10, false),
                WindowChoice::Shared(_)
            )
        })
        .count();
    assert_eq!(shared, 7, "7/8 of 8 for normal routes");
    assert_eq!(w.unshared, 57);
    assert!(matches!(
        w.choose(false, (id, 99 << 20), (1, WINDOW_MS), 10, 10, true),
        WindowChoice::Shared(_)
    ));
}

#[test]
fn levels_and_window_lengths_have_distinct_identities() {
    let ids = [
        BudgetLevel::Global.identity(1_000),
        BudgetLevel::Source.identity(1_000),
        BudgetLevel::Identity.identity(1_000),
        BudgetLevel::Global.identity(60_000),
    ];
    for (i, a) in ids.iter().enumerate() {
        for b in &ids[i + 1..] {
            assert_ne!(a, b);
        }
    }
}
