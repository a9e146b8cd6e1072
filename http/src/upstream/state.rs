//! Per-shard upstream state: idle connection pools, balancer state,
//! requests in flight and passive health, keyed by server identity.
//!
//! Single-threaded (the shard's), so plain `RefCell`s; every borrow is
//! short and never held across an await. Capacities: each server keeps at
//! most its group's `max_idle_per_server` idle connections, and entries of
//! servers no longer used are removed by the sweeper.

use super::HealthBoard;
use gapura_gate::hash::KeyHasher;
use gapura_gate::upstream::{Balance, UpstreamGroup, UpstreamServer};
use monoio::net::TcpStream;
use monoio::time::Instant;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::time::Duration;

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

struct Idle {
    stream: TcpStream,
    expires: Instant,
}

#[derive(Default)]
struct ServerState {
    idle: Vec<Idle>,
    outstanding: u32,
    failures: u32,
    down_until: Option<Instant>,
    current_weight: i64,
}

impl ServerState {
    fn is_empty(&self) -> bool {
        self.idle.is_empty()
            && self.outstanding == 0
            && self.failures == 0
            && self.down_until.is_none()
            && self.current_weight == 0
    }
}

/// A shard's upstream state.
#[derive(Default)]
pub struct Upstreams {
    servers: RefCell<KeyMap<ServerState>>,
    rotation: RefCell<KeyMap<u64>>,
}

/// The chosen server: its index in the group.
pub type Pick = usize;

impl Upstreams {
    fn available(
        &self,
        server: &UpstreamServer,
        board: &HealthBoard,
        now: Instant,
        states: &mut KeyMap<ServerState>,
    ) -> bool {
        if board.is_down(server.health_slot) {
            return false;
        }
        match states.get_mut(&server.key) {
            Some(st) => match st.down_until {
                Some(t) if t > now => false,
                Some(_) => {
                    st.down_until = None;
                    true
                }
                None => true,
            },
            None => true,
        }
    }

    /// Picks a server of `group` not in `tried` (a bit per index, first 64):
    /// an available one by the group's balance, else, when every untried
    /// server is out, the one whose cooldown ends first (a half-open probe:
    /// its first success brings it back). None when every server is tried.
    /// O(servers).
    pub fn pick(&self, group: &UpstreamGroup, tried: u64, board: &HealthBoard) -> Option<Pick> {
        self.pick_available(group, tried, board)
            .or_else(|| self.pick_out(group, tried, board))
    }

    /// When every untried server is out: the passively failed one whose
    /// cooldown ends first, else the first one active checks hold down.
    fn pick_out(&self, group: &UpstreamGroup, tried: u64, board: &HealthBoard) -> Option<Pick> {
        let states = self.servers.borrow();
        let untried = |i: usize| i >= 64 || tried & (1 << i) == 0;
        group
            .servers
            .iter()
            .enumerate()
            .filter(|(i, _)| untried(*i))
            .min_by_key(|(_, s)| {
                let until = states.get(&s.key).and_then(|st| st.down_until);
                (board.is_down(s.health_slot), until)
            })
            .map(|(i, _)| i)
    }

    fn pick_available(
        &self,
        group: &UpstreamGroup,
        tried: u64,
        board: &HealthBoard,
    ) -> Option<Pick> {
        let now = crate::clock::now();
        let mut states = self.servers.borrow_mut();
        let candidates = |i: usize| i >= 64 || tried & (1 << i) == 0;
        match group.balance {
            Balance::RoundRobin => {
                let mut total = 0i64;
                let mut best: Option<(usize, i64)> = None;
                for (i, s) in group.servers.iter().enumerate() {
                    if !candidates(i) || !self.available(s, board, now, &mut states) {
                        continue;
                    }
                    let st = states.entry(s.key).or_default();
                    st.current_weight += i64::from(s.weight);
                    total += i64::from(s.weight);
                    if best.is_none_or(|(_, w)| st.current_weight > w) {
                        best = Some((i, st.current_weight));
                    }
                }
                let (i, _) = best?;
                if let Some(st) = states.get_mut(&group.servers[i].key) {
                    st.current_weight -= total;
                }
                Some(i)
            }
            Balance::LeastOutstanding => {
                let n = group.servers.len();
                let key = group.servers.first().map(|s| s.key).unwrap_or(0) ^ 0x5eed;
                let start = {
                    let mut rot = self.rotation.borrow_mut();
                    let r = rot.entry(key).or_insert(0);
                    *r = r.wrapping_add(1);
                    (*r as usize) % n.max(1)
                };
                let mut best: Option<(usize, u64, u64)> = None;
                for k in 0..n {
                    let i = (start + k) % n;
                    let s = &group.servers[i];
                    if !candidates(i) || !self.available(s, board, now, &mut states) {
                        continue;
                    }
                    let out = u64::from(states.get(&s.key).map_or(0, |st| st.outstanding));
                    let w = u64::from(s.weight.max(1));
                    // out/w < best_out/best_w  <=>  out*best_w < best_out*w
                    if best.is_none_or(|(_, bo, bw)| out * bw < bo * w) {
                        best = Some((i, out, w));
                    }
                }
                best.map(|(i, _, _)| i)
            }
        }
    }

    /// An idle pooled connection to `server`, if one has not expired.
    pub fn take_idle(&self, server: &UpstreamServer) -> Option<TcpStream> {
        let mut states = self.servers.borrow_mut();
        let st = states.get_mut(&server.key)?;
        let now = crate::clock::now();
        while let Some(idle) = st.idle.pop() {
            if idle.expires > now {
                return Some(idle.stream);
            }
        }
        None
    }

    /// Returns a connection whose exchange completed cleanly.
    pub fn put_idle(&self, group: &UpstreamGroup, server: &UpstreamServer, stream: TcpStream) {
        if group.max_idle_per_server == 0 {
            return;
        }
        let mut states = self.servers.borrow_mut();
        let st = states.entry(server.key).or_default();
        if st.idle.len() < group.max_idle_per_server as usize {
            st.idle.push(Idle {
                stream,
                expires: crate::clock::now() + Duration::from_millis(group.idle_timeout_ms),
            });
        }
    }

    pub fn begin(&self, server: &UpstreamServer) {
        self.servers
            .borrow_mut()
            .entry(server.key)
            .or_default()
            .outstanding += 1;
    }

    pub fn end(&self, server: &UpstreamServer) {
        if let Some(st) = self.servers.borrow_mut().get_mut(&server.key) {
            st.outstanding = st.outstanding.saturating_sub(1);
        }
    }

    /// Passive health: a failed exchange. Returns true when this failure
    /// took the server out for its cooldown. A group's only server is never
    /// taken out (there is nothing else to send to).
    pub fn failure(&self, group: &UpstreamGroup, server: &UpstreamServer) -> bool {
        let mut states = self.servers.borrow_mut();
        let st = states.entry(server.key).or_default();
        st.failures += 1;
        // Pooled connections to a failing server are suspect.
        st.idle.clear();
        if group.fail_threshold > 0
            && group.servers.len() > 1
            && st.failures >= group.fail_threshold
        {
            st.failures = 0;
            st.down_until =
                Some(crate::clock::now() + Duration::from_millis(group.fail_cooldown_ms));
            return true;
        }
        false
    }

    /// A completed exchange: the server's failures are forgotten and, out
    /// for a cooldown, it is back at once.
    pub fn success(&self, server: &UpstreamServer) {
        if let Some(st) = self.servers.borrow_mut().get_mut(&server.key) {
            st.failures = 0;
            st.down_until = None;
        }
    }

    /// Closes expired idle connections and forgets empty entries. Called by
    /// the shard's sweeper; O(servers + idle connections).
    pub fn sweep(&self) {
        let now = crate::clock::now();
        let mut states = self.servers.borrow_mut();
        states.retain(|_, st| {
            st.idle.retain(|i| i.expires > now);
            if matches!(st.down_until, Some(t) if t <= now) {
                st.down_until = None;
            }
            !st.is_empty()
        });
    }

    /// Idle connections held, for metrics.
    pub fn idle_connections(&self) -> usize {
        self.servers.borrow().values().map(|s| s.idle.len()).sum()
    }
}
