//! In-situ timing of the gate's decision (feature `decide-timing`, off in
//! normal builds): each shard sums the time-stamp counter across
//! `decide_from` and every 100,000 decisions prints the mean, in cycles
//! and in nanoseconds (the counter's rate is measured against the
//! monotonic clock over the same interval). It shows what a decision
//! costs between the kernel's network work, where the micro benchmarks'
//! warm caches do not hold. The two counter reads add about 20 ns.

use std::cell::Cell;
use std::time::Instant;

const EVERY: u64 = 100_000;

/// Cycles summed, decisions, and the interval's start (clock, counter).
type Interval = (u64, u64, Option<(Instant, u64)>);

thread_local! {
    static SUM: Cell<Interval> = const { Cell::new((0, 0, None)) };
}

/// The time-stamp counter.
#[inline]
pub fn stamp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC has no preconditions on x86_64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        thread_local!(static ORIGIN: Instant = Instant::now());
        ORIGIN.with(|o| o.elapsed().as_nanos() as u64)
    }
}

/// Adds one decision that took `from..to` (counter values).
pub fn record(from: u64, to: u64) {
    SUM.with(|c| {
        let (sum, n, start) = c.get();
        let (sum, n) = (sum + to.wrapping_sub(from), n + 1);
        if n < EVERY {
            c.set((sum, n, start));
            return;
        }
        let now = (Instant::now(), stamp());
        if let Some((t, s)) = start {
            let per_ns =
                now.1.wrapping_sub(s) as f64 / now.0.duration_since(t).as_nanos().max(1) as f64;
            let cycles = sum as f64 / n as f64;
            eprintln!(
                "gapura: decide in situ: {cycles:.1} cycles, {:.1} ns (mean of {n})",
                cycles / per_ns
            );
        }
        c.set((0, 0, Some(now)));
    });
}
