//! `gapura`: the process. It owns the command line, the shards (threads,
//! pinning, drivers), the listeners and their steering, the snapshot cell,
//! signals and reloads, the listeners' handover to a new binary, UDP
//! relays, and the admin listener.
//!
//! It must never hold policy logic: every answer comes from the gate's
//! compiled snapshot, which the config crate builds.
//!
//! Modules:
//!
//! - `cli`: the command line, defined once (arguments, completions, man
//!   pages); `explain`, `passwd`: those two commands (`explain_udp`:
//!   `explain` for one datagram to a UDP relay); `fleetcmd`: `gapura
//!   fleet` (keys, publishing, status, rollback, halt).
//! - `run`: starting and draining (the control thread); `reload`: a
//!   reload's compile, refusals and publish;
//!   `profile`: loading a profile on this machine (cores, the bounded
//!   resolver); `publish`: the snapshot cell.
//! - `shard`: one pinned thread with its runtime, listeners and state;
//!   `listeners`: port ownership, SO_REUSEPORT sockets and steering;
//!   `upgrade`: the graceful binary upgrade (the listening sockets handed
//!   to a new process over a Unix socket, `--upgrade-socket` and
//!   `--take-over`); `udp`: UDP relays in the process (their steered
//!   sockets, envelope keys, each shard's relays and their metrics).
//! - `privileges`: the user the process becomes once every port is bound
//!   (and the refusal to run as root without `--allow-root`); `notify`:
//!   systemd's notification protocol (ready, reloading, stopping,
//!   watchdog).
//! - `health`: active health checks; `fleet`: `[fleet]`'s reconciler started, each shard's sync
//!   timer, the fleet's metrics; `fleetpull`: a node that runs the fleet's
//!   signed profile (its puller thread, its last good version); `acme`: `[acme]`'s thread started and
//!   what it changes in the published snapshot (certificates,
//!   challenges), its metrics.
//! - `admin`: `/healthz` and `/metrics`; `log`: one-line logs;
//!   `accesslog`: the access log's writer thread;
//!   `random`: the kernel's randomness; `powkey`: proof of work's key
//!   file.

mod accesslog;
mod acme;
mod admin;
mod cli;
mod explain;
mod explain_udp;
mod fleet;
mod fleetcmd;
mod fleetpull;
mod health;
mod listeners;
mod log;
mod notify;
mod passwd;
mod powkey;
mod privileges;
mod profile;
mod publish;
mod random;
mod reload;
mod run;
mod shard;
mod udp;
mod upgrade;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Usage errors print clap's message and exit 2; --help and --version exit 0.
    match Cli::parse().command {
        Command::Run(a) => run::run(run::Options {
            profile: a.profile,
            watch: a.watch,
            allow_root: a.allow_root,
            upgrade_socket: a.upgrade_socket,
            take_over: a.take_over,
        }),
        Command::Check { file } => check(&file),
        Command::Explain(a) => explain::run(a.resolve_words()),
        Command::Passwd(a) => passwd::run(a),
        Command::Fleet(a) => fleetcmd::run(a.command),
        Command::Doctor(a) => doctor(a),
        Command::Tune(a) => tune(a),
        Command::Completions { shell } => cli::completions(shell),
        Command::Man { command } => cli::man(command.as_deref()),
    }
}

fn check(file: &str) -> ExitCode {
    match profile::load(Some(std::path::Path::new(file))) {
        Ok(mut c) => {
            for w in &c.warnings {
                eprintln!("{file}:{}", w.as_warning());
            }
            // What `run` refuses, `check` reports.
            let mut refused = Vec::new();
            let creatable =
                c.runtime.pow_key_file.as_deref().is_some_and(|p| {
                    !std::path::Path::new(p).exists() && creatable_file(p).is_ok()
                });
            match pow_key(&mut c, false) {
                Ok(()) if creatable => {
                    println!("{file}: the proof-of-work key file is created at first start")
                }
                Ok(()) => {}
                Err(e) if c.snapshot.gate.pow_in_use => {
                    refused.push(Refused::server(
                        "pow_key_file",
                        format!("proof of work has no key: {e}"),
                    ));
                }
                Err(e) => eprintln!(
                    "{file}: warning: proof of work's key: {e} (no route uses proof of work)"
                ),
            }
            if let Some(Err(e)) = c.runtime.user.as_deref().map(privileges::check_user) {
                refused.push(Refused::server("user", e));
            }
            if let Some(Err(e)) = c.runtime.admin_token_file.as_deref().map(admin::read_token) {
                refused.push(Refused::server("admin_token_file", e));
            }
            if let Some(a) = &c.snapshot.server.access_log {
                if let Err(e) = writable_file(&a.path) {
                    refused.push(Refused::server("access_log", e));
                }
            }
            for (i, relay) in c.snapshot.udp.iter().enumerate() {
                let files = relay.envelope.iter().flat_map(|e| e.key_files.iter());
                for f in files {
                    if let Err(e) = creatable_file(f) {
                        refused.push(Refused {
                            code: "udp.auth.keys.unusable",
                            at: ("udp", i, "auth"),
                            path: format!("udp[{i}].auth.keys"),
                            message: format!("envelope key: {e}"),
                        });
                    }
                }
            }
            if !refused.is_empty() {
                // As the compiler's errors are: the code, and where the
                // setting is written.
                let src = std::fs::read_to_string(file).unwrap_or_default();
                for r in refused {
                    let e = r.placed(&src);
                    eprintln!("{file}:{e}: `gapura run` would not start");
                }
                return ExitCode::FAILURE;
            }
            let shards = match c.runtime.shards {
                gapura_config::Shards::Auto => "auto".to_string(),
                gapura_config::Shards::Count(n) => n.to_string(),
            };
            let counted = |n: usize, one: &str, many: &str| {
                format!("{n} {}", if n == 1 { one } else { many })
            };
            println!(
                "{file}: ok ({}, {}, shards {shards})",
                counted(c.snapshot.entries.len(), "host", "hosts"),
                counted(c.runtime.listen.len(), "listen address", "listen addresses"),
            );
            if c.protection_off.is_empty() {
                println!("{file}: protection: every dimension on (written or default)");
            } else {
                println!("{file}: protection off: {}", c.protection_off.join(", "));
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{file}:{e}");
            }
            eprintln!("{file}: {} error(s)", errors.len());
            ExitCode::FAILURE
        }
    }
}

/// What `run` would refuse of a compiled profile (a file it names that
/// cannot be used, a user that does not exist): its code, the setting
/// (the table, which of its kind, the key) and its path, and why.
struct Refused {
    code: &'static str,
    at: (&'static str, usize, &'static str),
    path: String,
    message: String,
}

impl Refused {
    /// As the compiler's errors are: the code, the path, and where the
    /// setting is written in `src` (0:0 when it is not found).
    fn placed(self, src: &str) -> gapura_config::ProfileError {
        let (table, n, key) = self.at;
        let (line, column) = gapura_config::locate(src, table, n, key).unwrap_or((0, 0));
        gapura_config::ProfileError {
            code: self.code,
            path: self.path,
            line,
            column,
            message: self.message,
        }
    }

    /// A `[server]` setting's refusal.
    fn server(key: &'static str, message: String) -> Refused {
        let code = match key {
            "user" => "server.user.missing",
            "admin_token_file" => "server.admin_token_file.unusable",
            "access_log" => "server.access_log.unwritable",
            _ => "server.pow_key_file.unusable",
        };
        Refused {
            code,
            at: ("server", 0, key),
            path: format!("server.{key}"),
            message,
        }
    }
}

/// Proof of work's key (`[server] pow_key_file`) into the snapshot: read,
/// or created when missing and `create` is set (`run`); a missing file is
/// first checked as the access log is (its directory exists and is
/// writable), so `check` (which creates nothing) and `run` say the same.
fn pow_key(c: &mut gapura_config::Compiled, create: bool) -> Result<(), String> {
    if let Some(p) = c.runtime.pow_key_file.as_deref() {
        if !std::path::Path::new(p).exists() {
            creatable_file(p)?;
            if !create {
                return Ok(());
            }
        }
    }
    powkey::load_into(c, create)
}

/// Whether `path` can be opened for appending (it exists and is
/// writable) or created (its directory exists and is writable), without
/// creating or changing anything.
fn writable_file(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    if p.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(p)
            .map(|_| ())
            .map_err(|e| format!("cannot open {path} for writing: {e}"));
    }
    creatable_file(path)
}

/// Whether a missing `path` could be created: its directory exists and is
/// writable (a file that exists passes: reading it is `run`'s check).
fn creatable_file(path: &str) -> Result<(), String> {
    let p = std::path::Path::new(path);
    if p.exists() {
        return Ok(());
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "{path}: the directory {} does not exist",
            dir.display()
        ));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{path}: not a file name"))?;
    // SAFETY: a NUL-terminated path; access(2) only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!(
            "{path}: the directory {} is not writable",
            dir.display()
        ));
    }
    Ok(())
}

/// `gapura doctor`: the host checked against the profile it will serve.
fn doctor(a: cli::DoctorArgs) -> ExitCode {
    let compiled = match profile::load(a.profile.as_deref()) {
        Ok(c) => c,
        Err(errors) => {
            let name = a
                .profile
                .as_ref()
                .map_or_else(|| "<embedded default>".into(), |p| p.display().to_string());
            for e in &errors {
                eprintln!("{name}:{e}");
            }
            eprintln!("{name}: {} error(s); fix the profile first", errors.len());
            return ExitCode::FAILURE;
        }
    };
    // The steering program attached to a group of two sockets, as start
    // attaches it; the sockets close at once.
    let steering = || {
        let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        listeners::bind_group(any, 2, listeners::Steer::Source)
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let opts = gapura_doctor::Options { json: a.json };
    let code = gapura_doctor::run(Some(&compiled), &steering, &opts, &mut std::io::stdout());
    ExitCode::from(code)
}

/// `gapura tune`: suggestions from an access log.
fn tune(a: cli::TuneArgs) -> ExitCode {
    use std::io::IsTerminal;
    let profile = match a.profile.as_deref().map(gapura_tune::compile_profile) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut opts = gapura_tune::Options::new(a.access_log);
    opts.profile = profile;
    opts.write = a.write;
    opts.progress = std::io::stderr().is_terminal();
    match gapura_tune::run(&opts, &mut std::io::stdout(), &mut std::io::stderr()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gapura tune: {e}");
            ExitCode::FAILURE
        }
    }
}
