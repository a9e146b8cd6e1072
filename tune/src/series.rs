//! Counts per time slot (a second, or a budget window) for one key, with
//! slots kept open while lines may still arrive for them.
//!
//! Shards flush their lines up to about a second apart, so the log is only
//! roughly in time order. A line is *late* when it is more than
//! [`LATENESS_MS`] older than the newest line read so far (the watermark is
//! the newest time minus that); late lines are counted and skipped. A slot
//! stays open until its end is at or before the watermark: no line that is
//! not late can fall in it any more, so closing it then gives the same
//! counts as reading the log sorted. A closed slot's count is one sample.

use crate::histogram::Histogram;

/// How far behind the newest line a line may be and still count.
pub const LATENESS_MS: u64 = 10_000;

/// The open slots of one key and the largest count it has closed.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// (slot index, requests), only slots with a request.
    open: Vec<(u64, u64)>,
    peak: u64,
}

impl Series {
    /// Counts a request in slot `slot`.
    pub fn add(&mut self, slot: u64) {
        match self.open.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, n)) => *n += 1,
            None => self.open.push((slot, 1)),
        }
    }

    /// Closes every open slot that ends at or before `watermark_ms` (slots
    /// are `unit_ms` long), each one sample of `hist`.
    pub fn close_before(&mut self, watermark_ms: u64, unit_ms: u64, hist: &mut Histogram) {
        let peak = &mut self.peak;
        self.open.retain(|&(slot, n)| {
            let end = slot.saturating_add(1).saturating_mul(unit_ms);
            if end <= watermark_ms {
                hist.add(n);
                *peak = (*peak).max(n);
                false
            } else {
                true
            }
        });
    }

    /// Closes every open slot; returns the largest count the key ever had
    /// in one slot.
    pub fn close_all(&mut self, hist: &mut Histogram) -> u64 {
        self.close_before(u64::MAX, 1, hist);
        self.peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_close_at_the_watermark() {
        let mut s = Series::default();
        let mut h = Histogram::default();
        s.add(1);
        s.add(1);
        s.add(2);
        s.close_before(2000, 1000, &mut h);
        assert_eq!(h.count(), 1);
        assert_eq!(h.max(), 2);
        s.add(2);
        assert_eq!(s.close_all(&mut h), 2);
        assert_eq!(h.count(), 2);
        assert_eq!(h.sum(), 4);
    }
}
