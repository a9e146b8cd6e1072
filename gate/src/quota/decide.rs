//! The combined quota decision of one request, in enforcement order.
//!
//! [`Quota`] is one shard's quota state: the rate table and its slots, the
//! window table, the global and per-operation window counters, and the
//! leases. [`Quota::decide`] runs the levels in this order and stops at the
//! first refusal ([`Level`]):
//!
//! 1. **Budgets, before anything costs**: the global budget, then the source
//!    prefix's (a health probe's own health budget instead), then the
//!    operation's. They are checked together and counted together: a request
//!    refused at any of them counts in none, so a prefix past its budget does
//!    not also drain the global one.
//! 2. **Leases**: global, source prefix and operation concurrency. A request
//!    that reaches this level has spent its budgets, whatever follows.
//! 3. **Identity budget** (when the request carries an identity key): after
//!    the address levels, so invalid credentials cannot skip them. The
//!    caller computes it the same way whether or not the resource exists.
//! 4. **Rate limits**: the token buckets of the route's policy (one bucket,
//!    or the IPv6 tiers all together).
//!
//! The chain splits the levels in two: [`Quota::admit`] runs 1 to 3 as its
//! first block, before any access check, so that every request pays its
//! budgets and no bad credential skips them; [`Quota::rate_limit`] runs 4 where
//! the route's chain puts the rate limit (after the access checks). Then
//! the caller holds the ticket across both and gives it back when the
//! request's answer is written, refused or not. [`Quota::decide`] runs both
//! at once for callers without a chain in between.
//!
//! A refusal at 3 (or at 4 in `decide`) releases the lease taken at 2.
//! Every refusal names
//! its level, says whether it failed closed on a full table, and carries a
//! Retry-After in whole seconds, 1..=3600 ([`retry_after_s`]): the time to the
//! window boundary for budgets, the time to one token for rate limits, and
//! 1 s for leases (a lease has no schedule).
//!
//! An admitted request gets a [`QuotaTicket`]; the caller's guard hands it
//! back through [`Quota::release`] when the request ends in any way (see
//! [`lease`](super::lease)). O(probe windows); no allocation.

use super::fleet::FleetState;
use super::fleetwindow::{BudgetLevel, FleetBudgets, WindowChoice};
use super::lease::{LeaseLimits, LeaseRefusal, LeaseTable, LeaseToken};
use super::rate::{CapacityError, RateCheck, RateTable};
use super::slots::PolicySlots;
use super::terms::{retry_after_s, Class, SweepReport};
use super::tracked::Ceiling;
use super::window::{until_boundary_ms, Budget, FixedWindow, WindowRefusal, WindowTable};

/// A level of the decision, in enforcement order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Level {
    Global = 0,
    Source = 1,
    Health = 2,
    Operation = 3,
    ConcurrentGlobal = 4,
    ConcurrentSource = 5,
    ConcurrentOperation = 6,
    Identity = 7,
    Rate = 8,
    Tenant = 9,
    Principal = 10,
    Resource = 11,
    ConcurrentTenant = 12,
    ConcurrentPrincipal = 13,
}

impl Level {
    pub const COUNT: usize = 14;
    pub const ALL: [Level; Level::COUNT] = [
        Level::Global,
        Level::Source,
        Level::Health,
        Level::Operation,
        Level::ConcurrentGlobal,
        Level::ConcurrentSource,
        Level::ConcurrentOperation,
        Level::Identity,
        Level::Rate,
        Level::Tenant,
        Level::Principal,
        Level::Resource,
        Level::ConcurrentTenant,
        Level::ConcurrentPrincipal,
    ];

    /// The metrics label.
    pub fn name(self) -> &'static str {
        match self {
            Level::Global => "global",
            Level::Source => "source",
            Level::Health => "health",
            Level::Operation => "operation",
            Level::ConcurrentGlobal => "concurrent_global",
            Level::ConcurrentSource => "concurrent_source",
            Level::ConcurrentOperation => "concurrent_operation",
            Level::Identity => "identity",
            Level::Rate => "rate",
            Level::Tenant => "tenant",
            Level::Principal => "principal",
            Level::Resource => "resource",
            Level::ConcurrentTenant => "concurrent_tenant",
            Level::ConcurrentPrincipal => "concurrent_principal",
        }
    }
}

/// Why a request was refused: answered 429 with `Retry-After`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub level: Level,
    /// The level's table was at its ceiling for a new key (fail closed),
    /// rather than the key being over its limit.
    pub untracked: bool,
    /// Whole seconds, 1..=3600.
    pub retry_after_s: u32,
}

/// An admitted request's hold on its leases. A plain value: see
/// [`lease`](super::lease) for the guard that hands it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuotaTicket {
    /// The budgets' block's lease (global, source, operation).
    lease: Option<LeaseToken>,
    /// The identity dimensions' leases (tenant, principal: [`super::dims`]).
    pub(super) dims: [Option<LeaseToken>; 2],
}

impl QuotaTicket {
    /// One ticket holding both's leases (a request that paid its budgets
    /// before a check and its identity dimensions after it).
    pub fn merge(a: Option<QuotaTicket>, b: Option<QuotaTicket>) -> Option<QuotaTicket> {
        match (a, b) {
            (Some(a), Some(b)) => Some(QuotaTicket {
                lease: a.lease.or(b.lease),
                dims: [a.dims[0].or(b.dims[0]), a.dims[1].or(b.dims[1])],
            }),
            (a, b) => a.or(b),
        }
    }

    /// A ticket of the identity dimensions' leases alone.
    pub(super) fn of_dims(dims: [Option<LeaseToken>; 2]) -> QuotaTicket {
        QuotaTicket { lease: None, dims }
    }
}

/// The answer of [`Quota::decide`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaDecision {
    Admit(QuotaTicket),
    Refuse(Refusal),
}

/// Limits of one operation (a route class the profile names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OperationLimits {
    /// Requests per window, all sources of the shard together.
    pub requests: Option<Budget>,
    /// Requests running at once.
    pub concurrent: Option<Budget>,
}

/// The quota part of a snapshot: immutable, per-shard values (a `split`
/// scope already divided). `None` means no limit at that level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Requests per window on the shard.
    pub global: Option<Budget>,
    /// Requests per window per source prefix.
    pub source: Option<Budget>,
    /// Health-probe requests per window per source prefix.
    pub health: Option<Budget>,
    /// Requests per window per identity.
    pub identity: Option<Budget>,
    /// Indexed by operation id.
    pub operations: Box<[OperationLimits]>,
    /// Global and per-source concurrency.
    pub leases: LeaseLimits,
    /// The budget levels shared across a fleet, with their local shares
    /// ([`super::fleetwindow`]).
    pub fleet: FleetBudgets,
    /// Tenant, principal and resource budgets and leases ([`super::dims`]).
    pub dims: super::dims::DimLimits,
}

/// One request's quota facts. Keys are computed by the caller with the
/// shard's [`Keyer`](super::Keyer).
#[derive(Clone, Copy, Debug)]
pub struct QuotaRequest<'a> {
    pub class: Class,
    /// The source prefix key: `Domain::SourceBudget` over
    /// `SourcePrefix::BUDGET` (IPv4 /24, IPv6 /56). Budgets and leases of the
    /// prefix both use it; a health probe's budget derives its own key.
    pub source: u64,
    /// The operation id (its index in [`QuotaLimits::operations`]).
    pub operation: Option<u16>,
    /// The identity key (`Keyer::identity`), when the route has one.
    pub identity: Option<u64>,
    /// The rate buckets to take a token from: empty for none, one for a
    /// policy, several for IPv6 tiers (all or none).
    pub rate: &'a [RateCheck<'a>],
}

/// Table sizes of one shard, fixed at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaSizes {
    /// Rate buckets: a power of two, 16..=16 Mi.
    pub rate_entries: usize,
    /// Rate policy slots (policy x host pairs), 1..=65535.
    pub policy_slots: u16,
    /// How long a retired slot's buckets are kept.
    pub slot_grace_ms: u64,
    /// The length of every budget window.
    pub window_ms: u64,
    /// Ceiling of the window table (source, health and identity keys).
    pub window_keys: Ceiling,
    /// Ceiling of the lease table's source keys.
    pub lease_keys: Ceiling,
    /// Requests running at once on the shard (lease records).
    pub max_leases: u32,
    /// Operation counters.
    pub operations: u16,
}

/// A table size a reload would change: the profile key, the running
/// value and the new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeChange {
    pub key: &'static str,
    pub running: u64,
    pub new: u64,
}

impl QuotaSizes {
    /// The first size `new` sets differently, by its profile key (a shard
    /// builds its tables once: a reload may not change them). `None` when
    /// every size is the same.
    pub fn change_to(&self, new: &QuotaSizes) -> Option<SizeChange> {
        let pairs: [(&'static str, u64, u64); 10] = [
            (
                "quota.rate_table_entries",
                self.rate_entries as u64,
                new.rate_entries as u64,
            ),
            (
                "quota.policy_slots",
                u64::from(self.policy_slots),
                u64::from(new.policy_slots),
            ),
            ("quota.slot_grace_ms", self.slot_grace_ms, new.slot_grace_ms),
            ("quota.window_ms", self.window_ms, new.window_ms),
            (
                "quota.tracked_keys",
                u64::from(self.window_keys.max_keys()),
                u64::from(new.window_keys.max_keys()),
            ),
            (
                "quota.critical_reserve",
                u64::from(self.window_keys.critical_reserve()),
                u64::from(new.window_keys.critical_reserve()),
            ),
            (
                "quota.lease_tracked_keys",
                u64::from(self.lease_keys.max_keys()),
                u64::from(new.lease_keys.max_keys()),
            ),
            (
                "quota.lease_critical_reserve",
                u64::from(self.lease_keys.critical_reserve()),
                u64::from(new.lease_keys.critical_reserve()),
            ),
            (
                "quota.max_leases",
                u64::from(self.max_leases),
                u64::from(new.max_leases),
            ),
            (
                "quota.operation",
                u64::from(self.operations),
                u64::from(new.operations),
            ),
        ];
        pairs
            .into_iter()
            .find(|(_, a, b)| a != b)
            .map(|(key, running, new)| SizeChange { key, running, new })
    }
}

/// Why table sizes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// `quota.rate_table_entries.range`
    RateEntries,
    /// `quota.window_ms.range`
    WindowMs,
}

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SizeError::RateEntries => "the rate table's entries are out of bounds",
            SizeError::WindowMs => "the budget window is out of bounds",
        })
    }
}

/// Plain counters owned by the shard, read by `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaCounters {
    pub admitted: u64,
    /// Refusals per [`Level`] (index `level as usize`), fail-closed included.
    pub refused: [u64; Level::COUNT],
    /// Of those, refusals because a table was at its ceiling.
    pub untracked: [u64; Level::COUNT],
    /// Tickets released (a second release is not counted).
    pub released: u64,
}

impl QuotaCounters {
    pub fn refused(&self, level: Level) -> u64 {
        self.refused[level as usize]
    }

    pub fn untracked(&self, level: Level) -> u64 {
        self.untracked[level as usize]
    }
}

/// Health probes count in the window table under their own key, derived
/// from the source key (a keyed PRF output, so the derived keys are as
/// unrelated to other sources' keys as any two keys are).
const HEALTH_TWEAK: u64 = 0x6865_616c_7468_7072;

/// One shard's quota state. See the module doc.
#[derive(Debug)]
pub struct Quota {
    rate: RateTable,
    slots: PolicySlots,
    pub(super) windows: WindowTable,
    global: FixedWindow,
    operations: Box<[FixedWindow]>,
    leases: LeaseTable,
    /// Tenant and principal leases: a table of their own, so they count in
    /// no global or source limit.
    pub(super) dim_leases: LeaseTable,
    pub counters: QuotaCounters,
}

impl Quota {
    /// Builds every table. Allocates, once.
    pub fn new(sizes: &QuotaSizes) -> Result<Quota, SizeError> {
        let rate =
            RateTable::new(sizes.rate_entries).map_err(|CapacityError| SizeError::RateEntries)?;
        let windows = WindowTable::new(sizes.window_ms, sizes.window_keys)
            .map_err(|_| SizeError::WindowMs)?;
        Ok(Quota {
            rate,
            slots: PolicySlots::new(sizes.policy_slots, sizes.slot_grace_ms),
            windows,
            global: FixedWindow::default(),
            operations: vec![FixedWindow::default(); sizes.operations as usize].into_boxed_slice(),
            leases: LeaseTable::new(sizes.max_leases, sizes.lease_keys, sizes.operations),
            dim_leases: LeaseTable::new(sizes.max_leases, sizes.lease_keys, 0),
            counters: QuotaCounters::default(),
        })
    }

    /// Decides one request at `now_ms`: [`admit`](Self::admit), then
    /// [`rate_limit`](Self::rate_limit), giving the leases back when the rate refuses.
    /// See the module doc for the order. O(probe windows); no allocation.
    pub fn decide(
        &mut self,
        limits: &QuotaLimits,
        req: &QuotaRequest<'_>,
        now_ms: u64,
    ) -> QuotaDecision {
        let ticket = match self.admit(limits, req, now_ms) {
            QuotaDecision::Admit(t) => t,
            refused => return refused,
        };
        match self.rate_limit(req.rate, now_ms) {
            Ok(()) => QuotaDecision::Admit(ticket),
            Err(r) => {
                // Admitted counts requests that passed every level.
                self.counters.admitted -= 1;
                self.release_leases(ticket);
                QuotaDecision::Refuse(r)
            }
        }
    }

    /// Levels 1 to 3: budgets, leases and the identity budget (the chain's
    /// first block, before any access check). `req.rate` is not read. The
    /// caller holds the ticket for the request's life. No level is shared
    /// across a fleet here: see [`admit_shared`](Self::admit_shared).
    pub fn admit(
        &mut self,
        limits: &QuotaLimits,
        req: &QuotaRequest<'_>,
        now_ms: u64,
    ) -> QuotaDecision {
        // Capacity 0: allocates nothing; every fleet-scoped level is held
        // to its local share.
        let mut alone = FleetState::default();
        self.admit_shared(limits, req, &mut alone, now_ms)
    }

    /// [`admit`](Self::admit) with the shard's shared keys: a fleet-scoped
    /// budget level ([`QuotaLimits::fleet`]) counts against the fleet's
    /// count as last learned (see [`super::fleetwindow`]). `now_ms`: the
    /// windows' clock, Unix milliseconds for a fleet's windows to agree.
    pub fn admit_shared(
        &mut self,
        limits: &QuotaLimits,
        req: &QuotaRequest<'_>,
        fleet: &mut FleetState,
        now_ms: u64,
    ) -> QuotaDecision {
        let class = req.class;
        // 1. Budgets: check all, then count all.
        if let Err(refused) = self.budgets(limits, req, fleet, now_ms) {
            return refused;
        }

        // 2. Leases.
        let operation = req
            .operation
            .and_then(|i| Some((i, *limits.operations.get(i as usize)?)));
        let lease_op = req
            .operation
            .map(|i| (i, operation.and_then(|(_, o)| o.concurrent)));
        let lease = match self
            .leases
            .acquire(class, &limits.leases, req.source, lease_op)
        {
            Ok(token) => token,
            Err(e) => {
                let (level, untracked) = match e {
                    LeaseRefusal::Global => (Level::ConcurrentGlobal, false),
                    LeaseRefusal::NoRecord => (Level::ConcurrentGlobal, true),
                    LeaseRefusal::Key => (Level::ConcurrentSource, false),
                    LeaseRefusal::UntrackedKey => (Level::ConcurrentSource, true),
                    LeaseRefusal::Operation => (Level::ConcurrentOperation, false),
                };
                return self.refuse(level, untracked, 1_000);
            }
        };

        // 3. Identity.
        if let (Some(id), Some(b)) = (req.identity, limits.identity) {
            let window = self.windows.window();
            let (b, choice) = fleet_budget(
                fleet,
                limits.fleet.identity,
                b,
                (BudgetLevel::Identity, id),
                (window, self.windows.window_ms()),
                || self.windows.count(id),
                class,
            );
            if let Err(e) = self
                .windows
                .try_consume(id, b.threshold(class), class, now_ms)
            {
                self.leases.release(lease);
                let boundary = until_boundary_ms(now_ms, self.windows.window_ms());
                return self.refuse(Level::Identity, e == WindowRefusal::Untracked, boundary);
            }
            fleet.windows.record(choice);
        }

        self.counters.admitted += 1;
        QuotaDecision::Admit(QuotaTicket {
            lease: Some(lease),
            dims: [None, None],
        })
    }

    /// Level 1: the global, source (or health) and operation budgets,
    /// checked together and counted together.
    #[inline]
    fn budgets(
        &mut self,
        limits: &QuotaLimits,
        req: &QuotaRequest<'_>,
        fleet: &mut FleetState,
        now_ms: u64,
    ) -> Result<(), QuotaDecision> {
        let class = req.class;
        let window = self.windows.roll(now_ms);
        // Only a refusal pays for the division.
        let window_ms = self.windows.window_ms();
        let boundary_ms = move || until_boundary_ms(now_ms, window_ms);
        let w = (window, window_ms);

        let mut global = WindowChoice::Local;
        if let Some(b) = limits.global {
            let count = self.global.count(window);
            let fleet_share = limits.fleet.global;
            let (b, choice) = fleet_budget(
                fleet,
                fleet_share,
                b,
                (BudgetLevel::Global, 0),
                w,
                || count,
                class,
            );
            global = choice;
            if !self.global.fits(window, b.threshold(class)) {
                return Err(self.refuse(Level::Global, false, boundary_ms()));
            }
        }
        let (level, budget, key) = match class {
            Class::Health => (Level::Health, limits.health, req.source ^ HEALTH_TWEAK),
            _ => (Level::Source, limits.source, req.source),
        };
        let mut source = WindowChoice::Local;
        let source_pass = match budget {
            Some(b) => {
                let share = if level == Level::Source {
                    limits.fleet.source
                } else {
                    None
                };
                let windows = &self.windows;
                let (b, choice) = fleet_budget(
                    fleet,
                    share,
                    b,
                    (BudgetLevel::Source, key),
                    w,
                    || windows.count(key),
                    class,
                );
                source = choice;
                match self.windows.check(key, b.threshold(class), class, now_ms) {
                    Ok(pass) => Some(pass),
                    Err(e) => {
                        let untracked = e == WindowRefusal::Untracked;
                        return Err(self.refuse(level, untracked, boundary_ms()));
                    }
                }
            }
            None => None,
        };
        let operation = req
            .operation
            .and_then(|i| Some((i, *limits.operations.get(i as usize)?)));
        if let Some((i, ops)) = operation {
            if let (Some(b), Some(w)) = (ops.requests, self.operations.get(i as usize)) {
                if !w.fits(window, b.threshold(class)) {
                    return Err(self.refuse(Level::Operation, false, boundary_ms()));
                }
            }
        }
        self.global.add(window);
        fleet.windows.record(global);
        if let Some(pass) = source_pass {
            self.windows.commit(pass);
            fleet.windows.record(source);
        }
        if let Some((i, _)) = operation {
            if let Some(w) = self.operations.get_mut(i as usize) {
                w.add(window);
            }
        }
        Ok(())
    }

    /// Level 4: the rate buckets (one, or the IPv6 tiers all together; none
    /// passes). A refusal is counted at [`Level::Rate`]; leases are the
    /// caller's to give back.
    #[inline(always)]
    pub fn rate_limit(&mut self, rate: &[RateCheck<'_>], now_ms: u64) -> Result<(), Refusal> {
        let d = match rate {
            [] => return Ok(()),
            [one] => self.rate.try_acquire(one.policy, one.slot, one.key, now_ms),
            tiers => self.rate.try_acquire_all(tiers, now_ms),
        };
        if d.allowed {
            return Ok(());
        }
        Err(self.refusal(Level::Rate, false, d.retry_after_ms))
    }

    #[inline]
    fn refuse(&mut self, level: Level, untracked: bool, wait_ms: u64) -> QuotaDecision {
        QuotaDecision::Refuse(self.refusal(level, untracked, wait_ms))
    }

    /// Counts a refusal at `level` and says so.
    #[inline]
    pub(super) fn refusal(&mut self, level: Level, untracked: bool, wait_ms: u64) -> Refusal {
        self.counters.refused[level as usize] += 1;
        if untracked {
            self.counters.untracked[level as usize] += 1;
        }
        Refusal {
            level,
            untracked,
            retry_after_s: retry_after_s(wait_ms),
        }
    }

    /// Ends an admitted request's leases. A second release of the same
    /// ticket does nothing and returns false. O(1).
    pub fn release(&mut self, ticket: QuotaTicket) -> bool {
        let released = self.release_leases(ticket);
        if released {
            self.counters.released += 1;
        }
        released
    }

    /// Ends every lease of `ticket`; whether any was still held.
    fn release_leases(&mut self, ticket: QuotaTicket) -> bool {
        let mut released = ticket.lease.is_some_and(|l| self.leases.release(l));
        for l in ticket.dims.into_iter().flatten() {
            released |= self.dim_leases.release(l);
        }
        released
    }

    /// One step of the rate sweeper: visits up to `budget` buckets. Call it
    /// from the shard's loop with a budget that bounds its cost (a few
    /// thousand entries a turn laps a 256 Ki table in seconds).
    pub fn sweep(&mut self, now_ms: u64, budget: usize) -> SweepReport {
        self.rate.sweep(&mut self.slots, now_ms, budget)
    }

    pub fn rate(&self) -> &RateTable {
        &self.rate
    }

    pub fn rate_mut(&mut self) -> &mut RateTable {
        &mut self.rate
    }

    /// The slot registry: bind each (policy, host) pair on reload.
    pub fn slots(&self) -> &PolicySlots {
        &self.slots
    }

    pub fn slots_mut(&mut self) -> &mut PolicySlots {
        &mut self.slots
    }

    pub fn windows(&self) -> &WindowTable {
        &self.windows
    }

    pub fn leases(&self) -> &LeaseTable {
        &self.leases
    }

    /// Requests counted by the global budget in the current window.
    pub fn global_count(&self) -> u32 {
        self.global.count(self.windows.window())
    }

    /// Requests counted by `operation`'s budget in the current window.
    pub fn operation_count(&self, operation: u16) -> u32 {
        self.operations
            .get(operation as usize)
            .map_or(0, |w| w.count(self.windows.window()))
    }
}

/// The budget a level holds a request to, and the fleet's choice for it:
/// the whole budget when the level is not fleet-scoped (`share` None), or
/// as [`FleetWindows::choose`] says. `count`: the shard's count of the key
/// before the request (read only for a fleet-scoped level).
#[inline]
fn fleet_budget(
    fleet: &mut FleetState,
    share: Option<Budget>,
    whole: Budget,
    (level, key): (BudgetLevel, u64),
    (window, window_ms): (u64, u64),
    count: impl FnOnce() -> u32,
    class: Class,
) -> (Budget, WindowChoice) {
    let Some(share) = share else {
        return (whole, WindowChoice::Local);
    };
    let decided = fleet.windows.choose(
        fleet.fallback,
        (level.identity(window_ms), key),
        (window, window_ms),
        count(),
        (whole, share),
        class.may_use_reserve(),
    );
    if fleet.fallback {
        fleet.counters.fallback_decisions += 1;
    }
    decided
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
