//! The terms every quota part states its limits in, below all of them:
//! the [`Class`] of work a request is (who may use the reserves), the
//! [`Scope`] of a limit across shards, Retry-After in whole seconds
//! ([`retry_after_s`]), what one call of a sweeper did ([`SweepReport`])
//! and the rounds between two fleet leases ([`LEASE_ROUNDS`]). Values
//! only: no table, no state.

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

/// Rounds between two leases of one key: a view read this many rounds
/// after a lease includes what the other nodes took of theirs (each node
/// hands its counts over every `sync_ms` and its reconciler exchanges them
/// every `sync_ms`), so a new lease never hands out what they already
/// spent. Views in between may only tighten.
pub const LEASE_ROUNDS: u64 = 3;

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
}
