use super::*;
use crate::quota::rate::RatePolicy;

const ID: u64 = 0x1234_5678_9abc_def0;

fn slot() -> Slot {
    Slot::new(3).unwrap()
}

/// One node of a simulated fleet: one shard (its bucket table and shared
/// set) and its reconciler, which talks to the fleet's engine (`Engine`).
struct Node {
    rate: RateTable,
    fleet: FleetState,
    /// The reconciler's side: counts merged from batches, the last batch
    /// merged, the last view and when it was read.
    merged: HashMap<(u64, u64), FleetDelta>,
    included: u64,
    view: Option<(FleetView, u64)>,
    round: u64,
    admitted: u64,
}

/// The engine: each key's empty-at time in µs, under [`fleet_take`] (the
/// rule the engine's script follows).
type Engine = HashMap<(u64, u64), f64>;

impl Node {
    fn new() -> Node {
        Node {
            rate: RateTable::new(1024).unwrap(),
            fleet: FleetState::with_capacity(64),
            merged: HashMap::new(),
            included: 0,
            view: None,
            round: 0,
            admitted: 0,
        }
    }

    /// What `rate_step` does for a fleet-scoped limit.
    fn request(&mut self, policy: &RatePolicy, share: &RatePolicy, key: u64, now_ms: u64) -> bool {
        let choice = self
            .fleet
            .choose(&self.rate, (policy, share), slot(), ID, key, false, now_ms);
        let allowed = self.rate.try_acquire(share, slot(), key, now_ms).allowed;
        if allowed {
            self.fleet.record(choice, policy, share, now_ms);
            self.admitted += 1;
        }
        allowed
    }

    /// The shard's sync timer: take in the last view, hand off a batch.
    fn shard_timer(&mut self, now_ms: u64) {
        if let Some((view, read_ms)) = &self.view {
            self.fleet
                .apply(view, 0, &mut self.rate, now_ms, now_ms - read_ms);
        }
        let merged = &mut self.merged;
        let included = &mut self.included;
        self.fleet.hand_off(0, now_ms, |b| {
            for d in b.deltas {
                merged
                    .entry((d.identity, d.key))
                    .and_modify(|m| m.count += d.count)
                    .or_insert(d);
            }
            *included = b.seq;
            true
        });
    }

    /// The reconciler's round: flush every merged key to the engine, read
    /// the fleet's buckets back, publish the view.
    fn reconcile(&mut self, engine: &mut Engine, now_ms: u64, reachable: bool) {
        self.round += 1;
        let mut view = FleetView {
            round: self.round,
            fallback: !reachable,
            included: vec![self.included],
            ages_us: HashMap::new(),
            counts: HashMap::new(),
            held: HashMap::new(),
        };
        if reachable {
            let now_us = now_ms as f64 * 1000.0;
            for (k, d) in self.merged.iter_mut() {
                let (e, age) = fleet_take(
                    engine.get(k).copied(),
                    now_us,
                    d.count,
                    d.interval_ns as f64 / 1000.0,
                    d.burst,
                );
                engine.insert(*k, e);
                view.ages_us.insert(*k, age as i64);
                d.count = 0;
            }
        }
        self.view = Some((view, now_ms));
    }
}

/// Runs `nodes` nodes for `ms` milliseconds: the client sends one request
/// every `gap_ms` to the next node in turn; shard timers and reconciler
/// rounds run every `sync_ms`, each at its own phase. Returns what the
/// fleet admitted.
fn run_fleet(nodes: usize, policy: RatePolicy, gap_ms: u64, sync_ms: u64, ms: u64) -> u64 {
    run_fleet_to(nodes, policy, gap_ms, sync_ms, ms, |n| n)
}

/// [`run_fleet`] with the `n`th request sent to node `to(n) % nodes`.
fn run_fleet_to(
    nodes: usize,
    policy: RatePolicy,
    gap_ms: u64,
    sync_ms: u64,
    ms: u64,
    to: impl Fn(usize) -> usize,
) -> u64 {
    let share = policy.split(nodes as u32).unwrap();
    let mut fleet: Vec<Node> = (0..nodes).map(|_| Node::new()).collect();
    let mut engine = Engine::new();
    let mut next = 0;
    for now in 0..ms {
        if now % gap_ms == 0 {
            let n = &mut fleet[to(next) % nodes];
            n.request(&policy, &share, 42, now);
            next += 1;
        }
        for (i, n) in fleet.iter_mut().enumerate() {
            let phase = (i as u64 * 31 + 7) % sync_ms;
            if now % sync_ms == phase {
                n.shard_timer(now);
            }
            if now % sync_ms == (phase + sync_ms / 2) % sync_ms {
                n.reconcile(&mut engine, now, true);
            }
        }
    }
    fleet.iter().map(|n| n.admitted).sum()
}

#[test]
fn three_nodes_hold_the_overshoot_bound() {
    // 300 a minute per client, the client sending 60 a second spread over
    // three nodes for a minute (3600 requests): one node alone would pass
    // its burst and the refill (300 + 300), three without sharing 1800.
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let sync_ms = 100;
    let admitted = run_fleet(3, policy, 1000 / 60, sync_ms, 60_000);
    // The bound of docs/fleet.md: nodes x the key's rate at each node x
    // two sync intervals (20 a second each, 0.2 s: 12).
    let exact = 300 + 300;
    let bound = 3 * 20 * 2 * sync_ms / 1000;
    assert!(
        admitted <= exact + bound,
        "{admitted} admitted, over {exact} + {bound}"
    );
    assert!(
        admitted >= exact - 10,
        "{admitted} admitted, far under {exact}"
    );
}

#[test]
fn a_longer_sync_interval_only_widens_the_overshoot_to_its_bound() {
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    for sync_ms in [20, 250, 1000] {
        let admitted = run_fleet(3, policy, 5, sync_ms, 30_000);
        // 200 a second over three nodes: 66.7 a second each.
        let bound = (3 * 200 * 2 * sync_ms).div_ceil(3 * 1000);
        let exact = 300 + 150;
        assert!(
            admitted <= exact + bound,
            "sync {sync_ms}: {admitted} admitted, over {exact} + {bound}"
        );
    }
}

#[test]
fn a_key_far_under_its_limit_is_never_shared() {
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let share = policy.split(3).unwrap();
    let mut n = Node::new();
    // Five a minute: the bucket never loses 300/16 tokens.
    for minute in 0..10u64 {
        for i in 0..5 {
            assert!(n.request(&policy, &share, 7, minute * 60_000 + i * 1000));
        }
        n.shard_timer(minute * 60_000 + 30_000);
    }
    assert_eq!(n.fleet.shared(), 0);
    assert!(n.merged.is_empty(), "nothing travelled");
}

#[test]
fn a_shared_key_reports_what_its_bucket_lost_before_it_was_shared() {
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let share = policy.split(3).unwrap();
    let mut n = Node::new();
    for _ in 0..share_threshold(300) + 5 {
        assert!(n.request(&policy, &share, 9, 0));
    }
    assert_eq!(n.fleet.shared(), 1);
    let total: u32 = {
        n.shard_timer(1);
        n.merged.values().map(|d| d.count).sum()
    };
    assert_eq!(total, share_threshold(300) + 5);
}

#[test]
fn without_the_engine_a_node_holds_its_share() {
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let share = policy.split(3).unwrap();
    let mut n = Node::new();
    let mut engine = Engine::new();
    n.reconcile(&mut engine, 0, false);
    n.shard_timer(0);
    assert!(n.fleet.fallback);
    let passed = (0..1000)
        .filter(|_| n.request(&policy, &share, 5, 1))
        .count();
    assert_eq!(passed, 100, "300 / 3 nodes");
    // The engine is back: the next view ends the fallback.
    n.reconcile(&mut engine, 2, true);
    n.shard_timer(3);
    assert!(!n.fleet.fallback);
}

#[test]
fn a_view_leases_a_share_and_never_more_than_the_node_alone_would_admit() {
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let share = policy.split(3).unwrap();
    let mut n = Node::new();
    let passed = (0..400)
        .filter(|_| n.request(&policy, &share, 11, 0))
        .count() as u32;
    // Until the fleet is heard: the tokens before the key is shared, then
    // the local share (100).
    assert!(
        (100..=share_threshold(300) + 100).contains(&passed),
        "{passed}"
    );
    n.shard_timer(1);
    // Whoever writes the engine says the bucket is full: the node takes
    // its lease of it (a third), and in all never more than it alone
    // would have admitted (300).
    let mut ages = HashMap::new();
    ages.insert((ID, n.merged.keys().next().unwrap().1), 60_000_000i64);
    let view = FleetView {
        round: 7,
        fallback: false,
        included: vec![n.included],
        ages_us: ages.clone(),
        counts: HashMap::new(),
        held: HashMap::new(),
    };
    n.fleet.apply(&view, 0, &mut n.rate, 2, 0);
    // A key's first view only tightens: the other nodes' first spending
    // may not be in it yet.
    assert!(!n.request(&policy, &share, 11, 2));
    let view = FleetView {
        round: 7 + LEASE_ROUNDS,
        fallback: false,
        included: vec![n.included],
        ages_us: ages.clone(),
        counts: HashMap::new(),
        held: HashMap::new(),
    };
    n.fleet.apply(&view, 0, &mut n.rate, 3, 0);
    let after = (0..400)
        .filter(|_| n.request(&policy, &share, 11, 3))
        .count() as u32;
    assert_eq!(after, 100, "a third of the 300 claimed");
    assert!(passed + after <= 300, "{passed} + {after}");
    // Again full, rounds later: the node alone has nothing left.
    let view = FleetView {
        round: 7 + 2 * LEASE_ROUNDS,
        fallback: false,
        included: vec![n.included],
        ages_us: ages.clone(),
        counts: HashMap::new(),
        held: HashMap::new(),
    };
    n.fleet.apply(&view, 0, &mut n.rate, 4, 0);
    let more = (0..400)
        .filter(|_| n.request(&policy, &share, 11, 4))
        .count() as u32;
    assert!(passed + after + more <= 300, "{passed} + {after} + {more}");
    // A view that says the bucket is emptier than this node knows is
    // taken: 10 s later, the fleet says 1 second's worth (5), less what
    // this node took that the view does not include.
    let key = *ages.keys().next().unwrap();
    ages.insert(key, 1_000_000);
    let view = FleetView {
        round: 7 + 3 * LEASE_ROUNDS,
        fallback: false,
        included: vec![n.included],
        ages_us: ages,
        counts: HashMap::new(),
        held: HashMap::new(),
    };
    n.fleet.apply(&view, 0, &mut n.rate, 10_000, 0);
    let late = (0..100)
        .filter(|_| n.request(&policy, &share, 11, 10_000))
        .count();
    assert!(late <= 5, "{late}");
}

#[test]
fn one_batch_is_outstanding_until_a_view_includes_it() {
    let policy = RatePolicy::per_second(10, 10).unwrap();
    let mut f = FleetState::with_capacity(16);
    let mut rate = RateTable::new(16).unwrap();
    let c = f.choose(&rate, (&policy, &policy), slot(), ID, 1, false, 0);
    assert!(
        matches!(c, Choice::Unheard(_)),
        "burst 10 shares at once (unheard until a view)"
    );
    assert!(rate.try_acquire(&policy, slot(), 1, 0).allowed);
    f.record(c, &policy, &policy, 0);
    let mut seqs = Vec::new();
    assert!(f.hand_off(0, 0, |b| {
        seqs.push(b.seq);
        true
    }));
    assert!(!f.hand_off(0, 0, |_| unreachable!("one batch at a time")));
    let mut view = FleetView {
        round: 1,
        included: vec![0],
        ..FleetView::default()
    };
    f.apply(&view, 0, &mut rate, 0, 0);
    assert!(!f.hand_off(0, 0, |_| unreachable!("not included yet")));
    view.round = 2;
    view.included = vec![seqs[0]];
    f.apply(&view, 0, &mut rate, 0, 0);
    assert!(f.hand_off(0, 0, |b| b.seq == 2));
}

#[test]
fn a_refused_batch_keeps_its_counts_pending() {
    let policy = RatePolicy::per_second(10, 10).unwrap();
    let mut f = FleetState::with_capacity(16);
    let rate = RateTable::new(16).unwrap();
    let c = f.choose(&rate, (&policy, &policy), slot(), ID, 1, false, 0);
    f.record(c, &policy, &policy, 0);
    assert!(!f.hand_off(0, 0, |_| false));
    assert_eq!(f.counters.batches_refused, 1);
    assert!(f.hand_off(0, 0, |b| b.deltas[0].count == 1));
}

#[test]
fn a_full_shared_set_holds_new_keys_to_their_share_without_new_state() {
    let policy = RatePolicy::per_second(10, 10).unwrap();
    let mut f = FleetState::with_capacity(8);
    let rate = RateTable::new(16).unwrap();
    let mut shared = 0;
    for key in 0..64u64 {
        if matches!(
            f.choose(&rate, (&policy, &policy), slot(), ID, key << 20, false, 0),
            Choice::Unheard(_)
        ) {
            shared += 1;
        }
    }
    assert_eq!(shared, 7, "7/8 of 8 for normal routes");
    assert_eq!(f.shared(), 7);
    assert_eq!(
        f.choose(&rate, (&policy, &policy), slot(), ID, 99 << 20, false, 0),
        Choice::Share
    );
    assert!(matches!(
        f.choose(&rate, (&policy, &policy), slot(), ID, 99 << 20, true, 0),
        Choice::Unheard(_)
    ));
    assert_eq!(f.counters.unshared, 58);
}

#[test]
fn an_idle_shared_key_stops_travelling_and_leaves_the_set_once_its_bucket_is_full() {
    let policy = RatePolicy::per_second(10, 10).unwrap();
    let mut f = FleetState::with_capacity(16);
    let rate = RateTable::new(16).unwrap();
    let c = f.choose(&rate, (&policy, &policy), slot(), ID, 1, false, 0);
    f.record(c, &policy, &policy, 0);
    assert!(f.hand_off(0, 10, |_| true));
    let view = FleetView {
        round: 1,
        included: vec![1],
        ..FleetView::default()
    };
    let mut rate = rate;
    f.apply(&view, 0, &mut rate, 20, 0);
    // Still refilling, so still in the set, and travelling for a few
    // batches after its last request.
    assert!(
        f.hand_off(0, 500, |b| b.deltas.len() == 1),
        "still refilling"
    );
    let view = FleetView {
        round: 2,
        included: vec![2],
        ..FleetView::default()
    };
    f.apply(&view, 0, &mut rate, 600, 0);
    assert!(f.hand_off(0, 1_200, |b| b.deltas.is_empty()));
    assert_eq!(f.shared(), 0);
}

#[test]
fn the_engine_rule_caps_debt_at_one_burst() {
    let (e, age) = fleet_take(None, 1_000_000.0, 1000, 100.0, 10);
    assert_eq!(e, 1_001_000.0);
    assert_eq!(age, -1000.0);
    // A key idle past a full refill starts full.
    let (_, age) = fleet_take(Some(0.0), 1_000_000.0, 1, 100.0, 10);
    assert_eq!(age, 900.0);
}

#[test]
fn a_node_that_never_hears_the_fleet_holds_its_share_from_the_first_request() {
    // Redis accepts connections but never answers: no view, no fallback
    // either (the round has not timed out yet).
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let share = policy.split(3).unwrap();
    let mut n = Node::new();
    let mut passed = 0u32;
    for ms in 0..1_000 {
        passed += u32::from(n.request(&policy, &share, 13, ms));
        if ms % 100 == 0 {
            n.shard_timer(ms);
        }
    }
    assert!(!n.fleet.fallback);
    // What the key spent before it was shared, then the share (100) and
    // its refill over the second (300 a minute / 3: 1.7).
    assert!(passed <= share_threshold(300) + 100 + 2, "{passed}");
    assert!(passed >= 100, "{passed}");
}

#[test]
fn rotated_keys_cost_the_engine_nothing_once_nobody_asks_for_them() {
    // 3,600 requests with fresh keys (a header value rotated each time):
    // each key is shared at its first request (burst 10: threshold 1).
    let policy = RatePolicy::per_hour(10, 10).unwrap();
    let share = policy.split(3).unwrap();
    let mut n = Node::new();
    n.fleet = FleetState::with_capacity(8192);
    let key = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for k in 0..3_600u64 {
        n.request(&policy, &share, key(k), k);
    }
    let mut travelled = Vec::new();
    for round in 0..20u64 {
        let now = 4_000 + round * 100;
        let mut sent = 0;
        n.fleet.hand_off(0, now, |b| {
            sent = b.deltas.len();
            true
        });
        travelled.push(sent);
        let view = FleetView {
            round: round + 1,
            included: vec![round + 1],
            ..FleetView::default()
        };
        n.fleet.apply(&view, 0, &mut n.rate, now, 0);
    }
    // Each key's first count, then the quiet batches, then nothing.
    assert_eq!(travelled[0], 3_600);
    assert!(
        travelled[..=QUIET_BATCHES as usize]
            .iter()
            .all(|&t| t == 3_600),
        "{travelled:?}"
    );
    assert!(
        travelled[QUIET_BATCHES as usize + 1..]
            .iter()
            .all(|&t| t == 0),
        "{travelled:?}"
    );
    // A key asked for again travels again, and is held to the local share
    // until the fleet's count for it is heard.
    let c = n
        .fleet
        .choose(&n.rate, (&policy, &share), slot(), ID, key(7), false, 5_000);
    assert!(matches!(c, Choice::Unheard(_)));
}

#[test]
fn three_nodes_hold_a_limit_within_ten_percent_at_any_pace() {
    // 300 a minute, three nodes, sync 100 ms, for a minute: exact is the
    // burst and the minute's refill, 600, whatever the client's pace.
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let exact = 600.0;
    for gap_ms in [1, 2, 5, 17, 50] {
        let admitted = run_fleet(3, policy, gap_ms, 100, 60_000) as f64;
        assert!(
            admitted <= exact * 1.10,
            "a request every {gap_ms} ms: {admitted} admitted, over {exact} + 10 %"
        );
        if gap_ms <= 17 {
            assert!(admitted >= exact * 0.90, "every {gap_ms} ms: {admitted}");
        }
    }
}

#[test]
fn a_client_on_one_node_reaches_most_of_the_limit_within_two_seconds() {
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    let admitted = run_fleet_to(3, policy, 1, 100, 2_000, |_| 0);
    // The burst (300) and two seconds' refill (10): at least 90 % of it.
    assert!(admitted >= 279, "{admitted} of 310 in 2 s on one node");
    assert!(admitted <= 310, "{admitted}");
}

#[test]
fn a_fast_client_gets_the_burst_and_no_more_before_the_first_exchanges() {
    // 600 requests as fast as one a millisecond, over three nodes: the
    // first leases come only once every node's first spending is in the
    // engine, so the fleet admits the burst and the refill, not a lease
    // handed out twice.
    let policy = RatePolicy::per_minute(300, 300).unwrap();
    for ms in [300u64, 600, 2_000] {
        let admitted = run_fleet(3, policy, 1, 100, ms);
        let exact = 300 + ms * 5 / 1000;
        assert!(admitted <= exact + exact / 10, "{admitted} in {ms} ms");
    }
}

#[test]
fn a_quiet_key_gives_its_place_to_a_new_one() {
    let policy = RatePolicy::per_second(10, 10).unwrap();
    let mut f = FleetState::with_capacity(8);
    let mut rate = RateTable::new(16).unwrap();
    // Seven keys take every normal place (7/8 of 8).
    for key in 0..7u64 {
        let c = f.choose(&rate, (&policy, &policy), slot(), ID, key << 20, false, 0);
        assert!(matches!(c, Choice::Unheard(_)));
        f.record(c, &policy, &policy, 0);
    }
    assert_eq!(f.shared(), 7);
    assert_eq!(
        f.choose(&rate, (&policy, &policy), slot(), ID, 99 << 20, false, 0),
        Choice::Share,
        "no room while they travel"
    );
    // Nobody asks for them: past the quiet batches they stop travelling.
    for round in 1..=u64::from(QUIET_BATCHES) + 2 {
        f.hand_off(0, round, |_| true);
        let view = FleetView {
            round,
            included: vec![round],
            ..FleetView::default()
        };
        f.apply(&view, 0, &mut rate, round, 0);
    }
    let c = f.choose(&rate, (&policy, &policy), slot(), ID, 99 << 20, false, 100);
    assert!(matches!(c, Choice::Unheard(_)), "{c:?}");
    assert_eq!(f.shared(), 7);
    assert_eq!(f.counters.retired, 1);
}
