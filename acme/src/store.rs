//! The state directory: the account key and each certificate's chain, key
//! and names, every file written whole (a temporary file, synced, then
//! renamed over the old one) and keys readable by the owner only.
//!
//! Layout: `account.der` (the account key, PKCS#8), and under
//! `certificates/` for each certificate, named by its first name (`*.`
//! written `_wildcard.`): `NAME.crt` (the PEM chain), `NAME.key` (the PEM
//! key) and `NAME.names` (the names it was ordered for, one a line).

use crate::jws::AccountKey;
use crate::order::Issued;
use crate::validity::{self, Validity};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A stored certificate.
#[derive(Clone, Debug)]
pub struct Stored {
    pub chain: Vec<Vec<u8>>,
    pub key: Vec<u8>,
    pub validity: Validity,
}

#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// Writes `bytes` to `path` whole: a temporary file beside it with
/// `mode`, synced, renamed over `path`.
pub fn write_whole(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    fn ensure(&self) -> std::io::Result<PathBuf> {
        let certs = self.dir.join("certificates");
        fs::create_dir_all(&certs)?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))?;
        fs::set_permissions(&certs, fs::Permissions::from_mode(0o700))?;
        Ok(certs)
    }

    /// The account key, made and stored on first use.
    pub fn account_key(&self) -> Result<AccountKey, String> {
        let path = self.dir.join("account.der");
        match fs::read(&path) {
            Ok(der) => AccountKey::from_pkcs8(&der).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.ensure()
                    .map_err(|e| format!("{}: {e}", self.dir.display()))?;
                let key = AccountKey::generate()?;
                write_whole(&path, key.pkcs8(), 0o600)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(key)
            }
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// The files of the certificate for `names`: (chain, key, names).
    pub fn paths(&self, names: &[String]) -> (PathBuf, PathBuf, PathBuf) {
        let first = names.first().map_or("", String::as_str);
        let stem = match first.strip_prefix("*.") {
            Some(rest) => format!("_wildcard.{rest}"),
            None => first.to_string(),
        };
        let base = self.dir.join("certificates");
        (
            base.join(format!("{stem}.crt")),
            base.join(format!("{stem}.key")),
            base.join(format!("{stem}.names")),
        )
    }

    /// The stored certificate for exactly `names`, if whole and readable.
    pub fn load(&self, names: &[String]) -> Option<Stored> {
        let (crt, key, list) = self.paths(names);
        let written = fs::read_to_string(list).ok()?;
        if written.lines().collect::<Vec<_>>()
            != names.iter().map(String::as_str).collect::<Vec<_>>()
        {
            return None;
        }
        let pem = fs::read(crt).ok()?;
        let chain: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&pem)
            .filter_map(Result::ok)
            .map(|c| c.to_vec())
            .collect();
        let key = PrivateKeyDer::from_pem_slice(&fs::read(key).ok()?).ok()?;
        let validity = validity::of(chain.first()?)?;
        Some(Stored {
            chain,
            key: key.secret_der().to_vec(),
            validity,
        })
    }

    /// The names of every certificate stored.
    pub fn list(&self) -> Vec<Vec<String>> {
        let Ok(dir) = fs::read_dir(self.dir.join("certificates")) else {
            return Vec::new();
        };
        let mut out: Vec<Vec<String>> = dir
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".names"))
            .filter_map(|e| fs::read_to_string(e.path()).ok())
            .map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .filter(|n: &Vec<String>| !n.is_empty())
            .collect();
        out.sort();
        out
    }

    /// Stores an issued certificate for `names`: the key, then the chain,
    /// then the names (which [`load`](Self::load) reads first).
    pub fn save(&self, names: &[String], issued: &Issued) -> Result<(), String> {
        self.ensure()
            .map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let (crt, key, list) = self.paths(names);
        let _ = fs::remove_file(&list);
        let fail = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        write_whole(&key, issued.key_pem.as_bytes(), 0o600).map_err(|e| fail(&key, e))?;
        write_whole(&crt, issued.chain_pem.as_bytes(), 0o644).map_err(|e| fail(&crt, e))?;
        let mut text = names.join("\n");
        text.push('\n');
        write_whole(&list, text.as_bytes(), 0o644).map_err(|e| fail(&list, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(names: &[String]) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(names.to_vec())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        Issued {
            chain_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            chain_der: vec![cert.der().to_vec()],
            key_der: key.serialize_der(),
            validity: validity::of(cert.der()).unwrap(),
        }
    }

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gapura-acme-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_saved_certificate_loads_for_its_names_only_and_its_key_is_private() {
        let dir = temp("store");
        let store = Store::new(&dir);
        let names = vec!["a.test".to_string(), "www.a.test".to_string()];
        assert!(store.load(&names).is_none());
        let i = issued(&names);
        store.save(&names, &i).unwrap();
        let got = store.load(&names).unwrap();
        assert_eq!(got.chain, i.chain_der);
        assert_eq!(got.key, i.key_der);
        assert_eq!(got.validity, i.validity);
        // Another list of names (one added) is not this certificate.
        let more = vec!["a.test".into(), "www.a.test".into(), "b.a.test".into()];
        assert!(store.load(&more).is_none());
        assert_eq!(store.list(), vec![names.clone()]);
        let (_, key, _) = store.paths(&names);
        assert_eq!(
            fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // No temporary file is left behind.
        let left: Vec<_> = fs::read_dir(dir.join("certificates"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_account_key_is_made_once_and_kept() {
        let dir = temp("account");
        let store = Store::new(&dir);
        let a = store.account_key().unwrap();
        let b = store.account_key().unwrap();
        assert_eq!(a.thumbprint(), b.thumbprint());
        let path = dir.join("account.der");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        fs::write(&path, b"damaged").unwrap();
        assert!(store.account_key().is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wildcards_are_stored_under_a_plain_file_name() {
        let store = Store::new("/s");
        let (crt, key, names) = store.paths(&["*.a.test".to_string()]);
        assert_eq!(crt, Path::new("/s/certificates/_wildcard.a.test.crt"));
        assert_eq!(key, Path::new("/s/certificates/_wildcard.a.test.key"));
        assert_eq!(names, Path::new("/s/certificates/_wildcard.a.test.names"));
    }
}
