//! Fixed-window budgets: at most N requests per window, per key.
//!
//! Time is cut into windows of `window_ms` (window `i` is
//! `[i * window_ms, (i + 1) * window_ms)`). A budget counts the requests it
//! admitted in the current window and refuses past its threshold; at the
//! next boundary every count starts again from zero, so recovery after a
//! burst is deterministic: the first request of the next window is admitted.
//! A refused request is not counted.
//!
//! A [`Budget`] has two thresholds: the full `limit`, and a smaller
//! `normal_limit` that ordinary work stops at, so that while shedding the
//! difference stays available to critical operations and health probes
//! ([`Class`]).
//!
//! [`FixedWindow`] is a single counter (the global budget, an operation's
//! budget). [`WindowTable`] holds one shard's keyed counters (source prefixes,
//! health probes, identities) over [tracked keys](super::tracked): a hard
//! ceiling with a critical reserve, fail-closed, cleared in O(1) at each
//! boundary. All counts of one table share its window length.
//!
//! Every operation is O(1) or O(probe window) and allocates nothing.

use super::terms::{Class, Scope};
use super::tracked::{Ceiling, Spot, TrackedKeys};

/// Bounds of a window's length in ms: 100 ms ..= 1 hour.
pub const WINDOW_MS_BOUNDS: (u64, u64) = (100, 3_600_000);

/// A budget's thresholds per window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    limit: u32,
    normal_limit: u32,
}

/// Why a budget was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetError {
    /// `limit` is 0: `quota.requests.range`.
    Limit,
    /// `normal_limit` is 0 or above `limit`: `quota.optional.range`.
    Normal,
}

impl Budget {
    /// `limit` per window for critical work and health probes, of which
    /// ordinary work may use `normal_limit` (1..=limit).
    pub fn new(limit: u32, normal_limit: u32) -> Result<Budget, BudgetError> {
        if limit == 0 {
            return Err(BudgetError::Limit);
        }
        if normal_limit == 0 || normal_limit > limit {
            return Err(BudgetError::Normal);
        }
        Ok(Budget {
            limit,
            normal_limit,
        })
    }

    /// One threshold for every class.
    pub fn flat(limit: u32) -> Result<Budget, BudgetError> {
        Budget::new(limit, limit)
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn normal_limit(&self) -> u32 {
        self.normal_limit
    }

    /// This budget with its thresholds held to at most `limit` and
    /// `normal_limit` (a fleet lease: either may be 0, which admits
    /// nothing of its classes).
    #[inline]
    pub(crate) fn capped(&self, limit: u32, normal_limit: u32) -> Budget {
        let limit = self.limit.min(limit);
        Budget {
            limit,
            normal_limit: self.normal_limit.min(normal_limit).min(limit),
        }
    }

    /// The threshold a request of `class` is held to.
    #[inline]
    pub fn threshold(&self, class: Class) -> u32 {
        if class.may_use_reserve() {
            self.limit
        } else {
            self.normal_limit
        }
    }

    /// This budget for one of `shards` shards under `scope`.
    pub fn for_shards(&self, scope: Scope, shards: u32) -> Budget {
        Budget {
            limit: scope.shard_limit(self.limit, shards),
            normal_limit: scope.shard_limit(self.normal_limit, shards),
        }
    }
}

/// Which window `now_ms` falls in.
#[inline]
fn window_index(now_ms: u64, window_ms: u64) -> u64 {
    now_ms / window_ms
}

/// Ms from `now_ms` to the next boundary (at least 1).
#[inline]
pub fn until_boundary_ms(now_ms: u64, window_ms: u64) -> u64 {
    window_ms - now_ms % window_ms
}

/// One unkeyed counter (the global budget, an operation's budget).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedWindow {
    window: u64,
    count: u32,
}

impl FixedWindow {
    /// The count admitted in the window of `window` (an index from
    /// [`WindowTable::window`]).
    #[inline]
    pub fn count(&self, window: u64) -> u32 {
        if self.window == window {
            self.count
        } else {
            0
        }
    }

    /// Whether one more fits under `threshold` in `window`.
    #[inline]
    pub fn fits(&self, window: u64, threshold: u32) -> bool {
        self.count(window) < threshold
    }

    /// Counts one in `window` (the caller checked [`fits`](Self::fits)).
    #[inline]
    pub fn add(&mut self, window: u64) {
        if self.window != window {
            self.window = window;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
    }
}

/// Why a keyed budget refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowRefusal {
    /// The key's count reached its threshold.
    Exhausted,
    /// The key is not tracked and tracking it would pass the table's ceiling
    /// (or its probe window is full): fail closed.
    Untracked,
}

/// A passed check, to commit before anything else touches the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct WindowPass {
    idx: usize,
    key: u64,
    new: bool,
    epoch: u32,
}

/// Plain counters the shard reads for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowStats {
    pub admitted: u64,
    pub exhausted: u64,
    pub untracked: u64,
}

/// One shard's keyed fixed-window counters.
#[derive(Debug)]
pub struct WindowTable {
    keys: TrackedKeys,
    window_ms: u64,
    window: u64,
    /// Where the current window ends, so a roll inside it costs no division.
    window_end_ms: u64,
    pub stats: WindowStats,
}

/// Why a window length was refused: `quota.window_ms.range`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowLengthError;

impl WindowTable {
    /// A table whose windows last `window_ms` (within
    /// [`WINDOW_MS_BOUNDS`]) under `ceiling`. Allocates its entries once.
    pub fn new(window_ms: u64, ceiling: Ceiling) -> Result<WindowTable, WindowLengthError> {
        if !(WINDOW_MS_BOUNDS.0..=WINDOW_MS_BOUNDS.1).contains(&window_ms) {
            return Err(WindowLengthError);
        }
        Ok(WindowTable {
            keys: TrackedKeys::new(ceiling),
            window_ms,
            window: 0,
            window_end_ms: window_ms,
            stats: WindowStats::default(),
        })
    }

    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// Moves to the window of `now_ms`, forgetting every key at a boundary,
    /// and returns its index. A clock sample from an earlier window counts
    /// in the current one. O(1).
    #[inline]
    pub fn roll(&mut self, now_ms: u64) -> u64 {
        if now_ms >= self.window_end_ms {
            let w = window_index(now_ms, self.window_ms);
            self.window = w;
            self.window_end_ms = (w + 1).saturating_mul(self.window_ms);
            self.keys.clear_all();
        }
        self.window
    }

    /// The current window index (as of the last [`roll`](Self::roll)).
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Checks that `key` may count one more under `threshold`, changing no
    /// count. Commit the pass with [`commit`](Self::commit) before the next
    /// roll or commit. O(probe).
    #[inline]
    pub fn check(
        &mut self,
        key: u64,
        threshold: u32,
        class: Class,
        now_ms: u64,
    ) -> Result<WindowPass, WindowRefusal> {
        self.roll(now_ms);
        let epoch = self.keys.epoch();
        match self.keys.spot(key, class) {
            Spot::Found(idx) if self.keys.count(idx) < threshold => Ok(WindowPass {
                idx,
                key,
                new: false,
                epoch,
            }),
            Spot::Found(_) => {
                self.stats.exhausted += 1;
                Err(WindowRefusal::Exhausted)
            }
            Spot::Vacant(_) if threshold == 0 => {
                self.stats.exhausted += 1;
                Err(WindowRefusal::Exhausted)
            }
            Spot::Vacant(idx) => Ok(WindowPass {
                idx,
                key,
                new: true,
                epoch,
            }),
            Spot::Refused => {
                self.stats.untracked += 1;
                Err(WindowRefusal::Untracked)
            }
        }
    }

    /// Counts the request a check passed. A pass from an earlier window is
    /// ignored. O(1).
    #[inline]
    pub fn commit(&mut self, pass: WindowPass) {
        if pass.epoch != self.keys.epoch() {
            return;
        }
        if pass.new {
            self.keys.insert(pass.idx, pass.key);
        }
        self.keys.add(pass.idx, 1);
        self.stats.admitted += 1;
    }

    /// Check and commit in one step.
    #[inline]
    pub fn try_consume(
        &mut self,
        key: u64,
        threshold: u32,
        class: Class,
        now_ms: u64,
    ) -> Result<(), WindowRefusal> {
        let pass = self.check(key, threshold, class, now_ms)?;
        self.commit(pass);
        Ok(())
    }

    /// Requests `key` has counted in the current window.
    pub fn count(&self, key: u64) -> u32 {
        self.keys.count_of(key)
    }

    /// Keys tracked in the current window.
    pub fn tracked_keys(&self) -> u32 {
        self.keys.live()
    }

    pub fn ceiling(&self) -> Ceiling {
        self.keys.ceiling()
    }

    /// Entries allocated (twice the ceiling, a power of two).
    pub fn capacity(&self) -> usize {
        self.keys.capacity()
    }

    /// Ms from `now_ms` to the next boundary, when every count restarts.
    pub fn retry_after_ms(&self, now_ms: u64) -> u64 {
        until_boundary_ms(now_ms, self.window_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max_keys: u32, reserve: u32) -> WindowTable {
        WindowTable::new(1_000, Ceiling::new(max_keys, reserve).unwrap()).unwrap()
    }

    #[test]
    fn a_budget_refuses_past_its_limit_and_recovers_at_the_boundary() {
        let mut t = table(64, 0);
        for _ in 0..3 {
            assert_eq!(t.try_consume(7, 3, Class::Normal, 1_000), Ok(()));
        }
        assert_eq!(
            t.try_consume(7, 3, Class::Normal, 1_999),
            Err(WindowRefusal::Exhausted)
        );
        assert_eq!(t.count(7), 3, "a refusal is not counted");
        assert_eq!(t.retry_after_ms(1_999), 1);
        assert_eq!(t.try_consume(7, 3, Class::Normal, 2_000), Ok(()));
        assert_eq!(t.count(7), 1);
    }

    #[test]
    fn keys_clear_at_the_window_boundary() {
        let mut t = table(4, 0);
        for k in 10..14 {
            t.try_consume(k, 10, Class::Normal, 500).unwrap();
        }
        assert_eq!(t.tracked_keys(), 4);
        assert_eq!(
            t.try_consume(99, 10, Class::Normal, 999),
            Err(WindowRefusal::Untracked)
        );
        t.roll(1_000);
        assert_eq!(t.tracked_keys(), 0);
        assert_eq!(t.count(10), 0);
        assert_eq!(t.try_consume(99, 10, Class::Normal, 1_000), Ok(()));
    }

    #[test]
    fn an_earlier_clock_sample_counts_in_the_current_window() {
        let mut t = table(8, 0);
        t.try_consume(1, 2, Class::Normal, 5_000).unwrap();
        t.try_consume(1, 2, Class::Normal, 4_000).unwrap();
        assert_eq!(
            t.try_consume(1, 2, Class::Normal, 4_500),
            Err(WindowRefusal::Exhausted)
        );
    }

    #[test]
    fn normal_work_stops_at_the_optional_budget_leaving_the_reserve() {
        let b = Budget::new(10, 7).unwrap();
        let mut t = table(8, 0);
        let mut normal = 0;
        while t
            .try_consume(1, b.threshold(Class::Normal), Class::Normal, 0)
            .is_ok()
        {
            normal += 1;
        }
        assert_eq!(normal, 7);
        let mut critical = 0;
        while t
            .try_consume(1, b.threshold(Class::Critical), Class::Critical, 0)
            .is_ok()
        {
            critical += 1;
        }
        assert_eq!(critical, 3);
    }

    #[test]
    fn a_pass_from_an_earlier_window_is_not_committed() {
        let mut t = table(8, 0);
        let pass = t.check(5, 10, Class::Normal, 900).unwrap();
        t.roll(1_000);
        t.commit(pass);
        assert_eq!(t.count(5), 0);
        assert_eq!(t.tracked_keys(), 0);
    }

    #[test]
    fn fixed_window_counts_per_window() {
        let mut w = FixedWindow::default();
        assert!(w.fits(3, 1));
        w.add(3);
        assert!(!w.fits(3, 1));
        assert_eq!(w.count(4), 0);
        assert!(w.fits(4, 1));
        w.add(4);
        assert_eq!(w.count(4), 1);
    }

    #[test]
    fn budget_and_window_bounds_are_checked() {
        assert_eq!(Budget::new(0, 0), Err(BudgetError::Limit));
        assert_eq!(Budget::new(5, 6), Err(BudgetError::Normal));
        assert_eq!(Budget::new(5, 0), Err(BudgetError::Normal));
        let c = Ceiling::new(8, 0).unwrap();
        assert!(WindowTable::new(99, c).is_err());
        assert!(WindowTable::new(3_600_001, c).is_err());
        assert!(WindowTable::new(100, c).is_ok());
    }
}
