//! Bounded histograms of counts: exact below [`EXACT`], logarithmic above.
//!
//! A value below [`EXACT`] has a bucket of its own, so quantiles of small
//! counts (requests per client per second, the common case) are exact. A
//! value of [`EXACT`] or more falls into one of [`SUB`] buckets per power of
//! two; a quantile landing there is reported as its bucket's upper bound,
//! which is at most 1/[`SUB`] (6.25 %) above the true value and never below
//! it. The count, the sum and the sum of squares are kept exactly (128-bit
//! integers), so the mean and the standard deviation carry no bucket error,
//! and so is the maximum.

/// Values below this are counted exactly.
pub const EXACT: u64 = 1024;
/// Buckets per power of two above [`EXACT`].
pub const SUB: u64 = 16;
const EXACT_BITS: u32 = 10;
const SUB_BITS: u32 = 4;
/// Logarithmic buckets: powers of two from 2^10 to 2^63, [`SUB`] each.
const LOG_BUCKETS: usize = ((64 - EXACT_BITS) as usize) * SUB as usize;

/// A histogram of non-negative counts in bounded memory (about 9 KiB).
#[derive(Clone, Debug)]
pub struct Histogram {
    exact: Vec<u64>,
    log: Vec<u64>,
    n: u64,
    sum: u128,
    sum_sq: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            exact: vec![0; EXACT as usize],
            log: vec![0; LOG_BUCKETS],
            n: 0,
            sum: 0,
            sum_sq: 0,
            max: 0,
        }
    }
}

/// The logarithmic bucket of `v` (at least [`EXACT`]).
fn log_index(v: u64) -> usize {
    let e = 63 - v.leading_zeros();
    let sub = (v >> (e - SUB_BITS)) & (SUB - 1);
    ((e - EXACT_BITS) as usize) * SUB as usize + sub as usize
}

/// The largest value of logarithmic bucket `i`.
fn log_upper(i: usize) -> u64 {
    let e = (i / SUB as usize) as u32 + EXACT_BITS;
    let sub = (i % SUB as usize) as u64;
    let width = 1u64 << (e - SUB_BITS);
    let lower = (1u64 << e) + sub * width;
    lower.saturating_add(width - 1)
}

/// The smallest value of logarithmic bucket `i`.
fn log_lower(i: usize) -> u64 {
    let e = (i / SUB as usize) as u32 + EXACT_BITS;
    let sub = (i % SUB as usize) as u64;
    (1u64 << e) + sub * (1u64 << (e - SUB_BITS))
}

impl Histogram {
    /// Counts one sample. O(1).
    pub fn add(&mut self, v: u64) {
        if v < EXACT {
            self.exact[v as usize] += 1;
        } else {
            self.log[log_index(v)] += 1;
        }
        self.n += 1;
        self.sum += u128::from(v);
        self.sum_sq += u128::from(v) * u128::from(v);
        self.max = self.max.max(v);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.exact.iter_mut().zip(&other.exact) {
            *a += b;
        }
        for (a, b) in self.log.iter_mut().zip(&other.log) {
            *a += b;
        }
        self.n += other.n;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
        self.max = self.max.max(other.max);
    }

    /// Samples counted.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// The largest sample (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The sum of all samples.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// The mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        self.sum as f64 / self.n as f64
    }

    /// The population standard deviation (0 when empty).
    pub fn std_dev(&self) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let n = self.n as f64;
        let mean = self.sum as f64 / n;
        let var = self.sum_sq as f64 / n - mean * mean;
        var.max(0.0).sqrt()
    }

    /// The `q` quantile (0 < q <= 1): the smallest value with at least
    /// `ceil(q * n)` samples at or below it; above [`EXACT`], its bucket's
    /// upper bound (capped at the maximum). 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0u64;
        for (v, &c) in self.exact.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return v as u64;
            }
        }
        for (i, &c) in self.log.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return log_upper(i).min(self.max);
            }
        }
        self.max
    }

    /// Samples strictly above `limit`. Exact below [`EXACT`]; a logarithmic
    /// bucket counts when its smallest value is above `limit`, so a bucket
    /// that straddles `limit` is not counted (an undercount of at most one
    /// bucket's samples).
    pub fn count_above(&self, limit: u64) -> u64 {
        let exact: u64 = self
            .exact
            .iter()
            .enumerate()
            .filter(|(v, _)| *v as u64 > limit)
            .map(|(_, c)| c)
            .sum();
        let log: u64 = self
            .log
            .iter()
            .enumerate()
            .filter(|(i, _)| log_lower(*i) > limit)
            .map(|(_, c)| c)
            .sum();
        exact + log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.add(v);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        assert_eq!(h.max(), 100);
        assert!((h.mean() - 50.5).abs() < 1e-9);
        assert_eq!(h.count_above(90), 10);
    }

    #[test]
    fn large_values_stay_within_the_bound() {
        for v in [1024u64, 1500, 4095, 70_000, 1 << 40, u64::MAX] {
            let i = log_index(v);
            assert!(log_lower(i) <= v && v <= log_upper(i), "{v}");
            let width = log_upper(i) - log_lower(i);
            assert!(width as f64 <= v as f64 / SUB as f64, "{v}");
        }
        let mut h = Histogram::default();
        h.add(5000);
        h.add(u64::MAX);
        assert_eq!(h.quantile(0.5), log_upper(log_index(5000)));
        assert_eq!(h.quantile(1.0), u64::MAX);
    }

    #[test]
    fn empty_is_zero() {
        let h = Histogram::default();
        assert_eq!(h.quantile(0.99), 0);
        assert_eq!(h.mean(), 0.0);
        assert_eq!(h.std_dev(), 0.0);
    }
}
