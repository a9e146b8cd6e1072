//! Gapura's fleet reconciler: rate limits shared across nodes through
//! Redis (or Valkey, or a Redis Cluster), off the request path.
//!
//! This crate owns the process's one connection to the engine and the
//! thread that uses it ([`start`]): it takes the batches of counts the
//! shards hand over, exchanges them with the engine every `sync_ms`
//! (`reconcile`, through `engine`'s one pipelined round trip of an atomic
//! script per key), and publishes what it learned as an immutable
//! [`FleetView`] in an `ArcSwap` cell ([`Fleet::view`]) that shards read on
//! their own timers. The model and its bounds are `gapura_gate::quota::fleet`'s
//! and docs/fleet.md's. The reconciler asks its engine for one thing, a
//! round's exchange (`engine::Exchange`, reached through
//! `engine::Connect`): Redis in the server, one in memory in its tests,
//! which run without a Redis.
//!
//! `acme` keeps ACME's shared state in the same engine for the ACME
//! thread: each certificate's order lock with its fencing token, the
//! challenge answers in flight and who serves them, the sealed
//! certificates.
//!
//! `profile` is one profile for the fleet: signed versions, the signed
//! pointer to the current one, what nodes report (pure), `rollout` a
//! staged rollout's terms and rules (canaries, halt thresholds), and
//! `profilestore` their place in the engine.
//!
//! `testing` starts real `redis-server` processes and a Redis Cluster on
//! loopback ports for the tests of this crate and the runtime's.
//!
//! It must never run on a shard, never be waited on by one (shards hand
//! batches over with a non-blocking send and read the cell without
//! waiting), never log a password, and never decide a request: deciding is
//! the gate's.

pub mod acme;
pub mod engine;
pub mod profile;
pub mod profilestore;
mod reconcile;
pub mod rollout;
pub mod testing;

use arc_swap::ArcSwap;
pub use engine::Target;
use gapura_gate::quota::fleet::{FleetBatch, FleetView};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Batches the reconciler's queue holds: one per shard is enough (a shard
/// has at most one outstanding); the rest is headroom.
pub const QUEUE_PER_SHARD: usize = 2;

/// A view as published, with when it was read (shards age it by the time
/// it waited).
#[derive(Debug)]
pub struct Published {
    pub view: FleetView,
    pub read_at: Instant,
}

/// The reconciler's counters, for `/metrics`. Written by its thread only.
#[derive(Debug, Default)]
pub struct FleetStats {
    /// Rounds that exchanged counts with the engine, and rounds that failed.
    pub rounds: AtomicU64,
    pub failed_rounds: AtomicU64,
    /// The last successful round's time, and the sum of them, in µs.
    pub last_round_us: AtomicU64,
    pub round_us_total: AtomicU64,
    /// Keys in the last round.
    pub shared_keys: AtomicU64,
    /// 1 while fleet-scoped limits are held to the local share.
    pub fallback: AtomicU64,
    /// Time spent in fallback, in ms.
    pub fallback_ms_total: AtomicU64,
    /// Batches taken from the shards.
    pub batches: AtomicU64,
}

/// What the runtime starts the reconciler with.
#[derive(Clone, Debug)]
pub struct Config {
    pub target: Target,
    pub sync_ms: u64,
    /// This node's name in logs.
    pub node: String,
    pub shards: usize,
}

/// What a reload may change in a running reconciler: the engine, the
/// round's period, the node's name in logs.
#[derive(Clone, Debug)]
pub struct Retarget {
    pub target: Target,
    pub sync_ms: u64,
    pub node: String,
}

/// The running reconciler, as the runtime and its shards hold it.
#[derive(Clone)]
pub struct Fleet {
    /// Where shards hand their batches (`try_send`: never waits).
    pub tx: SyncSender<FleetBatch>,
    /// The last view; round 0 until the first round.
    pub view: Arc<ArcSwap<Published>>,
    pub stats: Arc<FleetStats>,
    /// The period of the rounds and of the shards' timers (a reload may
    /// change it; shards read it once a period).
    pub sync_ms: Arc<AtomicU64>,
    /// Where a reload's changes go; the reconciler takes them before its
    /// next round.
    retarget: Sender<Retarget>,
}

impl Fleet {
    /// The period shards sync at now.
    pub fn sync_ms(&self) -> u64 {
        self.sync_ms.load(Ordering::Relaxed)
    }

    /// Hands a reload's engine, period and name to the reconciler: it
    /// connects to the new engine at its next round (falling back, logged
    /// once, while it cannot). Never waits.
    pub fn retarget(&self, r: Retarget) {
        self.sync_ms.store(r.sync_ms, Ordering::Relaxed);
        let _ = self.retarget.send(r);
    }
}

/// Starts the reconciler's thread. Its first round runs one `sync_ms`
/// from now; until then shards decide alone (round 0). The thread ends
/// when every [`Fleet`] handle is dropped.
pub fn start(config: Config, log: fn(std::fmt::Arguments<'_>)) -> std::io::Result<Fleet> {
    let (tx, rx) = std::sync::mpsc::sync_channel(config.shards.max(1) * QUEUE_PER_SHARD);
    let view = Arc::new(ArcSwap::from_pointee(Published {
        view: FleetView::default(),
        read_at: Instant::now(),
    }));
    let stats = Arc::new(FleetStats::default());
    let (retarget, retargets) = std::sync::mpsc::channel();
    let r = reconcile::Reconciler::new(
        config.target,
        config.sync_ms,
        config.node,
        log,
        rx,
        view.clone(),
        stats.clone(),
        config.shards,
    )
    .with_retargets(retargets);
    std::thread::Builder::new()
        .name("gapura-fleet".into())
        .spawn(move || r.run())?;
    Ok(Fleet {
        tx,
        view,
        stats,
        sync_ms: Arc::new(AtomicU64::new(config.sync_ms)),
        retarget,
    })
}

/// The seed of the fleet's partition hashes: the same on every node that
/// shares the password, so a client's key is the same everywhere; derived
/// from the password (a fixed seed without one: the engine then holds
/// hashes anyone who reads it can test addresses against, docs/fleet.md).
pub fn key_seed(password: Option<&str>) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"gapura fleet partition keys\0");
    if let Some(p) = password {
        h.update(p.as_bytes());
    }
    let d = h.finalize();
    let mut seed = [0u8; 16];
    seed.copy_from_slice(&d[..16]);
    seed
}

/// The engine's timeout for a `sync_ms`: five rounds, at least 250 ms and
/// at most 2 s (a slow engine costs rounds, never requests).
pub fn timeout_for(sync_ms: u64) -> Duration {
    Duration::from_millis((sync_ms * 5).clamp(250, 2_000))
}

/// The password from a file: its first line, without the line end.
pub fn read_password(path: &str) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().next().unwrap_or("").to_string())
}
