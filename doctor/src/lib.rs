//! `gapura doctor`: checks the host for what Gapura needs and says why and
//! how to fix each finding.
//!
//! It must never change the host: it reads files under /proc and /sys and
//! asks the kernel what it allows, nothing more.
//!
//! The only things it creates are io_uring rings, listening sockets bound
//! to the profile's addresses, whatever the caller's steering probe
//! creates, with a `[fleet]`, one connection to its Redis (reads only:
//! `INFO`, `CLUSTER INFO`, `PING`), and, with `[acme]`, one `GET` of the
//! certificate authority's directory; each is released at once.
//!
//! Modules:
//! - [`host`]: where /proc and /sys files are read from ([`Host`],
//!   [`FsHost`], [`MapHost`] for recorded files).
//! - [`probe`]: live kernel questions ([`Probe`], [`RealProbe`]): ring
//!   creation, resource limits, binding an address.
//! - [`finding`]: findings, levels, the report, its text and JSON, exit
//!   codes.
//! - `checks`: one function per check over what the host shows.
//! - `acme`: with `[acme]`, the authority's directory, the clocks and the
//!   challenges' ports.
//! - [`parse`]: the kernel's small text formats.

mod acme;
mod checks;
pub mod finding;
pub mod host;
pub mod parse;
pub mod probe;

pub use checks::{CHECK_IDS, LISTEN_BACKLOG, RING_ENTRIES};
pub use finding::{Finding, Level, Report, EXIT_FAIL, EXIT_OK, EXIT_USAGE, EXIT_WARN};
pub use host::{FsHost, Host, MapHost};
pub use probe::{Probe, Proto, RealProbe, Resource, RingFlags, Rlimit};

use gapura_config::Compiled;

/// How the report is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// JSON instead of text.
    pub json: bool,
}

/// Runs every check against `host` and `probe`. `profile` is the compiled
/// profile the checks size against (`None`: the profile-dependent parts
/// say they were skipped); `steering` attaches the SO_REUSEPORT steering
/// program to a throwaway socket group and says whether it could.
pub fn report(
    host: &dyn Host,
    probe: &dyn Probe,
    profile: Option<&Compiled>,
    steering: &dyn Fn() -> Result<(), String>,
) -> Report {
    Report {
        findings: checks::run_all(host, probe, profile, steering),
    }
}

/// Checks this host, writes the report to `out` and returns the exit code:
/// 0 when nothing warns or fails, 3 when the worst finding is a warning, 1
/// when anything fails (2 is the caller's, for usage errors).
pub fn run(
    profile: Option<&Compiled>,
    steering: &dyn Fn() -> Result<(), String>,
    opts: &Options,
    out: &mut dyn std::io::Write,
) -> u8 {
    let mut r = report(&FsHost::new(), &RealProbe, profile, steering);
    if let Some(f) = profile.and_then(|p| p.runtime.fleet.as_ref()) {
        r.findings.push(fleet_finding(f));
    }
    if let Some(p) = profile {
        if let Some(a) = &p.runtime.acme {
            r.findings.extend(acme::findings(a, &p.runtime));
        }
    }
    let text = if opts.json {
        let mut s = serde_json::to_string_pretty(&r.to_json()).unwrap_or_default();
        s.push('\n');
        s
    } else {
        r.to_text()
    };
    // A closed output cannot change the verdict.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    r.exit_code()
}

/// `fleet.redis`: the profile's Redis reachable (AUTH included), its
/// version, a cluster's state, one round trip against `sync_ms`.
fn fleet_finding(f: &gapura_config::FleetSettings) -> Finding {
    let id = "fleet.redis";
    let to = f.redis.0.join(", ");
    let password = match f.password_file.as_deref().map(gapura_fleet::read_password) {
        Some(Err(e)) => {
            return Finding::new(id, Level::Fail, format!("password_file unreadable: {e}"))
                .fix("make [fleet] password_file readable by the user Gapura runs as");
        }
        Some(Ok(p)) => Some(p),
        None => None,
    };
    let target = gapura_fleet::Target {
        addresses: f.redis.0.clone(),
        cluster: f.redis.1,
        password,
        timeout: gapura_fleet::timeout_for(f.sync_ms),
    };
    match gapura_fleet::engine::check(&target) {
        Err(e) => Finding::new(
            id,
            Level::Fail,
            format!("{to}: {}", gapura_fleet::engine::words(&e)),
        )
        .why("fleet-scoped limits hold each node to limit / nodes_expected without it")
        .fix("start Redis there, or correct [fleet] redis and password_file"),
        Ok(h) => {
            let rtt_us = h.rtt.as_micros();
            let mut found = format!("{to}: version {}, round trip {rtt_us} µs", h.version);
            let mut level = Level::Ok;
            if let Some(state) = &h.cluster_state {
                found.push_str(&format!(", cluster_state {state}"));
                if state != "ok" {
                    level = Level::Fail;
                }
            }
            let remote: Vec<&String> = (f.redis.0.iter())
                .filter(|a| !gapura_config::redis_is_loopback(a))
                .collect();
            if level == Level::Ok && remote.iter().any(|a| a.starts_with("redis://")) {
                return Finding::new(id, Level::Warn, found)
                    .why("Redis on another host without TLS: the counts, the password and the sealed certificates cross the network in the clear")
                    .fix("serve Redis with TLS and write rediss:// in [fleet] redis");
            }
            if level == Level::Ok && !remote.is_empty() && f.password_file.is_none() {
                return Finding::new(id, Level::Warn, found)
                    .why("Redis on another host without a password: anyone who reaches it can read and write the fleet's counts")
                    .fix("set requirepass on Redis and [fleet] password_file");
            }
            if level == Level::Ok && rtt_us * 4 > u128::from(f.sync_ms) * 1000 {
                return Finding::new(id, Level::Warn, found)
                    .why("a round trip over a quarter of sync_ms leaves rounds little room")
                    .fix("raise [fleet] sync_ms or move Redis closer");
            }
            Finding::new(id, level, found)
        }
    }
}
