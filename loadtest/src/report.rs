//! The text summary (wrk-like), the live progress line, and the figures the
//! JSON and HTML outputs share.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::cli::Config;
use crate::ctx::Outcome;
use crate::stats::Shared;
use crate::target::Scheme;

/// Percentiles every output reports.
pub const PERCENTILES: [f64; 8] = [50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 99.999];

pub fn protocol(cfg: &Config) -> &'static str {
    match (cfg.targets[0].scheme, cfg.http2, cfg.http3) {
        (Scheme::Udp, _, _) => "udp",
        (_, true, _) => "http2",
        (_, _, true) => "http3",
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
    let mut s = run_header(cfg, o, rate);
    s += &latency_section(cfg, &o.stats.hist_ns);
    s += &volume_section(cfg, o);
    s += &problem_lines(o);
    s += &rate_lines(o);
    s
}

/// What ran: the span and target, then the shards, connections and loop.
fn run_header(cfg: &Config, o: &Outcome, rate: Option<f64>) -> String {
    let st = &o.stats;
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
    let loop_kind = match rate {
        Some(r) => format!("open loop at {r} req/s"),
        None if cfg.pipeline > 1 => format!("closed loop, pipeline {}", cfg.pipeline),
        None => "closed loop".to_string(),
    };
    let streams = if cfg.http2 || cfg.http3 {
        format!(", {} each", counted(cfg.streams as u64, "stream"))
    } else {
        String::new()
    };
    format!(
        "Running {span} test @ {target}{more}\n  {} and {}{streams}, {loop_kind}, {} {} driver, {} engine\n",
        counted(cfg.shards as u64, "shard"),
        counted(cfg.connections as u64, "connection"),
        protocol(cfg),
        st.driver,
        st.engine
    )
}

/// Mean, spread and maximum, the fixed percentiles, and with `--latency`
/// the detailed spectrum.
fn latency_section(cfg: &Config, h: &Histogram<u64>) -> String {
    let mut s = String::from("  Latency     Avg        Stdev      Max        +/- Stdev\n");
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
        s += &percentile_spectrum(h);
    }
    s
}

/// The detailed percentile spectrum, in milliseconds.
fn percentile_spectrum(h: &Histogram<u64>) -> String {
    let mut s = String::from(
        "  Detailed Percentile spectrum:\n       Value   Percentile   TotalCount 1/(1-Percentile)\n",
    );
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
    s
}

/// How much came back: datagrams and replies, or requests, status codes
/// and the count outside 2xx and 3xx.
fn volume_section(cfg: &Config, o: &Outcome) -> String {
    let st = &o.stats;
    let secs = o.elapsed.as_secs_f64();
    if cfg.targets[0].scheme == Scheme::Udp {
        return format!(
            "  {} datagrams sent, {} replies in {:.2}s, {} read\n",
            st.udp_sent,
            st.requests,
            secs,
            fmt_bytes(st.bytes_read as f64)
        );
    }
    let mut s = format!(
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
    s += &refused_warning(&st.statuses, st.requests, non_2xx);
    s
}

/// `n` and `what`, plural unless `n` is 1.
fn counted(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Answers outside 2xx and 3xx over this share of all are a warning: the
/// run measured the server's refusals (a rate limit, a budget) as much as
/// its answers.
pub const REFUSED_WARN_SHARE: f64 = 0.01;

/// The warning line for a run whose answers outside 2xx and 3xx exceed
/// [`REFUSED_WARN_SHARE`], naming the most frequent such status; empty
/// otherwise.
fn refused_warning(statuses: &[u64], requests: u64, non_2xx: u64) -> String {
    if requests == 0 || (non_2xx as f64) <= REFUSED_WARN_SHARE * requests as f64 {
        return String::new();
    }
    let share = |n: u64| {
        let pct = 100.0 * n as f64 / requests as f64;
        if pct >= 10.0 {
            format!("{pct:.0} %")
        } else {
            format!("{pct:.1} %")
        }
    };
    let (code, n) = statuses
        .iter()
        .enumerate()
        .filter(|(c, _)| !(200..400).contains(c))
        .max_by_key(|&(c, &n)| (n, std::cmp::Reverse(c)))
        .map_or((0, 0), |(c, &n)| (c, n));
    let reason = gapura_gate::answer::reason_phrase(code as u16);
    let others = if non_2xx > n {
        format!(
            " (and {} other answers outside 2xx and 3xx)",
            share(non_2xx - n)
        )
    } else {
        String::new()
    };
    format!(
        "  Warning: {} of answers were {code} {reason}{others}: the server refused them, \
         so this run measured its refusals; see docs/loadtest.md, \"When the server refuses\"\n",
        share(n)
    )
}

/// Errors by kind, unmeasured warmup, shards that did not report, and the
/// run's failures, each only when there is one.
fn problem_lines(o: &Outcome) -> String {
    let st = &o.stats;
    let mut s = String::new();
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
    s
}

/// Requests and bytes per second, and the generator's CPU per request.
fn rate_lines(o: &Outcome) -> String {
    let st = &o.stats;
    let secs = o.elapsed.as_secs_f64();
    let mut s = format!("Requests/sec: {:>10.2}\n", st.requests as f64 / secs);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{ErrorKind, ShardStats};

    fn config(args: &[&str]) -> Config {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        match crate::cli::parse(&args) {
            Ok(crate::cli::Parsed::Run(c)) => *c,
            Err(crate::cli::Error::Invalid(e)) => panic!("{e}"),
            _ => panic!("parses"),
        }
    }

    fn outcome(failures: bool) -> Outcome {
        let t0 = Instant::now();
        let mut st = ShardStats::new(t0, Duration::from_secs(2));
        for (i, status) in [200u16, 200, 200, 301, 404, 503].into_iter().enumerate() {
            let sent = t0 + Duration::from_millis(i as u64);
            st.record(
                sent,
                sent + Duration::from_micros(250 * (i as u64 + 1)),
                status,
            );
        }
        st.read_bytes(123_456, t0);
        st.driver = "io_uring";
        st.engine = "monoio";
        if failures {
            st.error(ErrorKind::Parse, t0);
            st.error(ErrorKind::Timeout, t0);
            st.warmup_requests = 7;
            st.udp_sent = 9;
        }
        Outcome {
            stats: st,
            elapsed: Duration::from_millis(2000),
            cpu_user: Duration::from_millis(300),
            cpu_sys: Duration::from_millis(100),
            missing_shards: usize::from(failures),
            failures: if failures {
                vec!["shard 1: refused".into()]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn summary_has_every_section_in_order() {
        let cfg = config(&["-c", "4", "-d", "2s", "http://127.0.0.1:9/"]);
        let want = "\
Running 2s test @ http://127.0.0.1:9/
  1 shard and 4 connections, closed loop, http1 io_uring driver, monoio engine
  Latency     Avg        Stdev      Max        +/- Stdev
            874.93us   426.83us   1.50ms     66.67%
  Latency Distribution
        50%  750.08us
        75%  1.25ms
        90%  1.50ms
        95%  1.50ms
        99%  1.50ms
      99.9%  1.50ms
     99.99%  1.50ms
    99.999%  1.50ms
  6 requests in 2.00s, 120.56KB read
  Status codes: 200: 3, 301: 1, 404: 1, 503: 1
  Non-2xx or 3xx responses: 2
  Warning: 17 % of answers were 404 Not Found (and 17 % other answers outside 2xx and 3xx): the server refused them, so this run measured its refusals; see docs/loadtest.md, \"When the server refuses\"
  Errors: connect 0, read 0, write 0, timeout 1, parse 1
  Warmup: 7 requests not measured
  1 shard(s) did not report in time; their counts are missing
  shard 1: refused
Requests/sec:       3.00
Transfer/sec:    60.28KB
CPU/request:  30769.23us (0.30s user, 0.10s sys)
";
        assert_eq!(text(&cfg, &outcome(true), None), want);
        // Without problems their lines are absent.
        let clean = text(&cfg, &outcome(false), None);
        assert!(!clean.contains("Errors:") && !clean.contains("Warmup:"));
        assert!(clean.contains("  6 requests in 2.00s, 120.56KB read\n"));
    }

    #[test]
    fn a_run_mostly_refused_says_it_measured_the_refusals() {
        let mut statuses = vec![0u64; 600];
        statuses[200] = 52;
        statuses[429] = 48;
        assert_eq!(
            refused_warning(&statuses, 100, 48),
            "  Warning: 48 % of answers were 429 Too Many Requests: the server refused them, \
             so this run measured its refusals; see docs/loadtest.md, \"When the server refuses\"\n"
        );
        // At 1 % or under: nothing.
        statuses[429] = 1;
        statuses[200] = 99;
        assert_eq!(refused_warning(&statuses, 100, 1), "");
        statuses[429] = 2;
        statuses[503] = 1;
        let s = refused_warning(&statuses, 100, 3);
        assert!(
            s.starts_with(
                "  Warning: 2.0 % of answers were 429 Too Many Requests (and 1.0 % other"
            ),
            "{s}"
        );
        assert_eq!(refused_warning(&statuses, 0, 0), "");
    }

    #[test]
    fn header_spectrum_and_udp_lines_follow_the_config() {
        let cfg = config(&[
            "-c",
            "4",
            "-n",
            "100",
            "--pipeline",
            "3",
            "--latency",
            "http://127.0.0.1:9/",
            "http://127.0.0.1:9/b",
        ]);
        let s = text(&cfg, &outcome(false), None);
        assert!(s.starts_with(
            "Running 100 requests test @ http://127.0.0.1:9/ (+1 more)\n  1 shard and 4 connections, closed loop, pipeline 3, http1"
        ));
        assert!(s.contains("  Detailed Percentile spectrum:\n"));
        assert!(s.contains("  (values in ms)\n  6 requests in"));
        let cfg = config(&["-c", "4", "-d", "1.5s", "--http2", "http://127.0.0.1:9/"]);
        let s = text(&cfg, &outcome(false), Some(1000.0));
        assert!(s.starts_with(
            "Running 1.5s test @ http://127.0.0.1:9/\n  1 shard and 4 connections, 1 stream each, open loop at 1000 req/s, http2"
        ));
        let cfg = config(&["-c", "4", "-d", "2s", "udp://127.0.0.1:9"]);
        let s = text(&cfg, &outcome(true), None);
        assert!(s.contains("\n  9 datagrams sent, 6 replies in 2.00s, 120.56KB read\n  Errors:"));
        assert!(!s.contains("Status codes"));
    }
}
