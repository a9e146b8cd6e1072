//! One shared budget window key's lease: what a shard may count of the
//! key in the window.
//!
//! A shard reports two things of a shared key each exchange: what it
//! counted since the last (added to the window's count in the engine, for
//! good), and what its lease still holds unspent (`outstanding`: held by
//! the engine for this node while it keeps exchanging, and dropped a few
//! seconds after it stops, so a node that dies strands nothing). The
//! fleet's count of a window, as a view has it, is everything counted
//! plus every live node's outstanding lease: what any node may yet spend.
//!
//! Until its leases start a key is held to the local share. A view read
//! [`LEASE_ROUNDS`] rounds after the key's last lease (the first view of a
//! key only starts the count of rounds), when less than half of the last
//! lease is left, leases this shard its part of what nobody holds:
//! `(limit - the others' count and leases - this shard's cap) /
//! participants`, rounded up. A lease never hands out what another node
//! holds, however fast the others spend. Every view also tightens: the
//! cap never passes the limit less what the others counted and hold, so a
//! node that restarts into a spent window refuses at once; and it never
//! passes the whole budget, whatever Redis says.
//!
//! Pure and allocation-free; [`super::fleetwindow`] holds the entries.

use super::terms::LEASE_ROUNDS;
use super::window::Budget;

/// A shared key's lease in its window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WindowLease {
    /// The whole budget (critical, normal) and the participants it is
    /// leased among (the whole over the local share, rounded).
    limit: u32,
    normal: u32,
    parts: u32,
    /// What this shard itself counted in the window.
    own: u32,
    /// The lease: `own` may reach these (critical, normal).
    cap: u32,
    cap_normal: u32,
    /// The last lease's size: the next is taken once less than half of
    /// it is left.
    grant: u32,
    /// The view round of the last lease (0: no view yet).
    leased_round: u64,
}

impl WindowLease {
    /// A key entering a window with `count` of this shard's own, held to
    /// the local share until its leases start.
    pub(crate) fn start(count: u32, whole: Budget, share: Budget) -> WindowLease {
        let mut lease = WindowLease {
            limit: 0,
            normal: 0,
            parts: 1,
            own: count,
            cap: share.limit(),
            cap_normal: share.normal_limit(),
            grant: share.limit(),
            leased_round: 0,
        };
        lease.terms(whole, share);
        lease
    }

    /// The budget's terms as the profile has them now (a reload may have
    /// changed them).
    #[inline]
    pub(crate) fn terms(&mut self, whole: Budget, share: Budget) {
        self.limit = whole.limit();
        self.normal = whole.normal_limit();
        let share = share.limit().max(1);
        self.parts = ((whole.limit() + share / 2) / share).max(1);
    }

    /// The budget a request is held to when the shard's count of the key
    /// is `count`: admitted while `own` is under the cap of its class.
    #[inline]
    pub(crate) fn budget(&self, whole: Budget, count: u32) -> Budget {
        let left = |cap: u32| count.saturating_add(cap.saturating_sub(self.own));
        whole.capped(left(self.cap), left(self.cap_normal))
    }

    /// Counts an admitted request.
    #[inline]
    pub(crate) fn record(&mut self) {
        self.own = self.own.saturating_add(1);
    }

    /// What the lease still holds unspent.
    #[inline]
    pub(crate) fn outstanding(&self) -> u32 {
        self.cap.saturating_sub(self.own)
    }

    /// Takes in a view of round `round` whose count of the window is
    /// `fleet`: it includes all but `unreported` of this shard's count,
    /// and `held` as this shard's outstanding lease (what its last batch
    /// in the view said). Tightens the caps to what the others left;
    /// leases anew when due.
    pub(crate) fn view(&mut self, round: u64, fleet: u64, unreported: u32, held: u32) {
        let in_view = u64::from(self.own.saturating_sub(unreported)) + u64::from(held);
        let others = fleet.saturating_sub(in_view);
        let room = |limit: u32| u64::from(limit).saturating_sub(others) as u32;
        self.cap = self.cap.min(room(self.limit));
        self.cap_normal = self.cap_normal.min(room(self.normal));
        if self.leased_round == 0 {
            self.leased_round = round;
            return;
        }
        let left = self.cap.saturating_sub(self.own);
        if round < self.leased_round + LEASE_ROUNDS || left > self.grant / 2 {
            return;
        }
        self.leased_round = round;
        let part = |limit: u32, cap: u32| room(limit).saturating_sub(cap).div_ceil(self.parts);
        self.grant = part(self.limit, self.cap);
        let normal = part(self.normal, self.cap_normal);
        self.cap = self.cap.saturating_add(self.grant).min(room(self.limit));
        self.cap_normal = (self.cap_normal.saturating_add(normal)).min(room(self.normal));
    }
}
