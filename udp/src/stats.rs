//! The counters the metrics read: one [`RelayStats`] per relay and shard,
//! written only by its shard (relaxed stores, once a second and at the
//! drain), read by the admin listener.

use crate::relay::Counters;
use gapura_gate::udp::UdpDrop;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct RelayStats {
    pub dropped: [AtomicU64; UdpDrop::ALL.len()],
    pub forwarded: AtomicU64,
    pub replied: AtomicU64,
    pub forwarded_bytes: AtomicU64,
    pub replied_bytes: AtomicU64,
    pub sessions_opened: AtomicU64,
    pub sessions_closed: AtomicU64,
    pub sessions_live: AtomicU64,
}

impl RelayStats {
    /// Stores a shard's counters.
    pub fn publish(&self, c: &Counters, live: u32) {
        for (slot, n) in self.dropped.iter().zip(c.dropped) {
            slot.store(n, Ordering::Relaxed);
        }
        self.forwarded.store(c.forwarded, Ordering::Relaxed);
        self.replied.store(c.replied, Ordering::Relaxed);
        self.forwarded_bytes
            .store(c.forwarded_bytes, Ordering::Relaxed);
        self.replied_bytes.store(c.replied_bytes, Ordering::Relaxed);
        self.sessions_opened
            .store(c.sessions_opened, Ordering::Relaxed);
        self.sessions_closed
            .store(c.sessions_closed, Ordering::Relaxed);
        self.sessions_live.store(u64::from(live), Ordering::Relaxed);
    }

    pub fn dropped(&self, reason: UdpDrop) -> u64 {
        self.dropped[reason.index()].load(Ordering::Relaxed)
    }
}
