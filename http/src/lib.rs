//! Gapura's HTTP layer.
//!
//! This crate owns the HTTP/1.1 codec (request heads, body framing, the
//! chunked decoder) and the connection loop that reads requests, asks the
//! gate for a verdict and writes the answer. It must never know TOML or
//! decide policy itself: every decision comes from `gapura_gate::Snapshot`.
//! Nothing reachable from a peer's bytes may panic or buffer without bound.
//!
//! Modules:
//!
//! - `codec`: the HTTP/1.1 codec, standing alone (request heads, chunked
//!   bodies, the PROXY protocol header, `Accept`); fuzzable without the gate.
//! - `server`: a shard's shared context, a connection's opening (accept
//!   checks, the TLS handshake, HTTP/2 or HTTP/1.1), HTTP/2 with its flood
//!   budgets, and the connection loop (prepare, the gate's verdict,
//!   answers, forwarding, tunnels, deferred password verification,
//!   forward-auth calls, proof of work's verify endpoint, request bodies
//!   read locally, per-shard stats).
//! - `exchange`: a request and its answer as typed parts (a head, body
//!   pieces, trailers): an HTTP/2 upstream's request head written field by
//!   field, a client's HTTP/2 stream answered as frames.
//! - `upstream`: upstream pools, balancing and health, the request head sent
//!   upstream, the response parser, and forward-auth's call and answer.
//! - `transport`: the streams a client connection runs over (plain TCP,
//!   receiving from the shard's own ring or not; TLS by rustls with the
//!   ring provider), certificates and session tickets.
//! - `clock`: the shard's coarse monotonic clock.
//! - `driver`: the one runtime builder (io_uring with the design's ring
//!   flags, the explicit epoll fallback), for the server's and the load
//!   tester's shards.
//! - `uring`: io_uring driven directly: where every ring of the project is
//!   built, the runtime's included, with the setup flags of its use (and
//!   why each has its own); the parts shared by the load tester's engine
//!   and the floor proxy of `bench/` (the provided-buffer ring of multishot
//!   receives); and a shard's own ring for the receives of its plain
//!   HTTP/1.1 connections (`[server] ring = "on"`). Named `uring`, not
//!   `ring`, apart from the `ring` crypto crate that rustls uses.
//!
//! Why one crate: its borders are already clean and layered (`codec` and
//! `clock` below everything; `uring`, `driver` and `transport` above them;
//! `upstream` above those; `server` on top; nothing imports upward, and no
//! import circle is longer than two files), so a split would change no
//! dependency. It would turn the items shared across the borders only
//! within the crate (`transport::init_bytes`, the streams' constructors,
//! the h2 stream's transport, `server::bounds`) into public API, and the
//! crates that use the lower layers (the load tester, `bench`, the fuzz
//! targets) already take only what they name: the linker drops the rest.

pub mod clock;
pub mod codec;
pub mod driver;
pub mod exchange;
pub mod server;
pub mod transport;
pub mod upstream;
pub mod uring;
