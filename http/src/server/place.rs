//! A connection's place on its shard, from its accept to its end, owned by
//! one guard ([`Place`]): while the guard lives the shard counts the
//! connection open; when it drops, whatever path the connection took out
//! (an early refusal, a failed handshake, an HTTP/2 driver's end, a task
//! cancelled at shutdown), the connection's place in its client's
//! connection limit is released and the end is counted. No exit path
//! releases anything by hand, so a new early return cannot leak a place.

use super::end::End;
use super::shard::Shard;
use gapura_gate::chain::ConnectionToken;
use std::rc::Rc;

/// One accepted connection's place: counted open until dropped.
pub(super) struct Place {
    shard: Rc<Shard>,
    /// Its place in the client's connection limit, once admitted.
    token: Option<ConnectionToken>,
}

impl Place {
    /// Counts an accepted connection open.
    pub(super) fn open(shard: &Rc<Shard>) -> Place {
        shard.stats.connections_accepted.inc();
        shard.conns.open.set(shard.conns.open.get() + 1);
        Place {
            shard: shard.clone(),
            token: None,
        }
    }

    /// Holds the place the connection limit gave it (released on drop).
    pub(super) fn hold(&mut self, token: Option<ConnectionToken>) {
        debug_assert!(self.token.is_none());
        self.token = token;
    }

    /// Ends the connection as `end` says (an idle timeout or an error is
    /// counted as such); the place is released as it drops.
    pub(super) fn end(self, end: &End) {
        match end {
            End::Done | End::Upgrade(_) => {}
            End::Idle => self.shard.stats.idle_timeouts.inc(),
            End::Error(kind) => self.shard.stats.error(*kind),
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(t) = self.token.take() {
            self.shard.release_connection(t);
        }
        self.shard.conns.open.set(self.shard.conns.open.get() - 1);
        self.shard.stats.connections_closed.inc();
    }
}
