//! `gapura`: the process. It owns the command line, the shards (threads,
//! pinning, drivers), the listeners and their steering, the snapshot cell,
//! signals and reloads, and the admin listener.
//!
//! It must never hold policy logic: every answer comes from the gate's
//! compiled snapshot, which the config crate builds.

mod admin;
mod explain;
mod health;
mod listeners;
mod log;
mod passwd;
mod publish;
mod run;
mod shard;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
gapura: a thread-per-core reverse proxy with an abuse-protection gate

usage:
  gapura run [--profile FILE] [--watch]   serve (the embedded default profile without --profile)
  gapura check FILE                       validate a profile; every error with code and line:column
  gapura explain [--profile FILE] [--json] [METHOD] URL ...
                                          run the gate's chain for a described request, step by step
  gapura passwd [--iterations N]          make a password hash for a profile's users
  gapura --version

run options:
  --profile FILE   the TOML profile to serve (SIGHUP reloads it)
  --watch          also reload when FILE changes
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => {
            let mut profile = None;
            let mut watch = false;
            let mut it = args[1..].iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--profile" | "-p" => match it.next() {
                        Some(p) => profile = Some(PathBuf::from(p)),
                        None => return usage_error("--profile needs a file"),
                    },
                    "--watch" => watch = true,
                    other => return usage_error(&format!("unknown option {other}")),
                }
            }
            if watch && profile.is_none() {
                return usage_error("--watch needs --profile");
            }
            run::run(profile, watch)
        }
        Some("check") => match args.get(1) {
            Some(file) if args.len() == 2 => check(file),
            _ => usage_error("check takes one profile file"),
        },
        Some("explain") => explain::run(&args[1..]),
        Some("passwd") => passwd::run(&args[1..]),
        Some("--version" | "-V") => {
            println!("gapura {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("--help" | "-h" | "help") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => usage_error("missing command"),
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("gapura: {msg}\n\n{USAGE}");
    ExitCode::from(2)
}

fn check(file: &str) -> ExitCode {
    match gapura_config::load_file(std::path::Path::new(file)) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("{file}:{w} (warning)");
            }
            println!(
                "{file}: ok ({} hosts, {} listen addresses, shards {:?})",
                c.snapshot.entries.len(),
                c.runtime.listen.len(),
                c.runtime.shards
            );
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
