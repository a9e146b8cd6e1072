//! One token bucket outside any table: the per-connection limits (requests
//! on one keep-alive connection, messages in one WebSocket tunnel).
//!
//! The same token clock as the rate table ([`super::rate`]): the state is
//! the instant the bucket would have been empty, tokens are the time since
//! then over the policy's interval, saturated at the burst. A new bucket is
//! full. 16 bytes, no allocation, O(1).

use super::rate::{Decision, RatePolicy};

const NS_PER_MS: u64 = 1_000_000;

/// A token bucket owned by one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// `None`: never touched (full). Signed: a full bucket was empty before
    /// the clock's origin.
    empty_at_ns: Option<i64>,
}

impl Bucket {
    /// A full bucket.
    pub const fn new() -> Bucket {
        Bucket { empty_at_ns: None }
    }

    /// Takes one token at `now_ms` under `policy`: allowed, or the wait for
    /// one whole token. A refused take changes nothing.
    pub fn try_take(&mut self, policy: &RatePolicy, now_ms: u64) -> Decision {
        let now_ns = now_ms.saturating_mul(NS_PER_MS).min(i64::MAX as u64 / 2) as i64;
        let interval = policy.interval_ns().min(i64::MAX as u64 / 4) as i64;
        let tolerance = interval
            .saturating_mul(i64::from(policy.burst()))
            .min(i64::MAX / 4);
        let age = match self.empty_at_ns {
            None => tolerance,
            Some(at) => now_ns.saturating_sub(at).clamp(0, tolerance),
        };
        if age >= interval {
            self.empty_at_ns = Some(now_ns - age + interval);
            Decision {
                allowed: true,
                retry_after_ms: 0,
            }
        } else {
            Decision {
                allowed: false,
                retry_after_ms: ((interval - age) as u64).div_ceil(NS_PER_MS).max(1),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_bucket_holds_its_burst_then_refills_at_the_rate() {
        let p = RatePolicy::per_second(10, 3).unwrap();
        let mut b = Bucket::default();
        for _ in 0..3 {
            assert!(b.try_take(&p, 1_000).allowed);
        }
        let refused = b.try_take(&p, 1_000);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_ms, 100);
        // 100 ms later one token is back, and only one.
        assert!(b.try_take(&p, 1_100).allowed);
        assert!(!b.try_take(&p, 1_100).allowed);
        // A long pause refills to the burst, not beyond.
        for _ in 0..3 {
            assert!(b.try_take(&p, 60_000).allowed);
        }
        assert!(!b.try_take(&p, 60_000).allowed);
    }

    #[test]
    fn frequent_touches_lose_no_refill() {
        // 20/s touched every millisecond for 10 s admits 200 plus the burst.
        let p = RatePolicy::per_second(20, 1).unwrap();
        let mut b = Bucket::default();
        let admitted = (0..10_000u64)
            .filter(|ms| b.try_take(&p, 1_000 + ms).allowed)
            .count();
        assert_eq!(admitted, 200);
    }

    #[test]
    fn the_ends_of_the_clock_do_not_overflow() {
        let p = RatePolicy::new(1, 3_600_000, 1_048_575).unwrap();
        let mut b = Bucket::default();
        assert!(b.try_take(&p, 0).allowed);
        assert!(b.try_take(&p, u64::MAX).allowed);
        let _ = b.try_take(&p, 0);
        let _ = b.try_take(&p, u64::MAX / 2);
    }

    #[test]
    fn a_clock_that_goes_back_earns_nothing() {
        let p = RatePolicy::per_second(1, 1).unwrap();
        let mut b = Bucket::default();
        assert!(b.try_take(&p, 5_000).allowed);
        assert!(!b.try_take(&p, 4_000).allowed);
        assert!(!b.try_take(&p, 5_500).allowed);
        assert!(b.try_take(&p, 6_000).allowed);
    }
}
