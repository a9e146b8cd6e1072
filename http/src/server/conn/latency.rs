//! An answered request counted in its host's latency histogram: from its
//! start to now, the clock read once a wake; the answers a wake writes for
//! the heads it read counted together, at 0.

use super::Conn;
use crate::clock;
use crate::server::shard::Shard;
use crate::transport::Transport;
use monoio::time::Instant;

/// Answers of one host written in the wake that read their heads, not
/// counted yet in its latency histogram: their latency is 0 (no clock
/// read in the wake could tell it; the first bucket is 1 ms).
#[derive(Default)]
pub(super) struct Instant0 {
    host: Option<gapura_gate::HostId>,
    answers: u64,
}

impl Instant0 {
    /// Counts them.
    #[inline]
    pub(super) fn count(&mut self, shard: &Shard) {
        if let Some(host) = self.host.take() {
            shard.record_latencies(host, 0, std::mem::take(&mut self.answers));
        }
    }
}

impl<S: Transport> Conn<S> {
    /// Counts the answered request in its host's latency histogram.
    pub(super) fn record_latency(&mut self) {
        if let Some(host) = self.req_host.take() {
            let now = self.now();
            // Answered in the wake that read its head: no time the clock
            // was read to tell (the histogram's first bucket is 1 ms).
            let us = if now == self.req_start {
                0
            } else {
                now.saturating_duration_since(self.req_start).as_micros() as u64
            };
            self.shard.record_latencies(host, us, 1);
        }
    }

    /// [`Self::record_latency`] for an answer of the loop that writes a
    /// wake's answers: one written in the wake that read its head is
    /// counted with the others of its host when the loop ends.
    #[inline]
    pub(super) fn record_latency_in_wake(&mut self, instant: &mut Instant0) {
        let Some(host) = self.req_host else {
            return;
        };
        if self.woke_at != Some(self.req_start) {
            return self.record_latency();
        }
        self.req_host = None;
        match instant.host {
            Some(h) if h == host => instant.answers += 1,
            _ => {
                instant.count(&self.shard);
                *instant = Instant0 {
                    host: Some(host),
                    answers: 1,
                };
            }
        }
    }

    /// Now, as of this wake of the task: the clock is read once a wake
    /// (what a request does without waiting takes a few microseconds, far
    /// below the latency histogram's first bucket).
    pub(super) fn now(&mut self) -> Instant {
        *self.woke_at.get_or_insert_with(clock::precise_now)
    }
}
