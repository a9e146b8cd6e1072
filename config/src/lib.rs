//! Gapura's profiles: the TOML schema, its validation, layering and
//! compilation into the gate's [`Snapshot`](gapura_gate::Snapshot).
//!
//! This crate owns the profile format. It reads a profile (serde, with every
//! table closed to unknown keys), checks every value and reports *every*
//! semantic problem at once, each with a stable code, its TOML key path and
//! its line:column ([`ProfileError`]), and warnings beside them; it stacks
//! host-level settings field by field (built-in, `[defaults]`, a
//! `[[bundle]]`, the host's own, a proxy route's), limits included; and it
//! renders every host's fixed answer into bytes; it compiles proxy routes
//! and upstream groups, resolving server names once, at compile time; and
//! it compiles the gate's policy (client address resolution, quotas, rate
//! limits and their (limit, host) pairs, access lists, rule sets and
//! presets, each host's robots.txt, maintenance and error pages), divided
//! per shard where a limit's scope says so. Codes are part of the
//! interface and are listed in docs/profile.md. [`password::hash`] makes
//! the hash lines access-list users hold.
//!
//! It must never do I/O beyond reading the profile file, resolving
//! upstream names and drawing a password salt from `/dev/urandom`, never
//! touch sockets (nothing connects to an upstream here), and never publish:
//! the runtime binds the listeners and sets the snapshot's generation when
//! it publishes.

#![forbid(unsafe_code)]

mod access;
mod blocks;
mod client;
mod codes;
mod compile;
mod error;
mod host;
mod hostlayer;
mod layer;
mod names;
mod policy;
mod quota;
mod ratelimit;
mod rawblocks;
mod rawgate;
mod route;
mod ruleset;
mod schema;
mod settings;
mod size;
mod syntax;
mod upstream;
mod validate;

pub mod password;

#[cfg(test)]
mod tests;

pub use error::ProfileError;
pub use settings::{Driver, RuntimeSettings, Shards, Steering};

use std::path::Path;

/// The profile used when none is given: a default host on 127.0.0.1:8080
/// saying Gapura runs, and the admin listener on 127.0.0.1:9090.
pub const DEFAULT_PROFILE: &str = include_str!("../../profiles/default.toml");

/// A compiled profile: what the runtime applies and what the gate decides on.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub runtime: RuntimeSettings,
    /// Generation 0; the runtime sets it when it publishes.
    pub snapshot: gapura_gate::Snapshot,
    /// What loads but deserves a look (a user without a password hash, an
    /// access list that names nothing), in source order, each with its
    /// code, key path and position.
    pub warnings: Vec<ProfileError>,
}

/// Compiles profile text for as many shards as this process may use
/// (`std::thread::available_parallelism`, 1 when unknown): see
/// [`compile_with`].
pub fn compile_str(src: &str) -> Result<Compiled, Vec<ProfileError>> {
    compile_with(src, usable_cores())
}

/// Compiles profile text. On failure returns every error found, in source
/// order: all semantic errors at once, or the one syntax, unknown-key or
/// type error that stopped reading. Limits with `scope = "split"` are
/// divided by the shard count: `server.shards`, or `cores` when it is
/// `"auto"`. Allocates; O(profile), plus one blocking system-resolver
/// lookup per upstream server given by name.
pub fn compile_with(src: &str, cores: u32) -> Result<Compiled, Vec<ProfileError>> {
    let raw: schema::RawProfile =
        toml::from_str(src).map_err(|e| syntax::parse_error(src, &e).into_sorted())?;
    let mut errors = error::Errors::new(src);
    let checked = validate::check(&raw, cores, &mut errors);
    if !errors.is_empty() {
        return Err(errors.into_sorted());
    }
    let mut compiled = compile::compile(checked);
    compiled.warnings = errors.take_warnings();
    Ok(compiled)
}

/// Reads and compiles a profile file for as many shards as this process
/// may use: see [`load_file_with`].
pub fn load_file(path: &Path) -> Result<Compiled, Vec<ProfileError>> {
    load_file_with(path, usable_cores())
}

/// Reads and compiles a profile file, `"auto"` shards meaning `cores` (see
/// [`compile_with`]). A file that cannot be read (or is not UTF-8) gives one
/// error with code `profile.read` at line 0, column 0.
pub fn load_file_with(path: &Path, cores: u32) -> Result<Compiled, Vec<ProfileError>> {
    let src = std::fs::read_to_string(path).map_err(|e| {
        vec![ProfileError {
            code: "profile.read",
            path: String::new(),
            line: 0,
            column: 0,
            message: format!("cannot read {}: {e}", path.display()),
        }]
    })?;
    compile_with(&src, cores)
}

/// The cores this process may run on: what `shards = "auto"` means.
fn usable_cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1024))
}
