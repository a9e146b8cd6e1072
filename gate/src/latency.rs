//! Answer latency per host: a fixed-bucket histogram, the shape Prometheus
//! histograms have, kept per shard and per host. Recording is an index and
//! three additions: no allocation, no lock.

/// Upper bounds of the buckets, in microseconds (the last bucket, past
/// them all, is `+Inf`).
pub const BOUNDS_US: [u64; 13] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];

/// One host's answered requests by how long they took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Requests per bucket (not cumulative); the last is past every bound.
    pub buckets: [u64; BOUNDS_US.len() + 1],
    /// Sum of the durations, in microseconds.
    pub sum_us: u64,
    pub count: u64,
}

impl Histogram {
    /// Counts one request that took `us` microseconds. O(buckets).
    #[inline]
    pub fn record(&mut self, us: u64) {
        self.record_n(us, 1);
    }

    /// Counts `n` requests answered in `us` microseconds each.
    pub fn record_n(&mut self, us: u64, n: u64) {
        let i = BOUNDS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(BOUNDS_US.len());
        self.buckets[i] += n;
        self.sum_us = self.sum_us.saturating_add(us.saturating_mul(n));
        self.count += n;
    }

    /// Adds another shard's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
        self.count += other.count;
    }

    /// The cumulative count of each bucket, as Prometheus reports them.
    pub fn cumulative(&self) -> [u64; BOUNDS_US.len() + 1] {
        let mut out = self.buckets;
        for i in 1..out.len() {
            out[i] += out[i - 1];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_land_in_the_first_bucket_that_holds_them() {
        let mut h = Histogram::default();
        for us in [0, 1_000, 1_001, 9_999_999, 10_000_000, 10_000_001, u64::MAX] {
            h.record(us);
        }
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[12], 2);
        assert_eq!(h.buckets[13], 2);
        assert_eq!(h.count, 7);
        assert_eq!(h.sum_us, u64::MAX);
        let c = h.cumulative();
        assert_eq!(c[0], 2);
        assert_eq!(c[13], 7);
        let mut m = Histogram::default();
        m.merge(&h);
        m.merge(&h);
        assert_eq!(m.count, 14);
    }

    #[test]
    fn many_requests_of_one_duration_count_as_each_would() {
        for us in [0, 999, 1_000, 30_000, 10_000_001] {
            for n in [0, 1, 2, 16, 1000] {
                let mut one_by_one = Histogram::default();
                for _ in 0..n {
                    one_by_one.record(us);
                }
                let mut at_once = Histogram::default();
                at_once.record_n(us, n);
                assert_eq!(at_once, one_by_one, "{n} of {us} µs");
            }
        }
    }
}
