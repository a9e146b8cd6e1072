//! The server side: a shard's shared context, a connection's opening, and
//! the HTTP/1.1 connection loop that HTTP/2's streams run through too.
//!
//! Modules: `place` (a connection's place on its shard, released by its
//! guard whatever way the connection ends), `opening` (a connection from
//! its accept to its first request:
//! the checks, the TLS handshake, the choice of HTTP/2 or HTTP/1.1),
//! `accept` (the connection-level checks before any TLS handshake: a PROXY
//! header from trusted peers, the connection limits, the server's access
//! list), `h2` (HTTP/2: each stream served by the HTTP/1.1 pipeline, the
//! stream and reset budgets), `h2scan` (the watch on incoming frames below
//! the codec: the control-frame budget and the header block's timeout),
//! `conn` (the connection loop and its phases: a body read locally,
//! proxying, password checks, forward-auth's answers, proof of work's
//! verify endpoint), `prepare` (a head's decision),
//! `decided` (what the decision makes of it, written before its body),
//! `verify` (the process's password-check pool), `authcalls` (a shard's
//! forward-auth calls to providers), `tunnel` (upgraded connections),
//! `leases`, `accesslog`, `warn`, `live`, `stats`, `date`, `timing`;
//! `client` (the client
//! side's stream and buffers), `tls` (a shard's TLS configuration and the
//! handshake), `deadline` (one deadline per connection, one timer per
//! shard), `slots` (reused allocations for upstream exchanges), `fuzzing`
//! (entry points for the fuzz targets; the server never calls them);
//! `inmemory` (under test only: unit tests of the connection layer on an
//! in-memory transport with the clock passed in); `tests` (the shard's
//! own helpers under test).

mod accept;
pub mod accesslog;
mod authcalls;
mod client;
pub mod conn;
pub mod date;
mod deadline;
mod decided;
#[doc(hidden)]
pub mod fuzzing;
mod h2;
mod h2scan;
#[cfg(test)]
mod inmemory;
mod leases;
pub mod live;
mod opening;
mod place;
mod prepare;
mod slots;
pub mod stats;
#[cfg(feature = "decide-timing")]
mod timing;
pub mod tls;
mod tunnel;
pub mod verify;
mod warn;

use crate::codec::HeadBounds;
use crate::upstream::{HealthBoard, Upstreams};
use gapura_gate::chain::GateState;
use gapura_gate::client::HeaderLines;
use gapura_gate::limits::{OUTER_MAX_HEADERS, OUTER_MAX_HEAD_BYTES, URL_BYTES_BOUNDS};
use gapura_gate::Snapshot;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

pub use date::DateCache;
pub use leases::Leases;
pub use opening::{serve, Listener};
pub use stats::{Counter, ErrorKind, ShardStats};

/// Most header lines of a request head the server parses: the largest
/// header-count limit a host may set. More is 431 whatever the host says.
pub const REQUEST_LINES: usize = OUTER_MAX_HEADERS;

/// The codec's outer bounds for the server: what the largest limits a host
/// may set allow (the request line: the largest target bound, the method and
/// version beside it).
pub const HEAD_BOUNDS: HeadBounds = HeadBounds {
    max_head_bytes: OUTER_MAX_HEAD_BYTES,
    max_request_line_bytes: URL_BYTES_BOUNDS.1 as usize + 64,
};

/// Where a shard learns of newer snapshots. The runtime implements it over
/// its publishing cell; a call is one relaxed load when nothing changed.
pub trait SnapshotFeed {
    /// A snapshot newer than `generation`, if one was published.
    fn newer_than(&self, generation: u64) -> Option<Arc<Snapshot>>;
}

/// What every connection of one shard shares. Single-threaded: cells, no locks.
///
/// The snapshot is held as `Rc<Arc<_>>` on purpose: requests clone the `Rc`
/// (a plain increment) and never touch the `Arc`'s shared count, whose cache
/// line every shard would otherwise bounce.
#[allow(clippy::redundant_allocation)]
pub struct Shard {
    pub id: usize,
    feed: Box<dyn SnapshotFeed>,
    current: RefCell<Rc<Arc<Snapshot>>>,
    pub stats: Arc<ShardStats>,
    pub date: DateCache,
    draining: Cell<bool>,
    /// Connections with a request in progress (bytes of a head read, or a
    /// response not yet written).
    busy: Cell<u32>,
    open: Cell<u32>,
    /// Pools, balancer state and passive health of this shard's upstreams.
    pub upstreams: Upstreams<crate::transport::plain::Plain>,
    /// Active health results, shared by every shard.
    pub board: Arc<HealthBoard>,
    /// Request ids: a per-process prefix, the shard, a counter.
    id_prefix: u32,
    id_counter: Cell<u64>,
    /// Connections accepted, for the access log's `connection` serial.
    connection_serial: Cell<u64>,
    /// Room for a rewritten canonical path (16 KiB, allocated once).
    pub scratch: RefCell<Box<gapura_gate::path::PathScratch>>,
    /// The gate's tables (quotas, rate buckets) and counters of this shard.
    /// Decisions take it with [`Shard::gate_mut`].
    pub gate: RefCell<GateState>,
    /// Lease releases that found `gate` borrowed (`leases`): carried out by
    /// the next `gate_mut`. At most one per running request.
    deferred_releases: RefCell<Vec<leases::Release>>,
    /// This shard's access log buffer (`accesslog`).
    pub access_log: RefCell<accesslog::ShardLog>,
    /// Where refusal warnings go (the runtime's log); `None`: nowhere.
    warn: Option<fn(std::fmt::Arguments<'_>)>,
    /// The second each refusal kind last warned in, plus one (`warn`).
    warned: [Cell<u64>; warn::KINDS],
    started: monoio::time::Instant,
    /// Where password checks run (none: every check answers 429).
    pub verifier: Option<Arc<dyn verify::VerifyPool>>,
    /// Forward-auth: idle connections and calls running, per provider.
    pub(crate) auth: authcalls::AuthCalls,
    /// The TLS configuration built for the current snapshot (`tls`).
    tls: RefCell<tls::Built>,
    /// Buffers given back by connections waiting idle for their next
    /// request (the write buffer at once, the read buffer once parked),
    /// lent to the next one that reads a request: an idle connection holds
    /// no write buffer, a parked one no buffer at all. At most
    /// [`SPARE_BUFFERS`].
    spare_buffers: RefCell<Vec<Vec<u8>>>,
    /// Allocations of finished upstream exchanges, for the next ones.
    pub(crate) slots: Rc<slots::Slots>,
    /// The connections' deadlines and the one timer that watches them.
    pub(crate) deadlines: Rc<deadline::Deadlines>,
    /// The shard's own ring under its plain HTTP/1.1 connections, when it
    /// has one (`with_ring`).
    pub(crate) ring: Option<Rc<crate::ring::ShardRing>>,
}

/// Most spare buffers a shard keeps for its connections.
const SPARE_BUFFERS: usize = 256;

/// Request header lines as the gate reads them: every line of a name.
pub struct Lines<'a, 'b>(pub &'a [httparse::Header<'b>]);

impl HeaderLines for Lines<'_, '_> {
    fn lines<'x>(&'x self, name: &'x str) -> impl Iterator<Item = &'x [u8]> + Clone + 'x {
        debug_assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        self.0
            .iter()
            .filter(move |h| name_is(h.name.as_bytes(), name.as_bytes()))
            .map(|h| h.value)
    }
}

/// Whether a parsed header name is `lower`, ASCII case ignored, eight bytes
/// at a time. `lower` holds only lower-case letters, digits and `-`; the
/// name is a token (the parser refuses anything else), and the only token
/// bytes that set bit 5 into one of those are the upper-case letters, so
/// `byte | 0x20` is exact.
#[inline]
fn name_is(name: &[u8], lower: &[u8]) -> bool {
    const FOLD: u64 = 0x2020_2020_2020_2020;
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n < 8 {
        return name.iter().zip(lower).all(|(a, b)| (a | 0x20) == *b);
    }
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    let mut at = 0;
    while at + 8 < n {
        if (word(name, at) | FOLD) != word(lower, at) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes, overlapping the words read.
    (word(name, n - 8) | FOLD) == word(lower, n - 8)
}

impl Shard {
    pub fn new(
        id: usize,
        feed: Box<dyn SnapshotFeed>,
        first: Arc<Snapshot>,
        stats: Arc<ShardStats>,
        board: Arc<HealthBoard>,
        id_prefix: u32,
        mut gate: GateState,
    ) -> Shard {
        stats.snapshot_generation.set(first.generation);
        let started = monoio::time::Instant::now();
        // The gate's clock is `started.elapsed()`; proof of work's tokens
        // carry wall-clock seconds from this origin.
        gate.unix_origin_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Shard {
            id,
            feed,
            current: RefCell::new(Rc::new(first)),
            stats,
            date: DateCache::default(),
            draining: Cell::new(false),
            busy: Cell::new(0),
            open: Cell::new(0),
            upstreams: Upstreams::default(),
            board,
            id_prefix,
            id_counter: Cell::new(0),
            connection_serial: Cell::new(0),
            scratch: RefCell::new(Box::new([0u8; gapura_gate::path::MAX_PATH_BYTES])),
            gate: RefCell::new(gate),
            deferred_releases: RefCell::new(Vec::new()),
            access_log: RefCell::new(accesslog::ShardLog::default()),
            warn: None,
            warned: Default::default(),
            started,
            verifier: None,
            auth: authcalls::AuthCalls::default(),
            tls: RefCell::new(None),
            spare_buffers: RefCell::new(Vec::new()),
            slots: Rc::default(),
            deadlines: Rc::default(),
            ring: None,
        }
    }

    /// Sends a throttled line per refusal kind to `warn` (at most one per
    /// kind per second on this shard; `warn`).
    pub fn with_warnings(mut self, warn: fn(std::fmt::Arguments<'_>)) -> Shard {
        self.warn = Some(warn);
        self
    }

    /// Sends the access log's buffers to `tx` (the runtime's writer).
    pub fn with_access_log(self, tx: std::sync::mpsc::SyncSender<Vec<u8>>) -> Shard {
        *self.access_log.borrow_mut() = accesslog::ShardLog::new(tx);
        self
    }

    /// Sets the verification pool (at start).
    /// Runs the plain HTTP/1.1 connections on `ring` (its driver spawned
    /// by the caller: [`crate::ring::ShardRing::drive`]).
    pub fn with_ring(mut self, ring: Option<Rc<crate::ring::ShardRing>>) -> Shard {
        self.ring = ring;
        self
    }

    /// The shard's own ring, when it has one.
    pub fn ring(&self) -> Option<&Rc<crate::ring::ShardRing>> {
        self.ring.as_ref()
    }

    pub fn with_verifier(mut self, pool: Arc<dyn verify::VerifyPool>) -> Shard {
        self.verifier = Some(pool);
        self
    }

    /// The next connection's serial on this shard (the access log's
    /// `connection`: the shard and this number name one connection, and
    /// every stream of an HTTP/2 connection shares it).
    pub(crate) fn next_connection(&self) -> u64 {
        let n = self.connection_serial.get() + 1;
        self.connection_serial.set(n);
        n
    }

    /// A fresh request id as 24 hex digits, for pages. No allocation.
    pub fn request_id(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let n = self.id_counter.get().wrapping_add(1);
        self.id_counter.set(n);
        let parts = [
            (u64::from(self.id_prefix), 8usize),
            (self.id as u64 & 0xffff, 4),
            (n & 0xffff_ffff_ffff, 12),
        ];
        let mut at = 0;
        for (v, digits) in parts {
            for i in (0..digits).rev() {
                out[at] = HEX[((v >> (i * 4)) & 0xf) as usize];
                at += 1;
            }
        }
        out
    }

    /// A buffer for a connection that reads a request: a spare one, or a
    /// new one of 4 KiB.
    pub(crate) fn lend_buf(&self) -> Vec<u8> {
        self.spare_buffers
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(client::WRITE_BUF_BYTES))
    }

    /// Takes back an idle connection's buffer (emptied); one that grew past
    /// 16 KiB (a buffer an idle connection would shrink), or one past the
    /// pool's bound, is freed.
    pub(crate) fn return_buf(&self, mut buf: Vec<u8>) {
        let mut spare = self.spare_buffers.borrow_mut();
        if buf.capacity() == 0
            || buf.capacity() > conn::SHRINK_ABOVE_BYTES
            || spare.len() >= SPARE_BUFFERS
        {
            return;
        }
        buf.clear();
        spare.push(buf);
    }

    /// Milliseconds since the shard started: the gate's clock.
    #[inline]
    pub fn now_ms(&self) -> u64 {
        #[cfg(not(test))]
        let since = self.started.elapsed();
        // Tests pass time in: the gate's clock moves with theirs.
        #[cfg(test)]
        let since = crate::clock::precise_now().saturating_duration_since(self.started);
        since.as_millis() as u64
    }

    /// Copies the gate's counters to the shared stats (the ticker calls it).
    pub fn publish_gate_counters(&self) {
        let gate = self.gate.borrow();
        let q = &gate.quota.counters;
        self.stats.quota_admitted.set(q.admitted);
        for (i, c) in self.stats.quota_refused.iter().enumerate() {
            c.set(q.refused[i]);
        }
        for (i, c) in self.stats.quota_untracked.iter().enumerate() {
            c.set(q.untracked[i]);
        }
        let leases = gate.quota.leases();
        self.stats.leases_active.set(u64::from(leases.active()));
        self.stats.lease_keys.set(u64::from(leases.tracked_keys()));
        let cc = gate.connection_counters;
        self.stats
            .connection_limit_concurrent
            .set(cc.refused_concurrent);
        self.stats.connection_limit_rate.set(cc.refused_rate);
        self.stats.connection_limit_shadow.set(cc.shadow_hits);
        self.stats.quota_shadow.set(gate.counters.quota_shadow);
        self.stats.quota_exempt.set(gate.counters.quota_exempt);
        self.stats.rate_unbound.set(gate.counters.rate_unbound);
        self.stats
            .rate_unbound_refused
            .set(gate.counters.rate_unbound_refused);
        self.stats
            .connection_rate_refused
            .set(gate.counters.connection_rate_refused);
        fn zip<C: Copy>(names: &[String], v: &[C]) -> Vec<(String, C)> {
            names.iter().cloned().zip(v.iter().copied()).collect()
        }
        let blocks = stats::BlockStats {
            rule_sets: zip(gate.rule_set_names(), &gate.rule_counters),
            access_lists: zip(gate.access_list_names(), &gate.access_counters),
            rate_limits: zip(gate.rate_limit_names(), &gate.rate_counters),
            maintenance: gate
                .host_names()
                .iter()
                .cloned()
                .zip(gate.maintenance_counters.iter().copied())
                .filter(|(_, c)| *c != Default::default())
                .collect(),
            robots_served: gate.counters.robots_served,
            auth: zip(gate.auth.names(), &gate.auth.counters),
            pow: gate.counters.pow,
            latency: gate
                .host_names()
                .iter()
                .cloned()
                .zip(gate.latency.iter().copied())
                .filter(|(_, h)| h.count > 0)
                .collect(),
        };
        if let Ok(mut b) = self.stats.blocks.lock() {
            *b = blocks;
        }
    }

    /// Writes a new request id: 24 hex digits, unique per process run
    /// (prefix), shard and request. No allocation.
    pub fn write_request_id(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.request_id());
    }

    /// The snapshot a new request starts on: the newest published one.
    /// One relaxed load when nothing changed, no atomic increment.
    #[inline]
    #[allow(clippy::redundant_allocation)]
    pub fn snapshot(&self) -> Rc<Arc<Snapshot>> {
        let generation = self.current.borrow().generation;
        if let Some(newer) = self.feed.newer_than(generation) {
            self.stats.snapshot_generation.set(newer.generation);
            *self.current.borrow_mut() = Rc::new(newer);
        }
        self.current.borrow().clone()
    }

    pub fn start_draining(&self) {
        self.draining.set(true);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.get()
    }

    pub fn busy_connections(&self) -> u32 {
        self.busy.get()
    }

    pub fn open_connections(&self) -> u32 {
        self.open.get()
    }

    fn add_busy(&self, delta: i32) {
        self.busy.set(self.busy.get().wrapping_add_signed(delta));
    }
}

#[cfg(test)]
mod tests {
    use super::name_is;
    use proptest::prelude::*;

    const NAMES: [&str; 8] = [
        "user-agent",
        "x-forwarded-for",
        "forwarded",
        "authorization",
        "cf-connecting-ip",
        "cf-ipcountry",
        "cf-ray",
        "te",
    ];

    #[test]
    fn header_names_match_in_any_case_only_whole() {
        assert!(name_is(b"User-Agent", b"user-agent"));
        assert!(name_is(b"X-FORWARDED-FOR", b"x-forwarded-for"));
        assert!(name_is(b"cf-ray", b"cf-ray"));
        assert!(!name_is(b"User-Agents", b"user-agent"));
        assert!(!name_is(b"User_Agent", b"user-agent"));
        assert!(!name_is(b"X-Forwarded-Fox", b"x-forwarded-for"));
        assert!(!name_is(b"Y-Forwarded-For", b"x-forwarded-for"));
        assert!(!name_is(b"", b"te"));
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0003),
            ..ProptestConfig::default()
        })]
        /// Over every token name the parser can hand on, the folded
        /// comparison is `eq_ignore_ascii_case`.
        #[test]
        fn agrees_with_ignoring_case(
            name in "[-!#$%&'*+.^_`|~0-9A-Za-z]{0,20}",
            pick in 0usize..8,
            case in any::<u32>(),
        ) {
            let lower = NAMES[pick];
            prop_assert_eq!(
                name_is(name.as_bytes(), lower.as_bytes()),
                name.eq_ignore_ascii_case(lower)
            );
            // The name itself in a random mix of cases.
            let mixed: String = lower
                .chars()
                .enumerate()
                .map(|(i, c)| if case >> (i % 32) & 1 == 1 { c.to_ascii_uppercase() } else { c })
                .collect();
            prop_assert!(name_is(mixed.as_bytes(), lower.as_bytes()));
        }
    }
}
