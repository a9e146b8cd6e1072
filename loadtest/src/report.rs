//! The text summary (wrk-like), the live progress line, and the figures the
//! JSON and HTML outputs share.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::cli::Config;
use crate::shard::Outcome;
use crate::stats::Shared;
use crate::target::Scheme;

/// Percentiles every output reports.
pub const PERCENTILES: [f64; 8] = [50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 99.999];

pub fn protocol(cfg: &Config) -> &'static str {
    match (cfg.targets[0].scheme, cfg.http2) {
        (Scheme::Udp, _) => "udp",
        (_, true) => "http2",
        _ => "http1",
    }
}

pub fn mode(cfg: &Config) -> &'static str {
    if cfg.find_max {
        "find-max"
    } else if cfg.rate.is_some() {
        "open"
    } else {
        "closed"
    }
}

/// Formats nanoseconds like wrk: 812.00us, 1.23ms, 2.50s.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1_000_000.0 {
        format!("{:.2}us", ns / 1e3)
    } else if ns < 1_000_000_000.0 {
        format!("{:.2}ms", ns / 1e6)
    } else {
        format!("{:.2}s", ns / 1e9)
    }
}

pub fn fmt_bytes(b: f64) -> String {
    if b < 1024.0 {
        format!("{b:.0}B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.2}KB", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}MB", b / 1048576.0)
    } else {
        format!("{:.2}GB", b / 1073741824.0)
    }
}

/// Share of samples within one standard deviation of the mean, in percent.
pub fn within_stdev(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    let (mean, sd) = (h.mean(), h.stdev());
    let (lo, hi) = ((mean - sd).max(0.0) as u64, (mean + sd) as u64);
    let inside: u64 = h
        .iter_recorded()
        .filter(|v| v.value_iterated_to() >= lo && v.value_iterated_to() <= hi)
        .map(|v| v.count_at_value())
        .sum();
    inside as f64 * 100.0 / h.len() as f64
}

/// CPU time the generator spent per completed request, in microseconds.
pub fn cpu_per_request_us(o: &Outcome) -> f64 {
    let done = (o.stats.requests + o.stats.warmup_requests).max(1);
    (o.cpu_user + o.cpu_sys).as_secs_f64() * 1e6 / done as f64
}

/// The wrk-like summary.
pub fn text(cfg: &Config, o: &Outcome, rate: Option<f64>) -> String {
    let mut s = String::new();
    let st = &o.stats;
    let h = &st.hist_ns;
    let target = cfg.targets[0].url();
    let more = if cfg.targets.len() > 1 {
        format!(" (+{} more)", cfg.targets.len() - 1)
    } else {
        String::new()
    };
    let span = match cfg.duration {
        Some(d) => {
            let secs = format!("{:.3}", d.as_secs_f64());
            format!("{}s", secs.trim_end_matches('0').trim_end_matches('.'))
        }
        None => format!("{} requests", cfg.requests.unwrap_or(0)),
    };
    s += &format!("Running {span} test @ {target}{more}\n");
    let loop_kind = match rate {
        Some(r) => format!("open loop at {r} req/s"),
        None if cfg.pipeline > 1 => format!("closed loop, pipeline {}", cfg.pipeline),
        None => "closed loop".to_string(),
    };
    let streams = if cfg.http2 {
        format!(", {} streams each", cfg.streams)
    } else {
        String::new()
    };
    s += &format!(
        "  {} shards and {} connections{streams}, {loop_kind}, {} {} driver, {} engine\n",
        cfg.shards,
        cfg.connections,
        protocol(cfg),
        st.driver,
        st.engine
    );
    s += "  Latency     Avg        Stdev      Max        +/- Stdev\n";
    s += &format!(
        "            {:<10} {:<10} {:<10} {:.2}%\n",
        fmt_ns(h.mean()),
        fmt_ns(h.stdev()),
        fmt_ns(h.max() as f64),
        within_stdev(h)
    );
    s += "  Latency Distribution\n";
    for p in PERCENTILES {
        s += &format!(
            "   {:>7}%  {}\n",
            p,
            fmt_ns(h.value_at_quantile(p / 100.0) as f64)
        );
    }
    if cfg.latency {
        s += "  Detailed Percentile spectrum:\n       Value   Percentile   TotalCount 1/(1-Percentile)\n";
        for v in h.iter_quantiles(1) {
            let q = v.quantile_iterated_to();
            let inv = if q < 1.0 {
                format!("{:.2}", 1.0 / (1.0 - q))
            } else {
                "inf".into()
            };
            s += &format!(
                "  {:>10.3} {:>12.6} {:>12} {:>14}\n",
                v.value_iterated_to() as f64 / 1e6,
                q,
                v.count_since_last_iteration(),
                inv
            );
        }
        s += "  (values in ms)\n";
    }
    let secs = o.elapsed.as_secs_f64();
    let udp = cfg.targets[0].scheme == Scheme::Udp;
    if udp {
        s += &format!(
            "  {} datagrams sent, {} replies in {:.2}s, {} read\n",
            st.udp_sent,
            st.requests,
            secs,
            fmt_bytes(st.bytes_read as f64)
        );
    } else {
        s += &format!(
            "  {} requests in {:.2}s, {} read\n",
            st.requests,
            secs,
            fmt_bytes(st.bytes_read as f64)
        );
        let codes: Vec<String> = st
            .statuses
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(c, n)| format!("{c}: {n}"))
            .collect();
        if !codes.is_empty() {
            s += &format!("  Status codes: {}\n", codes.join(", "));
        }
        let non_2xx: u64 = st
            .statuses
            .iter()
            .enumerate()
            .filter(|(c, _)| !(200..400).contains(c))
            .map(|(_, n)| n)
            .sum();
        if non_2xx > 0 {
            s += &format!("  Non-2xx or 3xx responses: {non_2xx}\n");
        }
    }
    let e = &st.errors;
    if e.total() > 0 {
        s += &format!(
            "  Errors: connect {}, read {}, write {}, timeout {}, parse {}\n",
            e.connect, e.read, e.write, e.timeout, e.parse
        );
    }
    if st.warmup_requests > 0 {
        s += &format!("  Warmup: {} requests not measured\n", st.warmup_requests);
    }
    if o.missing_shards > 0 {
        s += &format!(
            "  {} shard(s) did not report in time; their counts are missing\n",
            o.missing_shards
        );
    }
    for f in &o.failures {
        s += &format!("  {f}\n");
    }
    s += &format!("Requests/sec: {:>10.2}\n", st.requests as f64 / secs);
    s += &format!(
        "Transfer/sec: {:>10}\n",
        fmt_bytes(st.bytes_read as f64 / secs)
    );
    s += &format!(
        "CPU/request:  {:.2}us ({:.2}s user, {:.2}s sys)\n",
        cpu_per_request_us(o),
        o.cpu_user.as_secs_f64(),
        o.cpu_sys.as_secs_f64()
    );
    s
}

/// The live line: requests, rate over the last interval, p99 so far, errors.
pub struct Progress {
    last: Instant,
    last_requests: u64,
    printed: bool,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    pub fn new() -> Progress {
        Progress {
            last: Instant::now(),
            last_requests: 0,
            printed: false,
        }
    }

    pub fn tick(&mut self, shared: &Shared, start: Instant) {
        let now = Instant::now();
        let dt = now - self.last;
        if dt < Duration::from_millis(500) {
            return;
        }
        let requests: u64 = shared
            .live
            .iter()
            .map(|l| l.requests.load(Ordering::Relaxed))
            .sum();
        let errors: u64 = shared
            .live
            .iter()
            .map(|l| l.errors.load(Ordering::Relaxed))
            .sum();
        let p99 = shared
            .live
            .iter()
            .map(|l| l.p99_us.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let rate = (requests - self.last_requests.min(requests)) as f64 / dt.as_secs_f64();
        let t = now.saturating_duration_since(start).as_secs_f64();
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "\r\x1b[2K[{t:6.1}s] {requests} requests  {rate:.0} req/s  p99 {}  errors {errors}",
            fmt_ns(p99 as f64 * 1e3)
        );
        let _ = out.flush();
        self.printed = true;
        self.last = now;
        self.last_requests = requests;
    }

    pub fn clear(&mut self) {
        if self.printed {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[2K");
            let _ = out.flush();
        }
    }
}

/// True when stdout is a terminal.
pub fn stdout_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(1) == 1 }
}
