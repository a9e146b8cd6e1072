//! A shard's mutable gate state: the quota tables and their keys, the rate
//! slots bound for the snapshot it serves, the rule sets' regex caches and
//! user-agent memos, the verification cache, accept-time connection
//! tables, and the per-block counters that follow their blocks by name
//! across reloads. Owned by one shard: no atomics, no locks.

use super::decision::Suspended;
use super::lane::HostLane;
use crate::access::cache::{CacheKeyer, VerifyCache};
use crate::maintenance::MaintenanceCounters;
use crate::mode::Mode;
use crate::quota::{Keyer, Quota, QuotaSizes, QuotaTicket, SizeError, Slot, SourcePrefix};
use crate::ruleset::{RegexCaches, RuleSetCounters};
use crate::snapshot::Snapshot;
use std::net::IpAddr;

/// Counters of the chain's blocks, owned by the shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainCounters {
    /// Quota refusals let through by shadow mode.
    pub quota_shadow: u64,
    /// Requests exempt from quotas (`robots.txt`).
    pub quota_exempt: u64,
    /// Managed robots.txt answers.
    pub robots_served: u64,
    /// Requests over their connection's request rate (429, then closed).
    pub connection_rate_refused: u64,
    /// Rate limits of the current snapshot that found no bucket slot (the
    /// slots ran out while retired limits still held theirs): each fails
    /// closed until one frees up.
    pub rate_unbound: u64,
    /// Requests refused because their rate limit had no bucket slot.
    pub rate_unbound_refused: u64,
    /// Proof of work, every host.
    pub pow: crate::pow::PowCounters,
}

/// One rate limit's counters on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimitCounters {
    /// Requests this limit let through (within it, shadow hits apart).
    pub allowed: u64,
    /// Requests answered 429 by this limit.
    pub refused: u64,
    /// Refusals a shadowed limit let through.
    pub shadow_hits: u64,
}

/// One access list's counters on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessCounters {
    pub allowed: u64,
    pub refused: u64,
    pub dropped: u64,
    pub challenged: u64,
    pub cache_hits: u64,
    pub verifications: u64,
    pub verify_failures: u64,
    /// Refused because the verification line (or the client's share of
    /// it) was full, or no pool runs checks.
    pub queue_refusals: u64,
    /// Refused because the check waited in the line past its bound.
    pub verify_timeouts: u64,
    pub shadow_hits: u64,
}

/// Where the chain starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    Beginning,
    /// A request the chain suspended for a check made off the decision (a
    /// password on the verification pool, a forward-auth call), resumed
    /// once the check passed, on the snapshot that suspended it.
    Resume(Suspended),
}

/// Which lane each host of the adopted snapshot takes (`super::lane`).
#[derive(Debug, Default)]
struct Lanes {
    /// The snapshot's host list they were read from: its address and
    /// length.
    entries: (usize, usize),
    /// Per host; empty when every host takes the whole chain.
    hosts: Vec<HostLane>,
}

/// A shard's mutable gate state: the quota tables, their keyer, the rate
/// slots bound for the snapshot it serves, and counters.
pub struct GateState {
    pub quota: Quota,
    pub(super) keyer: Keyer,
    /// Keys of fleet-scoped limits: the same on every node of the fleet
    /// ([`GateState::enable_fleet`]); the process's own until then.
    pub(super) fleet_keyer: Keyer,
    /// The last source keys derived (`source_key`).
    source_keys: SourceKeys,
    /// The last `Host` value looked up (step 3).
    pub(super) host_memo: crate::host::HostMemo,
    /// The shared keys of fleet-scoped limits and this shard's side of
    /// their exchange (empty until [`GateState::enable_fleet`]).
    pub fleet: crate::quota::fleet::FleetState,
    /// Slot per rate pair of the adopted snapshot.
    pub(super) pair_slots: Vec<Option<Slot>>,
    adopted: u64,
    /// Per host of the adopted snapshot: its lane (`super::lane`), with
    /// the address and length of the snapshot's host list they were read
    /// from.
    lanes: Lanes,
    pub counters: ChainCounters,
    /// Per rule set of the adopted snapshot: regex caches and counters.
    pub(super) regex_caches: Vec<RegexCaches>,
    pub rule_counters: Vec<RuleSetCounters>,
    /// Per access list of the adopted snapshot.
    pub access_counters: Vec<AccessCounters>,
    /// Per host of the adopted snapshot.
    pub maintenance_counters: Vec<MaintenanceCounters>,
    /// Answer latency per host of the adopted snapshot (by label across
    /// reloads).
    pub latency: Vec<crate::latency::Histogram>,
    /// Names the counters above were kept under, to carry them across a
    /// reload (lists and sets by name, hosts by label).
    rule_names: Vec<String>,
    access_names: Vec<String>,
    /// Per rate limit of the adopted snapshot (by name across reloads).
    pub rate_counters: Vec<RateLimitCounters>,
    rate_names: Vec<String>,
    host_names: Vec<String>,
    pub verify_cache: VerifyCache,
    pub cache_keyer: CacheKeyer,
    /// Accept-time tables: open connections and new connections per prefix.
    conn_leases: crate::quota::LeaseTable,
    conn_rate: crate::quota::RateTable,
    pub connection_counters: ConnectionCounters,
    /// The password check of the last `Verdict::Verify`, taken by the caller.
    pub(super) pending_job: Option<crate::access::VerifyJob>,
    /// Unix time in milliseconds at `now_ms` 0: proof of work's tokens
    /// carry wall-clock seconds (the shard sets it when it starts).
    pub unix_origin_ms: u64,
    /// Forward-auth: remembered allows and counters per provider.
    pub auth: crate::auth::AuthState,
    /// Proof of work's challenge nonces: a keyed hash of a counter.
    nonce_key: [u8; 16],
    nonce_counter: u64,
}

/// Accept-time refusals on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionCounters {
    pub refused_concurrent: u64,
    pub refused_rate: u64,
    pub shadow_hits: u64,
}

/// Which accept-time limit refused a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionRefusal {
    Concurrent,
    Rate,
}

/// A connection's hold on its prefix's concurrency: give it back with
/// [`GateState::release_connection`] when the connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionToken(crate::quota::LeaseToken);

impl GateState {
    /// Tables sized by `sizes` (allocates, once per shard), keys seeded by
    /// `seed` (random per process).
    pub fn new(sizes: &QuotaSizes, seed: [u8; 16]) -> Result<GateState, SizeError> {
        let mut secret = [0u8; 32];
        secret[..16].copy_from_slice(&seed);
        for (i, b) in seed.iter().enumerate() {
            secret[16 + i] = b.rotate_left(3) ^ 0xa5;
        }
        Ok(GateState {
            quota: Quota::new(sizes)?,
            keyer: Keyer::new(seed),
            fleet_keyer: Keyer::new(seed),
            source_keys: SourceKeys::default(),
            host_memo: Default::default(),
            fleet: crate::quota::fleet::FleetState::default(),
            pair_slots: Vec::new(),
            adopted: u64::MAX,
            lanes: Lanes::default(),
            counters: ChainCounters::default(),
            regex_caches: Vec::new(),
            rule_counters: Vec::new(),
            access_counters: Vec::new(),
            maintenance_counters: Vec::new(),
            latency: Vec::new(),
            rule_names: Vec::new(),
            access_names: Vec::new(),
            rate_counters: Vec::new(),
            rate_names: Vec::new(),
            host_names: Vec::new(),
            verify_cache: VerifyCache::with_capacity(crate::access::cache::DEFAULT_CAPACITY),
            cache_keyer: CacheKeyer::new(&secret),
            conn_leases: crate::quota::LeaseTable::new(sizes.max_leases, sizes.lease_keys, 0),
            conn_rate: crate::quota::RateTable::new((sizes.rate_entries / 16).max(1024))
                .map_err(|_| SizeError::RateEntries)?,
            connection_counters: ConnectionCounters::default(),
            pending_job: None,
            unix_origin_ms: 0,
            auth: crate::auth::AuthState::new(std::array::from_fn(|i| secret[i] ^ secret[16 + i])),
            nonce_key: std::array::from_fn(|i| secret[16 + i] ^ 0x3c),
            nonce_counter: 0,
        })
    }

    /// Shares fleet-scoped limits: their keys are derived under
    /// `fleet_seed` (the same on every node), and up to `shared_keys` of
    /// them are shared at once. Allocates the shared set, once, at start.
    pub fn enable_fleet(&mut self, fleet_seed: [u8; 16], shared_keys: usize) {
        self.fleet_keyer = Keyer::new(fleet_seed);
        self.source_keys = SourceKeys::default();
        self.fleet = crate::quota::fleet::FleetState::with_capacity(shared_keys);
    }

    /// Takes in the reconciler's view and hands this shard's batch over
    /// (the shard's sync timer). See [`crate::quota::fleet`].
    pub fn fleet_sync(
        &mut self,
        view: &crate::quota::fleet::FleetView,
        view_age_ms: u64,
        shard: u32,
        now_ms: u64,
        send: impl FnOnce(crate::quota::fleet::FleetBatch) -> bool,
    ) {
        self.fleet_sync_with(view, view_age_ms, (shard, now_ms), &mut [], send);
    }

    /// [`fleet_sync`](Self::fleet_sync) with `peers`, the shard's other
    /// tables whose budget windows are fleet-scoped (its UDP relays'): they
    /// take the same view and their shared keys travel in the same batch.
    pub fn fleet_sync_with(
        &mut self,
        view: &crate::quota::fleet::FleetView,
        view_age_ms: u64,
        (shard, now_ms): (u32, u64),
        peers: &mut [&mut dyn crate::quota::fleet::FleetPeer],
        send: impl FnOnce(crate::quota::fleet::FleetBatch) -> bool,
    ) {
        let rate = self.quota.rate_mut();
        let outstanding = self.fleet.outstanding();
        let new = self
            .fleet
            .apply(view, shard as usize, rate, now_ms, view_age_ms);
        if outstanding.is_some() && self.fleet.outstanding().is_none() {
            for p in peers.iter_mut() {
                p.shared_windows().end_flight();
            }
        }
        if new {
            for p in peers.iter_mut() {
                p.take_view(view);
            }
        }
        let window_ms = self.quota.windows().window_ms();
        if new && !view.fallback {
            self.fleet
                .windows
                .apply(view.round, |identity, key, window| {
                    view.window(identity, key, window)
                });
        }
        let unix_ms = now_ms.saturating_add(self.unix_origin_ms);
        self.fleet.windows.roll(unix_ms / window_ms);
        for p in peers.iter_mut() {
            p.roll(unix_ms);
        }
        self.fleet.hand_off_with(shard, now_ms, peers, send);
    }

    /// Unix seconds at the shard's `now_ms`.
    #[inline]
    pub fn unix_s(&self, now_ms: u64) -> u64 {
        (self.unix_origin_ms + now_ms) / 1000
    }

    /// A fresh nonce for a proof-of-work challenge: SipHash-1-3 (128 bits)
    /// of a counter under the shard's random key. No allocation.
    pub fn pow_nonce(&mut self) -> [u8; 16] {
        use siphasher::sip128::{Hasher128, SipHasher13};
        use std::hash::Hasher;
        self.nonce_counter += 1;
        let mut h = SipHasher13::new_with_key(&self.nonce_key);
        h.write_u64(self.nonce_counter);
        h.finish128().as_bytes()
    }

    /// Small tables (a few KiB), for `gapura explain` and tests: one request
    /// or a handful, never a server's load.
    pub fn small() -> GateState {
        use crate::quota::Ceiling;
        let ceiling = |n| Ceiling::new(n, n / 8).expect("constant ceiling");
        let sizes = QuotaSizes {
            rate_entries: 1024,
            policy_slots: 1024,
            slot_grace_ms: 60_000,
            window_ms: 1000,
            window_keys: ceiling(1024),
            lease_keys: ceiling(1024),
            max_leases: 1024,
            operations: 64,
        };
        GateState::new(&sizes, [0x5a; 16]).expect("constant sizes")
    }

    /// Binds the snapshot's rate pairs to slots, once per generation: a
    /// pair keeps its slot (and buckets) across reloads; pairs gone are
    /// retired and swept after their grace. A pair that finds no slot (the
    /// slots ran out while retired pairs hold theirs) is left unbound, and
    /// its limit fails closed (`rate_step`), never off; it is bound again
    /// at the next adoption or once a retired slot is swept. Allocates
    /// only on a new generation. Returns how many pairs are unbound when
    /// it adopted a new generation (for the caller to log), else 0.
    pub fn adopt(&mut self, snap: &Snapshot, now_ms: u64) -> u32 {
        if self.adopted == snap.generation {
            if self.counters.rate_unbound > 0 {
                return self.bind_unbound(snap);
            }
            return 0;
        }
        self.adopted = snap.generation;
        let slots = self.quota.slots_mut();
        slots.begin_reload();
        self.pair_slots.clear();
        for pair in &snap.gate.rate_pairs {
            let policy = &snap.gate.rate_limits[pair.limit as usize].policy;
            self.pair_slots
                .push(slots.bind(pair.identity, *policy).ok());
        }
        slots.finish_reload(now_ms);
        let unbound = self.pair_slots.iter().filter(|s| s.is_none()).count() as u32;
        self.counters.rate_unbound = u64::from(unbound);
        // Per-block state follows the blocks by name across the reload.
        fn carry<C: Copy + Default>(old_names: &[String], old: &[C], new_names: &[&str]) -> Vec<C> {
            new_names
                .iter()
                .map(|n| {
                    old_names
                        .iter()
                        .position(|o| o == n)
                        .and_then(|i| old.get(i).copied())
                        .unwrap_or_default()
                })
                .collect()
        }
        let gate = &snap.gate;
        let rule_names: Vec<&str> = gate.rule_set_names.iter().map(String::as_str).collect();
        self.rule_counters = carry(&self.rule_names, &self.rule_counters, &rule_names);
        self.rule_names = rule_names.iter().map(|s| s.to_string()).collect();
        self.regex_caches = gate
            .rule_sets
            .iter()
            .map(|s| s.new_regex_caches())
            .collect();
        let rate_names: Vec<&str> = gate.rate_limits.iter().map(|r| r.name.as_str()).collect();
        self.rate_counters = carry(&self.rate_names, &self.rate_counters, &rate_names);
        self.rate_names = rate_names.iter().map(|s| s.to_string()).collect();
        let access_names: Vec<&str> = gate.access_lists.iter().map(|l| l.name()).collect();
        self.access_counters = carry(&self.access_names, &self.access_counters, &access_names);
        self.access_names = access_names.iter().map(|s| s.to_string()).collect();
        let host_names: Vec<&str> = snap.entries.iter().map(|e| e.label.as_str()).collect();
        self.maintenance_counters =
            carry(&self.host_names, &self.maintenance_counters, &host_names);
        self.latency = carry(&self.host_names, &self.latency, &host_names);
        self.host_names = host_names.iter().map(|s| s.to_string()).collect();
        let mut hosts: Vec<HostLane> = snap.entries.iter().map(|e| HostLane::of(snap, e)).collect();
        if hosts.iter().all(|&l| l == HostLane::Chain) {
            hosts = Vec::new();
        }
        self.lanes = Lanes {
            entries: (snap.entries.as_ptr() as usize, snap.entries.len()),
            hosts,
        };
        self.auth.adopt(&gate.auth_providers);
        unbound
    }

    /// Whether `host`'s blocks are all off in `snap` (the chain then runs
    /// only the request limits before the host's answer): known only for
    /// the adopted snapshot, else `false` (the whole chain runs).
    #[inline(always)]
    pub(super) fn quiet(&self, snap: &Snapshot, host: crate::HostId) -> bool {
        self.lane(snap, host) == HostLane::Quiet
    }

    /// The lane `host` takes in `snap`: known only for the adopted
    /// snapshot, else the whole chain.
    #[inline(always)]
    pub(super) fn lane(&self, snap: &Snapshot, host: crate::HostId) -> HostLane {
        // The host's lane first: a snapshot whose hosts all take the chain
        // keeps none, and is answered by one compare.
        let lane = self
            .lanes
            .hosts
            .get(host as usize)
            .copied()
            .unwrap_or(HostLane::Chain);
        if lane != HostLane::Chain
            && self.adopted == snap.generation
            && self.lanes.entries == (snap.entries.as_ptr() as usize, snap.entries.len())
        {
            lane
        } else {
            HostLane::Chain
        }
    }

    /// Binds the pairs left unbound once slots freed up (retired ones
    /// swept). Cold: runs only while a limit fails closed. Returns 0 (the
    /// unbound limits were reported when the generation was adopted).
    #[cold]
    fn bind_unbound(&mut self, snap: &Snapshot) -> u32 {
        let slots = self.quota.slots_mut();
        for (i, pair) in snap.gate.rate_pairs.iter().enumerate() {
            if matches!(self.pair_slots.get(i), Some(None)) {
                let policy = &snap.gate.rate_limits[pair.limit as usize].policy;
                self.pair_slots[i] = slots.bind(pair.identity, *policy).ok();
            }
        }
        let unbound = self.pair_slots.iter().filter(|s| s.is_none()).count() as u32;
        self.counters.rate_unbound = u64::from(unbound);
        0
    }

    /// The names the per-block counters are kept under (rule sets, access
    /// lists, hosts), for metrics.
    pub fn rule_set_names(&self) -> &[String] {
        &self.rule_names
    }

    pub fn rate_limit_names(&self) -> &[String] {
        &self.rate_names
    }

    pub fn access_list_names(&self) -> &[String] {
        &self.access_names
    }

    pub fn host_names(&self) -> &[String] {
        &self.host_names
    }

    /// Admits a new connection from `addr` under the snapshot's connection
    /// limits: `Ok(Some(token))` holds a concurrency place, `Ok(None)` means
    /// nothing is counted, `Err` says which limit refused (close it now).
    /// O(probe), no allocation.
    pub fn admit_connection(
        &mut self,
        limits: Option<&crate::policy::ConnectionLimits>,
        addr: IpAddr,
        now_ms: u64,
    ) -> Result<Option<ConnectionToken>, ConnectionRefusal> {
        let Some(l) = limits else {
            return Ok(None);
        };
        let shadow = l.mode == Mode::Shadow;
        if let Some(policy) = &l.rate {
            let key = self.keyer.source(
                crate::quota::Domain::ConnectionRate,
                addr,
                SourcePrefix::BUDGET,
            );
            let slot = Slot::new(1).expect("1 is a slot");
            if !self
                .conn_rate
                .try_acquire(policy, slot, key, now_ms)
                .allowed
            {
                if shadow {
                    self.connection_counters.shadow_hits += 1;
                } else {
                    self.connection_counters.refused_rate += 1;
                    return Err(ConnectionRefusal::Rate);
                }
            }
        }
        if let Some(n) = l.concurrent {
            let key = self.keyer.source(
                crate::quota::Domain::ConnectionLease,
                addr,
                SourcePrefix::BUDGET,
            );
            let per_key = crate::quota::Budget::new(n.max(1), n.max(1)).ok();
            let limits = crate::quota::LeaseLimits {
                global: None,
                per_key,
            };
            match self
                .conn_leases
                .acquire(crate::quota::Class::Normal, &limits, key, None)
            {
                Ok(t) => return Ok(Some(ConnectionToken(t))),
                Err(_) if shadow => self.connection_counters.shadow_hits += 1,
                Err(_) => {
                    self.connection_counters.refused_concurrent += 1;
                    return Err(ConnectionRefusal::Concurrent);
                }
            }
        }
        Ok(None)
    }

    /// A client address as the access log writes it with `log_addresses =
    /// "hash"`: its keyed hash (the whole address, keyed by the process's
    /// seed, so it is stable for the process's life and useless elsewhere;
    /// in a fleet by the fleet's seed, so one client has one id on every
    /// node).
    pub fn address_hash(&self, addr: IpAddr) -> u64 {
        let whole = SourcePrefix::new(32, 128).unwrap_or(SourcePrefix::RATE);
        self.fleet_keyer
            .source(crate::quota::Domain::LogAddress, addr, whole)
    }

    /// A client's source prefix (IPv4 /24, IPv6 /56) as refusal warnings
    /// name it: its keyed hash (keyed as [`Self::address_hash`]).
    pub fn prefix_hash(&self, addr: IpAddr) -> u64 {
        self.fleet_keyer
            .source(crate::quota::Domain::LogAddress, addr, SourcePrefix::BUDGET)
    }

    /// The password check a `Verdict::Verify` asked for: run it off the
    /// shard. `None` when the last decision asked for none. O(1).
    pub fn take_job(&mut self) -> Option<crate::access::VerifyJob> {
        self.pending_job.take()
    }

    /// Gives a connection's place back. A second release does nothing.
    pub fn release_connection(&mut self, token: ConnectionToken) {
        let _ = self.conn_leases.release(token.0);
    }

    /// Sweeps retired rate slots, expired windows; bounded work per call.
    pub fn sweep(&mut self, now_ms: u64, budget: usize) {
        let _ = self.quota.sweep(now_ms, budget);
    }

    /// Counts `n` answered requests of `host` that took `us` microseconds
    /// each. O(buckets), no allocation.
    #[inline]
    pub fn record_latencies(&mut self, host: crate::host::HostId, us: u64, n: u64) {
        if let Some(h) = self.latency.get_mut(host as usize) {
            h.record_n(us, n);
        }
    }

    /// Gives a ticket's leases back. A second release does nothing.
    pub fn release(&mut self, ticket: QuotaTicket) {
        let _ = self.quota.release(ticket);
    }
}

/// The last key derived for a client address in each of the two source
/// domains every protected request keys (its source budget, its rate
/// limit): the requests of one connection come from one address, so each
/// is one SipHash a client, not one a request. A different address, prefix
/// or keyer replaces the entry; what it returns is always what the keyer
/// derives.
#[derive(Clone, Copy, Debug, Default)]
struct SourceKeys {
    entries: [Option<SourceKeyEntry>; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SourceKeyEntry {
    shared: bool,
    addr: std::net::IpAddr,
    prefix: crate::quota::SourcePrefix,
    key: u64,
}

impl GateState {
    /// The process's keyer or, `shared`, the fleet's.
    pub(super) fn keyer_for(&self, shared: bool) -> &Keyer {
        if shared {
            &self.fleet_keyer
        } else {
            &self.keyer
        }
    }

    /// `keyer.source(domain, addr, prefix)` under the process's keyer or,
    /// `shared`, the fleet's; remembered for [`Domain::SourceBudget`] and
    /// [`Domain::RateSource`] ([`SourceKeys`]). Inlined: a request asks it
    /// once or twice.
    #[inline(always)]
    pub(super) fn source_key(
        &mut self,
        shared: bool,
        domain: crate::quota::Domain,
        addr: std::net::IpAddr,
        prefix: crate::quota::SourcePrefix,
    ) -> u64 {
        use crate::quota::Domain;
        let slot = match domain {
            Domain::SourceBudget => 0,
            Domain::RateSource => 1,
            _ => return self.keyer_for(shared).source(domain, addr, prefix),
        };
        // Read in place: the entry is not copied out to be compared.
        if let Some(e) = &self.source_keys.entries[slot] {
            if e.addr == addr && e.shared == shared && e.prefix == prefix {
                return e.key;
            }
        }
        self.derive_source_key(slot, shared, domain, addr, prefix)
    }

    /// [`Self::source_key`] for an address it does not remember: derived
    /// (one SipHash) and remembered. Out of line: a connection's requests
    /// after its first find theirs remembered.
    #[inline(never)]
    fn derive_source_key(
        &mut self,
        slot: usize,
        shared: bool,
        domain: crate::quota::Domain,
        addr: std::net::IpAddr,
        prefix: crate::quota::SourcePrefix,
    ) -> u64 {
        let key = self.keyer_for(shared).source(domain, addr, prefix);
        self.source_keys.entries[slot] = Some(SourceKeyEntry {
            shared,
            addr,
            prefix,
            key,
        });
        key
    }
}
