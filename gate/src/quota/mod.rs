//! Quotas: how much may pass. Rate limits, fixed-window budgets, concurrency
//! leases and the bounded tables under them, per shard.
//!
//! Everything here is owned by one shard and used from its thread only: no
//! atomics, no locks, no I/O, no clock (time is the caller's `now_ms`, the
//! shard's coarse monotonic clock). Tables are sized once at construction
//! and never allocate afterwards; every operation on the request path is
//! O(1) or O(a bounded probe window). Tables are keyed by 64-bit keyed
//! hashes ([`key`]), never by raw addresses or credentials.
//!
//! The parts, in the order a request meets them ([`Quota::decide`]):
//!
//! 1. [`window`]: global, source-prefix (or health-probe), and operation
//!    budgets per fixed window, with an optional-work threshold below the
//!    full one that keeps a reserve for critical work while shedding.
//! 2. [`lease`]: concurrency leases (global, source prefix, operation), held
//!    for the request's whole life and released through the caller's guard.
//! 3. Identity budgets (a window budget keyed by a credential fingerprint).
//! 4. [`rate`]: token buckets per rate policy and host ([`slots`]).
//!
//! [`bucket`] is one bucket outside any table, for per-connection limits.
//!
//! [`tracked`] holds the keyed counters of 1-3: a hard ceiling on live keys
//! with a critical reserve, failing closed without adding state.

pub mod bucket;
pub mod decide;
pub mod key;
pub mod lease;
pub mod rate;
pub mod slots;
pub mod tracked;
pub mod window;
mod words;

pub use bucket::Bucket;
pub use decide::{
    Level, OperationLimits, Quota, QuotaCounters, QuotaDecision, QuotaLimits, QuotaRequest,
    QuotaSizes, QuotaTicket, Refusal, SizeChange, SizeError,
};
pub use key::{fingerprint, mask_source, Domain, Fingerprint, Keyer, MaskedSource, SourcePrefix};
pub use lease::{LeaseLimits, LeaseRefusal, LeaseStats, LeaseTable, LeaseToken};
pub use rate::{
    CapacityError, Decision, Peek, RateCheck, RatePolicy, RatePolicyError, RateStats, RateTable,
};
pub use slots::{PolicySlots, SlotError};
pub use tracked::{Ceiling, CeilingError};
pub use window::{
    Budget, BudgetError, FixedWindow, WindowLengthError, WindowPass, WindowRefusal, WindowStats,
    WindowTable,
};

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

/// What kind of work a request is, for reserves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Ordinary work: held to the optional-work thresholds and kept out of
    /// the tracked-key reserve, so it is what is shed first.
    Normal,
    /// A route the profile marks critical: may use the reserves.
    Critical,
    /// A health-probe route: its own source-prefix budget, may use the
    /// reserves.
    Health,
}

impl Class {
    /// Whether this class may use budget and tracked-key reserves.
    #[inline]
    pub fn may_use_reserve(self) -> bool {
        !matches!(self, Class::Normal)
    }
}

/// How a limit on a key other than the connection's source is held across
/// shards (a shard sees only its own traffic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Each shard enforces limit / shards (at least 1): the whole process
    /// never admits more than max(limit, shards) per window, and a client
    /// whose traffic lands on one shard gets only its share.
    Split,
    /// Each shard enforces the full limit: one shard never passes more than
    /// the limit, the whole process up to limit x shards.
    PerShard,
}

impl Scope {
    /// The limit one of `shards` shards enforces.
    pub fn shard_limit(self, limit: u32, shards: u32) -> u32 {
        match self {
            Scope::Split => (limit / shards.max(1)).max(1),
            Scope::PerShard => limit,
        }
    }
}

/// Smallest Retry-After in seconds.
pub const RETRY_AFTER_MIN_S: u32 = 1;
/// Largest Retry-After in seconds: a longer wait is announced as one hour
/// (the client is refused again then, and told again), which bounds the
/// set of precomputed header values to 3600.
pub const RETRY_AFTER_MAX_S: u32 = 3_600;

/// A wait in ms as a Retry-After in whole seconds: rounded up, clamped to
/// [`RETRY_AFTER_MIN_S`]..=[`RETRY_AFTER_MAX_S`].
#[inline]
pub fn retry_after_s(wait_ms: u64) -> u32 {
    wait_ms
        .div_ceil(1_000)
        .clamp(RETRY_AFTER_MIN_S as u64, RETRY_AFTER_MAX_S as u64) as u32
}

/// What one call of a sweeper did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub visited: usize,
    pub cleared: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_and_is_bounded() {
        assert_eq!(retry_after_s(0), 1);
        assert_eq!(retry_after_s(1), 1);
        assert_eq!(retry_after_s(1_000), 1);
        assert_eq!(retry_after_s(1_001), 2);
        assert_eq!(retry_after_s(3_600_000), 3_600);
        assert_eq!(retry_after_s(u64::MAX), 3_600);
    }

    #[test]
    fn split_divides_and_per_shard_keeps_the_limit() {
        assert_eq!(Scope::Split.shard_limit(100, 4), 25);
        assert_eq!(Scope::Split.shard_limit(3, 4), 1);
        assert_eq!(Scope::Split.shard_limit(3, 0), 3);
        assert_eq!(Scope::PerShard.shard_limit(100, 4), 100);
    }

    #[test]
    fn slot_zero_is_no_slot() {
        assert!(Slot::new(0).is_none());
        assert_eq!(Slot::new(7).unwrap().get(), 7);
    }
}
