//! The verification pool: `max(8, cores)` threads that run PBKDF2 checks for every
//! shard, in the order of one shared line.
//!
//! One line for the whole process behind one mutex: the per-client share,
//! "identical credentials verified once" and arrival order only hold when
//! one structure sees every request. The lock is never held while a check
//! runs, and shards take it only to enter, poll or leave, on a path that is
//! already waiting for a PBKDF2 check.

use gapura_gate::access::line::{Full, LineConfig, Ticket, VerifyLine};
use gapura_gate::access::{VerifyJob, VerifyResult};
use gapura_http::server::verify::VerifyPool;
use std::sync::{Arc, Condvar, Mutex};

struct Inner {
    line: VerifyLine<VerifyJob>,
    /// Results by ticket index; the ticket guards against a reused place.
    results: Vec<Option<(Ticket, VerifyResult)>>,
}

pub struct Pool {
    inner: Mutex<Inner>,
    work: Condvar,
    #[cfg(test)]
    workers: usize,
}

impl Pool {
    /// Starts one worker per slot of a line sized for `cores` cores:
    /// `max(8, cores)` (the line's own sizing), so a small machine still
    /// checks eight cold sign-ins at once rather than queueing them behind
    /// one worker.
    pub fn start(cores: usize) -> std::io::Result<Arc<Pool>> {
        let config = LineConfig::for_cores(cores.max(1));
        let places = config.places();
        let threads = config.slots as usize;
        let pool = Arc::new(Pool {
            inner: Mutex::new(Inner {
                line: VerifyLine::new(config),
                results: vec![None; places],
            }),
            work: Condvar::new(),
            #[cfg(test)]
            workers: threads,
        });
        for i in 0..threads {
            let p = pool.clone();
            std::thread::Builder::new()
                .name(format!("gapura-verify-{i}"))
                .spawn(move || p.worker())?;
        }
        Ok(pool)
    }

    /// Checks waiting in the line and checks running now.
    pub fn load(&self) -> (usize, usize) {
        match self.inner.lock() {
            Ok(inner) => (inner.line.queued_jobs(), inner.line.running_jobs()),
            Err(_) => (0, 0),
        }
    }

    /// Worker threads: one per slot of the line.
    #[cfg(test)]
    pub fn workers(&self) -> usize {
        self.workers
    }

    fn worker(&self) {
        loop {
            let (id, job) = {
                let Ok(mut inner) = self.inner.lock() else {
                    return;
                };
                loop {
                    if let Some(next) = inner.line.next_job() {
                        break next;
                    }
                    inner = match self.work.wait(inner) {
                        Ok(g) => g,
                        Err(_) => return,
                    };
                }
            };
            let result = job.run();
            drop(job);
            let Ok(mut inner) = self.inner.lock() else {
                return;
            };
            let Inner { line, results } = &mut *inner;
            for ticket in line.complete(id) {
                if let Some(slot) = results.get_mut(ticket.index()) {
                    *slot = Some((ticket, result));
                }
            }
        }
    }
}

impl VerifyPool for Pool {
    fn submit(&self, job: VerifyJob, now_ms: u64) -> Result<Ticket, Full> {
        let mut inner = self.inner.lock().map_err(|_| Full::Line)?;
        let entered = inner
            .line
            .enqueue(job.share_key(), job.client_key(), job, now_ms)?;
        if let Some(slot) = inner.results.get_mut(entered.ticket.index()) {
            *slot = None;
        }
        drop(inner);
        self.work.notify_one();
        Ok(entered.ticket)
    }

    fn poll(&self, ticket: Ticket) -> Option<VerifyResult> {
        let mut inner = self.inner.lock().ok()?;
        let slot = inner.results.get_mut(ticket.index())?;
        match slot {
            Some((t, r)) if *t == ticket => {
                let r = *r;
                *slot = None;
                Some(r)
            }
            _ => None,
        }
    }

    fn cancel(&self, ticket: Ticket) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.line.cancel(ticket);
            if let Some(slot) = inner.results.get_mut(ticket.index()) {
                if matches!(slot, Some((t, _)) if *t == ticket) {
                    *slot = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;

    #[test]
    fn an_idle_pool_has_nothing_queued_or_running() {
        assert_eq!(Pool::start(2).unwrap().load(), (0, 0));
    }

    #[test]
    fn the_pool_runs_a_worker_per_slot_and_at_least_eight() {
        assert_eq!(Pool::start(2).unwrap().workers(), 8);
        assert_eq!(Pool::start(1).unwrap().workers(), 8);
        assert_eq!(Pool::start(12).unwrap().workers(), 12);
    }
}
