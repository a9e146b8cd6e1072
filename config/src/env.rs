//! What a profile needs from the machine it runs on, passed in by the
//! caller: the core count that `shards = "auto"` means, and a resolver for
//! upstream server names, a reader of certificate files. Config itself reads
//! no clock, no randomness, no resolver and no file but the profile; the
//! runtime supplies them (and tests supply fixed ones).

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

/// A certificate and key pair read for a profile: the chain (leaf first)
/// and key as DER, checked to belong together.
#[derive(Clone, Debug)]
pub struct LoadedPair {
    pub chain: Vec<Vec<u8>>,
    pub key: Vec<u8>,
}

/// Why a pair could not be loaded; the file at fault is the variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairProblem {
    /// The certificate file is unreadable or holds no usable certificate.
    Cert(String),
    /// The key file is unreadable or holds no usable private key.
    Key(String),
    /// The key is not the certificate's.
    Mismatch(String),
}

/// Reads the files `[[certificate]]` names (the runtime supplies it;
/// config reads no file but the profile). Relative paths are relative to
/// the profile's directory.
pub trait CertificateLoader {
    /// Reads and checks a PEM certificate chain and its PEM private key.
    fn load_pair(&self, cert: &str, key: &str) -> Result<LoadedPair, PairProblem>;
    /// Reads a DER OCSP response.
    fn load_ocsp(&self, path: &str) -> Result<Vec<u8>, String>;
    /// Reads the PEM certificates of an upstream's `ca_file`, as DER (at
    /// least one).
    fn load_cas(&self, path: &str) -> Result<Vec<Vec<u8>>, String>;
    /// A fresh random secret for session tickets (the runtime keeps one
    /// per process, so a reload keeps tickets valid).
    fn ticket_secret(&self) -> Vec<u8>;
    /// Reads an access list's `users_file`: refused when others may read
    /// or write it, or when it is larger than
    /// [`MAX_USERS_FILE_BYTES`](crate::MAX_USERS_FILE_BYTES). A loader
    /// that reads no files refuses it.
    fn load_users(&self, path: &str) -> Result<String, String> {
        Err(format!("{path} is not read here"))
    }
}

/// A loader that reads nothing: every certificate is an error. For tools
/// and tests without files.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFiles;

impl CertificateLoader for NoFiles {
    fn load_pair(&self, cert: &str, _key: &str) -> Result<LoadedPair, PairProblem> {
        Err(PairProblem::Cert(format!("{cert} is not read here")))
    }
    fn load_ocsp(&self, path: &str) -> Result<Vec<u8>, String> {
        Err(format!("{path} is not read here"))
    }
    fn load_cas(&self, path: &str) -> Result<Vec<Vec<u8>>, String> {
        Err(format!("{path} is not read here"))
    }
    fn ticket_secret(&self) -> Vec<u8> {
        Vec::new()
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
    /// Reads certificate files.
    pub certificates: &'r dyn CertificateLoader,
}
