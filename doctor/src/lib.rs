//! `gapura doctor`: checks the host for what Gapura needs and says why and
//! how to fix each finding.
//!
//! It must never change the host: it reads files under /proc and /sys and
//! asks the kernel what it allows, nothing more.
//!
//! The only things it creates are io_uring rings, listening sockets bound
//! to the profile's addresses, and whatever the caller's steering probe
//! creates; each is released at once.
//!
//! Modules:
//! - [`host`]: where /proc and /sys files are read from ([`Host`],
//!   [`FsHost`], [`MapHost`] for recorded files).
//! - [`probe`]: live kernel questions ([`Probe`], [`RealProbe`]): ring
//!   creation, resource limits, binding an address.
//! - [`finding`]: findings, levels, the report, its text and JSON, exit
//!   codes.
//! - `checks`: one function per check over what the host shows.
//! - [`parse`]: the kernel's small text formats.

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
    let r = report(&FsHost::new(), &RealProbe, profile, steering);
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
