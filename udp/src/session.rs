//! The session table: one shard's client addresses (address and port), each
//! bound to an upstream server and, in the I/O layer, to a socket of its
//! own that faces that server.
//!
//! Fixed capacity, chosen at start: a power-of-two array at least twice the
//! [`Ceiling`] (gate's tracked-key ceiling, reused), open addressing over a
//! window of [`PROBE`] entries, keyed by a keyed hash of the address
//! ([`Domain::UdpSession`](gapura_gate::quota::Domain)). The address itself
//! is kept beside the key (replies go back to it) and compared, so a hash
//! collision never crosses sessions. (Replay windows are the key's, not
//! the session's: the relay keeps them.)
//!
//! Eviction: none by force. A session ends when it has been idle for
//! `idle_timeout_ms` (no datagram either way; the I/O layer's timer calls
//! [`SessionTable::remove`]), or when the shard drains. A new client that
//! finds the table at its ceiling, or its probe window full, is refused
//! (`session_capacity`) without adding state; the critical reserve is kept
//! for operation classes marked critical. So a flood of spoofed sources
//! stops at the ordinary ceiling and cannot push live players out.
//!
//! Every operation is O(PROBE) and allocates nothing.

use gapura_gate::quota::{Bucket, Ceiling};
use std::net::SocketAddr;

/// Entries in one probe window.
pub const PROBE: usize = 16;

/// One session.
#[derive(Clone, Copy, Debug)]
pub struct Session {
    /// The keyed hash of `client`; 0 marks an empty entry.
    key: u64,
    pub client: SocketAddr,
    /// Bumped every time the entry is reused, so a stale handle (an I/O
    /// task of an earlier session) is recognised.
    pub generation: u32,
    /// The upstream server's index in the relay's policy.
    pub server: u16,
    /// The servers' epoch the index belongs to (a reload moves it).
    pub server_epoch: u32,
    pub critical: bool,
    /// Proved: an authenticated envelope, fresh for its key, came from
    /// this address (what a blind spoofer cannot produce). Never set on a
    /// relay without `auth`: the amplification bound then holds for the
    /// session's whole life.
    pub validated: bool,
    /// The last datagram either way, ms on the shard's clock.
    pub last_ms: u64,
    pub bucket: Bucket,
    /// Bytes received from the client and sent back to it while not yet
    /// validated (the amplification bound's terms).
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

impl Session {
    const EMPTY: Session = Session {
        key: 0,
        client: SocketAddr::V4(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::UNSPECIFIED,
            0,
        )),
        generation: 0,
        server: 0,
        server_epoch: 0,
        critical: false,
        validated: false,
        last_ms: 0,
        bucket: Bucket::new(),
        rx_bytes: 0,
        tx_bytes: 0,
    };

    fn is_live(&self) -> bool {
        self.key != 0
    }
}

/// Where a client is, or where it would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spot {
    Found(usize),
    Vacant(usize),
    /// The table is at the class's ceiling, or the probe window is full.
    Refused,
}

/// A live session's handle: its index and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRef {
    pub idx: usize,
    pub generation: u32,
}

pub struct SessionTable {
    entries: Box<[Session]>,
    mask: usize,
    live: u32,
    ceiling: Ceiling,
}

fn stored(key: u64) -> u64 {
    key.max(1)
}

impl SessionTable {
    /// A table for `ceiling`'s sessions.
    pub fn new(ceiling: Ceiling) -> SessionTable {
        let n = ceiling.entries();
        SessionTable {
            entries: vec![Session::EMPTY; n].into_boxed_slice(),
            mask: n - 1,
            live: 0,
            ceiling,
        }
    }

    /// Whether this table serves `ceiling` as it is.
    pub fn fits(&self, ceiling: Ceiling) -> bool {
        self.ceiling == ceiling
    }

    pub fn live(&self) -> u32 {
        self.live
    }

    pub fn ceiling(&self) -> Ceiling {
        self.ceiling
    }

    /// Finds `client` (keyed `key`), or a vacancy a class of `critical`
    /// may take. O(PROBE).
    pub fn spot(&self, key: u64, client: SocketAddr, critical: bool) -> Spot {
        let key = stored(key);
        let start = (key ^ (key >> 29)) as usize & self.mask;
        let mut vacant = None;
        for i in 0..PROBE {
            let idx = (start + i) & self.mask;
            let e = &self.entries[idx];
            if e.is_live() {
                if e.key == key && e.client == client {
                    return Spot::Found(idx);
                }
            } else if vacant.is_none() {
                vacant = Some(idx);
            }
        }
        let class = if critical {
            gapura_gate::quota::Class::Critical
        } else {
            gapura_gate::quota::Class::Normal
        };
        match vacant {
            Some(idx) if self.live < self.ceiling.limit(class) => Spot::Vacant(idx),
            _ => Spot::Refused,
        }
    }

    /// Opens a session at a vacancy [`spot`](Self::spot) returned.
    pub fn insert(&mut self, idx: usize, key: u64, client: SocketAddr, now_ms: u64) -> SessionRef {
        let e = &mut self.entries[idx];
        debug_assert!(!e.is_live());
        let generation = e.generation.wrapping_add(1);
        *e = Session {
            key: stored(key),
            client,
            generation,
            last_ms: now_ms,
            ..Session::EMPTY
        };
        self.live += 1;
        SessionRef { idx, generation }
    }

    /// The session at `idx`, live or not.
    pub fn at(&self, idx: usize) -> &Session {
        &self.entries[idx]
    }

    /// The session at `idx`, live or not.
    pub fn at_mut(&mut self, idx: usize) -> &mut Session {
        &mut self.entries[idx]
    }

    /// The live session `r` names, if it is still that session.
    pub fn get(&self, r: SessionRef) -> Option<&Session> {
        let e = self.entries.get(r.idx)?;
        (e.is_live() && e.generation == r.generation).then_some(e)
    }

    pub fn get_mut(&mut self, r: SessionRef) -> Option<&mut Session> {
        let e = self.entries.get_mut(r.idx)?;
        (e.is_live() && e.generation == r.generation).then_some(e)
    }

    /// Ends the session `r` names; false when it had already ended.
    pub fn remove(&mut self, r: SessionRef) -> bool {
        match self.entries.get_mut(r.idx) {
            Some(e) if e.is_live() && e.generation == r.generation => {
                e.key = 0;
                self.live -= 1;
                true
            }
            _ => false,
        }
    }

    /// Every live session, for the drain.
    pub fn refs(&self) -> impl Iterator<Item = SessionRef> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_live())
            .map(|(idx, e)| SessionRef {
                idx,
                generation: e.generation,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_client_is_found_by_address_and_port() {
        let mut t = SessionTable::new(Ceiling::new(8, 0).unwrap());
        let a = addr("192.0.2.1:5000");
        let Spot::Vacant(i) = t.spot(11, a, false) else {
            panic!()
        };
        let r = t.insert(i, 11, a, 0);
        assert_eq!(t.spot(11, a, false), Spot::Found(i));
        // The same key from another port is another client.
        assert!(matches!(
            t.spot(11, addr("192.0.2.1:5001"), false),
            Spot::Vacant(_)
        ));
        assert!(t.remove(r));
        assert!(!t.remove(r), "a second remove is a no-op");
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn the_ceiling_keeps_its_reserve_for_critical_classes() {
        let mut t = SessionTable::new(Ceiling::new(4, 1).unwrap());
        for p in 0..3u16 {
            let a = SocketAddr::new("192.0.2.1".parse().unwrap(), 1_000 + p);
            let key = u64::from(p).wrapping_mul(0x9e37_79b9_7f4a_7c15) + 1;
            let Spot::Vacant(i) = t.spot(key, a, false) else {
                panic!("ordinary {p}")
            };
            t.insert(i, key, a, 0);
        }
        let late = addr("198.51.100.1:9");
        assert_eq!(t.spot(77, late, false), Spot::Refused);
        let Spot::Vacant(i) = t.spot(77, late, true) else {
            panic!("critical")
        };
        t.insert(i, 77, late, 0);
        assert_eq!(t.spot(78, addr("198.51.100.2:9"), true), Spot::Refused);
        assert_eq!(t.live(), 4);
    }

    #[test]
    fn a_reused_entry_has_a_new_generation_and_a_clean_state() {
        let mut t = SessionTable::new(Ceiling::new(8, 0).unwrap());
        let a = addr("192.0.2.1:5000");
        let Spot::Vacant(i) = t.spot(5, a, false) else {
            panic!()
        };
        let r1 = t.insert(i, 5, a, 0);
        t.at_mut(i).validated = true;
        t.at_mut(i).tx_bytes = 99;
        t.remove(r1);
        let r2 = t.insert(i, 5, a, 10);
        assert_ne!(r1.generation, r2.generation);
        assert!(t.get(r1).is_none());
        let s = t.get(r2).unwrap();
        assert!(!s.validated);
        assert_eq!(s.tx_bytes, 0);
    }
}
