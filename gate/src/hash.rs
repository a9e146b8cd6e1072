//! The project's unkeyed hashers, in one place.
//!
//! - [`Fnv1a`]: 64-bit FNV-1a, stable across processes and releases: the
//!   identities per-shard state follows across reloads (servers, rate
//!   pairs). Never for tables a client can fill.
//! - [`NameHasher`]: a fast multiply-xor hasher for tables whose keys come
//!   from the profile and are only looked up by request bytes (the host
//!   table).
//! - [`KeyHasher`]: a pass-through for keys that are already good 64-bit
//!   hashes (upstream server keys).
//!
//! Tables a client's bytes can add keys to use the quota's keyed hashes
//! (`quota::Keyer`, a per-process random key), not these. O(bytes), no
//! allocation.

use std::hash::Hasher;

/// 64-bit FNV-1a (the reference vectors are pinned by config's identity
/// tests).
pub struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    pub fn new() -> Fnv1a {
        Fnv1a(Fnv1a::OFFSET)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(Fnv1a::PRIME);
        }
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a::new()
    }
}

/// A fast multiply-xor hash for the host table. Its keys are the profile's
/// names; a request's Host is only looked up, never inserted, so a crafted
/// name can cost one probe sequence but cannot grow or degrade the table.
#[derive(Default)]
pub struct NameHasher(u64);

impl Hasher for NameHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        for &b in chunks.remainder() {
            h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        self.0 = h;
    }
}

/// Keys are already good hashes: use them as they are.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
