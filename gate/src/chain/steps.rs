//! Steps 4 to 15 of the chain (forward-auth's, step 14, in `super::auth`; proof
//! of work's, step 16, in `super::pow`; the identity dimensions', step 15, in `super::dims`), one method each on [`Flow`], and the one
//! function that calls them in order ([`Flow::blocks`]).
//!
//! Each block runs only when the host or route applies it, records its own
//! trace step beside the work it describes, and answers
//! `ControlFlow::Continue(())` to let the request go on or
//! `ControlFlow::Break(verdict)` to end it. Shadow mode goes through
//! [`Mode::apply`]. Cost: what each block costs; the steps are inlined into
//! one function, so naming them costs nothing. No allocation.

use super::decision::Suspended;
use super::decision::{chain_order, ordinal, Block, Decision, Request};
use super::state::{GateState, Start};
use super::trace::{AccessStepOutcome, Step, Trace};
use crate::access::{AccessDecision, AddressRefusal, CredentialsFact};
use crate::client::HeaderLines;
use crate::country::{Country, RuleVerdict};
use crate::host::HostAction;
use crate::limits::{LimitRefusal, RequestLimits};
use crate::maintenance::MaintenanceCounters;
use crate::mode::Mode;
use crate::pages::ErrorStatus;
use crate::policy::RequestPolicy;
use crate::ruleset::{RuleRefusal, RuleRequest};
use crate::snapshot::{limit_status, HostEntry, Snapshot, Verdict};
use crate::upstream::Route;
use std::ops::ControlFlow;

/// What a block answers: go on, or the request's verdict.
pub(super) type Next<'s> = ControlFlow<Verdict<'s>>;

/// A block of the chain, run on the flow.
type Run<'s, F> = fn(&mut F) -> Next<'s>;

/// One request's way through a host's blocks: the facts the chain learned
/// before them and the decision so far.
pub(super) struct Flow<'s, 'a, H: HeaderLines + ?Sized, T: Trace> {
    pub snap: &'s Snapshot,
    pub req: &'a Request<'a, H>,
    pub state: &'a mut GateState,
    pub trace: &'a mut T,
    pub now_ms: u64,
    /// Where the chain starts: from the beginning, or resuming a request
    /// suspended for a check made off the decision.
    pub start: Start,
    pub entry: &'s HostEntry,
    /// `CF-IPCountry` of a trusted Cloudflare peer.
    pub country: Option<Country>,
    /// The canonical path (empty when nothing reads it).
    pub canonical: &'a [u8],
    pub route: Option<&'s Route>,
    /// The route's policy, else the host's.
    pub policy: &'s RequestPolicy,
    /// `GET`/`HEAD /robots.txt`.
    pub robots: bool,
    /// The snapshot has budgets (asked once per decision).
    pub budgets: bool,
    /// The decision so far; its verdict is set from what the blocks answer.
    pub decision: &'a mut Decision<'s>,
    /// The rule set (its index) whose `challenge` rule matched the request
    /// (step 7), for proof of work's `when`.
    pub marked: Option<u32>,
}

impl<'s, H: HeaderLines + ?Sized, T: Trace> Flow<'s, '_, H, T> {
    /// The verdict of the host's blocks: the first refusal, else the
    /// host's answer.
    #[inline(always)]
    pub fn verdict(&mut self) -> Verdict<'s> {
        match self.blocks() {
            ControlFlow::Break(verdict) => verdict,
            ControlFlow::Continue(()) => self.answer(),
        }
    }

    /// Steps 4 to 16 of docs/gate.md, in their order ([`ORDER`]); step 17
    /// (the host's answer) follows when all let the request go on. A fresh
    /// request runs each block as it comes; a resumed one through
    /// [`Self::resumed_step`]: two copies of one list, so the fresh
    /// request's steps check nothing about resuming. The block that ends
    /// the request is noted as the decision's step (the one the access
    /// log names).
    #[inline(always)]
    fn blocks(&mut self) -> Next<'s> {
        let next = match self.start {
            Start::Beginning => self.each_block(|flow, _, run| run(flow)),
            Start::Resume(s) => {
                self.each_block(move |flow, block, run| flow.resumed_step(s, block, run))
            }
        };
        if next.is_continue() {
            self.decision.step = Block::Answer;
        }
        next
    }

    /// The chain's blocks up to and including `last` (a request that is
    /// not for a route: proof of work's verify endpoint), until one ends
    /// it; the block that ends it is the decision's step.
    pub(super) fn blocks_through(&mut self, last: Block) -> Next<'s> {
        let last = ordinal(last);
        self.each_block(|flow, block, run| {
            if ordinal(block) <= last {
                run(flow)
            } else {
                ControlFlow::Continue(())
            }
        })
    }

    /// Every block in the chain's order (`chain_order!`), until one
    /// ends the request.
    #[inline(always)]
    fn each_block(
        &mut self,
        step: impl Fn(&mut Self, Block, Run<'s, Self>) -> Next<'s>,
    ) -> Next<'s> {
        let run = |flow: &mut Self, block: Block, run: Run<'s, Self>| {
            let next = step(flow, block, run);
            if next.is_break() {
                flow.decision.step = block;
            }
            next
        };
        macro_rules! calls {
            ($flow:ident, $call:ident, [$($block:ident => $method:ident,)*]) => {
                $($call($flow, Block::$block, Self::$method)?;)*
            };
        }
        chain_order!(calls, self, run);
        ControlFlow::Continue(())
    }

    /// One step of a resumed request. A step at or before the one that
    /// suspended it is behind the request, and this is the one place that
    /// says what it does again: the steps that paid or counted before the
    /// check (budgets, the connection rate, the address list, the rule
    /// set, maintenance, the rate limit) do nothing; the suspending steps
    /// restore what they decided (the access list's credentials, the
    /// provider's allow); the steps that only read the request run again.
    #[inline(never)]
    fn resumed_step(&mut self, s: Suspended, block: Block, run: Run<'s, Self>) -> Next<'s> {
        if ordinal(block) > s.at {
            return run(self);
        }
        match block {
            Block::Access => self.access_resumed(s),
            Block::ForwardAuth => self.forward_auth_resumed(),
            Block::Budgets
            | Block::ConnectionRate
            | Block::AccessAddress
            | Block::RuleSet
            | Block::Maintenance
            | Block::RateLimit => ControlFlow::Continue(()),
            _ => run(self),
        }
    }

    /// Where the request is suspended: at `block`, the step running now.
    #[inline(always)]
    pub(super) fn suspend_at(&self, block: Block) -> Suspended {
        Suspended {
            at: ordinal(block),
            strip_authorization: self.decision.strip_authorization,
        }
    }

    /// Whether the request resumes after a check: the steps before the one
    /// that suspended it did not run again.
    #[inline(always)]
    pub(super) fn resumed(&self) -> bool {
        matches!(self.start, Start::Resume(_))
    }

    /// Step 4: budgets, their leases and the identity budget
    /// (`super::quota`). Runs for every request when the snapshot has
    /// budgets, before any access check: a refused, challenged or
    /// unauthenticated request pays like any other, and a client over
    /// budget gets 429, never a password check. `robots.txt` pays too.
    /// Admitted, the leases ride on the decision's ticket until the answer
    /// is written; refused, 429 with `Retry-After`.
    #[inline(always)]
    fn budgets(&mut self) -> Next<'s> {
        match self.snap.budget_step(
            self.req.headers,
            self.policy,
            self.decision.client,
            false,
            self.state,
            self.now_ms,
            self.trace,
            self.budgets,
        ) {
            Ok(ticket) => {
                self.decision.ticket = ticket;
                ControlFlow::Continue(())
            }
            Err((retry_after_s, policy)) => {
                self.decision.policy = Some(policy);
                self.too_many(retry_after_s)
            }
        }
    }

    /// Step 5: the connection's request rate. Runs when the host sets
    /// `connection_rate` and the request came on a connection with a bucket
    /// (each HTTP/1.1 keep-alive connection has one). Over it: 429 with
    /// `Retry-After`, and the connection closes after the answer.
    #[inline(always)]
    fn connection_rate(&mut self) -> Next<'s> {
        if self.entry.extras.connection_rate.is_none() {
            return ControlFlow::Continue(());
        }
        self.connection_rate_block()
    }

    /// The work of [`Self::connection_rate`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn connection_rate_block(&mut self) -> Next<'s> {
        let (Some(policy), Some(cell)) = (&self.entry.extras.connection_rate, self.req.connection)
        else {
            return ControlFlow::Continue(());
        };
        let mut bucket = cell.get();
        let d = bucket.try_take(policy, self.now_ms);
        cell.set(bucket);
        let retry_after_s = crate::quota::retry_after_s(d.retry_after_ms);
        if self.trace.enabled() {
            self.trace.step(Step::ConnectionRate {
                refused: (!d.allowed).then_some(retry_after_s),
            });
        }
        if d.allowed {
            return ControlFlow::Continue(());
        }
        self.state.counters.connection_rate_refused += 1;
        self.decision.close = true;
        self.too_many(retry_after_s)
    }

    /// A 429 with its Retry-After.
    #[inline(always)]
    pub(super) fn too_many(&mut self, retry_after_s: u32) -> Next<'s> {
        self.decision.retry_after_s = retry_after_s;
        ControlFlow::Break(Verdict::Refuse(ErrorStatus::TooManyRequests))
    }

    /// Step 6: the access list's address side. Runs when the policy names
    /// an access list. A denied address is refused (403) or dropped; a
    /// list that only reads the address is decided whole here and step 12
    /// skips it.
    #[inline(always)]
    fn access_address(&mut self) -> Next<'s> {
        if self.policy.access.is_none() {
            return ControlFlow::Continue(());
        }
        self.access_address_block()
    }

    /// The work of [`Self::access_address`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn access_address_block(&mut self) -> Next<'s> {
        let Some(b) = self.policy.access else {
            return ControlFlow::Continue(());
        };
        let list = &self.snap.gate.access_lists[b.index as usize];
        let decides_all = list.address_decides_all();
        let refused = list.address_only_verdict(self.decision.client);
        if self.trace.enabled() {
            self.trace.step(Step::AccessAddress {
                list: list.name(),
                refused,
                mode: b.mode,
            });
        }
        let counters = &mut self.state.access_counters[b.index as usize];
        // A shadow hit is counted once: here when step 12 will not run,
        // else by step 12.
        let mut not_counted = 0;
        let shadow_hits = if decides_all {
            &mut counters.shadow_hits
        } else {
            &mut not_counted
        };
        match b.mode.apply(refused, shadow_hits) {
            None => {
                if refused.is_none() && decides_all {
                    // Step 12 has nothing left to ask: the list passed.
                    counters.allowed += 1;
                }
                ControlFlow::Continue(())
            }
            Some(AddressRefusal::Drop) => {
                counters.dropped += 1;
                self.decision.policy = Some(list.name());
                ControlFlow::Break(Verdict::Drop)
            }
            Some(AddressRefusal::Deny) => {
                counters.refused += 1;
                self.decision.policy = Some(list.name());
                ControlFlow::Break(Verdict::Refuse(ErrorStatus::Forbidden))
            }
        }
    }

    /// Step 7: the rule set. Runs when the policy names one; never rules on
    /// robots.txt. A deny is refused (403), a drop dropped; an allow ends
    /// the set and the request goes on. The set applies its own mode.
    #[inline(always)]
    fn rule_set(&mut self) -> Next<'s> {
        if self.policy.rules.is_none() {
            return ControlFlow::Continue(());
        }
        self.rule_set_block()
    }

    /// The work of [`Self::rule_set`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn rule_set_block(&mut self) -> Next<'s> {
        let Some(b) = self.policy.rules else {
            return ControlFlow::Continue(());
        };
        let i = b.index as usize;
        let (rule, action, refusal) = if self.robots {
            (None, None, None)
        } else {
            let rr = RuleRequest {
                method: self.req.method,
                path: self.canonical,
                user_agents: self.req.headers.lines("user-agent"),
            };
            let d = self.snap.gate.rule_sets[i].decide(
                &rr,
                &mut self.state.regex_caches[i],
                &mut self.state.rule_counters[i],
                b.mode,
            );
            (d.outcome.rule, d.outcome.action, d.refusal)
        };
        if self.trace.enabled() {
            self.trace.step(Step::RuleSet {
                set: &self.snap.gate.rule_set_names[i],
                rule,
                action,
                mode: b.mode,
                exempt: self.robots,
            });
        }
        if action == Some(crate::ruleset::Action::Challenge) {
            self.marked = Some(b.index);
        }
        match refusal {
            Some(RuleRefusal::Deny) => {
                self.decision.policy = Some(&self.snap.gate.rule_set_names[i]);
                ControlFlow::Break(Verdict::Refuse(ErrorStatus::Forbidden))
            }
            Some(RuleRefusal::Drop) => {
                self.decision.policy = Some(&self.snap.gate.rule_set_names[i]);
                ControlFlow::Break(Verdict::Drop)
            }
            None => ControlFlow::Continue(()),
        }
    }

    /// Step 12: the access list in full, country and credentials. Runs when
    /// the policy names a list that step 6 did not decide whole, after the
    /// HTTPS redirect (no password is asked for over plain HTTP on a host
    /// that redirects), robots.txt and maintenance. Answers
    /// 403, a drop, a 401 challenge, or a deferred password verification
    /// (`Verdict::Verify`: the server verifies off the shard and resumes
    /// the chain after this step). A pass may ask to strip
    /// `Authorization` before the upstream.
    #[inline(always)]
    fn access_credentials(&mut self) -> Next<'s> {
        if self.policy.access.is_none() {
            return ControlFlow::Continue(());
        }
        self.access_credentials_block()
    }

    /// The work of [`Self::access_credentials`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn access_credentials_block(&mut self) -> Next<'s> {
        let gate = &self.snap.gate;
        let Some(b) = self
            .policy
            .access
            .filter(|b| !gate.access_lists[b.index as usize].address_decides_all())
        else {
            return ControlFlow::Continue(());
        };
        let i = b.index as usize;
        let list = &gate.access_lists[i];
        let state = &mut *self.state;
        let out = list.decide(
            self.decision.client,
            self.country,
            self.req.headers,
            Some(&mut state.verify_cache),
            &state.cache_keyer,
            self.now_ms,
        );
        let counters = &mut state.access_counters[i];
        if out.credentials == CredentialsFact::CacheHit {
            counters.cache_hits += 1;
        }
        let (outcome, would) = match out.decision {
            AccessDecision::Pass {
                strip_authorization,
            } => {
                counters.allowed += 1;
                self.decision.strip_authorization = strip_authorization;
                (AccessStepOutcome::Pass, None)
            }
            AccessDecision::Refuse => (
                AccessStepOutcome::Refuse,
                Some(Verdict::Refuse(ErrorStatus::Forbidden)),
            ),
            AccessDecision::Drop => (AccessStepOutcome::Drop, Some(Verdict::Drop)),
            AccessDecision::Challenge(page) => {
                (AccessStepOutcome::Challenge, Some(Verdict::Challenge(page)))
            }
            AccessDecision::Verify(job) => {
                // A shadowed list never costs a verification.
                if b.mode == Mode::Enforce {
                    counters.verifications += 1;
                    // Kept in the shard's state, not in the decision: the
                    // job is large and most decisions have none.
                    state.pending_job = Some(job);
                    // Resumed from this step once verified; the
                    // credentials are the list's to strip.
                    self.decision.suspended = Some(Suspended {
                        at: ordinal(Block::Access),
                        strip_authorization: !list.pass_credentials(),
                    });
                }
                (AccessStepOutcome::Verify, Some(Verdict::Verify(b.index)))
            }
        };
        if self.trace.enabled() {
            self.trace.step(Step::Access {
                list: list.name(),
                outcome,
                credentials: out.credentials,
                mode: b.mode,
            });
        }
        match b.mode.apply(would, &mut counters.shadow_hits) {
            None => ControlFlow::Continue(()),
            Some(v) => {
                self.decision.policy = Some(list.name());
                match v {
                    Verdict::Refuse(_) => counters.refused += 1,
                    Verdict::Drop => counters.dropped += 1,
                    Verdict::Challenge(_) => counters.challenged += 1,
                    _ => {}
                }
                ControlFlow::Break(v)
            }
        }
    }

    /// The access list behind a resumed request: what it decided before
    /// the check (the credentials taken or not), noted as verified.
    fn access_resumed(&mut self, s: Suspended) -> Next<'s> {
        self.decision.strip_authorization = s.strip_authorization;
        if self.trace.enabled() {
            if let Some(b) = self.policy.access {
                self.trace.step(Step::Access {
                    list: self.snap.gate.access_lists[b.index as usize].name(),
                    outcome: AccessStepOutcome::Verified,
                    credentials: CredentialsFact::Deferred,
                    mode: b.mode,
                });
            }
        }
        ControlFlow::Continue(())
    }

    /// Step 13: the route's rate limit (`super::quota`). Runs when the
    /// policy names one, after the access checks; `robots.txt` is exempt
    /// (its only exemption).
    /// Refused, 429 with `Retry-After` (the budgets' leases stay on the
    /// ticket until the answer is written).
    #[inline(always)]
    fn rate_limit(&mut self) -> Next<'s> {
        if self.policy.rate_pair.is_none() {
            return ControlFlow::Continue(());
        }
        self.rate_limit_block()
    }

    /// The work of [`Self::rate_limit`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn rate_limit_block(&mut self) -> Next<'s> {
        if self.robots && self.policy.rate_pair.is_some() {
            self.state.counters.quota_exempt += 1;
        }
        match self.snap.rate_step(
            self.req.headers,
            self.policy,
            self.decision.client,
            self.canonical,
            self.robots,
            self.state,
            self.now_ms,
            self.trace,
        ) {
            Ok(()) => ControlFlow::Continue(()),
            Err((retry_after_s, policy)) => {
                self.decision.policy = Some(policy);
                self.too_many(retry_after_s)
            }
        }
    }

    /// Step 8: the host's request limits (target, header lines and bytes,
    /// the declared body), with the route's body limit in place of the
    /// host's. Always runs. Answers 414, 431 or 413; the limits ride on the
    /// decision for the body read.
    #[inline(always)]
    fn request_limits(&mut self) -> Next<'s> {
        if let Some(r) = self.route {
            self.decision.limits.max_body_bytes = r.limits.max_body_bytes;
        }
        match self
            .snap
            .limit_refusal(&self.decision.limits, self.req, self.trace)
        {
            Some(r) => ControlFlow::Break(Verdict::Refuse(limit_status(r))),
            None => ControlFlow::Continue(()),
        }
    }

    /// Step 9: the HTTPS redirect. Runs when the host has one; a request
    /// that came in plaintext gets a 308 to its https URL before anything
    /// reads its credentials or session (passwords, forward-auth, the
    /// proof-of-work cookie).
    #[inline(always)]
    fn https_redirect(&mut self) -> Next<'s> {
        let Some(port) = self.entry.extras.https.redirect_port else {
            return ControlFlow::Continue(());
        };
        let redirected = !self.req.tls;
        if self.trace.enabled() {
            self.trace.step(Step::HttpsRedirect { redirected });
        }
        if redirected {
            ControlFlow::Break(Verdict::HttpsRedirect(port))
        } else {
            ControlFlow::Continue(())
        }
    }

    /// Step 10: the managed robots.txt. Runs when the host manages one;
    /// answers `GET`/`HEAD /robots.txt` with the file, also on a host behind
    /// a password or a provider (it has paid its budgets).
    #[inline(always)]
    fn robots(&mut self) -> Next<'s> {
        if self.entry.extras.robots.is_none() {
            return ControlFlow::Continue(());
        }
        self.robots_block()
    }

    /// The work of [`Self::robots`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn robots_block(&mut self) -> Next<'s> {
        let Some(r) = &self.entry.extras.robots else {
            return ControlFlow::Continue(());
        };
        let answer = if self.robots {
            r.answer(self.req.method, self.canonical)
        } else {
            None
        };
        if self.trace.enabled() && r.is_managed() {
            self.trace.step(Step::Robots {
                served: answer.is_some(),
            });
        }
        match answer {
            Some(a) => {
                self.state.counters.robots_served += 1;
                ControlFlow::Break(Verdict::Respond(a))
            }
            None => ControlFlow::Continue(()),
        }
    }

    /// Step 11: maintenance. Runs when the host is in maintenance; answers
    /// the maintenance page unless the bypass list's address side allows
    /// the client, before any password check, provider call, rate-limit
    /// token or challenge. The page applies its own mode. A request that
    /// resumes after a password check or a provider call passed it already.
    #[inline(always)]
    fn maintenance(&mut self) -> Next<'s> {
        if self.entry.extras.maintenance.is_none() {
            return ControlFlow::Continue(());
        }
        self.maintenance_block()
    }

    /// The work of [`Self::maintenance`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn maintenance_block(&mut self) -> Next<'s> {
        let (Some(m), Some(id)) = (&self.entry.extras.maintenance, self.decision.host) else {
            return ControlFlow::Continue(());
        };
        let bypassed = m.bypass.is_some_and(|i| {
            self.snap.gate.access_lists[i as usize]
                .rules()
                .check(self.decision.client, self.country)
                .verdict
                == RuleVerdict::Allowed
        });
        let mut scratch_counters = MaintenanceCounters::default();
        let counters = self
            .state
            .maintenance_counters
            .get_mut(id as usize)
            .unwrap_or(&mut scratch_counters);
        let outcome = m.page.decide(bypassed, m.mode, counters);
        if self.trace.enabled() {
            self.trace.step(Step::Maintenance { outcome });
        }
        if outcome.serves() {
            ControlFlow::Break(Verdict::Maintenance(&m.page))
        } else {
            ControlFlow::Continue(())
        }
    }

    /// Step 17: the host's answer: its response, its redirect, or the
    /// route's upstream (404 when no route takes the path).
    #[inline(always)]
    fn answer(&self) -> Verdict<'s> {
        self.snap.host_answer(self.entry, self.route)
    }
}

impl Snapshot {
    /// Step 17 for `entry` with `route` (a proxying host's; `None` for
    /// others and for a path no route takes, answered 404).
    #[inline(always)]
    pub(super) fn host_answer<'s>(
        &'s self,
        entry: &'s HostEntry,
        route: Option<&'s Route>,
    ) -> Verdict<'s> {
        match &entry.action {
            HostAction::Respond(a) => Verdict::Respond(a),
            HostAction::Redirect(r) => Verdict::Redirect(r),
            HostAction::Proxy(_) => match route {
                Some(r) => Verdict::Forward(r, &self.upstreams[r.upstream as usize]),
                None => Verdict::Refuse(ErrorStatus::NotFound),
            },
        }
    }

    /// Step 8 on a decision made outside a host's blocks (an unknown host,
    /// a quiet host): refused with its status when over `decision.limits`;
    /// true when refused.
    #[inline(always)]
    pub(super) fn refuses_limits<H: HeaderLines + ?Sized, T: Trace>(
        &self,
        decision: &mut Decision<'_>,
        req: &Request<'_, H>,
        trace: &mut T,
    ) -> bool {
        let Some(r) = self.limit_refusal(&decision.limits, req, trace) else {
            return false;
        };
        decision.verdict = Verdict::Refuse(limit_status(r));
        decision.step = Block::RequestLimits;
        true
    }

    /// The end of the chain for a request no host takes: step 4 under the
    /// unknown-host policy (its own operation, when the profile names
    /// one), step 8 with the default limits, else the unknown-host answer
    /// (404 or 421).
    pub(super) fn unknown_host<'s, H: HeaderLines + ?Sized, T: Trace>(
        &'s self,
        mut decision: Decision<'s>,
        req: &Request<'_, H>,
        state: &mut GateState,
        now_ms: u64,
        trace: &mut T,
    ) -> Decision<'s> {
        let policy = &self.gate.unknown_host_policy;
        if !self.pays(&mut decision, req, policy, state, now_ms, trace) {
            return decision;
        }
        self.refuses_limits(&mut decision, req, trace);
        decision
    }

    /// Step 8's check: the target and header limits, then the declared
    /// body.
    #[inline(always)]
    fn limit_refusal<H: HeaderLines + ?Sized, T: Trace>(
        &self,
        limits: &RequestLimits,
        req: &Request<'_, H>,
        trace: &mut T,
    ) -> Option<LimitRefusal> {
        let refusal = limits
            .check_head(req.target.len(), req.header_count, req.header_bytes)
            .err()
            .or_else(|| {
                req.content_length
                    .and_then(|n| limits.check_declared_body(n).err())
            });
        if trace.enabled() {
            trace.step(Step::RequestLimits { refusal });
        }
        refusal
    }
}
