//! The HTTP/1.1 server side: a shard's shared context and the connection loop.

pub mod conn;
pub mod date;
pub mod stats;

use gapura_gate::Snapshot;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

pub use conn::serve;
pub use date::DateCache;
pub use stats::{Counter, ErrorKind, ShardStats};

/// Where a shard learns of newer snapshots. The runtime implements it over
/// its publishing cell; a call is one relaxed load when nothing changed.
pub trait SnapshotFeed {
    /// A snapshot newer than `generation`, if one was published.
    fn newer_than(&self, generation: u64) -> Option<Arc<Snapshot>>;
}

/// What every connection of one shard shares. Single-threaded: cells, no locks.
///
/// The snapshot is held as `Rc<Arc<_>>` on purpose: requests clone the `Rc`
/// (a plain increment) and never touch the `Arc`'s shared count, whose cache
/// line every shard would otherwise bounce.
#[allow(clippy::redundant_allocation)]
pub struct Shard {
    pub id: usize,
    feed: Box<dyn SnapshotFeed>,
    current: RefCell<Rc<Arc<Snapshot>>>,
    pub stats: Arc<ShardStats>,
    pub date: DateCache,
    draining: Cell<bool>,
    /// Connections with a request in progress (bytes of a head read, or a
    /// response not yet written).
    busy: Cell<u32>,
    open: Cell<u32>,
}

impl Shard {
    pub fn new(
        id: usize,
        feed: Box<dyn SnapshotFeed>,
        first: Arc<Snapshot>,
        stats: Arc<ShardStats>,
    ) -> Shard {
        stats.snapshot_generation.set(first.generation);
        Shard {
            id,
            feed,
            current: RefCell::new(Rc::new(first)),
            stats,
            date: DateCache::default(),
            draining: Cell::new(false),
            busy: Cell::new(0),
            open: Cell::new(0),
        }
    }

    /// The snapshot a new request starts on: the newest published one.
    /// One relaxed load when nothing changed, no atomic increment.
    #[inline]
    #[allow(clippy::redundant_allocation)]
    pub fn snapshot(&self) -> Rc<Arc<Snapshot>> {
        let generation = self.current.borrow().generation;
        if let Some(newer) = self.feed.newer_than(generation) {
            self.stats.snapshot_generation.set(newer.generation);
            *self.current.borrow_mut() = Rc::new(newer);
        }
        self.current.borrow().clone()
    }

    pub fn start_draining(&self) {
        self.draining.set(true);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.get()
    }

    pub fn busy_connections(&self) -> u32 {
        self.busy.get()
    }

    pub fn open_connections(&self) -> u32 {
        self.open.get()
    }

    fn add_busy(&self, delta: i32) {
        self.busy.set(self.busy.get().wrapping_add_signed(delta));
    }
}
