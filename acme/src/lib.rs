//! Gapura's ACME client: certificates obtained and renewed from any RFC
//! 8555 server, on a thread of its own.
//!
//! This crate owns the conversation with the certificate authority and the
//! state directory. `jws` signs requests with the account key, `transport`
//! carries them over HTTPS, `client` keeps the nonces and the account,
//! `order` orders one certificate (HTTP-01 or TLS-ALPN-01 answers handed to
//! the runtime to make live), `store` keeps the account key and the
//! certificates on disk, `validity` reads a certificate's dates,
//! `schedule` says when to renew and how long to wait after a failure,
//! `ari` reads the authority's renewal windows (RFC 9773),
//! `manager` is the thread that runs it all and tells the runtime what
//! changed, and, with a fleet, `fleet` (the engine's interface, sealing,
//! records) and `fleetsync` (the thread's turns with the fleet) make one
//! node order each certificate and every node serve it; `ondemand` orders
//! certificates for names seen in handshakes that the operator's `ask`
//! endpoint allows, under `demand`'s rules and bounds.
//!
//! It must never run on a shard or be waited on by one, never decide a
//! request, and never write a key where anyone but the owner can read it.

pub mod ari;
pub mod client;
pub mod demand;
pub mod fleet;
mod fleetsync;
pub mod jws;
pub mod manager;
mod ondemand;
pub mod order;
pub mod schedule;
pub mod store;
pub mod transport;
pub mod validity;

pub use demand::OnDemand;
pub use fleet::{Fleet, FleetState, SealKey};
pub use manager::{Event, Manager, Settings, Shared, Status};
pub use order::{AlpnCert, Answers, Kind};
