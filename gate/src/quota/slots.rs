//! Policy slots: which 16-bit slot a (policy, host) pair's buckets carry.
//!
//! A slot is one rate policy on one host. Buckets are tagged with it, so a
//! client's budget on one host is not its budget on another, and the buckets
//! survive a reload as long as the pair does: the registry maps a stable
//! identity (a 64-bit hash of policy name and host, computed by the config
//! compiler) to the same slot across reloads. A rate or burst edit keeps the
//! slot, so the new numbers apply on the next touch of each bucket.
//!
//! A reload binds every pair the new snapshot uses ([`PolicySlots::bind`]
//! between [`PolicySlots::begin_reload`] and [`PolicySlots::finish_reload`]);
//! a pair not bound again is *retired*:
//!
//! 1. Retired: not live, its buckets kept for a grace period, because a
//!    request still running on the old snapshot may touch them. Binding the
//!    identity again in this time revives the slot with its buckets.
//! 2. Clearing: after the grace period the sweeper clears the slot's entries
//!    while it makes one full lap of the table.
//! 3. Free: after that lap no entry carries the slot, and it may be handed to
//!    a new identity, which therefore never reads an old policy's tokens.
//!
//! Slot 0 is never handed out. Capacity is fixed at construction; binding
//! and retiring allocate nothing. Per shard, no locks.

use super::rate::RatePolicy;
use std::num::NonZeroU16;

/// One rate policy on one host: the tag of its buckets. Never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(NonZeroU16);

impl Slot {
    /// The slot `n`; None for 0 ("no policy").
    pub const fn new(n: u16) -> Option<Slot> {
        match NonZeroU16::new(n) {
            Some(n) => Some(Slot(n)),
            None => None,
        }
    }

    pub const fn get(self) -> u16 {
        self.0.get()
    }
}

/// Most slots a registry may hold (slot 0 is reserved).
pub const MAX_SLOTS: u16 = u16::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    Live,
    Retired { since_ms: u64 },
    Clearing { until_swept: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Record {
    identity: u64,
    /// Whether `identity` is in the index (a freed slot keeps its mapping
    /// until it is handed to another identity).
    mapped: bool,
    state: SlotState,
    policy: Option<RatePolicy>,
    reload: u32,
}

/// Why a bind failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// Every slot is live or still retiring. Profile code
    /// `rate_limit.slots.exhausted`.
    Exhausted,
}

/// What the sweeper does with an entry of a slot.
pub(crate) enum SweepView<'a> {
    Keep,
    Clear,
    Live(&'a RatePolicy),
}

/// One shard's slot registry. See the module doc.
#[derive(Debug)]
pub struct PolicySlots {
    /// Indexed by slot; index 0 unused.
    records: Box<[Record]>,
    /// identity -> slot, linear probing, 0 = empty; at most half full.
    index: Box<[u16]>,
    index_shift: u32,
    /// Free slots, popped from the end.
    free: Vec<u16>,
    grace_ms: u64,
    reload: u32,
    /// Slots retired or clearing.
    pending: u32,
    /// The earliest grace end of a retired slot (u64::MAX: none known), and
    /// the earliest sweeper position that frees a clearing slot: `advance`
    /// scans the slots only when one of them is reached.
    due_ms: u64,
    due_swept: u64,
}

impl PolicySlots {
    /// A registry of `max_slots` slots (1..=65535) whose retired slots wait
    /// `grace_ms` before the sweeper clears them. Allocates once.
    pub fn new(max_slots: u16, grace_ms: u64) -> PolicySlots {
        let max_slots = max_slots.max(1);
        let index_len = (2 * (max_slots as usize + 1)).next_power_of_two();
        let empty = Record {
            identity: 0,
            mapped: false,
            state: SlotState::Free,
            policy: None,
            reload: 0,
        };
        PolicySlots {
            records: vec![empty; max_slots as usize + 1].into_boxed_slice(),
            index: vec![0; index_len].into_boxed_slice(),
            index_shift: 64 - index_len.trailing_zeros(),
            free: (1..=max_slots).rev().collect(),
            grace_ms,
            reload: 0,
            pending: 0,
            due_ms: u64::MAX,
            due_swept: u64::MAX,
        }
    }

    /// Starts a reload: every live slot counts as unused until bound again.
    pub fn begin_reload(&mut self) {
        self.reload = self.reload.wrapping_add(1);
    }

    /// The slot of `identity` with `policy` from now on: its existing slot
    /// (live, or retired and revived with its buckets), else a free one.
    /// O(1) expected.
    pub fn bind(&mut self, identity: u64, policy: RatePolicy) -> Result<Slot, SlotError> {
        let slot = match self.lookup_any(identity) {
            Some(slot) => {
                match self.records[slot as usize].state {
                    SlotState::Live => {}
                    SlotState::Retired { .. } | SlotState::Clearing { .. } => self.pending -= 1,
                    SlotState::Free => {
                        // Freed but still mapped to this identity: take it
                        // off the free list (cold path, O(free slots)).
                        if let Some(pos) = self.free.iter().position(|&s| s == slot) {
                            self.free.swap_remove(pos);
                        }
                    }
                }
                slot
            }
            None => {
                let slot = self.free.pop().ok_or(SlotError::Exhausted)?;
                let old = self.records[slot as usize];
                if old.mapped {
                    self.unmap(old.identity);
                }
                self.records[slot as usize].identity = identity;
                self.records[slot as usize].mapped = true;
                self.map(identity, slot);
                slot
            }
        };
        let r = &mut self.records[slot as usize];
        r.state = SlotState::Live;
        r.policy = Some(policy);
        r.reload = self.reload;
        Ok(Slot::new(slot).expect("slot 0 is never handed out"))
    }

    /// Ends a reload: retires every live slot not bound since
    /// [`begin_reload`](Self::begin_reload). Returns how many. O(slots).
    pub fn finish_reload(&mut self, now_ms: u64) -> u32 {
        let mut retired = 0;
        for r in self.records.iter_mut().skip(1) {
            if r.state == SlotState::Live && r.reload != self.reload {
                r.state = SlotState::Retired { since_ms: now_ms };
                retired += 1;
            }
        }
        self.pending += retired;
        if retired > 0 {
            self.due_ms = self.due_ms.min(now_ms.saturating_add(self.grace_ms));
        }
        retired
    }

    /// Retires the slot of `identity` now, if it is live.
    pub fn retire(&mut self, identity: u64, now_ms: u64) -> bool {
        let Some(slot) = self.lookup_any(identity) else {
            return false;
        };
        let r = &mut self.records[slot as usize];
        if r.state != SlotState::Live {
            return false;
        }
        r.state = SlotState::Retired { since_ms: now_ms };
        self.pending += 1;
        self.due_ms = self.due_ms.min(now_ms.saturating_add(self.grace_ms));
        true
    }

    /// The live slot of `identity`.
    pub fn lookup(&self, identity: u64) -> Option<Slot> {
        let slot = self.lookup_any(identity)?;
        if self.records[slot as usize].state == SlotState::Live {
            Slot::new(slot)
        } else {
            None
        }
    }

    pub fn is_live(&self, slot: Slot) -> bool {
        self.records
            .get(slot.get() as usize)
            .is_some_and(|r| r.state == SlotState::Live)
    }

    /// Whether `slot` may be handed to a new identity.
    pub fn is_free(&self, slot: Slot) -> bool {
        self.records
            .get(slot.get() as usize)
            .is_some_and(|r| r.state == SlotState::Free)
    }

    /// The policy a live slot was last bound with.
    pub fn policy(&self, slot: Slot) -> Option<&RatePolicy> {
        let r = self.records.get(slot.get() as usize)?;
        match r.state {
            SlotState::Live => r.policy.as_ref(),
            _ => None,
        }
    }

    pub fn capacity(&self) -> u16 {
        (self.records.len() - 1) as u16
    }

    pub fn live(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.state == SlotState::Live)
            .count()
    }

    /// Slots retired or being cleared.
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Moves retired slots past their grace into clearing (recording the
    /// sweeper position after which the table holds none of their entries),
    /// and clearing slots whose lap is done into free. O(slots) when one of
    /// those moves is due, else O(1).
    pub(crate) fn advance(&mut self, now_ms: u64, swept_total: u64, table_entries: u64) {
        if self.pending == 0 || (now_ms < self.due_ms && swept_total < self.due_swept) {
            return;
        }
        let (mut due_ms, mut due_swept) = (u64::MAX, u64::MAX);
        for slot in 1..self.records.len() {
            let r = &mut self.records[slot];
            match r.state {
                SlotState::Retired { since_ms } => {
                    let end = since_ms.saturating_add(self.grace_ms);
                    if now_ms >= end {
                        let until_swept = swept_total + table_entries;
                        r.state = SlotState::Clearing { until_swept };
                        due_swept = due_swept.min(until_swept);
                    } else {
                        due_ms = due_ms.min(end);
                    }
                }
                SlotState::Clearing { until_swept } => {
                    if swept_total >= until_swept {
                        r.state = SlotState::Free;
                        r.policy = None;
                        self.pending -= 1;
                        self.free.push(slot as u16);
                    } else {
                        due_swept = due_swept.min(until_swept);
                    }
                }
                _ => {}
            }
        }
        self.due_ms = due_ms;
        self.due_swept = due_swept;
    }

    pub(crate) fn sweep_view(&self, slot: u16) -> SweepView<'_> {
        match self.records.get(slot as usize) {
            Some(r) => match (r.state, r.policy.as_ref()) {
                (SlotState::Live, Some(p)) => SweepView::Live(p),
                (SlotState::Live, None) | (SlotState::Retired { .. }, _) => SweepView::Keep,
                (SlotState::Clearing { .. }, _) | (SlotState::Free, _) => SweepView::Clear,
            },
            None => SweepView::Clear,
        }
    }

    #[inline]
    fn home(&self, identity: u64) -> usize {
        (identity.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.index_shift) as usize
    }

    fn lookup_any(&self, identity: u64) -> Option<u16> {
        let mask = self.index.len() - 1;
        let mut i = self.home(identity);
        loop {
            let s = self.index[i];
            if s == 0 {
                return None;
            }
            if self.records[s as usize].identity == identity {
                return Some(s);
            }
            i = (i + 1) & mask;
        }
    }

    fn map(&mut self, identity: u64, slot: u16) {
        let mask = self.index.len() - 1;
        let mut i = self.home(identity);
        while self.index[i] != 0 {
            i = (i + 1) & mask;
        }
        self.index[i] = slot;
    }

    /// Removes `identity` from the index, shifting later entries of its run
    /// back so lookups need no tombstones.
    fn unmap(&mut self, identity: u64) {
        let mask = self.index.len() - 1;
        let mut hole = self.home(identity);
        loop {
            let s = self.index[hole];
            if s == 0 {
                return;
            }
            if self.records[s as usize].identity == identity {
                break;
            }
            hole = (hole + 1) & mask;
        }
        let mut j = (hole + 1) & mask;
        loop {
            let s = self.index[j];
            if s == 0 {
                break;
            }
            let home = self.home(self.records[s as usize].identity);
            // Move s into the hole when the hole lies between its home and j.
            if j.wrapping_sub(home) & mask >= j.wrapping_sub(hole) & mask {
                self.index[hole] = s;
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.index[hole] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(n: u64) -> RatePolicy {
        RatePolicy::per_second(n, 10).unwrap()
    }

    #[test]
    fn an_identity_keeps_its_slot_across_reloads() {
        let mut s = PolicySlots::new(8, 1_000);
        let a = s.bind(0xaaaa, policy(1)).unwrap();
        let b = s.bind(0xbbbb, policy(2)).unwrap();
        assert_ne!(a, b);
        s.begin_reload();
        assert_eq!(s.bind(0xbbbb, policy(3)).unwrap(), b);
        assert_eq!(s.bind(0xaaaa, policy(1)).unwrap(), a);
        assert_eq!(s.finish_reload(5), 0);
        assert_eq!(s.policy(b), Some(&policy(3)));
    }

    #[test]
    fn an_identity_left_out_of_a_reload_is_retired() {
        let mut s = PolicySlots::new(8, 1_000);
        let a = s.bind(1, policy(1)).unwrap();
        let b = s.bind(2, policy(1)).unwrap();
        s.begin_reload();
        s.bind(2, policy(1)).unwrap();
        assert_eq!(s.finish_reload(100), 1);
        assert!(!s.is_live(a));
        assert!(s.is_live(b));
        assert_eq!(s.lookup(1), None);
        assert_eq!(s.pending(), 1);
    }

    #[test]
    fn a_retired_identity_bound_again_in_grace_revives_its_slot() {
        let mut s = PolicySlots::new(8, 1_000);
        let a = s.bind(1, policy(1)).unwrap();
        assert!(s.retire(1, 0));
        assert_eq!(s.bind(1, policy(1)).unwrap(), a);
        assert!(s.is_live(a));
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn a_slot_frees_only_after_grace_and_a_full_lap() {
        let mut s = PolicySlots::new(2, 1_000);
        let a = s.bind(1, policy(1)).unwrap();
        s.retire(1, 0);
        s.advance(999, 0, 64);
        assert!(matches!(s.sweep_view(a.get()), SweepView::Keep));
        s.advance(1_000, 10, 64);
        assert!(matches!(s.sweep_view(a.get()), SweepView::Clear));
        s.advance(2_000, 73, 64);
        assert!(!s.is_free(a), "lap ends at 74 visited");
        s.advance(2_000, 74, 64);
        assert!(s.is_free(a));
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn a_full_registry_refuses_until_a_slot_is_free() {
        let mut s = PolicySlots::new(2, 0);
        s.bind(1, policy(1)).unwrap();
        let b = s.bind(2, policy(1)).unwrap();
        assert_eq!(s.bind(3, policy(1)), Err(SlotError::Exhausted));
        s.retire(2, 0);
        assert_eq!(s.bind(3, policy(1)), Err(SlotError::Exhausted));
        s.advance(0, 0, 16);
        s.advance(0, 16, 16);
        let c = s.bind(3, policy(1)).unwrap();
        assert_eq!(c, b, "the freed slot is reused");
        assert_eq!(s.lookup(2), None);
        assert_eq!(s.lookup(3), Some(c));
    }

    #[test]
    fn a_freed_slot_found_by_its_old_identity_leaves_the_free_list() {
        let mut s = PolicySlots::new(2, 0);
        let a = s.bind(1, policy(1)).unwrap();
        s.retire(1, 0);
        s.advance(0, 0, 16);
        s.advance(0, 16, 16);
        assert_eq!(s.bind(1, policy(1)).unwrap(), a);
        let b = s.bind(2, policy(1)).unwrap();
        assert_ne!(a, b);
        assert_eq!(s.bind(3, policy(1)), Err(SlotError::Exhausted));
    }

    #[test]
    fn the_index_survives_many_rebinds() {
        let mut s = PolicySlots::new(64, 0);
        let mut swept = 0;
        for round in 0..50u64 {
            s.begin_reload();
            for i in 0..64u64 {
                s.bind(round * 1_000 + i, policy(1)).unwrap();
            }
            assert_eq!(s.live(), 64);
            for i in 0..64u64 {
                assert!(s.lookup(round * 1_000 + i).is_some());
            }
            s.begin_reload();
            assert_eq!(s.finish_reload(0), 64);
            s.advance(0, swept, 16);
            swept += 16;
            s.advance(0, swept, 16);
            assert_eq!(s.pending(), 0);
        }
    }

    #[test]
    fn slot_zero_is_never_handed_out() {
        let mut s = PolicySlots::new(MAX_SLOTS, 0);
        for i in 0..1_000u64 {
            assert_ne!(s.bind(i, policy(1)).unwrap().get(), 0);
        }
    }

    #[test]
    fn slot_zero_is_no_slot() {
        assert!(Slot::new(0).is_none());
        assert_eq!(Slot::new(7).unwrap().get(), 7);
    }
}
