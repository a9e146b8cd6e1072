//! The reconciler's loop: one thread per process, never a shard.
//!
//! Every `sync_ms` it takes the batches the shards handed over (merged per
//! key: one key's counts from every shard are one number), sends every
//! shared key's count to the engine and reads the fleet's buckets back in
//! one round trip, and publishes what it learned as a new [`FleetView`]:
//! an `Arc` swapped into the cell the shards read on their own sync
//! timers, the way policy snapshots are published. A round that fails
//! (the engine unreachable, slow past the timeout, answering wrongly)
//! publishes a view that says so, and the shards hold fleet-scoped limits
//! to their local share until a round succeeds again; the counts of a
//! failed round are dropped (docs/fleet.md). The transitions are logged,
//! once each way.
//!
//! Memory: the merged counts hold at most the keys the shards share
//! (their shared sets are bounded), and a key no batch has named for
//! [`KEEP_ROUNDS`] rounds is forgotten.

use crate::engine::{Answers, Connect, Exchange, Flush, Redis, Target, WindowFlush};
use crate::{FleetStats, Published, Retarget};
use arc_swap::ArcSwap;
use gapura_gate::quota::fleet::{FleetBatch, FleetView};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rounds a key is still flushed after the last batch that named it (a
/// shard's timer and the reconciler's rounds are not in step).
pub const KEEP_ROUNDS: u64 = 4;

/// A key's counts merged from the shards' batches.
#[derive(Clone, Copy, Debug)]
struct Merged {
    count: u64,
    interval_ns: u64,
    burst: u32,
    seen_round: u64,
}

/// A budget window's counts merged from the batches.
#[derive(Clone, Debug)]
struct MergedWindow {
    count: u64,
    window_ms: u64,
    seen_round: u64,
    /// Each shard's outstanding lease of the key, as its last batch said.
    held: Vec<u32>,
}

/// How long the engine keeps a node's lease of a window after its last
/// exchange: ten rounds, at least two seconds. A node that dies strands
/// its unspent leases no longer than this.
pub fn lease_ttl_ms(sync_ms: u64) -> u64 {
    sync_ms.saturating_mul(10).max(2_000)
}

/// This process's name for its leases in the engine: random, so a node
/// started again is a new holder and its old leases lapse.
fn holder() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// The reconciler's state, over an engine `C` connects to (Redis in the
/// server, one in memory in the tests).
pub(crate) struct Reconciler<C: Connect = Redis> {
    pub target: Target,
    pub sync_ms: u64,
    pub node: String,
    pub log: fn(std::fmt::Arguments<'_>),
    pub rx: Receiver<FleetBatch>,
    pub cell: Arc<ArcSwap<Published>>,
    pub stats: Arc<FleetStats>,
    pub included: Vec<u64>,
    merged: HashMap<(u64, u64), Merged>,
    /// Budget windows' counts merged from the batches, per (level
    /// identity, key, window).
    windows: HashMap<(u64, u64, u64), MergedWindow>,
    /// This process's name for its window leases in the engine.
    holder: u64,
    round: u64,
    connector: C,
    engine: Option<C::Engine>,
    /// Since when the engine has been away (None: it answers).
    down_since: Option<Instant>,
    last_round: Instant,
    /// Whether a round ever succeeded (the first success is logged).
    ever_up: bool,
    /// A reload's changes, taken before each round.
    retargets: Option<Receiver<Retarget>>,
}

impl Reconciler {
    /// A reconciler sharing through Redis.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        target: Target,
        sync_ms: u64,
        node: String,
        log: fn(std::fmt::Arguments<'_>),
        rx: Receiver<FleetBatch>,
        cell: Arc<ArcSwap<Published>>,
        stats: Arc<FleetStats>,
        shards: usize,
    ) -> Reconciler {
        Reconciler::with_engine(Redis, target, sync_ms, node, log, rx, cell, stats, shards)
    }
}

impl<C: Connect> Reconciler<C> {
    /// A reconciler sharing through what `connector` connects to.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_engine(
        connector: C,
        target: Target,
        sync_ms: u64,
        node: String,
        log: fn(std::fmt::Arguments<'_>),
        rx: Receiver<FleetBatch>,
        cell: Arc<ArcSwap<Published>>,
        stats: Arc<FleetStats>,
        shards: usize,
    ) -> Reconciler<C> {
        Reconciler {
            target,
            sync_ms,
            node,
            log,
            rx,
            cell,
            stats,
            included: vec![0; shards],
            merged: HashMap::new(),
            windows: HashMap::new(),
            holder: holder(),
            round: 0,
            connector,
            engine: None,
            down_since: None,
            last_round: Instant::now(),
            ever_up: false,
            retargets: None,
        }
    }

    pub(crate) fn with_retargets(mut self, rx: Receiver<Retarget>) -> Reconciler<C> {
        self.retargets = Some(rx);
        self
    }

    /// Takes a reload's changes: a new engine is connected to at this
    /// round (the old connection is dropped), a new period starts after
    /// it. Logged once per reload.
    fn take_retargets(&mut self) {
        let Some(rx) = &self.retargets else {
            return;
        };
        let Some(r) = rx.try_iter().last() else {
            return;
        };
        let moved = r.target.addresses != self.target.addresses
            || r.target.cluster != self.target.cluster
            || r.target.password != self.target.password;
        if moved {
            self.engine = None;
        }
        self.target = r.target;
        self.sync_ms = r.sync_ms;
        self.node = r.node;
        (self.log)(format_args!(
            "fleet {}: reloaded: sharing through {} every {} ms{}",
            self.node,
            self.target.addresses.join(", "),
            self.sync_ms,
            if moved {
                " (a new engine: connecting)"
            } else {
                ""
            }
        ));
    }

    /// Runs until every sender is gone (the process ends).
    pub(crate) fn run(mut self) {
        let mut next = Instant::now() + Duration::from_millis(self.sync_ms.max(1));
        loop {
            loop {
                let now = Instant::now();
                if now >= next {
                    break;
                }
                match self.rx.recv_timeout(next - now) {
                    Ok(b) => self.merge(b),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            self.take_retargets();
            // A round that ran long is not caught up on: the next one
            // starts a period after this one.
            next = Instant::now() + Duration::from_millis(self.sync_ms.max(1));
            self.exchange_round();
        }
    }

    fn merge(&mut self, b: FleetBatch) {
        if let Some(i) = self.included.get_mut(b.shard as usize) {
            *i = (*i).max(b.seq);
        }
        let round = self.round + 1;
        for d in b.deltas {
            let m = self.merged.entry((d.identity, d.key)).or_insert(Merged {
                count: 0,
                interval_ns: d.interval_ns,
                burst: d.burst,
                seen_round: round,
            });
            m.count += u64::from(d.count);
            m.interval_ns = d.interval_ns;
            m.burst = d.burst;
            m.seen_round = round;
        }
        let shards = self.included.len();
        for w in b.windows {
            let m = self
                .windows
                .entry((w.identity, w.key, w.window))
                .or_insert_with(|| MergedWindow {
                    count: 0,
                    window_ms: w.window_ms,
                    seen_round: round,
                    held: vec![0; shards],
                });
            m.count += u64::from(w.count);
            m.seen_round = round;
            if let Some(h) = m.held.get_mut(b.shard as usize) {
                *h = w.outstanding;
            }
        }
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// One round: flush, read back, publish.
    fn exchange_round(&mut self) {
        self.round += 1;
        let round = self.round;
        self.merged
            .retain(|_, m| m.seen_round + KEEP_ROUNDS >= round);
        let keys: Vec<((u64, u64), Flush)> = self
            .merged
            .iter()
            .map(|(&(identity, key), m)| {
                (
                    (identity, key),
                    Flush {
                        identity,
                        key,
                        count: m.count,
                        interval_ns: m.interval_ns,
                        burst: m.burst,
                    },
                )
            })
            .collect();
        let flushes: Vec<Flush> = keys.iter().map(|(_, f)| *f).collect();
        self.windows
            .retain(|_, m| m.seen_round + KEEP_ROUNDS >= round);
        let (holder, lease_ttl_ms) = (self.holder, lease_ttl_ms(self.sync_ms));
        let windows: Vec<WindowFlush> = self
            .windows
            .iter()
            .map(|(&(identity, key, window), m)| WindowFlush {
                identity,
                key,
                window,
                window_ms: m.window_ms,
                count: m.count,
                outstanding: m.held.iter().map(|&h| u64::from(h)).sum(),
                holder,
                lease_ttl_ms,
            })
            .collect();
        let started = Instant::now();
        let result = self.exchange(&flushes, &windows);
        let took = started.elapsed();
        for m in self.merged.values_mut() {
            m.count = 0;
        }
        for m in self.windows.values_mut() {
            m.count = 0;
        }
        let since_last = self.last_round.elapsed();
        self.last_round = Instant::now();
        let view = match result {
            Ok((ages, counts)) => {
                self.up(took);
                let names = || windows.iter().map(|w| (w.identity, w.key, w.window));
                FleetView {
                    round,
                    fallback: false,
                    included: self.included.clone(),
                    ages_us: keys.iter().map(|(k, _)| *k).zip(ages).collect(),
                    counts: names()
                        .zip(counts.iter().map(|&(n, held)| n.saturating_add(held)))
                        .collect(),
                    held: names().zip(counts.iter().map(|&(_, held)| held)).collect(),
                }
            }
            Err(why) => {
                self.engine = None;
                self.down(&why, since_last);
                FleetView {
                    round,
                    fallback: true,
                    included: self.included.clone(),
                    ..FleetView::default()
                }
            }
        };
        self.stats
            .shared_keys
            .store((keys.len() + windows.len()) as u64, Ordering::Relaxed);
        self.cell.store(Arc::new(Published {
            view,
            read_at: Instant::now(),
        }));
    }

    /// Connects when not connected, then flushes.
    fn exchange(&mut self, keys: &[Flush], windows: &[WindowFlush]) -> Result<Answers, String> {
        if self.engine.is_none() {
            self.engine = Some(self.connector.connect(&self.target)?);
        }
        let Some(engine) = self.engine.as_mut() else {
            return Err("not connected".to_string());
        };
        let (ages, counts) = engine.exchange(keys, windows)?;
        if ages.len() != keys.len() || counts.len() != windows.len() {
            return Err(format!(
                "{} answers to {} keys",
                ages.len() + counts.len(),
                keys.len() + windows.len()
            ));
        }
        Ok((ages, counts))
    }

    fn up(&mut self, took: Duration) {
        let s = &self.stats;
        s.rounds.fetch_add(1, Ordering::Relaxed);
        let us = took.as_micros() as u64;
        s.last_round_us.store(us, Ordering::Relaxed);
        s.round_us_total.fetch_add(us, Ordering::Relaxed);
        s.fallback.store(0, Ordering::Relaxed);
        let to = self.target.addresses.join(", ");
        if let Some(since) = self.down_since.take() {
            (self.log)(format_args!(
                "fleet {}: the engine at {to} answers again after {} ms: fleet-scoped \
                 limits are shared again",
                self.node,
                since.elapsed().as_millis()
            ));
        } else if !self.ever_up {
            (self.log)(format_args!(
                "fleet {}: sharing fleet-scoped limits through {to} every {} ms",
                self.node, self.sync_ms
            ));
        }
        self.ever_up = true;
    }

    fn down(&mut self, why: &str, since_last: Duration) {
        let s = &self.stats;
        s.failed_rounds.fetch_add(1, Ordering::Relaxed);
        if s.fallback.swap(1, Ordering::Relaxed) == 1 {
            s.fallback_ms_total
                .fetch_add(since_last.as_millis() as u64, Ordering::Relaxed);
        }
        if self.down_since.is_none() {
            self.down_since = Some(Instant::now());
            (self.log)(format_args!(
                "fleet {}: the engine at {} cannot be used ({why}): fleet-scoped limits \
                 hold each node to its share until it answers",
                self.node,
                self.target.addresses.join(", ")
            ));
        }
    }
}

#[cfg(test)]
mod tests;
