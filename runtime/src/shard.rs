//! A shard: one pinned thread, one monoio runtime, its own listeners and
//! connections.
//!
//! The runtime comes from `gapura_http::driver`, the builder the load
//! tester shares: io_uring with COOP_TASKRUN and TASKRUN_FLAG; if building
//! the ring fails for any reason (not only when io_uring is missing: memlock
//! limits and seccomp fail differently) and the profile allows it, the shard
//! falls back to the epoll driver and logs why.

use crate::log;
use crate::publish::{Feed, SnapshotCell};
use gapura_config::Driver;
use gapura_http::driver::StartError;
use gapura_http::server::{serve, Listener, Shard, ShardStats};
use monoio::net::TcpListener;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Entries of each shard's submission queue.
pub const RING_ENTRIES: u32 = 4096;
/// How often a shard looks for `explain --live` asks.
const LIVE_POLL_MS: u64 = 20;
/// How often an idle accept loop and the drain watcher look at their flags.
const POLL_MS: u64 = 100;

/// Flags the control thread raises for every shard.
#[derive(Debug, Default)]
pub struct Control {
    pub draining: AtomicBool,
    /// Milliseconds a draining shard waits for busy connections.
    pub drain_timeout_ms: std::sync::atomic::AtomicU64,
    /// Each shard's last turn of its loop (coarse monotonic ms), for the
    /// systemd watchdog.
    pub beats: Box<[std::sync::atomic::AtomicU64]>,
}

pub struct ShardSpec {
    pub id: usize,
    /// How many shards the process runs.
    pub shards: usize,
    pub core: Option<core_affinity::CoreId>,
    pub driver: Driver,
    /// Whether plain HTTP/1.1 connections run on the shard's own ring.
    pub ring: gapura_config::ClientRing,
    /// Each listener with how its connections start (a PROXY header, TLS),
    /// and its UDP socket when it serves HTTP/3 too.
    pub listeners: Vec<(
        SocketAddr,
        std::net::TcpListener,
        Listener,
        Option<std::net::UdpSocket>,
    )>,
    pub cell: Arc<SnapshotCell>,
    pub stats: Arc<ShardStats>,
    pub control: Arc<Control>,
    pub board: Arc<gapura_http::upstream::HealthBoard>,
    /// Per-process prefix of generated request ids.
    pub id_prefix: u32,
    /// Per-process random seed of the gate's keyed hashes.
    pub key_seed: [u8; 16],
    /// The process's password-check threads; the shard makes its line.
    pub verifier: Arc<gapura_http::server::verify::Pool>,
    /// Where handshakes hand unclaimed names (on-demand certificates).
    pub on_demand: Option<std::sync::mpsc::SyncSender<String>>,
    /// The UDP relays' replay windows, one per key for the process.
    pub replay: Arc<gapura_udp::replay::ReplayBoard>,
    /// Where the access log's buffers go.
    pub access_log: std::sync::mpsc::SyncSender<Vec<u8>>,
    /// `gapura explain --live` asks from the admin listener.
    pub live: mpsc::Receiver<gapura_http::server::live::LiveAsk>,
    /// This shard's UDP relay sockets and their counters.
    pub udp: crate::udp::ShardSockets,
    pub udp_stats: Vec<Arc<gapura_udp::stats::RelayStats>>,
    /// `[fleet]`: the reconciler and this shard's part of it.
    pub fleet: Option<crate::fleet::ShardFleet>,
}

/// What a shard reports once it is serving (or why it could not).
pub type Started = Result<String, String>;

pub fn run(spec: ShardSpec, started: mpsc::Sender<Started>) {
    let pinned = match spec.core {
        Some(core) if core_affinity::set_for_current(core) => format!("core {}", core.id),
        Some(core) => format!("core {} (pinning failed)", core.id),
        None => "unpinned".to_string(),
    };
    let id = spec.id;
    let driver = match spec.driver {
        Driver::Auto => gapura_http::driver::Driver::Auto,
        Driver::IoUring => gapura_http::driver::Driver::IoUring,
        Driver::Epoll => gapura_http::driver::Driver::Epoll,
    };
    let failed = started.clone();
    let ran = gapura_http::driver::block_on(driver, RING_ENTRIES, |how| {
        let line = match &how.fallback {
            Some(reason) => {
                format!("shard {id} on {pinned}, driver epoll (io_uring unavailable: {reason})")
            }
            None => format!("shard {id} on {pinned}, driver {}", how.name),
        };
        shard_main(spec, how.legacy(), line, started)
    });
    let why = match ran {
        Ok(()) => return,
        Err(StartError::RingRequired(reason)) => format!(
            "shard {id}: io_uring could not be set up ({reason}) and the profile requires it"
        ),
        Err(StartError::NoDriver(e)) => format!("shard {id}: no driver could start: {e}"),
    };
    let _ = failed.send(Err(why));
}

/// The shard's own ring for its plain HTTP/1.1 connections, as the
/// profile asks and the driver allows; the start line says which (and why
/// not, when the ring could not be set up).
fn client_ring(
    wanted: gapura_config::ClientRing,
    legacy: bool,
    line: String,
) -> (Option<Rc<gapura_http::uring::ShardRing>>, String) {
    if legacy || wanted == gapura_config::ClientRing::Off {
        return (None, line);
    }
    match gapura_http::uring::ShardRing::new() {
        Ok(ring) => (Some(ring), format!("{line}, client ring")),
        Err(e) => (None, format!("{line}, client ring unavailable ({e})")),
    }
}

async fn shard_main(spec: ShardSpec, legacy: bool, line: String, started: mpsc::Sender<Started>) {
    let first = spec.cell.load();
    let mut gate = match gapura_gate::chain::GateState::new(&first.gate.quota_sizes, spec.key_seed)
    {
        Ok(g) => g,
        Err(e) => {
            let _ = started.send(Err(format!("shard {}: quota tables: {e}", spec.id)));
            return;
        }
    };
    if let Some(f) = &spec.fleet {
        gate.enable_fleet(f.key_seed, f.shared_keys);
    }
    let relays = match crate::udp::start(
        spec.udp,
        &first,
        (spec.key_seed, &spec.replay),
        spec.udp_stats,
        Rc::new(Feed(spec.cell.clone())),
    ) {
        Ok(r) => r,
        Err(e) => {
            let _ = started.send(Err(format!("shard {}: {e}", spec.id)));
            return;
        }
    };
    if let Some(f) = &spec.fleet {
        for r in &relays {
            r.enable_fleet(f.key_seed, f.shared_keys);
        }
    }
    let (ring, line) = client_ring(spec.ring, legacy, line);
    let shard = Rc::new(
        Shard::new(
            spec.id,
            Box::new(Feed(spec.cell.clone())),
            first,
            spec.stats.clone(),
            spec.board.clone(),
            spec.id_prefix,
            gate,
        )
        .with_verifier(Rc::new(spec.verifier.line(spec.id)))
        .with_on_demand(spec.on_demand.clone())
        .with_shard_count(spec.shards)
        .with_access_log(spec.access_log.clone())
        .with_warnings(warn)
        .with_ring(ring.clone()),
    );
    if let Some(ring) = ring {
        monoio::spawn(ring.drive());
    }
    let (listeners, quic) = match runtime_sockets(spec.listeners, legacy, spec.id) {
        Ok(taken) => taken,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let _ = started.send(Ok(line));
    monoio::spawn(tick(shard.clone(), relays.clone()));
    if let Some(f) = spec.fleet.clone() {
        monoio::spawn(crate::fleet::sync_task(shard.clone(), relays.clone(), f));
    }
    monoio::spawn(answer_live_asks(shard.clone(), spec.live));
    let mut accepting = Vec::new();
    for (l, kind) in listeners {
        accepting.push(monoio::spawn(accept_loop(l, shard.clone(), kind)));
    }
    for udp in quic {
        monoio::spawn(gapura_http::server::h3::serve(
            udp,
            shard.clone(),
            spec.shards,
        ));
    }
    // Wait for the drain signal.
    while !spec.control.draining.load(Ordering::Acquire) {
        if let Some(beat) = spec.control.beats.get(spec.id) {
            beat.store(gapura_http::clock::now_ms(), Ordering::Relaxed);
        }
        monoio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    shard.start_draining();
    let draining: Vec<_> = relays
        .iter()
        .map(|r| {
            let r = r.clone();
            monoio::spawn(async move { r.drain().await })
        })
        .collect();
    for task in accepting {
        task.await;
    }
    for task in draining {
        task.await;
    }
    let timeout_ms = spec.control.drain_timeout_ms.load(Ordering::Relaxed);
    let deadline = monoio::time::Instant::now() + Duration::from_millis(timeout_ms);
    // Connections the last accepts spawned start (and count as busy) on
    // the next turns of the loop.
    monoio::time::sleep(Duration::from_millis(10)).await;
    while shard.busy_connections() > 0 && monoio::time::Instant::now() < deadline {
        monoio::time::sleep(Duration::from_millis(10)).await;
    }
    shard.flush_access_log();
    log!(
        "shard {} drained ({} busy connections left, {} open)",
        spec.id,
        shard.busy_connections(),
        shard.open_connections()
    );
}

/// The shard's once-a-second work: relay counters, a newer snapshot, the
/// date, sweeps of the pools and tables, gate counters, the access log's
/// buffer.
async fn tick(shard: Rc<Shard>, relays: Vec<Rc<gapura_udp::io::RelayIo>>) {
    loop {
        for r in &relays {
            r.publish();
        }
        monoio::time::sleep(Duration::from_millis(1000)).await;
        // A shard with no requests still takes a newer snapshot within a
        // second, so gapura_snapshot_generation says what it would serve.
        drop(shard.snapshot());
        shard.date.refresh();
        shard.sweep_upstreams(gapura_http::clock::now_ms());
        let now_ms = shard.now_ms();
        shard.gate.borrow_mut().sweep(now_ms, 4096);
        shard.publish_gate_counters();
        shard.flush_access_log();
        shard
            .stats
            .upstream_idle
            .set(shard.upstream.pools.idle_connections() as u64);
        if let Some(ring) = shard.ring() {
            let c = ring.counts();
            shard.stats.ring_arms.set(c.arms);
            shard.stats.ring_starved.set(c.starved);
            shard.stats.ring_capped.set(c.capped);
        }
    }
}

/// Most connections refused in one go when descriptors run out.
const REFUSE_BATCH: u64 = 64;

/// A descriptor held in reserve (`/dev/null`): when the process runs out
/// of descriptors, closing it makes room to accept a waiting connection
/// and close it at once, so its client is refused rather than left
/// waiting in the queue.
struct Spare(Option<std::fs::File>);

impl Spare {
    fn open() -> Spare {
        Spare(std::fs::File::open("/dev/null").ok())
    }

    /// Accepts and closes up to [`REFUSE_BATCH`] waiting connections, the
    /// reserve descriptor freed for each; how many were refused.
    fn refuse_waiting(&mut self, listener: &TcpListener) -> u64 {
        use std::os::fd::AsRawFd;
        let fd = listener.as_raw_fd();
        if self.0.is_none() {
            // Lost when descriptors ran out before: taken again once any is free.
            *self = Spare::open();
        }
        let mut refused = 0;
        while refused < REFUSE_BATCH && waiting(fd) && self.0.take().is_some() {
            // SAFETY: an accept on our own listening socket, a connection
            // waiting (`waiting`); the descriptor it returns is closed at
            // once.
            let conn = unsafe {
                libc::accept4(
                    fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if conn >= 0 {
                // SAFETY: the descriptor accept4 just returned, closed once.
                unsafe { libc::close(conn) };
                refused += 1;
            }
            *self = Spare::open();
            if conn < 0 {
                break;
            }
        }
        refused
    }
}

/// Whether a connection waits to be accepted on listening socket `fd`,
/// without waiting (the socket itself may block: accept only then).
fn waiting(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, a zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLIN != 0
}

/// A shard's refusal warning, as a log line.
fn warn(args: std::fmt::Arguments<'_>) {
    log!("{args}");
}

/// Answers `gapura explain --live` asks as they arrive, for the shard's
/// life.
async fn answer_live_asks(
    shard: Rc<Shard>,
    live: mpsc::Receiver<gapura_http::server::live::LiveAsk>,
) {
    loop {
        monoio::time::sleep(Duration::from_millis(LIVE_POLL_MS)).await;
        while let Ok(ask) = live.try_recv() {
            shard.answer_live(ask);
        }
    }
}

/// The shard's listeners on its runtime: each TCP listener with how its
/// connections start, and the UDP sockets of those that serve HTTP/3.
#[allow(clippy::type_complexity)]
fn runtime_sockets(
    bound: Vec<(
        SocketAddr,
        std::net::TcpListener,
        Listener,
        Option<std::net::UdpSocket>,
    )>,
    legacy: bool,
    id: usize,
) -> Result<(Vec<(TcpListener, Listener)>, Vec<std::net::UdpSocket>), String> {
    let mut listeners = Vec::new();
    let mut quic = Vec::new();
    for (addr, std_listener, kind, h3) in bound {
        if let Some(udp) = h3 {
            udp.set_nonblocking(legacy)
                .map_err(|e| format!("shard {id}: HTTP/3 on {addr}: {e}"))?;
            quic.push(udp);
        }
        let l = std_listener
            .set_nonblocking(legacy)
            .and_then(|_| TcpListener::from_std(std_listener))
            .map_err(|e| format!("shard {id}: listener {addr}: {e}"))?;
        listeners.push((l, kind));
    }
    Ok((listeners, quic))
}

/// Accepts until the shard drains; the listener closes when this returns.
async fn accept_loop(listener: TcpListener, shard: Rc<Shard>, kind: Listener) {
    let mut error_logged = false;
    let mut spare = Spare::open();
    loop {
        // One accept stays in flight while the loop looks for a drain every
        // POLL_MS: dropping it (a timeout around it) cancels the operation,
        // and a connection the kernel had accepted just then was lost, its
        // client left hanging.
        // At the drain the accept is cancelled, not dropped: one the
        // kernel completed first is still served (the socket may live on in
        // a process that took it over, whose clients must not lose one).
        let canceller = monoio::io::Canceller::new();
        let accept = listener.cancelable_accept(canceller.handle());
        let mut accept = std::pin::pin!(accept);
        let accepted = loop {
            if shard.is_draining() {
                let _ = canceller.cancel();
                if let Ok((stream, peer)) = accept.await {
                    monoio::spawn(serve(stream, peer, shard.clone(), kind));
                }
                return;
            }
            monoio::select! {
                r = &mut accept => break r,
                _ = monoio::time::sleep(Duration::from_millis(POLL_MS)) => {}
            }
        };
        match accepted {
            Ok((stream, peer)) => {
                let max = shard.snapshot().server.max_connections_per_shard;
                if shard.open_connections() >= max {
                    shard.stats.connections_refused.inc();
                    drop(stream);
                    continue;
                }
                monoio::spawn(serve(stream, peer, shard.clone(), kind));
            }
            Err(e) => {
                // EMFILE/ENFILE and friends: counted, the waiting
                // connections refused (closed) rather than left hanging,
                // and a back-off instead of spinning.
                shard.stats.accept_errors.inc();
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    let refused = spare.refuse_waiting(&listener);
                    shard.stats.accept_refused_no_fd.add(refused);
                }
                if !error_logged {
                    log!("shard {}: accept failed: {e}", shard.id);
                    error_logged = true;
                }
                monoio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
