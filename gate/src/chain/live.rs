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
        let source = self
            .keyer
            .source(Domain::SourceBudget, client, SourcePrefix::BUDGET);
        let leases = self.quota.leases();
        let mut view = LiveView {
            client,
            host: None,
            global_count: self.quota.global_count(),
            source_count: self.quota.windows().count(source),
            leases_active: leases.active(),
            leases_for_source: leases.active_for(source),
            rate: None,
        };
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
                let key = match &def.key {
                    RateKey::Ip => {
                        self.keyer
                            .source(Domain::RateSource, client, SourcePrefix::RATE)
                    }
                    RateKey::IpPath => {
                        self.keyer
                            .source_path(client, SourcePrefix::RATE, canonical)
                    }
                    RateKey::Header(name) => {
                        let value = req.headers.lines(name).last();
                        self.keyer
                            .header_or_source(value, client, SourcePrefix::RATE)
                    }
                };
                let peek = self.quota.rate().peek(&def.policy, *slot, key, now_ms);
                view.rate = Some((def.name.clone(), peek.tokens, peek.retry_after_ms));
            }
        }
        view
    }
}
