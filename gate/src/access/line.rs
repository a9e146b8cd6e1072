//! The verification line: who gets a PBKDF2 slot next, as pure data.
//!
//! A cache miss with readable credentials becomes a [`super::VerifyJob`];
//! the request waits in this line for one of the pool's slots. The line is
//! bounded three ways and answers every overflow the same way (429 with
//! `Retry-After: 1`):
//!
//! - **places**: `slots × places_per_slot` requests waiting or running in
//!   all (32 per slot, 256 at 8 slots);
//! - **per-client share**: `client_places` places per client (16), queued
//!   and running together, counted in a table of `client_stripes` counters
//!   (1,024) indexed by the client's keyed hash; two clients sharing a
//!   stripe share its count, which can only refuse early, never admit more;
//! - **maximum wait**: a place older than `max_wait_ms` (10 s) is expired.
//!
//! Who runs next: at most `slots` jobs run at once; a free slot goes to the
//! first queued job in arrival order whose client runs fewer than
//! `client_running` (2) jobs, so one client's burst is overtaken by others.
//! Identical credentials (the same share key: same user, client and
//! credentials) are verified once: a later arrival joins the first job,
//! queued or running, and gets its result. The access list gives every
//! request such a key, a name nobody has included (its job fails the same
//! way for every joiner), so an unknown name queues, joins and waits as a
//! known one does; a share key of 0 never joins.
//!
//! Leaving: [`VerifyLine::cancel`] (the client went away) frees the place at
//! once. A queued job whose places are all gone is dropped unrun; a running
//! one completes, and its result may still fill the cache
//! ([`VerifyLine::complete`] returns the job's payload either way).
//!
//! Costs: every array is allocated once at construction; enqueue, cancel,
//! complete and expire allocate nothing. Enqueue scans the share keys of
//! live jobs (contiguous `u64`s, at most `places`) and [`VerifyLine::next_job`]
//! walks the queued jobs in arrival order: O(line length), a few hundred
//! comparisons at the defaults. Time is an argument.
//!
//! **Threads.** The line is single-threaded: the runtime gives each shard
//! its own (`gapura_http::server::verify::ShardLine`), in front of one
//! pool of check threads, so no lock is taken to enter, poll or leave. The
//! per-client share and the once-only rule hold per shard (a client is
//! steered to one shard by its address); each pool thread serves the
//! shards' jobs in arrival order.

use std::fmt;

/// Sizes of the line, fixed at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineConfig {
    /// Jobs that may run at once (the pool's threads): `max(8, cores)`.
    pub slots: u32,
    /// Places per slot (32).
    pub places_per_slot: u32,
    /// Places one client may hold, queued and running together (16).
    pub client_places: u32,
    /// Jobs one client may have running at once (2).
    pub client_running: u32,
    /// Longest a place may wait before it is answered 429 (10 s).
    pub max_wait_ms: u64,
    /// Counters the per-client shares are striped over: a power of two (1,024).
    pub client_stripes: usize,
}

impl LineConfig {
    /// The seed's sizes for a machine with `cores` cores.
    pub fn for_cores(cores: usize) -> LineConfig {
        LineConfig {
            slots: cores.clamp(8, 1024) as u32,
            places_per_slot: 32,
            client_places: 16,
            client_running: 2,
            max_wait_ms: 10_000,
            client_stripes: 1024,
        }
    }

    /// Total places: `slots × places_per_slot`.
    pub fn places(&self) -> usize {
        self.slots as usize * self.places_per_slot as usize
    }
}

/// Why a request could not enter the line. Both are answered 429 with
/// `Retry-After: 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// Every place is taken.
    Line,
    /// The client already holds its share of places.
    Client,
}

/// A request's place in the line. Stale tickets (a place since reused) are
/// recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    place: u32,
    generation: u32,
}

impl Ticket {
    /// A small index (below the line's places) the runtime can use to keep
    /// the waiter's wake-up slot in a flat array.
    pub fn index(&self) -> usize {
        self.place as usize
    }
}

/// A job handed to a pool worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JobId {
    job: u32,
    generation: u32,
}

/// What [`VerifyLine::enqueue`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entered {
    pub ticket: Ticket,
    /// The request joined a job for identical credentials already in the line.
    pub joined: bool,
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum JobState {
    Free,
    Queued,
    Running,
}

struct Place {
    generation: u32,
    job: u32,
    stripe: u32,
    arrived_ms: u64,
    /// Arrival order, for expiry (doubly linked).
    prev: u32,
    next: u32,
    /// Other places of the same job (doubly linked).
    job_prev: u32,
    job_next: u32,
    in_use: bool,
}

struct Job<P> {
    generation: u32,
    state: JobState,
    stripe: u32,
    /// First place waiting on this job, or NONE.
    waiters: u32,
    waiter_count: u32,
    /// Queued jobs in arrival order (doubly linked).
    prev: u32,
    next: u32,
    payload: Option<P>,
}

/// The line. `P` is what a worker needs to run a job (a
/// [`super::VerifyJob`] plus whatever the runtime routes results by); it is
/// stored once per job and moved out to the worker by [`VerifyLine::next_job`].
pub struct VerifyLine<P> {
    config: LineConfig,
    places: Box<[Place]>,
    jobs: Box<[Job<P>]>,
    /// Share key of each job: 0 for a free job or one that never joins.
    share_keys: Box<[u64]>,
    free_places: u32,
    free_jobs: u32,
    /// Oldest and newest place (arrival order).
    oldest: u32,
    newest: u32,
    /// First and last queued job (arrival order).
    queue_head: u32,
    queue_tail: u32,
    /// Places held per client stripe.
    stripe_places: Box<[u16]>,
    /// Running jobs per client stripe.
    stripe_running: Box<[u16]>,
    used_places: u32,
    running: u32,
    queued: u32,
}

impl<P> fmt::Debug for VerifyLine<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifyLine")
            .field("places", &self.used_places)
            .field("queued", &self.queued)
            .field("running", &self.running)
            .finish_non_exhaustive()
    }
}

impl<P> VerifyLine<P> {
    /// An empty line. Allocates every array once.
    ///
    /// # Panics
    /// If a size is 0, `client_stripes` is not a power of two, or
    /// `client_places` exceeds 65,535.
    pub fn new(config: LineConfig) -> VerifyLine<P> {
        assert!(config.slots > 0 && config.places_per_slot > 0);
        assert!(config.client_places > 0 && config.client_places <= u32::from(u16::MAX));
        assert!(config.client_running > 0 && config.client_running <= u32::from(u16::MAX));
        assert!(config.client_stripes.is_power_of_two());
        let n = config.places();
        assert!(n + (config.slots as usize) < NONE as usize);
        let places = (0..n)
            .map(|i| Place {
                generation: 0,
                job: NONE,
                stripe: 0,
                arrived_ms: 0,
                prev: NONE,
                next: if i + 1 < n { i as u32 + 1 } else { NONE },
                job_prev: NONE,
                job_next: NONE,
                in_use: false,
            })
            .collect();
        // Live jobs: each queued one holds a place, and at most `slots` run
        // (possibly with no place left), so `places + slots` never run out.
        let m = n + config.slots as usize;
        let jobs = (0..m)
            .map(|i| Job {
                generation: 0,
                state: JobState::Free,
                stripe: 0,
                waiters: NONE,
                waiter_count: 0,
                prev: NONE,
                next: if i + 1 < m { i as u32 + 1 } else { NONE },
                payload: None,
            })
            .collect();
        VerifyLine {
            config,
            places,
            jobs,
            share_keys: vec![0; m].into_boxed_slice(),
            free_places: 0,
            free_jobs: 0,
            oldest: NONE,
            newest: NONE,
            queue_head: NONE,
            queue_tail: NONE,
            stripe_places: vec![0; config.client_stripes].into_boxed_slice(),
            stripe_running: vec![0; config.client_stripes].into_boxed_slice(),
            used_places: 0,
            running: 0,
            queued: 0,
        }
    }

    pub fn config(&self) -> &LineConfig {
        &self.config
    }

    /// Places taken (queued and running requests).
    pub fn places_used(&self) -> usize {
        self.used_places as usize
    }

    /// Jobs waiting for a slot.
    pub fn queued_jobs(&self) -> usize {
        self.queued as usize
    }

    /// Jobs running.
    pub fn running_jobs(&self) -> usize {
        self.running as usize
    }

    fn stripe(&self, client_key: u64) -> u32 {
        (client_key as usize & (self.config.client_stripes - 1)) as u32
    }

    /// Takes a place for a request. `share_key`: identical credentials from
    /// the same client (0: never shared); `client_key`: the client's keyed
    /// hash; `payload`: what a worker needs, kept only when a new job is
    /// made (a joiner's is dropped). O(live jobs), no allocation.
    pub fn enqueue(
        &mut self,
        share_key: u64,
        client_key: u64,
        payload: P,
        now_ms: u64,
    ) -> Result<Entered, Full> {
        let stripe = self.stripe(client_key);
        if self.free_places == NONE {
            return Err(Full::Line);
        }
        if u32::from(self.stripe_places[stripe as usize]) >= self.config.client_places {
            return Err(Full::Client);
        }
        let existing = if share_key == 0 {
            None
        } else {
            self.share_keys.iter().position(|&k| k == share_key)
        };
        let (job, joined) = match existing {
            Some(j) => (j as u32, true),
            None => {
                // Never taken: jobs outnumber places by `slots` (see `new`).
                if self.free_jobs == NONE {
                    return Err(Full::Line);
                }
                let j = self.free_jobs;
                let job = &mut self.jobs[j as usize];
                self.free_jobs = job.next;
                job.state = JobState::Queued;
                job.stripe = stripe;
                job.waiters = NONE;
                job.waiter_count = 0;
                job.payload = Some(payload);
                job.prev = self.queue_tail;
                job.next = NONE;
                self.share_keys[j as usize] = share_key;
                if self.queue_tail == NONE {
                    self.queue_head = j;
                } else {
                    self.jobs[self.queue_tail as usize].next = j;
                }
                self.queue_tail = j;
                self.queued += 1;
                (j, false)
            }
        };
        // Take the place.
        let p = self.free_places;
        let head = self.jobs[job as usize].waiters;
        let place = &mut self.places[p as usize];
        self.free_places = place.next;
        place.in_use = true;
        place.job = job;
        place.stripe = stripe;
        place.arrived_ms = now_ms;
        place.prev = self.newest;
        place.next = NONE;
        place.job_prev = NONE;
        place.job_next = head;
        let generation = place.generation;
        if head != NONE {
            self.places[head as usize].job_prev = p;
        }
        let job_entry = &mut self.jobs[job as usize];
        job_entry.waiters = p;
        job_entry.waiter_count += 1;
        if self.newest == NONE {
            self.oldest = p;
        } else {
            self.places[self.newest as usize].next = p;
        }
        self.newest = p;
        self.stripe_places[stripe as usize] += 1;
        self.used_places += 1;
        Ok(Entered {
            ticket: Ticket {
                place: p,
                generation,
            },
            joined,
        })
    }

    /// The next job to run, if a slot is free: the first queued job in
    /// arrival order whose client runs fewer than `client_running` jobs.
    /// Marks it running and moves its payload out. O(queued jobs).
    pub fn next_job(&mut self) -> Option<(JobId, P)> {
        if self.running >= self.config.slots {
            return None;
        }
        let mut j = self.queue_head;
        while j != NONE {
            let job = &self.jobs[j as usize];
            if u32::from(self.stripe_running[job.stripe as usize]) < self.config.client_running {
                break;
            }
            j = job.next;
        }
        if j == NONE {
            return None;
        }
        self.unlink_queued(j);
        let job = &mut self.jobs[j as usize];
        job.state = JobState::Running;
        let stripe = job.stripe as usize;
        let payload = job.payload.take().expect("a queued job holds its payload");
        let id = JobId {
            job: j,
            generation: job.generation,
        };
        self.stripe_running[stripe] += 1;
        self.running += 1;
        Some((id, payload))
    }

    /// Ends a running job: frees its slot and returns the tickets of the
    /// requests still waiting on it, each of which gets the job's result
    /// (the caller holds the result; the line does not need it). The places
    /// are freed as the iterator runs; dropping it frees the rest. A stale
    /// `job` yields nothing. No allocation.
    pub fn complete(&mut self, job: JobId) -> Waiters<'_, P> {
        let valid = self
            .jobs
            .get(job.job as usize)
            .is_some_and(|j| j.generation == job.generation && j.state == JobState::Running);
        if valid {
            let entry = &mut self.jobs[job.job as usize];
            let stripe = entry.stripe as usize;
            self.share_keys[job.job as usize] = 0;
            self.stripe_running[stripe] -= 1;
            self.running -= 1;
        }
        Waiters {
            line: self,
            job: if valid { job.job } else { NONE },
        }
    }

    /// The request behind `ticket` went away: its place is freed at once.
    /// A queued job left with no places is dropped unrun; a running one
    /// carries on. Returns whether the ticket still held a place. O(1).
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        let Some(place) = self.places.get(ticket.place as usize) else {
            return false;
        };
        if !place.in_use || place.generation != ticket.generation {
            return false;
        }
        let job = place.job;
        self.release_place(ticket.place);
        let j = &self.jobs[job as usize];
        if j.state == JobState::Queued && j.waiter_count == 0 {
            self.unlink_queued(job);
            self.free_job(job);
        }
        true
    }

    /// Takes out the oldest place if it has waited `max_wait_ms` or more at
    /// `now_ms`; its request is answered 429 with `Retry-After: 1`. Call
    /// until `None`. Places all wait the same maximum, so the oldest is
    /// always the next to expire: O(1) per call.
    pub fn expire(&mut self, now_ms: u64) -> Option<Ticket> {
        let p = self.oldest;
        if p == NONE {
            return None;
        }
        let place = &self.places[p as usize];
        if now_ms.saturating_sub(place.arrived_ms) < self.config.max_wait_ms {
            return None;
        }
        let ticket = Ticket {
            place: p,
            generation: place.generation,
        };
        self.cancel(ticket);
        Some(ticket)
    }

    /// When the oldest place expires, for the runtime's one timer.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        (self.oldest != NONE)
            .then(|| self.places[self.oldest as usize].arrived_ms + self.config.max_wait_ms)
    }

    fn unlink_queued(&mut self, j: u32) {
        let (prev, next) = {
            let job = &self.jobs[j as usize];
            (job.prev, job.next)
        };
        if prev == NONE {
            self.queue_head = next;
        } else {
            self.jobs[prev as usize].next = next;
        }
        if next == NONE {
            self.queue_tail = prev;
        } else {
            self.jobs[next as usize].prev = prev;
        }
        self.queued -= 1;
    }

    fn free_job(&mut self, j: u32) {
        self.share_keys[j as usize] = 0;
        let job = &mut self.jobs[j as usize];
        job.state = JobState::Free;
        job.generation = job.generation.wrapping_add(1);
        job.payload = None;
        job.waiters = NONE;
        job.prev = NONE;
        job.next = self.free_jobs;
        self.free_jobs = j;
    }

    /// Unlinks a place from its job and from arrival order, and frees it.
    fn release_place(&mut self, p: u32) {
        let (job, stripe, prev, next, job_prev, job_next) = {
            let pl = &self.places[p as usize];
            (
                pl.job,
                pl.stripe,
                pl.prev,
                pl.next,
                pl.job_prev,
                pl.job_next,
            )
        };
        if prev == NONE {
            self.oldest = next;
        } else {
            self.places[prev as usize].next = next;
        }
        if next == NONE {
            self.newest = prev;
        } else {
            self.places[next as usize].prev = prev;
        }
        if job_prev == NONE {
            self.jobs[job as usize].waiters = job_next;
        } else {
            self.places[job_prev as usize].job_next = job_next;
        }
        if job_next != NONE {
            self.places[job_next as usize].job_prev = job_prev;
        }
        self.jobs[job as usize].waiter_count -= 1;
        self.stripe_places[stripe as usize] -= 1;
        self.used_places -= 1;
        let place = &mut self.places[p as usize];
        place.in_use = false;
        place.generation = place.generation.wrapping_add(1);
        place.job = NONE;
        place.prev = NONE;
        place.job_prev = NONE;
        place.job_next = NONE;
        place.next = self.free_places;
        self.free_places = p;
    }
}

/// The requests waiting on a completed job. Frees each place as it yields
/// its ticket; dropping it frees the rest and the job.
pub struct Waiters<'a, P> {
    line: &'a mut VerifyLine<P>,
    job: u32,
}

impl<P> Iterator for Waiters<'_, P> {
    type Item = Ticket;
    fn next(&mut self) -> Option<Ticket> {
        if self.job == NONE {
            return None;
        }
        let p = self.line.jobs[self.job as usize].waiters;
        if p == NONE {
            return None;
        }
        let ticket = Ticket {
            place: p,
            generation: self.line.places[p as usize].generation,
        };
        self.line.release_place(p);
        Some(ticket)
    }
}

impl<P> Drop for Waiters<'_, P> {
    fn drop(&mut self) {
        while self.next().is_some() {}
        if self.job != NONE {
            self.line.free_job(self.job);
        }
    }
}

#[cfg(test)]
#[path = "line_tests.rs"]
mod tests;
