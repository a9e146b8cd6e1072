//! The endpoint's keys, derived from one secret every shard shares and
//! every reload keeps (the TLS ticket secret): the stateless-reset key, and
//! the Retry-token key, which rotates with the ticket keys
//! (`[tls] ticket_rotation_s`): a token is sealed under the current
//! period's key and opened under it or the previous one's, so a Retry sent
//! just before a rotation still validates just after it.

use quinn_proto::crypto::{AeadKey, CryptoError, HandshakeTokenKey};
use std::time::{SystemTime, UNIX_EPOCH};

/// A key for one purpose, derived from the endpoint's secret.
pub(super) fn derive(secret: &[u8], purpose: &[u8]) -> [u8; 32] {
    let tag = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret),
        &[b"gapura quic ", purpose].concat(),
    );
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// Retry tokens' keys, by rotation period.
pub(super) struct RotatingTokenKey {
    secret: Vec<u8>,
    period_s: u64,
}

impl RotatingTokenKey {
    pub(super) fn new(secret: &[u8], period_s: u64) -> RotatingTokenKey {
        RotatingTokenKey {
            secret: secret.to_vec(),
            period_s: period_s.max(60),
        }
    }

    /// The key of period `p`.
    fn prk(&self, p: u64) -> ring::hkdf::Prk {
        let ikm = derive(&self.secret, &[&b"token "[..], &p.to_be_bytes()].concat());
        ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"gapura quic retry").extract(&ikm)
    }

    fn period_at(&self, unix_s: u64) -> u64 {
        unix_s / self.period_s
    }
}

impl HandshakeTokenKey for RotatingTokenKey {
    fn aead_from_hkdf(&self, random_bytes: &[u8]) -> Box<dyn AeadKey> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let p = self.period_at(now);
        Box::new(EitherKey {
            current: self.prk(p).aead_from_hkdf(random_bytes),
            previous: self.prk(p.saturating_sub(1)).aead_from_hkdf(random_bytes),
        })
    }
}

/// Seals under the current period's key; opens under it or the last one's.
struct EitherKey {
    current: Box<dyn AeadKey>,
    previous: Box<dyn AeadKey>,
}

impl AeadKey for EitherKey {
    fn seal(&self, data: &mut Vec<u8>, additional_data: &[u8]) -> Result<(), CryptoError> {
        self.current.seal(data, additional_data)
    }

    fn open<'a>(
        &self,
        data: &'a mut [u8],
        additional_data: &[u8],
    ) -> Result<&'a mut [u8], CryptoError> {
        // A failed open may leave its buffer changed: the current key is
        // tried on a copy (tokens are small, and only Retry's are opened).
        let mut trial = data.to_vec();
        if self.current.open(&mut trial, additional_data).is_ok() {
            return self.current.open(data, additional_data);
        }
        self.previous.open(data, additional_data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_in_its_period_and_the_next_only() {
        let k = RotatingTokenKey::new(b"secret", 3600);
        let seal = |p: u64| {
            let mut data = b"token".to_vec();
            k.prk(p)
                .aead_from_hkdf(b"r")
                .seal(&mut data, b"ad")
                .unwrap();
            data
        };
        let opens = |sealed: &[u8], now_p: u64| {
            let key = EitherKey {
                current: k.prk(now_p).aead_from_hkdf(b"r"),
                previous: k.prk(now_p.saturating_sub(1)).aead_from_hkdf(b"r"),
            };
            let mut data = sealed.to_vec();
            key.open(&mut data, b"ad").map(|d| d.to_vec()).ok()
        };
        let t = seal(10);
        assert_eq!(opens(&t, 10).as_deref(), Some(&b"token"[..]));
        assert_eq!(
            opens(&t, 11).as_deref(),
            Some(&b"token"[..]),
            "after a rotation"
        );
        assert_eq!(opens(&t, 12), None, "two rotations later");
        assert_eq!(opens(&t, 9), None, "a key of the future");
        // Another secret opens nothing.
        let other = RotatingTokenKey::new(b"other", 3600);
        let key = EitherKey {
            current: other.prk(10).aead_from_hkdf(b"r"),
            previous: other.prk(9).aead_from_hkdf(b"r"),
        };
        let mut data = t.clone();
        assert!(key.open(&mut data, b"ad").is_err());
        assert_eq!(k.period_at(7_199), 1);
    }
}
