//! What the chain tells a trace: one [`Step`] per block it ran, with the
//! facts it read. The server's [`NoTrace`] records nothing and its calls
//! compile away; `gapura explain` records them.
//!
//! The blocks' outcomes are named here ([`AccessStepOutcome`],
//! [`QuotaOutcome`], [`AuthOutcome`], [`PowOutcome`]), below the steps
//! that produce them.

use crate::access::CredentialsFact;
use crate::client::Arrival;
use crate::limits::LimitRefusal;
use crate::maintenance::MaintenanceOutcome;
use crate::mode::Mode;
use crate::path::PathError;
use crate::pow::CookieError;
use crate::quota::Level;
use crate::snapshot::PowAsk;
use std::net::IpAddr;

/// One step of the chain, for explain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<'s> {
    Client {
        peer: IpAddr,
        client: IpAddr,
        via: Arrival,
    },
    Host {
        label: Option<&'s str>,
    },
    Path {
        canonical: Result<String, PathError>,
    },
    Route {
        index: Option<usize>,
    },
    /// The budgets' block: budgets, leases, identity budget.
    Budgets {
        outcome: QuotaOutcome,
    },
    /// The connection's request rate: `Some(retry_after_s)` when over it.
    ConnectionRate {
        refused: Option<u32>,
    },
    /// The route's rate limit.
    RateLimit {
        outcome: QuotaOutcome,
    },
    /// The identity dimensions (tenant, principal, resource).
    Identity {
        outcome: QuotaOutcome,
    },
    RequestLimits {
        refusal: Option<LimitRefusal>,
    },
    /// The access list's address side, before the rule set.
    AccessAddress {
        list: &'s str,
        refused: Option<crate::access::AddressRefusal>,
        mode: Mode,
    },
    RuleSet {
        set: &'s str,
        rule: Option<usize>,
        action: Option<crate::ruleset::Action>,
        mode: Mode,
        exempt: bool,
    },
    /// The access list in full: address, country, credentials.
    Access {
        list: &'s str,
        outcome: AccessStepOutcome,
        credentials: CredentialsFact,
        mode: Mode,
    },
    /// The host sends plaintext requests to HTTPS.
    HttpsRedirect {
        redirected: bool,
    },
    Robots {
        served: bool,
    },
    Maintenance {
        outcome: MaintenanceOutcome,
    },
    ProofOfWork {
        outcome: PowOutcome,
    },
    ForwardAuth {
        provider: &'s str,
        endpoint: &'s str,
        outcome: AuthOutcome,
    },
    /// The proof-of-work verify endpoint took the request.
    PowEndpoint {
        post: bool,
    },
}

/// What the access step decided, for explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessStepOutcome {
    Pass,
    Refuse,
    Drop,
    Challenge,
    /// A password must be verified (explain stops here: it never runs PBKDF2).
    Verify,
    /// Verified off the shard and resumed.
    Verified,
}

/// What a quota block (the budgets or the rate limit) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaOutcome {
    /// No budget applies (budgets), or the rate limit's slot is not bound.
    NotApplied,
    /// `GET`/`HEAD /robots.txt` is never limited.
    Exempt,
    Admitted,
    Refused {
        level: Level,
        retry_after_s: u32,
    },
    /// Shadow mode: would have been refused, let through.
    Shadowed {
        level: Level,
    },
}

/// What the forward-auth step did, for explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthOutcome {
    /// A remembered allow (`identity`: it copies identity headers).
    Remembered { identity: bool },
    /// No remembered allow: the provider is asked.
    WouldCall,
    /// The provider allowed it already (the chain resumed after the call).
    Allowed,
    /// A refusal is remembered (`cache.negative_ttl_ms`): answered again.
    RememberedRefusal { status: u16 },
}

/// What the proof-of-work step did, for explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowOutcome {
    /// `GET`/`HEAD /robots.txt` is never challenged.
    Exempt,
    /// `when` names a rule set whose `challenge` rule did not match.
    NotMarked,
    /// Proof of work applies and there is no key: 503.
    NoKey,
    /// A valid cookie: the request goes on.
    ValidCookie,
    /// No valid cookie (`cookie` says why one sent was refused): the
    /// challenge page or the 403 of a client that is not a browser.
    Ask {
        ask: PowAsk,
        cookie: Option<CookieError>,
        mode: Mode,
    },
}

/// Receives the chain's steps. The server's is a no-op.
pub trait Trace {
    fn step(&mut self, step: Step<'_>);
    /// Whether steps are recorded (skips building their facts otherwise).
    fn enabled(&self) -> bool;
}

/// The server's trace: nothing recorded, nothing built.
pub struct NoTrace;

impl Trace for NoTrace {
    #[inline(always)]
    fn step(&mut self, _: Step<'_>) {}
    #[inline(always)]
    fn enabled(&self) -> bool {
        false
    }
}
