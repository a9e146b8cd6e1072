//! The lanes against the chain, request by request: what the lanes'
//! equivalence tests (config) and the `lanes` fuzz target both run. One
//! state takes GETs one at a time, each decided by the lane where one
//! answers (or always by the chain), the leases of the last few held and
//! the older ones given back in order; two runs' outcomes and states are
//! then compared by the caller.

use crate::answer::Answer;
use crate::chain::{Decision, GateState, Lane, LaneHead, NoTrace, Request};
use crate::client::Peer;
use crate::path::{PathScratch, MAX_PATH_BYTES};
use crate::quota::QuotaTicket;
use crate::{Snapshot, Verdict};
use std::collections::VecDeque;

/// A decision as a lane and the chain can both say it: kind, status,
/// host, leases, Retry-After, step, what refused, and the answer's bytes
/// (a host's answer's head and body; empty for anything else).
pub type Outcome = (
    &'static str,
    u16,
    Option<u32>,
    Option<QuotaTicket>,
    u32,
    &'static str,
    Option<String>,
    Vec<u8>,
);

/// The chain's decision as an [`Outcome`].
pub fn outcome(d: &Decision<'_>) -> Outcome {
    let (status, bytes) = match d.verdict {
        Verdict::Respond(a) => (a.status, [a.head(), a.body()].concat()),
        Verdict::Refuse(s) => (s.code(), Vec::new()),
        _ => (1, Vec::new()),
    };
    (
        d.verdict.kind(),
        status,
        d.host,
        d.ticket,
        d.retry_after_s,
        d.step.name(),
        d.policy.map(str::to_string),
        bytes,
    )
}

/// A lane's answer as an [`Outcome`]: what the chain says of a host's
/// answer it lets through. The lane writes the head, the Date line, then
/// `rest`, which must be the blank line and the body.
fn answered(host: u32, answer: &Answer, rest: &[u8], ticket: Option<QuotaTicket>) -> Outcome {
    assert_eq!(rest, [&b"\r\n"[..], answer.body()].concat());
    let bytes = [answer.head(), answer.body()].concat();
    (
        "respond",
        answer.status,
        Some(host),
        ticket,
        0,
        "answer",
        None,
        bytes,
    )
}

/// One state's run of requests.
pub struct LaneRun<'s> {
    snap: &'s Snapshot,
    /// Whether the lane decides where it answers (else the chain alone).
    lane: bool,
    pub state: GateState,
    scratch: Box<PathScratch>,
    held: VecDeque<QuotaTicket>,
    /// Each request's outcome, in order.
    pub outcomes: Vec<Outcome>,
    /// How many requests the lane answered and how many it decided
    /// otherwise (a refusal).
    pub by_lane: (u32, u32),
}

impl<'s> LaneRun<'s> {
    /// A fresh state that has adopted `snap`; `lane`: whether the lane
    /// decides where it answers.
    pub fn new(snap: &'s Snapshot, lane: bool) -> LaneRun<'s> {
        let mut state = GateState::small();
        state.adopt(snap, 0);
        LaneRun {
            snap,
            lane,
            state,
            scratch: Box::new([0u8; MAX_PATH_BYTES]),
            held: VecDeque::new(),
            outcomes: Vec::new(),
            by_lane: (0, 0),
        }
    }

    /// A GET of `path` on `host` from `peer` with `headers` at `now_ms`;
    /// then the leases of all but the last `keep` requests given back.
    pub fn get(
        &mut self,
        (peer, host, path): (Peer, &[u8], &[u8]),
        headers: &[(&str, &[u8])],
        now_ms: u64,
        keep: usize,
    ) {
        let header_bytes = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let head = LaneHead {
            peer,
            host: Some(host),
            path,
            facts: (path.len(), headers.len(), header_bytes),
            headers,
        };
        let scratch = &mut self.scratch;
        let found = if self.lane {
            self.snap
                .lane_answer(&mut self.state, now_ms, || &mut **scratch, head)
        } else {
            None
        };
        let got = match found {
            Some(Lane::Answer {
                host,
                answer,
                rest,
                ticket,
            }) => {
                self.by_lane.0 += 1;
                answered(host, answer, rest, ticket)
            }
            Some(Lane::Decided(d)) => {
                self.by_lane.1 += 1;
                outcome(&d)
            }
            None => {
                let req = Request {
                    peer,
                    method: b"GET",
                    host: Some(host),
                    target: path,
                    path,
                    header_count: headers.len(),
                    header_bytes,
                    content_length: None,
                    headers,
                    connection: None,
                    tls: false,
                };
                let d = self
                    .snap
                    .decide(&req, &mut self.state, now_ms, scratch, &mut NoTrace);
                outcome(&d)
            }
        };
        if let Some(t) = got.3 {
            self.held.push_back(t);
        }
        while self.held.len() > keep {
            if let Some(t) = self.held.pop_front() {
                self.state.release(t);
            }
        }
        self.outcomes.push(got);
    }

    /// Asserts that `other` (the same requests on another state) decided
    /// each one as this run did and counted the same: the chain's, the
    /// budgets' and the rate limits' counters. `what` names the case.
    pub fn assert_same_as(&self, other: &LaneRun<'_>, what: &str) {
        assert_eq!(self.outcomes.len(), other.outcomes.len(), "{what}");
        for (i, (l, w)) in self.outcomes.iter().zip(&other.outcomes).enumerate() {
            assert_eq!(l, w, "{what}: request {i}");
        }
        let (a, b) = (&self.state, &other.state);
        assert_eq!(a.counters, b.counters, "{what}");
        assert_eq!(a.quota.counters, b.quota.counters, "{what}");
        assert_eq!(a.rate_counters, b.rate_counters, "{what}");
    }
}
