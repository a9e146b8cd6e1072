//! The relay's decisions, pure: what happens to a datagram from a client
//! ([`Relay::inbound`]) and to a reply from upstream ([`Relay::outbound`]).
//! No sockets and no clock: the I/O layer ([`crate::io`]) and `gapura
//! explain` drive the same code, time passed in.
//!
//! A client's datagram goes through, in order (docs/udp.md):
//!
//! 1. size bound, global, source prefix and operation budgets (gate's
//!    [`UdpBudgets`]), before any byte is decoded;
//! 2. the session: found by address and port, or a vacancy under the
//!    ceiling (the critical reserve for critical classes); not yet added;
//! 3. the session's token bucket (a new session's is full);
//! 4. relay: a new session is opened only now, on a server the balancer
//!    picks, so nothing that failed a check leaves state behind.
//!
//! A relay with `auth` runs the size bound and the source prefix's budget
//! (all an invalid datagram pays), then the envelope (version, key,
//! timestamp, tag), then the key's budget, the global and operation budgets with the class
//! read from authenticated bytes, the session and its bucket, the nonce
//! against the key's replay window ([`KeyWindows`]), and relay.
//!
//! Replies pass the amplification bound: until a session is proved by a
//! fresh authenticated envelope (never, without `auth`: nothing else is
//! beyond a blind spoofer), the bytes sent back stay within
//! [`AMPLIFICATION_FACTOR`] times the bytes received.
//!
//! A relay whose budgets are fleet-scoped keeps its shared keys beside its
//! budget counters ([`Relay::enable_fleet`]); the shard's sync timer
//! reaches them through [`Relay::fleet_peer`], never the datagram path.
//!
//! Every call is O(1) plus the tables' bounded probes and the envelope's
//! HMAC; nothing allocates after [`Relay::new`] (a reload that resizes a
//! table allocates the new one).

use crate::envelope;
use crate::replay::{KeySlots, ReplayBoard};
use crate::session::{SessionRef, SessionTable, Spot};
use gapura_gate::quota::fleet::FleetPeer;
use gapura_gate::quota::{Domain, Keyer};
use gapura_gate::udp::{UdpBudgets, UdpDrop, UdpFleet, UdpPolicy, AMPLIFICATION_FACTOR};
use gapura_gate::upstream::Balance;
use std::net::SocketAddr;
use std::sync::Arc;

/// What to do with a client's datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Send `datagram[payload.0..payload.1]` on the session's upstream
    /// socket; `new`: the session was just opened (make its socket, on
    /// `server`).
    Forward {
        session: SessionRef,
        new: bool,
        server: usize,
        payload: (usize, usize),
        class: u8,
    },
    Drop {
        reason: UdpDrop,
        class: u8,
    },
}

/// Counters of one relay on one shard (published to the metrics by the
/// I/O layer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub dropped: [u64; UdpDrop::ALL.len()],
    /// Datagrams relayed to upstream and replies relayed to clients.
    pub forwarded: u64,
    pub replied: u64,
    pub forwarded_bytes: u64,
    pub replied_bytes: u64,
    pub sessions_opened: u64,
    pub sessions_closed: u64,
}

/// One relay's state on one shard.
pub struct Relay {
    policy: Arc<UdpPolicy>,
    keyer: Keyer,
    budgets: UdpBudgets,
    sessions: SessionTable,
    /// The keys' replay windows (with `auth`), shared by every shard.
    replay: KeyWindows,
    board: Arc<ReplayBoard>,
    /// Smooth weighted round robin's current weights, and the live sessions
    /// per server (least outstanding), indexed like the policy's servers.
    weights: Vec<i64>,
    per_server: Vec<u32>,
    /// Moves when a reload changes the servers: older sessions' indexes no
    /// longer count.
    server_epoch: u32,
    pub counters: Counters,
}

/// The replay windows of a relay's keys: one per key for the process
/// (`replay`: every shard takes a nonce in the same window), so an
/// envelope is taken once, from whichever source, on whichever shard.
struct KeyWindows {
    windows: Vec<Arc<KeySlots>>,
    width: u32,
    /// Each key's fingerprint: a reload that changes a key starts its
    /// window anew.
    prints: Vec<[u8; 16]>,
}

impl KeyWindows {
    fn new(p: &UdpPolicy, board: &ReplayBoard) -> KeyWindows {
        let width = p.envelope.as_ref().map_or(0, |e| e.replay_window);
        let prints = prints(p);
        KeyWindows {
            windows: prints
                .iter()
                .map(|print| board.window(&p.name, *print, width))
                .collect(),
            width,
            prints,
        }
    }

    fn fits(&self, p: &UdpPolicy) -> bool {
        let width = p.envelope.as_ref().map_or(0, |e| e.replay_window);
        self.width == width && self.prints == prints(p)
    }

    /// Takes `nonce` in key `id`'s window (`open` checked that the relay
    /// holds the key); false when it was taken before.
    fn take(&self, id: u8, nonce: u64) -> bool {
        self.windows
            .get(usize::from(id))
            .is_some_and(|w| w.take(nonce))
    }
}

fn prints(p: &UdpPolicy) -> Vec<[u8; 16]> {
    p.envelope.as_ref().map_or(Vec::new(), |e| {
        e.keys
            .iter()
            .map(|k| {
                let mut f = [0u8; 16];
                f.copy_from_slice(&k.tag(b"gapura udp key fingerprint")[..16]);
                f
            })
            .collect()
    })
}

impl Relay {
    /// The state for `policy` under the process's hash `seed`, its keys'
    /// replay windows from the process's `board`. Allocates its tables
    /// once.
    pub fn new(policy: Arc<UdpPolicy>, seed: [u8; 16], board: Arc<ReplayBoard>) -> Relay {
        let n = policy.servers.len();
        Relay {
            budgets: UdpBudgets::new(&policy),
            sessions: SessionTable::new(policy.session.ceiling),
            replay: KeyWindows::new(&policy, &board),
            board,
            keyer: Keyer::new(seed),
            weights: vec![0; n],
            per_server: vec![0; n],
            server_epoch: 0,
            counters: Counters::default(),
            policy,
        }
    }

    pub fn policy(&self) -> &Arc<UdpPolicy> {
        &self.policy
    }

    pub fn keyer(&self) -> &Keyer {
        &self.keyer
    }

    /// Shares the relay's fleet-scoped budgets under the fleet's key
    /// `seed`, up to `shared_keys` keys at once; the relay's clock (the
    /// `now_ms` of [`Relay::inbound`]) reads 0 at Unix time
    /// `unix_origin_ms`. Allocates the shared set, once.
    pub fn enable_fleet(&mut self, seed: [u8; 16], shared_keys: usize, unix_origin_ms: u64) {
        self.budgets
            .enable_fleet(UdpFleet::enable(seed, shared_keys, unix_origin_ms));
    }

    /// The relay's side of the fleet, for the shard's sync timer.
    pub fn fleet_peer(&mut self) -> &mut dyn FleetPeer {
        &mut self.budgets
    }

    /// The relay's shared keys, those that found no room, and the
    /// datagrams decided under the local share while the engine was away.
    pub fn fleet_counters(&self) -> (u64, u64, u64) {
        let f = self.budgets.fleet();
        (
            f.windows.shared() as u64,
            f.windows.unshared,
            f.fallback_decisions,
        )
    }

    pub fn live_sessions(&self) -> u32 {
        self.sessions.live()
    }

    /// The session `r` names, while it lives.
    pub fn session(&self, r: SessionRef) -> Option<&crate::session::Session> {
        self.sessions.get(r)
    }

    /// Takes a reloaded policy. Sessions and budget counts stay; a table
    /// whose size or window changed is rebuilt (its sessions are ended: the
    /// returned handles are the ones the I/O layer must close).
    pub fn set_policy(&mut self, policy: Arc<UdpPolicy>) -> Vec<SessionRef> {
        let mut ended = Vec::new();
        if !self.budgets.fits(&policy) {
            self.budgets.renew(&policy);
        }
        if !self.sessions.fits(policy.session.ceiling) {
            ended = self.sessions.refs().collect();
            self.counters.sessions_closed += ended.len() as u64;
            self.sessions = SessionTable::new(policy.session.ceiling);
        }
        if !self.replay.fits(&policy) {
            self.replay = KeyWindows::new(&policy, &self.board);
        }
        let same_servers = policy.servers.len() == self.policy.servers.len()
            && policy
                .servers
                .iter()
                .zip(&self.policy.servers)
                .all(|(a, b)| a.key == b.key);
        if !same_servers {
            self.server_epoch = self.server_epoch.wrapping_add(1);
            self.weights = vec![0; policy.servers.len()];
            self.per_server = vec![0; policy.servers.len()];
        }
        self.policy = policy;
        ended
    }

    /// Decides a datagram from `client` at `now_ms` (shard clock) and
    /// `unix_ms` (wall clock, for envelope timestamps).
    pub fn inbound(
        &mut self,
        client: SocketAddr,
        datagram: &[u8],
        now_ms: u64,
        unix_ms: u64,
    ) -> Inbound {
        if self.policy.envelope.is_some() {
            return self.inbound_authenticated(client, datagram, now_ms, unix_ms);
        }
        // Borrowed, not cloned: an Arc's count shared by every shard would
        // be a contended write per datagram.
        let policy: &UdpPolicy = &self.policy;
        let admitted = match self
            .budgets
            .admit(policy, &self.keyer, client.ip(), datagram, now_ms)
        {
            Ok(a) => a,
            Err(reason) => {
                let class = gapura_gate::udp::budgets::classify(policy, datagram).class;
                return dropped(&mut self.counters, reason, class);
            }
        };
        let class = admitted.class;
        let key = session_key(&self.keyer, client);
        let (idx, new) = match self.sessions.spot(key, client, admitted.critical) {
            Spot::Found(idx) => (idx, false),
            Spot::Vacant(idx) => (idx, true),
            Spot::Refused => return dropped(&mut self.counters, UdpDrop::SessionCapacity, class),
        };
        if !new && !take_token(&mut self.sessions, policy, idx, now_ms) {
            return dropped(&mut self.counters, UdpDrop::SessionRate, class);
        }
        // Nothing a blind spoofer could not send proves the address: the
        // session stays under the amplification bound for its whole life.
        self.relay(
            client,
            key,
            idx,
            new,
            admitted,
            (0, datagram.len()),
            datagram.len(),
            false,
            now_ms,
        )
    }

    /// [`Relay::inbound`] for a relay with `auth`: the size bound and the
    /// source prefix's budget (all an invalid datagram pays), the
    /// envelope, the key's replay window (shared by every shard), then the
    /// key, global and operation budgets with the class read from the
    /// authenticated bytes, the session and its token bucket, and relay. A
    /// fresh envelope proves the session.
    fn inbound_authenticated(
        &mut self,
        client: SocketAddr,
        datagram: &[u8],
        now_ms: u64,
        unix_ms: u64,
    ) -> Inbound {
        let policy: &UdpPolicy = &self.policy;
        let Some(env) = &policy.envelope else {
            return dropped(&mut self.counters, UdpDrop::Malformed, 0);
        };
        let strip = env.strip;
        // What the datagram claims before it is checked: only its prefix's
        // ordinary share, unless it turns out to be an authenticated
        // critical class.
        let claimed = gapura_gate::udp::budgets::classify(policy, datagram);
        let src = client.ip();
        let len = datagram.len();
        let prefix_paid =
            match self
                .budgets
                .admit_prefix(policy, &self.keyer, src, len, false, now_ms)
            {
                Ok(()) => true,
                Err(UdpDrop::PrefixBudget | UdpDrop::TrackedKeys) if claimed.critical => false,
                Err(reason) => return dropped(&mut self.counters, reason, 0),
            };
        let opened = match envelope::open(env, datagram, unix_ms) {
            Ok(o) => o,
            Err(reason) => return dropped(&mut self.counters, reason, 0),
        };
        // The nonce space is the key's and the process's: an envelope is
        // taken once, from whichever source, on whichever shard, and a
        // replay spends nothing past its prefix's share (no key, global,
        // operation or session budget) and proves no session. A datagram
        // a later check drops has spent its nonce all the same.
        if !self.replay.take(opened.key_id, opened.nonce) {
            return dropped(&mut self.counters, UdpDrop::Replayed, 0);
        }
        // The class from bytes the tag covers.
        let admitted = gapura_gate::udp::budgets::classify(policy, &datagram[..opened.payload.1]);
        let class = admitted.class;
        if !prefix_paid {
            if let Err(reason) =
                self.budgets
                    .admit_prefix(policy, &self.keyer, src, len, admitted.critical, now_ms)
            {
                return dropped(&mut self.counters, reason, class);
            }
        }
        if let Err(reason) = self.budgets.admit_key(policy, opened.key_id, now_ms) {
            return dropped(&mut self.counters, reason, class);
        }
        if let Err(reason) = self.budgets.admit_authenticated(policy, admitted, now_ms) {
            return dropped(&mut self.counters, reason, class);
        }
        let key = session_key(&self.keyer, client);
        let (idx, new) = match self.sessions.spot(key, client, admitted.critical) {
            Spot::Found(idx) => (idx, false),
            Spot::Vacant(idx) => (idx, true),
            Spot::Refused => return dropped(&mut self.counters, UdpDrop::SessionCapacity, class),
        };
        if !new && !take_token(&mut self.sessions, policy, idx, now_ms) {
            return dropped(&mut self.counters, UdpDrop::SessionRate, class);
        }
        let payload = if strip {
            opened.payload
        } else {
            (0, datagram.len())
        };
        self.relay(client, key, idx, new, admitted, payload, len, true, now_ms)
    }

    /// Relays a datagram that passed every check: opens its session when
    /// `new` (on a server the balancer picks), counts its bytes for the
    /// amplification bound unless `proved` proves the session.
    #[allow(clippy::too_many_arguments)]
    fn relay(
        &mut self,
        client: SocketAddr,
        key: u64,
        idx: usize,
        new: bool,
        admitted: gapura_gate::udp::budgets::Admitted,
        payload: (usize, usize),
        len: usize,
        proved: bool,
        now_ms: u64,
    ) -> Inbound {
        let policy: &UdpPolicy = &self.policy;
        let class = admitted.class;
        let session = if new {
            let Some(server) = pick(policy, &mut self.weights, &self.per_server) else {
                return dropped(&mut self.counters, UdpDrop::Unrelayed, class);
            };
            let r = self.sessions.insert(idx, key, client, now_ms);
            let s = self.sessions.at_mut(idx);
            s.server = server as u16;
            s.server_epoch = self.server_epoch;
            s.critical = admitted.critical;
            if let Some(rate) = &policy.session.rate {
                // A new session's full bucket pays for its first datagram.
                let _ = s.bucket.try_take(rate, now_ms);
            }
            self.per_server[server] += 1;
            self.counters.sessions_opened += 1;
            r
        } else {
            SessionRef {
                idx,
                generation: self.sessions.at(idx).generation,
            }
        };
        let s = self.sessions.at_mut(idx);
        s.last_ms = s.last_ms.max(now_ms);
        if proved {
            s.validated = true;
        } else if !s.validated {
            s.rx_bytes = s.rx_bytes.saturating_add(len as u64);
        }
        let server = usize::from(s.server);
        self.counters.forwarded += 1;
        self.counters.forwarded_bytes += (payload.1 - payload.0) as u64;
        Inbound::Forward {
            session,
            new,
            server,
            payload,
            class,
        }
    }

    /// Decides a reply of `len` bytes from upstream to session `r`: the
    /// client's address, or why it is dropped (the session ended, or the
    /// amplification bound).
    pub fn outbound(
        &mut self,
        r: SessionRef,
        len: usize,
        now_ms: u64,
    ) -> Result<SocketAddr, UdpDrop> {
        let Some(s) = self.sessions.get_mut(r) else {
            self.counters.dropped[UdpDrop::Unrelayed.index()] += 1;
            return Err(UdpDrop::Unrelayed);
        };
        if !s.validated {
            let after = s.tx_bytes.saturating_add(len as u64);
            if after > s.rx_bytes.saturating_mul(AMPLIFICATION_FACTOR) {
                self.counters.dropped[UdpDrop::Amplification.index()] += 1;
                return Err(UdpDrop::Amplification);
            }
            s.tx_bytes = after;
        }
        s.last_ms = s.last_ms.max(now_ms);
        self.counters.replied += 1;
        self.counters.replied_bytes += len as u64;
        Ok(s.client)
    }

    /// Whether session `r` is still open at `now_ms`: `Some(ms left)` before
    /// its idle timeout, `None` once it has ended (now, by this call, or
    /// before).
    pub fn idle_check(&mut self, r: SessionRef, now_ms: u64) -> Option<u64> {
        let s = self.sessions.get(r)?;
        let idle = now_ms.saturating_sub(s.last_ms);
        let timeout = self.policy.session.idle_timeout_ms;
        if idle < timeout {
            return Some(timeout - idle);
        }
        self.close(r);
        None
    }

    /// Ends session `r` (idle, drained, or its socket failed); false when it
    /// had already ended.
    pub fn close(&mut self, r: SessionRef) -> bool {
        let Some(s) = self.sessions.get(r) else {
            return false;
        };
        if s.server_epoch == self.server_epoch {
            if let Some(n) = self.per_server.get_mut(usize::from(s.server)) {
                *n = n.saturating_sub(1);
            }
        }
        self.sessions.remove(r);
        self.counters.sessions_closed += 1;
        true
    }

    /// A datagram [`inbound`](Self::inbound) forwarded could not be sent
    /// (`close`: its new session has no socket and ends): counted as
    /// `unrelayed`, not forwarded.
    pub fn unrelayed(&mut self, session: SessionRef, payload: (usize, usize), close: bool) {
        if close {
            self.close(session);
        }
        self.counters.dropped[UdpDrop::Unrelayed.index()] += 1;
        self.counters.forwarded -= 1;
        self.counters.forwarded_bytes -= (payload.1 - payload.0) as u64;
    }

    /// Every live session (for the drain).
    pub fn sessions(&self) -> Vec<SessionRef> {
        self.sessions.refs().collect()
    }
}

/// Takes a token from session `idx`'s bucket; true when there was one (or
/// the relay has no session rate).
fn take_token(sessions: &mut SessionTable, policy: &UdpPolicy, idx: usize, now_ms: u64) -> bool {
    match &policy.session.rate {
        Some(rate) => sessions.at_mut(idx).bucket.try_take(rate, now_ms).allowed,
        None => true,
    }
}

fn dropped(counters: &mut Counters, reason: UdpDrop, class: u8) -> Inbound {
    counters.dropped[reason.index()] += 1;
    Inbound::Drop { reason, class }
}

/// A session's key: the client's address and port, keyed.
fn session_key(keyer: &Keyer, client: SocketAddr) -> u64 {
    let mut msg = [0u8; 18];
    match client.ip().to_canonical() {
        std::net::IpAddr::V4(v4) => msg[..4].copy_from_slice(&v4.octets()),
        std::net::IpAddr::V6(v6) => msg[..16].copy_from_slice(&v6.octets()),
    }
    msg[16..].copy_from_slice(&client.port().to_be_bytes());
    keyer.bytes(Domain::UdpSession, &msg)
}

/// The server a new session goes to, by `policy`'s balance: smooth
/// weighted round robin over `weights`, or the fewest live sessions
/// (`per_server`) relative to weight. O(servers).
fn pick(policy: &UdpPolicy, weights: &mut [i64], per_server: &[u32]) -> Option<usize> {
    let servers = &policy.servers;
    if servers.is_empty() {
        return None;
    }
    match policy.balance {
        Balance::RoundRobin => {
            let mut total = 0i64;
            let mut best = 0usize;
            for (i, s) in servers.iter().enumerate() {
                weights[i] += i64::from(s.weight);
                total += i64::from(s.weight);
                if weights[i] > weights[best] {
                    best = i;
                }
            }
            weights[best] -= total;
            Some(best)
        }
        Balance::LeastOutstanding => (0..servers.len()).min_by(|&a, &b| {
            let wa = u64::from(servers[a].weight.max(1));
            let wb = u64::from(servers[b].weight.max(1));
            (u64::from(per_server[a]) * wb).cmp(&(u64::from(per_server[b]) * wa))
        }),
    }
}
