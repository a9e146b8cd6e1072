//! Stateless session tickets that every shard can open.
//!
//! The key of a ticket is derived from the snapshot's ticket secret and the
//! period of wall-clock time it was issued in (`unix seconds / rotation`):
//! `HMAC-SHA-256(secret, "gapura ticket key" | period)`. Shards hold no
//! shared state and still agree on the key; a ticket is accepted in the
//! period it was issued in and the next one, so the key rotates every
//! period and an old key is gone after two.
//!
//! A ticket is `period (8 bytes, big-endian) | nonce (12) | ciphertext |
//! tag (16)`, sealed with AES-256-GCM; the period is authenticated as the
//! AEAD's additional data.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use std::time::{SystemTime, UNIX_EPOCH};

const LABEL: &[u8] = b"gapura ticket key";
const PERIOD_BYTES: usize = 8;

/// Tickets under one secret and rotation period.
pub struct Tickets {
    secret: hmac::Key,
    rotation_s: u64,
    rng: SystemRandom,
    /// The clock (unix seconds); the wall clock outside tests.
    now: fn() -> u64,
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tickets(rotation {} s)", self.rotation_s)
    }
}

fn wall_clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Tickets {
    /// Tickets from `secret` (not empty), rotating every `rotation_s`
    /// seconds (at least 1).
    pub fn new(secret: &[u8], rotation_s: u64) -> Tickets {
        Tickets::with_clock(secret, rotation_s, wall_clock)
    }

    fn with_clock(secret: &[u8], rotation_s: u64, now: fn() -> u64) -> Tickets {
        Tickets {
            secret: hmac::Key::new(hmac::HMAC_SHA256, secret),
            rotation_s: rotation_s.max(1),
            rng: SystemRandom::new(),
            now,
        }
    }

    fn period(&self) -> u64 {
        (self.now)() / self.rotation_s
    }

    fn key(&self, period: u64) -> LessSafeKey {
        let mut ctx = hmac::Context::with_key(&self.secret);
        ctx.update(LABEL);
        ctx.update(&period.to_be_bytes());
        let tag = ctx.sign();
        // A 32-byte key for AES-256-GCM: always accepted.
        let key = UnboundKey::new(&AES_256_GCM, tag.as_ref()).expect("32-byte AES-256 key");
        LessSafeKey::new(key)
    }
}

impl rustls::server::ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.rotation_s).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let period = self.period();
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(PERIOD_BYTES + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&period.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = self
            .key(period)
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(period.to_be_bytes()),
                &mut out[PERIOD_BYTES + NONCE_LEN..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < PERIOD_BYTES + NONCE_LEN + 16 {
            return None;
        }
        let (period, rest) = cipher.split_at(PERIOD_BYTES);
        let period = u64::from_be_bytes(period.try_into().ok()?);
        let now = self.period();
        if period != now && period.checked_add(1) != Some(now) {
            return None;
        }
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = sealed.to_vec();
        let plain = self
            .key(period)
            .open_in_place(nonce, Aad::from(period.to_be_bytes()), &mut buf)
            .ok()?;
        let n = plain.len();
        buf.truncate(n);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NOW: AtomicU64 = AtomicU64::new(0);
    fn now() -> u64 {
        NOW.load(Ordering::Relaxed)
    }
    fn fixed() -> u64 {
        5_000
    }

    #[test]
    fn tickets_open_on_any_instance_for_two_periods() {
        NOW.store(10_000, Ordering::Relaxed);
        let a = Tickets::with_clock(&[1; 32], 100, now);
        let b = Tickets::with_clock(&[1; 32], 100, now);
        let other = Tickets::with_clock(&[2; 32], 100, now);
        let t = a.encrypt(b"session state").unwrap();
        assert_ne!(
            a.encrypt(b"session state").unwrap(),
            t,
            "a fresh nonce each time"
        );
        // Another shard with the same secret opens it; another secret does not.
        assert_eq!(b.decrypt(&t).unwrap(), b"session state");
        assert_eq!(other.decrypt(&t), None);
        // The next period still accepts it; the one after does not.
        NOW.store(10_199, Ordering::Relaxed);
        assert_eq!(b.decrypt(&t).unwrap(), b"session state");
        NOW.store(10_200, Ordering::Relaxed);
        assert_eq!(b.decrypt(&t), None);
    }

    #[test]
    fn tampered_or_short_tickets_are_refused() {
        let a = Tickets::with_clock(&[3; 32], 3600, fixed);
        let t = a.encrypt(b"x").unwrap();
        for i in 0..t.len() {
            let mut bad = t.clone();
            bad[i] ^= 1;
            assert_eq!(a.decrypt(&bad), None, "byte {i} flipped");
        }
        assert_eq!(a.decrypt(&t[..t.len() - 1]), None);
        assert_eq!(a.decrypt(&[]), None);
    }
}
