//! The verification cache: credentials that passed PBKDF2 recently pass
//! again without it.
//!
//! **Keys.** A [`CacheKeyer`] turns (credential stamp, masked client,
//! credentials as sent) into a 64-bit key: the first 8 bytes of SHA-256 over
//! a per-process secret, a domain tag and those fields, each
//! length-delimited. Nothing else is stored, so the table holds no names,
//! passwords or addresses, and a key cannot be forged without the secret.
//! The client is masked as the rate limits mask it (IPv4 whole, IPv6 by
//! /64), so a credential verified for one client does not pass for another.
//! The stamp is a digest of the user's name and hash line: changing a
//! password or removing a user changes it, so old entries are never found
//! again, with no sweep and nothing to invalidate on reload.
//!
//! **Table.** [`VerifyCache`] has a fixed power-of-two capacity (4,096 by
//! default: 64 KiB, 16 bytes an entry, a key and an expiry), open
//! addressing with a probe of 4 slots from `key & mask`. Only a successful
//! verification is inserted. When the 4 slots are taken by live entries,
//! the one that would lapse first is evicted.
//!
//! **Refresh and TTL.** An entry lives five minutes ([`TTL_MS`]). A hit
//! pushes its expiry to five minutes from the hit, but only once less than
//! four minutes are left ([`REFRESH_BELOW_MS`]): a hot entry is written
//! about once a minute, an idle user drops out between four and five
//! minutes after the last request, and an active one stays verified.
//!
//! **Where it lives.** One per shard, touched only by that shard's thread:
//! the probe is on the decision path (0 B, a few loads), the insert happens
//! when a verification result comes back from the pool. A client reached
//! through a trusted proxy may land on several shards and be verified once
//! on each; nothing crosses shards. Time is an argument (milliseconds of
//! the shard's monotonic clock).

use sha2::digest::Digest;
use sha2::Sha256;
use std::net::IpAddr;

use crate::cidr::{canonical, key as addr_key};

/// How long a verified entry lives, and how far a refresh pushes it.
pub const TTL_MS: u64 = 5 * 60 * 1000;
/// A hit refreshes the entry only when less than this is left.
pub const REFRESH_BELOW_MS: u64 = 4 * 60 * 1000;
/// Slots looked at from a key's home slot.
pub const PROBE: usize = 4;
/// The default capacity (entries).
pub const DEFAULT_CAPACITY: usize = 4096;

/// Length of the per-process secret.
pub const SECRET_BYTES: usize = 32;

/// Derives cache keys and client keys from a per-process secret. The
/// runtime draws the secret at start (the gate reads no randomness); tests
/// pass fixed bytes. Hashing is O(credential bytes) (two or three SHA-256
/// compressions for ordinary credentials), no allocation.
#[derive(Clone)]
pub struct CacheKeyer {
    /// SHA-256 with the first block (secret and domain tag) absorbed.
    primed: Sha256,
}

impl std::fmt::Debug for CacheKeyer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheKeyer { .. }")
    }
}

const KIND_CREDENTIALS: u8 = 1;
const KIND_CLIENT: u8 = 2;

impl CacheKeyer {
    pub fn new(secret: &[u8; SECRET_BYTES]) -> CacheKeyer {
        let mut block = [0u8; 64];
        block[..SECRET_BYTES].copy_from_slice(secret);
        let tag = b"gapura.access.verify-cache.v1";
        block[SECRET_BYTES..SECRET_BYTES + tag.len()].copy_from_slice(tag);
        let mut primed = Sha256::new();
        primed.update(block);
        CacheKeyer { primed }
    }

    /// The cache key of `credentials` (the decoded `name:password` as sent)
    /// from `client` for a user whose credential stamp is `stamp`. Never 0.
    #[inline]
    pub fn credentials_key(&self, stamp: u64, client: IpAddr, credentials: &[u8]) -> u64 {
        let mut h = self.primed.clone();
        h.update([KIND_CREDENTIALS]);
        h.update(stamp.to_le_bytes());
        h.update(masked_client(client).to_le_bytes());
        h.update((credentials.len() as u32).to_le_bytes());
        h.update(credentials);
        nonzero(&h.finalize())
    }

    /// The key of a masked client, for the line's per-client shares.
    /// Never 0.
    #[inline]
    pub fn client_key(&self, client: IpAddr) -> u64 {
        let mut h = self.primed.clone();
        h.update([KIND_CLIENT]);
        h.update(masked_client(client).to_le_bytes());
        nonzero(&h.finalize())
    }
}

fn nonzero(digest: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(b).max(1)
}

/// The client as the cache and the line key it: IPv4 (and IPv4-mapped)
/// whole, IPv6 by its /64. O(1).
#[inline]
pub fn masked_client(addr: IpAddr) -> u128 {
    match canonical(addr) {
        v4 @ IpAddr::V4(_) => addr_key(v4),
        v6 => addr_key(v6) & (u128::MAX << 64),
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry {
    /// 0: empty.
    key: u64,
    /// Live while `now_ms < expires_ms`.
    expires_ms: u64,
}

/// The per-shard table of verified credentials. Fixed capacity, no
/// allocation after construction, single-threaded.
#[derive(Clone, Debug)]
pub struct VerifyCache {
    entries: Box<[Entry]>,
    mask: usize,
}

impl VerifyCache {
    /// A table of `capacity` entries: a power of two, at least [`PROBE`].
    /// Allocates once.
    ///
    /// # Panics
    /// If `capacity` is not a power of two or is smaller than [`PROBE`].
    pub fn with_capacity(capacity: usize) -> VerifyCache {
        assert!(
            capacity.is_power_of_two() && capacity >= PROBE,
            "the cache capacity must be a power of two of at least {PROBE}"
        );
        VerifyCache {
            entries: vec![Entry::default(); capacity].into_boxed_slice(),
            mask: capacity - 1,
        }
    }

    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    fn slot(&self, key: u64, i: usize) -> usize {
        (key as usize).wrapping_add(i) & self.mask
    }

    /// Whether `key` was verified and is still live at `now_ms`. A hit with
    /// less than [`REFRESH_BELOW_MS`] left is pushed to `now_ms + TTL_MS`.
    /// At most [`PROBE`] loads, no allocation. Key 0 never hits.
    #[inline]
    pub fn lookup(&mut self, key: u64, now_ms: u64) -> bool {
        if key == 0 {
            return false;
        }
        for i in 0..PROBE {
            let s = self.slot(key, i);
            let e = &mut self.entries[s];
            if e.key == key {
                if now_ms >= e.expires_ms {
                    return false;
                }
                if e.expires_ms - now_ms < REFRESH_BELOW_MS {
                    e.expires_ms = now_ms + TTL_MS;
                }
                return true;
            }
        }
        false
    }

    /// Whether `key` is live at `now_ms`, without refreshing it (for tests
    /// and diagnostics; `explain` reads no cache at all).
    pub fn contains(&self, key: u64, now_ms: u64) -> bool {
        (0..PROBE).any(|i| {
            let e = &self.entries[self.slot(key, i)];
            key != 0 && e.key == key && now_ms < e.expires_ms
        })
    }

    /// The expiry of `key`'s entry, live or not (tests and diagnostics).
    pub fn expiry_of(&self, key: u64) -> Option<u64> {
        (0..PROBE)
            .map(|i| &self.entries[self.slot(key, i)])
            .find(|e| key != 0 && e.key == key)
            .map(|e| e.expires_ms)
    }

    /// Records a successful verification of `key` at `now_ms`, live until
    /// `now_ms + TTL_MS`. The key's own slot is reused; else the first empty
    /// or lapsed slot of the probe; else the entry that lapses first is
    /// evicted. O(PROBE), no allocation. Key 0 is ignored.
    pub fn insert(&mut self, key: u64, now_ms: u64) {
        if key == 0 {
            return;
        }
        let mut target = None;
        let mut oldest = (u64::MAX, self.slot(key, 0));
        for i in 0..PROBE {
            let s = self.slot(key, i);
            let e = self.entries[s];
            if e.key == key {
                target = Some(s);
                break;
            }
            if target.is_none() && (e.key == 0 || now_ms >= e.expires_ms) {
                target = Some(s);
            }
            if e.expires_ms < oldest.0 {
                oldest = (e.expires_ms, s);
            }
        }
        let s = target.unwrap_or(oldest.1);
        self.entries[s] = Entry {
            key,
            expires_ms: now_ms + TTL_MS,
        };
    }

    /// Live entries at `now_ms`. O(capacity).
    pub fn live(&self, now_ms: u64) -> usize {
        self.entries
            .iter()
            .filter(|e| e.key != 0 && now_ms < e.expires_ms)
            .count()
    }
}

impl Default for VerifyCache {
    fn default() -> VerifyCache {
        VerifyCache::with_capacity(DEFAULT_CAPACITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: [u8; 32] = [7; 32];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn keys_depend_on_every_field_and_the_secret() {
        let k = CacheKeyer::new(&SECRET);
        let base = k.credentials_key(42, ip("192.0.2.1"), b"alice:pw");
        assert_ne!(base, 0);
        assert_eq!(base, k.credentials_key(42, ip("192.0.2.1"), b"alice:pw"));
        assert_ne!(base, k.credentials_key(43, ip("192.0.2.1"), b"alice:pw"));
        assert_ne!(base, k.credentials_key(42, ip("192.0.2.2"), b"alice:pw"));
        assert_ne!(base, k.credentials_key(42, ip("192.0.2.1"), b"alice:pW"));
        let other = CacheKeyer::new(&[8; 32]);
        assert_ne!(
            base,
            other.credentials_key(42, ip("192.0.2.1"), b"alice:pw")
        );
        // The client key is another domain.
        assert_ne!(k.client_key(ip("192.0.2.1")), base);
        assert_eq!(format!("{k:?}"), "CacheKeyer { .. }");
    }

    #[test]
    fn clients_are_masked_like_the_rate_limits() {
        let k = CacheKeyer::new(&SECRET);
        let key = |a| k.credentials_key(1, ip(a), b"a:b");
        // IPv4 whole, IPv4-mapped is IPv4.
        assert_eq!(key("192.0.2.1"), key("::ffff:192.0.2.1"));
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        // IPv6 by /64.
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(
            k.client_key(ip("2001:db8:1:2::1")),
            k.client_key(ip("2001:db8:1:2::2"))
        );
    }

    #[test]
    fn a_miss_then_an_insert_then_a_hit() {
        let mut c = VerifyCache::with_capacity(16);
        assert!(!c.lookup(99, 1_000));
        c.insert(99, 1_000);
        assert!(c.lookup(99, 1_000));
        assert_eq!(c.expiry_of(99), Some(1_000 + TTL_MS));
        assert_eq!(c.live(1_000), 1);
        assert!(!c.lookup(0, 1_000));
        c.insert(0, 1_000);
        assert_eq!(c.live(1_000), 1);
    }

    #[test]
    fn entries_lapse_five_minutes_after_the_insert_without_hits() {
        let mut c = VerifyCache::with_capacity(16);
        c.insert(5, 10_000);
        assert!(c.contains(5, 10_000 + TTL_MS - 1));
        assert!(!c.contains(5, 10_000 + TTL_MS));
        assert!(!c.lookup(5, 10_000 + TTL_MS));
        assert_eq!(c.live(10_000 + TTL_MS), 0);
    }

    #[test]
    fn a_hit_refreshes_only_when_less_than_four_minutes_are_left() {
        let mut c = VerifyCache::with_capacity(16);
        let t0 = 1_000_000;
        c.insert(5, t0);
        // 59.999 s later, 4 min 0.001 s are left: no write.
        assert!(c.lookup(5, t0 + 59_999));
        assert_eq!(c.expiry_of(5), Some(t0 + TTL_MS));
        // Exactly 4 min left: still no write.
        assert!(c.lookup(5, t0 + 60_000));
        assert_eq!(c.expiry_of(5), Some(t0 + TTL_MS));
        // Less than 4 min left: pushed to 5 min from this hit.
        assert!(c.lookup(5, t0 + 60_001));
        assert_eq!(c.expiry_of(5), Some(t0 + 60_001 + TTL_MS));
        // An active user stays verified: a hit every 90 s for an hour.
        let mut t = t0 + 60_001;
        for _ in 0..40 {
            t += 90_000;
            assert!(c.lookup(5, t));
        }
        // An idle one lapses between four and five minutes after the last hit.
        assert!(c.contains(5, t + 4 * 60_000));
        assert!(!c.contains(5, t + TTL_MS));
    }

    #[test]
    fn a_reinsert_renews_the_same_slot() {
        let mut c = VerifyCache::with_capacity(16);
        c.insert(5, 0);
        c.insert(5, 100_000);
        assert_eq!(c.live(100_000), 1);
        assert_eq!(c.expiry_of(5), Some(100_000 + TTL_MS));
    }

    #[test]
    fn a_full_probe_evicts_the_entry_that_lapses_first() {
        let mut c = VerifyCache::with_capacity(16);
        // Keys 1, 17, 33, 49 share home slot 1 and fill slots 1..=4.
        for (i, k) in [1u64, 17, 33, 49].into_iter().enumerate() {
            c.insert(k, 1_000 * i as u64);
        }
        assert!(c.lookup(1, 5_000));
        // A fifth key with the same home evicts key 1 (expires first).
        c.insert(65, 5_000);
        assert!(!c.lookup(1, 5_000));
        for k in [17, 33, 49, 65] {
            assert!(c.lookup(k, 5_000), "{k}");
        }
        assert_eq!(c.live(5_000), 4);
    }

    #[test]
    fn a_lapsed_slot_is_reused_before_evicting_a_live_one() {
        let mut c = VerifyCache::with_capacity(16);
        c.insert(1, 0);
        for k in [17u64, 33, 49] {
            c.insert(k, TTL_MS);
        }
        // At TTL_MS key 1 has lapsed: 65 takes its slot, the rest stay.
        c.insert(65, TTL_MS);
        for k in [17, 33, 49, 65] {
            assert!(c.contains(k, TTL_MS), "{k}");
        }
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn capacity_must_be_a_power_of_two() {
        VerifyCache::with_capacity(1000);
    }
}
