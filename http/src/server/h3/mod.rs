//! HTTP/3 on a shard: QUIC (quinn-proto, sans-IO) on the shard's own UDP
//! socket, and each request served by the same pipeline, gate and pages
//! as HTTP/1.1 and HTTP/2.
//!
//! - `cid`: connection IDs that name their shard, so that the listener's
//!   steering keeps a connection on one shard across migration.
//! - `endpoint`: the shard's QUIC endpoint and its one driving task: the
//!   connection-level gate before any handshake work, Retry, timers,
//!   datagrams in and out.
//! - `keys`: the stateless-reset key and the Retry tokens' rotating key,
//!   from the secret every shard shares.
//! - `conn`: one connection's HTTP/3 state: its control and QPACK
//!   streams, request streams split into frames, answers queued.
//! - `stream`: a request stream as the pipeline's transport.

pub mod cid;
mod conn;
mod endpoint;
mod keys;
mod stream;

pub use endpoint::serve;
