//! The command line, defined once: the same definition parses the arguments,
//! writes `--help`, and generates the shell completions
//! (`gapura completions SHELL`) and the man pages (`gapura man [COMMAND]`).
//!
//! Usage errors exit with status 2, clap's status for them.

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueHint};
use clap_complete::Shell;
use gapura_gate::access::password::{DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS};
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// The exit statuses every command shares, for `--help` and the man pages.
const EXIT_STATUS: &[(u8, &str)] = &[
    (0, "success (for run: stopped by a signal after draining)"),
    (
        1,
        "the command failed: a profile with errors, a server that could not start, a refused password",
    ),
    (2, "a usage error: an unknown option, a missing or invalid value"),
    (3, "doctor: the worst finding is a warning"),
];

/// [`EXIT_STATUS`] as `--help` shows it.
fn exit_status_help() -> String {
    let mut text = String::from("Exit status:");
    for (code, meaning) in EXIT_STATUS {
        text.push_str(&format!("\n  {code}  {meaning}"));
    }
    text
}

/// The subcommands that have a man page of their own (`gapura man COMMAND`):
/// every one of [`Command`]'s.
pub const MAN_PAGES: [&str; 9] = [
    "run",
    "check",
    "explain",
    "passwd",
    "fleet",
    "doctor",
    "tune",
    "completions",
    "man",
];

/// A thread-per-core reverse proxy with an abuse-protection gate
///
/// One shard runs per core, pinned, with its own listeners, parser and
/// tables. `gapura run` serves a TOML profile (the embedded default without
/// one), `gapura check` validates a profile, `gapura explain` shows how the
/// gate decides a request, and `gapura passwd` makes password hashes for a
/// profile's users.
#[derive(Debug, Parser)]
#[command(
    name = "gapura",
    version,
    arg_required_else_help = true,
    args_override_self = true,
    after_long_help = exit_status_help()
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve (the embedded default profile without --profile)
    ///
    /// Serves until SIGINT or SIGTERM, then drains the requests in flight and
    /// exits 0. SIGHUP reloads the profile; a failed reload keeps the running
    /// one.
    Run(RunArgs),
    /// Validate a profile; every error with its code and line:column
    ///
    /// Prints every warning and error as `FILE:LINE:COLUMN: ...` on stderr,
    /// then `FILE: ok (...)` on stdout and exits 0, or the error count and
    /// exits 1.
    #[command(args_override_self = true)]
    Check {
        /// The TOML profile to validate
        #[arg(value_name = "FILE", value_hint = ValueHint::FilePath)]
        file: String,
    },
    /// Run the gate's chain for a described request, step by step
    ///
    /// Uses the same decision as the server, on fresh tables of its own, so it
    /// changes nothing in a running server. The URL is http://host[:port]/path?query
    /// and its host is the Host header. `gapura explain udp://RELAY IP:PORT
    /// DATAGRAM` runs a UDP relay's checks on one datagram (hex or @FILE)
    /// and names the step that would drop it.
    Explain(Box<ExplainArgs>),
    /// Make a password hash for a profile's users
    ///
    /// Reads the password from GAPURA_PASSWORD, the terminal (no echo, asked
    /// twice) or stdin, and prints the line for a user's `password_hash` in a
    /// profile.
    Passwd(PasswdArgs),
    /// One profile for the fleet: a signing key, publishing, status, rollback
    ///
    /// Versions are stored in the fleet's Redis, signed with the publisher's
    /// Ed25519 key; nodes with `[fleet] profile = "pull"` and its public key
    /// apply the current one and report ACK or NACK (docs/fleet.md, "One
    /// profile for the fleet"). The engine is `--redis URL`, or the `[fleet]`
    /// of the local profile given with `--profile`.
    Fleet(FleetArgs),
    /// Check this host for what Gapura needs; changes nothing
    ///
    /// io_uring and its flags, memlock and open-file limits against the
    /// profile, listen backlogs, steering, CPUs and isolation, SMT, NUMA and
    /// NIC interrupts, the clock source, huge pages, kernel TLS and the
    /// profile's ports. Each finding says what was found, why it matters and
    /// how to fix it. Exits 0 when nothing warns, 3 when the worst finding
    /// is a warning, 1 when one fails (docs/doctor.md).
    Doctor(DoctorArgs),
    /// Suggest rate limits and budgets from an access log
    ///
    /// Reads a JSON access log (streamed, in bounded memory) and prints, per
    /// host and route, requests per client per second and per window (mean,
    /// standard deviation, p99, max) with a suggested rate and burst at the
    /// mean plus 3.5 standard deviations, and source-prefix budgets likewise
    /// (docs/tune.md).
    Tune(TuneArgs),
    /// Print a shell completion script to stdout
    ///
    /// For example `gapura completions bash > /etc/bash_completion.d/gapura`,
    /// or `gapura completions zsh > ~/.zfunc/_gapura`.
    #[command(args_override_self = true)]
    Completions {
        /// The shell to complete for
        #[arg(value_name = "SHELL")]
        shell: Shell,
    },
    /// Print a man page (roff) to stdout
    ///
    /// Without COMMAND, gapura(1); with it, that command's page, gapura-COMMAND(1).
    /// For example `gapura man run > gapura-run.1`.
    #[command(args_override_self = true)]
    Man {
        /// The command whose page to print
        #[arg(value_name = "COMMAND", value_parser = MAN_PAGES)]
        command: Option<String>,
    },
}

#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub struct RunArgs {
    /// The TOML profile to serve (SIGHUP reloads it)
    #[arg(short, long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub profile: Option<PathBuf>,
    /// Also reload when FILE changes
    #[arg(long, requires = "profile")]
    pub watch: bool,
    /// Run as root even though the profile names no `user` to become
    #[arg(long)]
    pub allow_root: bool,
    /// Serve hand-overs at PATH: a new binary started with --take-over PATH
    /// takes this process's listeners, then this one drains and exits
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub upgrade_socket: Option<PathBuf>,
    /// Take the listeners of the process serving hand-overs at PATH (same
    /// listen addresses and shard count), then tell it to drain
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub take_over: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub struct DoctorArgs {
    /// The profile Gapura will serve (the embedded default without it):
    /// its ports, shards and connection limits are checked
    #[arg(short, long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub profile: Option<PathBuf>,
    /// Print the findings as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub struct TuneArgs {
    /// The access log to read (`format = "json"`)
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub access_log: PathBuf,
    /// The profile the log was written under: requests are grouped by the
    /// route it picks, and budgets use its window
    #[arg(short, long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub profile: Option<PathBuf>,
    /// Print a profile fragment with the suggestions instead of the report
    #[arg(long)]
    pub write: bool,
}

#[derive(Debug, Args)]
#[command(args_override_self = true, allow_missing_positional = true)]
pub struct ExplainArgs {
    /// The profile to decide with (the embedded default without it)
    #[arg(short, long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub profile: Option<String>,
    /// Print the request, the steps and the answer as JSON
    #[arg(long)]
    pub json: bool,
    /// Also ask the running server (its admin listener, from the profile)
    /// what its live tables hold for this request: tokens left, window
    /// counts, leases, upstream pools; nothing is changed
    #[arg(long)]
    pub live: bool,
    /// The admin listener --live asks [default: the profile's `admin`]
    #[arg(long, value_name = "ADDR", requires = "live")]
    pub admin: Option<std::net::SocketAddr>,
    /// The TCP peer [default: 127.0.0.1, or --client when --via direct]
    #[arg(long, value_name = "IP")]
    pub peer: Option<IpAddr>,
    /// The client address a trusted proxy or Cloudflare names
    #[arg(long, value_name = "IP")]
    pub client: Option<IpAddr>,
    /// How the request arrives
    #[arg(
        long,
        value_name = "VIA",
        default_value = "direct",
        value_parser = PossibleValuesParser::new([
            PossibleValue::new("direct").help("straight from the client"),
            PossibleValue::new("proxy").help("through a trusted proxy (adds X-Forwarded-For)"),
            PossibleValue::new("cloudflare").help(
                "through Cloudflare (adds CF-Connecting-IP and, with --country, CF-IPCountry)"
            ),
        ])
    )]
    pub via: String,
    /// The country Cloudflare names (CF-IPCountry), with --via cloudflare
    #[arg(long, value_name = "CC")]
    pub country: Option<String>,
    /// A request header, repeatable
    #[arg(
        short = 'H',
        long = "header",
        value_name = "'Name: value'",
        value_parser = header
    )]
    pub headers: Vec<(String, String)>,
    /// [METHOD] URL: the request method as sent (GET when left out) and
    /// http://host[:port]/path?query (the host is the Host header); or
    /// udp://RELAY SOURCE DATAGRAM: a UDP relay's name, the datagram's
    /// source (IP:PORT) and the datagram as hex or @FILE
    #[arg(value_name = "[METHOD] URL", num_args = 1..=3, required = true, value_hint = ValueHint::Url)]
    pub words: Vec<String>,
    /// The request method (from `words`).
    #[arg(skip)]
    pub method: String,
    /// The URL, or with udp://RELAY the datagram's source (from `words`).
    #[arg(skip)]
    pub url: String,
    /// With udp://RELAY: the datagram (from `words`).
    #[arg(skip)]
    pub datagram: Option<String>,
}

impl ExplainArgs {
    /// Sets `method`, `url` and `datagram` from the positional words.
    pub fn resolve_words(mut self) -> ExplainArgs {
        let mut w = std::mem::take(&mut self.words).into_iter();
        match (w.next(), w.next(), w.next()) {
            (Some(url), None, _) => {
                self.method = "GET".into();
                self.url = url;
            }
            (Some(method), Some(url), datagram) => {
                self.method = method;
                self.url = url;
                self.datagram = datagram;
            }
            (None, _, _) => {}
        }
        self
    }
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Write a new Ed25519 signing key (mode 0600) and print the line nodes
    /// put in their `[fleet]`
    Keygen {
        /// Where the key is written (it must not exist)
        #[arg(value_name = "KEYFILE", value_hint = ValueHint::FilePath)]
        keyfile: PathBuf,
    },
    /// Check a profile as `check` does, then publish it, signed, as the
    /// current version (a profile with an error is never published)
    Publish {
        #[command(flatten)]
        signer: SignerArgs,
        /// Who publishes, for `status` (default: $USER)
        #[arg(long, value_name = "NAME")]
        author: Option<String>,
        /// The largest version published, in bytes
        #[arg(long, value_name = "N", default_value_t = 1 << 20)]
        max_bytes: u64,
        /// Stage it: this share of the nodes (such as 34%) takes it first
        #[arg(long, value_name = "PERCENT", value_parser = percent)]
        canary: Option<u8>,
        /// How long the canaries hold it before the rest take it (such as
        /// 30s, 500ms)
        #[arg(long, value_name = "DURATION", value_parser = duration_ms, default_value = "30s")]
        soak: u64,
        /// Halt and return the canaries when more of their answers than
        /// this (such as 5%) are 5xx
        #[arg(long = "halt-on-5xx", value_name = "PERCENT", value_parser = percent)]
        halt_on_5xx: Option<u8>,
        /// Halt when more of the canaries' requests than this are refused
        /// by the gate
        #[arg(long = "halt-on-refused", value_name = "PERCENT", value_parser = percent)]
        halt_on_refused: Option<u8>,
        /// The fleet's profile
        #[arg(value_name = "PROFILE", value_hint = ValueHint::FilePath)]
        file: PathBuf,
    },
    /// The current version, the rollout's state, and each node's report
    Status {
        #[command(flatten)]
        engine: EngineArgs,
        /// One JSON object instead of text
        #[arg(long)]
        json: bool,
    },
    /// Make an earlier version current again (default: the one before)
    Rollback {
        #[command(flatten)]
        signer: SignerArgs,
        /// The version to return to
        #[arg(value_name = "VERSION")]
        version: Option<u64>,
    },
    /// Stop the rollout: every node stays on what it runs
    Halt {
        #[command(flatten)]
        signer: SignerArgs,
    },
}

/// Where the engine is: `--redis URL`, or a local profile's `[fleet]`.
#[derive(Debug, Args)]
pub struct EngineArgs {
    /// The engine's address (redis:// or rediss://)
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// A local profile whose `[fleet]` names the engine and its password
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub profile: Option<PathBuf>,
}

/// The engine, and the publisher's key.
#[derive(Debug, Args)]
pub struct SignerArgs {
    /// The publisher's key, as `gapura fleet keygen` wrote it
    #[arg(long, value_name = "KEYFILE", value_hint = ValueHint::FilePath)]
    pub key: PathBuf,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Args)]
#[command(args_override_self = true)]
pub struct PasswdArgs {
    /// PBKDF2-SHA256 iterations (100000 to 10000000)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_ITERATIONS, value_parser = iterations)]
    pub iterations: u32,
}

fn header(s: &str) -> Result<(String, String), String> {
    let (n, v) = s.split_once(':').ok_or("needs 'Name: value'")?;
    Ok((n.trim().to_string(), v.trim().to_string()))
}

/// `34%` or `34`: 0 to 100.
fn percent(s: &str) -> Result<u8, String> {
    match s.trim_end_matches('%').parse::<u8>() {
        Ok(n) if n <= 100 => Ok(n),
        _ => Err("a percentage from 0 to 100, such as 34%".into()),
    }
}

/// `30s`, `500ms`, `2m`: milliseconds.
fn duration_ms(s: &str) -> Result<u64, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = n.parse().map_err(|_| "a duration such as 30s or 500ms")?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        _ => return Err("a duration such as 30s or 500ms".into()),
    };
    Ok(n.saturating_mul(scale))
}

fn iterations(s: &str) -> Result<u32, String> {
    match s.parse() {
        Ok(n) if (MIN_ITERATIONS..=MAX_ITERATIONS).contains(&n) => Ok(n),
        _ => Err(format!("must be {MIN_ITERATIONS} to {MAX_ITERATIONS}")),
    }
}

/// `gapura completions SHELL`: the completion script on stdout.
pub fn completions(shell: Shell) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gapura", &mut script);
    print_all(&script)
}

/// `gapura man [COMMAND]`: gapura(1), or gapura-COMMAND(1), on stdout.
pub fn man(command: Option<&str>) -> ExitCode {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Gives the subcommands their full names (`gapura run`, `gapura-run`).
    cmd.build();
    debug_assert!(
        cmd.get_subcommands()
            .all(|s| MAN_PAGES.contains(&s.get_name())),
        "MAN_PAGES lacks a subcommand"
    );
    let page = match command {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => sub.clone(),
            None => {
                eprintln!("gapura man: no command {name}");
                return ExitCode::from(2);
            }
        },
    };
    let mut roff = Vec::new();
    match render_man(page, &mut roff) {
        Ok(()) => print_all(&roff),
        Err(e) => {
            eprintln!("gapura man: {e}");
            ExitCode::FAILURE
        }
    }
}

fn render_man(page: clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    let has_subcommands = page.get_subcommands().any(|s| !s.is_hide_set());
    let has_version = page.get_version().is_some();
    let man = clap_mangen::Man::new(page)
        .source(format!("gapura {}", env!("CARGO_PKG_VERSION")))
        .manual("Gapura");
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    if has_subcommands {
        man.render_subcommands_section(out)?;
    }
    out.extend_from_slice(b".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_STATUS {
        writeln!(out, ".TP\n{code}\n{meaning}")?;
    }
    if has_version {
        man.render_version_section(out)?;
    }
    Ok(())
}

fn print_all(bytes: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gapura: {e}");
            ExitCode::FAILURE
        }
    }
}
