//! The lanes: a host whose blocks are few is decided without the chain's
//! general machinery, as the chain would decide it.
//!
//! - A quiet host ([`quiet_host`]: every block off) is decided by its
//!   request limits, then its answer (`quiet_decision`, which
//!   [`Snapshot::decide`] takes for it).
//! - A paying host ([`paying_host`]: a fixed answer whose only blocks are
//!   the budgets and the rate limit) pays them and is answered.
//!
//! Which host may take a lane is derived from the chain's own blocks:
//! each says when it applies to a host ([`applies`], one exhaustive match),
//! and a lane is for a host to which no block of the chain's order applies
//! but the ones the lane runs itself.
//!
//! [`Snapshot::lane_answer`] finds a request's answer by either lane where
//! its head is parsed. Which hosts take which lane is learned once a
//! snapshot (`GateState::adopt`). No allocation.

use super::decision::{Block, Decision, Request, ORDER};
use super::state::GateState;
use super::trace::NoTrace;
use crate::answer::Answer;
use crate::client::{HeaderLines, Peer};
use crate::host::{HostAction, HostId};
use crate::pages::ErrorStatus;
use crate::path::PathScratch;
use crate::quota::QuotaTicket;
use crate::snapshot::{HostEntry, Snapshot, Verdict};
use std::ops::DerefMut;

/// Which lane a host of the adopted snapshot takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum HostLane {
    /// The whole chain.
    #[default]
    Chain,
    /// Every block off ([`quiet_host`]).
    Quiet,
    /// Budgets and the rate limit only, then a fixed answer
    /// ([`paying_host`]).
    Paying,
}

impl HostLane {
    /// The lane of `entry` in `snap`.
    pub(super) fn of(snap: &Snapshot, entry: &HostEntry) -> HostLane {
        if quiet_host(snap, entry) {
            HostLane::Quiet
        } else if paying_host(snap, entry) {
            HostLane::Paying
        } else {
            HostLane::Chain
        }
    }
}

/// Whether `block` can do anything for a request to `entry` in `snap`:
/// what each block of the chain says of a host, read from the settings
/// its step reads. Every block is named here (no wildcard), so a block
/// added to the chain must say when it applies, and the lanes, which are
/// derived from this and nothing else, can never skip it silently.
pub fn applies(snap: &Snapshot, entry: &HostEntry, block: Block) -> bool {
    let (p, x) = (&entry.policy, &entry.extras);
    match block {
        Block::Budgets => snap.gate.has_budgets(),
        Block::ConnectionRate => x.connection_rate.is_some(),
        Block::AccessAddress | Block::Access => p.access.is_some(),
        Block::RuleSet => p.rules.is_some(),
        Block::RequestLimits => true,
        Block::HttpsRedirect => x.https.redirect_port.is_some(),
        Block::Robots => x.robots.is_some(),
        Block::Maintenance => x.maintenance.is_some(),
        Block::RateLimit => p.rate_pair.is_some(),
        Block::ForwardAuth => p.auth.is_some(),
        Block::Identity => snap.gate.quota.dims.any(),
        Block::ProofOfWork => p.pow.is_some() || x.pow.is_some(),
        // Not blocks a host turns on or off: every request meets them.
        Block::Host | Block::Path | Block::Answer => true,
    }
}

/// The blocks the quiet lane runs itself (`quiet_decision`).
pub const QUIET_RUNS: [Block; 1] = [Block::RequestLimits];
/// The blocks the paying lane runs itself ([`Snapshot::lane_answer`]).
pub const PAYING_RUNS: [Block; 3] = [Block::Budgets, Block::RequestLimits, Block::RateLimit];

/// Whether no block of the chain ([`ORDER`]) applies to `entry` in `snap`
/// but those in `runs`.
fn only(snap: &Snapshot, entry: &HostEntry, runs: &[Block]) -> bool {
    ORDER
        .iter()
        .all(|&b| runs.contains(&b) || !applies(snap, entry, b))
}

/// Whether every block of `entry` but the request limits is off in
/// `snap` ([`applies`], [`QUIET_RUNS`]), and it is not a proxying host
/// (whose route picks its policy). Such a host's chain is the request
/// limits, then its answer (`quiet_decision`); read once a snapshot
/// (`GateState::adopt`).
pub fn quiet_host(snap: &Snapshot, entry: &HostEntry) -> bool {
    !matches!(entry.action, HostAction::Proxy(_)) && only(snap, entry, &QUIET_RUNS)
}

/// Whether `entry` answers with a fixed answer and the only blocks that
/// apply to it are the budgets (step 4), the request limits and the rate
/// limit (step 13) ([`applies`], [`PAYING_RUNS`]; a quiet host with a
/// fixed answer is one). Its chain is the budgets, the request limits,
/// the rate limit, then its answer.
pub fn paying_host(snap: &Snapshot, entry: &HostEntry) -> bool {
    matches!(entry.action, HostAction::Respond(_)) && only(snap, entry, &PAYING_RUNS)
}

/// The decision of a quiet host (`quiet_host`): step 8's request limits,
/// else step 17's answer.
#[inline(always)]
pub(super) fn quiet_decision<'s, H: HeaderLines + ?Sized>(
    snap: &'s Snapshot,
    mut decision: Decision<'s>,
    entry: &'s HostEntry,
    req: &Request<'_, H>,
) -> Decision<'s> {
    if !snap.refuses_limits(&mut decision, req, &mut NoTrace) {
        // Not a proxying host (`quiet_host`): no route.
        decision.verdict = snap.host_answer(entry, None);
        decision.step = Block::Answer;
    }
    decision
}

/// A head as the lanes read it: a request without a body.
pub struct LaneHead<'a, H: HeaderLines + ?Sized> {
    pub peer: Peer,
    pub host: Option<&'a [u8]>,
    /// Path and query (origin form).
    pub path: &'a [u8],
    /// The target's bytes, the header lines and their bytes.
    pub facts: (usize, usize, usize),
    pub headers: &'a H,
}

/// What a lane decided for a head.
#[derive(Debug)]
pub enum Lane<'s> {
    /// The host's own answer: its head, the Date line, then `rest` (the
    /// keep-alive rest); the leases of its budgets until it is written.
    Answer {
        host: HostId,
        answer: &'s Answer,
        rest: &'s [u8],
        ticket: Option<QuotaTicket>,
    },
    /// Refused by the budgets or the rate limit (a 429): the decision the
    /// chain makes, to be carried out as any other.
    Decided(Decision<'s>),
}

impl Snapshot {
    /// The decision of a request without a body by its host's lane, where
    /// the host (`head.host`, of the snapshot `state` adopted) is quiet or
    /// paying and its action a fixed answer with a keep-alive rest. For
    /// such a request [`Snapshot::decide`] decides the same: the same
    /// answer for the same host with the same leases, or the same 429,
    /// and changes `state` the same way (tests hold the two to it).
    /// `scratch` is asked for the path's canonical form only on a paying
    /// host. `None`, with nothing paid: decide the request (another host, a
    /// head over a limit, a path that cannot be made canonical, a
    /// `robots.txt`, an answer written in more than one copy). A quiet
    /// host's client is not resolved: its decision does not read it.
    /// Inlined: it is the whole decision of each request it answers.
    #[inline(always)]
    pub fn lane_answer<'s, H: HeaderLines + ?Sized, P: DerefMut<Target = PathScratch>>(
        &'s self,
        state: &mut GateState,
        now_ms: u64,
        scratch: impl FnOnce() -> P,
        head: LaneHead<'_, H>,
    ) -> Option<Lane<'s>> {
        let id = state
            .host_memo
            .lookup(&self.hosts, self.generation, head.host)?;
        let lane = state.lane(self, id);
        // An ACME challenge in flight is the chain's to answer.
        if lane == HostLane::Chain || self.acme.has_http() {
            return None;
        }
        let entry = self.entries.get(id as usize)?;
        let HostAction::Respond(answer) = &entry.action else {
            return None;
        };
        let (target_bytes, header_count, header_bytes) = head.facts;
        // Step 8 first, though the chain asks it after the budgets: a head
        // it refuses takes the chain, which pays, then refuses it.
        entry
            .limits
            .check_head(target_bytes, header_count, header_bytes)
            .ok()?;
        let rest = answer.keep_alive_rest()?;
        let ticket = if lane == HostLane::Paying {
            match self.pay_lane(state, now_ms, &mut scratch(), &head, id, entry)? {
                Ok(ticket) => ticket,
                Err(refused) => return Some(Lane::Decided(refused)),
            }
        } else {
            None
        };
        Some(Lane::Answer {
            host: id,
            answer,
            rest,
            ticket,
        })
    }

    /// A paying host's blocks for a head within its limits: the budgets
    /// (step 4), then the rate limit (step 13), as the chain runs them for
    /// the host. `None` before anything is paid for a path the chain
    /// treats apart (one that cannot be made canonical, `robots.txt`);
    /// `Err` with the chain's decision for a refusal.
    #[inline(always)]
    fn pay_lane<'s, H: HeaderLines + ?Sized>(
        &'s self,
        state: &mut GateState,
        now_ms: u64,
        scratch: &mut PathScratch,
        head: &LaneHead<'_, H>,
        id: HostId,
        entry: &'s HostEntry,
    ) -> Option<Result<Option<QuotaTicket>, Decision<'s>>> {
        let canonical = crate::path::canonical(head.path, scratch).ok()?;
        if canonical == b"/robots.txt" {
            return None;
        }
        let (client, via) = self.gate.client.resolve_addr(head.peer, head.headers);
        let policy = &entry.policy;
        let budgets = self.gate.has_budgets();
        let paid = self.budget_step(
            head.headers,
            policy,
            client,
            false,
            state,
            now_ms,
            &mut NoTrace,
            budgets,
        );
        let (ticket, refused) = match paid {
            Ok(ticket) => {
                let rate = self.rate_step(
                    head.headers,
                    policy,
                    client,
                    canonical,
                    false,
                    state,
                    now_ms,
                    &mut NoTrace,
                );
                match rate {
                    Ok(()) => return Some(Ok(ticket)),
                    Err(r) => (ticket, (Block::RateLimit, r)),
                }
            }
            Err(r) => (None, (Block::Budgets, r)),
        };
        let (step, (retry_after_s, name)) = refused;
        let verdict = Verdict::Refuse(ErrorStatus::TooManyRequests);
        let mut d = Decision::new((verdict, step), Some(id), entry.limits, (client, via));
        d.ticket = ticket;
        d.retry_after_s = retry_after_s;
        d.policy = Some(name);
        Some(Err(d))
    }
}
