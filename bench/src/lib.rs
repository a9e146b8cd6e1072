//! Gapura's micro benchmarks and the fixtures they share.
//!
//! This crate owns benchmark code only: the `benches/` programs (std
//! timing, median of rounds) and the reference snapshot of the gate's chain
//! they and the allocation tests run. It must never ship in the `gapura`
//! binary.

pub mod reference;
