//! Per-shard measurements and their merge.
//!
//! Each shard owns one [`ShardStats`] and records into it without locks. The
//! main thread merges them after the run: histograms are added (HdrHistogram
//! merges exactly), counters summed, per-second timelines added slot by slot.
//! Latency is recorded in nanoseconds with 3 significant digits (0.1 %
//! resolution); the per-second histograms use microseconds and 2 digits to
//! keep long runs small.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Longest latency the histograms hold exactly (1 hour); longer values saturate.
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;
/// Timeline slots kept; longer runs widen each slot.
pub const MAX_TIMELINE_SLOTS: u64 = 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Connect,
    Read,
    Write,
    Timeout,
    Parse,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    pub parse: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.parse
    }
    fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.parse += o.parse;
    }
}

/// One timeline slot.
#[derive(Clone)]
pub struct Slot {
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub hist_us: Histogram<u32>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            requests: 0,
            errors: 0,
            bytes: 0,
            hist_us: Histogram::new_with_bounds(1, MAX_LATENCY_NS / 1000, 2).unwrap(),
        }
    }
}

/// What one shard measured.
#[derive(Clone)]
pub struct ShardStats {
    pub hist_ns: Histogram<u64>,
    /// Responses counted by status code (index = code, 0..=999).
    pub statuses: Vec<u64>,
    pub errors: Errors,
    /// Completed responses (any status) or UDP replies in the measured window.
    pub requests: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub udp_sent: u64,
    /// Completions before the measured window began.
    pub warmup_requests: u64,
    pub timeline: Vec<Slot>,
    pub slot_ns: u64,
    pub measure_start: Instant,
    pub driver: &'static str,
    pub engine: &'static str,
}

impl ShardStats {
    pub fn new(measure_start: Instant, run_len: Duration) -> ShardStats {
        let secs = run_len.as_secs().max(1);
        let slot_secs = secs.div_ceil(MAX_TIMELINE_SLOTS).max(1);
        ShardStats {
            hist_ns: Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).unwrap(),
            statuses: vec![0; 1000],
            errors: Errors::default(),
            requests: 0,
            bytes_read: 0,
            bytes_written: 0,
            udp_sent: 0,
            warmup_requests: 0,
            timeline: Vec::new(),
            slot_ns: slot_secs * 1_000_000_000,
            measure_start,
            driver: "",
            engine: "",
        }
    }

    fn slot(&mut self, now: Instant) -> Option<&mut Slot> {
        let since = now.checked_duration_since(self.measure_start)?;
        let idx = (since.as_nanos() as u64 / self.slot_ns) as usize;
        if idx > MAX_TIMELINE_SLOTS as usize {
            return None;
        }
        while self.timeline.len() <= idx {
            self.timeline.push(Slot::new());
        }
        Some(&mut self.timeline[idx])
    }

    /// Records a completed response. `sent` is the time latency counts from
    /// (the intended send time in the open loop). Completions whose `sent` is
    /// before the measured window count as warmup. Cost: O(1), no allocation
    /// except when a new timeline second begins.
    #[inline]
    pub fn record(&mut self, sent: Instant, now: Instant, status: u16) {
        if sent < self.measure_start {
            self.warmup_requests += 1;
            return;
        }
        let ns = now.saturating_duration_since(sent).as_nanos() as u64;
        self.hist_ns.saturating_record(ns.max(1));
        self.requests += 1;
        self.statuses[status.min(999) as usize] += 1;
        if let Some(s) = self.slot(now) {
            s.requests += 1;
            s.hist_us.saturating_record((ns / 1000).max(1));
        }
    }

    /// Records an error of `kind` observed at `now`.
    pub fn error(&mut self, kind: ErrorKind, now: Instant) {
        if now < self.measure_start {
            return;
        }
        let e = &mut self.errors;
        match kind {
            ErrorKind::Connect => e.connect += 1,
            ErrorKind::Read => e.read += 1,
            ErrorKind::Write => e.write += 1,
            ErrorKind::Timeout => e.timeout += 1,
            ErrorKind::Parse => e.parse += 1,
        }
        if let Some(s) = self.slot(now) {
            s.errors += 1;
        }
    }

    /// Adds bytes read at `now` (counted only inside the measured window).
    #[inline]
    pub fn read_bytes(&mut self, n: usize, now: Instant) {
        if now >= self.measure_start {
            self.bytes_read += n as u64;
        }
    }

    /// Adds another shard's measurements.
    pub fn merge(&mut self, o: &ShardStats) {
        self.hist_ns
            .add(&o.hist_ns)
            .expect("histograms share bounds");
        for (a, b) in self.statuses.iter_mut().zip(&o.statuses) {
            *a += b;
        }
        self.errors.add(&o.errors);
        self.requests += o.requests;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.udp_sent += o.udp_sent;
        self.warmup_requests += o.warmup_requests;
        // Align slots on the earlier start (shards share one start instant).
        while self.timeline.len() < o.timeline.len() {
            self.timeline.push(Slot::new());
        }
        for (a, b) in self.timeline.iter_mut().zip(&o.timeline) {
            a.requests += b.requests;
            a.errors += b.errors;
            a.bytes += b.bytes;
            a.hist_us.add(&b.hist_us).expect("histograms share bounds");
        }
        if self.driver.is_empty() {
            self.driver = o.driver;
        } else if !o.driver.is_empty() && self.driver != o.driver {
            self.driver = "mixed";
        }
        if self.engine.is_empty() {
            self.engine = o.engine;
        }
    }
}

/// State every shard reads and the main thread writes: the stop flag, and the
/// live counters the progress line shows (published by shards a few times a second).
pub struct Shared {
    pub stop: AtomicBool,
    pub live: Vec<Live>,
    /// Claimed requests when `-n` bounds a closed-loop run.
    pub claimed: AtomicU64,
}

#[derive(Default)]
pub struct Live {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub p99_us: AtomicU64,
}

impl Shared {
    pub fn new(shards: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            live: (0..shards).map(|_| Live::default()).collect(),
            claimed: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Claims up to `want` requests of a `-n` budget; returns how many were
    /// granted (0 once the budget is spent).
    #[inline]
    pub fn claim(&self, limit: Option<u64>, want: u64) -> u64 {
        match limit {
            None => want,
            Some(l) => {
                let prev = self.claimed.fetch_add(want, Ordering::Relaxed);
                l.saturating_sub(prev).min(want)
            }
        }
    }
}

impl ShardStats {
    /// Publishes live figures for the progress line.
    pub fn publish(&self, live: &Live) {
        live.requests
            .store(self.requests + self.warmup_requests, Ordering::Relaxed);
        live.errors.store(self.errors.total(), Ordering::Relaxed);
        live.p99_us.store(
            self.hist_ns.value_at_quantile(0.99) / 1000,
            Ordering::Relaxed,
        );
    }
}

/// Process CPU time (user, system) from getrusage.
pub fn cpu_time() -> (Duration, Duration) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we pass; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_counts_and_histograms() {
        let t0 = Instant::now();
        let mut a = ShardStats::new(t0, Duration::from_secs(5));
        let mut b = ShardStats::new(t0, Duration::from_secs(5));
        a.record(t0, t0 + Duration::from_millis(1), 200);
        b.record(t0, t0 + Duration::from_millis(3), 404);
        b.error(ErrorKind::Timeout, t0 + Duration::from_millis(4));
        a.merge(&b);
        assert_eq!(a.requests, 2);
        assert_eq!((a.statuses[200], a.statuses[404]), (1, 1));
        assert_eq!(a.errors.timeout, 1);
        assert_eq!(a.hist_ns.len(), 2);
        assert_eq!(a.timeline[0].requests, 2);
    }

    #[test]
    fn completions_sent_before_the_window_count_as_warmup() {
        let t0 = Instant::now();
        let mut a = ShardStats::new(t0 + Duration::from_secs(1), Duration::from_secs(5));
        a.record(t0, t0 + Duration::from_millis(1), 200);
        assert_eq!((a.requests, a.warmup_requests), (0, 1));
    }
}
