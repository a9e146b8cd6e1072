//! Command-line parsing into a validated [`Config`].
//!
//! The flags follow wrk's where wrk has one (`-t`, `-c`, `-d` with units,
//! `-H`, `--latency`, `--timeout`), and wrk2's `-R`. Short options accept the
//! value glued (`-t1`) or separate (`-t 1`); long options accept `--x=v` or
//! `--x v`. Every error is a one-line message naming the flag.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use crate::target::{Scheme, Target};

/// Which monoio driver a shard runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// io_uring with the ring flags of DESIGN §3, legacy (epoll) if the ring cannot be built.
    Auto,
    /// io_uring only; failing to build the ring fails the shard.
    IoUring,
    /// The legacy (epoll) driver.
    Epoll,
}

/// Which HTTP/1.1 engine runs the plain closed-loop path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The direct io_uring loop where it applies and can be set up, monoio otherwise.
    Auto,
    /// Always the monoio stream path.
    Monoio,
    /// The direct io_uring loop; an error where it does not apply.
    Uring,
}

/// A contiguous set of local source addresses, used round-robin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceIps {
    /// First usable address.
    pub first: u32,
    /// Number of usable addresses (at least 1).
    pub count: u32,
}

impl SourceIps {
    /// Parses `a.b.c.d/len` (or a bare address). For prefixes up to /30 the
    /// network and broadcast addresses are skipped.
    pub fn parse(s: &str) -> Result<SourceIps, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (
                a,
                l.parse::<u32>()
                    .map_err(|_| format!("--source-ips: bad prefix length in {s:?}"))?,
            ),
            None => (s, 32),
        };
        let ip: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("--source-ips: {s:?} is not an IPv4 CIDR"))?;
        if len > 32 {
            return Err(format!("--source-ips: prefix length {len} is over 32"));
        }
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        let net = u32::from(ip) & mask;
        let size = if len == 0 {
            u32::MAX
        } else {
            1u32 << (32 - len)
        };
        let (first, count) = if len <= 30 {
            (net + 1, size - 2)
        } else {
            (net, size)
        };
        Ok(SourceIps { first, count })
    }

    /// The address connection number `i` binds to.
    pub fn get(&self, i: u64) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self.first + (i % self.count as u64) as u32))
    }
}

/// Everything a run needs, validated.
#[derive(Clone, Debug)]
pub struct Config {
    pub targets: Vec<Target>,
    pub shards: usize,
    pub connections: usize,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub warmup: Duration,
    pub timeout: Duration,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub pipeline: usize,
    pub rate: Option<f64>,
    pub find_max: bool,
    pub slo_p99: Duration,
    pub max_error_ratio: f64,
    pub find_max_start: f64,
    pub find_max_steps: u32,
    pub find_max_retries: u32,
    pub source_ips: Option<SourceIps>,
    pub json: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub latency: bool,
    pub http2: bool,
    pub streams: usize,
    pub insecure: bool,
    pub payload: Vec<u8>,
    pub driver: Driver,
    pub engine: Engine,
    pub progress: Option<bool>,
    pub quiet: bool,
}

pub const USAGE: &str = "\
Usage: gapura-loadtest [options] URL [URL|PATH ...]

URL is http://, https:// or udp://host:port. Extra URLs or paths rotate per request.

  -c, --connections N    connections (UDP: sockets) in all [10]
  -t, --threads N        shards, one pinned thread each [1]
  -d, --duration T       measured duration: 10s, 1m, 500ms, bare = seconds [10s]
  -n, --requests N       stop after N requests (no duration limit unless -d)
      --warmup T         unmeasured time before the measured duration [0]
      --timeout T        per request (and connect) timeout [2s]
  -X, --method M         request method [GET]
  -H, --header 'K: V'    extra header, repeatable
      --body S           request body
      --body-file F      request body from a file
      --pipeline N       closed loop: N requests written back to back [1]
  -R, --rate R           open loop at R requests/s in all (CO-corrected latency)
      --find-max         search the highest rate meeting --slo-p99 and --max-error-ratio
      --slo-p99 T        p99 bound for --find-max [50ms]
      --max-error-ratio F  error ratio bound for --find-max [0.001]
      --find-max-start R first rate tried [1000]
      --find-max-steps N at most N steps [16]
      --find-max-retries N  re-run a failing step up to N times before it counts [1]
      --source-ips CIDR  bind connections round-robin to these local addresses
      --http2            HTTP/2 (h2c on http://, ALPN h2 on https://)
  -m, --streams N        HTTP/2 concurrent streams per connection [1]
  -k, --insecure         do not verify TLS certificates
      --payload S        UDP payload [\"ping\"]
      --payload-file F   UDP payload from a file
      --payload-size N   pad or cut the UDP payload to N bytes
      --json FILE        write the result as JSON (schema gapura-loadtest/v1)
      --report FILE      write a self-contained HTML report
      --latency          print the detailed latency percentile spectrum
      --driver D         auto | io_uring | epoll [auto]
      --engine E         auto | monoio | uring (HTTP/1.1 closed loop hot path) [auto]
      --progress / --no-progress   live line (default: on when stdout is a TTY)
  -q, --quiet            no summary on stdout
  -h, --help             this text
  -v, --version          version";

/// Parses a duration: `10s`, `1m`, `2h`, `500ms`, `250us`, or bare seconds (may be fractional).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (10s, 1m, 500ms)"))?;
    if !v.is_finite() || v < 0.0 || v * mult > 1e7 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(v * mult))
}

/// Parses a count with an optional k/M/G suffix (wrk accepts `-c1k`).
pub fn parse_count(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1_000.0),
        Some('M') => (&s[..s.len() - 1], 1_000_000.0),
        Some('G') => (&s[..s.len() - 1], 1_000_000_000.0),
        _ => (s, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok((v * mult).round() as u64)
}

/// What the command line asked for.
pub enum Parsed {
    Run(Box<Config>),
    Help,
    Version,
}

const TAKES_VALUE: &[&str] = &[
    "c",
    "connections",
    "t",
    "threads",
    "d",
    "duration",
    "n",
    "requests",
    "warmup",
    "timeout",
    "X",
    "method",
    "H",
    "header",
    "body",
    "body-file",
    "pipeline",
    "R",
    "rate",
    "slo-p99",
    "max-error-ratio",
    "find-max-start",
    "find-max-steps",
    "find-max-retries",
    "source-ips",
    "m",
    "streams",
    "payload",
    "payload-file",
    "payload-size",
    "json",
    "report",
    "driver",
    "engine",
    "s",
    "script",
];

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut opts: Vec<(String, Option<String>)> = Vec::new();
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            positional.extend(args[i..].iter().cloned());
            break;
        }
        let (name, inline) = if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (long.to_string(), None),
            }
        } else if a.len() > 1 && a.starts_with('-') {
            let rest = &a[1..];
            let first = rest.chars().next().unwrap_or('-');
            let n = first.to_string();
            let tail = &rest[first.len_utf8()..];
            (
                n,
                if tail.is_empty() {
                    None
                } else {
                    Some(tail.to_string())
                },
            )
        } else {
            positional.push(a.clone());
            continue;
        };
        let value = if TAKES_VALUE.contains(&name.as_str()) {
            match inline {
                Some(v) => Some(v),
                None => {
                    let v = args
                        .get(i)
                        .cloned()
                        .ok_or_else(|| format!("option {} needs a value", dash(&name)))?;
                    i += 1;
                    Some(v)
                }
            }
        } else {
            if inline.is_some() && name.len() > 1 {
                return Err(format!("option {} takes no value", dash(&name)));
            }
            if inline.is_some() {
                return Err(format!(
                    "unknown option -{name}{}",
                    inline.unwrap_or_default()
                ));
            }
            None
        };
        opts.push((name, value));
    }
    build(opts, positional)
}

fn dash(name: &str) -> String {
    if name.len() == 1 {
        format!("-{name}")
    } else {
        format!("--{name}")
    }
}

fn build(opts: Vec<(String, Option<String>)>, positional: Vec<String>) -> Result<Parsed, String> {
    let mut shards = 1usize;
    let mut connections = 10usize;
    let mut duration = None;
    let mut requests = None;
    let mut warmup = Duration::ZERO;
    let mut timeout = Duration::from_secs(2);
    let mut method = "GET".to_string();
    let mut headers = Vec::new();
    let mut body = Vec::new();
    let mut pipeline = 1usize;
    let mut rate = None;
    let mut find_max = false;
    let mut slo_p99 = Duration::from_millis(50);
    let mut max_error_ratio = 0.001;
    let mut find_max_start = 1000.0;
    let mut find_max_steps = 16;
    let mut find_max_retries = 1;
    let mut source_ips = None;
    let mut json = None;
    let mut report = None;
    let mut latency = false;
    let mut http2 = false;
    let mut streams = 1usize;
    let mut insecure = false;
    let mut payload: Option<Vec<u8>> = None;
    let mut payload_size = None;
    let mut driver = Driver::Auto;
    let mut engine = Engine::Auto;
    let mut progress = None;
    let mut quiet = false;
    for (name, value) in opts {
        let v = value.unwrap_or_default();
        let flag = dash(&name);
        let err = |e: String| format!("{flag}: {e}");
        match name.as_str() {
            "h" | "help" => return Ok(Parsed::Help),
            "v" | "version" => return Ok(Parsed::Version),
            "c" | "connections" => connections = parse_count(&v).map_err(err)? as usize,
            "t" | "threads" => shards = parse_count(&v).map_err(err)? as usize,
            "d" | "duration" => duration = Some(parse_duration(&v).map_err(err)?),
            "n" | "requests" => requests = Some(parse_count(&v).map_err(err)?),
            "warmup" => warmup = parse_duration(&v).map_err(err)?,
            "timeout" => timeout = parse_duration(&v).map_err(err)?,
            "X" | "method" => method = v,
            "H" | "header" => {
                let (k, val) = v
                    .split_once(':')
                    .ok_or_else(|| format!("{flag}: {v:?} is not 'Name: value'"))?;
                let k = k.trim();
                if k.is_empty() || k.bytes().any(|b| b <= b' ' || b >= 0x7f) {
                    return Err(format!("{flag}: bad header name in {v:?}"));
                }
                if val.contains(['\r', '\n']) {
                    return Err(format!("{flag}: header value may not hold CR or LF"));
                }
                headers.push((k.to_string(), val.trim().to_string()));
            }
            "body" => body = v.into_bytes(),
            "body-file" => body = std::fs::read(&v).map_err(|e| format!("{flag}: {v}: {e}"))?,
            "pipeline" => pipeline = parse_count(&v).map_err(err)? as usize,
            "R" | "rate" => {
                let r = v
                    .parse::<f64>()
                    .map_err(|_| format!("{flag}: {v:?} is not a rate"))?;
                if !(r > 0.0 && r.is_finite()) {
                    return Err(format!("{flag}: rate must be above 0"));
                }
                rate = Some(r);
            }
            "find-max" => find_max = true,
            "slo-p99" => slo_p99 = parse_duration(&v).map_err(err)?,
            "max-error-ratio" => {
                max_error_ratio = v
                    .parse::<f64>()
                    .map_err(|_| format!("{flag}: {v:?} is not a ratio"))?;
                if !(0.0..=1.0).contains(&max_error_ratio) {
                    return Err(format!("{flag}: ratio must be within 0..1"));
                }
            }
            "find-max-start" => {
                find_max_start = v
                    .parse::<f64>()
                    .map_err(|_| format!("{flag}: {v:?} is not a rate"))?;
                if !(find_max_start > 0.0 && find_max_start.is_finite()) {
                    return Err(format!("{flag}: rate must be above 0"));
                }
            }
            "find-max-steps" => find_max_steps = parse_count(&v).map_err(err)?.clamp(1, 100) as u32,
            "find-max-retries" => find_max_retries = parse_count(&v).map_err(err)?.min(10) as u32,
            "source-ips" => source_ips = Some(SourceIps::parse(&v)?),
            "json" => json = Some(PathBuf::from(v)),
            "report" => report = Some(PathBuf::from(v)),
            "latency" => latency = true,
            "http2" => http2 = true,
            "m" | "streams" => streams = parse_count(&v).map_err(err)? as usize,
            "k" | "insecure" => insecure = true,
            "payload" => payload = Some(v.into_bytes()),
            "payload-file" => {
                payload = Some(std::fs::read(&v).map_err(|e| format!("{flag}: {v}: {e}"))?)
            }
            "payload-size" => payload_size = Some(parse_count(&v).map_err(err)? as usize),
            "driver" => {
                driver = match v.as_str() {
                    "auto" => Driver::Auto,
                    "io_uring" | "uring" => Driver::IoUring,
                    "epoll" | "legacy" => Driver::Epoll,
                    _ => {
                        return Err(format!(
                            "{flag}: expected auto, io_uring or epoll, got {v:?}"
                        ))
                    }
                }
            }
            "engine" => {
                engine = match v.as_str() {
                    "auto" => Engine::Auto,
                    "monoio" => Engine::Monoio,
                    "uring" | "io_uring" => Engine::Uring,
                    _ => return Err(format!("{flag}: expected auto, monoio or uring, got {v:?}")),
                }
            }
            "progress" => progress = Some(true),
            "no-progress" => progress = Some(false),
            "q" | "quiet" => quiet = true,
            "s" | "script" => {
                return Err(format!(
                    "{flag}: Lua scripts are not supported; use -X, -H, --body and URL lists"
                ))
            }
            _ => return Err(format!("unknown option {flag} (see --help)")),
        }
    }
    if positional.is_empty() {
        return Err("no target URL given (see --help)".into());
    }
    let first = Target::parse(&positional[0])?;
    let mut targets = vec![first.clone()];
    for p in &positional[1..] {
        let t = if p.starts_with('/') {
            first.with_path(p)
        } else {
            Target::parse(p)?
        };
        if t.scheme != first.scheme || t.host != first.host || t.port != first.port {
            return Err(format!(
                "{p}: every URL in a run must share the first one's scheme, host and port"
            ));
        }
        targets.push(t);
    }
    if connections == 0 {
        return Err("-c: at least one connection is needed".into());
    }
    if shards == 0 {
        return Err("-t: at least one shard is needed".into());
    }
    if shards > connections {
        shards = connections;
    }
    if pipeline == 0 || pipeline > 4096 {
        return Err("--pipeline: depth must be within 1..4096".into());
    }
    if streams == 0 || streams > 10_000 {
        return Err("-m: streams must be within 1..10000".into());
    }
    if timeout.is_zero() {
        return Err("--timeout: must be above 0".into());
    }
    if pipeline > 1 && (rate.is_some() || find_max) {
        return Err(
            "--pipeline applies to the closed loop only; drop -R/--find-max or --pipeline".into(),
        );
    }
    let is_udp = first.scheme == Scheme::Udp;
    if is_udp && (http2 || pipeline > 1) {
        return Err("udp:// takes neither --http2 nor --pipeline".into());
    }
    if http2 && pipeline > 1 {
        return Err("--http2 takes -m streams, not --pipeline".into());
    }
    if find_max && requests.is_some() {
        return Err("--find-max runs timed steps; drop -n".into());
    }
    if engine == Engine::Uring
        && (is_udp || http2 || first.scheme == Scheme::Https || rate.is_some() || find_max)
    {
        return Err("--engine uring drives plain http:// closed-loop HTTP/1.1 only".into());
    }
    if duration.is_none() && requests.is_none() {
        duration = Some(if find_max {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(10)
        });
    }
    let mut payload = payload.unwrap_or_else(|| b"ping".to_vec());
    if let Some(n) = payload_size {
        if n == 0 || n > 65_507 {
            return Err("--payload-size: must be within 1..65507".into());
        }
        let src = if payload.is_empty() {
            vec![b'x']
        } else {
            payload.clone()
        };
        payload = src.iter().cycle().take(n).copied().collect();
    }
    Ok(Parsed::Run(Box::new(Config {
        targets,
        shards,
        connections,
        duration,
        requests,
        warmup,
        timeout,
        method,
        headers,
        body,
        pipeline,
        rate,
        find_max,
        slo_p99,
        max_error_ratio,
        find_max_start,
        find_max_steps,
        find_max_retries,
        source_ips,
        json,
        report,
        latency,
        http2,
        streams,
        insecure,
        payload,
        driver,
        engine,
        progress,
        quiet,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn wrk_command_line_parses_with_glued_values() {
        let Parsed::Run(c) = parse(&args(
            "-t2 -c64 -d10s -H Host:x --latency http://127.0.0.1:8080/",
        ))
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (c.shards, c.connections, c.duration),
            (2, 64, Some(Duration::from_secs(10)))
        );
        assert_eq!(c.headers, vec![("Host".to_string(), "x".to_string())]);
        assert!(c.latency);
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("ten").is_err());
    }

    #[test]
    fn source_ips_skip_network_and_broadcast() {
        let s = SourceIps::parse("127.0.0.8/29").unwrap();
        assert_eq!(s.count, 6);
        assert_eq!(s.get(0), "127.0.0.9".parse::<IpAddr>().unwrap());
        assert_eq!(s.get(6), "127.0.0.9".parse::<IpAddr>().unwrap());
        assert_eq!(SourceIps::parse("127.0.0.5/32").unwrap().count, 1);
    }

    #[test]
    fn invalid_combinations_are_refused() {
        assert!(parse(&args("--pipeline 4 -R 100 http://127.0.0.1:1/")).is_err());
        assert!(parse(&args("-c 0 http://127.0.0.1:1/")).is_err());
        assert!(parse(&args("http://127.0.0.1:1/ http://127.0.0.2:1/")).is_err());
        assert!(parse(&args("--bogus http://127.0.0.1:1/")).is_err());
    }
}
