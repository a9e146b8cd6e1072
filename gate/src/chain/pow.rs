//! Step 16 of the chain, proof of work, on [`Flow`].

use super::steps::{Flow, Next};
use super::trace::{PowOutcome, Step, Trace};
use crate::client::HeaderLines;
use crate::mode::Mode;
use crate::pages::ErrorStatus;
use crate::pow::{check_cookie, find_cookie, is_browser, COOKIE_NAME};
use crate::ruleset::{Action, RuleRequest, RuleSetCounters};
use crate::snapshot::{PowAsk, Verdict};
use std::ops::ControlFlow;

impl<'s, H: HeaderLines + ?Sized, T: Trace> Flow<'s, '_, H, T> {
    /// Step 16: proof of work. Runs on a route that has it, for every
    /// request, or with `when` only for those the named rule set marked
    /// with a `challenge` rule; robots.txt is exempt. A valid `gapura_pow`
    /// cookie lets the request on (no allocation); otherwise a browser (a
    /// `GET` or `HEAD` accepting `text/html`) gets the challenge page and
    /// anything else a 403 that explains. Without a key: 503, never a
    /// request let through unchallenged. Shadowed: counted and let on.
    #[inline(always)]
    pub(super) fn proof_of_work(&mut self) -> Next<'s> {
        if self.policy.pow.is_none() {
            return ControlFlow::Continue(());
        }
        self.proof_of_work_block()
    }

    /// The work of [`Self::proof_of_work`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn proof_of_work_block(&mut self) -> Next<'s> {
        let policy = self.policy;
        let Some(pow) = policy.pow.as_ref() else {
            return ControlFlow::Continue(());
        };
        if self.robots {
            return self.pow_outcome(PowOutcome::Exempt);
        }
        if let Some(set) = pow.when {
            if !self.marked_by(set) {
                return self.pow_outcome(PowOutcome::NotMarked);
            }
        }
        let Some(key) = &self.snap.gate.pow_key else {
            self.state.counters.pow.no_key += 1;
            self.pow_outcome(PowOutcome::NoKey)?;
            return ControlFlow::Break(Verdict::Refuse(ErrorStatus::ServiceUnavailable));
        };
        let now_s = self.state.unix_s(self.now_ms);
        let client = self.decision.client;
        let cookie = find_cookie(self.req.headers.lines("cookie"), COOKIE_NAME)
            .map(|c| check_cookie(key, pow.host, client, now_s, pow.difficulty, c));
        let counters = &mut self.state.counters.pow;
        let refused = match cookie {
            Some(Ok(())) => {
                counters.cookies_valid += 1;
                return self.pow_outcome(PowOutcome::ValidCookie);
            }
            Some(Err(e)) => {
                counters.cookies_refused += 1;
                Some(e)
            }
            None => None,
        };
        let ask = if is_browser(self.req.method, self.req.headers.lines("accept")) {
            PowAsk::Challenge
        } else {
            PowAsk::NotBrowser
        };
        self.pow_outcome(PowOutcome::Ask {
            ask,
            cookie: refused,
            mode: pow.mode,
        })?;
        let counters = &mut self.state.counters.pow;
        match pow.mode.apply(Some(ask), &mut counters.shadow_hits) {
            None => ControlFlow::Continue(()),
            Some(ask) => {
                match ask {
                    PowAsk::NotBrowser => counters.non_browser += 1,
                    _ => counters.challenges += 1,
                }
                ControlFlow::Break(Verdict::Pow(pow, ask))
            }
        }
    }

    /// Records the step for explain; always goes on (the caller decides).
    #[inline(always)]
    fn pow_outcome(&mut self, outcome: PowOutcome) -> Next<'s> {
        if self.trace.enabled() {
            self.trace.step(Step::ProofOfWork { outcome });
        }
        ControlFlow::Continue(())
    }

    /// Whether rule set `set` marked the request with a `challenge` rule.
    /// After a verified password step 7 did not run again: the set is
    /// asked once more, without counting.
    fn marked_by(&mut self, set: u32) -> bool {
        if self.marked == Some(set) {
            return true;
        }
        if !self.resumed() || self.policy.rules.is_none_or(|b| b.index != set) {
            return false;
        }
        let i = set as usize;
        let rr = RuleRequest {
            method: self.req.method,
            path: self.canonical,
            user_agents: self.req.headers.lines("user-agent"),
        };
        let mut not_counted = RuleSetCounters::default();
        let d = self.snap.gate.rule_sets[i].decide(
            &rr,
            &mut self.state.regex_caches[i],
            &mut not_counted,
            Mode::Enforce,
        );
        d.outcome.action == Some(Action::Challenge)
    }
}
