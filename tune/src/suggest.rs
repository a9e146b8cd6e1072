//! Suggested limits from the distributions.
//!
//! The method: a limit sits at the mean plus 3.5 standard deviations of the
//! samples, rounded up so it never sits below that boundary, then rounded
//! up again to an operator-friendly number ([`round_up`]: two significant
//! digits). Concretely:
//!
//! - `rate` (requests per second) = `round_up(ceil(mean + 3.5σ))` of the
//!   requests per client per active second, at least 1, at most 1000000;
//! - `burst` = `round_up(max(10 × the busiest second any client had,
//!   rate))`, at most 1048575: the seed's headroom (a burst about ten times
//!   the observed peak, so a legitimate connect-time burst is never clipped
//!   while the rate still caps a flood);
//! - the source budget `requests` (per window) = `round_up(ceil(mean +
//!   3.5σ))` of the requests per source prefix per active window, at least
//!   1, at most 4294967295.
//!
//! The share refused: a client counts as refused by a rate suggestion when
//! its busiest second in the log held more requests than `burst` (a full
//! bucket lets `burst` through at once; more in one second means some were
//! refused, whatever the refill). A prefix counts as refused by a budget
//! when its busiest window held more requests than `requests`.

use crate::histogram::Histogram;

/// The fewest clients a rate limit is suggested from: a spread of fewer
/// says what those clients did, not what a population does.
pub const MIN_CLIENTS: u64 = 10;
/// The shortest log (first to last used line) a limit is suggested from.
pub const MIN_SECONDS: u64 = 60;

/// Why a group gets no suggestion: too few clients or too short a log
/// (`clients`, `seconds`); `None` when there is enough.
pub fn too_little(clients: u64, seconds: u64) -> Option<String> {
    (clients < MIN_CLIENTS || seconds < MIN_SECONDS).then(|| {
        format!(
            "not enough to suggest from: {clients} client(s) over {seconds} s of log \
             (tune suggests from at least {MIN_CLIENTS} clients and {MIN_SECONDS} s)"
        )
    })
}

/// The line that says what share of a group's requests the limits in
/// force refused (429), when it is over 1 %: the figures count what the
/// clients sent, refused or not, so a suggestion above the limit in force
/// would let those requests through. `None` under 1 %.
pub fn refused_note(refused: u64, requests: u64) -> Option<String> {
    (refused * 100 > requests).then(|| {
        format!(
            "{refused} of these {requests} requests ({:.1} %) were refused with 429 by the              limits in force: the figures count what the clients sent, refused or not, and              a suggestion above the limit in force lets those requests through",
            percent(refused, requests)
        )
    })
}

/// How many standard deviations above the mean a limit sits.
pub const SIGMAS: f64 = 3.5;
/// The largest rate a rate limit takes (per second).
pub const MAX_RATE: u64 = 1_000_000;
/// The largest burst a rate limit takes.
pub const MAX_BURST: u64 = 1_048_575;
/// The largest budget.
pub const MAX_BUDGET: u64 = u32::MAX as u64;
/// How far above the busiest second any client had the burst sits.
pub const BURST_HEADROOM: u64 = 10;

/// `x` rounded up to two significant digits: 9 stays 9, 87 stays 87, 123
/// becomes 130, 1001 becomes 1100. Never below `x`.
pub fn round_up(x: u64) -> u64 {
    let mut step = 1u64;
    while x / step >= 100 {
        step = step.saturating_mul(10);
    }
    x.div_ceil(step).saturating_mul(step)
}

/// `ceil(mean + 3.5σ)` of a histogram's samples, as an integer.
pub fn boundary(h: &Histogram) -> u64 {
    boundary_of(h.mean(), h.std_dev())
}

/// `ceil(mean + 3.5σ)`, as an integer (0 when not a positive number).
pub fn boundary_of(mean: f64, std_dev: f64) -> u64 {
    let raw = mean + SIGMAS * std_dev;
    if raw.is_finite() && raw > 0.0 {
        raw.ceil().min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// A rate limit for one group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// mean + 3.5σ of requests per client per active second.
    pub raw: f64,
    pub rate: u64,
    pub burst: u64,
    /// Clients whose busiest second was over `burst`.
    pub refused: u64,
    pub clients: u64,
}

/// A source budget per window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// mean + 3.5σ of requests per prefix per active window.
    pub raw: f64,
    pub requests: u64,
    /// Prefixes whose busiest window was over `requests`.
    pub refused: u64,
    pub prefixes: u64,
}

/// The rate suggestion from per-second samples and each client's busiest
/// second. `None` without samples.
pub fn rate(per_second: &Histogram, peaks: &Histogram) -> Option<Rate> {
    if per_second.count() == 0 {
        return None;
    }
    let rate = round_up(boundary(per_second)).clamp(1, MAX_RATE);
    let peak = peaks.max().max(per_second.max());
    let burst = round_up(peak.saturating_mul(BURST_HEADROOM).max(rate)).clamp(1, MAX_BURST);
    Some(Rate {
        raw: per_second.mean() + SIGMAS * per_second.std_dev(),
        rate,
        burst,
        refused: peaks.count_above(burst),
        clients: peaks.count(),
    })
}

/// The budget suggestion from per-window samples and each prefix's busiest
/// window. `None` without samples.
pub fn budget(per_window: &Histogram, peaks: &Histogram) -> Option<Budget> {
    if per_window.count() == 0 {
        return None;
    }
    let requests = round_up(boundary(per_window)).clamp(1, MAX_BUDGET);
    Some(Budget {
        raw: per_window.mean() + SIGMAS * per_window.std_dev(),
        requests,
        refused: peaks.count_above(requests),
        prefixes: peaks.count(),
    })
}

/// `part` of `whole` in percent (0 when `whole` is 0).
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_two_significant_digits_up() {
        let cases = [
            (0, 0),
            (1, 1),
            (9, 9),
            (99, 99),
            (100, 100),
            (101, 110),
            (123, 130),
        ];
        for (x, want) in cases {
            assert_eq!(round_up(x), want, "{x}");
        }
        assert_eq!(round_up(1001), 1100);
        assert_eq!(round_up(25_000), 25_000);
        assert_eq!(round_up(25_001), 26_000);
        assert!(round_up(u64::MAX) >= u64::MAX / 2);
    }

    #[test]
    fn the_seed_example_gives_nine_and_a_burst_ten_times_its_peak() {
        // The seed's month of traffic: mean 1.845, σ 1.790 messages per
        // session-second, so mean + 3.5σ = 8.11, rounded up: 9.
        assert_eq!(round_up(boundary_of(1.845, 1.790)), 9);
        // Its peak was 21 a second: the burst sits ten times above it.
        let peak = 21u64;
        assert_eq!(round_up((peak * BURST_HEADROOM).max(9)), 210);
    }

    #[test]
    fn a_small_log_gives_the_limit_its_own_numbers_say() {
        // Samples 1, 1, 1, 2, 2, 3, 8: mean 18/7 = 2.571, population σ
        // 2.378, mean + 3.5σ = 10.89: rate 11; the busiest second was 8,
        // so the burst is 80.
        let mut h = Histogram::default();
        let mut peaks = Histogram::default();
        for v in [1u64, 1, 1, 2, 2, 3, 8] {
            h.add(v);
            peaks.add(v);
        }
        assert!((h.mean() - 18.0 / 7.0).abs() < 1e-9);
        let r = rate(&h, &peaks).unwrap();
        assert_eq!(r.rate, 11);
        assert_eq!(r.burst, 80);
        assert_eq!(r.refused, 0, "no client's busiest second is over the burst");
        assert_eq!(r.clients, 7);
    }
}
