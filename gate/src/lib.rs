//! The gate: Gapura's policy engine.
//!
//! This crate owns the immutable, compiled form of a profile (the [`Snapshot`]),
//! the decision a request gets from it ([`Verdict`]), and the precomputed bytes
//! of every fixed answer (error pages, `respond` hosts, redirects).
//!
//! It must never do I/O, read a clock, be async, or allocate on the decision
//! path: time and request facts are passed in, answers are written into a
//! sink the caller owns (`sink`: HTTP/1.1 bytes, or parts for a protocol
//! that frames them itself). Allocation happens only when a snapshot is built.
//! It knows nothing of the profile's text: its errors are enums, which the
//! config crate maps to codes and positions.
//!
//! Modules:
//!
//! - `chain`: the request chain, one named step per block, in the order of
//!   docs/gate.md; the shard's mutable gate state; explain's trace.
//! - `snapshot`: the compiled profile and the verdict it gives.
//! - `policy`: what the chain's blocks are told (rate pairs, block refs,
//!   host extras).
//! - `host`: host matching and the fixed-answer host kinds.
//! - `hash`: the unkeyed hashers (stable identities, the host table,
//!   pre-hashed keys).
//! - `upstream`: upstream groups and proxy routes as compiled.
//! - `upstreamtls`: TLS to a server Gapura calls (upstreams and forward-auth
//!   providers alike).
//! - `udp`: UDP relays' policy, drop reasons and the budgets a datagram
//!   pays before it is decoded.
//! - `client`: who the client is (trusted proxies, Cloudflare, PROXY
//!   sources).
//! - `cidr`: CIDR sets answered in O(log n).
//! - `country`: countries, country lists and how they combine with address
//!   rules.
//! - `access`: access lists (address, country, basic auth, the
//!   verification cache and line).
//! - `ruleset`: rule sets on path, method and user agent; `glob`, the
//!   linear-time globs they use; `pathmatch`, exact and prefix patterns.
//! - `path`: the canonical matching path.
//! - `quota`: budgets, leases, rate buckets and their tables.
//! - `acme`: the ACME challenges in flight (HTTP-01 answers, TLS-ALPN-01
//!   certificates), answered before the chain.
//! - `limits`: request limits (body, header lines and bytes, target).
//! - `mode`: enforce or shadow, carried out in one place.
//! - `token`: the HTTP token-character table.
//! - `testing`: the deterministic generator of tests and benchmarks (feature
//!   `test-support`, never in a release build of the server).
//! - `auth`: forward-auth providers and their remembered allows.
//! - `pow`: proof of work's challenge and cookie (stateless, HMAC-bound to
//!   the host and the client).
//! - `robots`: managed robots.txt.
//! - `maintenance`: maintenance mode.
//! - `latency`: answer latency histograms per host.
//! - `tls`: what TLS listeners serve (certificates as DER, names, the
//!   ticket secret) and the HTTPS redirect's answer.
//! - `https`: a host's HTTPS policy (redirect, HSTS).
//! - `pages`: built-in error pages; `custom_pages`: an operator's pages;
//!   `answer`: precomputed answers and the one function that writes them;
//!   `sink`: where every answer is written, as HTTP/1.1 bytes or as parts.

#![forbid(unsafe_code)]

pub mod access;
pub mod acme;
pub mod answer;
pub mod auth;
pub mod chain;
pub mod cidr;
pub mod client;
pub mod country;
pub mod custom_pages;
pub mod glob;
pub mod hash;
pub mod host;
pub mod https;
pub mod latency;
pub mod limits;
pub mod maintenance;
pub mod mode;
pub mod pages;
pub mod path;
pub mod pathmatch;
pub mod policy;
pub mod pow;
pub mod quota;
pub mod robots;
pub mod ruleset;
pub mod sink;
pub mod snapshot;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod tls;
pub mod token;
pub mod udp;
pub mod upstream;
pub mod upstreamtls;

pub use answer::{Answer, WriteCtx};
pub use host::{HostAction, HostId, HostTable, Redirect};
pub use limits::{LimitRefusal, RequestLimits};
pub use pages::{ErrorPages, ErrorStatus, UpstreamWhy};
pub use snapshot::{ServerSettings, Snapshot, Verdict};
pub use upstream::{ProxyHost, Route, UpstreamGroup, UpstreamServer};
