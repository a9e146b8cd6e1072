//! A shard's shared context: what every connection of one shard shares
//! (the snapshot, counters, the gate's tables, pools, spare buffers), and
//! where leases and connection places are given back to the gate.

use super::accesslog::{LogRecord, ShardLog};
use super::authcalls::AuthCalls;
use super::date::DateCache;
use super::stats::{self, ShardStats};
use super::{deadline, slots, tls, verify};
use crate::upstream::pool::PoolCounts;
use crate::upstream::{HealthBoard, Upstreams};
use gapura_gate::chain::{Block, ConnectionToken, GateState};
use gapura_gate::quota::QuotaTicket;
use gapura_gate::snapshot::AccessLogSettings;
use gapura_gate::upstream::{UpstreamProtocol, UpstreamTls};
use gapura_gate::Snapshot;
use std::cell::{Cell, RefCell, RefMut};
use std::rc::Rc;
use std::sync::Arc;

/// A connection's write buffer as first allocated.
pub(super) const WRITE_BUF_BYTES: usize = 4 * 1024;
/// A buffer grown past this is given back once the connection is idle.
pub(super) const SHRINK_ABOVE_BYTES: usize = 16 * 1024;
/// Refusal kinds a shard paces its warnings for (`warn`): the chain's
/// steps, the WebSocket message limits, then HTTP/2 connections ended for
/// abuse.
pub(super) const WARN_KINDS: usize = Block::COUNT + 2;

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
    /// The snapshot it serves, and where newer ones come from.
    served: Served,
    pub stats: Arc<ShardStats>,
    pub date: DateCache,
    /// Its connections: their counts, the drain, spare buffers, deadlines
    /// and the shard's own ring.
    pub(crate) conns: ShardConns,
    /// Its side toward upstreams: pools, HTTP/2 connections, health,
    /// forward-auth calls, TLS client configurations.
    pub upstream: ShardUpstreams,
    /// Request ids and connection serials.
    serials: Serials,
    /// Room for a rewritten canonical path (16 KiB, allocated once).
    pub scratch: RefCell<Box<gapura_gate::path::PathScratch>>,
    /// The gate's tables (quotas, rate buckets) and counters of this shard.
    /// Decisions take it with [`Shard::gate_mut`].
    pub gate: RefCell<GateState>,
    /// Lease releases that found `gate` borrowed (`leases`): carried out by
    /// the next `gate_mut`. At most one per running request.
    pub(super) deferred_releases: RefCell<Vec<Release>>,
    /// `deferred_releases` holds one (checked on every borrow of the gate
    /// state without borrowing the list).
    deferred_any: Cell<bool>,
    /// What it writes: the access log, refusal warnings.
    pub(crate) logs: ShardLogs,
    /// Where password checks run (none: every check answers 429).
    pub verifier: Option<Rc<dyn verify::VerifyPool>>,
    /// The TLS configuration built for the current snapshot (`tls`).
    pub(super) tls: RefCell<tls::Built>,
    /// On-demand certificates: where a handshake's unclaimed SNI name is
    /// handed (without waiting) to the ACME thread, which asks and orders.
    pub(super) on_demand: Option<std::sync::mpsc::SyncSender<String>>,
}

/// The snapshot a shard serves.
#[allow(clippy::redundant_allocation)]
struct Served {
    feed: Box<dyn SnapshotFeed>,
    current: RefCell<Rc<Arc<Snapshot>>>,
    /// The current snapshot has a host with a fixed answer on a lane
    /// (`lane_answers`): a hint for the connections' lanes (`conn::lane`),
    /// which check the snapshot itself before they answer.
    lane_hint: Cell<bool>,
}

/// A shard's connections.
pub(crate) struct ShardConns {
    draining: Cell<bool>,
    /// Connections with a request in progress (bytes of a head read, or a
    /// response not yet written).
    pub(super) busy: Cell<u32>,
    pub(super) open: Cell<u32>,
    /// Buffers given back by connections waiting idle for their next
    /// request (the write buffer at once, the read buffer once parked),
    /// lent to the next one that reads a request: an idle connection holds
    /// no write buffer, a parked one no buffer at all. At most
    /// [`SPARE_BUFFERS`].
    spare_buffers: RefCell<Vec<Vec<u8>>>,
    /// The connections' deadlines and the one timer that watches them.
    pub(crate) deadlines: Rc<deadline::Deadlines>,
    /// The shard's own ring under its plain HTTP/1.1 connections, when it
    /// has one (`with_ring`).
    pub(crate) ring: Option<Rc<crate::uring::ShardRing>>,
    started: monoio::time::Instant,
}

/// A shard's side toward its upstreams.
pub struct ShardUpstreams {
    /// Pools, balancer state and passive health of this shard's upstreams.
    pub pools: Upstreams<crate::transport::upstream::UpstreamConn>,
    /// HTTP/2 connections to upstream servers (`protocol = "h2"`/`"auto"`).
    pub h2: crate::upstream::h2conns::H2Conns,
    /// Active health results, shared by every shard.
    pub board: Arc<HealthBoard>,
    /// Forward-auth: idle connections and calls running, per provider.
    pub(crate) auth: AuthCalls,
    /// Allocations of finished upstream exchanges, for the next ones.
    pub(crate) slots: Rc<slots::Slots>,
    /// The rustls client configurations built for upstream groups' `tls`
    /// (by the settings' identity; `None`: it could not be built).
    tls: RefCell<UpstreamTlsConfigs>,
}

impl ShardUpstreams {
    /// The server of `group` the balancer picks, skipping those in `tried`
    /// and those health has taken out.
    #[inline]
    pub fn pick(
        &self,
        group: &gapura_gate::upstream::UpstreamGroup,
        tried: u64,
        now_ms: u64,
    ) -> Option<usize> {
        self.pools.pick(group, tried, &self.board, now_ms)
    }
}

/// Request ids: a per-process prefix, the shard, a counter; and the
/// connections' serials.
struct Serials {
    id_prefix: u32,
    id_counter: Cell<u64>,
    /// Connections accepted, for the access log's `connection` serial.
    connection: Cell<u64>,
}

/// What a shard writes.
pub(crate) struct ShardLogs {
    /// This shard's access log buffer (`accesslog`).
    pub(crate) access: RefCell<ShardLog>,
    /// Where refusal warnings go (the runtime's log); `None`: nowhere.
    pub(super) warn: Option<fn(std::fmt::Arguments<'_>)>,
    /// The second each refusal kind last warned in, plus one (`warn`).
    pub(super) warned: [Cell<u64>; WARN_KINDS],
    /// The second each (upstream, server, reason) last warned in, plus one
    /// (`warn::warn_upstream`); at most [`UPSTREAM_WARN_KEYS`] kept.
    pub(super) upstream_warned: RefCell<std::collections::HashMap<u64, u64>>,
}

/// Most (upstream, server, reason) triples a shard paces warnings for;
/// past it the table starts over.
pub(super) const UPSTREAM_WARN_KEYS: usize = 1024;

/// Upstream groups' TLS settings and the client configuration built for
/// each.
type UpstreamTlsConfigs = Vec<(
    Arc<UpstreamTls>,
    UpstreamProtocol,
    Option<Arc<rustls::ClientConfig>>,
)>;

/// Most upstream TLS configurations a shard keeps (reloads leave old ones
/// behind; past this the list starts over).
const UPSTREAM_TLS_CONFIGS: usize = 64;

/// Most spare buffers a shard keeps for its connections.
const SPARE_BUFFERS: usize = 256;

/// Whether a host of `snap` may be answered by a lane: a fixed answer
/// whose only blocks are the budgets and the rate limit, if any
/// (`gapura_gate::chain::paying_host`; a quiet host with a fixed answer is
/// one). O(hosts), once a snapshot.
fn lane_answers(snap: &Snapshot) -> bool {
    !snap.acme.has_http()
        && snap
            .entries
            .iter()
            .any(|e| gapura_gate::chain::paying_host(snap, e))
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
        // The gate's clock counts from `started` (`now_ms`); proof of work's tokens
        // carry wall-clock seconds from this origin.
        gate.unix_origin_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Shard {
            id,
            served: Served {
                feed,
                lane_hint: Cell::new(lane_answers(&first)),
                current: RefCell::new(Rc::new(first)),
            },
            stats,
            date: DateCache::default(),
            conns: ShardConns {
                draining: Cell::new(false),
                busy: Cell::new(0),
                open: Cell::new(0),
                spare_buffers: RefCell::new(Vec::new()),
                deadlines: Rc::default(),
                ring: None,
                started,
            },
            upstream: ShardUpstreams {
                pools: Upstreams::default(),
                h2: Default::default(),
                board,
                auth: AuthCalls::default(),
                slots: Rc::default(),
                tls: RefCell::new(Vec::new()),
            },
            serials: Serials {
                id_prefix,
                id_counter: Cell::new(0),
                connection: Cell::new(0),
            },
            scratch: RefCell::new(Box::new([0u8; gapura_gate::path::MAX_PATH_BYTES])),
            gate: RefCell::new(gate),
            deferred_releases: RefCell::new(Vec::new()),
            deferred_any: Cell::new(false),
            logs: ShardLogs {
                access: RefCell::new(ShardLog::default()),
                warn: None,
                warned: Default::default(),
                upstream_warned: RefCell::default(),
            },
            verifier: None,
            tls: RefCell::new(None),
            on_demand: None,
        }
    }

    /// Sends a throttled line per refusal kind to `warn` (at most one per
    /// kind per second on this shard; `warn`).
    pub fn with_warnings(mut self, warn: fn(std::fmt::Arguments<'_>)) -> Shard {
        self.logs.warn = Some(warn);
        self
    }

    /// Sends the access log's buffers to `tx` (the runtime's writer).
    pub fn with_access_log(self, tx: std::sync::mpsc::SyncSender<Vec<u8>>) -> Shard {
        *self.logs.access.borrow_mut() = ShardLog::new(tx);
        self
    }

    /// Sets the verification pool (at start).
    /// Runs the plain HTTP/1.1 connections on `ring` (its driver spawned
    /// by the caller: [`crate::uring::ShardRing::drive`]).
    pub fn with_ring(mut self, ring: Option<Rc<crate::uring::ShardRing>>) -> Shard {
        self.conns.ring = ring;
        self
    }

    /// The shard's own ring, when it has one.
    pub fn ring(&self) -> Option<&Rc<crate::uring::ShardRing>> {
        self.conns.ring.as_ref()
    }

    pub fn with_verifier(mut self, pool: Rc<dyn verify::VerifyPool>) -> Shard {
        self.verifier = Some(pool);
        self
    }

    /// The process's shard count: forward-auth's calls to a provider are
    /// bounded for the process, each shard holding its share.
    pub fn with_shard_count(self, shards: usize) -> Shard {
        self.upstream.auth.set_shards(shards);
        self
    }

    /// Hands unclaimed SNI names to `asks` (on-demand certificates).
    pub fn with_on_demand(mut self, asks: Option<std::sync::mpsc::SyncSender<String>>) -> Shard {
        self.on_demand = asks;
        self
    }

    /// The next connection's serial on this shard (the access log's
    /// `connection`: the shard and this number name one connection, and
    /// every stream of an HTTP/2 connection shares it).
    pub(crate) fn next_connection(&self) -> u64 {
        let n = self.serials.connection.get() + 1;
        self.serials.connection.set(n);
        n
    }

    /// A fresh request id as 24 hex digits, for pages. No allocation.
    pub fn request_id(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let n = self.serials.id_counter.get().wrapping_add(1);
        self.serials.id_counter.set(n);
        let parts = [
            (u64::from(self.serials.id_prefix), 8usize),
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
        self.conns
            .spare_buffers
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(WRITE_BUF_BYTES))
    }

    /// Takes back an idle connection's buffer (emptied); one that grew past
    /// 16 KiB (a buffer an idle connection would shrink), or one past the
    /// pool's bound, is freed.
    pub(crate) fn return_buf(&self, mut buf: Vec<u8>) {
        let mut spare = self.conns.spare_buffers.borrow_mut();
        if buf.capacity() == 0
            || buf.capacity() > SHRINK_ABOVE_BYTES
            || spare.len() >= SPARE_BUFFERS
        {
            return;
        }
        buf.clear();
        spare.push(buf);
    }

    /// Milliseconds since the shard started: the gate's clock, on the
    /// coarse monotonic clock (a memory read; less than a tick behind the
    /// precise one, never ahead). In tests it moves with the test's clock.
    #[inline]
    pub fn now_ms(&self) -> u64 {
        crate::clock::now()
            .saturating_duration_since(self.conns.started)
            .as_millis() as u64
    }

    /// The upstream pools' once-a-second work: expired idle connections
    /// closed, entries of servers no longer in the profile that hold
    /// nothing forgotten (HTTP/2 connections idle too long ended).
    pub fn sweep_upstreams(&self, now_ms: u64) {
        let snap = self.snapshot();
        let live = |key: u64| {
            snap.upstreams
                .iter()
                .any(|g| g.servers.iter().any(|s| s.key == key))
        };
        self.upstream.pools.sweep(now_ms, live);
        self.upstream.h2.sweep(now_ms);
    }

    /// Each upstream group's HTTP/1.1 pool figures on this shard, summed
    /// over its servers, in profile order. Allocates; the ticker's and
    /// the admin's path.
    pub fn upstream_pools(&self) -> Vec<(String, PoolCounts)> {
        let snap = self.snapshot();
        snap.upstreams
            .iter()
            .map(|g| {
                let mut sum = PoolCounts::default();
                for s in &g.servers {
                    sum.add(&self.upstream.pools.pool_counts(s.key));
                }
                (g.name.clone(), sum)
            })
            .collect()
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
            upstreams: self.upstream_pools(),
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
        let generation = self.served.current.borrow().generation;
        if let Some(newer) = self.served.feed.newer_than(generation) {
            self.stats.snapshot_generation.set(newer.generation);
            self.served.lane_hint.set(lane_answers(&newer));
            *self.served.current.borrow_mut() = Rc::new(newer);
        }
        self.served.current.borrow().clone()
    }

    /// Whether the current snapshot may have a host a lane answers (see
    /// the field).
    #[inline(always)]
    pub(super) fn lane_hint(&self) -> bool {
        self.served.lane_hint.get()
    }

    pub fn start_draining(&self) {
        self.conns.draining.set(true);
    }

    pub fn is_draining(&self) -> bool {
        self.conns.draining.get()
    }

    pub fn busy_connections(&self) -> u32 {
        self.conns.busy.get()
    }

    pub fn open_connections(&self) -> u32 {
        self.conns.open.get()
    }

    pub(super) fn add_busy(&self, delta: i32) {
        self.conns
            .busy
            .set(self.conns.busy.get().wrapping_add_signed(delta));
    }
}

impl Shard {
    /// Gives a ticket's leases back: now, or, when the gate state is
    /// borrowed at this moment, at the shard's next decision. Never skipped.
    pub(crate) fn release_ticket(&self, ticket: QuotaTicket) {
        self.release(Release::Ticket(ticket));
    }

    /// Gives every ticket of `tickets` back (emptying it), as
    /// [`Shard::release_ticket`] does each: one borrow of the gate state.
    pub(crate) fn release_tickets(&self, tickets: &mut Vec<QuotaTicket>) {
        match self.gate.try_borrow_mut() {
            Ok(mut gate) => {
                for t in tickets.drain(..) {
                    gate.release(t);
                }
            }
            Err(_) => self.defer(tickets.drain(..).map(Release::Ticket)),
        }
    }

    /// Gives a connection's place back, as [`Shard::release_ticket`] does.
    pub(crate) fn release_connection(&self, token: ConnectionToken) {
        self.release(Release::Connection(token));
    }

    fn release(&self, r: Release) {
        match self.gate.try_borrow_mut() {
            Ok(mut gate) => r.carry_out(&mut gate),
            Err(_) => self.defer([r]),
        }
    }

    /// The gate state for a decision, with the releases that found it
    /// borrowed carried out first. Inlined: a decision's borrow is a flag
    /// and a check; the releases deferred meanwhile, rare, are carried out
    /// of line.
    #[inline]
    pub fn gate_mut(&self) -> RefMut<'_, GateState> {
        let mut gate = self.gate.borrow_mut();
        if self.deferred_any.get() {
            self.carry_out_deferred(&mut gate);
        }
        gate
    }

    #[cold]
    #[inline(never)]
    fn carry_out_deferred(&self, gate: &mut GateState) {
        self.deferred_any.set(false);
        for r in self.deferred_releases.borrow_mut().drain(..) {
            r.carry_out(gate);
        }
    }

    /// Keeps a release for the next borrow of the gate state.
    fn defer(&self, releases: impl IntoIterator<Item = Release>) {
        self.deferred_releases.borrow_mut().extend(releases);
        self.deferred_any.set(true);
    }

    /// Counts `answers` requests answered in `us` each in their host's
    /// latency histogram, in one update (the gate state alone: no release
    /// waits on a count).
    #[inline]
    pub fn record_latencies(&self, host: gapura_gate::HostId, us: u64, answers: u64) {
        self.gate.borrow_mut().record_latencies(host, us, answers);
    }
}

impl Shard {
    /// Writes one request's access-log line (when the snapshot logs):
    /// `bytes` are the response's, head included.
    pub(super) fn log_request(&self, settings: &AccessLogSettings, rec: &LogRecord, bytes: u64) {
        if let Ok(mut log) = self.logs.access.try_borrow_mut() {
            log.write(settings, rec, bytes, self.id, &self.stats, |ip| {
                self.gate.try_borrow().ok().map(|g| g.address_hash(ip))
            });
        }
    }

    /// Hands the buffered access-log lines to the writer (the ticker calls
    /// this once a second). Never waits: a full queue drops them, counted.
    pub fn flush_access_log(&self) {
        if let Ok(mut log) = self.logs.access.try_borrow_mut() {
            log.tick(&self.stats);
        }
    }
}

/// A release that found the gate state borrowed.
#[derive(Clone, Copy, Debug)]
pub(super) enum Release {
    Ticket(QuotaTicket),
    Connection(ConnectionToken),
}

impl Release {
    fn carry_out(self, gate: &mut GateState) {
        match self {
            Release::Ticket(t) => gate.release(t),
            Release::Connection(t) => gate.release_connection(t),
        }
    }
}

impl Shard {
    /// The rustls client configuration for an upstream group's `tls`,
    /// built on first use after each snapshot change (a session cache of
    /// its own: a pooled or resumed connection stays with its shard).
    /// `None` (logged once per settings) when it cannot be built.
    /// `protocol`: what ALPN offers.
    pub(super) fn upstream_tls(
        &self,
        tls: &Arc<UpstreamTls>,
        protocol: UpstreamProtocol,
    ) -> Option<Arc<rustls::ClientConfig>> {
        if let Some((_, _, config)) = self
            .upstream
            .tls
            .borrow()
            .iter()
            .find(|(t, p, _)| Arc::ptr_eq(t, tls) && *p == protocol)
        {
            return config.clone();
        }
        let config = match crate::transport::upstream::client_config(tls, protocol) {
            Ok(c) => Some(c),
            Err(e) => {
                if let Some(warn) = self.logs.warn {
                    warn(format_args!(
                        "shard {}: TLS to an upstream or provider cannot start ({}): {e}",
                        self.id, tls.label
                    ));
                }
                None
            }
        };
        let mut built = self.upstream.tls.borrow_mut();
        if built.len() >= UPSTREAM_TLS_CONFIGS {
            built.clear();
        }
        built.push((tls.clone(), protocol, config.clone()));
        config
    }
}
