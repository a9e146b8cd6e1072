//! Throttled warning lines for refusals: at most one line per kind per
//! second on a shard, naming the kind, what refused, the host and the
//! client's source prefix as a keyed hash (never the address). No
//! allocation; nothing at all when throttled.

use super::shard::Shard;
use gapura_gate::chain::Block;
use std::net::IpAddr;

// The refusal kinds (`shard::WARN_KINDS`): the chain's steps, the
// WebSocket message limits, then HTTP/2 connections ended for abuse.
const WEBSOCKET: usize = Block::COUNT;
const H2_CALM: usize = Block::COUNT + 1;

impl Shard {
    /// The warning sink and the client's prefix hash, when kind `kind` has
    /// not warned yet this second (it is then marked as having warned).
    fn throttled(&self, kind: usize, client: IpAddr) -> Option<(fn(std::fmt::Arguments<'_>), u64)> {
        let warn = self.logs.warn?;
        let last = self.logs.warned.get(kind)?;
        let second = self.now_ms() / 1000 + 1;
        if last.get() == second {
            return None;
        }
        last.set(second);
        let prefix = self
            .gate
            .try_borrow()
            .map(|g| g.prefix_hash(client))
            .unwrap_or(0);
        Some((warn, prefix))
    }

    /// Warns that upstream `group`'s server `addr` gave no answer, and why:
    /// at most one line a second per upstream, server and reason on this
    /// shard. Allocates only when it writes.
    pub(crate) fn warn_upstream(
        &self,
        group: &str,
        addr: std::net::SocketAddr,
        why: gapura_gate::UpstreamWhy,
        name: Option<&str>,
    ) {
        let Some(warn) = self.logs.warn else {
            return;
        };
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(group, addr, why as u8), &mut h);
        let key = std::hash::Hasher::finish(&h);
        let second = self.now_ms() / 1000 + 1;
        {
            let mut seen = self.logs.upstream_warned.borrow_mut();
            if seen.get(&key) == Some(&second) {
                return;
            }
            if seen.len() >= super::shard::UPSTREAM_WARN_KEYS {
                seen.clear();
            }
            seen.insert(key, second);
        }
        let for_name = match (why, name) {
            (gapura_gate::UpstreamWhy::Certificate, Some(n)) => format!(" for name {n}"),
            _ => String::new(),
        };
        warn(format_args!(
            "upstream {group} server {addr}: {}{for_name} ({}; at most one line a second per upstream, server and reason)",
            why.words(),
            why.status().code()
        ));
    }

    /// Warns of a refusal by chain step `step`: what refused (the rule set,
    /// list, rate limit or budget level), the host and the status.
    pub(crate) fn warn_refusal(
        &self,
        step: Block,
        policy: Option<&str>,
        host: &str,
        status: u16,
        client: IpAddr,
    ) {
        let Some((warn, prefix)) = self.throttled(step as usize, client) else {
            return;
        };
        let none = (step == Block::Host && host.is_empty()).then_some("no host takes it");
        warn(format_args!(
            "refused: shard {} step {}{}{}{} status {} source {:016x} (at most one line per step a second)",
            self.id,
            step.name(),
            Part(" policy ", policy),
            Part(" host ", (!host.is_empty()).then_some(host)),
            Part(": ", none),
            status,
            prefix
        ));
    }

    /// Warns of WebSocket messages over a host's limits (`what`: dropped or
    /// closed).
    pub(crate) fn warn_websocket(&self, what: &str, host: &str, client: IpAddr) {
        let Some((warn, prefix)) = self.throttled(WEBSOCKET, client) else {
            return;
        };
        warn(format_args!(
            "refused: shard {} websocket messages {what} host {} source {:016x} (at most one line a second)",
            self.id,
            or_dash(host),
            prefix
        ));
    }
}

/// A part of a line written only when it is there (`label` then the
/// value), without allocating.
struct Part<'a>(&'static str, Option<&'a str>);

impl std::fmt::Display for Part<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(v) => write!(f, "{}{v}", self.0),
            None => Ok(()),
        }
    }
}

impl Shard {
    /// Warns of an HTTP/2 connection ended with GOAWAY `ENHANCE_YOUR_CALM`
    /// (`why`: `resets` or `control frames`) after `streams` streams.
    pub(crate) fn warn_h2_calm(&self, why: &str, streams: u64, client: IpAddr) {
        let Some((warn, prefix)) = self.throttled(H2_CALM, client) else {
            return;
        };
        warn(format_args!(
            "refused: shard {} http2 connection closed (enhance_your_calm: too many {why}) after {streams} streams source {:016x} (at most one line a second)",
            self.id, prefix
        ));
    }
}

impl Shard {
    /// Logs, once per generation, rate limits that found no bucket slot:
    /// they refuse every request (fail closed) until a slot frees up.
    #[cold]
    pub(crate) fn warn_rate_unbound(&self, unbound: u32, generation: u64) {
        if let Some(warn) = self.logs.warn {
            warn(format_args!(
                "shard {}: generation {generation}: {unbound} rate limit(s) found no bucket slot \
                 (quota.policy_slots is taken by limits a reload retired, until their grace \
                 ends): they refuse every request (429) until a slot frees up; raise \
                 quota.policy_slots",
                self.id
            ));
        }
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}
