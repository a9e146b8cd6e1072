//! Gapura's micro benchmarks and the fixtures they share.
//!
//! This crate owns benchmark code only: the `benches/` programs (std
//! timing, median of rounds) and the reference snapshot of the gate's chain
//! they and the allocation tests run. It must never ship in the `gapura`
//! binary.
//!
//! Modules:
//!
//! - `reference`: the reference chain (a client behind a trusted proxy, a
//!   2,000-CIDR access list, a 50-rule set, a managed robots.txt, and a
//!   second host whose list asks for a password).
//! - `steps`: the per-step reference (the embedded default profile,
//!   compiled, with a proxy host and each step's policy added on demand)
//!   the `steps` benchmark and the chain's counted test run.

pub mod reference;
pub mod steps;

use std::hint::black_box;
use std::time::Instant;

/// Runs `f(i)` for a quarter of `iters` to warm up, then 7 rounds of
/// `iters` calls; prints and returns the median ns per call. `f`'s result
/// is folded into a sink so the work cannot be optimised away.
pub fn measure<T: Into<u64>>(name: &str, iters: u64, mut f: impl FnMut(usize) -> T) -> f64 {
    let mut rounds = Vec::with_capacity(7);
    let mut sink = 0u64;
    for i in 0..iters / 4 {
        sink = sink.wrapping_add(f(black_box(i as usize)).into());
    }
    for _ in 0..7 {
        let start = Instant::now();
        for i in 0..iters as usize {
            sink = sink.wrapping_add(f(i).into());
        }
        rounds.push(start.elapsed().as_nanos() as f64 / iters as f64);
    }
    black_box(sink);
    rounds.sort_by(f64::total_cmp);
    println!(
        "{name:<52} {:>9.1} ns/op  (min {:.1}, max {:.1})",
        rounds[3], rounds[0], rounds[6]
    );
    rounds[3]
}
