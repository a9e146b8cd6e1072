//! Tracked keys: the bounded keyed counters under budgets and leases.
//!
//! A fixed power-of-two array of 16-byte entries (key, count, epoch), at
//! least twice the [`Ceiling`] so it stays at most half full, searched over a
//! bounded window of [`TRACKED_PROBE`] entries. Unlike the rate table, these
//! tables never evict: a tracked key is a window count or a running lease,
//! and forgetting it would hand its owner a fresh budget. Instead the number
//! of live keys has a hard ceiling, with a reserve only critical work and
//! health probes may use; a request that needs a new key past its ceiling (or
//! finds its whole probe window taken) is refused, fails closed, and adds
//! nothing. A flood of unique keys therefore stops at `max_keys - reserve`
//! and can neither grow memory nor push out what the reserve holds.
//!
//! Clearing everything is O(1): entries carry the epoch they were written in
//! and only the current epoch's are live (the window table moves the epoch at
//! each window boundary).

use super::terms::Class;
use super::words::{TwoWords, Words};

/// Entries in one probe window.
pub const TRACKED_PROBE: usize = 16;
/// Largest ceiling: 8 Mi keys (a 16 Mi-entry, 256 MiB table).
pub const MAX_TRACKED_KEYS: u32 = 1 << 23;

/// A table's hard ceiling on live keys and the part of it kept for critical
/// work and health probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ceiling {
    max_keys: u32,
    critical_reserve: u32,
}

/// Why a ceiling was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CeilingError {
    /// `max_keys` outside 1..=[`MAX_TRACKED_KEYS`]: `quota.tracked_keys.range`.
    MaxKeys,
    /// A reserve not below `max_keys`: `quota.critical_reserve.range`.
    Reserve,
}

impl Ceiling {
    /// At most `max_keys` live keys, of which `critical_reserve` (less than
    /// `max_keys`) only critical work and health probes may take.
    pub fn new(max_keys: u32, critical_reserve: u32) -> Result<Ceiling, CeilingError> {
        if max_keys == 0 || max_keys > MAX_TRACKED_KEYS {
            return Err(CeilingError::MaxKeys);
        }
        if critical_reserve >= max_keys {
            return Err(CeilingError::Reserve);
        }
        Ok(Ceiling {
            max_keys,
            critical_reserve,
        })
    }

    pub fn max_keys(&self) -> u32 {
        self.max_keys
    }

    pub fn critical_reserve(&self) -> u32 {
        self.critical_reserve
    }

    /// Live keys a request of `class` may bring the table to.
    #[inline]
    pub fn limit(&self, class: Class) -> u32 {
        if class.may_use_reserve() {
            self.max_keys
        } else {
            self.max_keys - self.critical_reserve
        }
    }

    /// Entries the table needs: the next power of two of twice the ceiling.
    pub fn entries(&self) -> usize {
        (2 * self.max_keys as usize)
            .next_power_of_two()
            .max(TRACKED_PROBE)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// The key, never 0 (0 is mapped to 1); 0 means empty.
    key: u64,
    count: u32,
    epoch: u32,
}

impl TwoWords for Entry {
    #[inline]
    fn pack(self) -> [u64; 2] {
        [
            self.key,
            u64::from(self.count) | (u64::from(self.epoch) << 32),
        ]
    }
    #[inline]
    fn unpack(w: [u64; 2]) -> Entry {
        Entry {
            key: w[0],
            count: w[1] as u32,
            epoch: (w[1] >> 32) as u32,
        }
    }
}

/// Where a key is, or where it would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spot {
    /// Tracked at this index.
    Found(usize),
    /// Not tracked; a new entry may go at this index.
    Vacant(usize),
    /// Not tracked, and tracking it would pass the ceiling (or its probe
    /// window is full).
    Refused,
}

#[derive(Debug)]
pub(crate) struct TrackedKeys {
    /// Resident only where keys were written ([`Words`]).
    entries: Words<Entry>,
    mask: usize,
    epoch: u32,
    live: u32,
    ceiling: Ceiling,
}

#[inline]
fn stored(key: u64) -> u64 {
    key.max(1)
}

impl TrackedKeys {
    pub(crate) fn new(ceiling: Ceiling) -> TrackedKeys {
        let n = ceiling.entries();
        TrackedKeys {
            entries: Words::zeroed(n),
            mask: n - 1,
            // Fresh entries hold epoch 0 with key 0; epoch 1 makes every
            // untouched entry stale as well as empty.
            epoch: 1,
            live: 0,
            ceiling,
        }
    }

    #[inline]
    fn is_live(&self, e: &Entry) -> bool {
        e.key != 0 && e.epoch == self.epoch
    }

    /// Finds `key`, or a vacancy a request of `class` may take. O(PROBE).
    /// Inlined: every request asks it of the window and the lease tables,
    /// and a key found at its first place is a few instructions.
    #[inline(always)]
    pub(crate) fn spot(&self, key: u64, class: Class) -> Spot {
        let key = stored(key);
        // The low bits index the table; spread from the high bits too so a
        // caller's sequential keys do not crowd one window.
        let start = (key ^ (key >> 29)) as usize & self.mask;
        let mut vacant = usize::MAX;
        for i in 0..TRACKED_PROBE {
            let idx = (start + i) & self.mask;
            let e = self.entries.get(idx);
            if self.is_live(&e) {
                if e.key == key {
                    return Spot::Found(idx);
                }
            } else if vacant == usize::MAX {
                vacant = idx;
            }
        }
        if vacant == usize::MAX || self.live >= self.ceiling.limit(class) {
            Spot::Refused
        } else {
            Spot::Vacant(vacant)
        }
    }

    #[inline]
    pub(crate) fn count(&self, idx: usize) -> u32 {
        self.entries.get(idx).count
    }

    /// Starts tracking `key` at a vacancy [`spot`](Self::spot) returned,
    /// with a count of 0.
    #[inline]
    pub(crate) fn insert(&mut self, idx: usize, key: u64) {
        debug_assert!(!self.is_live(&self.entries.get(idx)));
        self.entries.set(
            idx,
            Entry {
                key: stored(key),
                count: 0,
                epoch: self.epoch,
            },
        );
        self.live += 1;
    }

    #[inline]
    pub(crate) fn add(&mut self, idx: usize, n: u32) {
        let mut e = self.entries.get(idx);
        e.count = e.count.saturating_add(n);
        self.entries.set(idx, e);
    }

    /// Takes one off the count; at zero the key leaves the table.
    #[inline]
    pub(crate) fn sub_one(&mut self, idx: usize) {
        let mut e = self.entries.get(idx);
        if e.key == 0 || e.count == 0 {
            return;
        }
        e.count -= 1;
        if e.count == 0 {
            e = Entry::default();
            self.live -= 1;
        }
        self.entries.set(idx, e);
    }

    /// Forgets every key. O(1) (O(entries) once every 2^32 calls).
    pub(crate) fn clear_all(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.entries.clear();
            self.epoch = 1;
        }
        self.live = 0;
    }

    pub(crate) fn epoch(&self) -> u32 {
        self.epoch
    }

    pub(crate) fn live(&self) -> u32 {
        self.live
    }

    pub(crate) fn ceiling(&self) -> Ceiling {
        self.ceiling
    }

    pub(crate) fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The live count of `key`, 0 when untracked.
    pub(crate) fn count_of(&self, key: u64) -> u32 {
        match self.spot(key, Class::Critical) {
            Spot::Found(idx) => self.entries.get(idx).count,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_bounds_are_checked() {
        assert_eq!(Ceiling::new(0, 0), Err(CeilingError::MaxKeys));
        assert_eq!(
            Ceiling::new(MAX_TRACKED_KEYS + 1, 0),
            Err(CeilingError::MaxKeys)
        );
        assert_eq!(Ceiling::new(10, 10), Err(CeilingError::Reserve));
        let c = Ceiling::new(100, 10).unwrap();
        assert_eq!(c.limit(Class::Normal), 90);
        assert_eq!(c.limit(Class::Critical), 100);
        assert_eq!(c.limit(Class::Health), 100);
        assert_eq!(c.entries(), 256);
    }

    #[test]
    fn a_key_leaves_when_its_count_reaches_zero() {
        let mut t = TrackedKeys::new(Ceiling::new(8, 0).unwrap());
        let Spot::Vacant(i) = t.spot(42, Class::Normal) else {
            panic!("vacant expected")
        };
        t.insert(i, 42);
        t.add(i, 2);
        assert_eq!(t.spot(42, Class::Normal), Spot::Found(i));
        t.sub_one(i);
        assert_eq!(t.live(), 1);
        t.sub_one(i);
        assert_eq!(t.live(), 0);
        assert!(matches!(t.spot(42, Class::Normal), Spot::Vacant(_)));
        t.sub_one(i);
        assert_eq!(t.live(), 0, "a second release of an empty entry is a no-op");
    }

    #[test]
    fn clear_all_forgets_every_key_at_once() {
        let mut t = TrackedKeys::new(Ceiling::new(8, 0).unwrap());
        for k in 1..=8u64 {
            let Spot::Vacant(i) = t.spot(k, Class::Normal) else {
                panic!()
            };
            t.insert(i, k);
            t.add(i, 1);
        }
        assert_eq!(t.spot(9, Class::Normal), Spot::Refused);
        t.clear_all();
        assert_eq!(t.live(), 0);
        assert_eq!(t.count_of(3), 0);
        assert!(matches!(t.spot(9, Class::Normal), Spot::Vacant(_)));
    }

    #[test]
    fn key_zero_is_a_valid_key() {
        let mut t = TrackedKeys::new(Ceiling::new(8, 0).unwrap());
        let Spot::Vacant(i) = t.spot(0, Class::Normal) else {
            panic!()
        };
        t.insert(i, 0);
        t.add(i, 5);
        assert_eq!(t.count_of(0), 5);
    }
}
