//! The server side: a shard's shared context, a connection's opening, and
//! the HTTP/1.1 connection loop that HTTP/2's streams run through too.
//!
//! Modules: `shard` (what every connection of one shard shares, and where
//! leases and places are given back), `bounds` (the head's outer bounds and
//! its lines as the gate reads them), `end` (how a connection ended),
//! `place` (a connection's place on its shard, released by its
//! guard whatever way the connection ends), `opening` (a connection from
//! its accept to its first request: the checks, the TLS handshake, the
//! choice of HTTP/2 or HTTP/1.1),
//! `accept` (the connection-level checks before any TLS handshake: a PROXY
//! header from trusted peers, the connection limits, the server's access
//! list), `h2` (HTTP/2: each stream served by the HTTP/1.1 pipeline, the
//! stream and reset budgets), `h2scan` (the watch on incoming frames below
//! the codec: the control-frame budget and the header block's timeout),
//! `h3` (HTTP/3: a shard's QUIC endpoint, its connections, a request
//! stream's side of the exchange), `muxstream` (a stream of an HTTP/2 or
//! HTTP/3 connection as the transport of its request: the head read
//! from its fields, the answer back into frames), `grpc` (a gRPC call's
//! refusal as a trailers-only answer with its gRPC status),
//! `conn` (the connection loop and its phases: a body read locally,
//! proxying, password checks, forward-auth's answers, proof of work's
//! verify endpoint), `prepare` (a head's decision),
//! `decided` (what the decision makes of it, written before its body),
//! `put` (answer bytes appended with one capacity check a part),
//! `verify` (the process's password-check pool and each shard's lock-free
//! line in front of it), `authcalls` (a shard's
//! forward-auth calls to providers), `tunnel` (upgraded connections),
//! `leases`, `accesslog`, `warn`, `live`, `stats`, `date`, `timing`;
//! `client` (the client side's stream and buffers), `tls` (the rustls
//! configuration built from a snapshot and the certificate picked by SNI),
//! `deadline` (one deadline per connection, one timer per shard), `slots`
//! (reused allocations for upstream exchanges), `fuzzing` (entry points
//! for the fuzz targets; the server never calls them); `inmemory` (under
//! test only: unit tests of the connection layer on an in-memory transport
//! with the clock passed in).

mod accept;
pub mod accesslog;
mod authcalls;
pub(crate) mod bounds;
mod client;
pub mod conn;
pub mod date;
mod deadline;
mod decided;
mod end;
#[cfg(feature = "test-support")]
pub mod fuzzing;
mod grpc;
mod h2;
mod h2scan;
pub mod h3;
#[cfg(test)]
mod inmemory;
mod leases;
pub mod live;
mod muxstream;
mod opening;
mod place;
mod prepare;
mod put;
mod shard;
mod slots;
pub mod stats;
#[cfg(feature = "decide-timing")]
mod timing;
pub mod tls;
mod tunnel;
pub mod verify;
mod warn;

pub use bounds::{Lines, HEAD_BOUNDS, REQUEST_LINES};
pub use date::DateCache;
pub use leases::Leases;
pub use opening::{serve, Listener};
pub use shard::{Shard, SnapshotFeed};
pub use stats::{Counter, ErrorKind, ShardStats};
