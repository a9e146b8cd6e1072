//! The clock of deadlines: the kernel's coarse monotonic clock (a memory
//! read, about 5 ns here, where the precise clock costs about 24 ns: eight
//! reads a proxied request added up to 1.5 % of its CPU), anchored to
//! [`Instant`] once per thread.
//!
//! The coarse clock is the precise one as of the kernel's last update of
//! it, once a tick (1 to 10 ms), so it lags by less than a tick and never
//! leads; a kernel that updates it late (a busy virtual machine) can leave
//! it a few ticks behind for a moment. [`deadline`] adds one tick: a
//! timeout does not fire before its time (by more than such a late
//! update), and at most a tick (plus the timer wheel's millisecond) after
//! it.

use monoio::time::Instant;
use std::cell::Cell;
use std::time::Duration;

thread_local! {
    /// (an `Instant`, the precise monotonic clock read with it in ns, the
    /// coarse clock's resolution in ns).
    static ANCHOR: Cell<Option<(Instant, u64, u64)>> = const { Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// How far the test's clock is ahead of the machine's (unit tests of
    /// the connection layer pass time in: [`skew`]).
    static SKEW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Moves this thread's clock `by` ahead: deadlines made from now on, and
/// [`now`], [`now_ms`] and [`precise_now`], see the time moved on.
#[cfg(test)]
pub(crate) fn skew(by: Duration) {
    SKEW.with(|s| s.set(s.get() + by));
}

/// `t` on the test's clock (moved on by [`skew`]).
#[cfg(test)]
#[inline]
fn skewed(t: Instant) -> Instant {
    t + SKEW.with(Cell::get)
}

/// Outside tests the clock is the machine's: nothing is added.
#[cfg(not(test))]
#[inline(always)]
fn skewed(t: Instant) -> Instant {
    t
}

/// The precise now (as [`Instant::now`]), on the test's clock in tests.
#[inline]
pub fn precise_now() -> Instant {
    skewed(Instant::now())
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; both clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut t) };
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

fn anchor() -> (Instant, u64, u64) {
    ANCHOR.with(|a| match a.get() {
        Some(x) => x,
        None => {
            let mut res = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: as above.
            unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut res) };
            let tick =
                (res.tv_sec as u64 * 1_000_000_000 + res.tv_nsec as u64).clamp(1, 100_000_000);
            let x = (Instant::now(), read(libc::CLOCK_MONOTONIC), tick);
            a.set(Some(x));
            x
        }
    })
}

/// Now, as of the kernel's last tick: never later than [`Instant::now`],
/// less than a tick earlier.
#[inline]
pub fn now() -> Instant {
    let (at, mono, _) = anchor();
    skewed(at + Duration::from_nanos(read(libc::CLOCK_MONOTONIC_COARSE).saturating_sub(mono)))
}

/// The coarse monotonic clock in milliseconds (the clock of the upstream
/// pools and passive health): a memory read.
#[inline]
pub fn now_ms() -> u64 {
    #[cfg(test)]
    let skew = SKEW.with(Cell::get).as_millis() as u64;
    #[cfg(not(test))]
    let skew = 0;
    read(libc::CLOCK_MONOTONIC_COARSE) / 1_000_000 + skew
}

/// The instant `ms` milliseconds from now, never earlier (one tick added).
#[inline]
pub fn deadline(ms: u64) -> Instant {
    let (at, mono, tick) = anchor();
    let since = read(libc::CLOCK_MONOTONIC_COARSE).saturating_sub(mono);
    skewed(at + Duration::from_nanos(since.saturating_add(tick)) + Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_never_leads_and_trails_by_about_a_tick() {
        let tick = Duration::from_nanos(anchor().2);
        for _ in 0..1_000 {
            let before = Instant::now();
            let coarse = now();
            let after = Instant::now();
            assert!(coarse <= after, "{coarse:?} after {after:?}");
            let lag = before.saturating_duration_since(coarse);
            // Less than a tick, but a late update of the kernel's (a
            // loaded machine) can leave it some ticks behind for a moment.
            assert!(lag <= tick * 25, "{lag:?} behind, a tick is {tick:?}");
        }
    }

    #[test]
    fn a_deadline_is_never_early() {
        for ms in [0, 1, 7, 250] {
            let d = deadline(ms);
            let earliest = Instant::now() + Duration::from_millis(ms);
            // Both computed now: the deadline may not precede the precise one
            // (less the few ns between the two reads).
            assert!(d + Duration::from_micros(50) >= earliest, "{ms} ms");
            let tick = Duration::from_nanos(anchor().2);
            assert!(d <= earliest + tick + tick, "{ms} ms");
        }
    }
}
