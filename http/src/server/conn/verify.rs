//! How a connection waits for a check made off the decision (a password
//! on the verification pool here, a forward-auth call in `forwardauth`),
//! its head decided again afterwards.
//!
//! A connection whose access list asks for a password enters the job in
//! the pool's line and polls for its result every few milliseconds (the
//! check itself takes tens of milliseconds), watching for the client going
//! away; its place is given back however the wait ends.

use super::{Conn, End};
use crate::codec::head::ParsedHead;
use crate::server::leases::Leases;
use crate::server::prepare::{Plan, Resume, Resumption};
use crate::server::stats::ErrorKind;
use crate::server::verify::VerifyPool;
use crate::transport::Transport;
use gapura_gate::access::line::Ticket;
use gapura_gate::access::VerifyJob;
use gapura_gate::chain::Suspended;
use gapura_gate::quota::QuotaTicket;
use gapura_gate::Snapshot;
use monoio::time::Instant;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Longest wait for a password check before answering 429.
const VERIFY_MAX_WAIT_MS: u64 = 10_000;
/// How often a waiting connection looks for its check's result.
const VERIFY_POLL_MS: u64 = 3;

impl<S: Transport> Conn<S> {
    /// A check made off the decision: a password on the verification pool
    /// or a forward-auth provider's call. The head stays in the buffer and
    /// is decided again afterwards, with the leases its budgets took;
    /// `Err` when the connection ends meanwhile (a provider's refusal
    /// relayed, a failure, the client gone).
    pub(super) async fn defer(
        &mut self,
        snap: &Snapshot,
        plan: Plan<'_>,
        head: &ParsedHead,
    ) -> Result<(), End> {
        let leases = |t: Option<QuotaTicket>| t.map(|t| Leases::new(self.shard.clone(), t));
        let (outcome, leases, identity) = match plan {
            Plan::Verify {
                job,
                list,
                ticket,
                suspended,
            } => {
                let held = leases(ticket);
                let outcome = self.verify(job, list).await?;
                (resumes(outcome, list, suspended), held, None)
            }
            Plan::Authenticate {
                provider,
                job,
                ticket,
                suspended,
            } => {
                let held = leases(ticket);
                match self.authenticate(snap, provider, job, head).await {
                    Ok(identity) => (suspended.map(Resume::Passed), held, identity),
                    Err(end) => {
                        self.finish_log(snap);
                        return Err(end);
                    }
                }
            }
            _ => return Ok(()),
        };
        // A check without its place in the chain (never made) decides the
        // head from the beginning.
        self.resume = outcome.map(|outcome| {
            Box::new(Resumption {
                outcome,
                generation: snap.generation,
                leases,
                identity,
            })
        });
        Ok(())
    }

    /// Runs a password check on the verification pool and records how the
    /// request resumes. Polls every few milliseconds, watching for the
    /// client going away; the line's place is given back however it ends.
    pub(super) async fn verify(&mut self, job: Box<VerifyJob>, list: u32) -> Result<Checked, End> {
        if self.io.out_len() > 0 {
            self.flush().await?;
        }
        let shard = self.shard.clone();
        // A refusal of the line (full, or no pool) and a wait that ran out
        // are counted apart: the first says the line is too short for the
        // load, the second that the checks are too slow for it.
        let count = |timeout: bool| {
            if let Some(c) = shard.gate_mut().access_counters.get_mut(list as usize) {
                match timeout {
                    true => c.verify_timeouts += 1,
                    false => c.queue_refusals += 1,
                }
            }
        };
        let Some(pool) = shard.verifier.clone() else {
            count(false);
            return Ok(Checked::Busy);
        };
        let cache_key = job.cache_key();
        let ticket = match pool.submit(*job, shard.now_ms()) {
            Ok(t) => t,
            Err(_) => {
                count(false);
                return Ok(Checked::Busy);
            }
        };
        struct Place<'a> {
            pool: &'a dyn VerifyPool,
            ticket: Option<Ticket>,
        }
        impl Drop for Place<'_> {
            fn drop(&mut self) {
                if let Some(t) = self.ticket.take() {
                    self.pool.cancel(t);
                }
            }
        }
        let mut place = Place {
            pool: &*pool,
            ticket: Some(ticket),
        };
        let deadline = Instant::now() + Duration::from_millis(VERIFY_MAX_WAIT_MS);
        loop {
            if let Some(result) = pool.poll(ticket) {
                place.ticket = None;
                if result.is_ok() {
                    let now_ms = shard.now_ms();
                    shard.gate_mut().verify_cache.insert(cache_key, now_ms);
                    return Ok(Checked::Passed);
                } else {
                    if let Some(c) = shard.gate_mut().access_counters.get_mut(list as usize) {
                        c.verify_failures += 1;
                    }
                    return Ok(Checked::Failed);
                }
            }
            if Instant::now() >= deadline {
                count(true);
                return Ok(Checked::Busy);
            }
            let gone = self.io.stream().socket().map(|s| s.as_raw_fd());
            if gone.is_some_and(super::forward::peer_closed) && !self.io.stream().buffered() {
                return Err(End::Error(ErrorKind::Io));
            }
            monoio::time::sleep(Duration::from_millis(VERIFY_POLL_MS)).await;
        }
    }
}

/// How a password check ended.
pub(super) enum Checked {
    Passed,
    Failed,
    /// The line was full, the wait ran out, or no pool runs checks.
    Busy,
}

/// How a head resumes after its password check for list `list`: a pass
/// from where the chain suspended it (without that place, which the chain
/// always gives with its verdict, from the beginning).
fn resumes(checked: Checked, list: u32, suspended: Option<Suspended>) -> Option<Resume> {
    match checked {
        Checked::Passed => suspended.map(Resume::Passed),
        Checked::Failed => Some(Resume::Failed { list }),
        Checked::Busy => Some(Resume::Busy { list }),
    }
}
