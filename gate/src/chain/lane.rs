//! The lanes: a host whose blocks are few is decided without the chain's
//! general machinery, as the chain would decide it.
//!
//! - A quiet host ([`quiet_host`]: every block off) is decided by its
//!   request limits, then its answer (`quiet_decision`, which
//!   [`Snapshot::decide`] takes for it).
//! - A paying host ([`paying_host`]: a fixed answer whose only blocks are
//!   the budgets and the rate limit) pays them and is answered.
//!
//! [`Snapshot::lane_answer`] finds a request's answer by either lane where
//! its head is parsed. Which hosts take which lane is learned once a
//! snapshot (`GateState::adopt`). No allocation.

use super::decision::{Block, Decision, Request};
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
        } else if paying_host(entry) {
            HostLane::Paying
        } else {
            HostLane::Chain
        }
    }
}

/// Whether every block of `entry` is off in `snap`: no budgets anywhere
/// (step 4 pays nothing, no path is made canonical), no rate limit, and
/// none of the blocks [`no_checks`] names, and not a proxying host (whose
/// route picks its policy). Such a host's chain is the request limits,
/// then its answer (`quiet_decision`); read once a snapshot
/// (`GateState::adopt`).
pub fn quiet_host(snap: &Snapshot, entry: &HostEntry) -> bool {
    !snap.gate.has_budgets()
        && !matches!(entry.action, HostAction::Proxy(_))
        && entry.policy.rate_pair.is_none()
        && no_checks(entry)
}

/// Whether `entry` answers with a fixed answer and its only blocks, if
/// any, are the budgets (step 4) and the rate limit (step 13): none of the
/// blocks [`no_checks`] names (a quiet host with a fixed answer is one).
/// Its chain is the budgets, the request limits, the rate limit, then its
/// answer.
pub fn paying_host(entry: &HostEntry) -> bool {
    matches!(entry.action, HostAction::Respond(_)) && no_checks(entry)
}

/// No connection rate, access list, rule set, HTTPS redirect, robots.txt,
/// maintenance, forward-auth or proof of work.
fn no_checks(entry: &HostEntry) -> bool {
    let (p, x) = (&entry.policy, &entry.extras);
    x.connection_rate.is_none()
        && p.access.is_none()
        && p.rules.is_none()
        && x.https.redirect_port.is_none()
        && x.robots.is_none()
        && x.maintenance.is_none()
        && p.auth.is_none()
        && p.pow.is_none()
        && x.pow.is_none()
}

/// The decision of a quiet host (`quiet_host`): step 8's request limits,
/// else step 16's answer.
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
        if lane == HostLane::Chain {
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
