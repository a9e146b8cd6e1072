//! One profile for the fleet: signed versions in the engine, a signed
//! pointer naming the current one, and what each node says of it.
//!
//! A publisher holds an Ed25519 key; every node has its public key in its
//! local profile (`[fleet] publisher_key`) and takes nothing it did not
//! sign. In the engine:
//!
//! - `gapura:profile:next`: the last version number given (`INCR`);
//! - `gapura:profile:v:N`: version N, immutable: its text, SHA-256, size,
//!   author, time and the publisher's signature over all but the text
//!   (the digest stands for it);
//! - `gapura:profile:pointer`: `SERIAL VERSION SHA256 STATE SIGNATURE`,
//!   the current version and whether the rollout is `live` or `halted`,
//!   signed. The serial is the publisher's clock in milliseconds (or one
//!   past the pointer it replaces): a node takes a pointer only with a
//!   serial above the last it took, so an engine restored from an old
//!   snapshot (an older pointer) is not taken as a rollback, and a
//!   rollback (a new pointer naming an older version) is;
//! - `gapura:profile:nodes`: per node, `ack VERSION TIME` or
//!   `nack VERSION TIME ERRORS`, and `gapura:profile:seen`: per node, when
//!   it last looked.
//!
//! Pure parts (records, signatures) are tested here without an engine;
//! [`Store`] is one blocking connection, for the commands and the node's
//! puller thread, never a shard.

use crate::rollout::Rollout;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use sha2::{Digest, Sha256};

/// The engine's keys.
/// (One hash tag: a cluster keeps them in one slot, for the halt's
/// script.)
pub const NEXT_KEY: &str = "gapura:{profile}:next";
pub const POINTER_KEY: &str = "gapura:{profile}:pointer";
pub const NODES_KEY: &str = "gapura:{profile}:nodes";
pub const SEEN_KEY: &str = "gapura:{profile}:seen";
/// `SERIAL REASON`: the rollout of the pointer of that serial is halted.
pub const HALT_KEY: &str = "gapura:{profile}:halt";
/// Per canary: `VERSION REQUESTS ERRORS REFUSED TIME` of its last interval.
pub const HEALTH_KEY: &str = "gapura:{profile}:health";

/// The engine's key of version `n`.
pub fn version_key(n: u64) -> String {
    format!("gapura:{{profile}}:v:{n}")
}

/// The lowercase hex SHA-256 of `text`.
pub fn digest(text: &[u8]) -> String {
    Sha256::digest(text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A publisher's signing key (PKCS#8, as `fleet keygen` writes it).
pub struct Signer {
    pair: Ed25519KeyPair,
}

impl Signer {
    /// A new key: its PKCS#8 bytes (to store, 0600) and the signer.
    pub fn generate() -> Result<(Vec<u8>, Signer), String> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| "no randomness")?;
        let signer = Signer::from_pkcs8(pkcs8.as_ref())?;
        Ok((pkcs8.as_ref().to_vec(), signer))
    }

    pub fn from_pkcs8(bytes: &[u8]) -> Result<Signer, String> {
        Ed25519KeyPair::from_pkcs8(bytes)
            .map(|pair| Signer { pair })
            .map_err(|_| "not an Ed25519 key (PKCS#8) as `gapura fleet keygen` writes".into())
    }

    /// The public key as nodes write it: base64 of its 32 bytes.
    pub fn public(&self) -> String {
        B64.encode(self.pair.public_key().as_ref())
    }

    fn sign(&self, message: &[u8]) -> String {
        B64.encode(self.pair.sign(message).as_ref())
    }
}

/// A node's trust in one publisher key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verifier {
    public: Vec<u8>,
}

impl Verifier {
    /// From the base64 of a 32-byte Ed25519 public key.
    pub fn new(public: &str) -> Result<Verifier, String> {
        match B64.decode(public.trim()) {
            Ok(b) if b.len() == 32 => Ok(Verifier { public: b }),
            _ => Err("not an Ed25519 public key (44 characters of base64)".into()),
        }
    }

    fn verify(&self, message: &[u8], signature: &str) -> bool {
        let Ok(sig) = B64.decode(signature) else {
            return false;
        };
        UnparsedPublicKey::new(&ED25519, &self.public)
            .verify(message, &sig)
            .is_ok()
    }
}

/// One published version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub number: u64,
    pub text: String,
    pub sha256: String,
    pub size: u64,
    pub author: String,
    /// Unix seconds.
    pub time: u64,
    pub signature: String,
}

impl Version {
    /// What the signature covers.
    fn message(number: u64, sha256: &str, size: u64, author: &str, time: u64) -> Vec<u8> {
        format!("gapura fleet profile\n{number}\n{sha256}\n{size}\n{author}\n{time}\n").into_bytes()
    }

    /// Version `number` of `text`, signed.
    pub fn signed(number: u64, text: String, author: &str, time: u64, key: &Signer) -> Version {
        let sha256 = digest(text.as_bytes());
        let size = text.len() as u64;
        let signature = key.sign(&Version::message(number, &sha256, size, author, time));
        Version {
            number,
            text,
            sha256,
            size,
            author: author.to_string(),
            time,
            signature,
        }
    }

    /// Whether `key` signed it and its text is what it says, within
    /// `max_bytes`; why not otherwise.
    pub fn check(&self, key: &Verifier, max_bytes: u64) -> Result<(), String> {
        if self.size > max_bytes || self.text.len() as u64 > max_bytes {
            return Err(format!(
                "version {} is {} bytes, over the bound of {max_bytes}",
                self.number,
                self.text.len().max(self.size as usize)
            ));
        }
        let message = Version::message(
            self.number,
            &self.sha256,
            self.size,
            &self.author,
            self.time,
        );
        if !key.verify(&message, &self.signature) {
            return Err(format!(
                "version {} is not signed by the publisher key",
                self.number
            ));
        }
        if digest(self.text.as_bytes()) != self.sha256 || self.text.len() as u64 != self.size {
            return Err(format!(
                "version {}'s text is not what was signed",
                self.number
            ));
        }
        Ok(())
    }
}

/// Whether the rollout of the current version goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Live,
    Halted,
}

impl State {
    pub fn word(self) -> &'static str {
        match self {
            State::Live => "live",
            State::Halted => "halted",
        }
    }
}

/// The current version, as the publisher named it, and its rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    pub serial: u64,
    pub version: u64,
    pub sha256: String,
    pub state: State,
    pub rollout: Rollout,
    pub signature: String,
}

impl Pointer {
    /// Everything but the signature, space-separated.
    fn fields(serial: u64, version: u64, sha256: &str, state: State, rollout: &Rollout) -> String {
        format!(
            "{serial} {version} {sha256} {} {}",
            state.word(),
            rollout.encode()
        )
    }

    fn message(fields: &str) -> Vec<u8> {
        format!("gapura fleet pointer\n{fields}\n").into_bytes()
    }

    pub fn signed(
        serial: u64,
        (version, sha256): (u64, &str),
        state: State,
        rollout: Rollout,
        key: &Signer,
    ) -> Pointer {
        let fields = Pointer::fields(serial, version, sha256, state, &rollout);
        Pointer {
            serial,
            version,
            sha256: sha256.to_string(),
            state,
            signature: key.sign(&Pointer::message(&fields)),
            rollout,
        }
    }

    pub fn verify(&self, key: &Verifier) -> bool {
        let fields = Pointer::fields(
            self.serial,
            self.version,
            &self.sha256,
            self.state,
            &self.rollout,
        );
        key.verify(&Pointer::message(&fields), &self.signature)
    }

    /// `SERIAL VERSION SHA256 STATE ROLLOUT... SIGNATURE`.
    pub fn encode(&self) -> String {
        let fields = Pointer::fields(
            self.serial,
            self.version,
            &self.sha256,
            self.state,
            &self.rollout,
        );
        format!("{fields} {}", self.signature)
    }

    pub fn decode(s: &str) -> Option<Pointer> {
        let mut it = s.split(' ');
        let serial = it.next()?.parse().ok()?;
        let version = it.next()?.parse().ok()?;
        let sha256 = it.next()?.to_string();
        let state = match it.next()? {
            "live" => State::Live,
            "halted" => State::Halted,
            _ => return None,
        };
        let rollout = Rollout::decode(&mut it)?;
        let signature = it.next()?.to_string();
        it.next().is_none().then_some(Pointer {
            serial,
            version,
            sha256,
            state,
            rollout,
            signature,
        })
    }
}

/// A pulling node's counters, shared with its admin listener.
#[derive(Debug, Default)]
pub struct ProfileStats {
    /// The fleet's version the node runs (0: its local profile).
    pub version: std::sync::atomic::AtomicU64,
    /// When the pointer was last read (Unix s; 0: never).
    pub last_pull: std::sync::atomic::AtomicU64,
    pub acks: std::sync::atomic::AtomicU64,
    pub nacks: std::sync::atomic::AtomicU64,
}

/// What a node says of a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub ack: bool,
    pub version: u64,
    /// Unix seconds.
    pub time: u64,
    /// A NACK's errors, one per line of the compiler's.
    pub errors: Vec<String>,
}

impl Report {
    /// `ack VERSION TIME` or `nack VERSION TIME ERROR\nERROR...`.
    pub fn encode(&self) -> String {
        let word = if self.ack { "ack" } else { "nack" };
        let mut s = format!("{word} {} {}", self.version, self.time);
        for e in &self.errors {
            s.push('\n');
            s.push_str(e);
        }
        s
    }

    pub fn decode(s: &str) -> Option<Report> {
        let mut lines = s.lines();
        let mut head = lines.next()?.split(' ');
        let ack = match head.next()? {
            "ack" => true,
            "nack" => false,
            _ => return None,
        };
        Some(Report {
            ack,
            version: head.next()?.parse().ok()?,
            time: head.next()?.parse().ok()?,
            errors: lines.map(str::to_string).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Signer {
        Signer::generate().unwrap().1
    }

    #[test]
    fn a_signed_version_checks_and_any_change_does_not() {
        let k = key();
        let trust = Verifier::new(&k.public()).unwrap();
        let v = Version::signed(7, "[server]\n".into(), "ops", 1_800_000_000, &k);
        assert_eq!(v.check(&trust, 1 << 20), Ok(()));
        let mut text = v.clone();
        text.text.push('#');
        assert!(text
            .check(&trust, 1 << 20)
            .unwrap_err()
            .contains("not what was signed"));
        let mut number = v.clone();
        number.number = 8;
        assert!(number
            .check(&trust, 1 << 20)
            .unwrap_err()
            .contains("not signed"));
        let other = Verifier::new(&key().public()).unwrap();
        assert!(v.check(&other, 1 << 20).unwrap_err().contains("not signed"));
        assert!(v.check(&trust, 4).unwrap_err().contains("over the bound"));
    }

    #[test]
    fn a_pointer_round_trips_and_binds_its_fields() {
        let k = key();
        let trust = Verifier::new(&k.public()).unwrap();
        let r = Rollout {
            canary_pct: 34,
            soak_ms: 1000,
            ..Rollout::default()
        };
        let p = Pointer::signed(1_800_000_000_123, (4, &digest(b"x")), State::Live, r, &k);
        let back = Pointer::decode(&p.encode()).unwrap();
        assert_eq!(back, p);
        assert!(back.verify(&trust));
        let halted = Pointer {
            state: State::Halted,
            ..p.clone()
        };
        assert!(!halted.verify(&trust), "the state is signed");
        let older = Pointer {
            serial: p.serial - 1,
            ..p.clone()
        };
        assert!(!older.verify(&trust), "the serial is signed");
        let all_at_once = Pointer {
            rollout: Rollout::default(),
            ..p
        };
        assert!(!all_at_once.verify(&trust), "the rollout is signed");
        assert_eq!(Pointer::decode("1 2 x live"), None);
    }

    #[test]
    fn reports_round_trip_with_their_errors() {
        let r = Report {
            ack: false,
            version: 3,
            time: 5,
            errors: vec!["p:1:1: error[a] b".into(), "p:2:1: error[c] d".into()],
        };
        assert_eq!(Report::decode(&r.encode()), Some(r));
        assert_eq!(
            Report::decode("ack 4 9"),
            Some(Report {
                ack: true,
                version: 4,
                time: 9,
                errors: vec![]
            })
        );
    }

    #[test]
    fn a_public_key_is_32_bytes_of_base64() {
        assert!(Verifier::new(&key().public()).is_ok());
        assert!(Verifier::new("abc").is_err());
        assert!(Verifier::new(&B64.encode([1u8; 31])).is_err());
    }
}
