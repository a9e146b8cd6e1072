//! What a profile needs from the machine it runs on, passed in by the
//! caller: the core count that `shards = "auto"` means, and a resolver for
//! upstream server names. Config itself reads no clock, no randomness and no
//! resolver; the runtime supplies them (and tests supply fixed ones).

use std::net::SocketAddr;

/// Resolves an upstream server's `name:port` when a profile is compiled.
pub trait Resolver {
    /// Every address `host` resolves to with `port`, in the resolver's
    /// order, or why it did not resolve (a message for the profile error
    /// `upstream.server.unresolved`).
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String>;
}

/// A resolver that knows no names: every name is an error. For tools that
/// must not resolve, and for tests.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNames;

impl Resolver for NoNames {
    fn resolve(&self, host: &str, _port: u16) -> Result<Vec<SocketAddr>, String> {
        Err(format!("{host} is not resolved here"))
    }
}

/// A fixed table of names, for tests: each name and the addresses it
/// resolves to (with the asked port).
#[derive(Clone, Debug, Default)]
pub struct FixedNames(pub Vec<(String, Vec<std::net::IpAddr>)>);

impl Resolver for FixedNames {
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        self.0
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(host))
            .map(|(_, ips)| ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
            .ok_or_else(|| "no such name".to_string())
    }
}

/// The machine as a profile sees it.
#[derive(Clone, Copy)]
pub struct Environment<'r> {
    /// What `shards = "auto"` means: the cores the process may run on (at
    /// least 1).
    pub cores: u32,
    /// The machine's memory, which sizes the default tracked-key tables
    /// (`protection`).
    pub memory_bytes: u64,
    /// Resolves upstream server names.
    pub resolver: &'r dyn Resolver,
}
