//! The bodies of Gapura's fuzz targets: each takes arbitrary bytes, runs
//! them through one production parser (or decoder, or compiler) and checks
//! what must hold of the answer, panicking when it does not. The cargo-fuzz
//! project in `fuzz/libfuzzer/` calls these from its targets;
//! `tests/replay.rs` runs every checked-in corpus through them in the
//! ordinary test suite.
//!
//! This crate must never change what it tests: it calls the parsers as the
//! server calls them, and never runs in the server.
//!
//! Modules, one per part of the server the targets reach:
//!
//! - `framing`: HTTP/1.1 framing: the request head parser, the chunked
//!   decoder and the upstream response parser.
//! - `front`: the fronts a client speaks to first: HTTP/2 (frames through
//!   the h2 server and the frame watch) and TLS (records through rustls
//!   with the production configuration and certificate choice).
//! - `gate`: the gate's parsers of peer bytes: the canonical path, the
//!   PROXY protocol header and Basic credentials.
//! - `lanes`: the gate's lanes against its whole chain, for profiles and
//!   requests made from the input.
//! - `profile`: the profile compiler, TOML text to a snapshot or placed
//!   errors.
//! - `udp`: the UDP relay's decision on each datagram, envelope included.
//! - `websocket`: a tunnel's WebSocket frame scanner, whole and in pieces.

pub mod framing;
pub mod front;
pub mod gate;
pub mod lanes;
pub mod profile;
pub mod udp;
pub mod websocket;

/// A target's body.
pub type Body = fn(&[u8]);

/// Every target: its name (the corpus folder under `fuzz/corpus/`) and body.
pub const TARGETS: &[(&str, Body)] = &[
    ("request_head", framing::request_head),
    ("chunked", framing::chunked),
    ("response_head", framing::response_head),
    ("canonical_path", gate::canonical_path),
    ("proxy_protocol", gate::proxy_protocol),
    ("basic_auth", gate::basic_auth),
    ("profile", profile::profile),
    ("udp_envelope", udp::udp_envelope),
    ("h2_front", front::h2_front),
    ("tls_front", front::tls_front),
    ("lanes", lanes::lanes),
    ("websocket", websocket::websocket),
];
