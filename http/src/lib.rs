//! Gapura's HTTP layer.
//!
//! This crate owns the HTTP/1.1 codec (request heads, body framing, the
//! chunked decoder) and the connection loop that reads requests, asks the
//! gate for a verdict and writes the answer. It must never know TOML or
//! decide policy itself: every decision comes from `gapura_gate::Snapshot`.
//! Nothing reachable from a peer's bytes may panic or buffer without bound.

pub mod clock;
pub mod codec;
pub mod server;
pub mod upstream;
