//! The compiled, immutable form of a profile and the decision it gives.
//!
//! A [`Snapshot`] is built once per (re)load by the config crate, published by
//! the control thread and read by every shard without locks. It holds only
//! immutable data; mutable state (tables, pools, counters) lives in shards.
//! [`Snapshot::decide`] is the gate's entry: pure, O(host name), no allocation.

use crate::answer::Answer;
use crate::host::{HostAction, HostId, HostTable, Redirect};
use crate::limits::{LimitRefusal, RequestLimits};
use crate::pages::{ErrorPages, ErrorStatus};
use crate::upstream::{Route, UpstreamGroup};

/// Connection-level settings every shard applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    /// The whole request head must arrive within this time of its first byte
    /// (or of the previous response): slow trickles are cut here.
    pub header_timeout_ms: u64,
    /// A keep-alive connection may wait this long for its next request.
    pub idle_timeout_ms: u64,
    /// Longest gap between two reads of a request body.
    pub body_timeout_ms: u64,
    /// Longest time a response write may block.
    pub write_timeout_ms: u64,
    /// Requests served on one connection before it is closed (0: no limit).
    pub max_requests_per_connection: u64,
    /// Open connections one shard accepts; past it new ones are closed.
    pub max_connections_per_shard: u32,
    /// Answer for a Host no host claims and no default host takes (404 or 421).
    pub unknown_host: ErrorStatus,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            header_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            body_timeout_ms: 30_000,
            write_timeout_ms: 30_000,
            max_requests_per_connection: 0,
            max_connections_per_shard: 16_384,
            unknown_host: ErrorStatus::NotFound,
        }
    }
}

/// One host of the snapshot.
#[derive(Clone, Debug)]
pub struct HostEntry {
    /// The first name, for logs and explain.
    pub label: String,
    pub limits: RequestLimits,
    pub action: HostAction,
}

/// Everything a shard needs to answer, compiled.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Increases with every publish; 0 before the first.
    pub generation: u64,
    pub server: ServerSettings,
    pub hosts: HostTable,
    pub entries: Vec<HostEntry>,
    /// Limits for a request no host takes.
    pub default_limits: RequestLimits,
    pub pages: ErrorPages,
    /// Upstream groups, indexed by `Route::upstream`.
    pub upstreams: Vec<UpstreamGroup>,
}

/// The facts of a request head the gate decides on. Borrowed, no copies.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestFacts<'a> {
    pub host: Option<&'a [u8]>,
    /// Raw request target as sent.
    pub target: &'a [u8],
    /// Path and query (origin form; the path part of an absolute form).
    pub path: &'a [u8],
    pub header_count: usize,
    /// Names plus values, in bytes.
    pub header_bytes: usize,
    /// Declared body length, if any.
    pub content_length: Option<u64>,
}

/// What to do with a request.
#[derive(Clone, Copy, Debug)]
pub enum Verdict<'s> {
    /// Write this fixed answer.
    Respond(&'s Answer),
    /// Write this redirect with the request's target.
    Redirect(&'s Redirect),
    /// Refuse with a page.
    Refuse(ErrorStatus),
    /// Forward along this route to its group.
    Forward(&'s Route, &'s UpstreamGroup),
}

/// A decision and the body limit that applies while the body is read.
#[derive(Clone, Copy, Debug)]
pub struct Decision<'s> {
    pub verdict: Verdict<'s>,
    pub host: Option<HostId>,
    pub limits: RequestLimits,
}

impl Snapshot {
    /// Decides a request from its head. Pure, no allocation.
    /// `scratch` holds the canonical path when the raw one must be rewritten.
    pub fn decide<'s>(
        &'s self,
        facts: &RequestFacts<'_>,
        scratch: &mut crate::path::PathScratch,
    ) -> Decision<'s> {
        let host = self.hosts.lookup(facts.host);
        let (mut limits, action) = match host {
            Some(id) => {
                let e = &self.entries[id as usize];
                (e.limits, Some(&e.action))
            }
            None => (self.default_limits, None),
        };
        let mut route = None;
        if let Some(HostAction::Proxy(proxy)) = action {
            let Ok(canonical) = crate::path::canonical(facts.path, scratch) else {
                return Decision {
                    verdict: Verdict::Refuse(ErrorStatus::BadRequest),
                    host,
                    limits,
                };
            };
            route = proxy.route(canonical);
            if let Some(r) = route {
                limits.max_body_bytes = r.limits.max_body_bytes;
            }
        }
        let refuse = |s| Decision {
            verdict: Verdict::Refuse(s),
            host,
            limits,
        };
        if let Err(r) =
            limits.check_head(facts.target.len(), facts.header_count, facts.header_bytes)
        {
            return refuse(limit_status(r));
        }
        if let Some(len) = facts.content_length {
            if limits.check_declared_body(len).is_err() {
                return refuse(ErrorStatus::PayloadTooLarge);
            }
        }
        let verdict = match action {
            Some(HostAction::Respond(a)) => Verdict::Respond(a),
            Some(HostAction::Redirect(r)) => Verdict::Redirect(r),
            Some(HostAction::Proxy(_)) => match route {
                Some(r) => Verdict::Forward(r, &self.upstreams[r.upstream as usize]),
                None => Verdict::Refuse(ErrorStatus::NotFound),
            },
            None => Verdict::Refuse(self.server.unknown_host),
        };
        Decision {
            verdict,
            host,
            limits,
        }
    }
}

/// The status that answers a limit refusal.
pub fn limit_status(r: LimitRefusal) -> ErrorStatus {
    match r {
        LimitRefusal::UrlTooLong => ErrorStatus::UriTooLong,
        LimitRefusal::TooManyHeaders | LimitRefusal::HeadersTooLarge => {
            ErrorStatus::HeaderFieldsTooLarge
        }
        LimitRefusal::BodyTooLarge => ErrorStatus::PayloadTooLarge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide<'s>(s: &'s Snapshot, f: &RequestFacts<'_>) -> Decision<'s> {
        let mut scratch = Box::new([0u8; crate::path::MAX_PATH_BYTES]);
        s.decide(f, &mut scratch)
    }

    fn snapshot() -> Snapshot {
        let mut hosts = HostTable::default();
        hosts.insert("a.test", 0).unwrap();
        Snapshot {
            generation: 1,
            server: ServerSettings {
                unknown_host: ErrorStatus::MisdirectedRequest,
                ..ServerSettings::default()
            },
            hosts,
            entries: vec![HostEntry {
                label: "a.test".into(),
                limits: RequestLimits {
                    max_body_bytes: 10,
                    ..RequestLimits::default()
                },
                action: HostAction::Respond(Answer::new(200, &[], b"a")),
            }],
            default_limits: RequestLimits::default(),
            pages: ErrorPages::builtin(),
            upstreams: Vec::new(),
        }
    }

    #[test]
    fn known_host_gets_its_answer() {
        let s = snapshot();
        let d = decide(
            &s,
            &RequestFacts {
                host: Some(b"a.test"),
                target: b"/",
                ..Default::default()
            },
        );
        assert!(matches!(d.verdict, Verdict::Respond(a) if a.status == 200));
    }

    #[test]
    fn unknown_host_gets_the_configured_status() {
        let s = snapshot();
        let d = decide(
            &s,
            &RequestFacts {
                host: Some(b"b.test"),
                target: b"/",
                ..Default::default()
            },
        );
        assert!(matches!(
            d.verdict,
            Verdict::Refuse(ErrorStatus::MisdirectedRequest)
        ));
    }

    #[test]
    fn host_body_limit_refuses_a_declared_body() {
        let s = snapshot();
        let d = decide(
            &s,
            &RequestFacts {
                host: Some(b"a.test"),
                target: b"/",
                content_length: Some(11),
                ..Default::default()
            },
        );
        assert!(matches!(
            d.verdict,
            Verdict::Refuse(ErrorStatus::PayloadTooLarge)
        ));
    }

    #[test]
    fn head_limits_answer_414_and_431() {
        let s = snapshot();
        let long = vec![b'/'; 8193];
        let d = decide(
            &s,
            &RequestFacts {
                host: Some(b"a.test"),
                target: &long,
                ..Default::default()
            },
        );
        assert!(matches!(
            d.verdict,
            Verdict::Refuse(ErrorStatus::UriTooLong)
        ));
        let d = decide(
            &s,
            &RequestFacts {
                host: Some(b"a.test"),
                target: b"/",
                header_count: 101,
                ..Default::default()
            },
        );
        assert!(matches!(
            d.verdict,
            Verdict::Refuse(ErrorStatus::HeaderFieldsTooLarge)
        ));
    }
}
