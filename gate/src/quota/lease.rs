//! Concurrency leases: how many requests run at once, globally, per source
//! prefix and per operation.
//!
//! A request holds one lease record for its whole life. [`LeaseTable::acquire`]
//! checks every limit first and then counts the request in all of them, or
//! in none; it returns a [`LeaseToken`], a plain (index, generation) value.
//! [`LeaseTable::release`] takes the request out of every count; it checks
//! the generation, so releasing a token twice, or a stale copy of it after
//! its record was reused, does nothing. A source key leaves the table when
//! its last lease ends. Record and key capacity are fixed at construction;
//! when either is used up a request fails closed ([`LeaseRefusal`]).
//!
//! # Releasing on every end
//!
//! The connection loop is async, so the token is a value rather than a guard
//! borrowing the table. The caller wraps it in a guard that releases on
//! drop, which runs when the request completes, when it returns an error,
//! when its task is dropped because the client went away, and on unwind:
//!
//! ```
//! use std::cell::RefCell;
//! use std::rc::Rc;
//! use gapura_gate::quota::{Class, LeaseLimits, LeaseTable, LeaseToken};
//! use gapura_gate::quota::Ceiling;
//!
//! /// Owned by one request's task; the shard's table is shared by `Rc`
//! /// among its tasks (a shard is one thread).
//! struct LeaseGuard {
//!     table: Rc<RefCell<LeaseTable>>,
//!     token: LeaseToken,
//! }
//!
//! impl Drop for LeaseGuard {
//!     fn drop(&mut self) {
//!         // A no-op if someone released the token already.
//!         self.table.borrow_mut().release(self.token);
//!     }
//! }
//!
//! let table = Rc::new(RefCell::new(
//!     LeaseTable::new(16, Ceiling::new(16, 0).unwrap(), 0),
//! ));
//! let limits = LeaseLimits::default();
//! let token = table
//!     .borrow_mut()
//!     .acquire(Class::Normal, &limits, 7, None)
//!     .unwrap();
//! let guard = LeaseGuard { table: table.clone(), token };
//! let request = async move {
//!     let _guard = guard; // lives exactly as long as the request future
//!     // ... forward, stream the answer ...
//! };
//! drop(request); // the client went away before it finished
//! assert_eq!(table.borrow().active(), 0);
//! ```
//!
//! Every operation is O(1) (O(probe) for a source key) and allocates nothing.

use super::terms::Class;
use super::tracked::{Ceiling, Spot, TrackedKeys};
use super::window::Budget;

/// Largest number of lease records (concurrent requests) per shard.
pub const MAX_LEASES: u32 = 1 << 24;

/// A running request's lease: a plain value, `Copy`, for the caller's guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    index: u32,
    generation: u32,
}

/// Concurrency limits of a lease (each `None` means no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseLimits {
    /// Requests running on the shard at once.
    pub global: Option<Budget>,
    /// Requests running at once per source key (a source prefix). Only when
    /// set are source keys tracked.
    pub per_key: Option<Budget>,
}

/// Why a lease was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseRefusal {
    /// The shard's running requests reached the global limit.
    Global,
    /// The source key's running requests reached its limit.
    Key,
    /// The operation's running requests reached its limit.
    Operation,
    /// The source key is not tracked and tracking it would pass the table's
    /// ceiling: fail closed.
    UntrackedKey,
    /// Every lease record is in use: fail closed.
    NoRecord,
}

#[derive(Clone, Copy, Debug)]
struct Record {
    generation: u32,
    live: bool,
    /// Index of the source key's entry, or NONE.
    key_entry: u32,
    /// Operation index, or NONE16.
    operation: u16,
}

const NONE: u32 = u32::MAX;
const NONE16: u16 = u16::MAX;

/// Plain counters the shard reads for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseStats {
    pub acquired: u64,
    pub released: u64,
    /// Releases of a token already released (ignored).
    pub stale_releases: u64,
    pub refused: u64,
}

/// One shard's leases. See the module doc.
#[derive(Debug)]
pub struct LeaseTable {
    keys: TrackedKeys,
    records: Box<[Record]>,
    /// Free record indexes, popped from the end.
    free: Vec<u32>,
    active: u32,
    operation_active: Box<[u32]>,
    pub stats: LeaseStats,
}

impl LeaseTable {
    /// A table of `max_leases` records (1..=[`MAX_LEASES`]), source keys
    /// under `keys`, and `operations` operation counters. Allocates once.
    pub fn new(max_leases: u32, keys: Ceiling, operations: u16) -> LeaseTable {
        let max_leases = max_leases.clamp(1, MAX_LEASES);
        let records = vec![
            Record {
                generation: 0,
                live: false,
                key_entry: NONE,
                operation: NONE16,
            };
            max_leases as usize
        ];
        LeaseTable {
            keys: TrackedKeys::new(keys),
            records: records.into_boxed_slice(),
            free: (0..max_leases).rev().collect(),
            active: 0,
            operation_active: vec![0; operations as usize].into_boxed_slice(),
            stats: LeaseStats::default(),
        }
    }

    /// Leases `class` work from source `key` running `operation` (an index
    /// below the table's operation count; others are not counted), held to
    /// `limits` and `operation_limit`. Counts it in every limit, or in none
    /// when one refuses. O(probe); no allocation.
    pub fn acquire(
        &mut self,
        class: Class,
        limits: &LeaseLimits,
        key: u64,
        operation: Option<(u16, Option<Budget>)>,
    ) -> Result<LeaseToken, LeaseRefusal> {
        let r = self.check(class, limits, key, operation);
        let (spot, op) = match r {
            Ok(v) => v,
            Err(e) => {
                self.stats.refused += 1;
                return Err(e);
            }
        };
        let Some(index) = self.free.pop() else {
            self.stats.refused += 1;
            return Err(LeaseRefusal::NoRecord);
        };
        let key_entry = match spot {
            Some(Spot::Found(idx)) => idx as u32,
            Some(Spot::Vacant(idx)) => {
                self.keys.insert(idx, key);
                idx as u32
            }
            _ => NONE,
        };
        if key_entry != NONE {
            self.keys.add(key_entry as usize, 1);
        }
        if op != NONE16 {
            self.operation_active[op as usize] += 1;
        }
        self.active += 1;
        let rec = &mut self.records[index as usize];
        rec.live = true;
        rec.key_entry = key_entry;
        rec.operation = op;
        self.stats.acquired += 1;
        Ok(LeaseToken {
            index,
            generation: rec.generation,
        })
    }

    /// Every check of `acquire`, changing nothing.
    fn check(
        &self,
        class: Class,
        limits: &LeaseLimits,
        key: u64,
        operation: Option<(u16, Option<Budget>)>,
    ) -> Result<(Option<Spot>, u16), LeaseRefusal> {
        if let Some(b) = limits.global {
            if self.active >= b.threshold(class) {
                return Err(LeaseRefusal::Global);
            }
        }
        let spot = match limits.per_key {
            Some(b) => match self.keys.spot(key, class) {
                Spot::Found(idx) if self.keys.count(idx) >= b.threshold(class) => {
                    return Err(LeaseRefusal::Key)
                }
                Spot::Refused => return Err(LeaseRefusal::UntrackedKey),
                s => Some(s),
            },
            None => None,
        };
        let mut op = NONE16;
        if let Some((i, limit)) = operation {
            if let Some(&running) = self.operation_active.get(i as usize) {
                if limit.is_some_and(|b| running >= b.threshold(class)) {
                    return Err(LeaseRefusal::Operation);
                }
                op = i;
            }
        }
        Ok((spot, op))
    }

    /// Requests running under source (or identity) key `key`. O(probe).
    pub fn running(&self, key: u64) -> u32 {
        self.keys.count_of(key)
    }

    /// Ends the lease of `token`: takes it out of every count, and drops its
    /// source key when that was the key's last lease. Returns false, doing
    /// nothing, for a token already released. O(1).
    pub fn release(&mut self, token: LeaseToken) -> bool {
        let Some(rec) = self.records.get_mut(token.index as usize) else {
            self.stats.stale_releases += 1;
            return false;
        };
        if !rec.live || rec.generation != token.generation {
            self.stats.stale_releases += 1;
            return false;
        }
        rec.live = false;
        rec.generation = rec.generation.wrapping_add(1);
        let (key_entry, op) = (rec.key_entry, rec.operation);
        if key_entry != NONE {
            self.keys.sub_one(key_entry as usize);
        }
        if op != NONE16 {
            self.operation_active[op as usize] -= 1;
        }
        self.active -= 1;
        self.free.push(token.index);
        self.stats.released += 1;
        true
    }

    /// Requests running on the shard.
    pub fn active(&self) -> u32 {
        self.active
    }

    /// Requests running from source `key` (0 when untracked).
    pub fn active_for(&self, key: u64) -> u32 {
        self.keys.count_of(key)
    }

    /// Requests running `operation`.
    pub fn active_operation(&self, operation: u16) -> u32 {
        self.operation_active
            .get(operation as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Source keys with a running lease.
    pub fn tracked_keys(&self) -> u32 {
        self.keys.live()
    }

    pub fn max_leases(&self) -> u32 {
        self.records.len() as u32
    }

    pub fn operations(&self) -> u16 {
        self.operation_active.len() as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(global: u32, per_key: u32) -> LeaseLimits {
        LeaseLimits {
            global: Some(Budget::flat(global).unwrap()),
            per_key: Some(Budget::flat(per_key).unwrap()),
        }
    }

    fn table() -> LeaseTable {
        LeaseTable::new(64, Ceiling::new(8, 2).unwrap(), 4)
    }

    #[test]
    fn a_source_is_held_to_its_concurrency_limit() {
        let mut t = table();
        let l = limits(100, 2);
        let a = t.acquire(Class::Normal, &l, 1, None).unwrap();
        let _b = t.acquire(Class::Normal, &l, 1, None).unwrap();
        assert_eq!(
            t.acquire(Class::Normal, &l, 1, None),
            Err(LeaseRefusal::Key)
        );
        assert!(t.acquire(Class::Normal, &l, 2, None).is_ok());
        assert!(t.release(a));
        assert!(t.acquire(Class::Normal, &l, 1, None).is_ok());
    }

    #[test]
    fn double_release_is_a_no_op() {
        let mut t = table();
        let l = limits(100, 5);
        let a = t.acquire(Class::Normal, &l, 1, Some((2, None))).unwrap();
        let b = t.acquire(Class::Normal, &l, 1, Some((2, None))).unwrap();
        assert!(t.release(a));
        assert!(!t.release(a));
        assert_eq!(t.active(), 1);
        assert_eq!(t.active_for(1), 1);
        assert_eq!(t.active_operation(2), 1);
        // The record of `a` is reused; the stale token still does nothing.
        let c = t.acquire(Class::Normal, &l, 3, None).unwrap();
        assert!(!t.release(a));
        assert_eq!(t.active(), 2);
        assert!(t.release(b));
        assert!(t.release(c));
        assert_eq!(t.stats.stale_releases, 2);
    }

    #[test]
    fn a_key_leaves_the_table_when_its_last_lease_ends() {
        let mut t = table();
        let l = limits(100, 5);
        let a = t.acquire(Class::Normal, &l, 9, None).unwrap();
        let b = t.acquire(Class::Normal, &l, 9, None).unwrap();
        assert_eq!(t.tracked_keys(), 1);
        t.release(a);
        assert_eq!(t.tracked_keys(), 1);
        t.release(b);
        assert_eq!(t.tracked_keys(), 0);
        assert_eq!(t.active_for(9), 0);
    }

    #[test]
    fn a_refused_lease_counts_nowhere() {
        let mut t = table();
        let l = LeaseLimits {
            global: Some(Budget::flat(100).unwrap()),
            per_key: Some(Budget::flat(100).unwrap()),
        };
        let op_limit = Some(Budget::flat(1).unwrap());
        t.acquire(Class::Normal, &l, 1, Some((0, op_limit)))
            .unwrap();
        assert_eq!(
            t.acquire(Class::Normal, &l, 2, Some((0, op_limit))),
            Err(LeaseRefusal::Operation)
        );
        assert_eq!(t.active(), 1);
        assert_eq!(t.tracked_keys(), 1, "key 2 was not added");
        assert_eq!(t.active_for(2), 0);
    }

    #[test]
    fn critical_work_may_use_the_global_reserve() {
        let mut t = table();
        let l = LeaseLimits {
            global: Some(Budget::new(3, 2).unwrap()),
            per_key: None,
        };
        t.acquire(Class::Normal, &l, 1, None).unwrap();
        t.acquire(Class::Normal, &l, 2, None).unwrap();
        assert_eq!(
            t.acquire(Class::Normal, &l, 3, None),
            Err(LeaseRefusal::Global)
        );
        assert!(t.acquire(Class::Critical, &l, 4, None).is_ok());
        assert_eq!(
            t.acquire(Class::Health, &l, 5, None),
            Err(LeaseRefusal::Global)
        );
    }

    #[test]
    fn records_run_out_closed() {
        let mut t = LeaseTable::new(2, Ceiling::new(8, 0).unwrap(), 0);
        let l = LeaseLimits::default();
        let a = t.acquire(Class::Normal, &l, 1, None).unwrap();
        t.acquire(Class::Normal, &l, 1, None).unwrap();
        assert_eq!(
            t.acquire(Class::Critical, &l, 1, None),
            Err(LeaseRefusal::NoRecord)
        );
        t.release(a);
        assert!(t.acquire(Class::Normal, &l, 1, None).is_ok());
    }

    #[test]
    fn without_a_per_key_limit_no_key_is_tracked() {
        let mut t = table();
        t.acquire(Class::Normal, &LeaseLimits::default(), 1, None)
            .unwrap();
        assert_eq!(t.tracked_keys(), 0);
    }

    #[test]
    fn an_operation_outside_the_table_is_not_counted() {
        let mut t = table();
        let tok = t
            .acquire(Class::Normal, &LeaseLimits::default(), 1, Some((99, None)))
            .unwrap();
        assert!(t.release(tok));
    }
}
