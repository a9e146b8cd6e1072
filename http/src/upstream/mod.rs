//! The upstream side of the proxy: per-shard connection pools (HTTP/1.1
//! connections, their bound and queue in `pool`, HTTP/2 connections in
//! `h2conns`), balancing,
//! passive health, the process-wide health board, and the codec for the
//! request heads Gapura writes and the response heads it reads.
//!
//! Per-shard state is keyed by each server's stable key (group name and
//! address), so pools and counters survive a reload. Nothing here is shared
//! between shards except the [`HealthBoard`], which active checks write and
//! shards read with one relaxed load per candidate server.

pub mod authcall;
pub mod h2conns;
pub mod health;
pub mod pool;
pub mod request;
pub mod response;
pub mod state;

pub use health::HealthBoard;
pub use state::Upstreams;
