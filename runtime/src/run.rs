//! Starting, reloading and draining: the control thread.
//!
//! Start: compile the profile, check that no other process holds the
//! addresses, bind every shard's listeners in shard order (steering needs
//! that order), start the shards and wait until each reports its core and
//! driver, then serve the admin listener. Then the control thread waits for
//! signals: SIGHUP (and, with --watch, a changed file) recompiles and
//! publishes; SIGTERM and SIGINT drain and exit 0.

use crate::admin::{self, Admin, Global};
use crate::listeners;
use crate::log;
use crate::publish::SnapshotCell;
use crate::shard::{self, Control, ShardSpec};
use gapura_config::{Compiled, RuntimeSettings, Shards, Steering};
use gapura_http::server::ShardStats;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

pub(crate) fn compile(profile: Option<&Path>) -> Result<Compiled, String> {
    let result = crate::profile::load(profile);
    let name = profile
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "<embedded default>".into());
    finish(&name, profile, result)
}

/// A compiled profile made ready to run, as `compile` makes the file's
/// (`name`: what its errors are prefixed with): its warnings logged,
/// proof of work's key and the UDP envelope keys read; its errors as one
/// text.
pub(crate) fn finish(
    name: &str,
    profile: Option<&Path>,
    result: Result<Compiled, Vec<gapura_config::ProfileError>>,
) -> Result<Compiled, String> {
    let mut c = result.map_err(|errors| {
        errors
            .iter()
            .map(|e| format!("{name}:{e}"))
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    for w in &c.warnings {
        log!("{name}:{}", w.as_warning());
    }
    // A key that cannot be had: no start (no reload) while a route uses
    // proof of work, as `check` says; a warning otherwise.
    if let Err(e) = crate::pow_key(&mut c, true) {
        if c.snapshot.gate.pow_in_use {
            return Err(placed(
                profile,
                "pow_key_file",
                format!("proof of work has no key: {e}"),
            ));
        }
        log!("{name}: warning: proof of work's key: {e} (no route uses proof of work)");
    }
    crate::udp::load_keys(&mut c.snapshot, true).map_err(|e| format!("{name}: {e}"))?;
    Ok(c)
}

/// Compiles the fleet's `text` with the local profile's `[server]` and
/// `[fleet]` (read from `profile` now), finished as [`compile`] finishes
/// a profile.
pub(crate) fn compile_pulled(profile: Option<&Path>, text: &str) -> Result<Compiled, String> {
    let local = match profile {
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => String::new(),
    };
    let merged = gapura_config::fleet_profile_with_local(text, &local)?;
    let base = profile.and_then(Path::parent).unwrap_or(Path::new("."));
    let result = crate::profile::load_text(&merged, base);
    finish("<the fleet's profile>", profile, result)
}

/// A refusal of a `[server]` setting as the compiler's errors read:
/// `FILE:LINE:COL: error[CODE] server.KEY: MESSAGE` (the position where
/// the setting is written in the profile, 0:0 when it is not found).
fn placed(profile: Option<&Path>, key: &'static str, msg: String) -> String {
    let name = profile.map_or_else(|| "<embedded default>".into(), |p| p.display().to_string());
    let src = profile
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    format!("{name}:{}", crate::Refused::server(key, msg).placed(&src))
}

/// How `gapura run` was asked to run, beside the profile.
pub struct Options {
    pub profile: Option<PathBuf>,
    pub watch: bool,
    pub allow_root: bool,
    /// Serve hand-overs to a new binary at this path.
    pub upgrade_socket: Option<PathBuf>,
    /// Take the listeners of the process serving hand-overs here.
    pub take_over: Option<PathBuf>,
}

pub fn run(o: Options) -> ExitCode {
    let Options {
        profile,
        watch,
        allow_root,
        upgrade_socket,
        take_over,
    } = o;
    let compiled = match compile(profile.as_deref()) {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("{msg}");
            log!("profile has errors; not starting");
            return ExitCode::FAILURE;
        }
    };
    // A pulling node starts from its last good version of the fleet's.
    let (compiled, pulled) =
        crate::fleetpull::last_good(profile.as_deref(), compiled, compile_pulled);
    let settings = compiled.runtime.clone();
    // Who to become is settled before anything is bound.
    let drop_to = match crate::privileges::plan(settings.user.as_deref(), allow_root) {
        Ok(t) => t,
        Err(msg) if msg.contains("no such user") => {
            let msg = placed(profile.as_deref(), "user", msg);
            log!("cannot start: {msg}");
            return ExitCode::FAILURE;
        }
        Err(msg) => {
            log!("cannot start: {msg}");
            return ExitCode::FAILURE;
        }
    };
    let run = Run {
        profile,
        pulled,
        watch,
        drop_to,
        notify: crate::notify::Notifier::from_env(),
        upgrade_socket,
        take_over,
    };
    match start(settings, compiled, run) {
        Ok(code) => code,
        Err(msg) => {
            log!("cannot start: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// How this process runs, beside its profile's settings.
struct Run {
    profile: Option<PathBuf>,
    /// The fleet's profile the node started from (`[fleet] profile = "pull"`).
    pulled: Option<String>,
    watch: bool,
    /// The user to become once the ports are bound.
    drop_to: Option<crate::privileges::Target>,
    notify: crate::notify::Notifier,
    upgrade_socket: Option<PathBuf>,
    take_over: Option<PathBuf>,
}

/// The shards to run: one per usable core, or the profile's count.
fn shard_count(shards: Shards, cores: usize) -> usize {
    match shards {
        Shards::Auto => cores.max(1),
        Shards::Count(n) => n as usize,
    }
}

fn start(settings: RuntimeSettings, compiled: Compiled, run: Run) -> Result<ExitCode, String> {
    let Run {
        profile,
        pulled,
        watch,
        drop_to,
        notify,
        upgrade_socket,
        take_over,
    } = run;
    // Read before binding: a token that cannot be used stops the start.
    let mut admin_token = settings
        .admin_token_file
        .as_deref()
        .map(admin::read_token)
        .transpose()?;
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let shard_count = shard_count(settings.shards, cores.len());
    let steer = steering(settings.steering);
    let (inherited, per_shard, admin_listener) =
        acquire_listeners(&settings, shard_count, steer, take_over.as_deref())?;
    crate::udp::check_ports(&compiled.snapshot)?;
    let listeners = (&settings, &per_shard[..], admin_listener.as_ref());
    let handover = handover_at(upgrade_socket.as_deref(), take_over.as_deref(), listeners)?;
    let mut per_shard = per_shard.into_iter();
    let board = Arc::new(gapura_http::upstream::HealthBoard::default());
    let mut slots = crate::health::Slots::new(board.clone());
    let mut first = compiled.snapshot;
    slots.assign(&mut first);
    let mut acme = crate::acme::Running::prepared(settings.acme.as_ref());
    acme.dress(&mut first);
    let (mut udp_sockets, relay_board) = crate::udp::bind(&first, shard_count, steer)?;
    become_user(drop_to.as_ref())?;
    let cell = Arc::new(SnapshotCell::new(first));
    let key_seed = random_seed()?;
    let id_prefix = request_id_prefix();
    let (control, global) = control_and_global(&settings, &cell, shard_count);
    let verifier = gapura_http::server::verify::Pool::start(cores.len(), shard_count)
        .map_err(|e| format!("verification pool: {e}"))?;
    let stats: Vec<Arc<ShardStats>> = (0..shard_count).map(|_| Arc::default()).collect();
    let (log_tx, log_writer) = start_log_writer(&cell, shard_count, &global)?;
    let mut fleet = crate::fleet::start(&settings, shard_count)?;
    let mut fleet_running = take_fleet_running(&mut fleet);
    let mut pull = crate::fleetpull::start(settings.fleet.as_ref(), pulled, stats.clone())?;
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    let replay = Arc::new(gapura_udp::replay::ReplayBoard::default());
    // `gapura explain --live` asks reach each shard through its own queue.
    let mut live_senders = Vec::new();
    for id in 0..shard_count {
        let listeners = per_shard.next().unwrap_or_default();
        let spec = ShardSpec {
            id,
            shards: shard_count,
            core: cores.get(id % cores.len().max(1)).copied(),
            driver: settings.driver,
            ring: settings.ring,
            listeners,
            cell: cell.clone(),
            stats: stats[id].clone(),
            control: control.clone(),
            board: board.clone(),
            id_prefix,
            key_seed,
            verifier: verifier.clone(),
            access_log: log_tx.clone(),
            live: live_queue(&mut live_senders),
            udp: std::mem::take(&mut udp_sockets[id]),
            udp_stats: relay_board.of_shard(id),
            fleet: fleet.as_ref().map(|f| f.shards[id].clone()),
            on_demand: acme.asks.clone(),
            replay: replay.clone(),
        };
        threads.push(spawn_shard(spec, tx.clone())?);
    }
    drop(tx);
    if let Err(e) = wait_started(&rx, shard_count) {
        control.draining.store(true, Ordering::Release);
        return Err(e);
    }
    acme.apply(settings.acme.as_ref(), settings.fleet.as_ref())?;
    if let Some(l) = admin_listener {
        let admin = Admin {
            token: admin_token.take(),
            shards: stats.clone(),
            global: global.clone(),
            live: live_senders,
            udp: relay_board,
            verifier: Some(verifier.clone()),
            fleet: fleet.map(|f| (f.stats, f.shard_stats)),
            acme: acme.shared.clone(),
            profile: pull.as_ref().map(|p| p.stats.clone()),
        };
        start_admin(l, admin)?;
    }
    announce_ready(profile.as_deref(), cell.generation(), inherited, &notify);
    drop(log_tx);
    control_loop(
        &cell,
        &control,
        &global,
        &settings,
        profile.as_deref(),
        watch,
        &mut slots,
        &log_writer,
        &notify,
        handover.as_ref(),
        (&mut fleet_running, &mut acme, pull.as_mut()),
    )?;
    stopped(handover, threads, log_writer);
    Ok(ExitCode::SUCCESS)
}

/// The reconciler's running state, kept by the control loop (reloads
/// apply `[fleet]` to it); empty without a `[fleet]`.
fn take_fleet_running(fleet: &mut Option<crate::fleet::Started>) -> crate::fleet::Running {
    fleet
        .as_mut()
        .map(|f| std::mem::take(&mut f.running))
        .unwrap_or_default()
}

/// A shard's queue of `explain --live` asks, its sender kept in `senders`.
fn live_queue<T>(senders: &mut Vec<mpsc::SyncSender<T>>) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::sync_channel(4);
    senders.push(tx);
    rx
}

/// After the control loop: the handover socket removed, the shards
/// joined, their last log lines written.
fn stopped(
    handover: Option<crate::upgrade::Handover>,
    threads: Vec<std::thread::JoinHandle<()>>,
    log_writer: crate::accesslog::LogWriter,
) {
    if let Some(h) = &handover {
        h.remove();
    }
    for t in threads {
        let _ = t.join();
    }
    // Every shard has handed over its last lines: write them, then stop.
    log_writer.finish();
    log!("stopped");
}

/// What the server listens on, said once it is ready (`announce_ready`):
/// a start that fails after binding never says it listened.
static LISTENING: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn listening(line: String) {
    LISTENING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(line);
}

/// "1 shard", "4 shards".
fn shards_word(n: usize) -> String {
    if n == 1 {
        "1 shard".to_string()
    } else {
        format!("{n} shards")
    }
}

/// Every shard serves: what it listens on, the ready line with the
/// process's id (what `kill -HUP` is given), the old process told after a
/// take-over, systemd told.
fn announce_ready(
    profile: Option<&Path>,
    generation: u64,
    inherited: Option<crate::upgrade::Inherited>,
    notify: &crate::notify::Notifier,
) {
    let from = profile.map_or_else(
        || "the embedded default profile".into(),
        |p| p.display().to_string(),
    );
    let said = std::mem::take(&mut *LISTENING.lock().unwrap_or_else(|e| e.into_inner()));
    for line in said {
        log!("{line}");
    }
    log!(
        "ready: generation {generation} from {from} (pid {})",
        std::process::id()
    );
    if let Some(got) = inherited {
        got.ready();
        log!("upgrade: took over the listeners; the old process drains");
    }
    notify.ready(generation);
}

/// How a profile's steering groups the listeners.
fn steering(s: Steering) -> listeners::Steer {
    match s {
        Steering::Source => listeners::Steer::Source,
        Steering::Prefix => listeners::Steer::Prefix,
        Steering::Kernel => listeners::Steer::Kernel,
    }
}

/// Once every port is bound and every key file read: becomes the
/// profile's user, giving it the key files this start created.
fn become_user(target: Option<&crate::privileges::Target>) -> Result<(), String> {
    if let Some(t) = target {
        crate::privileges::drop_to(t, &crate::powkey::take_created())?;
        log!("running as user {} (uid {}, gid {})", t.name, t.uid, t.gid);
    }
    Ok(())
}

/// A listener socket for one shard, how its connections start, and its
/// UDP socket when it serves HTTP/3 too.
type Bound = (
    std::net::SocketAddr,
    std::net::TcpListener,
    gapura_http::server::Listener,
    Option<std::net::UdpSocket>,
);

/// Binds every listen address once per shard, in shard order (steering
/// needs it), and hands each shard its sockets.
fn bind_listeners(
    settings: &RuntimeSettings,
    shard_count: usize,
    steer: listeners::Steer,
) -> Result<Vec<Vec<Bound>>, String> {
    let mut per_shard: Vec<Vec<Bound>> = (0..shard_count).map(|_| Vec::new()).collect();
    for (index, addr) in settings.listen.iter().enumerate() {
        let group = listeners::bind_group(*addr, shard_count, steer).map_err(|e| e.to_string())?;
        let http3 = settings.http3.contains(&index);
        // HTTP/3 on the same address, its port the TCP group's.
        let mut udp = match http3 {
            true => listeners::bind_quic_group(group.addr, shard_count, steer)
                .map_err(|e| format!("HTTP/3 on {}: {e}", group.addr))?
                .1
                .into_iter()
                .map(Some)
                .collect(),
            false => Vec::new(),
        };
        // Built once for the process's life: every answer on the listener
        // points at it.
        let alt_svc: Option<&'static gapura_gate::sink::Lines> =
            http3.then(|| &*Box::leak(Box::new(gapura_gate::sink::alt_svc(group.addr.port()))));
        let kind = gapura_http::server::Listener {
            proxy_protocol: settings.proxy_protocol.contains(&group.requested),
            tls: settings.tls.contains(&index),
            alt_svc,
        };
        for (i, sock) in group.sockets.into_iter().enumerate() {
            let h3 = udp.get_mut(i).and_then(Option::take);
            per_shard[i].push((group.addr, sock, kind, h3));
        }
        listening(format!(
            "listening on {}://{}{} ({}, steering {})",
            if kind.tls { "https" } else { "http" },
            group.addr,
            if http3 { " and HTTP/3 (udp)" } else { "" },
            shards_word(shard_count),
            match steer {
                listeners::Steer::Source => "source",
                listeners::Steer::Prefix => "prefix",
                listeners::Steer::Kernel => "kernel",
            }
        ));
    }
    Ok(per_shard)
}

/// What start listens with: the hand-over it took (to confirm once it
/// serves), every shard's listeners, the admin listener.
type Acquired = (
    Option<crate::upgrade::Inherited>,
    Vec<Vec<Bound>>,
    Option<std::net::TcpListener>,
);

/// Every shard's listeners and the admin listener: taken over from the
/// process serving hand-overs at `take_over`, or bound here (after checking
/// that no other process holds an address).
fn acquire_listeners(
    settings: &RuntimeSettings,
    shard_count: usize,
    steer: listeners::Steer,
    take_over: Option<&Path>,
) -> Result<Acquired, String> {
    if let Some(path) = take_over {
        if !settings.udp_listen.is_empty() {
            return Err("a profile with UDP relays cannot take over a running process (their sockets are not handed over); restart instead".into());
        }
        if !settings.http3.is_empty() {
            return Err("a profile serving HTTP/3 cannot take over a running process (its UDP sockets are not handed over); restart instead".into());
        }
        let mut got = crate::upgrade::take_over(path)?;
        let (per_shard, admin) = inherit_listeners(settings, shard_count, &mut got)?;
        return Ok((Some(got), per_shard, admin));
    }
    // Port ownership first: nothing is bound if any address is taken.
    for addr in settings.listen.iter().chain(settings.admin.iter()) {
        listeners::check_port_free(*addr).map_err(|e| e.to_string())?;
    }
    for &i in &settings.http3 {
        if let Some(addr) = settings.listen.get(i).filter(|a| a.port() != 0) {
            listeners::check_udp_port_free(*addr).map_err(|e| e.to_string())?;
        }
    }
    let per_shard = bind_listeners(settings, shard_count, steer)?;
    let admin = match settings.admin {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr).map_err(|e| format!("admin listener {addr}: {e}"))?,
        ),
        None => None,
    };
    Ok((None, per_shard, admin))
}

/// Every shard's listeners and the admin listener from a process that hands
/// them over: the same addresses, shard for shard, or nothing.
fn inherit_listeners(
    settings: &RuntimeSettings,
    shard_count: usize,
    got: &mut crate::upgrade::Inherited,
) -> Result<(Vec<Vec<Bound>>, Option<std::net::TcpListener>), String> {
    let mut per_shard: Vec<Vec<Bound>> = (0..shard_count).map(|_| Vec::new()).collect();
    for (index, addr) in settings.listen.iter().enumerate() {
        let kind = gapura_http::server::Listener {
            proxy_protocol: settings.proxy_protocol.contains(addr),
            tls: settings.tls.contains(&index),
            alt_svc: None,
        };
        for (shard, list) in per_shard.iter_mut().enumerate() {
            let sock = got.take_tcp(*addr, shard).ok_or_else(|| {
                format!("the running process has no listener on {addr} for shard {shard}: a take-over needs the same listen addresses and shard count; restart instead")
            })?;
            let bound = sock.local_addr().map_err(|e| e.to_string())?;
            list.push((bound, sock, kind, None));
        }
        listening(format!(
            "listening on {}://{} ({}, taken over)",
            if kind.tls { "https" } else { "http" },
            per_shard[0].last().map_or(*addr, |b| b.0),
            shards_word(shard_count)
        ));
    }
    if let Some((addr, _, _)) = got.tcp.first() {
        return Err(format!(
            "the running process also listens on {addr}, which this profile does not: a take-over needs the same listen addresses and shard count; restart instead"
        ));
    }
    let admin = match (settings.admin, got.admin.take()) {
        (Some(want), Some((had, sock))) if want == had => Some(sock),
        (Some(want), _) => Some(
            std::net::TcpListener::bind(want).map_err(|e| format!("admin listener {want}: {e}"))?,
        ),
        (None, _) => None,
    };
    Ok((per_shard, admin))
}

/// Serves hand-overs at `path`, offering every socket this process listens
/// on. `replace`: this process took over from the one at `path`, whose
/// socket it replaces.
/// The hand-over offered at `upgrade_socket` (replacing the one at
/// `take_over` when it is the same path), when asked for.
fn handover_at(
    upgrade_socket: Option<&Path>,
    take_over: Option<&Path>,
    listeners: (
        &RuntimeSettings,
        &[Vec<Bound>],
        Option<&std::net::TcpListener>,
    ),
) -> Result<Option<crate::upgrade::Handover>, String> {
    upgrade_socket
        .map(|path| offer_handover(path, take_over == Some(path), listeners))
        .transpose()
}

fn offer_handover(
    path: &Path,
    replace: bool,
    (settings, per_shard, admin): (
        &RuntimeSettings,
        &[Vec<Bound>],
        Option<&std::net::TcpListener>,
    ),
) -> Result<crate::upgrade::Handover, String> {
    if replace {
        let _ = std::fs::remove_file(path);
    }
    let mut h = crate::upgrade::Handover::bind(path)?;
    for (shard, list) in per_shard.iter().enumerate() {
        for ((_, sock, _, _), requested) in list.iter().zip(&settings.listen) {
            let bound = sock.local_addr().map_err(|e| e.to_string())?;
            h.offer_tcp(*requested, bound, shard, sock)
                .map_err(|e| format!("upgrade socket: {e}"))?;
        }
    }
    if let (Some(sock), Some(requested)) = (admin, settings.admin) {
        h.offer_admin(requested, sock)
            .map_err(|e| format!("upgrade socket: {e}"))?;
    }
    if !settings.udp_listen.is_empty() {
        h.refuse(
            "this process relays UDP, whose sockets are not handed over; restart instead".into(),
        );
    }
    log!("upgrade: hand-overs at {}", path.display());
    Ok(h)
}

/// The flags shards read, and the process-wide figures the admin reports.
fn control_and_global(
    settings: &RuntimeSettings,
    cell: &SnapshotCell,
    shard_count: usize,
) -> (Arc<Control>, Arc<Global>) {
    let now = gapura_http::clock::now_ms();
    let control = Arc::new(Control {
        beats: (0..shard_count)
            .map(|_| std::sync::atomic::AtomicU64::new(now))
            .collect(),
        ..Control::default()
    });
    control
        .drain_timeout_ms
        .store(settings.drain_timeout_ms, Ordering::Relaxed);
    let global = Arc::new(Global::default());
    global
        .generation
        .store(cell.generation(), Ordering::Relaxed);
    (control, global)
}

/// The access log's writer thread, with the queue shards send to.
fn start_log_writer(
    cell: &SnapshotCell,
    shard_count: usize,
    global: &Global,
) -> Result<(mpsc::SyncSender<Vec<u8>>, crate::accesslog::LogWriter), String> {
    let snap = cell.load();
    let path = snap.server.access_log.as_ref().map(|a| a.path.as_str());
    crate::accesslog::LogWriter::start(path, shard_count, global.access_log_unwritten.clone())
}

/// Starts a shard's thread; it reports on `started` once serving.
fn spawn_shard(
    spec: ShardSpec,
    started: mpsc::Sender<shard::Started>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let id = spec.id;
    std::thread::Builder::new()
        .name(format!("gapura-shard-{id}"))
        .spawn(move || shard::run(spec, started))
        .map_err(|e| format!("shard {id}: {e}"))
}

/// Serves `/metrics` and the rest of the admin listener on its thread.
fn start_admin(listener: std::net::TcpListener, admin: Admin) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    admin::spawn(listener, admin).map_err(|e| e.to_string())?;
    listening(format!("admin on http://{addr} (/healthz, /metrics)"));
    Ok(())
}

/// Waits for every shard's report, logging each one's core and driver.
fn wait_started(rx: &mpsc::Receiver<shard::Started>, shard_count: usize) -> Result<(), String> {
    let mut failures = Vec::new();
    for _ in 0..shard_count {
        match rx.recv() {
            Ok(Ok(line)) => log!("{line}"),
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("a shard exited before starting".into()),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Request ids' per-process prefix: the start time and the pid mixed.
fn request_id_prefix() -> u32 {
    let t = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u32) ^ std::process::id().rotate_left(16)
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Raises a stop flag when dropped.
struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[allow(clippy::too_many_arguments)]
fn control_loop(
    cell: &Arc<SnapshotCell>,
    control: &Control,
    global: &Global,
    settings: &RuntimeSettings,
    profile: Option<&Path>,
    watch: bool,
    slots: &mut crate::health::Slots,
    log_writer: &crate::accesslog::LogWriter,
    notify: &crate::notify::Notifier,
    handover: Option<&crate::upgrade::Handover>,
    (fleet, acme, mut pull): (
        &mut crate::fleet::Running,
        &mut crate::acme::Running,
        Option<&mut crate::fleetpull::Pull>,
    ),
) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGTERM, SIGINT, SIGUSR1])
        .map_err(|e| format!("signals: {e}"))?;
    // The active health checker runs while the control loop does.
    let stop_health = Arc::new(std::sync::atomic::AtomicBool::new(false));
    crate::health::spawn(cell.clone(), slots.board(), stop_health.clone());
    let _stop = StopOnDrop(stop_health);
    let mut last_mtime = profile.and_then(mtime);
    loop {
        let mut reload = false;
        for sig in signals.pending() {
            match sig {
                SIGHUP => reload = true,
                SIGUSR1 => {
                    log_writer.reopen();
                    log!("access log: reopening");
                }
                SIGTERM | SIGINT => {
                    notify.stopping();
                    log!(
                        "draining: no new connections; waiting up to {} ms for requests in flight",
                        settings.drain_timeout_ms
                    );
                    global.draining.store(true, Ordering::Relaxed);
                    control.draining.store(true, Ordering::Release);
                    return Ok(());
                }
                _ => {}
            }
        }
        if watch {
            if let Some(p) = profile {
                let now = mtime(p);
                if now != last_mtime {
                    last_mtime = now;
                    reload = true;
                }
            }
        }
        if reload {
            notify.reloading();
            let pulled = pull.as_ref().and_then(|p| p.current.as_deref());
            let source = crate::reload::Source { profile, pulled };
            let to = (settings, &mut *fleet, &mut *acme);
            let ok = crate::reload::do_reload(cell, global, to, source, slots).is_ok();
            notify.reloaded(cell.generation(), ok);
            let current = cell.load();
            log_writer.set_path(current.server.access_log.as_ref().map(|a| a.path.as_str()));
        }
        if let Some(p) = pull.as_deref_mut() {
            p.serve(|text| {
                let source = crate::reload::Source {
                    profile,
                    pulled: Some(text),
                };
                let to = (settings, &mut *fleet, &mut *acme);
                crate::reload::do_reload(cell, global, to, source, slots)
            });
        }
        if acme.poll(cell) {
            global
                .generation
                .store(cell.generation(), Ordering::Relaxed);
        }
        notify.watchdog(gapura_http::clock::now_ms(), &control.beats);
        if let Some(h) = handover {
            h.poll();
            if h.taken.load(Ordering::Acquire) {
                notify.stopping();
                log!(
                    "draining after the hand-over: waiting up to {} ms for requests in flight",
                    settings.drain_timeout_ms
                );
                global.draining.store(true, Ordering::Relaxed);
                control.draining.store(true, Ordering::Release);
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 16 random bytes for the gate's keyed hashes, from the kernel; without
/// them Gapura does not start (guessable keys would let a client aim at
/// one table slot).
fn random_seed() -> Result<[u8; 16], String> {
    let mut seed = [0u8; 16];
    crate::random::fill(&mut seed).map_err(|e| format!("no randomness from the kernel: {e}"))?;
    Ok(seed)
}
