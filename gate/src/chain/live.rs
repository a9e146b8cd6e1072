//! A running shard's tables as one request would meet them, read without
//! changing anything (`gapura explain --live`): the tokens left in the
//! client's rate bucket, the budget windows' counts and lease occupancy.
//! Never whether the verification cache holds given credentials: that
//! would answer, without a PBKDF2 or a budget, whether a password is
//! right.
//!
//! Reads only: no bucket is taken, no window counted, no cache entry
//! refreshed. Allocates (the answer's names); an admin path, never a
//! request's.

use super::decision::Request;
use super::state::GateState;
use crate::client::HeaderLines;
use crate::host::HostAction;
use crate::path::PathScratch;
use crate::policy::RateKey;
use crate::quota::fleetwindow::BudgetLevel;
use crate::quota::{Domain, SourcePrefix};
use crate::snapshot::Snapshot;
use std::net::IpAddr;

/// What the live tables hold for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveView {
    /// The client as the chain resolves it.
    pub client: IpAddr,
    /// The host that takes the request (its first name).
    pub host: Option<String>,
    /// Requests the global budget counted in the current window.
    pub global_count: u32,
    /// Requests the client's source prefix counted in the current window.
    pub source_count: u32,
    /// Requests holding leases on the shard, and of the client's prefix.
    pub leases_active: u32,
    pub leases_for_source: u32,
    /// The route's (or host's) rate limit: its name, the whole tokens in
    /// the client's bucket and, when empty, the wait for one in ms.
    pub rate: Option<(String, u32, u64)>,
    /// The request's fleet-scoped keys (a rate limit or budget with
    /// `scope = "fleet"`), as this shard holds them.
    pub fleet: Vec<FleetKeyLive>,
}

/// A fleet-scoped key as one shard holds it: its local count beside the
/// fleet's as last learned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetKeyLive {
    /// `"rate_limit"`, `"global"`, `"source"` or `"identity"`.
    pub level: &'static str,
    /// The rate limit's name, or the budget's level.
    pub name: String,
    /// Whether the key is shared now; a key that is not is decided by
    /// this shard alone until its count reaches the share threshold.
    pub shared: bool,
    /// This shard's count: tokens in its bucket (a rate limit, the
    /// fleet's learned count included), requests it counted in the window
    /// (a budget).
    pub local: u64,
    /// The fleet's as the last view had it: tokens in the fleet's bucket,
    /// or the window's count over every node; `None` before one had it.
    pub fleet: Option<u64>,
    /// A budget's leases: what every live node's leases held unspent as
    /// the last view had it.
    pub held: Option<u64>,
    /// Counted here and not yet in a view of the fleet.
    pub pending: u32,
    /// The engine is away: held to the local share.
    pub fallback: bool,
}

impl GateState {
    /// The live tables for `req` at `now_ms`. Reads only.
    pub fn live_view<H: HeaderLines + ?Sized>(
        &self,
        snap: &Snapshot,
        req: &Request<'_, H>,
        now_ms: u64,
        scratch: &mut PathScratch,
    ) -> LiveView {
        let resolved = snap.gate.client.resolve(req.peer, req.headers);
        let client = resolved.addr;
        let fleet_budgets = &snap.gate.quota.fleet;
        let source_keyer = if fleet_budgets.source.is_some() {
            &self.fleet_keyer
        } else {
            &self.keyer
        };
        let source = source_keyer.source(Domain::SourceBudget, client, SourcePrefix::BUDGET);
        let leases = self.quota.leases();
        let mut view = LiveView {
            client,
            host: None,
            global_count: self.quota.global_count(),
            source_count: self.quota.windows().count(source),
            leases_active: leases.active(),
            leases_for_source: leases.active_for(source),
            rate: None,
            fleet: Vec::new(),
        };
        if fleet_budgets.global.is_some() {
            let local = u64::from(view.global_count);
            view.fleet
                .push(self.budget_live(BudgetLevel::Global, 0, local, now_ms));
        }
        if fleet_budgets.source.is_some() {
            let local = u64::from(view.source_count);
            view.fleet
                .push(self.budget_live(BudgetLevel::Source, source, local, now_ms));
        }
        let identity = snap
            .gate
            .identity_header
            .as_deref()
            .filter(|_| fleet_budgets.identity.is_some())
            .and_then(|h| req.headers.lines(h).last())
            .filter(|v| !v.is_empty())
            .map(|v| self.fleet_keyer.identity(v));
        if let Some(id) = identity {
            let local = u64::from(self.quota.windows().count(id));
            view.fleet
                .push(self.budget_live(BudgetLevel::Identity, id, local, now_ms));
        }
        let Some(entry) = snap
            .hosts
            .lookup(req.host)
            .map(|id| &snap.entries[id as usize])
        else {
            return view;
        };
        view.host = Some(entry.label.clone());
        let canonical = crate::path::canonical(req.path, scratch).unwrap_or(b"");
        let policy = match &entry.action {
            HostAction::Proxy(p) => p.route(canonical).map_or(&entry.policy, |r| &r.policy),
            _ => &entry.policy,
        };
        if let Some(pair) = policy.rate_pair.map(|p| p as usize) {
            let limit = snap.gate.rate_pairs.get(pair).map(|p| p.limit as usize);
            let def = limit.and_then(|l| snap.gate.rate_limits.get(l));
            if let (Some(def), Some(Some(slot))) = (def, self.pair_slots.get(pair)) {
                // A fleet-scoped limit's keys are the fleet's.
                let keyer = if def.fleet.is_some() {
                    &self.fleet_keyer
                } else {
                    &self.keyer
                };
                let key = match &def.key {
                    RateKey::Ip => keyer.source(Domain::RateSource, client, SourcePrefix::RATE),
                    RateKey::IpPath => keyer.source_path(client, SourcePrefix::RATE, canonical),
                    RateKey::Header(name) => {
                        let value = req.headers.lines(name).last();
                        keyer.header_or_source(value, client, SourcePrefix::RATE)
                    }
                };
                let peek = self.quota.rate().peek(&def.policy, *slot, key, now_ms);
                view.rate = Some((def.name.clone(), peek.tokens, peek.retry_after_ms));
                if def.fleet.is_some() {
                    let identity = snap.gate.rate_pairs[pair].identity;
                    let live = self.fleet.live(identity, key);
                    view.fleet.push(FleetKeyLive {
                        level: "rate_limit",
                        name: def.name.clone(),
                        shared: live.is_some(),
                        local: u64::from(peek.tokens),
                        fleet: live.and_then(|(_, t)| t).map(u64::from),
                        held: None,
                        pending: live.map_or(0, |(p, _)| p),
                        fallback: self.fleet.fallback,
                    });
                }
            }
        }
        view
    }

    /// A fleet-scoped budget's key as this shard holds it: `local`, its
    /// count in the current window.
    fn budget_live(&self, level: BudgetLevel, key: u64, local: u64, now_ms: u64) -> FleetKeyLive {
        let window_ms = self.quota.windows().window_ms();
        let window = now_ms.saturating_add(self.unix_origin_ms) / window_ms;
        let shared = self
            .fleet
            .windows
            .pending(level.identity(window_ms), key, window);
        let name = match level {
            BudgetLevel::Global => "global",
            BudgetLevel::Source => "source",
            BudgetLevel::Identity => "identity",
            BudgetLevel::Tenant => "tenant",
            BudgetLevel::Principal => "principal",
            BudgetLevel::Resource => "resource",
        };
        FleetKeyLive {
            level: name,
            name: name.to_string(),
            shared: shared.is_some(),
            local,
            fleet: shared.and_then(|(_, _, learned)| learned).map(|(n, _)| n),
            held: shared.and_then(|(_, _, learned)| learned).map(|(_, h)| h),
            pending: shared.map_or(0, |(p, f, _)| p.saturating_add(f)),
            fallback: self.fleet.fallback,
        }
    }
}
