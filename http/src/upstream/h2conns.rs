//! A shard's HTTP/2 connections to its upstream servers: for each server,
//! at most its group's `h2_connections_per_server` connections, each with
//! at most `h2_streams_per_connection` requests in flight (and no more
//! than the server's own `SETTINGS_MAX_CONCURRENT_STREAMS`).
//!
//! A request takes a stream on the least busy live connection; when every
//! connection is full and no more may be opened, it waits (bounded by its
//! caller's deadline) for a stream to end or a connection to open. A
//! connection the server closed or sent GOAWAY on is left out from then
//! on (its streams in flight finish on it) and a new one is opened for the
//! next request; one idle for the group's `idle_timeout_ms` is dropped by
//! the sweeper, which ends it cleanly.
//!
//! Single-threaded (the shard's): `RefCell`s and `Cell`s, no borrow held
//! across an await.

use crate::transport::h2client::{H2Live, StreamSlot, Waiters};
use bytes::Bytes;
use gapura_gate::hash::KeyHasher;
use gapura_gate::upstream::{UpstreamGroup, UpstreamProtocol, UpstreamTls};
use h2::client::SendRequest;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::sync::Arc;

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// One HTTP/2 connection to a server.
#[derive(Clone)]
pub struct H2Conn {
    pub send: SendRequest<Bytes>,
    pub live: Rc<H2Live>,
}

/// A server's connections.
#[derive(Default)]
struct ServerConns {
    conns: Vec<H2Conn>,
    /// Connections being opened.
    opening: u32,
    /// The server agreed to HTTP/1.1 only (ALPN, `protocol = "auto"`).
    http1: bool,
    waiters: Rc<Waiters>,
    /// The group's `idle_timeout_ms`, as last seen.
    idle_ms: u64,
    /// The group's TLS settings the connections were made with.
    tls: Option<Arc<UpstreamTls>>,
}

/// What a request gets from [`H2Conns::take`].
pub enum Take {
    /// A stream on this connection.
    Stream(H2Conn, StreamSlot),
    /// Open a connection (counted as opening until [`H2Conns::opened`]
    /// or [`H2Conns::failed`]).
    Open,
    /// Every connection is full: wait with [`H2Conns::wait`], then take
    /// again.
    Wait,
    /// The server speaks HTTP/1.1 only (`auto`).
    Http1,
}

/// A shard's HTTP/2 connections, by server key.
#[derive(Default)]
pub struct H2Conns {
    servers: RefCell<KeyMap<ServerConns>>,
}

impl H2Conns {
    /// A stream on `server`'s least busy live connection, or what to do
    /// instead.
    pub fn take(&self, group: &UpstreamGroup, server: u64) -> Take {
        let mut servers = self.servers.borrow_mut();
        let s = servers.entry(server).or_default();
        s.conns.retain(|c| !c.live.is_closed());
        s.idle_ms = group.idle_timeout_ms;
        // A reload that changed the group's TLS: new requests go on new
        // connections (the old ones end with their last stream), and an
        // `auto` server's protocol is learned again.
        let same = match (&s.tls, &group.tls) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        if !same
            || s.tls
                .as_ref()
                .zip(group.tls.as_ref())
                .is_some_and(|(a, b)| !Arc::ptr_eq(a, b))
        {
            if !same {
                s.conns.clear();
                s.http1 = false;
            }
            s.tls = group.tls.clone();
        }
        if s.http1 && group.protocol == UpstreamProtocol::Auto {
            return Take::Http1;
        }
        let best = s
            .conns
            .iter()
            .filter(|c| {
                let limit = (group.h2_streams_per_connection as usize)
                    .min(c.send.current_max_send_streams());
                (c.live.streams() as usize) < limit
            })
            .min_by_key(|c| c.live.streams());
        if let Some(c) = best {
            return Take::Stream(c.clone(), c.live.take_stream());
        }
        if s.conns.len() + (s.opening as usize) < group.h2_connections_per_server as usize {
            s.opening += 1;
            return Take::Open;
        }
        Take::Wait
    }

    /// Waits until a stream of `server` ends or a connection to it opens
    /// or ends (then [`H2Conns::take`] again).
    pub async fn wait(&self, server: u64) {
        let waiters = match self.servers.borrow().get(&server) {
            Some(s) => s.waiters.clone(),
            None => return,
        };
        waiters.wait().await
    }

    /// A connection opened by a request that was told [`Take::Open`]:
    /// the pool keeps it and gives the request its first stream.
    pub fn opened(
        &self,
        server: u64,
        send: SendRequest<Bytes>,
        live: Rc<H2Live>,
    ) -> (H2Conn, StreamSlot) {
        let mut servers = self.servers.borrow_mut();
        let s = servers.entry(server).or_default();
        s.opening = s.opening.saturating_sub(1);
        let conn = H2Conn { send, live };
        let slot = conn.live.take_stream();
        s.conns.push(conn.clone());
        s.waiters.wake_all();
        (conn, slot)
    }

    /// An opening failed (or found HTTP/1.1 only, `http1`).
    pub fn failed(&self, server: u64, http1: bool) {
        let mut servers = self.servers.borrow_mut();
        let s = servers.entry(server).or_default();
        s.opening = s.opening.saturating_sub(1);
        s.http1 |= http1;
        s.waiters.wake_all();
    }

    /// The shared waiters a new connection's [`H2Live`] wakes.
    pub fn live_for(&self, server: u64) -> Rc<H2Live> {
        let mut servers = self.servers.borrow_mut();
        let s = servers.entry(server).or_default();
        H2Live::new(s.waiters.clone())
    }

    /// Drops connections that ended, and those without a stream for their
    /// group's `idle_timeout_ms` (their last handle gone, h2 ends them
    /// cleanly); forgets a server with none left and nobody waiting or
    /// opening.
    pub fn sweep(&self, now_ms: u64) {
        self.servers.borrow_mut().retain(|_, s| {
            let idle_ms = s.idle_ms;
            s.conns
                .retain(|c| !c.live.is_closed() && !c.live.idle_for(now_ms, idle_ms));
            !s.conns.is_empty() || s.opening > 0 || s.waiters.any()
        });
    }

    /// Live connections, for the metrics.
    pub fn connections(&self) -> usize {
        self.servers
            .borrow()
            .values()
            .map(|s| s.conns.iter().filter(|c| !c.live.is_closed()).count())
            .sum()
    }
}
