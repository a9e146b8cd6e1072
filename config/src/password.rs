//! Password hash lines for access-list users: what `gapura passwd` prints
//! and a profile stores as `password_hash`.
//!
//! [`hash`] checks the password and the iteration count the way a profile
//! and the gate read them (so every line it makes loads), takes the
//! caller's fresh 16-byte salt and runs the gate's
//! [`hash_password`](gapura_gate::access::password::hash_password):
//! PBKDF2-HMAC-SHA256, `$pbkdf2-sha256$i=N$SALT$HASH`. The whole derivation
//! runs on the calling thread (71 ms at the default 600,000 iterations in a
//! release build): a command-line tool's job, never a shard's.
//!
//! The salt is drawn by the caller (the runtime reads `/dev/urandom`), so
//! this crate stays free of I/O. The line sits here, beside the profile
//! format it belongs to, so that every tool that writes profiles makes it
//! the same checked way.

use gapura_gate::access::basic::MAX_PASSWORD_BYTES;
use gapura_gate::access::password::{
    hash_password, DEFAULT_SALT_BYTES, MAX_ITERATIONS, MIN_ITERATIONS,
};
use std::fmt;

pub use gapura_gate::access::password::DEFAULT_ITERATIONS;

/// Why no line was made.
#[derive(Debug)]
pub enum HashError {
    /// An empty password.
    Empty,
    /// Over 256 bytes: the gate reads no more of a password.
    TooLong,
    /// Outside 100,000..=10,000,000: a profile refuses the line
    /// (`accessList.user.password.iterations`).
    Iterations(u32),
}

impl fmt::Display for HashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashError::Empty => f.write_str("the password is empty"),
            HashError::TooLong => write!(
                f,
                "the password is over {MAX_PASSWORD_BYTES} bytes, more than the gate reads"
            ),
            HashError::Iterations(n) => write!(
                f,
                "{n} iterations: use {MIN_ITERATIONS} to {MAX_ITERATIONS} (the default is \
                 {DEFAULT_ITERATIONS})"
            ),
        }
    }
}

impl std::error::Error for HashError {}

/// Bytes of the salt [`hash`] takes.
pub const SALT_BYTES: usize = DEFAULT_SALT_BYTES;

/// The hash line of `password` with `iterations` rounds and `salt`, which
/// the caller draws fresh from the kernel for each line. Checks before it
/// hashes; then runs the whole PBKDF2.
pub fn hash(password: &str, iterations: u32, salt: &[u8; SALT_BYTES]) -> Result<String, HashError> {
    check(password, iterations)?;
    Ok(hash_password(password.as_bytes(), iterations, salt))
}

/// The checks of [`hash`], without drawing or hashing. O(1).
pub fn check(password: &str, iterations: u32) -> Result<(), HashError> {
    if password.is_empty() {
        return Err(HashError::Empty);
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(HashError::TooLong);
    }
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Err(HashError::Iterations(iterations));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gapura_gate::access::password::{verify, Verifier};

    #[test]
    fn a_line_verifies_its_password_only_and_salts_differ() {
        let a = hash("correct horse", MIN_ITERATIONS, &[7; SALT_BYTES]).unwrap();
        let b = hash("correct horse", MIN_ITERATIONS, &[8; SALT_BYTES]).unwrap();
        assert!(a.starts_with("$pbkdf2-sha256$i=100000$"), "{a}");
        assert_ne!(a, b, "each salt gives its own line");
        let v = Verifier::parse(&a).unwrap();
        assert_eq!((v.iterations(), v.salt().len()), (MIN_ITERATIONS, 16));
        assert!(verify(&a, b"correct horse"));
        assert!(!verify(&a, b"correct horsf"));
    }

    #[test]
    fn passwords_and_iterations_a_profile_refuses_are_refused_first() {
        assert!(matches!(check("", MIN_ITERATIONS), Err(HashError::Empty)));
        assert!(matches!(
            check(&"x".repeat(257), MIN_ITERATIONS),
            Err(HashError::TooLong)
        ));
        assert!(check(&"x".repeat(256), MIN_ITERATIONS).is_ok());
        assert!(matches!(
            check("pw", MIN_ITERATIONS - 1),
            Err(HashError::Iterations(99_999))
        ));
        assert!(matches!(
            check("pw", MAX_ITERATIONS + 1),
            Err(HashError::Iterations(_))
        ));
        assert!(check("pw", MAX_ITERATIONS).is_ok());
        assert!(matches!(
            hash("", 1, &[0; SALT_BYTES]),
            Err(HashError::Empty)
        ));
        assert_eq!(
            HashError::Iterations(5).to_string(),
            "5 iterations: use 100000 to 10000000 (the default is 600000)"
        );
    }
}
