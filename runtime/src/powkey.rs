//! Proof of work's key file (`[server] pow_key_file`): 32 random bytes,
//! kept as 64 hex digits on one line. Created at first start with
//! permissions 0600 when missing; a file others can read or write is
//! refused, and so is one that does not hold a key. The key goes into
//! every snapshot, so every shard signs and checks with the same one; it is
//! never logged.

use gapura_gate::pow::{PowKey, KEY_BYTES};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The key files this process created, for the privilege drop to hand to
/// the user it becomes.
static CREATED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The key files created so far (and forgets them).
pub fn take_created() -> Vec<std::path::PathBuf> {
    CREATED
        .lock()
        .map(|mut c| std::mem::take(&mut *c))
        .unwrap_or_default()
}

/// Opens the key at `path`, creating it when missing and `create` is set.
pub fn open(path: &Path, create: bool) -> Result<PowKey, String> {
    open_bytes(path, create, "proof of work").map(|k| PowKey::new(&k))
}

/// Opens (or creates) a key file of 32 bytes as 64 hex digits, refusing
/// one others can read or write; `what` names its user in the log line of
/// a creation. Proof of work's key and the UDP envelopes' keys are such
/// files.
pub fn open_bytes(path: &Path, create: bool, what: &str) -> Result<[u8; KEY_BYTES], String> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode();
            if mode & 0o007 != 0 {
                return Err(format!(
                    "{} is readable or writable by others (mode {:04o}): chmod 600 it",
                    path.display(),
                    mode & 0o7777
                ));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            parse(text.trim())
                .ok_or_else(|| format!("{} does not hold a key (64 hex digits)", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let mut key = [0u8; KEY_BYTES];
            crate::random::fill(&mut key).map_err(|e| format!("no randomness: {e}"))?;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            file.write_all(format!("{hex}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            crate::log!("{what}: created the key file {}", path.display());
            if let Ok(mut created) = CREATED.lock() {
                created.push(path.to_path_buf());
            }
            Ok(key)
        }
        Err(e) => Err(format!("cannot open {}: {e}", path.display())),
    }
}

fn parse(hex: &str) -> Option<[u8; KEY_BYTES]> {
    if hex.len() != KEY_BYTES * 2 {
        return None;
    }
    let mut key = [0u8; KEY_BYTES];
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Puts the profile's key into its snapshot; a key that cannot be opened
/// leaves none (proof-of-work routes answer 503) and says why.
pub fn load_into(c: &mut gapura_config::Compiled, create: bool) -> Result<(), String> {
    let Some(path) = c.runtime.pow_key_file.clone() else {
        return Ok(());
    };
    let key = open(Path::new(&path), create)?;
    c.snapshot.gate.pow_key = Some(key);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("gapura-powkey-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&d);
        d
    }

    #[test]
    fn a_missing_key_is_created_private_and_read_back_the_same() {
        let p = dir().join("created.key");
        let _ = std::fs::remove_file(&p);
        assert!(open(&p, false).is_err(), "not created without asking");
        open(&p, true).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.trim().len(), 64);
        // Read back: the same key signs the same tag.
        let a = open(&p, true).unwrap();
        let b = open(&p, false).unwrap();
        let ip = "192.0.2.1".parse().unwrap();
        assert_eq!(
            gapura_gate::pow::mint_cookie(&a, 1, ip, 10, 8),
            gapura_gate::pow::mint_cookie(&b, 1, ip, 10, 8)
        );
    }

    #[test]
    fn a_key_others_can_read_or_a_file_without_a_key_is_refused() {
        let p = dir().join("open.key");
        std::fs::write(&p, format!("{}\n", "ab".repeat(32))).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = open(&p, true).unwrap_err();
        assert!(e.contains("readable or writable by others"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(open(&p, false).is_ok());
        std::fs::write(&p, "not a key\n").unwrap();
        assert!(open(&p, false).unwrap_err().contains("does not hold a key"));
    }
}
