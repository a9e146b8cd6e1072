//! Shards: one pinned thread each, the runtime they run on, the open-loop
//! schedule, and the run that starts them and gathers what they measured.
//!
//! Shard `s` of `S` owns the global connection indices `[s*C/S, (s+1)*C/S)`.
//! In the open loop the global schedule is one evenly spaced sequence of
//! `R` requests per second: request `j` is due at `start + j/R` and belongs
//! to connection `j mod C`, so any rate works whatever the shard and
//! connection counts (a connection with nothing due just sleeps).
//!
//! The main thread never waits longer than the run's deadline plus the
//! request timeout plus one second: a shard that has not reported by then is
//! left behind and the summary says so.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::cli::{Config, Driver, Engine};
use crate::ctx::{Outcome, ShardCtx};
use crate::stats::{cpu_time, ShardStats, Shared};
use crate::target::Scheme;

static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

/// Logs one line, once per process, when a shard falls back to another driver or engine.
pub fn log_fallback(msg: &str) {
    if !FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
        eprintln!("gapura-loadtest: {msg}");
    }
}

/// Runs `f` on a monoio runtime built by the server's own builder
/// (`gapura_http::driver`): io_uring with COOP_TASKRUN | TASKRUN_FLAG, or the
/// legacy (epoll) driver when asked or when the ring cannot be built (one
/// logged line). Returns the output and the driver's name.
pub fn with_monoio<F, Fut>(driver: Driver, f: F) -> Result<(Fut::Output, &'static str), String>
where
    F: FnOnce() -> Fut,
    Fut: Future,
{
    use gapura_http::driver::{self, StartError};
    let driver = match driver {
        Driver::Auto => driver::Driver::Auto,
        Driver::IoUring => driver::Driver::IoUring,
        Driver::Epoll => driver::Driver::Epoll,
    };
    driver::block_on(driver, 1024, |how| {
        if let Some(e) = &how.fallback {
            log_fallback(&format!(
                "io_uring ring setup failed ({e}); using the epoll driver"
            ));
        }
        let name = how.name;
        async move { (f().await, name) }
    })
    .map_err(|e| match e {
        StartError::RingRequired(e) => format!("io_uring ring setup failed: {e}"),
        StartError::NoDriver(e) => format!("epoll runtime setup failed: {e}"),
    })
}

fn run_shard(ctx: ShardCtx) -> Result<ShardStats, String> {
    let cfg = ctx.cfg.clone();
    let scheme = cfg.targets[0].scheme;
    if scheme == Scheme::Udp {
        return with_monoio(cfg.driver, || crate::udp::shard_main(ctx)).map(|(mut s, d)| {
            s.driver = d;
            s.engine = "monoio-udp";
            s
        });
    }
    if cfg.http2 {
        return crate::h2mode::run_shard(ctx);
    }
    if cfg.http3 {
        return crate::h3mode::run_shard(ctx);
    }
    let direct = scheme == Scheme::Http
        && ctx.rate.is_none()
        && cfg.engine != Engine::Monoio
        && cfg.driver != Driver::Epoll;
    if direct {
        match crate::uring::run_shard(&ctx) {
            Ok(s) => return Ok(s),
            Err(e) if cfg.engine == Engine::Uring => return Err(e),
            Err(e) => log_fallback(&format!(
                "direct io_uring engine unavailable ({e}); using monoio streams"
            )),
        }
    }
    with_monoio(cfg.driver, || crate::h1::shard_main(ctx)).map(|(mut s, d)| {
        s.driver = d;
        s.engine = "monoio";
        s
    })
}

/// Runs one load phase: starts the shards, shows progress, gathers and merges.
pub fn execute(
    cfg: &Arc<Config>,
    rate: Option<f64>,
    duration: Option<Duration>,
    progress: bool,
) -> Result<Outcome, String> {
    let addr = cfg.targets[0].resolve()?;
    let tls = tls_config(cfg)?;
    let shards = cfg.shards;
    let total_conns = cfg.connections;
    let shared = Arc::new(Shared::new(shards));
    let start = Instant::now() + Duration::from_millis(20);
    let measure_start = start + cfg.warmup;
    let deadline = duration.map(|d| measure_start + d);
    let (u0, s0) = cpu_time();
    let rx = spawn_shards(shards, |s| ShardCtx {
        cfg: cfg.clone(),
        shared: shared.clone(),
        index: s,
        addr,
        conns: (s * total_conns / shards)..((s + 1) * total_conns / shards),
        total_conns,
        start,
        measure_start,
        deadline,
        rate,
        tls: tls.clone(),
        progress,
    })?;
    let hard_deadline = deadline.map(|d| d + cfg.timeout + Duration::from_secs(1));
    let gathered = gather(&rx, &shared, start, deadline, hard_deadline, progress);
    let (u1, s1) = cpu_time();
    let Gathered {
        results,
        failures,
        reported,
        last_report,
    } = gathered;
    let stats = merge(results).ok_or_else(|| failures.join("; "))?;
    // A timed run is measured over its whole window; a run bounded by -n
    // (alone or with -d) until its last shard reported.
    let end = match (deadline, cfg.requests) {
        (Some(d), None) => d,
        (Some(d), Some(_)) => d.min(last_report),
        (None, _) => last_report,
    };
    let elapsed = end
        .saturating_duration_since(measure_start)
        .max(Duration::from_millis(1));
    Ok(Outcome {
        stats,
        elapsed,
        cpu_user: u1 - u0,
        cpu_sys: s1 - s0,
        missing_shards: shards - reported,
        failures,
    })
}

/// The TLS client setup an `https` target needs (ALPN `h2` with `--http2`,
/// else `http/1.1`); None for the other schemes.
fn tls_config(cfg: &Config) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    match cfg.targets[0].scheme {
        Scheme::Https => {
            let alpn: &[&[u8]] = match (cfg.http2, cfg.http3) {
                (true, _) => &[b"h2"],
                (_, true) => &[b"h3"],
                _ => &[b"http/1.1"],
            };
            Ok(Some(crate::net::tls_config(cfg.insecure, alpn)?))
        }
        _ => Ok(None),
    }
}

/// What one shard thread reports: its index and its measurements.
type Report = (usize, Result<ShardStats, String>);

/// Starts `shards` threads, shard `s` pinned to core `s` modulo the cores
/// and running the context `ctx_for(s)`; each reports on the channel
/// returned.
fn spawn_shards(
    shards: usize,
    ctx_for: impl Fn(usize) -> ShardCtx,
) -> Result<mpsc::Receiver<Report>, String> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (tx, rx) = mpsc::channel();
    for s in 0..shards {
        let ctx = ctx_for(s);
        let core = if cores.is_empty() {
            None
        } else {
            Some(cores[s % cores.len()])
        };
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("shard-{s}"))
            .spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                let _ = tx.send((s, run_shard(ctx)));
            })
            .map_err(|e| format!("cannot start shard thread: {e}"))?;
    }
    Ok(rx)
}

/// What the shards reported by the time the run was gathered.
struct Gathered {
    /// Each shard's measurements, None where it failed or never reported.
    results: Vec<Option<ShardStats>>,
    failures: Vec<String>,
    /// How many shards reported (measurements or a failure).
    reported: usize,
    /// When the latest report came.
    last_report: Instant,
}

/// Waits for every shard's report, stopping the run at its deadline and
/// giving up on the rest at `hard_deadline`, with the progress line if asked.
fn gather(
    rx: &mpsc::Receiver<Report>,
    shared: &Shared,
    start: Instant,
    deadline: Option<Instant>,
    hard_deadline: Option<Instant>,
    progress: bool,
) -> Gathered {
    let shards = shared.live.len(); // one live slot per shard
    let mut g = Gathered {
        results: (0..shards).map(|_| None).collect(),
        failures: Vec::new(),
        reported: 0,
        last_report: Instant::now(),
    };
    let mut printer = progress.then(crate::report::Progress::new);
    while g.reported < shards {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            shared.stop.store(true, Ordering::Relaxed);
        }
        if hard_deadline.is_some_and(|h| now >= h) {
            break;
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok((s, r)) => {
                g.reported += 1;
                g.last_report = Instant::now();
                match r {
                    Ok(st) => g.results[s] = Some(st),
                    Err(e) => g.failures.push(format!("shard {s}: {e}")),
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if let Some(p) = printer.as_mut() {
            p.tick(shared, start);
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    if let Some(p) = printer.as_mut() {
        p.clear();
    }
    g
}

/// All shards' measurements as one; None when no shard produced any.
fn merge(results: Vec<Option<ShardStats>>) -> Option<ShardStats> {
    let mut merged: Option<ShardStats> = None;
    for st in results.into_iter().flatten() {
        match merged.as_mut() {
            None => merged = Some(st),
            Some(m) => m.merge(&st),
        }
    }
    merged
}
