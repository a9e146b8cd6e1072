//! The runtime's side of `[fleet]`: starting the reconciler
//! (`gapura_fleet`), each shard's sync timer, and the metrics.
//!
//! A shard's timer runs every `sync_ms` on the shard's own loop, off the
//! request path: it takes the reconciler's last view (one `ArcSwap` load),
//! lets the gate apply it to its tables and to the shard's UDP relays'
//! and hand over one batch for them all with a non-blocking send, and
//! copies the shard's fleet counters out for `/metrics`. Nothing here
//! waits on the engine, and the datagram path never sees it: a relay's
//! tables are the shard's, reached between datagram batches.

use gapura_config::{FleetSettings, RuntimeSettings};
use gapura_fleet::{Fleet, FleetStats};
use gapura_http::server::Shard;
use std::fmt::Write;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What every shard gets: the reconciler's handle, the fleet's key seed,
/// the shared set's size.
#[derive(Clone)]
pub struct ShardFleet {
    pub fleet: Fleet,
    pub key_seed: [u8; 16],
    pub shared_keys: usize,
    pub stats: Arc<ShardFleetStats>,
}

/// One shard's fleet counters, copied out by its timer.
#[derive(Debug, Default)]
pub struct ShardFleetStats {
    pub shared_keys: AtomicU64,
    pub unshared: AtomicU64,
    pub fallback_decisions: AtomicU64,
    pub batches_refused: AtomicU64,
}

/// The process's fleet: the reconciler and what each shard gets.
pub struct Started {
    pub shards: Vec<ShardFleet>,
    pub stats: Arc<FleetStats>,
    pub shard_stats: Vec<Arc<ShardFleetStats>>,
    /// What a reload compares and changes.
    pub running: Running,
}

/// The `[fleet]` a process runs with, as a reload sees it: the settings
/// applied, the password read, the reconciler.
#[derive(Default)]
pub struct Running {
    settings: Option<FleetSettings>,
    password: Option<String>,
    fleet: Option<Fleet>,
}

impl Running {
    /// Why a reload to `new` cannot be applied; `None` when it can. A
    /// reload may change `redis`, `node`, `sync_ms` and `nodes_expected`
    /// (the last through the snapshot); not whether there is a `[fleet]`
    /// (the reconciler and each shard's shared keys start with the
    /// process), `shared_keys` (each shard sized its set at start), or the
    /// password (the fleet's partition keys are derived from it at start:
    /// a node with other keys would share nothing with the others).
    pub fn refusal(&self, new: Option<&FleetSettings>) -> Option<String> {
        let (old, new) = match (&self.settings, new) {
            (None, None) => return None,
            (None, Some(_)) => {
                return Some(
                    "[fleet] is added; the reconciler and each shard's shared keys start                      with the process: restart to share limits across the fleet"
                        .into(),
                )
            }
            (Some(_), None) => {
                return Some(
                    "[fleet] is removed; the reconciler and each shard's shared keys stop                      with the process: restart to stop sharing"
                        .into(),
                )
            }
            (Some(old), Some(new)) => (old, new),
        };
        if old.shared_keys != new.shared_keys {
            return Some(format!(
                "fleet.shared_keys changes from {} to {}; each shard sized its shared keys                  at start: restart to resize",
                old.shared_keys, new.shared_keys
            ));
        }
        let password = match read(new) {
            Ok(p) => p,
            Err(e) => return Some(e),
        };
        if old.password_file != new.password_file
            || password != self.password
            || old.key_file != new.key_file
        {
            return Some(
                "the fleet's password or key_file changes; the keys Redis sees are derived from it at                  start, and a node with other keys shares nothing with the others: restart                  every node with the new password"
                    .into(),
            );
        }
        None
    }

    /// Applies `new` (which [`refusal`](Self::refusal) let through): the
    /// reconciler's engine, period and node name. Logs nothing when
    /// nothing changes (the reconciler logs what it takes).
    pub fn apply(&mut self, new: Option<&FleetSettings>) {
        let (Some(old), Some(new), Some(fleet)) = (&self.settings, new, &self.fleet) else {
            return;
        };
        let moved = old.redis != new.redis || old.node != new.node || old.sync_ms != new.sync_ms;
        if moved {
            fleet.retarget(gapura_fleet::Retarget {
                target: target(new, self.password.clone()),
                sync_ms: new.sync_ms,
                node: new.node.clone().unwrap_or_else(host_name),
            });
        }
        self.settings = Some(new.clone());
    }
}

/// The password of `f`'s `password_file`, read now.
pub(crate) fn read(f: &FleetSettings) -> Result<Option<String>, String> {
    f.password_file
        .as_deref()
        .map(|p| {
            gapura_fleet::read_password(p).map_err(|e| format!("[fleet] password_file {p}: {e}"))
        })
        .transpose()
}

/// The secret of `f`'s `key_file`, read now: its first line, at least 16
/// characters.
fn read_key(f: &FleetSettings) -> Result<Option<String>, String> {
    let Some(path) = f.key_file.as_deref() else {
        return Ok(None);
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("[fleet] key_file {path}: {e}"))?;
    let line = text.lines().next().unwrap_or("").trim();
    if line.len() < 16 {
        return Err(format!(
            "[fleet] key_file {path}: its first line must be at least 16 characters"
        ));
    }
    Ok(Some(line.to_string()))
}

pub(crate) fn target(f: &FleetSettings, password: Option<String>) -> gapura_fleet::Target {
    gapura_fleet::Target {
        addresses: f.redis.0.clone(),
        cluster: f.redis.1,
        password,
        timeout: gapura_fleet::timeout_for(f.sync_ms),
    }
}

/// Starts the reconciler when the profile has a `[fleet]`. The password
/// file is read here, once: a file that cannot be read stops the start.
pub fn start(settings: &RuntimeSettings, shards: usize) -> Result<Option<Started>, String> {
    let Some(f) = &settings.fleet else {
        return Ok(None);
    };
    let password = read(f)?;
    let secret = read_key(f)?.or_else(|| password.clone());
    let node = f.node.clone().unwrap_or_else(host_name);
    let config = gapura_fleet::Config {
        target: target(f, password.clone()),
        sync_ms: f.sync_ms,
        node,
        shards,
    };
    let fleet =
        gapura_fleet::start(config, log_line).map_err(|e| format!("fleet reconciler: {e}"))?;
    let key_seed = gapura_fleet::key_seed(secret.as_deref());
    let shard_stats: Vec<Arc<ShardFleetStats>> = (0..shards).map(|_| Arc::default()).collect();
    Ok(Some(Started {
        running: Running {
            settings: Some(f.clone()),
            password: password.clone(),
            fleet: Some(fleet.clone()),
        },
        stats: fleet.stats.clone(),
        shards: shard_stats
            .iter()
            .map(|s| ShardFleet {
                fleet: fleet.clone(),
                key_seed,
                shared_keys: f.shared_keys,
                stats: s.clone(),
            })
            .collect(),
        shard_stats,
    }))
}

fn log_line(args: std::fmt::Arguments<'_>) {
    crate::log!("{args}");
}

/// The host name (the node's default name).
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".to_string())
}

/// A shard's sync timer: every `sync_ms`, the last view in, this shard's
/// batch out, for the gate's tables and the shard's `relays` alike. Runs
/// for the shard's life.
pub async fn sync_task(shard: Rc<Shard>, relays: Vec<Rc<gapura_udp::io::RelayIo>>, f: ShardFleet) {
    let id = shard.id as u32;
    loop {
        let period = Duration::from_millis(f.fleet.sync_ms().max(1));
        monoio::time::sleep(period).await;
        let published = f.fleet.view.load();
        let view_age_ms = published.read_at.elapsed().as_millis() as u64;
        let now_ms = shard.now_ms();
        let tx = &f.fleet.tx;
        let mut held: Vec<_> = relays.iter().map(|r| r.relay_mut()).collect();
        let mut peers: Vec<&mut dyn gapura_gate::quota::fleet::FleetPeer> =
            held.iter_mut().map(|r| r.fleet_peer()).collect();
        let mut gate = shard.gate_mut();
        gate.fleet_sync_with(
            &published.view,
            view_age_ms,
            (id, now_ms),
            &mut peers,
            |b| tx.try_send(b).is_ok(),
        );
        drop(peers);
        let c = gate.fleet.counters;
        let windows = &gate.fleet.windows;
        let mut shared = c.shared_keys + windows.shared() as u64;
        let mut unshared = c.unshared + windows.unshared;
        let mut fallback = c.fallback_decisions;
        drop(gate);
        for r in held.drain(..) {
            let (s, u, d) = r.fleet_counters();
            (shared, unshared, fallback) = (shared + s, unshared + u, fallback + d);
        }
        let s = &f.stats;
        s.shared_keys.store(shared, Ordering::Relaxed);
        s.unshared.store(unshared, Ordering::Relaxed);
        s.fallback_decisions.store(fallback, Ordering::Relaxed);
        s.batches_refused
            .store(c.batches_refused, Ordering::Relaxed);
    }
}

/// The fleet's metric families (nothing without a `[fleet]`).
pub fn render_metrics(
    out: &mut String,
    fleet: Option<&(Arc<FleetStats>, Vec<Arc<ShardFleetStats>>)>,
) {
    let Some((r, shards)) = fleet else {
        return;
    };
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let sum =
        |f: fn(&ShardFleetStats) -> &AtomicU64| -> u64 { shards.iter().map(|s| load(f(s))).sum() };
    let rows: [(&str, &str, &str, u64); 10] = [
        (
            "gapura_fleet_sync_rounds_total",
            "counter",
            "Rounds that exchanged counts with the engine.",
            load(&r.rounds),
        ),
        (
            "gapura_fleet_sync_failures_total",
            "counter",
            "Rounds the engine could not be used in.",
            load(&r.failed_rounds),
        ),
        (
            "gapura_fleet_sync_last_seconds",
            "gauge",
            "The last successful round's time.",
            0,
        ),
        (
            "gapura_fleet_sync_seconds_total",
            "counter",
            "Time spent in successful rounds.",
            0,
        ),
        (
            "gapura_fleet_round_keys",
            "gauge",
            "Keys the last round exchanged.",
            load(&r.shared_keys),
        ),
        (
            "gapura_fleet_shared_keys",
            "gauge",
            "Keys the shards share now.",
            sum(|s| &s.shared_keys),
        ),
        (
            "gapura_fleet_unshared_total",
            "counter",
            "Keys that found no room to be shared (held to the local share).",
            sum(|s| &s.unshared),
        ),
        (
            "gapura_fleet_fallback",
            "gauge",
            "1 while fleet-scoped limits hold each node to its share (the engine away).",
            load(&r.fallback),
        ),
        (
            "gapura_fleet_fallback_seconds_total",
            "counter",
            "Time spent in fallback.",
            0,
        ),
        (
            "gapura_fleet_fallback_decisions_total",
            "counter",
            "Requests decided under the local share while the engine was away.",
            sum(|s| &s.fallback_decisions),
        ),
    ];
    for (name, kind, help, v) in rows {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        let value = match name {
            "gapura_fleet_sync_last_seconds" => secs(load(&r.last_round_us) as f64 / 1e6),
            "gapura_fleet_sync_seconds_total" => secs(load(&r.round_us_total) as f64 / 1e6),
            "gapura_fleet_fallback_seconds_total" => secs(load(&r.fallback_ms_total) as f64 / 1e3),
            _ => v.to_string(),
        };
        let _ = writeln!(out, "{name} {value}");
    }
}

fn secs(s: f64) -> String {
    format!("{s:.6}")
}
