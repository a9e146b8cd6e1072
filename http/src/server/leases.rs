//! A request's hold on its quota leases, from the chain's first block until
//! its answer has left the shard.
//!
//! [`Leases`] is the guard: dropped, it gives the ticket back through
//! [`Shard::release_ticket`], which releases at once or, when the gate state
//! is borrowed at that moment, queues the ticket for the shard's next
//! decision ([`Shard::gate_mut`] settles the queue first). A release is
//! never skipped. [`Held`] keeps the guards of answers written into the
//! connection's buffer but not yet sent (their tickets, given back
//! together): a local answer holds its leases until the flush that sends
//! it, not only until it is queued. A tunnel
//! holds the guard of its upgrade for its whole life.

use super::shard::Shard;
use gapura_gate::quota::QuotaTicket;
use std::rc::Rc;

/// Answers a connection holds leases for while their bytes wait in its
/// write buffer; past this many the buffer is flushed first.
pub(super) const HELD_ANSWERS: usize = 16;

/// Holds a request's quota leases; gives them back when dropped, however
/// the request ends (completion, error, client abort, a tunnel's close).
pub struct Leases {
    shard: Rc<Shard>,
    /// Taken only by [`Leases::into_ticket`].
    ticket: Option<QuotaTicket>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl Leases {
    pub(super) fn new(shard: Rc<Shard>, ticket: QuotaTicket) -> Leases {
        Leases {
            shard,
            ticket: Some(ticket),
        }
    }

    /// The ticket, unreleased: its leases pass to whoever takes it (a head
    /// decided again after its password check).
    pub(super) fn into_ticket(mut self) -> Option<QuotaTicket> {
        self.ticket.take()
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.shard.release_ticket(t);
        }
    }
}

/// The leases of answers queued in a connection's write buffer, at most
/// [`HELD_ANSWERS`]: their tickets, given back together when the answers
/// are sent (one borrow of the gate state for the lot), or when the
/// connection ends first. Its room is allocated the first time a lease is
/// held and kept: a connection that never holds one carries an empty
/// vector.
#[derive(Default)]
pub(super) struct Held {
    /// The shard the tickets go back to (kept with the first ticket).
    shard: Option<Rc<Shard>>,
    tickets: Vec<QuotaTicket>,
}

impl Held {
    /// Whether one more ticket fits (else flush, then [`Held::release_all`]).
    pub(super) fn is_full(&self) -> bool {
        self.tickets.len() == HELD_ANSWERS
    }

    /// Keeps `guard`'s leases until the next [`Held::release_all`]. The
    /// caller makes room first; a guard that finds none is released at once.
    pub(super) fn push(&mut self, mut guard: Leases) {
        if let Some(ticket) = guard.ticket.take() {
            self.push_ticket(&guard.shard, ticket);
        }
    }

    /// [`Held::push`] for a ticket not in a guard yet.
    #[inline(always)]
    pub(super) fn push_ticket(&mut self, shard: &Rc<Shard>, ticket: QuotaTicket) {
        if self.tickets.len() == HELD_ANSWERS {
            shard.release_ticket(ticket);
            return;
        }
        if self.tickets.capacity() == 0 {
            self.tickets.reserve_exact(HELD_ANSWERS);
            self.shard = Some(shard.clone());
        }
        self.tickets.push(ticket);
    }

    /// The answers were sent: every lease is given back.
    pub(super) fn release_all(&mut self) {
        if self.tickets.is_empty() {
            return;
        }
        if let Some(shard) = &self.shard {
            shard.release_tickets(&mut self.tickets);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::shard::SnapshotFeed;
    use crate::server::stats::ShardStats;
    use crate::upstream::HealthBoard;
    use gapura_gate::chain::GateState;
    use gapura_gate::quota::{
        Budget, Class, LeaseLimits, QuotaDecision, QuotaLimits, QuotaRequest,
    };
    use gapura_gate::{ErrorPages, HostTable, RequestLimits, ServerSettings, Snapshot};
    use std::sync::Arc;

    struct NoFeed;
    impl SnapshotFeed for NoFeed {
        fn newer_than(&self, _: u64) -> Option<Arc<Snapshot>> {
            None
        }
    }

    fn shard() -> Rc<Shard> {
        let snap = Snapshot {
            generation: 1,
            server: ServerSettings::default(),
            hosts: HostTable::default(),
            entries: Vec::new(),
            default_limits: RequestLimits::default(),
            pages: ErrorPages::builtin(),
            upstreams: Vec::new(),
            gate: Default::default(),
            udp: Vec::new(),
            tls: None,
            acme: Default::default(),
        };
        Rc::new(Shard::new(
            0,
            Box::new(NoFeed),
            Arc::new(snap),
            Arc::new(ShardStats::default()),
            Arc::new(HealthBoard::default()),
            1,
            GateState::small(),
        ))
    }

    fn limits() -> QuotaLimits {
        QuotaLimits {
            leases: LeaseLimits {
                global: Budget::new(32, 32).ok(),
                per_key: Budget::new(32, 32).ok(),
            },
            ..Default::default()
        }
    }

    fn take(shard: &Rc<Shard>) -> Leases {
        let req = QuotaRequest {
            class: Class::Normal,
            source: 9,
            operation: None,
            identity: None,
            rate: &[],
        };
        match shard.gate_mut().quota.admit(&limits(), &req, 0) {
            QuotaDecision::Admit(t) => Leases::new(shard.clone(), t),
            QuotaDecision::Refuse(r) => panic!("refused: {r:?}"),
        }
    }

    fn active(shard: &Shard) -> u32 {
        shard.gate.borrow().quota.leases().active()
    }

    #[test]
    fn the_guard_releases_when_dropped() {
        let shard = shard();
        let g = take(&shard);
        assert_eq!(active(&shard), 1);
        drop(g);
        assert_eq!(active(&shard), 0);
        assert_eq!(shard.gate.borrow().quota.counters.released, 1);
    }

    #[test]
    fn a_guard_dropped_while_the_gate_is_borrowed_releases_at_the_next_decision() {
        let shard = shard();
        let g = take(&shard);
        {
            let _busy = shard.gate.borrow_mut();
            drop(g);
        }
        // Not lost: queued, and carried out when the gate is next taken.
        assert_eq!(shard.deferred_releases.borrow().len(), 1);
        drop(shard.gate_mut());
        assert_eq!(active(&shard), 0);
        assert!(shard.deferred_releases.borrow().is_empty());
    }

    #[test]
    fn held_answers_keep_their_leases_until_released_together() {
        let shard = shard();
        let mut held = Held::default();
        for _ in 0..3 {
            held.push(take(&shard));
        }
        assert_eq!(active(&shard), 3);
        assert!(!held.is_full());
        held.release_all();
        assert_eq!(active(&shard), 0);
    }

    #[test]
    fn held_tickets_go_back_when_the_connection_ends_or_the_gate_is_busy() {
        let shard = shard();
        // Full: one more is given back at once.
        let mut held = Held::default();
        for _ in 0..HELD_ANSWERS + 1 {
            held.push(take(&shard));
        }
        assert!(held.is_full());
        assert_eq!(active(&shard), HELD_ANSWERS as u32);
        // A connection dropped with answers unsent gives their leases back.
        drop(held);
        assert_eq!(active(&shard), 0);
        // Released while the gate state is borrowed: queued, never lost.
        let mut held = Held::default();
        let t = take(&shard).into_ticket().unwrap();
        held.push_ticket(&shard, t);
        held.push(take(&shard));
        {
            let _busy = shard.gate.borrow_mut();
            held.release_all();
        }
        assert_eq!(shard.deferred_releases.borrow().len(), 2);
        drop(shard.gate_mut());
        assert_eq!(active(&shard), 0);
        assert_eq!(
            shard.gate.borrow().quota.counters.released,
            HELD_ANSWERS as u64 + 3
        );
    }

    #[test]
    fn errors_and_unwinding_give_the_leases_back() {
        let shard = shard();
        fn failing(g: Leases) -> Result<(), &'static str> {
            let _g = g;
            Err("upstream reset")?;
            Ok(())
        }
        assert!(failing(take(&shard)).is_err());
        assert_eq!(active(&shard), 0);
        let g = take(&shard);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _g = g;
            panic!("handler bug");
        }));
        assert!(r.is_err());
        assert_eq!(active(&shard), 0);
        // A ticket passed on is not released by the guard it left.
        let t = take(&shard).into_ticket().unwrap();
        assert_eq!(active(&shard), 1);
        shard.release_ticket(t);
        assert_eq!(active(&shard), 0);
    }

    #[test]
    fn a_dropped_request_future_gives_its_leases_back() {
        let shard = shard();
        let g = take(&shard);
        let request = async move {
            let _g = g;
            std::future::pending::<()>().await;
        };
        assert_eq!(active(&shard), 1);
        drop(request);
        assert_eq!(active(&shard), 0);
    }
}
