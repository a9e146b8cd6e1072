//! The gate: Gapura's policy engine.
//!
//! This crate owns the immutable, compiled form of a profile (the [`Snapshot`]),
//! the decision a request gets from it ([`Verdict`]), and the precomputed bytes
//! of every fixed answer (error pages, `respond` hosts, redirects).
//!
//! It must never do I/O, read a clock, be async, or allocate on the decision
//! path: time and request facts are passed in, answers are written into a
//! buffer the caller owns. Allocation happens only when a snapshot is built.

#![forbid(unsafe_code)]

pub mod access;
pub mod answer;
pub mod chain;
pub mod cidr;
pub mod client;
pub mod country;
pub mod custom_pages;
pub mod glob;
pub mod host;
pub mod limits;
pub mod maintenance;
pub mod mode;
pub mod pages;
pub mod path;
pub mod pathmatch;
pub mod policy;
pub mod quota;
pub mod robots;
pub mod ruleset;
pub mod snapshot;
pub mod upstream;

pub use answer::{Answer, WriteCtx};
pub use host::{HostAction, HostId, HostTable, Redirect};
pub use limits::{LimitRefusal, RequestLimits};
pub use pages::{ErrorPages, ErrorStatus};
pub use snapshot::{ServerSettings, Snapshot, Verdict};
pub use upstream::{ProxyHost, Route, UpstreamGroup, UpstreamServer};
