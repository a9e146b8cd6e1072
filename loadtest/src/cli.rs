//! Command-line parsing into a validated [`Config`].
//!
//! The flags follow wrk's where wrk has one (`-t`, `-c`, `-d` with units,
//! `-H`, `--latency`, `--timeout`), and wrk2's `-R`. Short options accept the
//! value glued (`-t1`) or separate (`-t 1`); long options accept `--x=v` or
//! `--x v`; a repeated option's last value counts. Every error names the flag.
//!
//! The one clap definition, [`Args`], also gives `--help`, the shell
//! completions (`--completions SHELL`) and the man page (`--man`).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, CommandFactory, Parser, ValueEnum, ValueHint};
use clap_complete::Shell;

use crate::target::{Scheme, Target};

/// Which monoio driver a shard runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Driver {
    /// io_uring with the server's ring flags (COOP_TASKRUN | TASKRUN_FLAG), legacy (epoll) if the ring cannot be built.
    #[value(help = "io_uring, or epoll if the ring cannot be built")]
    Auto,
    /// io_uring only; failing to build the ring fails the shard.
    #[value(name = "io_uring", alias = "uring", help = "io_uring only")]
    IoUring,
    /// The legacy (epoll) driver.
    #[value(alias = "legacy", help = "the legacy (epoll) driver")]
    Epoll,
}

/// Which HTTP/1.1 engine runs the plain closed-loop path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// The direct io_uring loop where it applies and can be set up, monoio otherwise.
    #[value(help = "the direct io_uring loop where it applies, monoio otherwise")]
    Auto,
    /// Always the monoio stream path.
    #[value(help = "always the monoio stream path")]
    Monoio,
    /// The direct io_uring loop; an error where it does not apply.
    #[value(alias = "io_uring", help = "the direct io_uring loop only")]
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
                    .map_err(|_| format!("bad prefix length in {s:?}"))?,
            ),
            None => (s, 32),
        };
        let ip: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IPv4 CIDR"))?;
        if len > 32 {
            return Err(format!("prefix length {len} is over 32"));
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
    pub http3: bool,
    pub streams: usize,
    pub insecure: bool,
    pub payload: Vec<u8>,
    pub driver: Driver,
    pub engine: Engine,
    pub progress: Option<bool>,
    pub quiet: bool,
}

/// The exit statuses, for `--help` and the man page.
const EXIT_STATUS: &[(i32, &str)] = &[
    (
        crate::EXIT_OK,
        "at least one response (of any status) or UDP reply was received",
    ),
    (
        crate::EXIT_NO_SUCCESS,
        "nothing succeeded: every attempt failed (refused, timed out, unparseable)",
    ),
    (
        crate::EXIT_USAGE,
        "invalid arguments, or the run could not start (unresolvable host, no runtime)",
    ),
];

/// [`EXIT_STATUS`] as `--help` shows it.
fn exit_status_help() -> String {
    let mut text = String::from("Exit status:");
    for (code, meaning) in EXIT_STATUS {
        text.push_str(&format!("\n  {code}  {meaning}"));
    }
    text
}

const LOAD: &str = "Load";
const REQUESTS: &str = "Requests";
const FIND_MAX: &str = "find-max";
const PROTOCOLS: &str = "Protocols";
const OUTPUT: &str = "Output";

/// The command line as clap reads it; [`parse`] validates it into a [`Config`].
#[derive(Debug, Parser)]
#[command(
    name = "gapura-loadtest",
    version,
    about = "Gapura's load tester: closed-loop, open-loop and find-max HTTP/1.1, HTTPS, HTTP/2 and UDP load",
    long_about = "Gapura's load tester: closed-loop, open-loop and find-max HTTP/1.1, HTTPS, HTTP/2 and UDP load \
        against one origin, on pinned shards.\n\n\
        URL is http://, https:// or udp://host:port. Extra URLs or paths rotate per request. \
        wrk command lines without -s run as they are (-t1 -c64 -d10s).",
    after_long_help = exit_status_help(),
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Args {
    /// http://, https:// or udp://host:port
    #[arg(value_name = "URL", value_hint = ValueHint::Url, required = true)]
    pub url: Option<String>,
    /// Further URLs (the first one's scheme, host and port) or paths, rotated per request
    #[arg(value_name = "URL|PATH")]
    pub more: Vec<String>,

    /// Connections (UDP: sockets) in all; 1k style suffixes are accepted
    #[arg(short, long, value_name = "N", default_value = "10", value_parser = parse_usize, help_heading = LOAD)]
    pub connections: usize,
    /// Shards, one pinned thread each (at most one per connection)
    #[arg(short = 't', long = "threads", value_name = "N", default_value = "1", value_parser = parse_usize, help_heading = LOAD)]
    pub threads: usize,
    /// Measured duration: 10s, 1m, 500ms, bare = seconds [default: 10s, 2s per find-max step]
    #[arg(short, long, value_name = "T", value_parser = parse_duration, help_heading = LOAD)]
    pub duration: Option<Duration>,
    /// Stop after N requests (no duration limit unless -d)
    #[arg(short = 'n', long, value_name = "N", value_parser = parse_count, help_heading = LOAD)]
    pub requests: Option<u64>,
    /// Unmeasured time before the measured duration
    #[arg(long, value_name = "T", default_value = "0", value_parser = parse_duration, help_heading = LOAD)]
    pub warmup: Duration,
    /// Per request (and connect) timeout
    #[arg(long, value_name = "T", default_value = "2s", value_parser = parse_duration, help_heading = LOAD)]
    pub timeout: Duration,
    /// Closed loop: N requests written back to back
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_usize, help_heading = LOAD)]
    pub pipeline: usize,
    /// Open loop at R requests/s in all (CO-corrected latency)
    #[arg(short = 'R', long, value_name = "R", value_parser = parse_rate, help_heading = LOAD)]
    pub rate: Option<f64>,
    /// Bind connections round-robin to these local IPv4 addresses
    #[arg(long, value_name = "CIDR", value_parser = SourceIps::parse, help_heading = LOAD)]
    pub source_ips: Option<SourceIps>,

    /// Request method
    #[arg(short = 'X', long, value_name = "M", default_value = "GET", help_heading = REQUESTS)]
    pub method: String,
    /// Extra header, repeatable
    #[arg(short = 'H', long = "header", value_name = "'K: V'", value_parser = parse_header, help_heading = REQUESTS)]
    pub headers: Vec<(String, String)>,
    /// Request body
    #[arg(long, value_name = "S", overrides_with = "body_file", help_heading = REQUESTS)]
    pub body: Option<String>,
    /// Request body from a file
    #[arg(long, value_name = "F", value_hint = ValueHint::FilePath, overrides_with = "body", help_heading = REQUESTS)]
    pub body_file: Option<PathBuf>,

    /// Search the highest rate meeting --slo-p99 and --max-error-ratio
    #[arg(long, help_heading = FIND_MAX)]
    pub find_max: bool,
    /// p99 bound for --find-max
    #[arg(long, value_name = "T", default_value = "50ms", value_parser = parse_duration, help_heading = FIND_MAX)]
    pub slo_p99: Duration,
    /// Error ratio bound for --find-max
    #[arg(long, value_name = "F", default_value = "0.001", value_parser = parse_ratio, help_heading = FIND_MAX)]
    pub max_error_ratio: f64,
    /// First rate tried
    #[arg(long, value_name = "R", default_value = "1000", value_parser = parse_rate, help_heading = FIND_MAX)]
    pub find_max_start: f64,
    /// At most N steps (1 to 100)
    #[arg(long, value_name = "N", default_value = "16", value_parser = parse_count, help_heading = FIND_MAX)]
    pub find_max_steps: u64,
    /// Re-run a failing step up to N times before it counts (at most 10)
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_count, help_heading = FIND_MAX)]
    pub find_max_retries: u64,

    /// HTTP/2 (h2c on http://, ALPN h2 on https://)
    #[arg(long, help_heading = PROTOCOLS)]
    pub http2: bool,
    /// HTTP/3 over QUIC (https:// targets, UDP to the same port)
    #[arg(long, conflicts_with = "http2", help_heading = PROTOCOLS)]
    pub http3: bool,
    /// HTTP/2 and HTTP/3 concurrent streams per connection
    #[arg(short = 'm', long, value_name = "N", default_value = "1", value_parser = parse_usize, help_heading = PROTOCOLS)]
    pub streams: usize,
    /// Do not verify TLS certificates
    #[arg(short = 'k', long, help_heading = PROTOCOLS)]
    pub insecure: bool,
    /// UDP payload [default: "ping"]
    #[arg(long, value_name = "S", overrides_with = "payload_file", help_heading = PROTOCOLS)]
    pub payload: Option<String>,
    /// UDP payload from a file
    #[arg(long, value_name = "F", value_hint = ValueHint::FilePath, overrides_with = "payload", help_heading = PROTOCOLS)]
    pub payload_file: Option<PathBuf>,
    /// Pad or cut the UDP payload to N bytes
    #[arg(long, value_name = "N", value_parser = parse_usize, help_heading = PROTOCOLS)]
    pub payload_size: Option<usize>,
    /// monoio driver
    #[arg(long, value_name = "D", value_enum, default_value_t = Driver::Auto, help_heading = PROTOCOLS)]
    pub driver: Driver,
    /// HTTP/1.1 closed-loop engine
    #[arg(long, value_name = "E", value_enum, default_value_t = Engine::Auto, help_heading = PROTOCOLS)]
    pub engine: Engine,

    /// Write the result as JSON (schema gapura-loadtest/v1)
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = OUTPUT)]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath, help_heading = OUTPUT)]
    pub report: Option<PathBuf>,
    /// Print the detailed latency percentile spectrum
    #[arg(long, help_heading = OUTPUT)]
    pub latency: bool,
    /// Show the live line [default: when stdout is a terminal]
    #[arg(long, overrides_with = "no_progress", help_heading = OUTPUT)]
    pub progress: bool,
    /// Hide the live line
    #[arg(long, overrides_with = "progress", help_heading = OUTPUT)]
    pub no_progress: bool,
    /// No summary on stdout
    #[arg(short, long, help_heading = OUTPUT)]
    pub quiet: bool,

    /// wrk's Lua script: refused with a hint
    #[arg(short = 's', long, value_name = "FILE", hide = true)]
    pub script: Option<String>,
    /// Print the shell completion script for SHELL and exit
    #[arg(long, value_name = "SHELL", hide = true, exclusive = true)]
    pub completions: Option<Shell>,
    /// Print the man page (roff) and exit
    #[arg(long, hide = true, exclusive = true)]
    pub man: bool,
    /// Print version
    #[arg(short = 'v', long, action = ArgAction::Version)]
    pub version: Option<bool>,
}

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

fn parse_usize(s: &str) -> Result<usize, String> {
    parse_count(s).map(|n| n as usize)
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let r = s
        .parse::<f64>()
        .map_err(|_| format!("{s:?} is not a rate"))?;
    if !(r > 0.0 && r.is_finite()) {
        return Err("rate must be above 0".into());
    }
    Ok(r)
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    let r = s
        .parse::<f64>()
        .map_err(|_| format!("{s:?} is not a ratio"))?;
    if !(0.0..=1.0).contains(&r) {
        return Err("ratio must be within 0..1".into());
    }
    Ok(r)
}

fn parse_header(v: &str) -> Result<(String, String), String> {
    let (k, val) = v
        .split_once(':')
        .ok_or_else(|| format!("{v:?} is not 'Name: value'"))?;
    let k = k.trim();
    if k.is_empty() || k.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return Err(format!("bad header name in {v:?}"));
    }
    if val.contains(['\r', '\n']) {
        return Err("header value may not hold CR or LF".into());
    }
    Ok((k.to_string(), val.trim().to_string()))
}

/// What the command line asked for.
pub enum Parsed {
    Run(Box<Config>),
    /// `--completions SHELL`: print that shell's completion script.
    Completions(Shell),
    /// `--man`: print the man page.
    Man,
}

/// Why a command line was not run.
#[derive(Debug)]
pub enum Error {
    /// clap's own answer: a malformed command line (exit status 2), or
    /// `--help` / `--version` (exit status 0). [`clap::Error::print`] writes
    /// it where it belongs.
    Clap(clap::Error),
    /// A well-formed command line that asks for something invalid; a line
    /// naming the flag.
    Invalid(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Clap(e) => write!(f, "{e}"),
            Error::Invalid(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for Error {}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Parsed, Error> {
    let a = Args::try_parse_from(
        std::iter::once("gapura-loadtest").chain(args.iter().map(String::as_str)),
    )
    .map_err(Error::Clap)?;
    if let Some(shell) = a.completions {
        return Ok(Parsed::Completions(shell));
    }
    if a.man {
        return Ok(Parsed::Man);
    }
    a.build()
        .map(|c| Parsed::Run(Box::new(c)))
        .map_err(Error::Invalid)
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Args::command(), "gapura-loadtest", &mut script);
    script
}

/// The man page, gapura-loadtest(1), in roff.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(Args::command()).manual("Gapura");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    out.extend_from_slice(b".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_STATUS {
        out.extend_from_slice(format!(".TP\n{code}\n{meaning}\n").as_bytes());
    }
    man.render_version_section(&mut out)?;
    Ok(out)
}

impl Args {
    /// Checks what clap cannot (file contents, combinations) and fills in the defaults.
    /// The URL and the further paths or URLs, all on the first one's
    /// scheme, host and port. Required, except beside --completions and
    /// --man, which run no load.
    fn targets(&self) -> Result<Vec<Target>, String> {
        let Some(url) = &self.url else {
            return Err("no target URL given (see --help)".into());
        };
        let first = Target::parse(url)?;
        let mut targets = vec![first.clone()];
        for p in &self.more {
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
        Ok(targets)
    }

    /// The request body and the UDP payload (sized by --payload-size).
    fn bodies(&self) -> Result<(Vec<u8>, Vec<u8>), String> {
        let body = match &self.body_file {
            Some(f) => {
                std::fs::read(f).map_err(|e| format!("--body-file: {}: {e}", f.display()))?
            }
            None => self.body.clone().unwrap_or_default().into_bytes(),
        };
        let payload = match &self.payload_file {
            Some(f) => Some(
                std::fs::read(f).map_err(|e| format!("--payload-file: {}: {e}", f.display()))?,
            ),
            None => self.payload.clone().map(String::into_bytes),
        };
        let mut payload = payload.unwrap_or_else(|| b"ping".to_vec());
        if let Some(n) = self.payload_size {
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
        Ok((body, payload))
    }

    /// The limits and which modes go together; the shard count (at most
    /// one per connection).
    fn check_modes(&self, first: &Target) -> Result<usize, String> {
        let (connections, pipeline, streams) = (self.connections, self.pipeline, self.streams);
        let (rate, find_max, http2) = (self.rate, self.find_max, self.http2);
        if connections == 0 {
            return Err("-c: at least one connection is needed".into());
        }
        if self.threads == 0 {
            return Err("-t: at least one shard is needed".into());
        }
        if pipeline == 0 || pipeline > 4096 {
            return Err("--pipeline: depth must be within 1..4096".into());
        }
        if streams == 0 || streams > 10_000 {
            return Err("-m: streams must be within 1..10000".into());
        }
        if self.timeout.is_zero() {
            return Err("--timeout: must be above 0".into());
        }
        if pipeline > 1 && (rate.is_some() || find_max) {
            return Err(
                "--pipeline applies to the closed loop only; drop -R/--find-max or --pipeline"
                    .into(),
            );
        }
        let is_udp = first.scheme == Scheme::Udp;
        if is_udp && (http2 || pipeline > 1) {
            return Err("udp:// takes neither --http2 nor --pipeline".into());
        }
        if http2 && pipeline > 1 {
            return Err("--http2 takes -m streams, not --pipeline".into());
        }
        if self.http3 && (pipeline > 1 || first.scheme != Scheme::Https) {
            return Err("--http3 takes an https:// target and -m streams, not --pipeline".into());
        }
        if find_max && self.requests.is_some() {
            return Err("--find-max runs timed steps; drop -n".into());
        }
        if self.engine == Engine::Uring
            && (is_udp
                || http2
                || self.http3
                || first.scheme == Scheme::Https
                || rate.is_some()
                || find_max)
        {
            return Err("--engine uring drives plain http:// closed-loop HTTP/1.1 only".into());
        }
        Ok(self.threads.min(connections))
    }

    /// The run's configuration, its steps: the targets (`targets`), the
    /// bodies (`bodies`), the limits and mode combinations (`check_modes`),
    /// the duration.
    fn build(self) -> Result<Config, String> {
        if self.script.is_some() {
            return Err(
                "-s: Lua scripts are not supported; use -X, -H, --body and URL lists".into(),
            );
        }
        let targets = self.targets()?;
        let shards = self.check_modes(&targets[0])?;
        let (body, payload) = self.bodies()?;
        let (connections, pipeline, streams, timeout) =
            (self.connections, self.pipeline, self.streams, self.timeout);
        let (rate, find_max, requests, http2, engine) = (
            self.rate,
            self.find_max,
            self.requests,
            self.http2,
            self.engine,
        );
        let duration = match (self.duration, requests) {
            (None, None) if find_max => Some(Duration::from_secs(2)),
            (None, None) => Some(Duration::from_secs(10)),
            (d, _) => d,
        };
        let progress = if self.progress {
            Some(true)
        } else if self.no_progress {
            Some(false)
        } else {
            None
        };
        Ok(Config {
            targets,
            shards,
            connections,
            duration,
            requests,
            warmup: self.warmup,
            timeout,
            method: self.method,
            headers: self.headers,
            body,
            pipeline,
            rate,
            find_max,
            slo_p99: self.slo_p99,
            max_error_ratio: self.max_error_ratio,
            find_max_start: self.find_max_start,
            find_max_steps: self.find_max_steps.clamp(1, 100) as u32,
            find_max_retries: self.find_max_retries.min(10) as u32,
            source_ips: self.source_ips,
            json: self.json,
            report: self.report,
            latency: self.latency,
            http2,
            http3: self.http3,
            streams,
            insecure: self.insecure,
            payload,
            driver: self.driver,
            engine,
            progress,
            quiet: self.quiet,
        })
    }
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
        assert!(matches!(
            parse(&args("-s x.lua http://127.0.0.1:1/")),
            Err(Error::Invalid(e)) if e.contains("Lua")
        ));
        assert!(matches!(
            parse(&args("-c 0 http://127.0.0.1:1/")),
            Err(Error::Invalid(_))
        ));
        assert!(
            matches!(parse(&args("-c ten http://127.0.0.1:1/")), Err(Error::Clap(e)) if e.exit_code() == 2)
        );
        assert!(matches!(parse(&args("-t 1")), Err(Error::Clap(e)) if e.exit_code() == 2));
    }

    #[test]
    fn the_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn options_may_follow_the_urls_and_the_last_value_counts() {
        let Parsed::Run(c) = parse(&args(
            "http://127.0.0.1:1/ /b -c1k -c 8 --driver=legacy --engine io_uring --body x --body-file /dev/null --progress --no-progress -q -q",
        ))
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.connections, 8);
        assert_eq!(c.targets.len(), 2);
        assert_eq!((c.driver, c.engine), (Driver::Epoll, Engine::Uring));
        assert!(c.body.is_empty());
        assert_eq!(c.progress, Some(false));
        assert!(c.quiet);
        let Parsed::Run(c) = parse(&args(
            "--body-file /dev/null --body x -c1k --payload-file /dev/null --payload abc http://127.0.0.1:1/",
        ))
        .unwrap() else {
            panic!()
        };
        assert_eq!((c.body.as_slice(), c.connections), (&b"x"[..], 1000));
        assert_eq!(c.payload, b"abc");
        assert_eq!(c.duration, Some(Duration::from_secs(10)));
    }

    #[test]
    fn help_version_completions_and_man_need_no_url() {
        for a in ["--help", "-h", "-v", "--version"] {
            assert!(
                matches!(parse(&args(a)), Err(Error::Clap(e)) if e.exit_code() == 0),
                "{a}"
            );
        }
        assert!(matches!(
            parse(&args("--completions zsh")),
            Ok(Parsed::Completions(Shell::Zsh))
        ));
        assert!(matches!(parse(&args("--man")), Ok(Parsed::Man)));
    }
}
