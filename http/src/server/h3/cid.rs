//! Connection IDs that carry their shard: every connection ID a shard's
//! endpoint issues starts with two bytes whose value modulo the shard
//! count is the shard's index (the rest of the value and the six bytes
//! after it random), so the listener's steering program sends every
//! short-header packet of a connection to the shard that holds it,
//! whatever address it comes from (a client that migrates or is
//! rebound by a NAT stays on its shard; runtime `listeners`).

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};
use ring::rand::{SecureRandom, SystemRandom};
use std::time::Duration;

/// Bytes of every connection ID issued.
pub const CID_LEN: usize = 8;

/// Issues a shard's connection IDs.
pub struct ShardCids {
    shard: u16,
    shards: u16,
    rng: SystemRandom,
}

impl ShardCids {
    /// For shard `shard` of `shards` (at most 1,024).
    pub fn new(shard: usize, shards: usize) -> ShardCids {
        let shards = shards.clamp(1, 1024) as u16;
        ShardCids {
            shard: (shard as u16) % shards,
            shards,
            rng: SystemRandom::new(),
        }
    }
}

/// The shard a connection ID names, of `shards`.
pub fn shard_of(cid: &[u8], shards: usize) -> Option<usize> {
    let b = cid.get(..2)?;
    Some(u16::from_be_bytes([b[0], b[1]]) as usize % shards.max(1))
}

impl ConnectionIdGenerator for ShardCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut bytes = [0u8; CID_LEN];
        if self.rng.fill(&mut bytes).is_err() {
            // No randomness: still unique enough to route, never a panic.
            bytes = crate::clock::now_ms().to_be_bytes();
        }
        let r = u16::from_be_bytes([bytes[0], bytes[1]]);
        let slots = u16::MAX / self.shards;
        let lead = self.shard + self.shards * (r % slots);
        bytes[..2].copy_from_slice(&lead.to_be_bytes());
        ConnectionId::new(&bytes)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        match shard_of(cid, self.shards as usize) {
            Some(s) if cid.len() == CID_LEN && s == self.shard as usize => Ok(()),
            _ => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_names_its_shard_and_ids_differ() {
        for shards in [1usize, 2, 3, 7, 16, 255, 256, 1024] {
            for shard in [0, shards / 2, shards - 1] {
                let mut g = ShardCids::new(shard, shards);
                let mut seen = std::collections::HashSet::new();
                for _ in 0..64 {
                    let cid = g.generate_cid();
                    assert_eq!(cid.len(), CID_LEN);
                    assert_eq!(shard_of(&cid, shards), Some(shard), "{shards} {shard}");
                    assert!(g.validate(&cid).is_ok());
                    seen.insert(cid.to_vec());
                }
                assert!(seen.len() > 60, "random: {}", seen.len());
            }
        }
        // Another shard's id is not this shard's.
        let other = ShardCids::new(1, 4).generate_cid();
        assert!(ShardCids::new(2, 4).validate(&other).is_err());
    }
}
