//! Gapura's profiles: the TOML schema, its validation, layering and
//! compilation into the gate's [`Snapshot`](gapura_gate::Snapshot).
//!
//! This crate owns the profile format. It reads a profile (serde, with every
//! table closed to unknown keys), checks every value and reports *every*
//! semantic problem at once, each with a stable code, its TOML key path and
//! its line:column ([`ProfileError`]), and warnings beside them; it stacks
//! host-level settings field by field (built-in, `[defaults]`, a
//! `[[bundle]]`, the host's own, a proxy route's), limits included; it
//! renders every host's fixed answer into bytes; it compiles proxy routes
//! and upstream groups; and it compiles the gate's policy (client address
//! resolution, quotas, rate limits and their (limit, host) pairs, access
//! lists, rule sets and presets, each host's robots.txt, maintenance and
//! error pages), divided per shard where a limit's scope says so. Codes
//! are part of the interface and are listed in docs/profile.md.
//! [`password::hash`] makes the hash lines access-list users hold.
//!
//! It must never do I/O beyond reading the profile file, never touch
//! sockets (nothing connects to an upstream here), and never publish. What
//! it needs of the machine comes in through an [`Environment`]: the core
//! count that `shards = "auto"` means and a [`Resolver`] for upstream
//! names; a password line's salt is the caller's too. The runtime binds the
//! listeners and sets the snapshot's generation when it publishes.
//!
//! Modules, bottom to top. A module imports only from the layers below its
//! own and, within a layer, never in a circle:
//!
//! - the leaves: `error` (profile errors, positions and the error
//!   collector), `codes` (the codes of the gate's errors), `size` (byte
//!   sizes), `values` (the value shapes of the raw tables and the leaf
//!   checks every block uses: a word of a set, an integer or a size in a
//!   range), `names` (block names: the name rule, a named block's name
//!   check, the known names a message lists), `env` (the machine as a
//!   profile sees it), `identity` (the stable keys of servers and rate
//!   pairs), `layer` (the merge rules of layered settings, request limits
//!   layered), `settings` (what the runtime applies itself), `password`
//!   (hash lines);
//! - the raw profile as serde reads it, importing only `values`: `schema`
//!   (the root, `[server]`, `[defaults]`, hosts and routes, upstreams, UDP
//!   relays, certificates and `[tls]`), `rawblocks` (access lists, rule
//!   sets, auth providers, bundles, host-level settings) and `rawgate`
//!   (quota, protection, rate limits, client, the gate keys of hosts and
//!   routes); `syntax` reads it (errors of reading);
//! - one module per block, each checking its raw tables: `server`
//!   (`[server]`, listeners, the admin listener), `http3` (the listeners
//!   that serve HTTP/3 and `[http3]`), `fleet` (`[fleet]`: the
//!   engine fleet-scoped limits are shared through; `fleetprofile`: a node
//!   that runs the fleet's signed profile), `client`, `upstream`
//!   (`[[upstream]]` groups and their servers), `upstreamtls` (an
//!   upstream's `tls`: roots, server name, client certificate),
//!   `udp` (`[[udp]]` relays and their budgets), `quota` (with `dims`:
//!   the tenant, principal and resource budgets), `ratelimit`,
//!   `access` (with `usersfile`, an access list's users read from a
//!   file), `ruleset`, `auth` (`[[auth_provider]]` forward-auth providers
//!   and the `auth` key of host levels and routes), `tls` (`[[certificate]]`
//!   and `[tls]`), `acme` (`[acme]` and the certificates it orders),
//!   `limits` (request-limits layers), `connlimits` (the
//!   per-connection limits of a host layer: `connection_rate` and
//!   `websocket`), `pow` (`proof_of_work` at every host level and on
//!   routes), `gatekeys` (the gate keys of hosts and routes), `protection`
//!   (the protective defaults a profile gets for each dimension it leaves
//!   out, applied to the raw profile before any check);
//! - the host and route layering: `route` (proxy routes), `host`,
//!   `hostlayer` (a layer's references checked, and a route's blocks),
//!   `extras` (a host's robots.txt, maintenance, error pages and upstream
//!   replacement: checked per layer, compiled from the stack),
//!   `hostsettings` (the host-level settings declared once: a table from
//!   which a layer's fields, their merge, their check and the host's
//!   extras are written),
//!   `blocks` (hosts stacked over `[defaults]` and their bundle, and the
//!   lists, sets and extras they use compiled), `pairs` (the (rate limit,
//!   host) pairs the gate keys name);
//! - on top: `validate` (the entry point of the checks) and `compile` (a
//!   checked profile into the snapshot);
//! - `tests` (under test only: whole-profile tests, every error code with
//!   its path and position, the shipped profiles and the docs' examples).
//!
//! A rate limit, followed from TOML to the gate: `rawgate` (read),
//! `ratelimit` (checked and compiled), `gatekeys` (named by a host or a
//! route), `pairs` (paired with its host), `compile` (into the snapshot).

#![forbid(unsafe_code)]

mod access;
mod acme;
mod auth;
mod blocks;
mod client;
mod codes;
mod compile;
mod connlimits;
mod dims;
mod env;
mod error;
mod extras;
mod fleet;
mod fleetprofile;
mod gatekeys;
mod host;
mod hostlayer;
mod hostsettings;
mod http3;
mod identity;
mod layer;
mod limits;
mod names;
mod pairs;
mod pow;
mod protection;
mod quota;
mod ratelimit;
mod rawblocks;
mod rawgate;
mod route;
mod ruleset;
mod schema;
mod server;
mod settings;
mod size;
mod syntax;
mod tls;
mod udp;
mod upstream;
mod upstreamtls;
mod usersfile;
mod validate;
mod values;

pub mod password;

#[cfg(test)]
mod tests;

pub use compile::Compiled;
pub use env::{
    CertificateLoader, Environment, FixedNames, LoadedPair, NoFiles, NoNames, PairProblem, Resolver,
};
pub use error::{locate, ProfileError};
pub use fleet::loopback as redis_is_loopback;
pub use fleetprofile::with_local as fleet_profile_with_local;
pub use protection::{
    CLIENT_RATE_LIMIT, DIMENSIONS as PROTECTION_DIMENSIONS, FALLBACK_MEMORY_BYTES,
};
pub use settings::{
    AcmeChallenge, AcmeSettings, ClientRing, Driver, FleetProfile, FleetSettings, OnDemand,
    RuntimeSettings, Shards, Steering,
};

use std::path::Path;

/// The profile used when none is given: a default host on 127.0.0.1:8080
/// saying Gapura runs, and the admin listener on 127.0.0.1:9090.
/// The largest `users_file` an access list may name.
pub const MAX_USERS_FILE_BYTES: usize = usersfile::MAX_BYTES;

pub const DEFAULT_PROFILE: &str = include_str!("../../profiles/default.toml");

/// Compiles profile text. On failure returns every error found, in source
/// order: every unknown key and wrong type (each entry is stepped over and
/// the rest read), and beside them every semantic error of what was read;
/// a syntax error or a missing field ends the reading there. Limits with `scope = "split"` are
/// divided by the shard count: `server.shards`, or `env.cores` when it is
/// `"auto"`. Upstream server names are resolved by `env.resolver`, once
/// each. Allocates; O(profile) plus the resolver's work.
pub fn compile_with(src: &str, env: &Environment<'_>) -> Result<Compiled, Vec<ProfileError>> {
    compile_text(src, env, false)
}

/// [`compile_with`]; `readable`: the profile's file may be read by others
/// (its password verifiers are then warned of).
fn compile_text(
    src: &str,
    env: &Environment<'_>,
    readable: bool,
) -> Result<Compiled, Vec<ProfileError>> {
    let read = syntax::read_all::<schema::RawProfile>(src)?;
    let mut raw = read.value;
    let mut errors = error::Errors::new(src);
    let protection_off = protection::apply(&mut raw, env, &mut errors);
    let checked = validate::check(&raw, env, &mut errors);
    if readable {
        access::warn_readable(&raw.access_list, &mut errors);
    }
    if !read.errors.is_empty() {
        // Checks of what was read beside the entries stepped over, less
        // those the missing entries explain.
        let mut all = read.errors;
        all.extend(
            errors
                .into_sorted()
                .into_iter()
                .filter(|e| !read.blanked.iter().any(|b| syntax::explains(b, &e.path))),
        );
        all.sort_by_key(|e| (e.line, e.column));
        return Err(all);
    }
    if !errors.is_empty() {
        return Err(errors.into_sorted());
    }
    let mut compiled = compile::compile(checked);
    compiled.warnings = errors.take_warnings();
    compiled.protection_off = protection_off;
    Ok(compiled)
}

/// Reads and compiles a profile file (see [`compile_with`]). A file that cannot be read (or is not UTF-8) gives one
/// error with code `profile.read` at line 0, column 0. A file others may
/// read that holds password verifiers gets the warning
/// `profile.verifiers.readable` (a `users_file` keeps them apart).
pub fn load_file_with(path: &Path, env: &Environment<'_>) -> Result<Compiled, Vec<ProfileError>> {
    use std::os::unix::fs::PermissionsExt;
    let src = std::fs::read_to_string(path).map_err(|e| {
        vec![ProfileError {
            code: "profile.read",
            path: String::new(),
            line: 0,
            column: 0,
            message: format!("cannot read {}: {e}", path.display()),
        }]
    })?;
    let readable = std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0);
    compile_text(&src, env, readable)
}
