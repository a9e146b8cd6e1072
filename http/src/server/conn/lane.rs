//! The lanes' answers, written where the head is parsed.
//!
//! A plaintext HTTP/1.1 keep-alive request without a body, to a host on a
//! lane (`gapura_gate::chain::Snapshot::lane_answer`: every protection off,
//! or a fixed answer behind only the budgets and the rate limit) whose
//! answer is one copy, within the host's head limits, is answered by its
//! answer's bytes as they are: the head, the shard's Date line, the
//! keep-alive rest; its leases are held as the whole path holds them. That
//! is what the whole path (`prepare`, the chain, `Conn::answer_now`) writes
//! and counts for it, without building the request, the decision and the
//! plan (a test holds the bytes and the counters of both paths to each
//! other). A paying host's refusal is the chain's decision, carried out by
//! the whole path. Anything else, or a head with an access log to fill, a
//! resumed head, a connection that closes after this answer, takes the
//! whole path.

use super::Conn;
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::server::bounds::Lines;
use crate::server::prepare::adopted_gate;
use crate::server::shard::Shard;
use crate::transport::Transport;
use gapura_gate::chain::{Lane, LaneHead};
use gapura_gate::client::Peer;
use gapura_gate::{HostId, Snapshot};

#[cfg(test)]
thread_local! {
    /// Set by a test to serve every head by the whole path, to compare the
    /// two (`inmemory::lanes`).
    pub(crate) static OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The lane's decision for the head at the front of `buf` (its header
/// lines `lines`), of a connection of `shard` from `peer` that has served
/// `served` requests. `None`: the head takes the whole path, nothing
/// changed but the gate state's adoption of `snap` (which the whole path
/// makes too).
#[inline(always)]
pub(super) fn lane_answer<'s, S: Transport>(
    (shard, served, peer): (&Shard, u64, Peer),
    snap: &'s Snapshot,
    (head, buf, lines): (&ParsedHead, &[u8], &[httparse::Header<'_>]),
    gate_ms: &mut Option<u64>,
) -> Option<Lane<'s>> {
    #[cfg(test)]
    if OFF.with(std::cell::Cell::get) {
        return None;
    }
    let server = &snap.server;
    // Over TLS the answer carries the host's HSTS line; with an access log
    // the record is filled by the whole path.
    if S::TLS
        || !shard.lane_hint()
        || server.access_log.is_some()
        || head.framing != BodyFraming::None
        || head.method == Method::Head
        || head.keep_alive_10
        || head.close
        || (server.max_requests_per_connection != 0
            && served + 1 >= server.max_requests_per_connection)
        || shard.is_draining()
    {
        return None;
    }
    let lane = LaneHead {
        peer,
        host: head.host.clone().map(|r| &buf[r]),
        path: &buf[head.path.clone()],
        facts: (head.target.len(), head.header_count, head.header_bytes),
        headers: &Lines(lines),
    };
    let (mut gate, now_ms) = adopted_gate(shard, snap, gate_ms);
    let scratch = || std::cell::RefMut::map(shard.scratch.borrow_mut(), |b| &mut **b);
    snap.lane_answer(&mut gate, now_ms, scratch, lane)
}

impl<S: Transport> Conn<S> {
    /// What the whole path counts for a lane's answer written at once (see
    /// `Conn::decide` and `Conn::answer_now`): the request, its start and
    /// host, the head consumed, the answer's status.
    #[inline(always)]
    pub(super) fn lane_answered(&mut self, id: HostId, head_len: usize, status: u16) {
        self.shard.stats.requests.inc();
        self.served += 1;
        self.req_start = *self.woke_at.get_or_insert_with(crate::clock::precise_now);
        self.req_host = Some(id);
        self.set_busy(true);
        self.io.head_done();
        self.io.consume(head_len);
        self.shard.stats.response(status);
    }
}
