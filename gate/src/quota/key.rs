//! Keyed partition hashing: how a client becomes a 64-bit table key.
//!
//! Every quota table is keyed by a 64-bit value derived here, never by the raw
//! address, path, header or credential. The derivation is SipHash-1-3 under a
//! per-process random 128-bit seed (the caller reads it from the OS once and
//! hands it to [`Keyer::new`]), over a message that starts with a [`Domain`]
//! byte, so the same bytes used as two kinds of key (a header value and an
//! address, a rate key and a prefix budget) never give the same key.
//!
//! Why SipHash-1-3 (the `siphasher` crate): it is a keyed PRF built for
//! hash-flooding resistance, specified, and its output is stable across
//! versions and CPUs (known-answer tests can pin it). Faster keyed hashes
//! (aHash) change output between versions and targets and are not analysed
//! as PRFs; the key is computed once per request and dimension (tens of
//! nanoseconds), outside the table operations it feeds.
//!
//! Addresses are cut to a [`SourcePrefix`] first: IPv4 whole or by /24, IPv6 by
//! /64 (the default rate key), /56 (prefix budgets) or /48. An IPv4-mapped IPv6
//! address (`::ffff:a.b.c.d`, as a dual-stack socket reports IPv4 clients) is
//! keyed as the IPv4 address it carries.
//!
//! Nothing here allocates; every function is O(input bytes).

use sha2::{Digest, Sha256};
use siphasher::sip::SipHasher13;
use std::hash::Hasher;
use std::net::IpAddr;

/// What a key is used for. The byte value is part of the hashed message, so
/// keys of different domains are unrelated even for the same input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Domain {
    /// A rate policy keyed by the client address.
    RateSource = 1,
    /// A rate policy keyed by the client address plus the canonical path.
    RateSourcePath = 2,
    /// A rate policy keyed by a header value.
    RateHeader = 3,
    /// A header-keyed rate policy whose header is absent or empty: the client
    /// address, in a domain of its own so no header value can collide with it.
    RateHeaderFallback = 4,
    /// Request budgets and request leases of a source prefix.
    SourceBudget = 5,
    /// An identity budget (the fingerprint of a credential).
    Identity = 6,
    /// Accept-time connection leases of a source prefix.
    ConnectionLease = 7,
    /// Accept-time new-connection rate of a source prefix.
    ConnectionRate = 8,
    /// Anything a later block keys by plain bytes (an operation, a tenant).
    Other = 9,
    /// A client address as the access log writes it when addresses are
    /// hashed.
    LogAddress = 10,
    /// A UDP relay's source-prefix budget: a partition of its own, so a
    /// datagram flood never spends an HTTP client's budget.
    UdpPrefix = 11,
    /// A UDP relay's session (the client's address and port).
    UdpSession = 12,
    /// A UDP source prefix as a drop's log line names it.
    UdpLog = 13,
    /// A tenant's budget and lease (the configured header's value).
    Tenant = 14,
    /// A principal's budget and lease.
    Principal = 15,
    /// A resource's budget (the route it reaches).
    Resource = 16,
}

/// How much of a client address a key keeps, per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourcePrefix {
    v4_bits: u8,
    v6_bits: u8,
}

impl SourcePrefix {
    /// Rate keys: IPv4 whole, IPv6 by /64.
    pub const RATE: SourcePrefix = SourcePrefix {
        v4_bits: 32,
        v6_bits: 64,
    };
    /// Prefix budgets and leases: IPv4 /24, IPv6 /56.
    pub const BUDGET: SourcePrefix = SourcePrefix {
        v4_bits: 24,
        v6_bits: 56,
    };
    /// The wider IPv6 rate tier: IPv4 whole, IPv6 /56.
    pub const TIER_56: SourcePrefix = SourcePrefix {
        v4_bits: 32,
        v6_bits: 56,
    };
    /// The widest IPv6 rate tier: IPv4 whole, IPv6 /48.
    pub const TIER_48: SourcePrefix = SourcePrefix {
        v4_bits: 32,
        v6_bits: 48,
    };

    /// A prefix of `v4_bits` (0..=32) and `v6_bits` (0..=128); None outside.
    pub const fn new(v4_bits: u8, v6_bits: u8) -> Option<SourcePrefix> {
        if v4_bits > 32 || v6_bits > 128 {
            return None;
        }
        Some(SourcePrefix { v4_bits, v6_bits })
    }

    pub const fn v4_bits(self) -> u8 {
        self.v4_bits
    }

    pub const fn v6_bits(self) -> u8 {
        self.v6_bits
    }
}

/// An address cut to a prefix: what a source key is computed from. Transient;
/// it is hashed and dropped, never stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskedSource {
    /// 4 or 6.
    pub family: u8,
    /// The prefix length kept.
    pub bits: u8,
    /// The kept bits, zero after them (IPv4 in the first four bytes).
    pub octets: [u8; 16],
}

/// Cuts `addr` to `prefix` (IPv4-mapped IPv6 counts as IPv4). O(1).
pub fn mask_source(addr: IpAddr, prefix: SourcePrefix) -> MaskedSource {
    let mut octets = [0u8; 16];
    match addr.to_canonical() {
        IpAddr::V4(v4) => {
            let bits = prefix.v4_bits;
            let raw = u32::from_be_bytes(v4.octets());
            let kept = if bits == 0 {
                0
            } else {
                raw & (u32::MAX << (32 - bits))
            };
            octets[..4].copy_from_slice(&kept.to_be_bytes());
            MaskedSource {
                family: 4,
                bits,
                octets,
            }
        }
        IpAddr::V6(v6) => {
            let bits = prefix.v6_bits;
            let raw = u128::from_be_bytes(v6.octets());
            let kept = if bits == 0 {
                0
            } else {
                raw & (u128::MAX << (128 - bits))
            };
            octets.copy_from_slice(&kept.to_be_bytes());
            MaskedSource {
                family: 6,
                bits,
                octets,
            }
        }
    }
}

/// The SHA-256 fingerprint of a credential (an API key, a bearer token): the
/// only form in which an identity budget sees it.
pub type Fingerprint = [u8; 32];

/// SHA-256 of `credential`. O(len), no allocation.
pub fn fingerprint(credential: &[u8]) -> Fingerprint {
    Sha256::digest(credential).into()
}

/// Derives table keys under one process's seed. Copy it into each shard.
#[derive(Clone, Copy)]
pub struct Keyer {
    hasher: SipHasher13,
}

impl std::fmt::Debug for Keyer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The seed is a secret: it decides which clients share a probe window.
        f.write_str("Keyer { .. }")
    }
}

/// Bytes of path folded per hasher write.
const FOLD_CHUNK: usize = 64;

impl Keyer {
    /// A keyer under `seed`, which must be random and secret (read it from the
    /// OS with getrandom once per process; share it among shards).
    pub fn new(seed: [u8; 16]) -> Keyer {
        Keyer {
            hasher: SipHasher13::new_with_key(&seed),
        }
    }

    /// The key of `bytes` in `domain`. O(len).
    #[inline]
    pub fn bytes(&self, domain: Domain, bytes: &[u8]) -> u64 {
        let mut h = self.hasher;
        h.write_u8(domain as u8);
        h.write(bytes);
        h.finish()
    }

    /// The key of a client address cut to `prefix`, in `domain`. O(1): one
    /// SipHash of 20 bytes.
    #[inline]
    pub fn source(&self, domain: Domain, addr: IpAddr, prefix: SourcePrefix) -> u64 {
        self.hasher.hash(&source_message(domain, addr, prefix))
    }

    /// The key of a client address plus a canonical path
    /// ([`Domain::RateSourcePath`]). The path's ASCII case is folded, as route
    /// matching folds it, so `/API` and `/api` spend one budget. O(path).
    pub fn source_path(&self, addr: IpAddr, prefix: SourcePrefix, path: &[u8]) -> u64 {
        let mut h = self.hasher;
        h.write(&source_message(Domain::RateSourcePath, addr, prefix));
        let mut buf = [0u8; FOLD_CHUNK];
        for chunk in path.chunks(FOLD_CHUNK) {
            let out = &mut buf[..chunk.len()];
            out.copy_from_slice(chunk);
            out.make_ascii_lowercase();
            h.write(out);
        }
        h.finish()
    }

    /// The key of a header-keyed rate policy: the header's value in
    /// [`Domain::RateHeader`], or, when the header is absent or empty, the
    /// client address in [`Domain::RateHeaderFallback`]. Any value is
    /// accepted (no panic, no length limit beyond the request's own). O(len).
    pub fn header_or_source(
        &self,
        value: Option<&[u8]>,
        addr: IpAddr,
        prefix: SourcePrefix,
    ) -> u64 {
        match value {
            Some(v) if !v.is_empty() => self.bytes(Domain::RateHeader, v),
            _ => self.source(Domain::RateHeaderFallback, addr, prefix),
        }
    }

    /// The identity key of a credential header value: its SHA-256
    /// fingerprint, keyed in [`Domain::Identity`]. O(len); about a SHA-256
    /// block per 64 bytes.
    pub fn identity(&self, credential: &[u8]) -> u64 {
        self.identity_of(&fingerprint(credential))
    }

    /// The identity key of an already computed fingerprint. O(1).
    pub fn identity_of(&self, fp: &Fingerprint) -> u64 {
        self.bytes(Domain::Identity, fp)
    }
}

/// domain, family, prefix length, a zero byte, then the 16 kept octets.
#[inline]
fn source_message(domain: Domain, addr: IpAddr, prefix: SourcePrefix) -> [u8; 20] {
    let m = mask_source(addr, prefix);
    let mut msg = [0u8; 20];
    msg[0] = domain as u8;
    msg[1] = m.family;
    msg[2] = m.bits;
    msg[4..].copy_from_slice(&m.octets);
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const SEED: [u8; 16] = *b"0123456789abcdef";

    fn v4(s: &str) -> IpAddr {
        IpAddr::V4(s.parse::<Ipv4Addr>().unwrap())
    }

    fn v6(s: &str) -> IpAddr {
        IpAddr::V6(s.parse::<Ipv6Addr>().unwrap())
    }

    #[test]
    fn ipv4_budget_prefix_is_the_slash_24() {
        let k = Keyer::new(SEED);
        let b = SourcePrefix::BUDGET;
        let d = Domain::SourceBudget;
        assert_eq!(
            k.source(d, v4("192.0.2.1"), b),
            k.source(d, v4("192.0.2.254"), b)
        );
        assert_ne!(
            k.source(d, v4("192.0.2.1"), b),
            k.source(d, v4("192.0.3.1"), b)
        );
    }

    #[test]
    fn ipv4_rate_key_is_the_whole_address() {
        let k = Keyer::new(SEED);
        let d = Domain::RateSource;
        assert_ne!(
            k.source(d, v4("192.0.2.1"), SourcePrefix::RATE),
            k.source(d, v4("192.0.2.2"), SourcePrefix::RATE)
        );
    }

    #[test]
    fn ipv6_rate_key_is_the_slash_64() {
        let k = Keyer::new(SEED);
        let (d, p) = (Domain::RateSource, SourcePrefix::RATE);
        let a = k.source(d, v6("2001:db8:1:2:aaaa::1"), p);
        assert_eq!(a, k.source(d, v6("2001:db8:1:2:ffff:1:2:3"), p));
        assert_ne!(a, k.source(d, v6("2001:db8:1:3::1"), p));
    }

    #[test]
    fn ipv6_tiers_widen_to_slash_56_and_slash_48() {
        let k = Keyer::new(SEED);
        let d = Domain::RateSource;
        // Same /56 (2001:db8:1:2 vs 2001:db8:1:ff differ in bits 56..64).
        let a = v6("2001:db8:1:200::1");
        let b = v6("2001:db8:1:2ff::1");
        assert_ne!(
            k.source(d, a, SourcePrefix::RATE),
            k.source(d, b, SourcePrefix::RATE)
        );
        assert_eq!(
            k.source(d, a, SourcePrefix::TIER_56),
            k.source(d, b, SourcePrefix::TIER_56)
        );
        // Same /48, different /56.
        let c = v6("2001:db8:1:ff00::1");
        assert_ne!(
            k.source(d, a, SourcePrefix::TIER_56),
            k.source(d, c, SourcePrefix::TIER_56)
        );
        assert_eq!(
            k.source(d, a, SourcePrefix::TIER_48),
            k.source(d, c, SourcePrefix::TIER_48)
        );
        assert_ne!(
            k.source(d, a, SourcePrefix::TIER_48),
            k.source(d, v6("2001:db8:2::1"), SourcePrefix::TIER_48)
        );
    }

    #[test]
    fn ipv6_budget_prefix_is_the_slash_56() {
        let m = mask_source(v6("2001:db8:1:2ff:1:2:3:4"), SourcePrefix::BUDGET);
        assert_eq!(m.family, 6);
        assert_eq!(m.bits, 56);
        assert_eq!(
            m.octets,
            [0x20, 0x01, 0x0d, 0xb8, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn ipv4_mapped_ipv6_keys_as_ipv4() {
        let k = Keyer::new(SEED);
        let d = Domain::RateSource;
        assert_eq!(
            k.source(d, v6("::ffff:192.0.2.7"), SourcePrefix::RATE),
            k.source(d, v4("192.0.2.7"), SourcePrefix::RATE)
        );
    }

    #[test]
    fn domains_separate_equal_inputs() {
        let k = Keyer::new(SEED);
        let a = v4("192.0.2.1");
        let p = SourcePrefix::RATE;
        assert_ne!(
            k.source(Domain::RateSource, a, p),
            k.source(Domain::RateHeaderFallback, a, p)
        );
        assert_ne!(
            k.bytes(Domain::RateHeader, b"x"),
            k.bytes(Domain::Other, b"x")
        );
    }

    #[test]
    fn a_fresh_seed_gives_fresh_keys() {
        let a = Keyer::new(SEED);
        let b = Keyer::new(*b"fedcba9876543210");
        assert_ne!(
            a.bytes(Domain::RateHeader, b"token"),
            b.bytes(Domain::RateHeader, b"token")
        );
    }

    #[test]
    fn keys_are_siphash_1_3_of_the_domain_tagged_message() {
        let k = Keyer::new(SEED);
        let direct = SipHasher13::new_with_key(&SEED).hash(b"\x03abc");
        assert_eq!(k.bytes(Domain::RateHeader, b"abc"), direct);
    }

    #[test]
    fn path_key_folds_ascii_case() {
        let k = Keyer::new(SEED);
        let a = v4("192.0.2.1");
        let p = SourcePrefix::RATE;
        let long = [b'A'; 200];
        let long_lower = [b'a'; 200];
        assert_eq!(
            k.source_path(a, p, b"/API/Users"),
            k.source_path(a, p, b"/api/users")
        );
        assert_eq!(k.source_path(a, p, &long), k.source_path(a, p, &long_lower));
        assert_ne!(k.source_path(a, p, b"/api"), k.source_path(a, p, b"/apj"));
    }

    #[test]
    fn absent_or_empty_header_falls_back_to_the_source_domain() {
        let k = Keyer::new(SEED);
        let a = v4("192.0.2.1");
        let p = SourcePrefix::RATE;
        let fallback = k.source(Domain::RateHeaderFallback, a, p);
        assert_eq!(k.header_or_source(None, a, p), fallback);
        assert_eq!(k.header_or_source(Some(b""), a, p), fallback);
        assert_ne!(k.header_or_source(Some(b"key-1"), a, p), fallback);
        // Any bytes are a valid key.
        let hostile = [0xffu8, 0, b'\r', b'\n', 0x80];
        let _ = k.header_or_source(Some(&hostile), a, p);
    }

    #[test]
    fn identity_is_keyed_from_the_sha256_fingerprint() {
        let k = Keyer::new(SEED);
        let fp = fingerprint(b"Bearer abc");
        assert_eq!(
            fp[..4],
            [0xc3, 0x55, 0xdc, 0xe9][..],
            "sha256(\"Bearer abc\") starts c355dce9"
        );
        assert_eq!(k.identity(b"Bearer abc"), k.identity_of(&fp));
        assert_ne!(k.identity(b"Bearer abc"), k.identity(b"Bearer abd"));
    }

    #[test]
    fn zero_length_prefixes_key_the_whole_family() {
        let p = SourcePrefix::new(0, 0).unwrap();
        assert_eq!(mask_source(v4("198.51.100.9"), p).octets, [0u8; 16]);
        assert_eq!(mask_source(v6("2001:db8::9"), p).octets, [0u8; 16]);
        assert!(SourcePrefix::new(33, 64).is_none());
        assert!(SourcePrefix::new(32, 129).is_none());
    }
}
