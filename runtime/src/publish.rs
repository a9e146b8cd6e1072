//! The snapshot cell: the control thread publishes, shards pick up.
//!
//! Publishing stores the new `Arc<Snapshot>` and then bumps the generation.
//! A shard compares the generation (one acquire load, a plain load on x86)
//! with the one it serves before each request and swaps only when it moved,
//! so the request path never touches a shared reference count.

use arc_swap::ArcSwap;
use gapura_gate::Snapshot;
use gapura_http::server::SnapshotFeed;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct SnapshotCell {
    generation: AtomicU64,
    current: ArcSwap<Snapshot>,
}

impl SnapshotCell {
    /// A cell holding `first` as generation 1.
    pub fn new(mut first: Snapshot) -> SnapshotCell {
        first.generation = 1;
        SnapshotCell {
            generation: AtomicU64::new(1),
            current: ArcSwap::from_pointee(first),
        }
    }

    /// Publishes `snap` as the next generation; returns it.
    pub fn publish(&self, mut snap: Snapshot) -> u64 {
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        snap.generation = generation;
        self.current.store(Arc::new(snap));
        self.generation.store(generation, Ordering::Release);
        generation
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }
}

/// A shard's view of the cell.
pub struct Feed(pub Arc<SnapshotCell>);

impl gapura_udp::io::PolicyFeed for Feed {
    #[inline]
    fn newer_than(&self, generation: u64) -> Option<Arc<Snapshot>> {
        SnapshotFeed::newer_than(self, generation)
    }
}

impl SnapshotFeed for Feed {
    #[inline]
    fn newer_than(&self, generation: u64) -> Option<Arc<Snapshot>> {
        if self.0.generation.load(Ordering::Acquire) == generation {
            None
        } else {
            Some(self.0.load())
        }
    }
}
