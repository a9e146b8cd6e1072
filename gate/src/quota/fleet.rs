//! Rate limits shared across a fleet: one shard's side of it.
//!
//! A fleet-scoped rate limit (`scope = "fleet"`) is decided like any other,
//! by this shard's own token bucket, with no network on the request path.
//! What makes it a fleet's limit is this module: the keys that matter are
//! *shared* ([`FleetState`]), their consumption is handed to the process's
//! reconciler every `sync_ms` as a [`FleetBatch`], and the fleet's bucket
//! the reconciler learns back ([`FleetView`]) replaces this shard's bucket,
//! plus what this shard counted since.
//!
//! **The model: one token bucket per key, kept by the fleet.** The
//! engine (Redis) holds each shared key's bucket as a token clock, the same
//! *empty-at* time the [`RateTable`] keeps ([`fleet_take`] is its rule, the
//! engine's script the same rule): every node adds what it consumed since
//! its last flush and reads back the bucket's age (how long it has been
//! refilling; tokens = age / interval). A node then sets its own bucket to
//! that age less what it consumed since the reading. Between two readings a
//! node sees its own consumption at once and the others' one round late, so
//! a key that turns hot is over-admitted by at most what the other nodes
//! admit in about two sync intervals: nodes x the key's rate at each node x
//! 2 x `sync_ms` (docs/fleet.md; `three_nodes_hold_the_overshoot_bound`).
//!
//! **Only keys that matter travel.** A key is shared once its bucket has
//! lost [`share_threshold`] tokens (1/16 of the burst, at least 1): a
//! client far under its limit costs the engine nothing. The shared set is
//! a table of fixed capacity ([`FleetState::with_capacity`]) whose last
//! eighth only critical and health routes may take; a key that finds no
//! room adds no state and is held to its *local share* (the limit divided
//! by `nodes_expected`), the bound the fleet keeps without the engine. A
//! shared key leaves the set once its bucket is full again and nothing of
//! it is pending.
//!
//! **Failure.** When the reconciler cannot reach the engine it says so in
//! its view ([`FleetView::fallback`]) and every fleet-scoped limit is held
//! to its local share until a view says otherwise; nothing here waits.
//!
//! Batches and views allocate (on the shard's sync timer, off the request
//! path); [`FleetState::choose`] and [`FleetState::record`] are O(probe)
//! and allocate nothing.

use super::fleetwindow::{FleetWindows, WindowDelta};
use super::rate::{RatePolicy, RateTable};
use super::slots::Slot;
use std::collections::HashMap;

/// The shard's milliseconds as signed nanoseconds (a bucket's empty-at
/// may lie before the clock's start).
#[inline]
fn ns(ms: u64) -> i64 {
    ms.saturating_mul(1_000_000).min(i64::MAX as u64) as i64
}

/// Entries in one probe window of the shared set.
pub const FLEET_PROBE: usize = 8;
/// The shared set's default capacity per shard.
pub const DEFAULT_SHARED_KEYS: usize = 4096;
/// A key is shared once its bucket lost `burst / SHARE_DIVISOR` tokens.
pub const SHARE_DIVISOR: u32 = 16;

/// Tokens a key's bucket must have lost before it is shared: 1/16 of the
/// burst, at least 1.
#[inline]
pub fn share_threshold(burst: u32) -> u32 {
    (burst / SHARE_DIVISOR).max(1)
}

/// What a fleet-scoped rate limit adds to its definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetRate {
    /// The limit a node holds alone (Redis away, or no room to share a
    /// key): the limit divided by `nodes_expected`.
    pub local_share: RatePolicy,
}

/// One shared key's consumption since the last batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetDelta {
    /// The (rate limit, host) pair's stable identity.
    pub identity: u64,
    /// The partition key, under the fleet's key (the same on every node).
    pub key: u64,
    /// Tokens taken since the last batch (0: only the fleet's count is
    /// wanted back).
    pub count: u32,
    /// The policy's time per token and burst, which the engine's bucket
    /// is kept under.
    pub interval_ns: u64,
    pub burst: u32,
}

/// What a shard hands to the reconciler every `sync_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetBatch {
    pub shard: u32,
    /// Counts up from 1 per shard; a view says up to which it accounts for.
    pub seq: u64,
    pub deltas: Vec<FleetDelta>,
    /// Shared budget windows' counts ([`super::fleetwindow`]).
    pub windows: Vec<WindowDelta>,
}

/// What the reconciler learned in one round, published to every shard.
/// Immutable once built.
#[derive(Clone, Debug, Default)]
pub struct FleetView {
    /// Counts up per round; 0 is "nothing learned yet".
    pub round: u64,
    /// The engine could not be reached (or answered wrongly) this round:
    /// fleet-scoped limits are held to their local share.
    pub fallback: bool,
    /// Per shard: the last batch this round's counts include.
    pub included: Vec<u64>,
    /// Per (identity, key): the fleet bucket's age in microseconds when it
    /// was read (negative: in debt).
    pub ages_us: HashMap<(u64, u64), i64>,
    /// Per (level identity, key, window): the fleet's count of a shared
    /// budget window when it was read, every live node's outstanding
    /// lease of it included (what any node may yet spend).
    pub counts: HashMap<(u64, u64, u64), u64>,
    /// Per (level identity, key, window): the part of `counts` that live
    /// leases hold unspent.
    pub held: HashMap<(u64, u64, u64), u64>,
}

impl FleetView {
    /// The fleet bucket's age of a key, as read. O(1).
    pub fn age_us(&self, identity: u64, key: u64) -> Option<i64> {
        self.ages_us.get(&(identity, key)).copied()
    }

    /// The fleet's count of a budget window, as read (live leases
    /// included), and what the leases hold of it. O(1).
    pub fn window(&self, identity: u64, key: u64, window: u64) -> Option<(u64, u64)> {
        let k = (identity, key, window);
        let count = self.counts.get(&k).copied()?;
        Some((count, self.held.get(&k).copied().unwrap_or(0)))
    }
}

/// The engine's rule for one key, the same as its script's: the bucket's
/// empty-at time (µs) is brought up to at most one full refill ago, moved
/// on by `count` tokens, and held to at most one burst of debt. Returns the
/// new empty-at and the bucket's age at `now_us`. Pure; for the shard's
/// tests and the script's.
pub fn fleet_take(
    empty_at_us: Option<f64>,
    now_us: f64,
    count: u32,
    interval_us: f64,
    burst: u32,
) -> (f64, f64) {
    let tolerance = interval_us * f64::from(burst);
    let mut e = empty_at_us.unwrap_or(now_us - tolerance);
    if e < now_us - tolerance {
        e = now_us - tolerance;
    }
    e += f64::from(count) * interval_us;
    if e > now_us + tolerance {
        e = now_us + tolerance;
    }
    (e, now_us - e)
}

#[derive(Clone, Copy, Debug)]
struct Shared {
    identity: u64,
    key: u64,
    slot: Slot,
    policy: RatePolicy,
    /// Taken since the last batch.
    pending: u32,
    /// Taken in the outstanding batch (not yet in a view).
    inflight: u32,
    /// The last time a request took from it.
    last_ms: u64,
    /// The fleet bucket's age (µs) in the last view that had the key.
    learned_age_us: Option<i64>,
    /// Batches in a row it had nothing pending in.
    quiet: u32,
    /// This node's own bucket for the key under the limit's policy (its
    /// empty-at, ns on the shard's clock), charged with this node's
    /// requests only: what the node alone would admit, the bound on
    /// anything a view sets.
    own_empty_ns: i64,
    /// The nodes the limit is leased among (the local share's divisor).
    nodes: u32,
    /// The view round of the last lease: a view fewer than
    /// [`LEASE_ROUNDS`] rounds later may only tighten it.
    leased_round: u64,
}

pub use super::terms::LEASE_ROUNDS;

/// Batches a shared key keeps travelling with nothing pending (to keep
/// its fleet count fresh for a client that pauses); past them it travels
/// again only when requested, and its next request is held to the local
/// share until a view has it again.
pub const QUIET_BATCHES: u32 = 10;

/// Counters of the shared set, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetCounters {
    /// Keys in the shared set now.
    pub shared_keys: u64,
    /// Keys that found the shared set full (held to their local share).
    pub unshared: u64,
    /// Requests decided under the local share because the engine was away.
    pub fallback_decisions: u64,
    /// Batches handed to the reconciler, and those its full queue refused
    /// (their counts stay pending for the next).
    pub batches: u64,
    pub batches_refused: u64,
    /// Buckets set from a view.
    pub applied: u64,
    /// Quiet keys that gave their place to a new one.
    pub retired: u64,
}

/// Budget windows of another table on the shard (a UDP relay's) that
/// travel in the shard's batches and take its views with the gate's own:
/// the shard's sync timer brings each peer along
/// ([`FleetState::hand_off_with`], `GateState::fleet_sync_with`), so one
/// batch and one view per round carry every table of the shard. Called on
/// the timer only, never on the request path.
pub trait FleetPeer {
    /// Its shared window keys.
    fn shared_windows(&mut self) -> &mut FleetWindows;
    /// Takes a view new this round: follows its fallback and, when the
    /// engine answered, sets each shared key's count from the fleet's.
    /// O(capacity); no allocation.
    fn take_view(&mut self, view: &FleetView);
    /// Forgets the shared keys of windows over at `unix_ms` (Unix time).
    fn roll(&mut self, unix_ms: u64);
}

/// How a fleet-scoped request is decided. Every choice is decided under
/// the limit's local share (the limit divided by `nodes_expected`): a key
/// not shared yet by the node's own share, a shared one by its lease of
/// what the fleet had left (set by each view, spent at the share's pace);
/// a shared one is counted for the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Not shared yet: nothing counted.
    Local,
    /// Shared: the full policy; the entry at this index counts it.
    Shared(usize),
    /// Shared, but no view has told this node the fleet's count for it
    /// yet: the local share decides (a node that cannot hear the fleet
    /// must not spend the whole limit); the entry counts it.
    Unheard(usize),
    /// The local share: the engine is away, or the key found no room.
    Share,
}

/// One shard's shared keys and its side of the exchange. See the module
/// doc. Single-threaded; allocated once ([`FleetState::with_capacity`]).
#[derive(Debug)]
pub struct FleetState {
    table: Box<[Option<Shared>]>,
    mask: usize,
    live: usize,
    /// Most keys normal routes may share (7/8 of the capacity).
    normal_ceiling: usize,
    /// The batch handed over and not yet in a view.
    outstanding: Option<u64>,
    next_seq: u64,
    applied_round: u64,
    /// Whether the last view said the engine was away.
    pub fallback: bool,
    pub counters: FleetCounters,
    /// The shared keys of fleet-scoped budgets; their counts travel in the
    /// same batches and views.
    pub windows: FleetWindows,
}

impl Default for FleetState {
    fn default() -> Self {
        FleetState::with_capacity(0)
    }
}

impl FleetState {
    /// A shared set of `capacity` keys (rounded up to a power of two, at
    /// least one probe window; 0: none, nothing is ever shared). Allocates
    /// once.
    pub fn with_capacity(capacity: usize) -> FleetState {
        let n = if capacity == 0 {
            0
        } else {
            capacity.max(FLEET_PROBE).next_power_of_two()
        };
        FleetState {
            table: vec![None; n].into_boxed_slice(),
            mask: n.saturating_sub(1),
            live: 0,
            normal_ceiling: n - n / 8,
            outstanding: None,
            next_seq: 1,
            applied_round: 0,
            fallback: false,
            counters: FleetCounters::default(),
            windows: FleetWindows::with_capacity(capacity),
        }
    }

    pub fn capacity(&self) -> usize {
        self.table.len()
    }

    /// Keys shared now.
    pub fn shared(&self) -> usize {
        self.live
    }

    #[inline]
    fn start(&self, identity: u64, key: u64) -> usize {
        (key ^ identity.rotate_left(29)) as usize & self.mask
    }

    #[inline]
    fn find(&self, identity: u64, key: u64) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        let start = self.start(identity, key);
        (0..FLEET_PROBE)
            .map(|i| (start + i) & self.mask)
            .find(|&i| matches!(&self.table[i], Some(s) if s.identity == identity && s.key == key))
    }

    /// Whether a key is shared: this shard's tokens taken and not yet in
    /// a view (pending and in flight), and the fleet's tokens as the last
    /// view had them (`explain --live`). O(probe).
    pub fn live(&self, identity: u64, key: u64) -> Option<(u32, Option<u32>)> {
        let s = self.table[self.find(identity, key)?]?;
        let tokens = s.learned_age_us.map(|age_us| {
            let t = age_us.max(0) as u128 * 1000 / u128::from(s.policy.interval_ns().max(1));
            t.min(u128::from(s.policy.burst())) as u32
        });
        Some((s.pending.saturating_add(s.inflight), tokens))
    }

    /// How to decide a request of a fleet-scoped limit on `key`: looks the
    /// key up, and shares it when its bucket (`rate`, read under the local
    /// share, `policies.1`, which decides every request of the limit) has
    /// lost [`share_threshold`] of the share's tokens; `policies.0` is the
    /// limit's own, which the engine keeps the key under. O(probe); no
    /// allocation.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn choose(
        &mut self,
        rate: &RateTable,
        (policy, share): (&RatePolicy, &RatePolicy),
        slot: Slot,
        identity: u64,
        key: u64,
        reserve: bool,
        now_ms: u64,
    ) -> Choice {
        if self.fallback {
            self.counters.fallback_decisions += 1;
            return Choice::Share;
        }
        if let Some(i) = self.find(identity, key) {
            return self.heard(i);
        }
        let tokens = rate.peek(share, slot, key, now_ms).tokens;
        let lost = share.burst().saturating_sub(tokens);
        if lost + 1 < share_threshold(share.burst()) {
            return Choice::Local;
        }
        match self.insert(identity, key, slot, policy, lost, reserve, now_ms) {
            Some(i) => self.heard(i),
            None => {
                self.counters.unshared += 1;
                Choice::Share
            }
        }
    }

    /// Shared entry `i` as the chain uses it: [`Choice::Unheard`] until a
    /// view brought the fleet's count for it, and again once it stopped
    /// travelling (its count is stale).
    #[inline]
    fn heard(&self, i: usize) -> Choice {
        match &self.table[i] {
            Some(s) if s.learned_age_us.is_none() || s.quiet > QUIET_BATCHES => Choice::Unheard(i),
            _ => Choice::Shared(i),
        }
    }

    /// A new shared key whose bucket already lost `lost` tokens (counted as
    /// pending, so the fleet learns them). None when its window or the
    /// ceiling is full: no state is added.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        identity: u64,
        key: u64,
        slot: Slot,
        policy: &RatePolicy,
        lost: u32,
        reserve: bool,
        now_ms: u64,
    ) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        let ceiling = if reserve {
            self.table.len()
        } else {
            self.normal_ceiling
        };
        let start = self.start(identity, key);
        let window = (0..FLEET_PROBE).map(|i| (start + i) & self.mask);
        let free = (self.live < ceiling)
            .then(|| window.clone().find(|&i| self.table[i].is_none()))
            .flatten();
        // No room: a key that stopped travelling (nothing pending or in
        // flight, quiet past `QUIET_BATCHES`: the engine has its count)
        // gives up its place, so keys rotated by an attacker do not hold
        // new ones to their local share until their buckets refill.
        let i = match free {
            Some(i) => i,
            None => {
                let i = window.clone().find(|&i| {
                    self.table[i].as_ref().is_some_and(|s| {
                        s.quiet > QUIET_BATCHES && s.pending == 0 && s.inflight == 0
                    })
                })?;
                self.live -= 1;
                self.counters.retired += 1;
                i
            }
        };
        self.table[i] = Some(Shared {
            identity,
            key,
            slot,
            policy: *policy,
            pending: lost,
            inflight: 0,
            last_ms: now_ms,
            learned_age_us: None,
            quiet: 0,
            // Alone, the bucket lost `lost` tokens so far.
            own_empty_ns: ns(now_ms).saturating_sub(
                (i64::from(policy.burst().saturating_sub(lost)))
                    .saturating_mul(policy.interval_ns().min(i64::MAX as u64) as i64),
            ),
            nodes: 1,
            leased_round: 0,
        });
        self.live += 1;
        self.counters.shared_keys = self.live as u64;
        Some(i)
    }

    /// Counts a token a request took under [`Choice::Shared`] or
    /// [`Choice::Unheard`]; `policy` is the limit's own (the engine keeps
    /// the key's bucket under it), `share` its local share. O(1).
    #[inline]
    pub fn record(&mut self, choice: Choice, policy: &RatePolicy, share: &RatePolicy, now_ms: u64) {
        if let Choice::Shared(i) | Choice::Unheard(i) = choice {
            if let Some(s) = &mut self.table[i] {
                s.pending = s.pending.saturating_add(1);
                s.policy = *policy;
                s.last_ms = now_ms;
                s.nodes = (share.interval_ns() / policy.interval_ns().max(1)).max(1) as u32;
                let tolerance = policy.tolerance_ns().min(i64::MAX as u64) as i64;
                let interval = policy.interval_ns().min(i64::MAX as u64) as i64;
                s.own_empty_ns = s
                    .own_empty_ns
                    .max(ns(now_ms).saturating_sub(tolerance))
                    .saturating_add(interval);
            }
        }
    }

    /// Hands every shared key's pending count to `send` as one batch, when
    /// no earlier batch is outstanding; `send` returns whether it was
    /// taken (a full queue refuses: the counts stay pending). Drops keys
    /// whose bucket is full again with nothing pending. Allocates the
    /// batch; O(capacity). Runs on the shard's sync timer.
    pub fn hand_off(
        &mut self,
        shard: u32,
        now_ms: u64,
        send: impl FnOnce(FleetBatch) -> bool,
    ) -> bool {
        self.hand_off_with(shard, now_ms, &mut [], send)
    }

    /// [`hand_off`](Self::hand_off) with the shared windows of `peers`
    /// (other tables of the shard) in the same batch: in flight with it,
    /// done with it.
    pub fn hand_off_with(
        &mut self,
        shard: u32,
        now_ms: u64,
        peers: &mut [&mut dyn FleetPeer],
        send: impl FnOnce(FleetBatch) -> bool,
    ) -> bool {
        if self.outstanding.is_some() || self.table.is_empty() {
            return false;
        }
        self.forget_idle(now_ms);
        // The engine's work follows requests: a key travels while it is
        // requested and for `QUIET_BATCHES` batches after, then only when
        // requested again; one that comes back from quiet forgets the
        // count it learned, so it is held to the local share until a view
        // has it again (`Choice::Unheard`).
        for s in self.table.iter_mut().flatten() {
            if s.pending > 0 {
                if s.quiet > QUIET_BATCHES {
                    s.learned_age_us = None;
                }
                s.quiet = 0;
            } else {
                s.quiet = s.quiet.saturating_add(1);
            }
        }
        let deltas: Vec<FleetDelta> = self
            .table
            .iter()
            .flatten()
            .filter(|s| s.quiet <= QUIET_BATCHES)
            .map(|s| FleetDelta {
                identity: s.identity,
                key: s.key,
                count: s.pending,
                interval_ns: s.policy.interval_ns(),
                burst: s.policy.burst(),
            })
            .collect();
        let seq = self.next_seq;
        let mut windows = self.windows.deltas();
        for p in peers.iter_mut() {
            windows.extend(p.shared_windows().deltas());
        }
        if !send(FleetBatch {
            shard,
            seq,
            deltas,
            windows,
        }) {
            self.counters.batches_refused += 1;
            return false;
        }
        self.next_seq += 1;
        self.outstanding = Some(seq);
        self.counters.batches += 1;
        for s in self.table.iter_mut().flatten() {
            s.inflight = s.pending;
            s.pending = 0;
        }
        self.windows.begin_flight();
        for p in peers.iter_mut() {
            p.shared_windows().begin_flight();
        }
        true
    }

    /// The batch handed over and not yet in a view, by its sequence number.
    pub fn outstanding(&self) -> Option<u64> {
        self.outstanding
    }

    /// Drops keys with nothing pending or in flight whose bucket has had a
    /// full refill's time since it was last taken from.
    fn forget_idle(&mut self, now_ms: u64) {
        for e in self.table.iter_mut() {
            if let Some(s) = e {
                let idle_ms = now_ms.saturating_sub(s.last_ms);
                if s.pending == 0 && s.inflight == 0 && idle_ms > s.policy.full_refill_ms() {
                    *e = None;
                    self.live -= 1;
                }
            }
        }
        self.counters.shared_keys = self.live as u64;
    }

    /// Takes in a view: the outstanding batch is done once the view
    /// includes it, the fallback follows the view, and every shared key
    /// the view has a count for gets the fleet's bucket less what this
    /// shard took that the view does not include. `view_age_ms`: how long
    /// ago the view was read. O(capacity); no allocation. Returns whether
    /// the view was new.
    pub fn apply(
        &mut self,
        view: &FleetView,
        shard: usize,
        rate: &mut RateTable,
        now_ms: u64,
        view_age_ms: u64,
    ) -> bool {
        if view.round == 0 || view.round == self.applied_round {
            return false;
        }
        self.applied_round = view.round;
        let included = view.included.get(shard).copied().unwrap_or(0);
        if self.outstanding.is_some_and(|seq| included >= seq) {
            self.outstanding = None;
            for s in self.table.iter_mut().flatten() {
                s.inflight = 0;
            }
            self.windows.end_flight();
        }
        self.fallback = view.fallback;
        if view.fallback {
            return true;
        }
        let elapsed_ns = view_age_ms.saturating_mul(1_000_000) as i64;
        for s in self.table.iter_mut().flatten() {
            let Some(age_us) = view.age_us(s.identity, s.key) else {
                continue;
            };
            s.learned_age_us = Some(age_us);
            let mine = u64::from(s.pending) + u64::from(s.inflight);
            let mine_ns = (mine.saturating_mul(s.policy.interval_ns())).min(i64::MAX as u64) as i64;
            let age_ns = age_us
                .saturating_mul(1000)
                .saturating_add(elapsed_ns)
                .saturating_sub(mine_ns);
            // The lease: under the share's pace (`nodes` x the interval a
            // token) this age holds the fleet's remaining tokens divided by
            // `nodes`. Never more than this node alone would admit: its own
            // bucket's age, times `nodes` in the share's units.
            let tolerance = s.policy.tolerance_ns().min(i64::MAX as u64) as i64;
            let own_age = ns(now_ms)
                .saturating_sub(s.own_empty_ns)
                .clamp(0, tolerance);
            let bound = own_age.saturating_mul(i64::from(s.nodes));
            let age = age_ns.min(bound);
            // The first view of a key starts its count of rounds: the other
            // nodes' first spending may not be in it yet.
            if s.leased_round == 0 {
                s.leased_round = view.round;
            }
            if view.round >= s.leased_round + LEASE_ROUNDS {
                rate.set_age(&s.policy, s.slot, s.key, now_ms, age);
                s.leased_round = view.round;
            } else {
                rate.tighten_age(&s.policy, s.slot, s.key, now_ms, age);
            }
            self.counters.applied += 1;
        }
        true
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
