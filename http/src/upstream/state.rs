//! Per-shard upstream state: idle connection pools, balancer state,
//! requests in flight and passive health, keyed by server identity.
//!
//! Single-threaded (the shard's), so plain `RefCell`s; every borrow is
//! short and never held across an await. Capacities: each server keeps at
//! most its group's `max_idle_per_server` idle connections, and entries of
//! servers no longer used are removed by the sweeper.
//!
//! Time is passed in (`now_ms`, the shard's monotonic milliseconds), and
//! the pooled connection is a type parameter, so the balancer, the idle
//! pool and passive health are tested without sockets or clocks.

use super::HealthBoard;
use gapura_gate::hash::KeyHasher;
use gapura_gate::upstream::{Balance, UpstreamGroup, UpstreamServer};
use monoio::net::TcpStream;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

struct Idle<C> {
    conn: C,
    expires_ms: u64,
}

struct ServerState<C> {
    idle: Vec<Idle<C>>,
    outstanding: u32,
    failures: u32,
    down_until_ms: Option<u64>,
    current_weight: i64,
}

impl<C> Default for ServerState<C> {
    fn default() -> Self {
        ServerState {
            idle: Vec::new(),
            outstanding: 0,
            failures: 0,
            down_until_ms: None,
            current_weight: 0,
        }
    }
}

impl<C> ServerState<C> {
    fn is_empty(&self) -> bool {
        self.idle.is_empty()
            && self.outstanding == 0
            && self.failures == 0
            && self.down_until_ms.is_none()
            && self.current_weight == 0
    }
}

/// A shard's upstream state; `C` is the pooled connection.
pub struct Upstreams<C = TcpStream> {
    servers: RefCell<KeyMap<ServerState<C>>>,
    rotation: RefCell<KeyMap<u64>>,
}

impl<C> Default for Upstreams<C> {
    fn default() -> Self {
        Upstreams {
            servers: RefCell::default(),
            rotation: RefCell::default(),
        }
    }
}

/// The chosen server: its index in the group.
pub type Pick = usize;

impl<C> Upstreams<C> {
    fn available(
        &self,
        server: &UpstreamServer,
        board: &HealthBoard,
        now_ms: u64,
        states: &mut KeyMap<ServerState<C>>,
    ) -> bool {
        if board.is_down(server.health_slot) {
            return false;
        }
        match states.get_mut(&server.key) {
            Some(st) => match st.down_until_ms {
                Some(t) if t > now_ms => false,
                Some(_) => {
                    st.down_until_ms = None;
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
    pub fn pick(
        &self,
        group: &UpstreamGroup,
        tried: u64,
        board: &HealthBoard,
        now_ms: u64,
    ) -> Option<Pick> {
        self.pick_available(group, tried, board, now_ms)
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
                let until = states.get(&s.key).and_then(|st| st.down_until_ms);
                (board.is_down(s.health_slot), until)
            })
            .map(|(i, _)| i)
    }

    fn pick_available(
        &self,
        group: &UpstreamGroup,
        tried: u64,
        board: &HealthBoard,
        now: u64,
    ) -> Option<Pick> {
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

    /// An idle pooled connection to `server`, if one has not expired: the
    /// most recently returned first (its socket is the warmest).
    pub fn take_idle(&self, server: &UpstreamServer, now_ms: u64) -> Option<C> {
        let mut states = self.servers.borrow_mut();
        let st = states.get_mut(&server.key)?;
        while let Some(idle) = st.idle.pop() {
            if idle.expires_ms > now_ms {
                return Some(idle.conn);
            }
        }
        None
    }

    /// Returns a connection whose exchange completed cleanly.
    /// At most `max_idle_per_server`; past it the connection is dropped.
    pub fn put_idle(&self, group: &UpstreamGroup, server: &UpstreamServer, conn: C, now_ms: u64) {
        if group.max_idle_per_server == 0 {
            return;
        }
        let mut states = self.servers.borrow_mut();
        let st = states.entry(server.key).or_default();
        if st.idle.len() < group.max_idle_per_server as usize {
            st.idle.push(Idle {
                conn,
                expires_ms: now_ms.saturating_add(group.idle_timeout_ms),
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
    pub fn failure(&self, group: &UpstreamGroup, server: &UpstreamServer, now_ms: u64) -> bool {
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
            st.down_until_ms = Some(now_ms.saturating_add(group.fail_cooldown_ms));
            return true;
        }
        false
    }

    /// A completed exchange: the server's failures are forgotten and, out
    /// for a cooldown, it is back at once.
    pub fn success(&self, server: &UpstreamServer) {
        if let Some(st) = self.servers.borrow_mut().get_mut(&server.key) {
            st.failures = 0;
            st.down_until_ms = None;
        }
    }

    /// Closes expired idle connections and forgets empty entries, and the
    /// least-outstanding rotation counters (they only spread ties, so
    /// starting them over costs nothing, and groups gone with a reload
    /// leave none behind). Called by the shard's sweeper once a second;
    /// O(servers + idle connections).
    pub fn sweep(&self, now_ms: u64) {
        self.rotation.borrow_mut().clear();
        let mut states = self.servers.borrow_mut();
        states.retain(|_, st| {
            st.idle.retain(|i| i.expires_ms > now_ms);
            if matches!(st.down_until_ms, Some(t) if t <= now_ms) {
                st.down_until_ms = None;
            }
            !st.is_empty()
        });
    }

    /// Idle connections held, for metrics.
    pub fn idle_connections(&self) -> usize {
        self.servers.borrow().values().map(|s| s.idle.len()).sum()
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
