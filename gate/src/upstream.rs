//! Upstream groups and proxy routes, as compiled into a snapshot.
//!
//! A `proxy` host holds routes; each route names an upstream group. A group
//! lists servers (addresses fixed when the profile is compiled), how to
//! balance over them, its pool and timeout settings and its health checks.
//! Everything here is immutable; per-shard state (pools, balancer counters,
//! passive health) lives in the http crate's shard state, keyed by each
//! server's stable `key` so it survives a reload.

use crate::limits::RequestLimits;
use crate::pathmatch::{PathKind, PathMatcher, PatternError};
pub use crate::upstreamtls::{ClientCertificate, UpstreamRoots, UpstreamTls};
use std::net::SocketAddr;

/// Index of a group in its snapshot.
pub type UpstreamId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round robin.
    RoundRobin,
    /// Fewest requests in flight on this shard, relative to weight.
    LeastOutstanding,
}

/// An active health check: `GET path` every `interval_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveHealth {
    pub path: String,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    /// Expected status range (inclusive).
    pub expect_status: (u16, u16),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamServer {
    pub addr: SocketAddr,
    /// The host name the server was written with (`NAME:PORT`), which an
    /// upstream's TLS verifies when it names no `server_name`.
    pub name: Option<String>,
    pub weight: u32,
    /// Stable identity (group name + address), for per-shard state and the
    /// health board across reloads.
    pub key: u64,
    /// Slot on the process's health board; set by the runtime on publish.
    pub health_slot: u32,
}

/// How the upstream request's Host header is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostHeader {
    /// The client's Host.
    PassThrough,
    /// This value.
    Rewrite(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamGroup {
    pub name: String,
    pub servers: Vec<UpstreamServer>,
    pub balance: Balance,
    pub host_header: HostHeader,
    pub connect_timeout_ms: u64,
    pub response_header_timeout_ms: u64,
    pub read_timeout_ms: u64,
    /// Idle HTTP/1.1 connections kept per server on a shard (0: none are
    /// pooled); unset in the profile, as many as `max_connections_per_server`.
    pub max_idle_per_server: u32,
    pub idle_timeout_ms: u64,
    /// Most HTTP/1.1 connections a shard holds to one server at once
    /// (connecting, busy and idle together).
    pub max_connections_per_server: u32,
    /// Most requests a shard keeps waiting for a connection to one server
    /// when every connection is busy and no more may be opened (0: none
    /// wait, the request is answered 503 at once).
    pub max_queued_per_server: u32,
    /// Longest a request waits in that queue before it is answered 503.
    pub queue_timeout_ms: u64,
    /// Consecutive failures that take a server out on a shard (0: never).
    pub fail_threshold: u32,
    pub fail_cooldown_ms: u64,
    pub active_health: Option<ActiveHealth>,
    /// TLS to the group's servers (`tls`); `None`: plaintext.
    pub tls: Option<std::sync::Arc<UpstreamTls>>,
    /// The HTTP version spoken to the group's servers (`protocol`).
    pub protocol: UpstreamProtocol,
    /// Most streams open at once on one HTTP/2 connection (the server's
    /// own limit, when lower, holds too).
    pub h2_streams_per_connection: u32,
    /// Most HTTP/2 connections a shard keeps to one server.
    pub h2_connections_per_server: u32,
}

/// The HTTP version spoken to an upstream group's servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1 (the default).
    #[default]
    Http1,
    /// HTTP/2: over TLS by ALPN, without TLS by prior knowledge (h2c).
    H2,
    /// Over TLS only: what ALPN agrees, HTTP/2 preferred.
    Auto,
}

/// What the proxy does with `X-Request-Id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestId {
    /// Keep the client's, generate one when absent.
    Keep,
    /// Always generate a new one.
    Generate,
    /// Pass through whatever the client sent; add none.
    Off,
}

/// How a route matches the canonical path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteMatch {
    Exact(String),
    /// Segment-bounded prefix: `/a` takes `/a` and `/a/x`, not `/ab`.
    Prefix(String),
}

#[derive(Clone, Debug)]
pub struct Route {
    pub matcher: RouteMatch,
    pub upstream: UpstreamId,
    /// Host limits with this route's body limit laid over.
    pub limits: RequestLimits,
    pub websocket: bool,
    pub request_id: RequestId,
    /// The route's blocks, merged over the host's.
    pub policy: crate::policy::RequestPolicy,
}

/// A proxy host's routes. Precedence: an exact match beats any prefix; among
/// prefixes the longest wins; equal ones go by profile order.
#[derive(Clone, Debug, Default)]
pub struct ProxyHost {
    pub routes: Vec<Route>,
    matcher: PathMatcher<()>,
}

impl ProxyHost {
    /// Compiles the routes' patterns. Allocates (compile time only).
    pub fn new(routes: Vec<Route>) -> Result<ProxyHost, PatternError> {
        let mut matcher = PathMatcher::new();
        for r in &routes {
            match &r.matcher {
                RouteMatch::Exact(p) => matcher.insert(PathKind::Exact, p, ())?,
                RouteMatch::Prefix(p) => matcher.insert(PathKind::Prefix, p, ())?,
            };
        }
        Ok(ProxyHost { routes, matcher })
    }

    /// The route for a canonical path. O(segments · log routes), no allocation.
    #[inline]
    pub fn route(&self, canonical: &[u8]) -> Option<&Route> {
        self.matcher
            .best_route(canonical)
            .map(|(i, _)| &self.routes[i])
    }
}

/// Segment-bounded prefix match on canonical paths.
pub fn prefix_matches(prefix: &[u8], path: &[u8]) -> bool {
    let prefix = if prefix.len() > 1 {
        prefix.strip_suffix(b"/").unwrap_or(prefix)
    } else {
        prefix
    };
    if prefix == b"/" {
        return true;
    }
    path.starts_with(prefix) && (path.len() == prefix.len() || path[prefix.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(m: RouteMatch, upstream: UpstreamId) -> Route {
        Route {
            matcher: m,
            upstream,
            limits: RequestLimits::default(),
            websocket: false,
            request_id: RequestId::Keep,
            policy: crate::policy::RequestPolicy::default(),
        }
    }

    #[test]
    fn prefixes_stop_at_segment_boundaries() {
        assert!(prefix_matches(b"/admin", b"/admin"));
        assert!(prefix_matches(b"/admin", b"/admin/x"));
        assert!(prefix_matches(b"/admin/", b"/admin/x"));
        assert!(!prefix_matches(b"/admin", b"/administrator"));
        assert!(prefix_matches(b"/", b"/anything"));
    }

    #[test]
    fn exact_beats_prefix_and_longest_prefix_wins() {
        let host = ProxyHost::new(vec![
            route(RouteMatch::Prefix("/".into()), 0),
            route(RouteMatch::Prefix("/api".into()), 1),
            route(RouteMatch::Prefix("/api/v2".into()), 2),
            route(RouteMatch::Exact("/api/health".into()), 3),
            route(RouteMatch::Prefix("/api".into()), 4),
        ])
        .unwrap();
        let up = |p: &[u8]| host.route(p).map(|r| r.upstream);
        assert_eq!(up(b"/"), Some(0));
        assert_eq!(up(b"/apix"), Some(0));
        assert_eq!(up(b"/api/x"), Some(1));
        assert_eq!(up(b"/api/v2/x"), Some(2));
        assert_eq!(up(b"/api/health"), Some(3));
        let no_root = ProxyHost::new(vec![route(RouteMatch::Prefix("/api".into()), 1)]).unwrap();
        assert!(no_root.route(b"/other").is_none());
    }
}
