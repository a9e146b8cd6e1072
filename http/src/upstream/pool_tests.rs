//! The pool's bounds, its queue's order and hand-offs, with numbers in
//! place of connections and futures polled by hand.

use super::*;
use std::task::Waker;

fn limits(max_connections: u32, max_idle: u32, max_queued: u32) -> PoolLimits {
    PoolLimits {
        max_connections,
        max_idle,
        max_queued,
        idle_timeout_ms: 1_000,
    }
}

fn poll<C>(w: &mut Wait<C>) -> Option<Got<C>> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(w).poll(&mut cx) {
        Poll::Ready(g) => Some(g),
        Poll::Pending => None,
    }
}

fn open<C>(c: Checkout<C>) -> Permit<C> {
    match c {
        Checkout::Open(mut p) => {
            p.connected();
            p
        }
        _ => panic!("expected a slot to open a connection"),
    }
}

fn wait<C>(c: Checkout<C>) -> Wait<C> {
    match c {
        Checkout::Wait(w) => w,
        _ => panic!("expected a place in the queue"),
    }
}

#[test]
fn connections_are_bounded_then_requests_queue_then_the_queue_refuses() {
    let p = ServerPool::<u32>::new(limits(2, 2, 1), 0);
    let l = limits(2, 2, 1);
    let a = open(p.checkout(l, 0));
    let b = open(p.checkout(l, 0));
    let mut w = wait(p.checkout(l, 0));
    assert!(matches!(p.checkout(l, 0), Checkout::Full));
    let c = p.counts();
    assert_eq!(
        (c.open, c.queued, c.opened, c.waited, c.queue_full),
        (2, 1, 2, 1, 1)
    );
    assert!(poll(&mut w).is_none());
    // A connection coming back goes to the waiter, not the idle pool.
    p.put(10, a, 5);
    match poll(&mut w) {
        Some(Got::Idle(10, permit)) => p.put(10, permit, 6),
        _ => panic!("the waiter gets the connection"),
    }
    assert_eq!(p.counts().idle, 1);
    drop(b);
    let c = p.counts();
    assert_eq!(
        (c.open, c.idle, c.closed[CloseReason::Error as usize]),
        (1, 1, 1)
    );
}

#[test]
fn a_closed_connection_gives_its_slot_to_the_first_waiter_in_order() {
    let l = limits(1, 1, 8);
    let p = ServerPool::<u32>::new(l, 0);
    let mut a = open(p.checkout(l, 0));
    let mut first = wait(p.checkout(l, 0));
    let mut second = wait(p.checkout(l, 0));
    a.closing(CloseReason::NotReusable);
    drop(a);
    assert!(poll(&mut second).is_none(), "the second waits on");
    let Some(Got::Open(mut slot)) = poll(&mut first) else {
        panic!("the first may open a connection")
    };
    assert_eq!(p.counts().open, 1, "the slot moved, it did not free");
    // Its opening failed: the slot passes on, nothing counted as closed.
    drop(slot);
    let Some(Got::Open(s)) = poll(&mut second) else {
        panic!("the second may open one now")
    };
    slot = s;
    slot.connected();
    let c = p.counts();
    assert_eq!(c.closed[CloseReason::NotReusable as usize], 1);
    assert_eq!(c.closed.iter().sum::<u64>(), 1);
    assert_eq!((c.opened, c.open, c.queued), (2, 1, 0));
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_and_passes_on_what_it_was_handed() {
    let l = limits(1, 4, 8);
    let p = ServerPool::<u32>::new(l, 0);
    let a = open(p.checkout(l, 0));
    let gone = wait(p.checkout(l, 0));
    let mut next = wait(p.checkout(l, 0));
    let quitter = wait(p.checkout(l, 0));
    // Timed out before anything came: counted, out of the queue.
    quitter.timed_out();
    assert_eq!((p.counts().queued, p.counts().queue_timeouts), (2, 1));
    // Handed the connection, then dropped before it looked (its client
    // went away): the next waiter gets it.
    p.put(7, a, 1);
    drop(gone);
    match poll(&mut next) {
        Some(Got::Idle(7, permit)) => p.put(7, permit, 2),
        _ => panic!("handed on"),
    }
    // With nobody waiting, a handed-back connection is pooled.
    assert_eq!((p.counts().idle, p.counts().queued), (1, 0));
}

#[test]
fn idle_connections_are_kept_up_to_their_bound_newest_first_until_they_expire() {
    let l = limits(4, 2, 0);
    let p = ServerPool::<u32>::new(l, 0);
    let permits: Vec<_> = (0..3).map(|_| open(p.checkout(l, 0))).collect();
    for (n, permit) in permits.into_iter().enumerate() {
        p.put(n as u32, permit, 100 * n as u64);
    }
    let c = p.counts();
    assert_eq!((c.idle, c.open), (2, 2));
    assert_eq!(c.closed[CloseReason::PoolFull as usize], 1);
    // Connection 0 expires at 1000; 1, used again at 900, at 1900.
    match p.checkout(l, 900) {
        Checkout::Idle(1, permit) => p.put(1, permit, 900),
        _ => panic!("the newest first"),
    }
    p.sweep(999);
    assert_eq!(p.counts().idle, 2, "nothing expired yet at 999");
    p.sweep(1_000);
    let c = p.counts();
    assert_eq!((c.idle, c.open), (1, 1));
    assert_eq!(c.closed[CloseReason::IdleTimeout as usize], 1);
    // Taking from the pool skips an expired one and closes it.
    assert!(matches!(p.checkout(l, 5_000), Checkout::Open(_)));
    assert_eq!(p.counts().closed[CloseReason::IdleTimeout as usize], 2);
}

#[test]
fn discarding_frees_slots_for_waiters() {
    let l = limits(2, 2, 4);
    let p = ServerPool::<u32>::new(l, 0);
    let a = open(p.checkout(l, 0));
    let b = open(p.checkout(l, 0));
    p.put(1, a, 0);
    // One idle, one busy; at the bound, so the next request takes the idle.
    let Checkout::Idle(1, a) = p.checkout(l, 0) else {
        panic!("the idle one")
    };
    let mut w = wait(p.checkout(l, 0));
    p.put(1, a, 0);
    let Some(Got::Idle(1, a)) = poll(&mut w) else {
        panic!("handed over")
    };
    p.put(1, a, 0);
    p.discard_idle();
    let c = p.counts();
    assert_eq!((c.open, c.idle), (1, 0));
    assert_eq!(c.closed[CloseReason::Discarded as usize], 1);
    drop(b);
    assert!(p.is_unused());
}

/// A deterministic generator for the sequence test.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[test]
fn any_sequence_keeps_the_bound_and_accounts_for_every_connection() {
    for seed in [1u64, 7, 42, 2026, 9_999] {
        let mut rng = Lcg(seed);
        let l = limits(5, 3, 6);
        let p = ServerPool::<u32>::new(l, 0);
        let mut busy: Vec<Permit<u32>> = Vec::new();
        let mut waits: Vec<Wait<u32>> = Vec::new();
        let mut now = 0u64;
        let mut full = 0u64;
        for _ in 0..5_000 {
            now += rng.next(50);
            match rng.next(7) {
                0 | 1 => match p.checkout(l, now) {
                    Checkout::Idle(_, permit) => busy.push(permit),
                    Checkout::Open(mut permit) => {
                        if rng.next(10) > 0 {
                            permit.connected();
                            busy.push(permit);
                        }
                    }
                    Checkout::Wait(w) => waits.push(w),
                    Checkout::Full => full += 1,
                },
                2 if !busy.is_empty() => {
                    let permit = busy.swap_remove(rng.next(busy.len() as u64) as usize);
                    p.put(0, permit, now);
                }
                3 if !busy.is_empty() => {
                    let mut permit = busy.swap_remove(rng.next(busy.len() as u64) as usize);
                    permit.closing(CloseReason::NotReusable);
                }
                4 if !waits.is_empty() => {
                    let w = waits.swap_remove(rng.next(waits.len() as u64) as usize);
                    w.timed_out();
                }
                5 => p.sweep(now),
                _ => {
                    let mut still = Vec::new();
                    for mut w in waits.drain(..) {
                        match poll(&mut w) {
                            Some(Got::Idle(_, permit)) => busy.push(permit),
                            Some(Got::Open(mut permit)) => {
                                permit.connected();
                                busy.push(permit);
                            }
                            None => still.push(w),
                        }
                    }
                    waits = still;
                }
            }
            let c = p.counts();
            assert!(c.open <= 5, "seed {seed}: {c:?}");
            assert!(c.queued <= 6, "seed {seed}: {c:?}");
            assert_eq!(c.queue_full, full, "seed {seed}");
            // Every slot is a busy permit, an idle connection, or handed
            // to a waiter that has not looked yet (out of the queue).
            let handed = waits
                .iter()
                .filter(|w| w.waiter.got.borrow().is_some())
                .count() as u64;
            assert_eq!(c.queued + handed, waits.len() as u64, "seed {seed}");
            assert_eq!(c.open, busy.len() as u64 + c.idle + handed, "seed {seed}");
            // A waiter is never left waiting while a connection idles.
            if c.queued > 0 {
                assert_eq!(c.idle, 0, "seed {seed}");
            }
            let closed: u64 = c.closed.iter().sum();
            assert!(c.opened >= closed, "seed {seed}");
        }
        drop(busy);
        drop(waits);
        p.discard_idle();
        let c = p.counts();
        assert_eq!(c.open, 0, "seed {seed}");
        assert_eq!(c.opened, c.closed.iter().sum::<u64>(), "seed {seed}");
    }
}
