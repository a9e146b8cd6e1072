//! What a shard's driver is given and gives back: its share of the run
//! ([`ShardCtx`]: the connections it owns, the open loop's schedule, the
//! deadline), what the run produced ([`Outcome`]), and the two helpers
//! every driver runs beside its connections. A leaf under the drivers:
//! `shard` starts them, they import this, never `shard`.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cli::Config;
use crate::stats::{ShardStats, Shared};

/// What one shard needs to run.
pub struct ShardCtx {
    pub cfg: Arc<Config>,
    pub shared: Arc<Shared>,
    pub index: usize,
    pub addr: SocketAddr,
    pub conns: Range<usize>,
    pub total_conns: usize,
    pub start: Instant,
    pub measure_start: Instant,
    pub deadline: Option<Instant>,
    pub rate: Option<f64>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub progress: bool,
}

impl ShardCtx {
    /// The intended send time of the `k`-th request of global slot `g` in the
    /// open loop, or None when the schedule is over (`-n` spent or past the deadline).
    #[inline]
    pub fn intended(&self, g: usize, k: u64) -> Option<Instant> {
        let rate = self.rate?;
        let j = g as u64 + k * self.total_conns as u64;
        if let Some(n) = self.cfg.requests {
            if j >= n {
                return None;
            }
        }
        let t = self.start + Duration::from_secs_f64(j as f64 / rate);
        match self.deadline {
            Some(d) if t >= d => None,
            _ => Some(t),
        }
    }

    /// The intended time of the `k`-th request of stream `s` on connection
    /// `g` when connections carry several streams (`-m`): the open loop's
    /// schedule spread over connections x streams. None when it is over.
    pub fn slot_time(&self, g: usize, s: usize, k: u64) -> Option<Instant> {
        let rate = self.rate?;
        let m = self.cfg.streams as u64;
        let slots = self.total_conns as u64 * m;
        let j = (g as u64 * m + s as u64) + k * slots;
        if self.cfg.requests.is_some_and(|n| j >= n) {
            return None;
        }
        let t = self.start + Duration::from_secs_f64(j as f64 / rate);
        match self.deadline {
            Some(d) if t >= d => None,
            _ => Some(t),
        }
    }

    /// When a multi-stream connection's stream `s` may send its next
    /// request (its `k`-th in the open loop).
    pub fn next_slot(&self, g: usize, s: usize, k: u64) -> Slot {
        if self.rate.is_some() {
            return match self.slot_time(g, s, k) {
                Some(t) if !self.shared.stopped() => Slot::At(t),
                _ => Slot::Over,
            };
        }
        if self.over(Instant::now()) || self.shared.claim(self.cfg.requests, 1) == 0 {
            return Slot::Over;
        }
        Slot::Now
    }

    /// The bounds of a request sent now that was due at `due` (open loop).
    pub fn turn(&self, due: Option<Instant>) -> Turn {
        let sent = Instant::now();
        let limit = match (self.rate, self.deadline) {
            (None, Some(d)) if d < sent + self.cfg.timeout => Some(d),
            _ => None,
        };
        Turn {
            from: due.unwrap_or(sent),
            until: limit.unwrap_or(sent + self.cfg.timeout),
            at_deadline: limit.is_some(),
        }
    }

    /// Records a request's outcome (`None`: it ran out of time):
    /// `Some(reconnect)` when its stream's loop ends.
    pub fn settle(
        &self,
        stats: &mut ShardStats,
        turn: &Turn,
        outcome: Option<Result<(u16, usize), crate::stats::ErrorKind>>,
    ) -> Option<bool> {
        let now = Instant::now();
        match outcome {
            Some(Ok((status, bytes))) => {
                stats.read_bytes(bytes, now);
                stats.bytes_written += self.cfg.body.len() as u64;
                stats.record(turn.from, now, status);
                None
            }
            Some(Err(kind)) => {
                stats.error(kind, now);
                Some(true)
            }
            // The run's end cut it short: not a timeout of the server's.
            None if turn.at_deadline => Some(false),
            None => {
                stats.error(crate::stats::ErrorKind::Timeout, now);
                Some(true)
            }
        }
    }

    /// A connection that could not be opened: counted, and its streams'
    /// next slots given up. Whether the connection should stop trying.
    pub fn dial_failed(&self, stats: &mut ShardStats, g: usize, ks: &mut [u64]) -> bool {
        stats.error(crate::stats::ErrorKind::Connect, Instant::now());
        if self.rate.is_none() && self.shared.claim(self.cfg.requests, 1) == 0 {
            return true;
        }
        for k in ks.iter_mut() {
            *k += 1;
        }
        self.rate.is_some() && (0..ks.len()).all(|s| self.slot_time(g, s, ks[s]).is_none())
    }

    /// True once the closed loop must stop issuing requests.
    #[inline]
    pub fn over(&self, now: Instant) -> bool {
        self.shared.stopped() || self.deadline.is_some_and(|d| now >= d)
    }

    /// The source address global connection `g` binds to.
    pub fn source(&self, g: usize) -> Option<std::net::IpAddr> {
        self.cfg.source_ips.as_ref().map(|s| s.get(g as u64))
    }

    pub fn new_stats(&self) -> ShardStats {
        let len = self
            .deadline
            .map(|d| d - self.measure_start)
            .unwrap_or(Duration::from_secs(3600));
        ShardStats::new(self.measure_start, len)
    }
}

/// When a stream's next request may go.
pub enum Slot {
    /// At this time (the open loop's schedule).
    At(Instant),
    /// At once (the closed loop).
    Now,
    /// Never: the run is over for it.
    Over,
}

/// One request's timing: when it counts from, and until when it may take.
pub struct Turn {
    pub from: Instant,
    pub until: Instant,
    /// `until` is the run's deadline, not the request's timeout.
    pub at_deadline: bool,
}

/// What a run produced.
pub struct Outcome {
    pub stats: ShardStats,
    /// Measured window: from its start to the deadline, or to the last report in `-n` runs.
    pub elapsed: Duration,
    pub cpu_user: Duration,
    pub cpu_sys: Duration,
    pub missing_shards: usize,
    pub failures: Vec<String>,
}

/// Copies live counters for the progress line every 200 ms until `done`.
pub async fn publish_loop(ctx: Rc<ShardCtx>, stats: Rc<RefCell<ShardStats>>, done: Rc<Cell<bool>>) {
    while !done.get() {
        monoio::time::sleep(Duration::from_millis(200)).await;
        stats.borrow().publish(&ctx.shared.live[ctx.index]);
    }
}

/// Sleeps until `t` (monoio's timer has millisecond resolution: used only
/// where that is enough, such as the start of a run).
pub async fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        monoio::time::sleep(t - now).await;
    }
}
