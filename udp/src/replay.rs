//! The replay windows of a relay's keys, one per key for the whole
//! process: every shard checks and takes a nonce in the same window, so an
//! envelope captured on one shard's socket and sent again to any other is
//! refused there too (and never proves a session).
//!
//! A window is `width` slots; nonce `n` lives in slot `n % width`, which
//! holds the highest nonce taken there (plus one, so 0 is a nonce), and
//! the window remembers the highest nonce taken at all. A nonce is fresh
//! when it is within `width` of the highest and its slot holds none as
//! high: each nonce is taken once, out of order within the window, and
//! none older than the window. Taking is one compare-and-swap on one slot
//! and a `fetch_max`: no lock on the datagram path, and two shards racing
//! for one nonce cannot both take it.
//!
//! The [`ReplayBoard`] hands each shard's relay the windows of its keys
//! when it adopts a policy (under a lock, off the datagram path): a
//! reload that keeps a key keeps its window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One key's window.
#[derive(Debug)]
pub struct KeySlots {
    slots: Box<[AtomicU64]>,
    /// The highest nonce taken, plus one (0: none yet).
    highest: AtomicU64,
}

impl KeySlots {
    pub fn new(width: u32) -> KeySlots {
        KeySlots {
            slots: (0..width.max(1)).map(|_| AtomicU64::new(0)).collect(),
            highest: AtomicU64::new(0),
        }
    }

    /// Takes `nonce` if it is fresh; false when it was taken before (on
    /// any shard), is older than the window, or a newer nonce of its slot
    /// was taken. O(1), lock-free.
    pub fn take(&self, nonce: u64) -> bool {
        let width = self.slots.len() as u64;
        let highest = self.highest.load(Ordering::Acquire);
        if highest > 0 && nonce.saturating_add(width) < highest {
            return false;
        }
        let slot = &self.slots[(nonce % width) as usize];
        let mark = nonce.saturating_add(1);
        let mut seen = slot.load(Ordering::Acquire);
        loop {
            if seen >= mark {
                return false;
            }
            match slot.compare_exchange_weak(seen, mark, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.highest.fetch_max(mark, Ordering::AcqRel);
                    return true;
                }
                Err(now) => seen = now,
            }
        }
    }
}

/// A window on the board: its relay, key fingerprint and width.
type Entry = (String, [u8; 16], u32, Arc<KeySlots>);

/// Every relay key's window in the process, by (relay, key fingerprint,
/// width).
#[derive(Debug, Default)]
pub struct ReplayBoard {
    windows: Mutex<Vec<Entry>>,
}

impl ReplayBoard {
    /// The window of the key with fingerprint `print` of relay `relay`,
    /// made on first use; windows no relay holds any more are let go.
    pub fn window(&self, relay: &str, print: [u8; 16], width: u32) -> Arc<KeySlots> {
        let mut w = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((.., s)) = w
            .iter()
            .find(|(r, p, n, _)| r == relay && *p == print && *n == width)
        {
            return s.clone();
        }
        w.retain(|(.., s)| Arc::strong_count(s) > 1);
        let s = Arc::new(KeySlots::new(width));
        w.push((relay.to_string(), print, width, s.clone()));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_nonce_is_taken_once_in_any_order_within_the_window() {
        let w = KeySlots::new(64);
        assert!(w.take(100));
        assert!(!w.take(100), "replayed");
        assert!(w.take(90), "out of order");
        assert!(!w.take(90));
        assert!(w.take(37), "100 - 37 = 63 < 64");
        assert!(!w.take(36), "older than the window");
        // 164 shares 100's slot: taking it ends 100's.
        assert!(w.take(164));
        assert!(!w.take(100));
        assert!(w.take(120));
        let z = KeySlots::new(64);
        assert!(z.take(0), "0 is a nonce");
        assert!(!z.take(0));
        assert!(z.take(u64::MAX));
        assert!(!z.take(u64::MAX));
        assert!(!z.take(1), "far older than the window");
    }

    #[test]
    fn racing_threads_take_each_nonce_once() {
        let w = Arc::new(KeySlots::new(1024));
        let taken = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (w, taken) = (w.clone(), taken.clone());
                std::thread::spawn(move || {
                    for n in 0..20_000u64 {
                        if w.take(n) {
                            taken.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Each nonce once across the four; none lost (a slot's newer
        // nonce may end an older one not yet taken: at most 20,000).
        let n = taken.load(Ordering::Relaxed);
        assert!(n <= 20_000, "{n}");
        assert!(n >= 20_000 - 3 * 1024, "{n}");
    }

    #[test]
    fn the_board_shares_a_keys_window_and_forgets_unheld_ones() {
        let b = ReplayBoard::default();
        let a1 = b.window("r", [1; 16], 64);
        let a2 = b.window("r", [1; 16], 64);
        assert!(Arc::ptr_eq(&a1, &a2));
        assert!(a1.take(5));
        assert!(!a2.take(5), "one window for every shard");
        let other = b.window("r", [2; 16], 64);
        assert!(other.take(5), "another key, another window");
        drop((a1, a2));
        let _ = b.window("s", [3; 16], 64);
        assert_eq!(b.windows.lock().unwrap().len(), 2, "r's first key let go");
    }
}
