//! Step 14 of the chain, forward-auth, on [`Flow`].

use super::decision::Block;
use super::steps::{Flow, Next};
use super::trace::{AuthOutcome, Step, Trace};
use crate::auth::{AuthJob, KeyFacts, Remembered};
use crate::client::HeaderLines;
use crate::snapshot::Verdict;
use std::ops::ControlFlow;

impl<'s, H: HeaderLines + ?Sized, T: Trace> Flow<'s, '_, H, T> {
    /// Step 14: forward-auth. Runs on a route that names a provider,
    /// after the rate limit. A remembered allow lets the request on with
    /// its identity headers (no allocation: the lines are shared); without
    /// one the chain stops with `Verdict::Authenticate` and the server asks
    /// the provider, then decides again from the next step
    /// (the request resumed from this step) or relays the provider's refusal; in shadow
    /// mode a refusal or failure is counted and the request goes on.
    /// robots.txt is not exempt: auth protects what the upstream serves.
    #[inline(always)]
    pub(super) fn forward_auth(&mut self) -> Next<'s> {
        if self.policy.auth.is_none() {
            return ControlFlow::Continue(());
        }
        self.forward_auth_block()
    }

    /// The work of [`Self::forward_auth`] once it applies: out of line, so
    /// the chain a request without this block meets stays small.
    #[inline(never)]
    fn forward_auth_block(&mut self) -> Next<'s> {
        let Some(b) = self.policy.auth else {
            return ControlFlow::Continue(());
        };
        let i = b.index;
        let gate = &self.snap.gate;
        let Some(p) = gate.auth_providers.get(i as usize) else {
            return ControlFlow::Continue(());
        };
        let facts = KeyFacts {
            client: self.decision.client,
            scheme: if self.req.tls { b"https" } else { b"http" },
            host: self.req.host.unwrap_or(b""),
            method: self.req.method,
            target: self.req.target,
            headers: self.req.headers,
        };
        let keys = self.state.auth.keys(p, &facts);
        match self.state.auth.lookup(i as usize, keys, self.now_ms) {
            Some(Remembered::Allow(identity)) => {
                let named = identity.is_some();
                self.decision.identity = identity;
                self.auth_outcome(p, AuthOutcome::Remembered { identity: named });
                return ControlFlow::Continue(());
            }
            Some(Remembered::Refusal(relay)) => {
                self.auth_outcome(
                    p,
                    AuthOutcome::RememberedRefusal {
                        status: relay.status,
                    },
                );
                if b.mode == crate::mode::Mode::Shadow {
                    if let Some(c) = self.state.auth.counters.get_mut(i as usize) {
                        c.shadow_hits += 1;
                    }
                    return ControlFlow::Continue(());
                }
                self.decision.relay = Some(relay);
                return ControlFlow::Break(Verdict::AuthRefusal);
            }
            None => {}
        }
        self.state.auth.pending = Some(AuthJob {
            provider: i,
            request_key: keys.0,
            host_key: keys.1,
        });
        self.auth_outcome(p, AuthOutcome::WouldCall);
        self.decision.suspended = Some(self.suspend_at(Block::ForwardAuth));
        ControlFlow::Break(Verdict::Authenticate(b))
    }

    /// Forward-auth behind a resumed request: the provider allowed it.
    pub(super) fn forward_auth_resumed(&mut self) -> Next<'s> {
        let p = self
            .policy
            .auth
            .and_then(|b| self.snap.gate.auth_providers.get(b.index as usize));
        if let Some(p) = p {
            self.auth_outcome(p, AuthOutcome::Allowed);
        }
        ControlFlow::Continue(())
    }

    #[inline(always)]
    fn auth_outcome(&mut self, p: &'s crate::auth::AuthProvider, outcome: AuthOutcome) {
        if self.trace.enabled() {
            self.trace.step(Step::ForwardAuth {
                provider: &p.name,
                endpoint: &p.path,
                outcome,
            });
        }
    }
}
