//! Where a shard sends password checks: its own verification line, in
//! front of the process's pool of check threads. PBKDF2 never runs on a
//! shard thread; how a connection waits for its check is `conn::verify`.
//!
//! **No lock anywhere.** Each shard owns a [`VerifyLine`] of its own
//! ([`ShardLine`], used from the shard's thread only): the per-client
//! share, "identical credentials verified once" and arrival order hold per
//! shard, and a client is one shard's (connections are steered by source,
//! and a cached verdict is per shard). A shard's line hands the jobs it
//! lets run to the [`Pool`]: each pool thread takes work from a channel of
//! its own (the standard library's, lock-free for senders), the job going
//! to the thread with the least work in hand (one atomic each); a result
//! comes back on the shard's own channel, drained when the shard looks at
//! its line. The only state the shards share is those channels and
//! counters.
//!
//! **Bounds.** A shard's line may run as many jobs as the pool has
//! threads (an idle process lets one shard use them all) and holds
//! `places_per_slot` places per thread, divided among the shards (at
//! least 4 each): about `threads × 32` places in the process, as one line
//! had. A pool thread's queue holds at most what the lines let run, so at
//! most `threads × shards` jobs wait in the pool.

use gapura_gate::access::line::{Full, JobId, LineConfig, Ticket, VerifyLine};
use gapura_gate::access::{VerifyJob, VerifyResult};
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// What a shard's connections ask of password checks.
pub trait VerifyPool {
    /// Enters a job. `Err` when the line (or this client's share) is full:
    /// answer 429 with `Retry-After: 1`.
    fn submit(&self, job: VerifyJob, now_ms: u64) -> Result<Ticket, Full>;
    /// The result, once the job has run.
    fn poll(&self, ticket: Ticket) -> Option<VerifyResult>;
    /// The waiter left (client gone, wait over): frees its place.
    fn cancel(&self, ticket: Ticket);
}

/// A check the pool runs: a password job, or (benchmarks, tests) anything
/// with the same keys.
pub trait Check: Send + 'static {
    type Outcome: Copy + Send + 'static;
    /// Equal for identical credentials from the same client; 0: never
    /// shared.
    fn share_key(&self) -> u64;
    /// The client's keyed hash, for its share of the line.
    fn client_key(&self) -> u64;
    /// The costly part: pool threads only.
    fn run(&self) -> Self::Outcome;
}

impl Check for VerifyJob {
    type Outcome = VerifyResult;
    fn share_key(&self) -> u64 {
        VerifyJob::share_key(self)
    }
    fn client_key(&self) -> u64 {
        VerifyJob::client_key(self)
    }
    fn run(&self) -> VerifyResult {
        VerifyJob::run(self)
    }
}

/// One job on its way to a pool thread, and where its result goes.
struct Work<J: Check> {
    job: J,
    id: JobId,
    reply: Sender<(JobId, J::Outcome)>,
}

struct Thread<J: Check> {
    tx: Sender<Work<J>>,
    /// Jobs sent to the thread and not finished.
    load: AtomicUsize,
}

/// The process's check threads, shared by every shard.
pub struct Pool<J: Check = VerifyJob> {
    threads: Vec<Thread<J>>,
    /// Each shard's line's sizes.
    line: LineConfig,
    /// Jobs waiting in the shards' lines, per shard (each shard writes its
    /// own), and jobs running on a thread now.
    queued: Box<[AtomicUsize]>,
    running: AtomicUsize,
}

impl<J: Check> Pool<J> {
    /// Starts `max(8, cores)` threads (the line's sizing: a small machine
    /// still checks eight cold sign-ins at once) for `shards` shards.
    pub fn start(cores: usize, shards: usize) -> std::io::Result<Arc<Pool<J>>> {
        let shards = shards.max(1);
        let mut line = LineConfig::for_cores(cores.max(1));
        line.places_per_slot = (line.places_per_slot / shards as u32).max(4);
        let mut receivers = Vec::new();
        let threads = (0..line.slots)
            .map(|_| {
                let (tx, rx) = channel();
                receivers.push(rx);
                Thread {
                    tx,
                    load: AtomicUsize::new(0),
                }
            })
            .collect();
        let pool = Arc::new(Pool {
            threads,
            line,
            queued: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
            running: AtomicUsize::new(0),
        });
        for (i, rx) in receivers.into_iter().enumerate() {
            let p = Arc::downgrade(&pool);
            std::thread::Builder::new()
                .name(format!("gapura-verify-{i}"))
                .spawn(move || worker(i, rx, p))?;
        }
        Ok(pool)
    }

    /// Checks waiting (in the shards' lines and on their way to a
    /// thread) and checks running now.
    pub fn load(&self) -> (usize, usize) {
        let queued: usize = self.queued.iter().map(|q| q.load(Ordering::Relaxed)).sum();
        let sent: usize = self
            .threads
            .iter()
            .map(|t| t.load.load(Ordering::Relaxed))
            .sum();
        let running = self.running.load(Ordering::Relaxed);
        (queued + sent.saturating_sub(running), running)
    }

    /// Threads.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Shard `shard`'s line, for its thread.
    pub fn line(self: &Arc<Self>, shard: usize) -> ShardLine<J> {
        let (tx, rx) = channel();
        ShardLine {
            pool: self.clone(),
            shard,
            tx,
            rx,
            inner: RefCell::new(Inner {
                line: VerifyLine::new(self.line),
                results: vec![None; self.line.places()],
            }),
        }
    }

    /// Sends a job to the thread with the least work in hand.
    fn dispatch(&self, work: Work<J>) {
        let Some(t) = self
            .threads
            .iter()
            .min_by_key(|t| t.load.load(Ordering::Relaxed))
        else {
            return;
        };
        t.load.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = t.tx.send(work) {
            // The thread is gone (the process is ending): the result never
            // comes, and the waiter's deadline answers it.
            t.load.fetch_sub(1, Ordering::Relaxed);
            drop(e);
        }
    }
}

/// A pool thread: runs what it is sent until the pool is gone.
fn worker<J: Check>(i: usize, rx: Receiver<Work<J>>, pool: std::sync::Weak<Pool<J>>) {
    while let Ok(w) = rx.recv() {
        let Some(p) = pool.upgrade() else { return };
        p.running.fetch_add(1, Ordering::Relaxed);
        let outcome = w.job.run();
        drop(w.job);
        p.running.fetch_sub(1, Ordering::Relaxed);
        p.threads[i].load.fetch_sub(1, Ordering::Relaxed);
        drop(p);
        let _ = w.reply.send((w.id, outcome));
    }
}

struct Inner<J: Check> {
    line: VerifyLine<J>,
    /// Results by ticket index; the ticket guards against a reused place.
    results: Vec<Option<(Ticket, J::Outcome)>>,
}

/// One shard's line in front of the pool: used from the shard's thread
/// only (not `Sync`), so it takes no lock.
pub struct ShardLine<J: Check = VerifyJob> {
    pool: Arc<Pool<J>>,
    shard: usize,
    tx: Sender<(JobId, J::Outcome)>,
    rx: Receiver<(JobId, J::Outcome)>,
    inner: RefCell<Inner<J>>,
}

impl<J: Check> ShardLine<J> {
    /// Takes the results that came back, and hands the pool what the line
    /// lets run now (when anything changed: a result, or `changed`).
    fn turn(&self, inner: &mut Inner<J>, mut changed: bool) {
        let Inner { line, results } = inner;
        while let Ok((id, outcome)) = self.rx.try_recv() {
            changed = true;
            for ticket in line.complete(id) {
                if let Some(slot) = results.get_mut(ticket.index()) {
                    *slot = Some((ticket, outcome));
                }
            }
        }
        if !changed {
            return;
        }
        while let Some((id, job)) = line.next_job() {
            let reply = self.tx.clone();
            self.pool.dispatch(Work { job, id, reply });
        }
        if let Some(q) = self.pool.queued.get(self.shard) {
            q.store(line.queued_jobs(), Ordering::Relaxed);
        }
    }

    /// Enters a job (see [`VerifyPool::submit`]).
    pub fn enter(&self, job: J, now_ms: u64) -> Result<Ticket, Full> {
        let mut inner = self.inner.borrow_mut();
        let (share, client) = (job.share_key(), job.client_key());
        let entered = inner.line.enqueue(share, client, job, now_ms)?;
        if let Some(slot) = inner.results.get_mut(entered.ticket.index()) {
            *slot = None;
        }
        self.turn(&mut inner, true);
        Ok(entered.ticket)
    }

    /// The outcome of a ticket's job, once it has run.
    pub fn outcome(&self, ticket: Ticket) -> Option<J::Outcome> {
        let mut inner = self.inner.borrow_mut();
        self.turn(&mut inner, false);
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

    /// Gives a ticket's place back.
    pub fn leave(&self, ticket: Ticket) {
        let mut inner = self.inner.borrow_mut();
        inner.line.cancel(ticket);
        if let Some(slot) = inner.results.get_mut(ticket.index()) {
            if matches!(slot, Some((t, _)) if *t == ticket) {
                *slot = None;
            }
        }
        self.turn(&mut inner, true);
    }
}

impl VerifyPool for ShardLine<VerifyJob> {
    fn submit(&self, job: VerifyJob, now_ms: u64) -> Result<Ticket, Full> {
        self.enter(job, now_ms)
    }

    fn poll(&self, ticket: Ticket) -> Option<VerifyResult> {
        self.outcome(ticket)
    }

    fn cancel(&self, ticket: Ticket) {
        self.leave(ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A check that waits until `hold` is let go (when it has one) and
    /// says its client's key back.
    struct Job {
        share: u64,
        client: u64,
        hold: Option<Arc<AtomicBool>>,
    }

    fn job(share: u64, client: u64) -> Job {
        Job {
            share,
            client,
            hold: None,
        }
    }

    impl Check for Job {
        type Outcome = u64;
        fn share_key(&self) -> u64 {
            self.share
        }
        fn client_key(&self) -> u64 {
            self.client
        }
        fn run(&self) -> u64 {
            while self
                .hold
                .as_ref()
                .is_some_and(|h| !h.load(Ordering::Acquire))
            {
                std::thread::yield_now();
            }
            self.client
        }
    }

    fn wait(line: &ShardLine<Job>, t: Ticket) -> u64 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(r) = line.outcome(t) {
                return r;
            }
            assert!(std::time::Instant::now() < deadline, "no result");
            std::thread::yield_now();
        }
    }

    #[test]
    fn the_pool_runs_a_thread_per_slot_and_at_least_eight() {
        assert_eq!(Pool::<Job>::start(2, 1).unwrap().threads(), 8);
        assert_eq!(Pool::<Job>::start(12, 4).unwrap().threads(), 12);
    }

    #[test]
    fn every_shards_jobs_run_and_come_back_to_their_own_line() {
        let pool = Pool::<Job>::start(2, 3).unwrap();
        let handles: Vec<_> = (0..3u64)
            .map(|s| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let line = pool.line(s as usize);
                    for n in 0..200u64 {
                        let client = (s << 32) | n;
                        let t = line.enter(job(0, client), 0).unwrap();
                        assert_eq!(wait(&line, t), client);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(pool.load(), (0, 0));
    }

    #[test]
    fn one_client_gets_its_share_of_a_shards_line_and_no_more() {
        let pool = Pool::<Job>::start(2, 8).unwrap();
        let line = pool.line(0);
        let hold = Arc::new(AtomicBool::new(false));
        let held = |client| Job {
            hold: Some(hold.clone()),
            ..job(0, client)
        };
        // 32 / 8 shards = 4 places a thread: 32 places on this shard, of
        // which one client holds at most 16.
        let entered = (0..40).filter(|_| line.enter(held(7), 0).is_ok()).count();
        assert_eq!(entered, 16);
        assert_eq!(line.enter(held(7), 0), Err(Full::Client));
        let others = (8..40).filter(|&c| line.enter(held(c), 0).is_ok()).count();
        assert_eq!(others, 16, "the rest of the shard's 32 places");
        assert_eq!(line.enter(held(99), 0), Err(Full::Line));
        let (queued, running) = pool.load();
        assert_eq!(queued + running, 32, "8 sent to the threads, 24 in line");
        hold.store(true, Ordering::Release);
    }

    #[test]
    fn identical_credentials_are_checked_once() {
        let pool = Pool::<Job>::start(2, 1).unwrap();
        let line = pool.line(0);
        let hold = Arc::new(AtomicBool::new(false));
        let held = || Job {
            hold: Some(hold.clone()),
            ..job(5, 1)
        };
        let a = line.enter(held(), 0).unwrap();
        let b = line.enter(held(), 0).unwrap();
        hold.store(true, Ordering::Release);
        assert_eq!((wait(&line, a), wait(&line, b)), (1, 1));
        let (queued, running) = pool.load();
        assert_eq!((queued, running), (0, 0));
    }

    #[test]
    fn a_place_left_is_free_again_and_a_late_result_is_dropped() {
        let pool = Pool::<Job>::start(2, 1).unwrap();
        let line = pool.line(0);
        let t = line.enter(job(0, 3), 0).unwrap();
        line.leave(t);
        assert_eq!(line.outcome(t), None);
        let u = line.enter(job(0, 3), 0).unwrap();
        assert_eq!(wait(&line, u), 3);
    }
}
