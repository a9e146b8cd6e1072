//! The compiled policy of a snapshot: what the chain's blocks are told.
//!
//! [`GatePolicy`] holds what the whole snapshot shares: how the client
//! address is resolved, the quota tables' sizes and per-shard limits, the
//! named rate limits and their (policy, host) pairs, the operations routes
//! name. [`RequestPolicy`] is what one host or route applies, already merged
//! field by field (defaults, host, route) when the profile was compiled, so
//! the request path reads one small struct and never merges anything.

use crate::access::AccessList;
use crate::client::ClientPolicy;
use crate::custom_pages::{CustomPages, ReplaceUpstream};
use crate::maintenance::Maintenance;
use crate::mode::Mode;
use crate::quota::{Class, QuotaLimits, QuotaSizes, RatePolicy, SourcePrefix};
use crate::robots::Robots;
use crate::ruleset::RuleSet;

/// How a rate limit partitions clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RateKey {
    /// The client address (IPv4 whole, IPv6 by /64).
    Ip,
    /// The client address and the canonical path.
    IpPath,
    /// A header's value (lowercase name); absent or empty falls back to the
    /// address in its own hash domain.
    Header(Box<str>),
}

/// A named rate limit, per shard (a `split` scope already divided).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitDef {
    pub name: String,
    pub policy: RatePolicy,
    pub key: RateKey,
    /// Extra IPv6 buckets taken together with the main one (/56, /48).
    pub ipv6_tiers: Vec<(SourcePrefix, RatePolicy)>,
    pub mode: Mode,
    /// `scope = "fleet"`: the main bucket is shared across the fleet
    /// (`quota::fleet`); `policy` is then the whole limit.
    pub fleet: Option<crate::quota::fleet::FleetRate>,
}

/// One (rate limit, host) pair: its buckets' stable identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RatePair {
    /// Stable across reloads: a hash of the limit's and the host's names.
    pub identity: u64,
    /// Index in [`GatePolicy::rate_limits`].
    pub limit: u32,
}

/// What the whole snapshot shares.
#[derive(Clone, Debug)]
pub struct GatePolicy {
    pub client: ClientPolicy,
    pub quota_sizes: QuotaSizes,
    /// Per-shard budgets and leases (None at a level: no limit there).
    pub quota: QuotaLimits,
    pub quota_mode: Mode,
    /// The credential header whose SHA-256 keys identity budgets.
    pub identity_header: Option<Box<str>>,
    /// The headers the identity dimensions read (lowercase): a tenant's
    /// and a principal's. On a route with forward-auth they are read only
    /// from what the provider's allow copied; elsewhere from the request.
    pub tenant_header: Option<Box<str>>,
    pub principal_header: Option<Box<str>>,
    pub rate_limits: Vec<RateLimitDef>,
    pub rate_pairs: Vec<RatePair>,
    /// Operation names; a route's `operation` indexes this list.
    pub operations: Vec<String>,
    /// What a request no host takes pays: the budgets, in the operation
    /// `[server] unknown_host_operation` names.
    pub unknown_host_policy: RequestPolicy,
    /// `[defaults]`' error pages: what a request no host takes is refused
    /// with, for a browser.
    pub unknown_host_pages: Option<CustomPages>,
    /// Access lists, indexed by [`BlockRef::index`].
    pub access_lists: Vec<AccessList>,
    /// Rule sets (presets included when named), indexed by [`BlockRef::index`];
    /// `rule_set_names[i]` names set `i` for counters and explain.
    pub rule_sets: Vec<RuleSet>,
    pub rule_set_names: Vec<String>,
    /// The list checked at accept: an address it drops or denies is closed
    /// before any byte is read (the address side only).
    pub accept_list: Option<u32>,
    /// Connections per source prefix, checked at accept.
    pub connections: Option<ConnectionLimits>,
    /// The proof-of-work key (`[server] pow_key_file`, opened by the
    /// runtime). `None` with proof of work on: its routes answer 503.
    pub pow_key: Option<crate::pow::PowKey>,
    /// Whether any route has proof of work (the chain then reads the
    /// shard's clock).
    pub pow_in_use: bool,
    /// Forward-auth providers, indexed by [`RequestPolicy::auth`].
    pub auth_providers: Vec<crate::auth::AuthProvider>,
}

/// Limits on connections per source prefix (IPv4 /24, IPv6 /56), checked
/// at accept before any byte is read: a refused connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once per prefix.
    pub concurrent: Option<u32>,
    /// New connections per prefix (a token bucket).
    pub rate: Option<RatePolicy>,
    pub mode: Mode,
}

impl Default for GatePolicy {
    fn default() -> Self {
        GatePolicy {
            client: ClientPolicy::default(),
            quota_sizes: default_quota_sizes(),
            quota: QuotaLimits::default(),
            quota_mode: Mode::Enforce,
            identity_header: None,
            tenant_header: None,
            principal_header: None,
            rate_limits: Vec::new(),
            rate_pairs: Vec::new(),
            operations: Vec::new(),
            unknown_host_policy: RequestPolicy::default(),
            unknown_host_pages: None,
            access_lists: Vec::new(),
            rule_sets: Vec::new(),
            rule_set_names: Vec::new(),
            accept_list: None,
            connections: None,
            pow_key: None,
            pow_in_use: false,
            auth_providers: Vec::new(),
        }
    }
}

impl GatePolicy {
    /// Whether the chain needs the shard's clock (tables keyed by time).
    #[inline]
    pub fn uses_clock(&self) -> bool {
        !self.rate_pairs.is_empty() || self.has_budgets()
    }

    /// Whether a decision needs the shard's clock: the quota tables, or an
    /// access list with users (its verification cache expires).
    #[inline]
    pub fn needs_clock(&self) -> bool {
        self.uses_clock()
            || self.pow_in_use
            || self.access_lists.iter().any(|l| !l.users().is_empty())
    }

    /// Whether any quota level is set (the chain skips the tables otherwise).
    pub fn has_budgets(&self) -> bool {
        let q = &self.quota;
        q.global.is_some()
            || q.source.is_some()
            || q.health.is_some()
            || q.identity.is_some()
            || q.leases.global.is_some()
            || q.leases.per_key.is_some()
            || !q.operations.is_empty()
    }
}

/// The built-in table sizes of one shard (docs/limits.md).
pub fn default_quota_sizes() -> QuotaSizes {
    use crate::quota::Ceiling;
    QuotaSizes {
        rate_entries: 1 << 18,
        policy_slots: 4096,
        slot_grace_ms: 60_000,
        window_ms: 1000,
        // Constants inside the bounds; no profile value reaches these calls.
        window_keys: Ceiling::new(65_536, 4096).expect("constant ceiling"),
        lease_keys: Ceiling::new(65_536, 4096).expect("constant ceiling"),
        max_leases: 16_384,
        operations: 64,
    }
}

/// What one host or route applies, merged when the profile was compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestPolicy {
    /// Index in [`GatePolicy::rate_pairs`].
    pub rate_pair: Option<u32>,
    /// Normal, critical (may use the reserve while shedding) or health probe.
    pub class: Class,
    /// Index in [`GatePolicy::operations`].
    pub operation: Option<u16>,
    /// The access list (address refusal, then passwords).
    pub access: Option<BlockRef>,
    /// The rule set.
    pub rules: Option<BlockRef>,
    /// Proof of work (routes only: the host's settings, the route's
    /// switch).
    pub pow: Option<crate::pow::ProofOfWork>,
    /// The forward-auth provider (routes only): its index in
    /// [`GatePolicy::auth_providers`] and whether its refusals are
    /// answered or only counted (shadow).
    pub auth: Option<BlockRef>,
}

/// A block a host or route applies: its index in the snapshot's list and
/// whether it enforces or only counts (shadow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    pub index: u32,
    pub mode: Mode,
}

/// A host's maintenance: the page, its mode, the list whose address side
/// lets clients past it.
#[derive(Clone, Debug)]
pub struct HostMaintenance {
    pub page: Maintenance,
    pub mode: Mode,
    /// Index in [`GatePolicy::access_lists`].
    pub bypass: Option<u32>,
}

/// What only a host has: its managed robots.txt, maintenance, custom error
/// pages and upstream error replacement.
#[derive(Clone, Debug, Default)]
pub struct HostExtras {
    pub robots: Option<Robots>,
    pub maintenance: Option<HostMaintenance>,
    pub pages: Option<CustomPages>,
    pub replace_upstream: ReplaceUpstream,
    /// Requests on one connection (`connection_rate`): a bucket per
    /// connection.
    pub connection_rate: Option<RatePolicy>,
    /// Messages in one WebSocket tunnel (`websocket`).
    pub websocket: Option<WebSocketLimits>,
    /// The host's proof of work when it or any of its routes has it on:
    /// what the verify endpoint checks against.
    pub pow: Option<crate::pow::ProofOfWork>,
    /// The identity headers of every provider the host's routes ask:
    /// removed from what clients send on every route of the host.
    pub identity_strip: Vec<crate::auth::HeaderMatch>,
    /// Plaintext requests to HTTPS; HSTS on answers over TLS.
    pub https: crate::https::HttpsPolicy,
}

/// A host's limits on the messages a client sends through one WebSocket
/// tunnel. Read from frame headers only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebSocketLimits {
    /// Messages per second with a burst, per tunnel (`None`: no limit).
    pub messages: Option<RatePolicy>,
    /// The largest message, in bytes (`None`: no limit).
    pub max_message_bytes: Option<u64>,
    /// What a message over a limit gets.
    pub on_limit: OnLimit,
}

/// What a WebSocket message over a limit gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnLimit {
    /// Dropped (not relayed); the tunnel stays open.
    #[default]
    Drop,
    /// The tunnel is closed with status 1008 (rate) or 1009 (size).
    Close,
}

impl Default for RequestPolicy {
    fn default() -> Self {
        RequestPolicy {
            rate_pair: None,
            class: Class::Normal,
            operation: None,
            access: None,
            rules: None,
            pow: None,
            auth: None,
        }
    }
}
