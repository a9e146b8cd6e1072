//! Gapura's UDP relay: the datagram loop, the envelope checks, the session
//! table and the relay between clients and upstream datagram servers.
//!
//! It owns, per shard and relay, the sockets (one steered listening socket
//! per address, one upstream-facing socket per session), the session table
//! and the relay's decisions; it takes its policy (budgets, classes,
//! session limits, envelope keys) compiled from the gate's
//! [`UdpPolicy`](gapura_gate::udp::UdpPolicy) and pays the gate's budgets
//! before anything else.
//!
//! It must never know TOML, decide policy beyond carrying out the compiled
//! one, depend on the HTTP crate, or answer anything it dropped: every
//! malformed, oversized, unauthenticated, stale, replayed, over-budget or
//! over-capacity datagram is dropped without a reply and counted.
//!
//! Modules: `relay` (the decisions, pure, time passed in), `session` (the
//! table), `envelope` (wire format, decoder), `replay` (the keys' replay
//! windows, one for the process), `io` (the
//! monoio loop), `batch` (datagrams received and sent in batches, also
//! HTTP/3's), `stats` (the counters the
//! metrics read), `testing` (a policy for tests and benchmarks).

pub mod batch;
pub mod envelope;
pub mod io;
pub mod relay;
pub mod replay;
pub mod session;
pub mod stats;
pub mod testing;

pub use relay::{Counters, Inbound, Relay};
