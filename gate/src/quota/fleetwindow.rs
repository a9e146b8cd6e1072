//! Budgets shared across a fleet: one shard's side of fixed windows.
//!
//! A fleet-scoped budget (`scope = "fleet"` on `[quota.global]`,
//! `[quota.source]` or `[quota.identity]`) is decided like any other, by
//! this shard's own window count, with no network on the request path.
//! What makes it the fleet's budget is that the count of a *shared* key is
//! the fleet's count as last learned plus what this shard counted since:
//! every `sync_ms` the shard hands what it counted to the reconciler (in
//! the same [`FleetBatch`](super::fleet::FleetBatch) as its rate limits'),
//! the engine adds it to the window's key (`INCRBY`, the key expiring once
//! its window is over) and reads the fleet's count back, and
//! [`FleetWindows::apply`] sets the shard's count to that count plus what
//! it counted that the reading does not include.
//!
//! **Windows are the fleet's.** A window is cut from Unix time (the caller
//! passes `now_ms` as milliseconds since the epoch, the shard's clock
//! plus its origin), so window `i` is the same interval on every node whose
//! clock is within a small part of a window of the others' (NTP). The
//! engine's key names the window: a node whose clock is behind adds to the
//! window it is in, and its count starts again at its own boundary.
//!
//! **Only keys that matter travel**, as for rate limits: a key is shared
//! once its count in the window reaches [`share_threshold`] of its limit
//! (1/16, at least 1); the global budget's one key is shared in every
//! window once it reaches it. The shared set has a fixed capacity whose
//! last eighth only critical and health routes may take; a key that finds
//! no room adds no state and is held to its local share, and so is every
//! fleet-scoped budget while the engine is away. An entry lives until its
//! window is over ([`FleetWindows::roll`]): leaving earlier would count
//! the fleet's share twice when it came back.
//!
//! **The overshoot** is the rate limits' bound: in the lag of about two
//! `sync_ms` a participant (a shard, for a budget whose key is not the
//! steered source) sees only its own counts, so a window admits at most
//! the limit plus what the other participants admit in that lag.
//!
//! [`FleetWindows::choose`] and [`FleetWindows::record`] are O(probe) and
//! allocate nothing; batches (on the shard's sync timer) allocate.

use super::fleet::{share_threshold, FLEET_PROBE};
use super::window::Budget;

/// A budget level that may be fleet-scoped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BudgetLevel {
    Global = 1,
    Source = 2,
    Identity = 3,
}

impl BudgetLevel {
    /// The level's stable identity under a window length: the same on
    /// every node, so every node adds to the same engine key; two lengths
    /// never share a key. SplitMix64 of the pair.
    pub fn identity(self, window_ms: u64) -> u64 {
        let mut z = (u64::from(self as u8) << 56 ^ window_ms).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The fleet-scoped budget levels and each one's local share: what a
/// shard holds the level to while the engine is away or a key finds no
/// room to be shared (the budget divided by `nodes_expected`, and by the
/// shards for a key that is not the steered source). `None`: the level is
/// not fleet-scoped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetBudgets {
    pub global: Option<Budget>,
    pub source: Option<Budget>,
    pub identity: Option<Budget>,
}

impl FleetBudgets {
    /// The local share of `level`, when it is fleet-scoped.
    #[inline]
    pub fn share(&self, level: BudgetLevel) -> Option<Budget> {
        match level {
            BudgetLevel::Global => self.global,
            BudgetLevel::Source => self.source,
            BudgetLevel::Identity => self.identity,
        }
    }

    /// Whether any level is fleet-scoped (the windows are then cut from
    /// Unix time).
    #[inline]
    pub fn any(&self) -> bool {
        self.global.is_some() || self.source.is_some() || self.identity.is_some()
    }
}

/// One shared window key's count since the last batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowDelta {
    /// The level's identity ([`BudgetLevel::identity`]).
    pub identity: u64,
    /// The partition key under the fleet's key (0 for the global budget).
    pub key: u64,
    /// The window's index (Unix ms / `window_ms`).
    pub window: u64,
    pub window_ms: u64,
    /// Requests counted since the last batch.
    pub count: u32,
}

/// How a request of a fleet-scoped budget is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowChoice {
    /// Not shared: the whole budget, nothing counted for the fleet.
    Local,
    /// Shared: the whole budget; the entry at this index counts it.
    Shared(usize),
    /// The local share: the engine is away, or the key found no room.
    Share,
}

#[derive(Clone, Copy, Debug)]
struct SharedWindow {
    identity: u64,
    key: u64,
    window: u64,
    window_ms: u64,
    /// Counted since the last batch.
    pending: u32,
    /// Counted in the outstanding batch (not yet in a view).
    inflight: u32,
    /// The fleet's count in the last view that had the key.
    learned: Option<u64>,
}

/// One shard's shared window keys. Single-threaded; allocated once.
#[derive(Debug)]
pub struct FleetWindows {
    table: Box<[Option<SharedWindow>]>,
    mask: usize,
    live: usize,
    normal_ceiling: usize,
    /// Keys that found the set full (held to their local share).
    pub unshared: u64,
}

impl Default for FleetWindows {
    fn default() -> Self {
        FleetWindows::with_capacity(0)
    }
}

impl FleetWindows {
    /// A set of `capacity` keys (a power of two, at least one probe
    /// window; 0: nothing is shared). Allocates once.
    pub fn with_capacity(capacity: usize) -> FleetWindows {
        let n = if capacity == 0 {
            0
        } else {
            capacity.max(FLEET_PROBE).next_power_of_two()
        };
        FleetWindows {
            table: vec![None; n].into_boxed_slice(),
            mask: n.saturating_sub(1),
            live: 0,
            normal_ceiling: n - n / 8,
            unshared: 0,
        }
    }

    /// Keys shared now.
    pub fn shared(&self) -> usize {
        self.live
    }

    #[inline]
    fn start(&self, identity: u64, key: u64) -> usize {
        (key ^ identity.rotate_left(23)) as usize & self.mask
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

    /// The shared entry of a key in `window`: this shard's counts not yet
    /// in a view (pending, in flight), and the fleet's count as the last
    /// view had it. `explain --live`. O(probe).
    pub fn pending(&self, identity: u64, key: u64, window: u64) -> Option<(u32, u32, Option<u64>)> {
        let s = self.table[self.find(identity, key)?]?;
        (s.window == window).then_some((s.pending, s.inflight, s.learned))
    }

    /// How to decide a request of a fleet-scoped budget: `count` is this
    /// shard's count of the key in `window` before the request, `limit`
    /// the budget's. Shares the key once `count + 1` reaches
    /// [`share_threshold`] (what it counted so far becomes pending, so the
    /// fleet learns it). `fallback`: the engine is away. O(probe); no
    /// allocation.
    #[inline]
    pub fn choose(
        &mut self,
        fallback: bool,
        (identity, key): (u64, u64),
        (window, window_ms): (u64, u64),
        count: u32,
        limit: u32,
        reserve: bool,
    ) -> WindowChoice {
        if fallback {
            return WindowChoice::Share;
        }
        if let Some(i) = self.find(identity, key) {
            if let Some(s) = &mut self.table[i] {
                if s.window != window {
                    // A new window: the old one's counts are over.
                    s.window = window;
                    s.window_ms = window_ms;
                    s.pending = count;
                    s.inflight = 0;
                    s.learned = None;
                }
            }
            return WindowChoice::Shared(i);
        }
        if count + 1 < share_threshold(limit) {
            return WindowChoice::Local;
        }
        let ceiling = if reserve {
            self.table.len()
        } else {
            self.normal_ceiling
        };
        let free = if self.live >= ceiling || self.table.is_empty() {
            None
        } else {
            let start = self.start(identity, key);
            (0..FLEET_PROBE)
                .map(|i| (start + i) & self.mask)
                .find(|&i| self.table[i].is_none())
        };
        let Some(i) = free else {
            self.unshared += 1;
            return WindowChoice::Share;
        };
        self.table[i] = Some(SharedWindow {
            identity,
            key,
            window,
            window_ms,
            pending: count,
            inflight: 0,
            learned: None,
        });
        self.live += 1;
        WindowChoice::Shared(i)
    }

    /// Counts a request admitted under [`WindowChoice::Shared`]. O(1).
    #[inline]
    pub fn record(&mut self, choice: WindowChoice) {
        if let WindowChoice::Shared(i) = choice {
            if let Some(s) = &mut self.table[i] {
                s.pending = s.pending.saturating_add(1);
            }
        }
    }

    /// The budget a choice holds a request to: the whole budget, or the
    /// local share.
    #[inline]
    pub fn budget(choice: WindowChoice, whole: Budget, share: Budget) -> Budget {
        if choice == WindowChoice::Share {
            share
        } else {
            whole
        }
    }

    /// Forgets the entries of windows before `window` (their counts are
    /// over). O(capacity); the shard's sync timer.
    pub fn roll(&mut self, window: u64) {
        for e in self.table.iter_mut() {
            if matches!(e, Some(s) if s.window < window) {
                *e = None;
                self.live -= 1;
            }
        }
    }

    /// Every shared key's pending count, for a batch. Allocates.
    pub fn deltas(&self) -> Vec<WindowDelta> {
        self.table
            .iter()
            .flatten()
            .map(|s| WindowDelta {
                identity: s.identity,
                key: s.key,
                window: s.window,
                window_ms: s.window_ms,
                count: s.pending,
            })
            .collect()
    }

    /// The batch was handed over: what was pending is in flight.
    pub fn begin_flight(&mut self) {
        for s in self.table.iter_mut().flatten() {
            s.inflight = s.pending;
            s.pending = 0;
        }
    }

    /// A view includes the batch in flight.
    pub fn end_flight(&mut self) {
        for s in self.table.iter_mut().flatten() {
            s.inflight = 0;
        }
    }

    /// Sets every shared key the view has a count for to that count plus
    /// what this shard counted that the view does not include: `set(level
    /// identity, key, window, count)`. O(capacity); no allocation.
    pub fn apply(
        &mut self,
        counts: impl Fn(u64, u64, u64) -> Option<u64>,
        mut set: impl FnMut(u64, u64, u64, u32),
    ) {
        for s in self.table.iter_mut().flatten() {
            let Some(fleet) = counts(s.identity, s.key, s.window) else {
                continue;
            };
            s.learned = Some(fleet);
            let mine = u64::from(s.pending) + u64::from(s.inflight);
            let n = fleet.saturating_add(mine).min(u64::from(u32::MAX)) as u32;
            set(s.identity, s.key, s.window, n);
        }
    }
}

#[cfg(test)]
#[path = "fleetwindow_tests.rs"]
mod tests;
