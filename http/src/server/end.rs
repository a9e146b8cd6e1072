//! How a connection ended, and why a read failed: what the connection
//! loop, its opening and its place agree on.

use super::leases::Leases;
use super::stats::ErrorKind;

/// Why a connection ended (for counters; never shown to the peer).
#[derive(Debug)]
pub(super) enum End {
    /// Orderly: close requested, peer closed between requests, draining.
    Done,
    Idle,
    Error(ErrorKind),
    /// A 101 was relayed: tunnel to this upstream connection, which already
    /// sent these bytes past its head.
    Upgrade(Box<Upgraded>),
}

/// A connection upgraded after a relayed 101.
#[derive(Debug)]
pub(super) struct Upgraded {
    pub upstream: crate::transport::upstream::UpstreamConn,
    /// Bytes the upstream sent past its 101 head.
    pub pending: Vec<u8>,
    /// The request's leases, held for the tunnel's life.
    pub leases: Option<Leases>,
    /// The host's WebSocket message limits.
    pub websocket: Option<gapura_gate::policy::WebSocketLimits>,
    /// The host's label (for warnings).
    pub host: String,
}

/// Why a read from the client failed.
#[derive(Debug)]
pub(super) enum ReadFail {
    Timeout,
    Io,
}
