//! Loading a profile on this machine: the runtime supplies what config
//! must not read itself, the core count that `shards = "auto"`
//! means and a resolver for upstream server names.
//!
//! Names are resolved one after another by the system resolver, each on a
//! thread of its own and bounded by [`RESOLVE_TIMEOUT`], so neither `gapura
//! check` nor a reload waits on a stuck resolver for longer than that per
//! name: a name that has not answered by then fails the profile with
//! `upstream.server.unresolved` (on a reload, the running profile stays). A look-up still stuck past its
//! timeout finishes on its own thread and its answer is dropped.

use gapura_config::{
    CertificateLoader, Compiled, Environment, LoadedPair, PairProblem, ProfileError, Resolver,
};
use gapura_http::transport::certs::PairError;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

/// The longest one upstream name may take to resolve.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The cores shards may run on: what `shards = "auto"` means, and the cores
/// the shards are pinned to (the ids `core_affinity` returns, a subset under
/// taskset). At least 1.
pub fn cores() -> u32 {
    core_affinity::get_core_ids()
        .map_or(1, |c| c.len())
        .clamp(1, u32::MAX as usize) as u32
}

/// The system resolver, each look-up off the calling thread and bounded by
/// a timeout.
pub struct SystemResolver {
    pub timeout: Duration,
}

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        let (tx, rx) = mpsc::channel();
        let name = host.to_owned();
        std::thread::Builder::new()
            .name("gapura-resolve".into())
            .spawn(move || {
                let answer = (name.as_str(), port)
                    .to_socket_addrs()
                    .map(Iterator::collect::<Vec<_>>)
                    .map_err(|e| e.to_string());
                // The caller may have given up: nobody to tell.
                let _ = tx.send(answer);
            })
            .map_err(|e| format!("cannot start a resolver thread: {e}"))?;
        match rx.recv_timeout(self.timeout) {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {} s", self.timeout.as_secs_f32())),
        }
    }
}

/// The machine's memory (`MemTotal` of /proc/meminfo), or the config's
/// fallback when it cannot be read.
pub fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(gapura_config::FALLBACK_MEMORY_BYTES)
}

/// The files a profile names (certificates, CA files, users files), read
/// from disk, relative paths from the profile's directory.
pub struct CertificateFiles {
    pub base: PathBuf,
}

impl CertificateFiles {
    fn path(&self, name: &str) -> PathBuf {
        self.base.join(name)
    }

    /// Refuses a private key others can read or write.
    fn private(&self, name: &str) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(name);
        let mode = std::fs::metadata(&p)
            .map_err(|e| format!("cannot read {}: {e}", p.display()))?
            .permissions()
            .mode();
        if mode & 0o007 != 0 {
            return Err(format!(
                "{name}: readable or writable by others (mode {:04o}): chmod 600 it",
                mode & 0o7777
            ));
        }
        Ok(())
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, String> {
        let p = self.path(name);
        std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    }
}

impl CertificateLoader for CertificateFiles {
    fn load_pair(&self, cert: &str, key: &str) -> Result<LoadedPair, PairProblem> {
        let cert_pem = self.read(cert).map_err(PairProblem::Cert)?;
        self.private(key).map_err(PairProblem::Key)?;
        let key_pem = self.read(key).map_err(PairProblem::Key)?;
        match gapura_http::transport::certs::load_pair(&cert_pem, &key_pem) {
            Ok((chain, key)) => Ok(LoadedPair { chain, key }),
            Err(PairError::Cert(why)) => Err(PairProblem::Cert(format!("{cert}: {why}"))),
            Err(PairError::Key(why)) => Err(PairProblem::Key(format!("{key}: {why}"))),
            Err(PairError::Mismatch(why)) => {
                Err(PairProblem::Mismatch(format!("{key} and {cert}: {why}")))
            }
        }
    }

    fn load_ocsp(&self, path: &str) -> Result<Vec<u8>, String> {
        self.read(path)
    }

    fn load_cas(&self, path: &str) -> Result<Vec<Vec<u8>>, String> {
        let pem = self.read(path)?;
        gapura_http::transport::certs::load_cas(&pem).map_err(|why| format!("{path}: {why}"))
    }

    fn ticket_secret(&self) -> Vec<u8> {
        ticket_secret().map_or_else(Vec::new, |s| s.to_vec())
    }

    fn load_users(&self, path: &str) -> Result<String, String> {
        self.private(path)?;
        let bytes = self.read(path)?;
        if bytes.len() > gapura_config::MAX_USERS_FILE_BYTES {
            return Err(format!("{path}: larger than 1 MiB"));
        }
        String::from_utf8(bytes).map_err(|_| format!("{path}: not UTF-8"))
    }
}

/// The process's session-ticket secret: random, made once, kept across
/// reloads (so tickets stay valid). `None` (tickets off, and said so once)
/// when the kernel gives no randomness: a guessable key is never used.
fn ticket_secret() -> Option<&'static [u8; 32]> {
    static SECRET: OnceLock<Option<[u8; 32]>> = OnceLock::new();
    SECRET
        .get_or_init(|| {
            let mut s = [0u8; 32];
            match crate::random::fill(&mut s) {
                Ok(()) => Some(s),
                Err(e) => {
                    crate::log!(
                        "no randomness for the session-ticket secret ({e}): tickets are off"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Reads and compiles `profile` (the embedded default when `None`) for this
/// machine.
pub fn load(profile: Option<&Path>) -> Result<Compiled, Vec<ProfileError>> {
    let resolver = SystemResolver {
        timeout: RESOLVE_TIMEOUT,
    };
    let files = CertificateFiles {
        base: profile
            .and_then(Path::parent)
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    };
    let env = Environment {
        cores: cores(),
        memory_bytes: memory_bytes(),
        resolver: &resolver,
        certificates: &files,
    };
    match profile {
        Some(p) => {
            let mut c = gapura_config::load_file_with(p, &env)?;
            from_profile_dir(&mut c, &files.base);
            Ok(c)
        }
        None => gapura_config::compile_with(gapura_config::DEFAULT_PROFILE, &env),
    }
}

/// Compiles profile `text` for this machine, its relative paths from
/// `base` (a pulling node's merged profile, a version to publish).
pub fn load_text(text: &str, base: &Path) -> Result<Compiled, Vec<ProfileError>> {
    let resolver = SystemResolver {
        timeout: RESOLVE_TIMEOUT,
    };
    let files = CertificateFiles {
        base: base.to_path_buf(),
    };
    let env = Environment {
        cores: cores(),
        memory_bytes: memory_bytes(),
        resolver: &resolver,
        certificates: &files,
    };
    let mut c = gapura_config::compile_with(text, &env)?;
    from_profile_dir(&mut c, base);
    Ok(c)
}

/// One rule for every path a profile names: a relative one is relative to
/// the profile's directory (`base`), whatever directory the command runs
/// from. Certificates and `ca_file` are read that way by
/// [`CertificateFiles`]; the files the runtime opens itself are made
/// absolute here: `pow_key_file`, `admin_token_file`, the access log, the
/// fleet's `password_file`, the UDP relays' envelope keys.
pub fn from_profile_dir(c: &mut Compiled, base: &Path) {
    let absolute = |p: &mut String| {
        if Path::new(p.as_str()).is_relative() {
            *p = base.join(p.as_str()).display().to_string();
        }
    };
    let r = &mut c.runtime;
    r.pow_key_file.iter_mut().for_each(absolute);
    r.admin_token_file.iter_mut().for_each(absolute);
    if let Some(f) = r.fleet.as_mut() {
        f.password_file.iter_mut().for_each(absolute);
    }
    if let Some(a) = c.snapshot.server.access_log.as_mut() {
        absolute(&mut a.path);
    }
    // Just compiled: each relay's policy has no other owner yet.
    for relay in c
        .snapshot
        .udp
        .iter_mut()
        .filter_map(std::sync::Arc::get_mut)
    {
        for e in relay.envelope.iter_mut() {
            e.key_files.iter_mut().for_each(absolute);
        }
    }
}
