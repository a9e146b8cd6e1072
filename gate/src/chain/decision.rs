//! What the chain is given and what it answers: a [`Request`] (the facts
//! of one head, borrowed) and its [`Decision`], with the [`Block`] that
//! decided it. Values only, below every step of the chain.

use crate::client::{Arrival, HeaderLines, Peer};
use crate::host::HostId;
use crate::limits::RequestLimits;
use crate::quota::{Bucket, QuotaTicket};
use crate::snapshot::Verdict;
use std::cell::Cell;
use std::net::IpAddr;

/// A request as the chain sees it. Borrowed, no copies.
pub struct Request<'a, H: HeaderLines + ?Sized> {
    pub peer: Peer,
    pub method: &'a [u8],
    pub host: Option<&'a [u8]>,
    /// Raw target as sent.
    pub target: &'a [u8],
    /// Path and query (origin form).
    pub path: &'a [u8],
    pub header_count: usize,
    pub header_bytes: usize,
    pub content_length: Option<u64>,
    pub headers: &'a H,
    /// The request bucket of the connection it came on (step 5), when the
    /// caller keeps one.
    pub connection: Option<&'a Cell<Bucket>>,
    /// The request arrived over TLS (the HTTPS redirect lets it through;
    /// `X-Forwarded-Proto: https`).
    pub tls: bool,
}

/// The chain's answer for one request.
#[derive(Debug)]
pub struct Decision<'s> {
    pub verdict: Verdict<'s>,
    pub host: Option<HostId>,
    /// The limits that apply while the body is read.
    pub limits: RequestLimits,
    /// The resolved client address.
    pub client: IpAddr,
    /// Leases held for the request's life: release them when it ends.
    pub ticket: Option<QuotaTicket>,
    /// Retry-After seconds of a 429.
    pub retry_after_s: u32,
    /// The access list took the credentials: remove `Authorization` before
    /// the upstream.
    pub strip_authorization: bool,
    /// How the client address was learned (Cloudflare: `CF-Ray` is trusted).
    pub via: Arrival,
    /// Close the connection once the answer is sent (over the connection's
    /// request rate).
    pub close: bool,
    /// The step that decided the verdict (for the access log).
    pub step: Block,
    /// What refused, by name, where the step has one: the budget's level,
    /// the rate limit, the rule set, the access list.
    pub policy: Option<&'s str>,
    /// A remembered forward-auth allow's identity lines (`Name: value\r\n`)
    /// to add upstream.
    pub identity: Option<std::sync::Arc<[u8]>>,
    /// A remembered forward-auth refusal to answer (`Verdict::AuthRefusal`).
    pub relay: Option<crate::auth::Relay>,
    /// Where a `Verify` or `Authenticate` verdict suspended the request:
    /// the chain resumes from it (`Start::Resume`) once the check passed.
    pub suspended: Option<Suspended>,
}

impl<'s> Decision<'s> {
    /// A decision of `verdict` by `step` for a request to `host` from
    /// `client` (learned `via`), under `limits`: no leases, no Retry-After,
    /// nothing carried on. The chain starts from one and each step sets
    /// what it decides.
    #[inline(always)]
    pub(super) fn new(
        (verdict, step): (Verdict<'s>, Block),
        host: Option<HostId>,
        limits: RequestLimits,
        (client, via): (IpAddr, Arrival),
    ) -> Decision<'s> {
        Decision {
            verdict,
            host,
            limits,
            client,
            ticket: None,
            retry_after_s: 0,
            strip_authorization: false,
            via,
            close: false,
            step,
            policy: None,
            identity: None,
            relay: None,
            suspended: None,
        }
    }
}

/// The chain's steps by name, for what the access log says decided a
/// request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Step 3: no host takes the request.
    Host,
    /// The path cannot be made canonical.
    Path,
    Budgets,
    ConnectionRate,
    AccessAddress,
    RuleSet,
    Access,
    RateLimit,
    ForwardAuth,
    /// The identity dimensions: tenant, principal and resource budgets,
    /// tenant and principal leases (after forward-auth).
    Identity,
    ProofOfWork,
    RequestLimits,
    HttpsRedirect,
    Robots,
    Maintenance,
    /// Step 17: the host's answer.
    Answer,
}

impl Block {
    /// How many steps there are (every variant is below it).
    pub const COUNT: usize = 16;

    /// The access log's name of the step.
    pub fn name(self) -> &'static str {
        match self {
            Block::Host => "host",
            Block::Path => "path",
            Block::Budgets => "budgets",
            Block::ConnectionRate => "connection_rate",
            Block::AccessAddress => "access_address",
            Block::RuleSet => "rule_set",
            Block::Access => "access_list",
            Block::RateLimit => "rate_limit",
            Block::ForwardAuth => "forward_auth",
            Block::Identity => "identity",
            Block::ProofOfWork => "proof_of_work",
            Block::RequestLimits => "request_limits",
            Block::HttpsRedirect => "https_redirect",
            Block::Robots => "robots",
            Block::Maintenance => "maintenance",
            Block::Answer => "answer",
        }
    }
}

/// Where the chain suspended a request: the step that asked for a check
/// made off the decision, and what the steps before it decided. Made by
/// the chain with its `Verify` or `Authenticate` verdict
/// ([`Decision::suspended`]) and handed back as
/// [`Start::Resume`](super::Start::Resume); the steps up to it are then behind the request
/// (`Flow::step` decides, in one place, what each of them does again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suspended {
    /// The step's place in the chain's order (the first step is 1).
    pub(super) at: u8,
    /// Remove `Authorization` before the upstream (the access list took
    /// the credentials).
    pub(super) strip_authorization: bool,
}

/// Steps 4 to 16 of the chain, in their order: the one list, handed to
/// `$then!` (with `$args` first) as `Block => method` pairs. It makes
/// [`ORDER`] and the calls of `Flow::each_block`, so the two cannot
/// differ; moving a line here is the whole of reordering a step (the
/// chain-order test holds the order to docs/gate.md's table).
macro_rules! chain_order {
    ($then:ident $(, $args:tt)*) => {
        $then!($($args,)* [
            Budgets => budgets,
            ConnectionRate => connection_rate,
            AccessAddress => access_address,
            RuleSet => rule_set,
            RequestLimits => request_limits,
            HttpsRedirect => https_redirect,
            Robots => robots,
            Maintenance => maintenance,
            Access => access_credentials,
            RateLimit => rate_limit,
            ForwardAuth => forward_auth,
            Identity => identity_dims,
            ProofOfWork => proof_of_work,
        ])
    };
}

pub(super) use chain_order;

/// The blocks of a list.
macro_rules! blocks_of {
    ([$($block:ident => $run:ident,)*]) => {
        [$(Block::$block),*]
    };
}

/// Steps 4 to 16 of the chain in the order `Flow::blocks` (`steps`) runs them.
pub const ORDER: [Block; 13] = chain_order!(blocks_of);

/// The place of `block` in [`ORDER`] (the first is 1; 0 for a block that
/// is not one of these steps).
pub const fn ordinal(block: Block) -> u8 {
    let mut i = 0;
    while i < ORDER.len() {
        if ORDER[i] as u8 == block as u8 {
            return i as u8 + 1;
        }
        i += 1;
    }
    0
}
