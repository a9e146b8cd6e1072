//! `gapura tune`: rate limits and budgets derived from an access log.
//!
//! It must never hold more than a bounded table of clients, whatever the
//! log's size, and never changes a profile itself.
//!
//! Modules, in the order a line goes through them:
//!
//! - `read`: lines one at a time into one reused, bounded buffer;
//! - `parse`: a JSON line into its time, client, host and path;
//! - `group`: the host and route the gate would pick (or the logged host);
//! - `table`: the fixed-capacity, least-recently-seen-out table of clients
//!   and of source prefixes;
//! - `series`: a key's counts per second or window, closed as the log's
//!   time passes them;
//! - `histogram`: bounded distributions (exact small counts, logarithmic
//!   buckets above);
//! - `analyze`: the pass over the log;
//! - `suggest`: the mean + 3.5σ method, the rounding and the refused share;
//! - `report` and `fragment`: the readable report and `--write`'s profile
//!   fragment;
//! - `progress`: progress on a terminal.
//!
//! docs/tune.md describes what is computed and why.

#![forbid(unsafe_code)]

pub mod analyze;
pub mod fragment;
pub mod group;
pub mod histogram;
pub mod parse;
pub mod progress;
pub mod read;
pub mod report;
pub mod series;
pub mod suggest;
pub mod table;

use gapura_config::{
    CertificateLoader, Compiled, Environment, LoadedPair, PairProblem, ProfileError, Resolver,
};
use std::io::{BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// Client entries held at once by default (over all groups); the prefix
/// table holds as many prefixes.
pub const DEFAULT_MAX_CLIENTS: usize = 1_000_000;
/// Host/route groups kept by default; further ones count in `(other)`.
pub const DEFAULT_MAX_GROUPS: usize = 1000;
/// The budget window without a profile: the profile's own default
/// (`[quota] window_ms`).
pub const DEFAULT_WINDOW_MS: u64 = 1000;

/// What `gapura tune` was asked.
#[derive(Clone, Debug)]
pub struct Options {
    pub access_log: PathBuf,
    /// Routes and the budget window come from it; without one, groups are
    /// per host and the window is [`DEFAULT_WINDOW_MS`].
    pub profile: Option<Compiled>,
    /// Print a profile fragment instead of the report.
    pub write: bool,
    /// The progress writer is a terminal: show progress on it.
    pub progress: bool,
    pub max_clients: usize,
    pub max_groups: usize,
}

impl Options {
    /// The defaults for a log: no profile, the report, no progress.
    pub fn new(access_log: PathBuf) -> Options {
        Options {
            access_log,
            profile: None,
            write: false,
            progress: false,
            max_clients: DEFAULT_MAX_CLIENTS,
            max_groups: DEFAULT_MAX_GROUPS,
        }
    }

    fn window_ms(&self) -> u64 {
        self.profile
            .as_ref()
            .map_or(DEFAULT_WINDOW_MS, |p| p.snapshot.gate.quota_sizes.window_ms)
    }

    fn settings(&self) -> analyze::Settings<'_> {
        analyze::Settings {
            profile: self.profile.as_ref(),
            window_ms: self.window_ms(),
            max_clients: self.max_clients,
            max_groups: self.max_groups,
        }
    }
}

/// Reads the log, writes the report (or with `write` the fragment) to
/// `out`, and progress to `progress` when `opts.progress`. Errors: the log
/// cannot be opened or read, or `out` cannot be written.
pub fn run(opts: &Options, out: &mut dyn Write, progress: &mut dyn Write) -> Result<(), String> {
    let path = opts.access_log.display().to_string();
    let file = std::fs::File::open(&opts.access_log)
        .map_err(|e| format!("cannot open the access log {path}: {e}"))?;
    let total = file.metadata().map_or(0, |m| m.len());
    let mut input = BufReader::with_capacity(256 * 1024, file);
    let mut p = progress::Progress::new(opts.progress.then_some(progress), total);
    let a = analyze::analyze(&mut input, &opts.settings(), &mut p)?;
    if a.requests == 0 && a.lines > a.blank {
        return Err(format!(
            "{path}: none of its {} lines is an access log line Gapura writes: expected one \
             JSON object a line (`[server] access_log = {{ format = \"json\" }}`, with `time`, \
             `client`, `host`, `method`, `path`) or the combined format ({} malformed, {} \
             without a client)",
            a.lines, a.malformed, a.no_client
        ));
    }
    let text = if opts.write {
        fragment::render(&a, &path)
    } else {
        report::render(
            &a,
            &report::Context {
                log: &path,
                window_from: if opts.profile.is_some() {
                    "the profile"
                } else {
                    "the default; give --profile for the profile's"
                },
                max_clients: opts.max_clients,
                max_groups: opts.max_groups,
            },
        )
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the output: {e}"))
}

/// Every name resolves to 127.0.0.1: tune never connects, it only needs the
/// profile's routes.
struct Loopback;

impl Resolver for Loopback {
    fn resolve(&self, _host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        Ok(vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)])
    }
}

/// Certificates are not read: every pair is a placeholder, since tune
/// serves nothing and only needs the profile's hosts and routes.
struct Placeholders;

impl CertificateLoader for Placeholders {
    fn load_pair(&self, cert: &str, key: &str) -> Result<LoadedPair, PairProblem> {
        Ok(LoadedPair {
            chain: vec![cert.as_bytes().to_vec()],
            key: key.as_bytes().to_vec(),
        })
    }
    fn load_ocsp(&self, path: &str) -> Result<Vec<u8>, String> {
        Ok(path.as_bytes().to_vec())
    }
    fn load_cas(&self, path: &str) -> Result<Vec<Vec<u8>>, String> {
        Ok(vec![path.as_bytes().to_vec()])
    }
    fn ticket_secret(&self) -> Vec<u8> {
        Vec::new()
    }
}

/// The environment tune compiles profiles in: one core, the config's
/// fallback memory, names resolved to 127.0.0.1, certificate files not
/// read.
fn with_environment<T>(f: impl FnOnce(&Environment<'_>) -> T) -> T {
    f(&Environment {
        cores: 1,
        memory_bytes: gapura_config::FALLBACK_MEMORY_BYTES,
        resolver: &Loopback,
        certificates: &Placeholders,
    })
}

fn errors_text(path: &str, errors: Vec<ProfileError>) -> String {
    let mut text = format!("{path}: the profile does not compile");
    for e in errors {
        text.push_str(&format!(
            "\n  {}:{} {} ({}): {}",
            e.line, e.column, e.path, e.code, e.message
        ));
    }
    text
}

/// Reads and compiles a profile as tune needs it (see `with_environment`):
/// the errors, if any, as one text.
pub fn compile_profile(path: &Path) -> Result<Compiled, String> {
    with_environment(|env| gapura_config::load_file_with(path, env))
        .map_err(|e| errors_text(&path.display().to_string(), e))
}

/// Compiles profile text as [`compile_profile`] does.
pub fn compile_profile_text(src: &str) -> Result<Compiled, String> {
    with_environment(|env| gapura_config::compile_with(src, env))
        .map_err(|e| errors_text("profile", e))
}
