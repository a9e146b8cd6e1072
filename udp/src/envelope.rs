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
//! constant time (`bad_tag`); then the caller takes the nonce in the key's
//! replay window (`replayed`; `crate::replay`). O(len) for the tag, no allocation, never panics on
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
}
