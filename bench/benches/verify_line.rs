//! The verification line under eight shards' load: the process-wide line
//! behind one `Mutex` (the design it replaced, rebuilt here as the
//! baseline) against each shard's own line in front of the lock-free pool
//! (`gapura_http::server::verify`), in one run, interleaved.
//!
//! Eight shard threads each keep 32 checks waiting (the places a shard's
//! line holds at eight shards) and poll every waiting ticket in turn, as
//! waiting connections do; a check costs about 20 µs of hashing (light, so
//! the line's own cost shows; a real check at 100,000 iterations costs
//! about a thousand times more). Reported: checks completed per second
//! by the same eight check threads, and the mean wall time of a line call
//! (enter or poll) on a shard thread, preemption included (sixteen busy
//! threads share the machine's cores: compare it between designs only on
//! a machine with a core per thread).
//!
//! `cargo bench -p gapura-bench --bench verify_line` (about 12 s).

use gapura_gate::access::line::{Full, JobId, LineConfig, Ticket, VerifyLine};
use gapura_http::server::verify::{Check, Pool};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const SHARDS: u64 = 8;
const WAITING: usize = 32;
const ROUND: Duration = Duration::from_secs(2);

/// About 20 µs of SHA-like mixing.
struct Job {
    client: u64,
}

impl Check for Job {
    type Outcome = u64;
    fn share_key(&self) -> u64 {
        0
    }
    fn client_key(&self) -> u64 {
        self.client
    }
    fn run(&self) -> u64 {
        let mut x = self.client;
        for _ in 0..20_000 {
            x = black_box(x.rotate_left(7) ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(3);
        }
        x
    }
}

/// The earlier design: one line for the process behind one mutex, workers
/// waiting on a condition variable.
type LockedLine = (VerifyLine<Job>, Vec<Option<(Ticket, u64)>>);

struct Locked {
    inner: Mutex<LockedLine>,
    work: Condvar,
}

impl Locked {
    fn start(threads: usize) -> Arc<Locked> {
        let mut config = LineConfig::for_cores(threads);
        config.places_per_slot = 32;
        let places = config.places();
        let l = Arc::new(Locked {
            inner: Mutex::new((VerifyLine::new(config), vec![None; places])),
            work: Condvar::new(),
        });
        for _ in 0..config.slots {
            let l = l.clone();
            std::thread::spawn(move || loop {
                let (id, job): (JobId, Job) = {
                    let mut g = l.inner.lock().unwrap();
                    loop {
                        if let Some(next) = g.0.next_job() {
                            break next;
                        }
                        g = l.work.wait(g).unwrap();
                    }
                };
                let out = job.run();
                let mut g = l.inner.lock().unwrap();
                let (line, results) = &mut *g;
                for t in line.complete(id) {
                    results[t.index()] = Some((t, out));
                }
            });
        }
        l
    }

    fn enter(&self, job: Job) -> Result<Ticket, Full> {
        let mut g = self.inner.lock().unwrap();
        let t = g.0.enqueue(0, job.client, job, 0)?.ticket;
        g.1[t.index()] = None;
        drop(g);
        self.work.notify_one();
        Ok(t)
    }

    fn poll(&self, t: Ticket) -> Option<u64> {
        let mut g = self.inner.lock().unwrap();
        match g.1[t.index()] {
            Some((u, r)) if u == t => {
                g.1[t.index()] = None;
                Some(r)
            }
            _ => None,
        }
    }
}

/// What a design does for one shard thread.
trait Line {
    fn enter(&self, job: Job) -> Result<Ticket, Full>;
    fn poll(&self, t: Ticket) -> Option<u64>;
}

impl Line for Arc<Locked> {
    fn enter(&self, job: Job) -> Result<Ticket, Full> {
        Locked::enter(self, job)
    }
    fn poll(&self, t: Ticket) -> Option<u64> {
        Locked::poll(self, t)
    }
}

impl Line for gapura_http::server::verify::ShardLine<Job> {
    fn enter(&self, job: Job) -> Result<Ticket, Full> {
        gapura_http::server::verify::ShardLine::enter(self, job, 0)
    }
    fn poll(&self, t: Ticket) -> Option<u64> {
        self.outcome(t)
    }
}

/// One shard's load for a round: keeps `WAITING` checks in line, polling
/// each in turn. Returns (checks completed, ns in line calls, calls).
fn shard<L: Line>(line: &L, shard: u64, stop: &AtomicBool) -> (u64, u64, u64) {
    let (mut done, mut ns, mut calls) = (0u64, 0u64, 0u64);
    let mut waiting: Vec<Ticket> = Vec::with_capacity(WAITING);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        while waiting.len() < WAITING {
            n += 1;
            // 16 clients a shard: each within its share of the places.
            let job = Job {
                client: (shard << 32) | (n % 16),
            };
            let t0 = Instant::now();
            let r = line.enter(job);
            ns += t0.elapsed().as_nanos() as u64;
            calls += 1;
            match r {
                Ok(t) => waiting.push(t),
                Err(_) => break,
            }
        }
        let mut i = 0;
        while i < waiting.len() {
            let t0 = Instant::now();
            let r = line.poll(waiting[i]);
            ns += t0.elapsed().as_nanos() as u64;
            calls += 1;
            if r.is_some() {
                done += 1;
                waiting.swap_remove(i);
            } else {
                i += 1;
            }
        }
        std::thread::yield_now();
    }
    (done, ns, calls)
}

fn round<L: Line + Send + 'static>(lines: Vec<L>) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let totals = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let started = Instant::now();
    let handles: Vec<_> = lines
        .into_iter()
        .enumerate()
        .map(|(i, line)| {
            let (stop, totals) = (stop.clone(), totals.clone());
            std::thread::spawn(move || {
                let (d, ns, calls) = shard(&line, i as u64, &stop);
                totals[0].fetch_add(d, Ordering::Relaxed);
                totals[1].fetch_add(ns, Ordering::Relaxed);
                totals[2].fetch_add(calls, Ordering::Relaxed);
            })
        })
        .collect();
    while started.elapsed() < ROUND {
        std::thread::park_timeout(ROUND);
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let done = totals[0].load(Ordering::Relaxed) as f64;
    let ns = totals[1].load(Ordering::Relaxed) as f64;
    let calls = totals[2].load(Ordering::Relaxed).max(1) as f64;
    (done / secs, ns / calls)
}

fn main() {
    let threads = 8;
    println!("| round | design | checks/s | ns per line call |");
    println!("|---|---|---:|---:|");
    for r in 1..=3 {
        // The baseline rebuilt each round so neither design keeps threads
        // spinning through the other's round.
        let locked = Locked::start(threads);
        let (rate, ns) = round((0..SHARDS).map(|_| locked.clone()).collect());
        println!("| {r} | one line, one mutex | {rate:.0} | {ns:.0} |");
        let pool = Pool::<Job>::start(threads, SHARDS as usize).unwrap();
        let (rate, ns) = round((0..SHARDS as usize).map(|s| pool.line(s)).collect());
        println!("| {r} | a line per shard, lock-free pool | {rate:.0} | {ns:.0} |");
    }
}
