//! Per-shard counters, written by the shard's one thread and read by the
//! admin listener.
//!
//! A [`Counter`] is an `AtomicU64` that only its shard writes, with a relaxed
//! load and store (a plain `mov` on x86, no locked instruction); readers on
//! other threads see a recent value. Each shard's block is cache-line aligned
//! so shards never share a line.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one. Only the owning shard calls this.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Kinds of connection-ending errors, for `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed or ambiguous request: 400.
    BadRequest = 0,
    /// A request limit refused the request: 413, 414 or 431.
    Limit,
    /// The head did not arrive within the header timeout.
    HeaderTimeout,
    /// A body read stalled past the body timeout.
    BodyTimeout,
    /// A write stalled past the write timeout.
    WriteTimeout,
    /// Read or write failed (reset, broken pipe).
    Io,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::BadRequest,
        ErrorKind::Limit,
        ErrorKind::HeaderTimeout,
        ErrorKind::BodyTimeout,
        ErrorKind::WriteTimeout,
        ErrorKind::Io,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Limit => "limit",
            ErrorKind::HeaderTimeout => "header_timeout",
            ErrorKind::BodyTimeout => "body_timeout",
            ErrorKind::WriteTimeout => "write_timeout",
            ErrorKind::Io => "io",
        }
    }
}

/// One shard's counters.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct ShardStats {
    pub connections_accepted: Counter,
    pub connections_closed: Counter,
    /// Closed at accept because the shard was at its connection limit.
    pub connections_refused: Counter,
    /// Accepts the kernel failed (out of file descriptors or memory).
    pub accept_errors: Counter,
    /// Connections accepted and closed at once because the process was out
    /// of descriptors (a reserve descriptor makes room for the accept).
    pub accept_refused_no_fd: Counter,
    /// Idle connections that parked (gave their read buffer back) and
    /// that woke or ended since.
    pub parks: Counter,
    pub unparks: Counter,
    /// Keep-alive connections closed after the idle timeout.
    pub idle_timeouts: Counter,
    /// The shard's own ring (`[server] ring = "on"`), copied from it once
    /// a second: receives armed, receives that found no provided buffer,
    /// receives stopped at a connection's cap.
    pub ring_arms: Counter,
    pub ring_starved: Counter,
    pub ring_capped: Counter,
    pub requests: Counter,
    /// Responses by class: index 0 is 1xx, 4 is 5xx.
    pub responses: [Counter; 5],
    pub errors: [Counter; 6],
    /// Upstream exchanges that failed (connect, timeout, reset, malformed).
    pub upstream_failures: Counter,
    /// Idle pooled upstream connections (sampled each second).
    pub upstream_idle: Counter,
    /// Connections switched to a tunnel after 101.
    pub upgrades: Counter,
    /// WebSocket messages dropped over their host's message rate or size.
    pub websocket_dropped: Counter,
    /// WebSocket tunnels closed over a limit (1008 or 1009).
    pub websocket_closed: Counter,
    /// Requests over their connection's request rate (429, then closed).
    pub connection_rate_refused: Counter,
    /// Access log lines written into the shard's buffer.
    pub access_log_lines: Counter,
    /// Access log lines dropped (the writer's queue or the buffer full).
    pub access_log_dropped: Counter,
    /// Requests the quota step admitted (budgets, leases, rate).
    pub quota_admitted: Counter,
    /// Quota refusals (429) by level, in `gapura_gate::quota::Level` order.
    pub quota_refused: [Counter; gapura_gate::quota::Level::COUNT],
    /// Of those, refusals that failed closed because a table was at its
    /// ceiling (tracked keys, lease records), by level.
    pub quota_untracked: [Counter; gapura_gate::quota::Level::COUNT],
    /// Requests holding leases now (a gauge).
    pub leases_active: Counter,
    /// Source keys with a running request now (a gauge).
    pub lease_keys: Counter,
    /// Connections refused at accept by `[quota.connections]`, by kind.
    pub connection_limit_concurrent: Counter,
    pub connection_limit_rate: Counter,
    /// Connections a shadowed `[quota.connections]` would have refused.
    pub connection_limit_shadow: Counter,
    /// Quota refusals let through by shadow mode.
    pub quota_shadow: Counter,
    /// Requests exempt from quotas (`robots.txt`).
    pub quota_exempt: Counter,
    /// Rate limits without a bucket slot now (each fails closed).
    pub rate_unbound: Counter,
    /// Requests refused because their rate limit had no bucket slot.
    pub rate_unbound_refused: Counter,
    /// Requests closed without an answer by a `drop` rule or list.
    pub gate_drops: Counter,
    /// Connections closed at accept by the server's access list.
    pub accept_drops: Counter,
    /// Socket writes of responses (pipelined answers ready together share one).
    pub writes: Counter,
    /// Per-list and per-set counters, copied by the shard's ticker once a
    /// second (the lock is taken by the ticker and the admin thread only).
    pub blocks: std::sync::Mutex<BlockStats>,
    /// The snapshot generation this shard serves.
    pub snapshot_generation: Counter,
    /// TLS handshakes completed, of which over TLS 1.2 and resumed.
    pub tls_handshakes: Counter,
    pub tls_12: Counter,
    pub tls_resumed: Counter,
    /// Handshakes whose SNI name no certificate claims (served the
    /// default), and those without SNI.
    pub tls_sni_default: Counter,
    pub tls_no_sni: Counter,
    /// Failed handshakes by `HandshakeFail` reason.
    pub tls_failures: [Counter; crate::transport::tls::HandshakeFail::COUNT],
    /// Failed handshakes with upstreams, by reason.
    pub upstream_tls_failures: [Counter; crate::transport::tls::HandshakeFail::COUNT],
    /// HTTP/2 connections and streams served.
    pub h2_connections: Counter,
    pub h2_streams: Counter,
    /// Streams the client reset, or that ended in a stream error.
    pub h2_resets: Counter,
    /// Connections closed with GOAWAY `ENHANCE_YOUR_CALM` (the reset
    /// budget, or h2's own bounds on reset streams).
    pub h2_calm: Counter,
    /// Connections over their budget of SETTINGS, PING, PRIORITY and empty
    /// DATA frames.
    pub h2_floods: Counter,
    /// Connections that ended in a protocol error (a bad preface,
    /// SETTINGS, frame or header block).
    pub h2_errors: Counter,
    /// HTTP/3 (QUIC) connections accepted.
    pub h3_connections: Counter,
    /// HTTP/3 requests, each through the gate.
    pub h3_streams: Counter,
    /// New QUIC connections asked to prove their address (Retry).
    pub h3_retries: Counter,
    /// Handshakes in progress closed to make room for a new one.
    pub h3_handshakes_evicted: Counter,
    /// HTTP/3 request streams refused before a task took them (malformed,
    /// too large, cut short) or reset by the client.
    pub h3_refused_streams: Counter,
    /// HTTP/3 requests that arrived in 0-RTT data: served (safe methods),
    /// and answered 425 Too Early (the rest).
    pub h3_early_requests: Counter,
    pub h3_early_refused: Counter,
}

impl ShardStats {
    #[inline]
    pub fn response(&self, status: u16) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        self.responses[class].inc();
    }

    #[inline]
    pub fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].inc();
    }

    /// Counts `n` ends of one kind.
    pub fn error_n(&self, kind: ErrorKind, n: u64) {
        self.errors[kind as usize].add(n);
    }

    #[inline]
    pub fn tls_failure(&self, why: crate::transport::tls::HandshakeFail) {
        self.tls_failures[why as usize].inc();
    }

    pub fn open_connections(&self) -> u64 {
        self.connections_accepted
            .get()
            .saturating_sub(self.connections_closed.get())
    }

    /// Idle connections parked now, holding no buffer.
    pub fn parked_connections(&self) -> u64 {
        self.parks.get().saturating_sub(self.unparks.get())
    }
}

/// Counters of named blocks, keyed by the names in the profile.
#[derive(Clone, Debug, Default)]
pub struct BlockStats {
    pub rule_sets: Vec<(String, gapura_gate::ruleset::RuleSetCounters)>,
    pub access_lists: Vec<(String, gapura_gate::chain::AccessCounters)>,
    pub rate_limits: Vec<(String, gapura_gate::chain::RateLimitCounters)>,
    pub maintenance: Vec<(String, gapura_gate::maintenance::MaintenanceCounters)>,
    pub robots_served: u64,
    /// Proof of work, every host.
    pub pow: gapura_gate::pow::PowCounters,
    /// Forward-auth counters by provider name.
    pub auth: Vec<(String, gapura_gate::auth::AuthCounters)>,
    /// Answer latency by host label (hosts with answers only).
    pub latency: Vec<(String, gapura_gate::latency::Histogram)>,
    /// HTTP/1.1 upstream pools by group name (`upstream::pool`).
    pub upstreams: Vec<(String, crate::upstream::pool::PoolCounts)>,
}
