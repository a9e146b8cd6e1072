//! Per-shard upstream state: each server's HTTP/1.1 connection pool
//! (`pool`: the bound on connections, the idle ones, the queue), balancer
//! state, requests in flight and passive health, keyed by server identity.
//!
//! Single-threaded (the shard's), so plain `RefCell`s; every borrow is
//! short and never held across an await. Capacities: each server's pool is
//! bounded by its group's settings (`pool`), and entries of servers no
//! longer used are removed by the sweeper (a pool's once it holds nothing
//! and its server has left the profile).
//!
//! Time is passed in (`now_ms`, the shard's monotonic milliseconds), and
//! the pooled connection is a type parameter, so the balancer, the idle
//! pool and passive health are tested without sockets or clocks.

use super::pool::{Checkout, PoolCounts, PoolLimits, ServerPool};
use super::HealthBoard;
use gapura_gate::hash::KeyHasher;
use gapura_gate::upstream::{Balance, UpstreamGroup, UpstreamServer};
use monoio::net::TcpStream;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
struct ServerState {
    outstanding: u32,
    failures: u32,
    down_until_ms: Option<u64>,
    current_weight: i64,
}

impl ServerState {
    fn is_empty(&self) -> bool {
        self.outstanding == 0
            && self.failures == 0
            && self.down_until_ms.is_none()
            && self.current_weight == 0
    }
}

/// A shard's upstream state; `C` is the pooled connection.
pub struct Upstreams<C = TcpStream> {
    servers: RefCell<KeyMap<ServerState>>,
    pools: RefCell<KeyMap<Rc<ServerPool<C>>>>,
    rotation: RefCell<KeyMap<u64>>,
}

impl<C> Default for Upstreams<C> {
    fn default() -> Self {
        Upstreams {
            servers: RefCell::default(),
            pools: RefCell::default(),
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
        states: &mut KeyMap<ServerState>,
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

    /// `server`'s pool on this shard, made on first use.
    fn pool(
        &self,
        group: &UpstreamGroup,
        server: &UpstreamServer,
        now_ms: u64,
    ) -> Rc<ServerPool<C>> {
        self.pools
            .borrow_mut()
            .entry(server.key)
            .or_insert_with(|| ServerPool::new(PoolLimits::of(group), now_ms))
            .clone()
    }

    /// A connection to `server` for one request: a pooled one, a slot to
    /// open one, a place in the server's queue, or `Full` (`pool`).
    pub fn checkout(
        &self,
        group: &UpstreamGroup,
        server: &UpstreamServer,
        now_ms: u64,
    ) -> Checkout<C> {
        self.pool(group, server, now_ms)
            .checkout(PoolLimits::of(group), now_ms)
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
        drop(states);
        // Pooled connections to a failing server are suspect.
        let pool = self.pools.borrow().get(&server.key).cloned();
        if let Some(p) = pool {
            p.discard_idle();
        }
        let mut states = self.servers.borrow_mut();
        let st = states.entry(server.key).or_default();
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

    /// Closes expired idle connections and forgets empty entries (a pool
    /// once it holds nothing and `live` says its server has left the
    /// profile: its counters go with it), and the least-outstanding
    /// rotation counters (they only spread ties, so starting them over
    /// costs nothing, and groups gone with a reload leave none behind).
    /// Called by the shard's sweeper once a second; O(servers + idle
    /// connections).
    pub fn sweep(&self, now_ms: u64, live: impl Fn(u64) -> bool) {
        self.rotation.borrow_mut().clear();
        self.servers.borrow_mut().retain(|_, st| {
            if matches!(st.down_until_ms, Some(t) if t <= now_ms) {
                st.down_until_ms = None;
            }
            !st.is_empty()
        });
        let pools: Vec<Rc<ServerPool<C>>> = self.pools.borrow().values().cloned().collect();
        for p in &pools {
            p.sweep(now_ms);
        }
        drop(pools);
        self.pools
            .borrow_mut()
            .retain(|key, p| live(*key) || !p.is_unused());
    }

    /// Idle connections held, for metrics.
    pub fn idle_connections(&self) -> usize {
        self.pools.borrow().values().map(|p| p.idle_len()).sum()
    }

    /// `server`'s pool figures on this shard (zero before its first use).
    pub fn pool_counts(&self, server: u64) -> PoolCounts {
        self.pools
            .borrow()
            .get(&server)
            .map(|p| p.counts())
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
