//! Identity dimensions: a request's tenant, principal and resource, once
//! its identity is safely derived (after the access list and forward-auth:
//! the chain's identity step), each with a window budget, and the tenant
//! and principal with a concurrency lease.
//!
//! The keys are the caller's (`Domain::Tenant`, `Domain::Principal`,
//! `Domain::Resource` under the shard's keyer, or the fleet's for a
//! fleet-scoped budget). Every budget is checked before any is counted, so
//! a principal over its own budget spends nothing of its tenant's (one
//! principal cannot starve the others of its tenant); then the leases,
//! principal first, each given back if a later one refuses. The leases
//! ride on the request's [`QuotaTicket`] and are released with it, on every
//! ending. Budgets and leases live in the shard's keyed tables: a new key
//! at a full table fails closed (the critical reserve as for the other
//! levels).
//!
//! O(probe) per dimension; no allocation.

use super::decide::{Level, Quota, QuotaTicket, Refusal};
use super::fleet::FleetState;
use super::fleetwindow::{BudgetLevel, WindowChoice};
use super::lease::{LeaseLimits, LeaseRefusal};
use super::terms::Class;
use super::window::{until_boundary_ms, Budget, WindowRefusal};

/// One dimension's limits (`None`: no limit there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dim {
    /// Requests per window per key.
    pub requests: Option<Budget>,
    /// Requests running at once per key.
    pub concurrent: Option<Budget>,
}

/// The identity dimensions' limits of a snapshot (per shard: a `split`
/// scope already divided).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DimLimits {
    pub tenant: Dim,
    pub principal: Dim,
    /// Requests per window per resource (a route): no lease.
    pub resource: Option<Budget>,
}

impl DimLimits {
    /// Whether any dimension has a limit.
    pub fn any(&self) -> bool {
        self.tenant != Dim::default() || self.principal != Dim::default() || self.resource.is_some()
    }
}

/// One request's identity keys (`None`: the dimension does not apply, or
/// the request carries no value for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimRequest {
    pub class: Class,
    pub tenant: Option<u64>,
    pub principal: Option<u64>,
    pub resource: Option<u64>,
}

impl Quota {
    /// Counts a request in its identity dimensions and takes their leases,
    /// or refuses it (counting nothing, holding nothing). `now_ms`: the
    /// windows' clock, as for [`Quota::admit_shared`]. `Ok(None)`: nothing
    /// to hold.
    pub fn admit_dims(
        &mut self,
        limits: &super::QuotaLimits,
        req: &DimRequest,
        fleet: &mut FleetState,
        now_ms: u64,
    ) -> Result<Option<QuotaTicket>, Refusal> {
        let d = &limits.dims;
        let class = req.class;
        let window_ms = self.windows.window_ms();
        self.windows.roll(now_ms);
        let boundary = until_boundary_ms(now_ms, window_ms);
        let levels = [
            (
                Level::Tenant,
                BudgetLevel::Tenant,
                req.tenant,
                d.tenant.requests,
            ),
            (
                Level::Principal,
                BudgetLevel::Principal,
                req.principal,
                d.principal.requests,
            ),
            (
                Level::Resource,
                BudgetLevel::Resource,
                req.resource,
                d.resource,
            ),
        ];
        // Every budget first: a refusal counts nothing.
        let mut chosen = [(None, WindowChoice::Local); 3];
        for (i, &(level, fl, key, budget)) in levels.iter().enumerate() {
            let (Some(key), Some(whole)) = (key, budget) else {
                continue;
            };
            let (b, choice) = self.dim_budget(fleet, limits, (fl, key), whole, class);
            let threshold = b.threshold(class);
            if let Err(e) = self.windows.check(key, threshold, class, now_ms) {
                let untracked = e == WindowRefusal::Untracked;
                return Err(self.refusal(level, untracked, boundary));
            }
            chosen[i] = (Some((key, threshold)), choice);
        }
        for (pass, choice) in chosen {
            let Some((key, threshold)) = pass else {
                continue;
            };
            // Checked above; counted one by one (a key's new place is
            // found again after the one before it took its own).
            if self
                .windows
                .try_consume(key, threshold, class, now_ms)
                .is_ok()
            {
                fleet.windows.record(choice);
            }
        }
        let leases = [
            (
                Level::ConcurrentPrincipal,
                req.principal,
                d.principal.concurrent,
            ),
            (Level::ConcurrentTenant, req.tenant, d.tenant.concurrent),
        ];
        let mut held = [None, None];
        for (i, &(level, key, limit)) in leases.iter().enumerate() {
            let (Some(key), Some(limit)) = (key, limit) else {
                continue;
            };
            let per_key = LeaseLimits {
                global: None,
                per_key: Some(limit),
            };
            match self.dim_leases.acquire(class, &per_key, key, None) {
                Ok(token) => held[i] = Some(token),
                Err(e) => {
                    for token in held.into_iter().flatten() {
                        self.dim_leases.release(token);
                    }
                    let untracked =
                        matches!(e, LeaseRefusal::UntrackedKey | LeaseRefusal::NoRecord);
                    return Err(self.refusal(level, untracked, 1_000));
                }
            }
        }
        Ok(held
            .iter()
            .any(Option::is_some)
            .then(|| QuotaTicket::of_dims(held)))
    }

    /// The budget a dimension's key is held to: the whole, or as the fleet
    /// says for a fleet-scoped one.
    fn dim_budget(
        &mut self,
        fleet: &mut FleetState,
        limits: &super::QuotaLimits,
        (level, key): (BudgetLevel, u64),
        whole: Budget,
        class: Class,
    ) -> (Budget, WindowChoice) {
        let Some(share) = limits.fleet.share(level) else {
            return (whole, WindowChoice::Local);
        };
        let window = self.windows.window();
        let window_ms = self.windows.window_ms();
        let count = self.windows.count(key);
        let decided = fleet.windows.choose(
            fleet.fallback,
            (level.identity(window_ms), key),
            (window, window_ms),
            count,
            (whole, share),
            class.may_use_reserve(),
        );
        if fleet.fallback {
            fleet.counters.fallback_decisions += 1;
        }
        decided
    }

    /// Running requests of a tenant or principal key (`explain --live`,
    /// tests).
    pub fn dim_running(&self, key: u64) -> u32 {
        self.dim_leases.running(key)
    }
}

#[cfg(test)]
#[path = "dims_tests.rs"]
mod tests;
