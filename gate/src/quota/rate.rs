//! The token-bucket rate table: one shard's buckets for every rate policy.
//!
//! **Layout.** A fixed power-of-two array of 16-byte entries, chosen at
//! construction and never grown. An entry is a fingerprint word (the policy
//! [`Slot`] in bits 63..48, 48 bits of the 64-bit partition key below; 0
//! means empty) and a state word. A 48-bit fingerprint in a 256 Ki table
//! makes two partition keys sharing a bucket about a 2^-40 event per probe;
//! a collision only makes a limit stricter.
//!
//! **Probe.** A key's window is [`PROBE`] consecutive entries starting at the
//! key mixed with its slot. A client's key is the same for every policy, so
//! without the mix one client's buckets on more than [`PROBE`] rate-limited
//! hosts would share one window and evict each other, and each eviction hands
//! out a fresh burst (test `without_the_slot_mix_twelve_hosts_leak_bursts`).
//! A miss takes the first empty entry of the window, else evicts the entry
//! whose bucket is closest to full (shortest time to full under its slot's
//! policy as last used): a full bucket is the same as no entry, so such an
//! eviction costs that client nothing, and a flood of one-request keys
//! evicts its own kind before a drained bucket. Memory is the array (plus
//! one word per slot): a flood of unique keys cannot grow it.
//!
//! **State: a token clock.** The state word holds the bucket's *empty-at*
//! time in nanoseconds (since the shard's clock origin, wrapping): the
//! instant at which the bucket would have held zero tokens. Tokens are the
//! fixed-point quotient `(now - empty_at) / interval`, saturated at the
//! burst; taking one adds one `interval` to empty-at. This is the token
//! bucket with time as its fixed-point unit: refill is exact to the
//! nanosecond (one a minute is 60 000 000 000 ns per token, no rounding), a
//! touch that is refused writes nothing, and no refill is lost to rounding
//! however often a bucket is touched. The interval is rounded *up* to a
//! whole nanosecond, so rounding only ever makes a limit stricter (by under
//! one part in a thousand at the highest rate). Saturation happens on every
//! touch, against the policy the caller passes: a lowered burst clamps the
//! bucket on its next touch, a rate change applies from that touch on.
//!
//! **Time.** `now_ms` is the shard's coarse monotonic clock. A sample older
//! than a bucket's state earns nothing and never moves the state back.
//!
//! **Cost.** [`RateTable::try_acquire`] is O([`PROBE`]), touches two or three
//! cache lines, never allocates and takes no lock: a shard owns its table.

use super::slots::{PolicySlots, Slot, SweepView};
use super::terms::SweepReport;
use super::words::{TwoWords, Words};

/// Entries in one probe window.
pub const PROBE: usize = 8;
/// Smallest table a shard may build (one probe window needs this many).
pub const MIN_RATE_ENTRIES: usize = 16;
/// Largest table: 16 Mi entries, 256 MiB.
pub const MAX_RATE_ENTRIES: usize = 1 << 24;
/// Bounds of a policy's rate in tokens per second: 1/16384 ..= 1 000 000.
pub const MIN_RATE_DENOMINATOR: u64 = 16_384;
pub const MAX_RATE_PER_S: u64 = 1_000_000;
/// Bounds of a policy's burst in tokens.
pub const MAX_BURST: u32 = 1_048_575;
/// A full-refill time longer than this (146 years) is cut to it, so bucket
/// ages always fit an i64.
const MAX_TOLERANCE_NS: u64 = 1 << 62;
const NS_PER_MS: u64 = 1_000_000;
/// Odd multiplier that spreads slots over the table (2^64 / golden ratio).
const SLOT_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// One rate policy's parameters: `requests` tokens per `per_ms` milliseconds,
/// at most `burst` in the bucket. Validated on construction, immutable; the
/// snapshot holds one per (policy, host) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RatePolicy {
    requests: u64,
    per_ms: u64,
    burst: u32,
    /// Time per token, rounded up.
    interval_ns: u64,
    /// Time from empty to full: burst x interval, at most 2^62.
    tolerance_ns: u64,
}

/// Why a rate policy was refused. Each carries the profile error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RatePolicyError {
    /// `requests` is 0, or the period is 0 ms.
    Requests,
    /// The rate is outside 1/16384 ..= 1 000 000 tokens per second.
    Rate,
    /// The burst is outside 1 ..= 1 048 575.
    Burst,
}

impl RatePolicy {
    /// `requests` tokens per `per_ms` ms with a bucket of `burst`.
    pub fn new(requests: u64, per_ms: u64, burst: u32) -> Result<RatePolicy, RatePolicyError> {
        if requests == 0 || per_ms == 0 {
            return Err(RatePolicyError::Requests);
        }
        // rate = requests * 1000 / per_ms tokens per second.
        let scaled = requests as u128 * 1000;
        let period = per_ms as u128;
        if scaled * (MIN_RATE_DENOMINATOR as u128) < period
            || scaled > (MAX_RATE_PER_S as u128) * period
        {
            return Err(RatePolicyError::Rate);
        }
        if burst == 0 || burst > MAX_BURST {
            return Err(RatePolicyError::Burst);
        }
        let period_ns = per_ms as u128 * NS_PER_MS as u128;
        let interval_ns = period_ns.div_ceil(requests as u128) as u64;
        let tolerance_ns =
            (interval_ns as u128 * burst as u128).min(MAX_TOLERANCE_NS as u128) as u64;
        Ok(RatePolicy {
            requests,
            per_ms,
            burst,
            interval_ns,
            tolerance_ns,
        })
    }

    pub fn per_second(requests: u64, burst: u32) -> Result<RatePolicy, RatePolicyError> {
        RatePolicy::new(requests, 1_000, burst)
    }

    pub fn per_minute(requests: u64, burst: u32) -> Result<RatePolicy, RatePolicyError> {
        RatePolicy::new(requests, 60_000, burst)
    }

    pub fn per_hour(requests: u64, burst: u32) -> Result<RatePolicy, RatePolicyError> {
        RatePolicy::new(requests, 3_600_000, burst)
    }

    /// This policy for one of `shards` shards with the `split` scope: the rate
    /// divided exactly (the period multiplied), the burst divided and at
    /// least 1. Fails when the divided rate falls under the bound.
    pub fn split(&self, shards: u32) -> Result<RatePolicy, RatePolicyError> {
        let shards = shards.max(1);
        let per_ms = self
            .per_ms
            .checked_mul(shards as u64)
            .ok_or(RatePolicyError::Rate)?;
        RatePolicy::new(self.requests, per_ms, (self.burst / shards).max(1))
    }

    pub fn requests(&self) -> u64 {
        self.requests
    }

    pub fn per_ms(&self) -> u64 {
        self.per_ms
    }

    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Time one token takes to refill, in ns (rounded up).
    /// Time from empty to full: burst x interval.
    pub fn tolerance_ns(&self) -> u64 {
        self.tolerance_ns
    }

    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// Time an empty bucket takes to fill, in ms (rounded up).
    pub fn full_refill_ms(&self) -> u64 {
        self.tolerance_ns.div_ceil(NS_PER_MS)
    }
}

/// The answer of a rate check.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// 0 when allowed; else the wait until one whole token, in ms, at least 1.
    pub retry_after_ms: u64,
}

impl Decision {
    const ALLOWED: Decision = Decision {
        allowed: true,
        retry_after_ms: 0,
    };

    fn limited(wait_ns: u64) -> Decision {
        Decision {
            allowed: false,
            retry_after_ms: wait_ns.div_ceil(NS_PER_MS).max(1),
        }
    }
}

/// What a bucket holds now, without taking anything (for `explain`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peek {
    /// Whole tokens available now (the burst for an untracked key).
    pub tokens: u32,
    /// 0 when a token is available; else the wait for one, in ms.
    pub retry_after_ms: u64,
}

/// One check of a multi-tier acquire: a policy, its slot and the key.
#[derive(Clone, Copy, Debug)]
pub struct RateCheck<'a> {
    pub policy: &'a RatePolicy,
    pub slot: Slot,
    pub key: u64,
}

/// Plain counters the shard reads for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateStats {
    pub allowed: u64,
    pub limited: u64,
    /// Misses that took an empty entry.
    pub inserted: u64,
    /// Misses that evicted an occupied entry.
    pub evicted: u64,
    /// Entries the sweeper cleared.
    pub swept: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    fp: u64,
    empty_at_ns: u64,
}

impl TwoWords for Entry {
    #[inline]
    fn pack(self) -> [u64; 2] {
        [self.fp, self.empty_at_ns]
    }
    #[inline]
    fn unpack(w: [u64; 2]) -> Entry {
        Entry {
            fp: w[0],
            empty_at_ns: w[1],
        }
    }
}

/// One shard's token buckets. See the module doc for layout and rules.
pub struct RateTable {
    /// Resident only where buckets were written ([`Words`]).
    entries: Words<Entry>,
    mask: usize,
    /// Per slot, the full-refill time of the policy it was last used with:
    /// what eviction compares.
    slot_tolerance_ns: Box<[u64]>,
    slot_mix: u64,
    sweep_cursor: usize,
    /// Entries the sweeper has visited since construction.
    swept_total: u64,
    pub stats: RateStats,
}

/// Why a table size was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapacityError;

impl std::fmt::Debug for RateTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateTable")
            .field("capacity", &self.entries.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// The slot over 48 bits of the key: its top 48 bits with the low 16 folded
/// in, so keys that differ anywhere differ here.
#[inline]
fn fingerprint(slot: Slot, key: u64) -> u64 {
    ((slot.get() as u64) << 48) | ((key >> 16) ^ (key & 0xffff))
}

#[inline]
fn slot_of(fp: u64) -> u16 {
    (fp >> 48) as u16
}

/// How long a bucket has been refilling, in ns: negative when the clock
/// sample is older than the state.
#[inline]
fn age_ns(now_ns: u64, empty_at_ns: u64) -> i64 {
    now_ns.wrapping_sub(empty_at_ns) as i64
}

impl RateTable {
    /// A table of `entries` buckets: a power of two in
    /// [`MIN_RATE_ENTRIES`]..=[`MAX_RATE_ENTRIES`]. Allocates 16 bytes per
    /// entry, once.
    pub fn new(entries: usize) -> Result<RateTable, CapacityError> {
        if !entries.is_power_of_two() || !(MIN_RATE_ENTRIES..=MAX_RATE_ENTRIES).contains(&entries) {
            return Err(CapacityError);
        }
        Ok(RateTable {
            entries: Words::zeroed(entries),
            mask: entries - 1,
            slot_tolerance_ns: vec![0; 1 << 16].into_boxed_slice(),
            slot_mix: SLOT_MIX,
            sweep_cursor: 0,
            swept_total: 0,
            stats: RateStats::default(),
        })
    }

    /// A table whose probe does not mix the slot in: only to show why the mix
    /// is there.
    #[cfg(test)]
    pub(crate) fn new_without_slot_mix(entries: usize) -> RateTable {
        let mut t = RateTable::new(entries).unwrap();
        t.slot_mix = 0;
        t
    }

    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Occupied entries. O(capacity): for tests and diagnostics only.
    pub fn occupied(&self) -> usize {
        (0..self.entries.len())
            .filter(|&i| self.entries.get(i).fp != 0)
            .count()
    }

    #[inline]
    fn window_start(&self, slot: Slot, key: u64) -> usize {
        (key ^ (slot.get() as u64).wrapping_mul(self.slot_mix)) as usize & self.mask
    }

    /// Index of the entry holding (slot, key), if any.
    #[inline]
    fn find(&self, fp: u64, start: usize) -> Option<usize> {
        (0..PROBE)
            .map(|i| (start + i) & self.mask)
            .find(|&idx| self.entries.get(idx).fp == fp)
    }

    /// Takes one token from the bucket of `key` under `policy` in `slot`.
    /// A key without a bucket starts full. O([`PROBE`]); no allocation.
    #[inline]
    pub fn try_acquire(
        &mut self,
        policy: &RatePolicy,
        slot: Slot,
        key: u64,
        now_ms: u64,
    ) -> Decision {
        let now_ns = now_ms.saturating_mul(NS_PER_MS);
        let fp = fingerprint(slot, key);
        let start = self.window_start(slot, key);
        for i in 0..PROBE {
            let idx = (start + i) & self.mask;
            if self.entries.get(idx).fp == fp {
                return self.take(idx, policy, now_ns);
            }
        }
        self.slot_tolerance_ns[slot.get() as usize] = policy.tolerance_ns;
        let idx = self.vacancy(start, now_ns);
        // A new bucket is full (empty since one full refill ago), minus the
        // token this request takes. Burst >= 1, so it always has one.
        self.entries.set(
            idx,
            Entry {
                fp,
                empty_at_ns: now_ns
                    .wrapping_sub(policy.tolerance_ns)
                    .wrapping_add(policy.interval_ns),
            },
        );
        self.stats.allowed += 1;
        Decision::ALLOWED
    }

    /// The entry a miss takes: the first empty one of the window, else the
    /// one closest to full (largest age past its slot's full-refill time).
    fn vacancy(&mut self, start: usize, now_ns: u64) -> usize {
        let mut victim = start;
        let mut victim_fullness = i64::MIN;
        for i in 0..PROBE {
            let idx = (start + i) & self.mask;
            let e = self.entries.get(idx);
            if e.fp == 0 {
                self.stats.inserted += 1;
                return idx;
            }
            let tolerance = self.slot_tolerance_ns[slot_of(e.fp) as usize] as i64;
            let fullness = age_ns(now_ns, e.empty_at_ns).saturating_sub(tolerance);
            if fullness > victim_fullness {
                victim_fullness = fullness;
                victim = idx;
            }
        }
        self.stats.evicted += 1;
        victim
    }

    #[inline]
    fn take(&mut self, idx: usize, policy: &RatePolicy, now_ns: u64) -> Decision {
        let mut e = self.entries.get(idx);
        let age = (age_ns(now_ns, e.empty_at_ns).max(0) as u64).min(policy.tolerance_ns);
        if age >= policy.interval_ns {
            e.empty_at_ns = now_ns.wrapping_sub(age).wrapping_add(policy.interval_ns);
            self.entries.set(idx, e);
            self.stats.allowed += 1;
            Decision::ALLOWED
        } else {
            self.stats.limited += 1;
            Decision::limited(policy.interval_ns - age)
        }
    }

    /// What the bucket of `key` holds now, changing nothing. O([`PROBE`]).
    pub fn peek(&self, policy: &RatePolicy, slot: Slot, key: u64, now_ms: u64) -> Peek {
        let now_ns = now_ms.saturating_mul(NS_PER_MS);
        let fp = fingerprint(slot, key);
        let Some(idx) = self.find(fp, self.window_start(slot, key)) else {
            return Peek {
                tokens: policy.burst,
                retry_after_ms: 0,
            };
        };
        let age = (age_ns(now_ns, self.entries.get(idx).empty_at_ns).max(0) as u64)
            .min(policy.tolerance_ns);
        let tokens = (age / policy.interval_ns) as u32;
        let retry_after_ms = if tokens > 0 {
            0
        } else {
            Decision::limited(policy.interval_ns - age).retry_after_ms
        };
        Peek {
            tokens: tokens.min(policy.burst),
            retry_after_ms,
        }
    }

    /// Sets the bucket of `key` to have been refilling for `age_ns` at
    /// `now_ms` (a fleet's count, learned: see [`super::fleet`]): clamped to
    /// one full refill (a full bucket) and to one burst of debt (a negative
    /// age: the bucket refuses until it has paid it back). The fleet bounds
    /// what it sets by what the node alone would admit
    /// ([`super::fleet`]). Takes an entry as a miss does. O([`PROBE`]); no
    /// allocation. Off the request path.
    pub fn set_age(&mut self, policy: &RatePolicy, slot: Slot, key: u64, now_ms: u64, age_ns: i64) {
        let now_ns = now_ms.saturating_mul(NS_PER_MS);
        let tolerance = policy.tolerance_ns.min(i64::MAX as u64) as i64;
        let age = age_ns.clamp(-tolerance, tolerance);
        let fp = fingerprint(slot, key);
        let start = self.window_start(slot, key);
        let idx = match self.find(fp, start) {
            Some(idx) => idx,
            None => {
                self.slot_tolerance_ns[slot.get() as usize] = policy.tolerance_ns;
                self.vacancy(start, now_ns)
            }
        };
        self.entries.set(
            idx,
            Entry {
                fp,
                empty_at_ns: now_ns.wrapping_sub(age as u64),
            },
        );
    }

    /// [`set_age`](Self::set_age), but only when that leaves the bucket
    /// emptier than it is (a key without a bucket takes it as is).
    pub fn tighten_age(
        &mut self,
        policy: &RatePolicy,
        slot: Slot,
        key: u64,
        now_ms: u64,
        age_ns: i64,
    ) {
        let now_ns = now_ms.saturating_mul(NS_PER_MS);
        let tolerance = policy.tolerance_ns.min(i64::MAX as u64) as i64;
        let learned = now_ns.wrapping_sub(age_ns.clamp(-tolerance, tolerance) as u64);
        let fp = fingerprint(slot, key);
        let start = self.window_start(slot, key);
        if let Some(idx) = self.find(fp, start) {
            let mine = self.entries.get(idx).empty_at_ns;
            if (learned.wrapping_sub(mine) as i64) <= 0 {
                return;
            }
        }
        self.set_age(policy, slot, key, now_ms, age_ns);
    }

    /// Takes one token from every bucket of `checks` (the IPv6 /64, /56 and
    /// /48 tiers of one request) or from none: when any bucket is empty,
    /// nothing is taken and the longest wait is returned. O(checks x PROBE).
    pub fn try_acquire_all(&mut self, checks: &[RateCheck<'_>], now_ms: u64) -> Decision {
        let mut wait_ms = 0;
        for c in checks {
            let p = self.peek(c.policy, c.slot, c.key, now_ms);
            if p.tokens == 0 {
                wait_ms = wait_ms.max(p.retry_after_ms);
            }
        }
        if wait_ms > 0 {
            self.stats.limited += 1;
            return Decision {
                allowed: false,
                retry_after_ms: wait_ms,
            };
        }
        for c in checks {
            // Each has a token (an eviction by an earlier tier only restarts
            // a bucket full), so every take succeeds.
            let _ = self.try_acquire(c.policy, c.slot, c.key, now_ms);
        }
        Decision::ALLOWED
    }

    /// Visits up to `budget` entries from where the last sweep stopped and
    /// clears those of slots past their grace period, and those whose bucket
    /// is full under their live slot's policy (a full bucket is the same as
    /// no entry). Also moves slots through retirement (see [`PolicySlots`]).
    /// O(budget + slots with a retirement pending); no allocation.
    pub fn sweep(&mut self, slots: &mut PolicySlots, now_ms: u64, budget: usize) -> SweepReport {
        let cap = self.entries.len();
        slots.advance(now_ms, self.swept_total, cap as u64);
        let now_ns = now_ms.saturating_mul(NS_PER_MS);
        let mut report = SweepReport::default();
        for _ in 0..budget.min(cap) {
            let idx = self.sweep_cursor;
            self.sweep_cursor = (idx + 1) & self.mask;
            self.swept_total += 1;
            report.visited += 1;
            let e = self.entries.get(idx);
            if e.fp == 0 {
                continue;
            }
            let clear = match slots.sweep_view(slot_of(e.fp)) {
                SweepView::Keep => false,
                SweepView::Clear => true,
                SweepView::Live(policy) => {
                    age_ns(now_ns, e.empty_at_ns) >= policy.tolerance_ns as i64
                }
            };
            if clear {
                self.entries.set(idx, Entry::default());
                report.cleared += 1;
            }
        }
        self.stats.swept += report.cleared as u64;
        slots.advance(now_ms, self.swept_total, cap as u64);
        report
    }
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
