//! The authenticated envelope: its wire format, the production decoder
//! ([`open`]) and the per-session replay window.
//!
//! ```text
//! offset  size  field
//!      0     1  version (1)
//!      1     1  key id: the index of the key in the relay's `keys`
//!      2     8  timestamp, Unix milliseconds, big-endian
//!     10     8  nonce, big-endian (a counter the sender increases)
//!     18     n  payload
//!   18+n    16  tag: HMAC-SHA-256(key, bytes 0 .. 18+n), first 16 bytes
//! ```
//!
//! [`open`] checks, cheapest first so a flood costs least: the length and
//! version (`malformed`), the key id (`unknown_key`), the timestamp against
//! the relay's clock within `max_age_ms` either way (`stale`), the tag, in
//! constant time (`bad_tag`); then the caller checks the nonce against the
//! session's [`ReplayWindow`] (`replayed`) and marks it only when the whole
//! datagram is accepted. O(len) for the tag, no allocation, never panics on
//! any input (a seeded corpus of arbitrary envelopes holds that).

use gapura_gate::udp::{EnvelopeKey, EnvelopePolicy, UdpDrop};
use subtle::ConstantTimeEq;

pub const VERSION: u8 = 1;
pub const HEADER_BYTES: usize = 18;
pub const TAG_BYTES: usize = 16;
/// The shortest envelope: a header, an empty payload and a tag.
pub const MIN_BYTES: usize = HEADER_BYTES + TAG_BYTES;

/// An envelope that verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    pub key_id: u8,
    pub timestamp_ms: u64,
    pub nonce: u64,
    /// Where the payload lies in the datagram.
    pub payload: (usize, usize),
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Checks `datagram` as an envelope under `policy` at `unix_ms` (the
/// relay's wall clock). The nonce is the caller's to check.
pub fn open(policy: &EnvelopePolicy, datagram: &[u8], unix_ms: u64) -> Result<Opened, UdpDrop> {
    if datagram.len() < MIN_BYTES || datagram[0] != VERSION {
        return Err(UdpDrop::Malformed);
    }
    let key_id = datagram[1];
    let Some(key) = policy.keys.get(usize::from(key_id)) else {
        return Err(UdpDrop::UnknownKey);
    };
    let timestamp_ms = be64(&datagram[2..10]);
    if timestamp_ms.abs_diff(unix_ms) > policy.max_age_ms {
        return Err(UdpDrop::Stale);
    }
    let body_end = datagram.len() - TAG_BYTES;
    let tag = key.tag(&datagram[..body_end]);
    if !bool::from(tag[..TAG_BYTES].ct_eq(&datagram[body_end..])) {
        return Err(UdpDrop::BadTag);
    }
    Ok(Opened {
        key_id,
        timestamp_ms,
        nonce: be64(&datagram[10..18]),
        payload: (HEADER_BYTES, body_end),
    })
}

/// Writes an envelope of `payload` into `out` (cleared first): what a
/// client sends. Allocates only if `out` must grow.
pub fn seal(
    key: &EnvelopeKey,
    key_id: u8,
    timestamp_ms: u64,
    nonce: u64,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.push(VERSION);
    out.push(key_id);
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&nonce.to_be_bytes());
    out.extend_from_slice(payload);
    let tag = key.tag(out);
    out.extend_from_slice(&tag[..TAG_BYTES]);
}

/// A session's replay window: the highest nonce seen and a bitmap of the
/// `bits.len() * 64` nonces below it, so nonces may arrive out of order
/// within the window but never twice, and none older than the window.
/// The bitmap is a slice of the session table's, allocated once.
pub struct ReplayWindow<'a> {
    /// `None` until the first nonce.
    pub highest: &'a mut Option<u64>,
    pub bits: &'a mut [u64],
}

impl ReplayWindow<'_> {
    fn width(&self) -> u64 {
        self.bits.len() as u64 * 64
    }

    fn bit(&self, nonce: u64) -> (usize, u64) {
        let i = nonce % self.width();
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Whether `nonce` is new to this window. O(1).
    pub fn fresh(&self, nonce: u64) -> bool {
        let Some(high) = *self.highest else {
            return true;
        };
        if nonce > high {
            return true;
        }
        if high - nonce >= self.width() {
            return false;
        }
        let (w, m) = self.bit(nonce);
        self.bits[w] & m == 0
    }

    /// Remembers `nonce` (which [`fresh`](Self::fresh) accepted). Moving the
    /// window forward clears the slots it passes: O(the jump), at most the
    /// window's words.
    pub fn mark(&mut self, nonce: u64) {
        match *self.highest {
            Some(high) if nonce <= high => {}
            Some(high) if nonce - high < self.width() => {
                for n in high + 1..=nonce {
                    let (w, m) = self.bit(n);
                    self.bits[w] &= !m;
                }
                *self.highest = Some(nonce);
            }
            _ => {
                self.bits.fill(0);
                *self.highest = Some(nonce);
            }
        }
        let (w, m) = self.bit(nonce);
        self.bits[w] |= m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_age_ms: u64) -> EnvelopePolicy {
        EnvelopePolicy {
            key_files: Vec::new(),
            keys: vec![EnvelopeKey::new(&[1; 32]), EnvelopeKey::new(&[2; 32])],
            max_age_ms,
            replay_window: 1_024,
            key_budget: None,
            strip: true,
        }
    }

    #[test]
    fn a_sealed_envelope_opens_and_names_its_payload() {
        let p = policy(5_000);
        let mut d = Vec::new();
        seal(&p.keys[1], 1, 1_000_000, 42, b"hello", &mut d);
        assert_eq!(d.len(), MIN_BYTES + 5);
        let o = open(&p, &d, 1_004_000).unwrap();
        assert_eq!((o.key_id, o.timestamp_ms, o.nonce), (1, 1_000_000, 42));
        assert_eq!(&d[o.payload.0..o.payload.1], b"hello");
    }

    #[test]
    fn every_failure_has_its_reason() {
        let p = policy(5_000);
        let mut d = Vec::new();
        seal(&p.keys[0], 0, 1_000_000, 1, b"x", &mut d);
        assert_eq!(
            open(&p, &d[..MIN_BYTES - 1], 1_000_000),
            Err(UdpDrop::Malformed)
        );
        let mut v2 = d.clone();
        v2[0] = 2;
        assert_eq!(open(&p, &v2, 1_000_000), Err(UdpDrop::Malformed));
        let mut k9 = d.clone();
        k9[1] = 9;
        assert_eq!(open(&p, &k9, 1_000_000), Err(UdpDrop::UnknownKey));
        // Either side of the clock.
        assert_eq!(open(&p, &d, 1_005_001), Err(UdpDrop::Stale));
        assert_eq!(open(&p, &d, 994_999), Err(UdpDrop::Stale));
        assert!(open(&p, &d, 1_005_000).is_ok());
        // Any changed bit, payload or tag.
        for i in [2usize, 10, 18, d.len() - 1] {
            let mut t = d.clone();
            t[i] ^= 1;
            let want = if i < 10 {
                Err(UdpDrop::Stale)
            } else {
                Err(UdpDrop::BadTag)
            };
            assert_eq!(open(&p, &t, 1_000_000).map(|_| ()), want, "byte {i}");
        }
        // The right tag under the other key.
        let mut other = Vec::new();
        seal(&p.keys[1], 0, 1_000_000, 1, b"x", &mut other);
        assert_eq!(open(&p, &other, 1_000_000), Err(UdpDrop::BadTag));
    }

    /// docs/udp.md's worked example, byte for byte.
    #[test]
    fn the_documented_example_seals_to_its_bytes() {
        let key: Vec<u8> = (0..32).collect();
        let mut d = Vec::new();
        seal(
            &EnvelopeKey::new(&key),
            0,
            1_780_000_000_000,
            7,
            b"\x02hello",
            &mut d,
        );
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "01000000019e7044880000000000000000070268656c6c6f58d09e0296afe6400900732690f583dc"
        );
        assert_eq!(d.len(), 40);
    }

    fn window(words: usize) -> (Option<u64>, Vec<u64>) {
        (None, vec![0; words])
    }

    #[test]
    fn the_replay_window_takes_each_nonce_once_and_none_too_old() {
        let (mut high, mut bits) = window(1); // 64 nonces
        let mut w = ReplayWindow {
            highest: &mut high,
            bits: &mut bits,
        };
        assert!(w.fresh(100));
        w.mark(100);
        assert!(!w.fresh(100), "replayed");
        // Out of order within the window.
        assert!(w.fresh(90));
        w.mark(90);
        assert!(!w.fresh(90));
        assert!(w.fresh(37), "100 - 37 = 63 < 64");
        assert!(!w.fresh(36), "older than the window");
        // A jump forward forgets the slots it passes, not the ones it keeps.
        w.mark(130);
        assert!(!w.fresh(100));
        assert!(!w.fresh(90), "130 - 90 < 64: still remembered");
        assert!(w.fresh(129));
        assert!(!w.fresh(66));
        // A jump past the whole window clears it.
        w.mark(1_000_000);
        assert!(w.fresh(999_999));
        assert!(!w.fresh(130));
        assert!(!w.fresh(1_000_000));
    }

    #[test]
    fn the_first_nonce_may_be_zero() {
        let (mut high, mut bits) = window(2);
        let mut w = ReplayWindow {
            highest: &mut high,
            bits: &mut bits,
        };
        assert!(w.fresh(0));
        w.mark(0);
        assert!(!w.fresh(0));
        assert!(w.fresh(1));
        assert!(w.fresh(u64::MAX));
        w.mark(u64::MAX);
        assert!(!w.fresh(u64::MAX));
        assert!(!w.fresh(1));
    }
}
