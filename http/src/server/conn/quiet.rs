//! The quiet lane's answer, written where the head is parsed.
//!
//! A plaintext HTTP/1.1 keep-alive request without a body, to a quiet host
//! (every protection off, `gapura_gate::chain::quiet_host`) whose action is
//! a fixed answer, within the host's head limits, is answered by its
//! answer's bytes as they are: the head, the shard's Date line, the
//! keep-alive rest. That is what the whole path (`prepare`, the chain's
//! quiet decision, `Conn::answer_now`) writes and counts for it, without
//! building the request, the decision and the plan (a test holds the
//! bytes and the counters of both paths to each other). Anything else,
//! or a head with an access log to fill, a resumed head, a connection
//! that closes after this answer, an answer with a request-id slot or a
//! shared body, takes the whole path.

use super::{Conn, Step, WRITE_FLUSH_BYTES};
use crate::codec::head::{BodyFraming, Method, ParsedHead};
use crate::server::prepare::adopted_gate;
use crate::server::shard::Shard;
use crate::transport::Transport;
use gapura_gate::{Answer, HostId, Snapshot};

#[cfg(test)]
thread_local! {
    /// Set by a test to serve every head by the whole path, to compare the
    /// two (`inmemory::quiet`).
    pub(crate) static OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A quiet host's answer for the head at the front of `buf`: its host,
/// the answer and the keep-alive rest to write after its head and the
/// Date line. `None`: the head takes the whole path, nothing changed but
/// the gate state's adoption of `snap` (which the whole path makes too).
#[inline(always)]
pub(super) fn quiet_answer<'s, S: Transport>(
    conn: (&Shard, u64),
    snap: &'s Snapshot,
    head: &ParsedHead,
    buf: &[u8],
    gate_ms: &mut Option<u64>,
) -> Option<(HostId, &'s Answer, &'s [u8])> {
    #[cfg(test)]
    if OFF.with(std::cell::Cell::get) {
        return None;
    }
    let (shard, served) = conn;
    let server = &snap.server;
    // Over TLS the answer carries the host's HSTS line; with an access log
    // the record is filled by the whole path.
    if S::TLS
        || !shard.quiet_lane()
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
    let host = head.host.clone().map(|r| &buf[r]);
    let facts = (head.target.len(), head.header_count, head.header_bytes);
    let (id, answer) = {
        let (mut gate, _) = adopted_gate(shard, snap, gate_ms);
        snap.quiet_answer(&mut gate, host, facts)?
    };
    let rest = answer.keep_alive_rest()?;
    Some((id, answer, rest))
}

impl<S: Transport> Conn<S> {
    /// What the whole path counts for a quiet answer written at once (see
    /// `Conn::decide` and `Conn::answer_now`): the request, its start and
    /// host, the head consumed, the answer's status.
    #[inline(always)]
    pub(super) fn quiet_answered(&mut self, id: HostId, head_len: usize, status: u16) {
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

impl<S: Transport> Conn<S> {
    /// After an answer written at once with no leases: the next head, or
    /// the buffer out first when it is full or a shared body waits (as
    /// `Conn::answer_now` decides it).
    #[inline(always)]
    pub(super) fn answered_at_once(&self) -> Step {
        if self.io.out_len() >= WRITE_FLUSH_BYTES || self.io.has_shared() {
            Step::Flush(None)
        } else {
            Step::Answered
        }
    }
}
