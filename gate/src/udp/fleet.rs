//! A UDP relay's budgets shared across a fleet: `scope = "fleet"` on a
//! relay's `global` and `prefix` budgets.
//!
//! The same model as the HTTP budgets' ([`crate::quota::fleetwindow`]): a
//! datagram is decided by this shard's own window count, with no network
//! and no lock or atomic on the datagram path; the count of a *shared* key
//! is the fleet's count as last learned plus what this shard counted
//! since. A key is shared once its count in the window reaches 1/16 of its
//! budget; alone (the engine away, or no room in the shared set) a shard
//! holds the budget to its local share ([`UdpFleetBudgets`]). Windows are
//! cut from Unix time, so window `i` is the same interval on every node.
//!
//! The relay's shared keys ([`UdpFleet`]) live beside its budget counters,
//! in the relay's own per-shard state; the shard's sync timer reaches them
//! through [`FleetPeer`] (implemented by [`UdpBudgets`]): their counts
//! travel in the shard's batch with the gate's, and they take the same
//! views. Each relay's keys carry identities of their own
//! ([`UdpFleetBudgets::new`]: the relay's name, the level, the window), so
//! two relays never share a key, nor a relay an HTTP budget's.
//!
//! [`UdpFleet::budget`] is O(probe) and allocates nothing; the timer's
//! calls are O(capacity).

use super::budgets::UdpBudgets;
use crate::quota::fleet::{FleetPeer, FleetView};
use crate::quota::fleetwindow::{FleetWindows, WindowChoice};
use crate::quota::{Budget, Class, Keyer};

/// What `scope = "fleet"` adds to a relay's budgets: each fleet-scoped
/// budget's local share (`None`: not fleet-scoped), and the identities its
/// keys carry in the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpFleetBudgets {
    /// The global budget's local share: the budget divided by
    /// `nodes_expected` and by the shard count (its one key is seen by
    /// every shard).
    pub global: Option<Budget>,
    /// A source prefix's local share: the budget divided by
    /// `nodes_expected` (a prefix is steered to one shard of each node).
    pub prefix: Option<Budget>,
    pub global_identity: u64,
    pub prefix_identity: u64,
}

impl UdpFleetBudgets {
    /// The shares of relay `relay` with windows of `window_ms`; the
    /// identities are the same on every node that names the relay alike.
    pub fn new(
        relay: &str,
        window_ms: u64,
        global: Option<Budget>,
        prefix: Option<Budget>,
    ) -> UdpFleetBudgets {
        UdpFleetBudgets {
            global,
            prefix,
            global_identity: identity(relay, 0x10, window_ms),
            prefix_identity: identity(relay, 0x11, window_ms),
        }
    }

    /// Whether any budget is fleet-scoped (the relay's windows are then
    /// cut from Unix time).
    #[inline]
    pub fn any(&self) -> bool {
        self.global.is_some() || self.prefix.is_some()
    }
}

/// A relay level's stable identity: FNV-1a of the relay's name, the level
/// and the window length, through SplitMix64.
fn identity(relay: &str, level: u8, window_ms: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"gapura udp\0".iter().chain(relay.as_bytes()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut z = (h ^ u64::from(level) << 56 ^ window_ms.rotate_left(17))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One relay's side of the fleet on one shard: its shared window keys,
/// whether the last view said the engine was away, the fleet's key seed
/// and the Unix time of the relay clock's origin. Allocated once
/// ([`UdpFleet::enable`]); a relay that never enables it shares nothing
/// and holds a fleet-scoped budget to its local share once a key passes
/// the share threshold.
#[derive(Default)]
pub struct UdpFleet {
    pub windows: FleetWindows,
    pub fallback: bool,
    keyer: Option<Keyer>,
    unix_origin_ms: u64,
    /// Datagrams decided under the local share because the engine was away.
    pub fallback_decisions: u64,
}

impl std::fmt::Debug for UdpFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpFleet")
            .field("shared", &self.windows.shared())
            .field("fallback", &self.fallback)
            .field("unix_origin_ms", &self.unix_origin_ms)
            .finish()
    }
}

impl UdpFleet {
    /// Shares under `seed` (the fleet's, the same on every node), up to
    /// `shared_keys` keys at once; the relay's clock reads 0 at Unix time
    /// `unix_origin_ms`. Allocates the shared set.
    pub fn enable(seed: [u8; 16], shared_keys: usize, unix_origin_ms: u64) -> UdpFleet {
        UdpFleet {
            windows: FleetWindows::with_capacity(shared_keys),
            fallback: false,
            keyer: Some(Keyer::new(seed)),
            unix_origin_ms,
            fallback_decisions: 0,
        }
    }

    /// The keyer of a fleet-scoped partition (the fleet's, when enabled).
    #[inline]
    pub fn keyer(&self) -> Option<&Keyer> {
        self.keyer.as_ref()
    }

    /// Unix ms at the relay clock's `now_ms`.
    #[inline]
    pub fn unix_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_add(self.unix_origin_ms)
    }

    /// The budget a datagram is held to and the fleet's choice for it:
    /// the whole budget when the level is not fleet-scoped (`share`
    /// None), or as [`FleetWindows::choose`] says. `count`: the shard's
    /// count of the key before the datagram. O(probe); no allocation.
    #[inline]
    pub fn budget(
        &mut self,
        share: Option<Budget>,
        whole: Budget,
        key: (u64, u64),
        window: (u64, u64),
        count: u32,
        class: Class,
    ) -> (Budget, WindowChoice) {
        let Some(share) = share else {
            return (whole, WindowChoice::Local);
        };
        let decided = self.windows.choose(
            self.fallback,
            key,
            window,
            count,
            (whole, share),
            class.may_use_reserve(),
        );
        if self.fallback {
            self.fallback_decisions += 1;
        }
        decided
    }
}

impl FleetPeer for UdpBudgets {
    fn shared_windows(&mut self) -> &mut FleetWindows {
        &mut self.fleet.windows
    }

    fn take_view(&mut self, view: &FleetView) {
        self.fleet.fallback = view.fallback;
        if view.fallback {
            return;
        }
        self.fleet
            .windows
            .apply(view.round, |identity, key, window| {
                view.window(identity, key, window)
            });
    }

    fn roll(&mut self, unix_ms: u64) {
        let window_ms = self.prefixes.window_ms();
        self.fleet.windows.roll(unix_ms / window_ms);
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
