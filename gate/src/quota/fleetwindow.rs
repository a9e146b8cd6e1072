//! Budgets shared across a fleet: one shard's side of fixed windows.
//!
//! A fleet-scoped budget (`scope = "fleet"` on `[quota.global]`,
//! `[quota.source]` or `[quota.identity]`) is decided like any other, by
//! this shard's own window count, with no network on the request path.
//! What makes it the fleet's budget is that a *shared* key is decided
//! under a lease ([`super::windowlease`]): a cap on what this shard
//! counts, taken from what the fleet has not counted or leased. Every
//! `sync_ms` the shard hands the reconciler what it counted and what its
//! lease still holds (in the same [`FleetBatch`](super::fleet::FleetBatch)
//! as its rate limits'); the engine adds the count to the window's key
//! (`INCRBY`, the key expiring once its window is over), keeps the
//! node's outstanding leases beside it (dropped a few seconds after the
//! node stops exchanging) and reads the sum back, and
//! [`FleetWindows::apply`] tightens or renews the shard's lease from it.
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
//! **The bound**: leases hand out at most what nobody counted or holds,
//! so the window admits about the limit at any pace (not the limit plus
//! what the others admit in a lag), and no view lifts a limit: the cap
//! never lets this shard's own count pass the whole budget, whatever
//! Redis says.
//!
//! [`FleetWindows::choose`] and [`FleetWindows::record`] are O(probe) and
//! allocate nothing; batches (on the shard's sync timer) allocate.

use super::fleet::{share_threshold, FLEET_PROBE};
use super::window::Budget;
use super::windowlease::WindowLease;

/// A budget level that may be fleet-scoped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BudgetLevel {
    Global = 1,
    Source = 2,
    Identity = 3,
    Tenant = 4,
    Principal = 5,
    Resource = 6,
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
    pub tenant: Option<Budget>,
    pub principal: Option<Budget>,
    pub resource: Option<Budget>,
}

impl FleetBudgets {
    /// The local share of `level`, when it is fleet-scoped.
    #[inline]
    pub fn share(&self, level: BudgetLevel) -> Option<Budget> {
        match level {
            BudgetLevel::Global => self.global,
            BudgetLevel::Source => self.source,
            BudgetLevel::Identity => self.identity,
            BudgetLevel::Tenant => self.tenant,
            BudgetLevel::Principal => self.principal,
            BudgetLevel::Resource => self.resource,
        }
    }

    /// Whether any level is fleet-scoped (the windows are then cut from
    /// Unix time).
    #[inline]
    pub fn any(&self) -> bool {
        self.global.is_some()
            || self.source.is_some()
            || self.identity.is_some()
            || self.tenant.is_some()
            || self.principal.is_some()
            || self.resource.is_some()
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
    /// What the key's lease on this shard still holds unspent (see
    /// [`super::windowlease`]).
    pub outstanding: u32,
}

/// A shared key as `explain --live` shows it: this shard's counts not
/// yet in a view (pending, in flight), and the fleet's count and held
/// leases as the last view had them.
pub type SharedLive = (u32, u32, Option<(u64, u64)>);

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
    /// The fleet's count in the last view that had the key, and what live
    /// leases held beside it.
    learned: Option<(u64, u64)>,
    /// What this shard may count of the key in the window.
    lease: WindowLease,
    /// The lease's outstanding as the batch in flight reported it, and as
    /// the last batch a view included did.
    held_inflight: u32,
    held_seen: u32,
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
    /// in a view (pending, in flight), and the fleet's count and held
    /// leases as the last view had them. `explain --live`. O(probe).
    pub fn pending(&self, identity: u64, key: u64, window: u64) -> Option<SharedLive> {
        let s = self.table[self.find(identity, key)?]?;
        (s.window == window).then_some((s.pending, s.inflight, s.learned))
    }

    /// How to decide a request of a fleet-scoped budget, and the budget it
    /// is held to: `count` is this shard's count of the key in `window`
    /// before the request, `whole` the budget, `share` its local share.
    /// Shares the key once `count + 1` reaches [`share_threshold`] (what it
    /// counted so far becomes pending, so the fleet learns it); a shared
    /// key is held to what is left of its lease. `fallback`: the engine is
    /// away. O(probe); no allocation.
    #[inline]
    pub fn choose(
        &mut self,
        fallback: bool,
        (identity, key): (u64, u64),
        (window, window_ms): (u64, u64),
        count: u32,
        (whole, share): (Budget, Budget),
        reserve: bool,
    ) -> (Budget, WindowChoice) {
        if fallback {
            return (share, WindowChoice::Share);
        }
        let i = match self.find(identity, key) {
            Some(i) => i,
            None => match self.admit_key((identity, key), count, (whole, share), reserve) {
                Some(i) => i,
                None if count + 1 < share_threshold(whole.limit()) => {
                    return (whole, WindowChoice::Local)
                }
                None => return (share, WindowChoice::Share),
            },
        };
        let Some(s) = &mut self.table[i] else {
            return (share, WindowChoice::Share);
        };
        if s.window != window {
            // A new key, or a new window: the old one's counts are over.
            s.window = window;
            s.window_ms = window_ms;
            s.pending = count;
            s.inflight = 0;
            s.learned = None;
            s.lease = WindowLease::start(count, whole, share);
            s.held_inflight = 0;
            s.held_seen = 0;
        } else {
            s.lease.terms(whole, share);
        }
        (s.lease.budget(whole, count), WindowChoice::Shared(i))
    }

    /// A place for a key that reaches its share threshold: `None` when it
    /// is below it (decided alone) or finds no room (counted in
    /// `unshared`). O(probe).
    #[inline]
    fn admit_key(
        &mut self,
        (identity, key): (u64, u64),
        count: u32,
        (whole, share): (Budget, Budget),
        reserve: bool,
    ) -> Option<usize> {
        if count + 1 < share_threshold(whole.limit()) {
            return None;
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
            return None;
        };
        self.table[i] = Some(SharedWindow {
            identity,
            key,
            window: u64::MAX,
            window_ms: 0,
            pending: 0,
            inflight: 0,
            learned: None,
            lease: WindowLease::start(count, whole, share),
            held_inflight: 0,
            held_seen: 0,
        });
        self.live += 1;
        Some(i)
    }

    /// Counts a request admitted under [`WindowChoice::Shared`]. O(1).
    #[inline]
    pub fn record(&mut self, choice: WindowChoice) {
        if let WindowChoice::Shared(i) = choice {
            if let Some(s) = &mut self.table[i] {
                s.pending = s.pending.saturating_add(1);
                s.lease.record();
            }
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
                outstanding: s.lease.outstanding(),
            })
            .collect()
    }

    /// The batch was handed over: what was pending is in flight.
    pub fn begin_flight(&mut self) {
        for s in self.table.iter_mut().flatten() {
            s.inflight = s.pending;
            s.pending = 0;
            s.held_inflight = s.lease.outstanding();
        }
    }

    /// A view includes the batch in flight.
    pub fn end_flight(&mut self) {
        for s in self.table.iter_mut().flatten() {
            s.inflight = 0;
            s.held_seen = s.held_inflight;
        }
    }

    /// Takes in a view of round `round`: every shared key the view has a
    /// count for tightens its lease to what the other nodes left, and
    /// leases anew when due ([`WindowLease::view`]). O(capacity); no
    /// allocation.
    pub fn apply(&mut self, round: u64, counts: impl Fn(u64, u64, u64) -> Option<(u64, u64)>) {
        for s in self.table.iter_mut().flatten() {
            let Some((fleet, held)) = counts(s.identity, s.key, s.window) else {
                continue;
            };
            s.learned = Some((fleet.saturating_sub(held), held));
            let unreported = s.pending.saturating_add(s.inflight);
            s.lease.view(round, fleet, unreported, s.held_seen);
        }
    }
}

#[cfg(test)]
#[path = "fleetwindow_tests.rs"]
mod tests;
