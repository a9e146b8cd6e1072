//! Password hashes: PBKDF2-HMAC-SHA256 in a PHC-like string.
//!
//! A profile holds a user's password only as a hash line made by
//! `gapura passwd`:
//!
//! ```text
//! $pbkdf2-sha256$i=600000$<salt>$<hash>
//! ```
//!
//! `i` is the iteration count in decimal (no sign, no leading zero), `salt`
//! is 8 to 64 bytes and `hash` the 32-byte derived key, both in standard
//! base64 without padding (the PHC string format's encoding). Anything that
//! does not start with `$pbkdf2-sha256$` is treated as a plain password and
//! refused by the profile validator; a string that starts so but does not
//! parse is a malformed hash.
//!
//! **Cost.** [`Verifier::check`], [`verify`] and [`hash_password`] run the
//! whole key derivation: at the default 600,000 iterations that is 1.2
//! million SHA-256 compressions, tens to hundreds of milliseconds. They run
//! only on the verification pool (or in the `gapura passwd` and `gapura
//! explain` commands), **never on a shard thread**: the gate's decision
//! turns a password check into a [`super::VerifyJob`] the runtime hands to
//! the pool. Parsing a hash is O(length) and allocates nothing; the derived
//! key is compared in constant time.

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::fmt;
use subtle::ConstantTimeEq;

/// What every hash line starts with.
pub const PREFIX: &str = "$pbkdf2-sha256$";
/// Iterations `gapura passwd` uses unless told otherwise (OWASP's figure
/// for PBKDF2-HMAC-SHA256).
pub const DEFAULT_ITERATIONS: u32 = 600_000;
/// The fewest iterations a profile may hold
/// (`accessList.user.password.iterations`).
pub const MIN_ITERATIONS: u32 = 100_000;
/// The most iterations a profile may hold: one check must not occupy a
/// pool slot for seconds (`accessList.user.password.iterations`).
pub const MAX_ITERATIONS: u32 = 10_000_000;
/// Salt bytes `gapura passwd` draws.
pub const DEFAULT_SALT_BYTES: usize = 16;
/// Shortest salt a hash line may carry.
pub const MIN_SALT_BYTES: usize = 8;
/// Longest salt a hash line may carry.
pub const MAX_SALT_BYTES: usize = 64;
/// Length of the derived key.
pub const KEY_BYTES: usize = 32;

/// Why a hash line was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashError {
    /// Does not start with [`PREFIX`]: a plain password, or another format.
    NotAHash,
    /// Starts with [`PREFIX`] but does not parse.
    Malformed,
}

impl fmt::Display for HashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashError::NotAHash => f.write_str("not a password hash made by `gapura passwd`"),
            HashError::Malformed => f.write_str(
                "a malformed hash: expected $pbkdf2-sha256$i=ITERATIONS$SALT$HASH \
                 (salt 8 to 64 bytes and a 32-byte hash, base64 without padding)",
            ),
        }
    }
}

impl std::error::Error for HashError {}

/// A parsed hash: everything needed to check a password, by value (no
/// allocation, `Copy`, 104 bytes), so a verification job carries it to the
/// pool without touching the snapshot.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Verifier {
    iterations: u32,
    salt_len: u8,
    salt: [u8; MAX_SALT_BYTES],
    key: [u8; KEY_BYTES],
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The derived key is a password equivalent for offline attacks.
        f.debug_struct("Verifier")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Whether `s` claims to be a hash in this format (starts with [`PREFIX`]),
/// whether or not the rest parses. O(1).
pub fn looks_like_hash(s: &str) -> bool {
    s.starts_with(PREFIX)
}

impl Verifier {
    /// Parses a hash line. O(length), no allocation. Does not check the
    /// iteration bounds (the profile validator does, with its own code).
    pub fn parse(s: &str) -> Result<Verifier, HashError> {
        let rest = s.strip_prefix(PREFIX).ok_or(HashError::NotAHash)?;
        let mut parts = rest.split('$');
        let (Some(i), Some(salt), Some(key), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(HashError::Malformed);
        };
        let iterations = parse_iterations(i).ok_or(HashError::Malformed)?;
        let mut v = Verifier {
            iterations,
            salt_len: 0,
            salt: [0; MAX_SALT_BYTES],
            key: [0; KEY_BYTES],
        };
        // Encoded lengths bound the decoded ones, so a huge field is refused
        // before decoding.
        if salt.len() > MAX_SALT_BYTES.div_ceil(3) * 4 || key.len() != 43 {
            return Err(HashError::Malformed);
        }
        let mut salt_buf = [0u8; MAX_SALT_BYTES + 2];
        let n = STANDARD_NO_PAD
            .decode_slice(salt, &mut salt_buf)
            .map_err(|_| HashError::Malformed)?;
        if !(MIN_SALT_BYTES..=MAX_SALT_BYTES).contains(&n) {
            return Err(HashError::Malformed);
        }
        v.salt[..n].copy_from_slice(&salt_buf[..n]);
        v.salt_len = n as u8;
        let mut key_buf = [0u8; 33];
        let k = STANDARD_NO_PAD
            .decode_slice(key, &mut key_buf)
            .map_err(|_| HashError::Malformed)?;
        if k != KEY_BYTES {
            return Err(HashError::Malformed);
        }
        v.key.copy_from_slice(&key_buf[..KEY_BYTES]);
        Ok(v)
    }

    /// A verifier no password is known for, costing `iterations`: what a
    /// name nobody has and a user without a hash are checked against, so
    /// their check takes as long as a real one. `seed` makes it differ per
    /// list. Its result is ignored anyway ([`super::VerifyJob::run`] reports
    /// failure whatever the password). O(seed).
    pub fn dummy(iterations: u32, seed: &[u8]) -> Verifier {
        let salt = Sha256::new()
            .chain_update(b"gapura.dummy-salt.v1\0")
            .chain_update(seed)
            .finalize();
        let key = Sha256::new()
            .chain_update(b"gapura.dummy-key.v1\0")
            .chain_update(seed)
            .finalize();
        let mut v = Verifier {
            iterations: iterations.max(1),
            salt_len: DEFAULT_SALT_BYTES as u8,
            salt: [0; MAX_SALT_BYTES],
            key: [0; KEY_BYTES],
        };
        v.salt[..DEFAULT_SALT_BYTES].copy_from_slice(&salt[..DEFAULT_SALT_BYTES]);
        v.key.copy_from_slice(&key);
        v
    }

    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    pub fn salt(&self) -> &[u8] {
        &self.salt[..usize::from(self.salt_len)]
    }

    /// Whether `password` derives this key. Runs the whole PBKDF2
    /// (`iterations` × 2 SHA-256 compressions): pool threads only. The keys
    /// are compared in constant time. No allocation.
    pub fn check(&self, password: &[u8]) -> bool {
        let mut derived = [0u8; KEY_BYTES];
        pbkdf2::pbkdf2_hmac::<Sha256>(password, self.salt(), self.iterations, &mut derived);
        let ok: bool = derived.ct_eq(&self.key).into();
        derived.fill(0);
        ok
    }

    /// The hash line (what [`Verifier::parse`] reads). Allocates.
    pub fn to_line(&self) -> String {
        format!(
            "{PREFIX}i={}${}${}",
            self.iterations,
            STANDARD_NO_PAD.encode(self.salt()),
            STANDARD_NO_PAD.encode(self.key)
        )
    }
}

/// 1 to 10 decimal digits, no leading zero, 1 ..= u32::MAX.
fn parse_iterations(field: &str) -> Option<u32> {
    let digits = field.strip_prefix("i=")?;
    let b = digits.as_bytes();
    if b.is_empty() || b.len() > 10 || !b.iter().all(u8::is_ascii_digit) || b[0] == b'0' {
        return None;
    }
    digits.parse::<u32>().ok()
}

/// Hashes `password` into a hash line: PBKDF2-HMAC-SHA256 with
/// `iterations` (at least 1) and `salt` (8 to 64 random bytes; the caller
/// draws them, the gate reads no randomness). Runs the whole derivation:
/// never on a shard thread. Allocates the string.
///
/// # Panics
/// If `salt` is shorter than 8 or longer than 64 bytes (a programming
/// error: `gapura passwd` draws 16).
pub fn hash_password(password: &[u8], iterations: u32, salt: &[u8]) -> String {
    assert!(
        (MIN_SALT_BYTES..=MAX_SALT_BYTES).contains(&salt.len()),
        "salt must be {MIN_SALT_BYTES} to {MAX_SALT_BYTES} bytes"
    );
    let mut v = Verifier {
        iterations: iterations.max(1),
        salt_len: salt.len() as u8,
        salt: [0; MAX_SALT_BYTES],
        key: [0; KEY_BYTES],
    };
    v.salt[..salt.len()].copy_from_slice(salt);
    pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, v.iterations, &mut v.key);
    v.to_line()
}

/// Whether `candidate` is the password of the hash line `stored`; `false`
/// for a line that does not parse. Constant-time key comparison; runs the
/// whole derivation: never on a shard thread.
pub fn verify(stored: &str, candidate: &[u8]) -> bool {
    match Verifier::parse(stored) {
        Ok(v) => v.check(candidate),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT: &[u8] = b"0123456789abcdef";

    #[test]
    fn pbkdf2_matches_the_rfc_7914_vector() {
        // RFC 7914 §11: PBKDF2-HMAC-SHA256, P = "passwd", S = "salt", c = 1.
        let mut out = [0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha256>(b"passwd", b"salt", 1, &mut out);
        assert_eq!(
            out[..16],
            [
                0x55, 0xac, 0x04, 0x6e, 0x56, 0xe3, 0x08, 0x9f, 0xec, 0x16, 0x91, 0xc2, 0x25, 0x44,
                0xb6, 0x05
            ]
        );
    }

    #[test]
    fn hash_and_verify_round_trip() {
        let line = hash_password(b"correct horse", 1000, SALT);
        assert!(line.starts_with("$pbkdf2-sha256$i=1000$MDEyMzQ1Njc4OWFiY2RlZg$"));
        assert_eq!(line.len(), PREFIX.len() + "i=1000".len() + 1 + 22 + 1 + 43);
        assert!(verify(&line, b"correct horse"));
        assert!(!verify(&line, b"correct horse "));
        assert!(!verify(&line, b""));
        let v = Verifier::parse(&line).unwrap();
        assert_eq!(v.iterations(), 1000);
        assert_eq!(v.salt(), SALT);
        assert_eq!(v.to_line(), line);
        // Same inputs, same line; another salt, another line.
        assert_eq!(hash_password(b"correct horse", 1000, SALT), line);
        assert_ne!(
            hash_password(b"correct horse", 1000, b"fedcba9876543210"),
            line
        );
    }

    #[test]
    fn salts_of_8_to_64_bytes_round_trip() {
        for len in [MIN_SALT_BYTES, 33, MAX_SALT_BYTES] {
            let salt = vec![0xa5u8; len];
            let line = hash_password(b"pw", 10, &salt);
            let v = Verifier::parse(&line).unwrap();
            assert_eq!(v.salt(), &salt[..]);
            assert!(v.check(b"pw"));
        }
    }

    #[test]
    fn plain_passwords_are_not_hashes() {
        for plain in [
            "hunter2",
            "",
            "$2y$10$abcdefghijklmnopqrstuv",
            "pbkdf2-sha256$i=1",
        ] {
            assert!(!looks_like_hash(plain));
            assert_eq!(
                Verifier::parse(plain),
                Err(HashError::NotAHash),
                "{plain:?}"
            );
            assert!(!verify(plain, plain.as_bytes()));
        }
    }

    #[test]
    fn malformed_hash_lines_are_refused() {
        let good = hash_password(b"pw", 1000, SALT);
        let (head, key) = good.rsplit_once('$').unwrap();
        let cases = [
            PREFIX.to_string(),
            format!("{PREFIX}i=1000"),
            format!("{PREFIX}i=1000$MDEyMzQ1Njc4OWFiY2RlZg"),
            format!("{head}${key}$extra"),
            format!("{head}${key}="),
            format!("{head}$"),
            format!("{head}${}", &key[1..]),
            good.replace("i=1000", "i=01000"),
            good.replace("i=1000", "i=0"),
            good.replace("i=1000", "i=-1"),
            good.replace("i=1000", "i=4294967296"),
            good.replace("i=1000", "iterations=1000"),
            good.replace("MDEyMzQ1Njc4OWFiY2RlZg", "MDEyMzQ1Ng"), // 7 bytes
            good.replace("MDEyMzQ1Njc4OWFiY2RlZg", "MDEyMzQ1Njc4OWFiY2RlZg=="),
            good.replace("MDEyMzQ1Njc4OWFiY2RlZg", "MDEy*zQ1Njc4OWFiY2RlZg"),
            good.replace("MDEyMzQ1Njc4OWFiY2RlZg", &"A".repeat(4000)),
        ];
        for bad in &cases {
            assert!(looks_like_hash(bad));
            assert_eq!(Verifier::parse(bad), Err(HashError::Malformed), "{bad:?}");
            assert!(!verify(bad, b"pw"));
        }
    }

    #[test]
    fn dummy_verifiers_cost_what_they_are_told_and_differ_per_seed() {
        let a = Verifier::dummy(1000, b"list-a");
        assert_eq!(a.iterations(), 1000);
        assert_eq!(a.salt().len(), DEFAULT_SALT_BYTES);
        assert_ne!(a, Verifier::dummy(1000, b"list-b"));
        assert_eq!(a, Verifier::dummy(1000, b"list-a"));
        assert_eq!(Verifier::dummy(0, b"x").iterations(), 1);
        assert!(!a.check(b""));
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let v = Verifier::parse(&hash_password(b"pw", 1000, SALT)).unwrap();
        assert_eq!(format!("{v:?}"), "Verifier { iterations: 1000, .. }");
    }

    #[test]
    #[should_panic(expected = "salt must be 8 to 64 bytes")]
    fn a_short_salt_is_a_programming_error() {
        hash_password(b"pw", 1000, b"short");
    }
}
