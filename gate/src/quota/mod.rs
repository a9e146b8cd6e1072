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
//!
//! [`dims`] holds the identity dimensions a later step of the chain asks
//! once the identity is derived: tenant, principal and resource budgets,
//! tenant and principal leases.
//! 4. [`rate`]: token buckets per rate policy and host ([`slots`]).
//!
//! [`bucket`] is one bucket outside any table, for per-connection limits.
//!
//! [`tracked`] holds the keyed counters of 1-3: a hard ceiling on live keys
//! with a critical reserve, failing closed without adding state.
//!
//! [`fleet`] is a shard's side of rate limits shared across a fleet: the
//! keys it shares, the batches it hands to the reconciler, the views it
//! takes back; [`fleetwindow`] the same for budget windows, each shared
//! key under a lease ([`windowlease`]).
//!
//! [`terms`] holds what every part shares, below them all: the class of
//! work, a limit's scope across shards, Retry-After's bounds and a sweep's
//! report. A rate policy's [`Slot`] is in [`slots`]. This module only
//! declares the parts and re-exports their names.

pub mod bucket;
pub mod decide;
pub mod dims;
pub mod fleet;
pub mod fleetwindow;
pub mod key;
pub mod lease;
pub mod rate;
pub mod slots;
pub mod terms;
pub mod tracked;
pub mod window;
mod windowlease;
mod words;

pub use bucket::Bucket;
pub use decide::{
    Level, OperationLimits, Quota, QuotaCounters, QuotaDecision, QuotaLimits, QuotaRequest,
    QuotaSizes, QuotaTicket, Refusal, SizeChange, SizeError,
};
pub use dims::{Dim, DimLimits, DimRequest};
pub use key::{fingerprint, mask_source, Domain, Fingerprint, Keyer, MaskedSource, SourcePrefix};
pub use lease::{LeaseLimits, LeaseRefusal, LeaseStats, LeaseTable, LeaseToken};
pub use rate::{
    CapacityError, Decision, Peek, RateCheck, RatePolicy, RatePolicyError, RateStats, RateTable,
};
pub use slots::{PolicySlots, Slot, SlotError};
pub use terms::{retry_after_s, Class, Scope, SweepReport, RETRY_AFTER_MAX_S, RETRY_AFTER_MIN_S};
pub use tracked::{Ceiling, CeilingError};
pub use window::{
    Budget, BudgetError, FixedWindow, WindowLengthError, WindowPass, WindowRefusal, WindowStats,
    WindowTable,
};
