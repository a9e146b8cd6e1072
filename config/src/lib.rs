//! Gapura's profiles: the TOML schema, its validation, layering and
//! compilation into the gate's [`Snapshot`](gapura_gate::Snapshot).
//!
//! This crate owns the profile format. It reads a profile (serde, with every
//! table closed to unknown keys), checks every value and reports *every*
//! semantic problem at once, each with a stable code, its TOML key path and
//! its line:column ([`ProfileError`]); it stacks the limit layers (built-in,
//! `[defaults.limits]`, the host's own) field by field; and it renders every
//! host's fixed answer into bytes; it compiles proxy routes and upstream
//! groups, resolving server names once, at compile time. Codes are part of
//! the interface and are listed in docs/profile.md.
//!
//! It must never do I/O beyond reading the profile file and resolving
//! upstream names, never touch sockets (nothing connects to an upstream
//! here), and never publish: the runtime binds the listeners and sets the
//! snapshot's generation when it publishes.

mod compile;
mod error;
mod host;
mod layer;
mod route;
mod schema;
mod settings;
mod size;
mod syntax;
mod upstream;
mod validate;

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
}

/// Compiles profile text. On failure returns every error found, in source
/// order: all semantic errors at once, or the one syntax, unknown-key or
/// type error that stopped reading. Allocates; O(profile), plus one blocking
/// system-resolver lookup per upstream server given by name.
pub fn compile_str(src: &str) -> Result<Compiled, Vec<ProfileError>> {
    let raw: schema::RawProfile =
        toml::from_str(src).map_err(|e| syntax::parse_error(src, &e).into_sorted())?;
    let mut errors = error::Errors::new(src);
    let checked = validate::check(&raw, &mut errors);
    if !errors.is_empty() {
        return Err(errors.into_sorted());
    }
    Ok(compile::compile(checked))
}

/// Reads and compiles a profile file. A file that cannot be read (or is not
/// UTF-8) gives one error with code `profile.read` at line 0, column 0.
pub fn load_file(path: &Path) -> Result<Compiled, Vec<ProfileError>> {
    let src = std::fs::read_to_string(path).map_err(|e| {
        vec![ProfileError {
            code: "profile.read",
            path: String::new(),
            line: 0,
            column: 0,
            message: format!("cannot read {}: {e}", path.display()),
        }]
    })?;
    compile_str(&src)
}
