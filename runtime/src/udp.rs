//! UDP relays in the process: their steered sockets bound at start (one
//! per shard and address, in shard order), their envelope keys read from
//! their files (created 0600 when missing), each shard's relays started and
//! drained, and their metrics.

use crate::listeners::{self, Steer};
use gapura_gate::udp::{EnvelopeKey, UdpDrop, UdpPolicy};
use gapura_gate::Snapshot;
use gapura_udp::io::{PolicyFeed, RelayIo};
use gapura_udp::stats::RelayStats;
use std::fmt::Write as _;
use std::net::UdpSocket;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// One shard's part of the relays: each relay's index in the snapshot and
/// its sockets on that shard (one per listen address).
pub type ShardSockets = Vec<(usize, Vec<UdpSocket>)>;

/// Every relay's counters: `[relay][shard]`, with the relays' names.
#[derive(Default)]
pub struct RelayBoard {
    pub names: Vec<String>,
    pub stats: Vec<Vec<Arc<RelayStats>>>,
}

impl RelayBoard {
    /// One shard's counters, in relay order.
    pub fn of_shard(&self, shard: usize) -> Vec<Arc<RelayStats>> {
        self.stats.iter().map(|s| s[shard].clone()).collect()
    }
}

/// Refuses a UDP address another process holds.
pub fn check_ports(snapshot: &Snapshot) -> Result<(), String> {
    for p in &snapshot.udp {
        for a in &p.listen {
            listeners::check_udp_port_free(*a).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Binds every relay's sockets for `shards` shards; logs each address.
pub fn bind(
    snapshot: &Snapshot,
    shards: usize,
    steer: Steer,
) -> Result<(Vec<ShardSockets>, RelayBoard), String> {
    let mut per_shard: Vec<ShardSockets> = (0..shards).map(|_| Vec::new()).collect();
    let mut board = RelayBoard::default();
    for (r, p) in snapshot.udp.iter().enumerate() {
        let mut groups = Vec::new();
        for a in &p.listen {
            let (bound, socks) =
                listeners::bind_udp_group(*a, shards, steer).map_err(|e| e.to_string())?;
            crate::log!("relaying udp://{bound} ({}, {shards} shards)", p.name);
            groups.push(socks.into_iter());
        }
        // Socket i of each group is shard i's.
        for sockets in per_shard.iter_mut() {
            let mine: Vec<UdpSocket> = groups.iter_mut().filter_map(Iterator::next).collect();
            sockets.push((r, mine));
        }
        board.names.push(p.name.clone());
        board.stats.push(
            (0..shards)
                .map(|_| Arc::new(RelayStats::default()))
                .collect(),
        );
    }
    Ok((per_shard, board))
}

/// Reads every relay's envelope keys into its policy (creating missing
/// files when `create`). A key that cannot be read fails the load: a relay
/// without its keys would drop everything.
pub fn load_keys(snapshot: &mut Snapshot, create: bool) -> Result<(), String> {
    for p in &mut snapshot.udp {
        let Some(env) = &p.envelope else { continue };
        let mut keys = Vec::with_capacity(env.key_files.len());
        for f in &env.key_files {
            let what = format!("udp relay {}", p.name);
            let k = crate::powkey::open_bytes(Path::new(f), create, &what)
                .map_err(|e| format!("udp relay {}: envelope key: {e}", p.name))?;
            keys.push(EnvelopeKey::new(&k));
        }
        let mut policy: UdpPolicy = (**p).clone();
        if let Some(e) = &mut policy.envelope {
            e.keys = keys;
        }
        *p = Arc::new(policy);
    }
    Ok(())
}

/// A drop's log line: at most one per reason per second per shard, naming
/// the source prefix by its keyed hash, never the address, with the
/// shard's running total for the reason (the drops the skipped lines
/// stand for are in it).
fn log_drop(relay: &str, reason: UdpDrop, prefix: u64, class: &str, total: u64) {
    crate::log!(
        "udp {relay}: dropped {} from prefix {prefix:016x} class {class} ({total} on this shard so far; at most one line per reason per second per shard)",
        reason.label()
    );
}

/// Starts one shard's relays under `snapshot`.
pub fn start(
    sockets: ShardSockets,
    snapshot: &Snapshot,
    (seed, board): ([u8; 16], &Arc<gapura_udp::replay::ReplayBoard>),
    stats: Vec<Arc<RelayStats>>,
    feed: Rc<dyn PolicyFeed>,
) -> Result<Vec<Rc<RelayIo>>, String> {
    let mut out = Vec::new();
    for (r, socks) in sockets {
        let policy = snapshot.udp[r].clone();
        let name = policy.name.clone();
        let io = RelayIo::new(
            policy,
            snapshot.generation,
            socks,
            (seed, board.clone()),
            stats[r].clone(),
            log_drop,
        )
        .map_err(|e| format!("udp {name}: {e}"))?;
        io.spawn(feed.clone());
        out.push(io);
    }
    Ok(out)
}

type Get = fn(&RelayStats) -> &std::sync::atomic::AtomicU64;

/// The relays' samples, per relay and shard.
pub fn render_metrics(out: &mut String, board: &RelayBoard) {
    if board.names.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "# HELP gapura_udp_dropped_total Datagrams dropped without a reply, by reason.\n# TYPE gapura_udp_dropped_total counter"
    );
    for (name, shards) in board.names.iter().zip(&board.stats) {
        for (i, s) in shards.iter().enumerate() {
            for reason in UdpDrop::ALL {
                let _ = writeln!(
                    out,
                    "gapura_udp_dropped_total{{relay=\"{name}\",shard=\"{i}\",reason=\"{}\"}} {}",
                    reason.label(),
                    s.dropped(reason)
                );
            }
        }
    }
    #[rustfmt::skip]
    let families: [(&str, &str, &str, Get); 7] = [
        ("gapura_udp_forwarded_total", "counter", "Datagrams relayed to upstream.", |s| &s.forwarded),
        ("gapura_udp_replied_total", "counter", "Replies relayed to clients.", |s| &s.replied),
        ("gapura_udp_forwarded_bytes_total", "counter", "Payload bytes relayed to upstream.", |s| &s.forwarded_bytes),
        ("gapura_udp_replied_bytes_total", "counter", "Bytes relayed back to clients.", |s| &s.replied_bytes),
        ("gapura_udp_sessions_opened_total", "counter", "Sessions opened.", |s| &s.sessions_opened),
        ("gapura_udp_sessions_closed_total", "counter", "Sessions ended (idle, reload, drain).", |s| &s.sessions_closed),
        ("gapura_udp_sessions", "gauge", "Live sessions.", |s| &s.sessions_live),
    ];
    for (metric, kind, help, get) in families {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
        for (name, shards) in board.names.iter().zip(&board.stats) {
            for (i, s) in shards.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{metric}{{relay=\"{name}\",shard=\"{i}\"}} {}",
                    get(s).load(Ordering::Relaxed)
                );
            }
        }
    }
}
