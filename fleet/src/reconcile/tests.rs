//! The reconciler against an engine in memory: what it sends for the
//! shards' batches, what it publishes, and how it falls back and comes
//! back, without a Redis.

use super::*;
use crate::engine::{Answers, Connect, Exchange};
use gapura_gate::quota::fleet::FleetDelta;
use gapura_gate::quota::fleetwindow::WindowDelta;
use std::cell::RefCell;
use std::rc::Rc;

/// What the engine in memory was asked and will do.
#[derive(Default)]
struct Engine {
    connects: u32,
    /// The next connect fails.
    refuse_connect: bool,
    /// The next exchange fails, or answers one value short.
    fail_next: bool,
    short_next: bool,
    /// Every round's keys and windows, as sent.
    rounds: Vec<(Vec<Flush>, Vec<WindowFlush>)>,
}

#[derive(Clone, Default)]
struct Mem(Rc<RefCell<Engine>>);

impl Connect for Mem {
    type Engine = Mem;
    fn connect(&mut self, _: &Target) -> Result<Mem, String> {
        let mut e = self.0.borrow_mut();
        if std::mem::take(&mut e.refuse_connect) {
            return Err("connection refused".into());
        }
        e.connects += 1;
        Ok(self.clone())
    }
}

/// Each rate key's age is its count x 10 µs, each window's count twice
/// its count and its leases what the flush held: answers a test can tell
/// apart.
impl Exchange for Mem {
    fn exchange(&mut self, keys: &[Flush], windows: &[WindowFlush]) -> Result<Answers, String> {
        let mut e = self.0.borrow_mut();
        e.rounds.push((keys.to_vec(), windows.to_vec()));
        if std::mem::take(&mut e.fail_next) {
            return Err("timed out".into());
        }
        let mut ages: Vec<i64> = keys.iter().map(|k| k.count as i64 * 10).collect();
        if std::mem::take(&mut e.short_next) {
            ages.pop();
        }
        let counts = windows
            .iter()
            .map(|w| (w.count * 2, w.outstanding))
            .collect();
        Ok((ages, counts))
    }
}

fn quiet(_: std::fmt::Arguments<'_>) {}

fn reconciler(engine: &Mem) -> (Reconciler<Mem>, Arc<ArcSwap<Published>>, Arc<FleetStats>) {
    let (_tx, rx) = std::sync::mpsc::sync_channel(4);
    let cell = Arc::new(ArcSwap::from_pointee(Published {
        view: FleetView::default(),
        read_at: Instant::now(),
    }));
    let stats = Arc::new(FleetStats::default());
    let target = Target {
        addresses: vec!["127.0.0.1:1".into()],
        cluster: false,
        password: None,
        timeout: Duration::from_millis(10),
    };
    let r = Reconciler::with_engine(
        engine.clone(),
        target,
        100,
        "n1".into(),
        quiet,
        rx,
        cell.clone(),
        stats.clone(),
        2,
    );
    (r, cell, stats)
}

fn batch(shard: u32, seq: u64, count: u32, window_count: u32) -> FleetBatch {
    FleetBatch {
        shard,
        seq,
        deltas: vec![FleetDelta {
            identity: 7,
            key: 42,
            count,
            interval_ns: 1_000_000,
            burst: 5,
        }],
        windows: vec![WindowDelta {
            identity: 9,
            key: 0,
            window: 3,
            window_ms: 1000,
            count: window_count,
            outstanding: shard + 1,
        }],
    }
}

#[test]
fn the_shards_counts_for_a_key_are_one_flush_and_the_view_names_each_key() {
    let mem = Mem::default();
    let (mut r, cell, stats) = reconciler(&mem);
    r.merge(batch(0, 1, 3, 1));
    r.merge(batch(1, 4, 2, 5));
    r.exchange_round();
    {
        let e = mem.0.borrow();
        let (keys, windows) = &e.rounds[0];
        assert_eq!(keys.len(), 1);
        assert_eq!((keys[0].identity, keys[0].key, keys[0].count), (7, 42, 5));
        assert_eq!((keys[0].interval_ns, keys[0].burst), (1_000_000, 5));
        assert_eq!(windows.len(), 1);
        assert_eq!((windows[0].window, windows[0].count), (3, 6));
        assert_eq!(windows[0].outstanding, 1 + 2, "each shard's lease");
        assert_eq!(windows[0].lease_ttl_ms, 2_000);
    }
    let p = cell.load();
    assert_eq!(p.view.round, 1);
    assert!(!p.view.fallback);
    assert_eq!(p.view.included, vec![1, 4]);
    assert_eq!(p.view.ages_us.get(&(7, 42)), Some(&50));
    assert_eq!(
        p.view.counts.get(&(9, 0, 3)),
        Some(&(12 + 3)),
        "counted and held"
    );
    assert_eq!(p.view.held.get(&(9, 0, 3)), Some(&3));
    assert_eq!(stats.rounds.load(Ordering::Relaxed), 1);
    assert_eq!(stats.batches.load(Ordering::Relaxed), 2);
    assert_eq!(stats.shared_keys.load(Ordering::Relaxed), 2);
    // The counts were sent: the next round sends the key with nothing new
    // (its fleet count is still wanted), not the same counts again.
    r.exchange_round();
    let e = mem.0.borrow();
    assert_eq!(e.rounds[1].0[0].count, 0);
    assert_eq!(e.rounds[1].1[0].count, 0);
}

#[test]
fn a_failed_round_falls_back_drops_its_counts_and_the_next_connects_again() {
    let mem = Mem::default();
    let (mut r, cell, stats) = reconciler(&mem);
    r.merge(batch(0, 1, 3, 0));
    mem.0.borrow_mut().fail_next = true;
    r.exchange_round();
    assert!(cell.load().view.fallback);
    assert!(cell.load().view.ages_us.is_empty());
    assert_eq!(stats.failed_rounds.load(Ordering::Relaxed), 1);
    assert_eq!(stats.fallback.load(Ordering::Relaxed), 1);
    // Refused at the next connect: still in fallback, nothing sent.
    mem.0.borrow_mut().refuse_connect = true;
    r.exchange_round();
    assert!(cell.load().view.fallback);
    assert_eq!(mem.0.borrow().rounds.len(), 1);
    // Then it answers: a new connection, and the failed round's counts
    // were dropped (docs/fleet.md), not sent late.
    r.exchange_round();
    assert!(!cell.load().view.fallback);
    assert_eq!(stats.fallback.load(Ordering::Relaxed), 0);
    let e = mem.0.borrow();
    assert_eq!(e.connects, 2);
    assert_eq!(e.rounds.last().unwrap().0[0].count, 0);
}

#[test]
fn an_answer_of_the_wrong_length_is_a_failed_round() {
    let mem = Mem::default();
    let (mut r, cell, stats) = reconciler(&mem);
    r.merge(batch(0, 1, 3, 0));
    mem.0.borrow_mut().short_next = true;
    r.exchange_round();
    assert!(cell.load().view.fallback);
    assert_eq!(stats.failed_rounds.load(Ordering::Relaxed), 1);
}

#[test]
fn a_key_no_batch_names_is_forgotten_after_keep_rounds() {
    let mem = Mem::default();
    let (mut r, _cell, _stats) = reconciler(&mem);
    r.merge(batch(0, 1, 1, 1));
    for _ in 0..KEEP_ROUNDS + 2 {
        r.exchange_round();
    }
    let e = mem.0.borrow();
    let flushed: Vec<usize> = e.rounds.iter().map(|(k, w)| k.len() + w.len()).collect();
    // Named in round 1, still flushed through round 1 + KEEP_ROUNDS.
    let kept = KEEP_ROUNDS as usize + 1;
    assert!(flushed[..kept].iter().all(|&n| n == 2), "{flushed:?}");
    assert!(flushed[kept..].iter().all(|&n| n == 0), "{flushed:?}");
}
