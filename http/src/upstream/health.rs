//! The health board: one byte per upstream server, written by the active
//! health checker, read by every shard with a relaxed load. A server's slot
//! is assigned by the runtime when a snapshot is published and is stable
//! for the server's identity, so a reload keeps its state.

use std::sync::atomic::{AtomicU8, Ordering};

/// Slots on a board; servers past it share slot 0's fate as "unknown" (up).
pub const BOARD_SLOTS: usize = 16_384;

const UP: u8 = 0;
const DOWN: u8 = 1;

#[derive(Debug)]
pub struct HealthBoard {
    slots: Box<[AtomicU8]>,
}

impl Default for HealthBoard {
    fn default() -> Self {
        HealthBoard {
            slots: (0..BOARD_SLOTS).map(|_| AtomicU8::new(UP)).collect(),
        }
    }
}

impl HealthBoard {
    /// Whether the active check last found the server down. One relaxed load.
    #[inline]
    pub fn is_down(&self, slot: u32) -> bool {
        self.slots
            .get(slot as usize)
            .is_some_and(|s| s.load(Ordering::Relaxed) == DOWN)
    }

    /// Records a check's result.
    pub fn set_down(&self, slot: u32, down: bool) {
        if let Some(s) = self.slots.get(slot as usize) {
            s.store(if down { DOWN } else { UP }, Ordering::Relaxed);
        }
    }
}
