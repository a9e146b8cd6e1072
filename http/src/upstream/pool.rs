//! One server's HTTP/1.1 connections on a shard: how many exist, the idle
//! ones, and the requests waiting for one.
//!
//! Guarantees, with the group's settings as last seen:
//! - at most `max_connections_per_server` connections exist at once
//!   (connecting, busy and idle together): each is held by a [`Permit`],
//!   and a permit is only made while a slot is free;
//! - a request that finds every connection busy and no slot free waits in
//!   a FIFO queue of at most `max_queued_per_server` requests; past it,
//!   [`Checkout::Full`];
//! - a connection that comes back is handed to the first waiter before it
//!   is pooled, and a slot that frees (a connection closed) lets the first
//!   waiter open one: a waiter is never passed over by a newer request;
//! - an idle connection is kept until it has been idle for
//!   `idle_timeout_ms`, at most `max_idle_per_server` of them (past it the
//!   one coming back is closed, counted as `pool_full`).
//!
//! A waiter that stops waiting (its timeout, its client gone) leaves the
//! queue at once, and whatever it had been handed goes to the next one.
//! Every close is counted by reason. Single-threaded (the shard's): `Cell`s
//! and `RefCell`s, no borrow held across an await or across a drop that
//! could reach back here. Time is passed in.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Why a connection left the pool's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Idle for the group's `idle_timeout_ms`.
    IdleTimeout = 0,
    /// Came back while `max_idle_per_server` idle ones were pooled.
    PoolFull,
    /// Its exchange left it unusable: the server's `Connection: close` or
    /// an HTTP/1.0 answer, a body not read to its end, a client gone.
    NotReusable,
    /// Its exchange failed on it: a reset, a timeout, a malformed answer.
    Error,
    /// Pooled connections thrown away: the server failed, or a reload
    /// turned its TLS on or off.
    Discarded,
    /// Handed to a tunnel after `101 Switching Protocols`.
    Upgrade,
}

impl CloseReason {
    pub const COUNT: usize = 6;
    pub const ALL: [CloseReason; Self::COUNT] = [
        CloseReason::IdleTimeout,
        CloseReason::PoolFull,
        CloseReason::NotReusable,
        CloseReason::Error,
        CloseReason::Discarded,
        CloseReason::Upgrade,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::PoolFull => "pool_full",
            CloseReason::NotReusable => "not_reusable",
            CloseReason::Error => "error",
            CloseReason::Discarded => "discarded",
            CloseReason::Upgrade => "upgrade",
        }
    }
}

/// A server's counts on one shard, for the metrics and `explain --live`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Connections held now: connecting, busy and idle.
    pub open: u64,
    /// Of those, idle in the pool.
    pub idle: u64,
    /// Requests waiting for a connection now.
    pub queued: u64,
    /// Connections made (the TCP connect, and TLS where asked, completed).
    pub opened: u64,
    /// Connections closed, by [`CloseReason`].
    pub closed: [u64; CloseReason::COUNT],
    /// Requests that waited in the queue (whatever came of it).
    pub waited: u64,
    /// Requests answered 503 because they waited past `queue_timeout_ms`.
    pub queue_timeouts: u64,
    /// Requests answered 503 (or sent to another server) because the
    /// queue was full.
    pub queue_full: u64,
}

impl PoolCounts {
    /// Adds `o`'s figures to these.
    pub fn add(&mut self, o: &PoolCounts) {
        self.open += o.open;
        self.idle += o.idle;
        self.queued += o.queued;
        self.opened += o.opened;
        for (t, x) in self.closed.iter_mut().zip(o.closed) {
            *t += x;
        }
        self.waited += o.waited;
        self.queue_timeouts += o.queue_timeouts;
        self.queue_full += o.queue_full;
    }
}

/// The group's settings a pool follows, as the last request saw them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    pub max_connections: u32,
    pub max_idle: u32,
    pub max_queued: u32,
    pub idle_timeout_ms: u64,
}

impl PoolLimits {
    pub fn of(g: &gapura_gate::upstream::UpstreamGroup) -> PoolLimits {
        PoolLimits {
            max_connections: g.max_connections_per_server.max(1),
            max_idle: g.max_idle_per_server,
            max_queued: g.max_queued_per_server,
            idle_timeout_ms: g.idle_timeout_ms,
        }
    }
}

struct Idle<C> {
    conn: C,
    expires_ms: u64,
}

/// What a waiter was handed.
enum Handoff<C> {
    /// A connection that came back (still counted as open).
    Conn(C),
    /// A slot freed and reserved for it: open a connection.
    Open,
}

struct Waiter<C> {
    got: RefCell<Option<Handoff<C>>>,
    waker: RefCell<Option<Waker>>,
}

impl<C> Waiter<C> {
    /// Hands `h` over (the waiter is out of the queue) and wakes it.
    fn hand(&self, h: Handoff<C>) {
        *self.got.borrow_mut() = Some(h);
        let k = self.waker.borrow_mut().take();
        if let Some(k) = k {
            k.wake();
        }
    }
}

/// One server's connections on a shard.
pub struct ServerPool<C> {
    idle: RefCell<Vec<Idle<C>>>,
    queue: RefCell<VecDeque<Rc<Waiter<C>>>>,
    /// Connections counted against `max_connections` (slots taken).
    open: Cell<u32>,
    limits: Cell<PoolLimits>,
    now_ms: Cell<u64>,
    opened: Cell<u64>,
    closed: [Cell<u64>; CloseReason::COUNT],
    waited: Cell<u64>,
    queue_timeouts: Cell<u64>,
    queue_full: Cell<u64>,
}

/// What [`ServerPool::checkout`] gives a request.
pub enum Checkout<C> {
    /// A pooled connection, the newest first (its socket is the warmest).
    Idle(C, Permit<C>),
    /// No idle connection and a slot free: open one under this permit.
    Open(Permit<C>),
    /// Every slot taken: wait for a connection or a slot (bounded by the
    /// caller's queue timeout; dropping it leaves the queue).
    Wait(Wait<C>),
    /// Every slot taken and the queue full.
    Full,
}

/// What a wait ends with.
pub enum Got<C> {
    Idle(C, Permit<C>),
    Open(Permit<C>),
}

impl<C> ServerPool<C> {
    pub fn new(limits: PoolLimits, now_ms: u64) -> Rc<ServerPool<C>> {
        Rc::new(ServerPool {
            idle: RefCell::new(Vec::new()),
            queue: RefCell::new(VecDeque::new()),
            open: Cell::new(0),
            limits: Cell::new(limits),
            now_ms: Cell::new(now_ms),
            opened: Cell::new(0),
            closed: Default::default(),
            waited: Cell::new(0),
            queue_timeouts: Cell::new(0),
            queue_full: Cell::new(0),
        })
    }

    fn permit(self: &Rc<Self>, connected: bool) -> Permit<C> {
        Permit {
            pool: self.clone(),
            connected,
            close: CloseReason::Error,
            armed: true,
        }
    }

    /// An idle connection, a slot to open one, a place in the queue, or
    /// nothing. Expired idle connections met on the way are closed. O(1)
    /// but for those.
    pub fn checkout(self: &Rc<Self>, limits: PoolLimits, now_ms: u64) -> Checkout<C> {
        self.limits.set(limits);
        self.now_ms.set(now_ms);
        let mut expired = 0u32;
        let fresh = {
            let mut idle = self.idle.borrow_mut();
            let mut fresh = None;
            while let Some(i) = idle.pop() {
                if i.expires_ms > now_ms {
                    fresh = Some(i.conn);
                    break;
                }
                expired += 1;
                drop(i);
            }
            fresh
        };
        if expired > 0 {
            self.release(expired, CloseReason::IdleTimeout);
        }
        if let Some(conn) = fresh {
            return Checkout::Idle(conn, self.permit(true));
        }
        if self.open.get() < limits.max_connections {
            self.open.set(self.open.get() + 1);
            return Checkout::Open(self.permit(false));
        }
        let mut queue = self.queue.borrow_mut();
        if queue.len() >= limits.max_queued as usize {
            self.queue_full.set(self.queue_full.get() + 1);
            return Checkout::Full;
        }
        let w = Rc::new(Waiter {
            got: RefCell::new(None),
            waker: RefCell::new(None),
        });
        queue.push_back(w.clone());
        self.waited.set(self.waited.get() + 1);
        Checkout::Wait(Wait {
            pool: self.clone(),
            waiter: w,
            done: false,
        })
    }

    /// The first waiter, out of the queue.
    fn next_waiter(&self) -> Option<Rc<Waiter<C>>> {
        self.queue.borrow_mut().pop_front()
    }

    /// A connection that is free again (still counted): to the first
    /// waiter, else into the idle pool, else closed.
    fn give(&self, conn: C) {
        if let Some(w) = self.next_waiter() {
            w.hand(Handoff::Conn(conn));
            return;
        }
        let limits = self.limits.get();
        let kept = {
            let mut idle = self.idle.borrow_mut();
            if idle.len() < limits.max_idle as usize {
                idle.push(Idle {
                    conn,
                    expires_ms: self.now_ms.get().saturating_add(limits.idle_timeout_ms),
                });
                None
            } else {
                Some(conn)
            }
        };
        if let Some(conn) = kept {
            drop(conn);
            self.release(1, CloseReason::PoolFull);
        }
    }

    /// `n` slots free (connections closed, or openings that failed): they
    /// go to waiters first.
    fn free_slots(&self, n: u32) {
        self.open.set(self.open.get().saturating_sub(n));
        for _ in 0..n {
            let Some(w) = self.next_waiter() else { break };
            self.open.set(self.open.get() + 1);
            w.hand(Handoff::Open);
        }
    }

    /// `n` connections closed for `why`.
    fn release(&self, n: u32, why: CloseReason) {
        let c = &self.closed[why as usize];
        c.set(c.get() + u64::from(n));
        self.free_slots(n);
    }

    /// Returns a connection whose exchange completed cleanly.
    pub fn put(&self, conn: C, mut permit: Permit<C>, now_ms: u64) {
        permit.armed = false;
        drop(permit);
        self.now_ms.set(now_ms);
        self.give(conn);
    }

    /// Closes every idle connection (a failing server's, or all of them
    /// when a reload changed what they were made for).
    pub fn discard_idle(&self) {
        let all = std::mem::take(&mut *self.idle.borrow_mut());
        let n = all.len() as u32;
        drop(all);
        if n > 0 {
            self.release(n, CloseReason::Discarded);
        }
    }

    /// Closes idle connections past their time. O(idle).
    pub fn sweep(&self, now_ms: u64) {
        self.now_ms.set(now_ms);
        let expired: Vec<Idle<C>> = {
            let mut idle = self.idle.borrow_mut();
            let (old, fresh): (Vec<_>, Vec<_>) =
                idle.drain(..).partition(|i| i.expires_ms <= now_ms);
            *idle = fresh;
            old
        };
        let n = expired.len() as u32;
        drop(expired);
        if n > 0 {
            self.release(n, CloseReason::IdleTimeout);
        }
    }

    /// Nothing held and nobody waiting: the entry can go.
    pub fn is_unused(&self) -> bool {
        self.open.get() == 0 && self.queue.borrow().is_empty()
    }

    pub fn idle_len(&self) -> usize {
        self.idle.borrow().len()
    }

    pub fn counts(&self) -> PoolCounts {
        PoolCounts {
            open: u64::from(self.open.get()),
            idle: self.idle.borrow().len() as u64,
            queued: self.queue.borrow().len() as u64,
            opened: self.opened.get(),
            closed: std::array::from_fn(|i| self.closed[i].get()),
            waited: self.waited.get(),
            queue_timeouts: self.queue_timeouts.get(),
            queue_full: self.queue_full.get(),
        }
    }
}

/// A slot in a server's count: held by one connection (or its opening)
/// from checkout until it is pooled again or closed. Dropping it closes
/// the connection's count with its reason (`Error` unless set) and hands
/// the slot to the first waiter.
pub struct Permit<C> {
    pool: Rc<ServerPool<C>>,
    /// The connection was made (a slot for an opening that failed closes
    /// nothing).
    connected: bool,
    close: CloseReason,
    armed: bool,
}

impl<C> Permit<C> {
    /// The connection this permit was taken for is made.
    pub fn connected(&mut self) {
        if !self.connected {
            self.connected = true;
            self.pool.opened.set(self.pool.opened.get() + 1);
        }
    }

    /// The reason counted when this permit drops.
    pub fn closing(&mut self, why: CloseReason) {
        self.close = why;
    }

    /// The server's pool.
    pub fn pool(&self) -> &Rc<ServerPool<C>> {
        &self.pool
    }
}

impl<C> Drop for Permit<C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.connected {
            self.pool.release(1, self.close);
        } else {
            self.pool.free_slots(1);
        }
    }
}

/// A place in a server's queue; a future of what it is handed. Dropped
/// before it is ready, it leaves the queue and passes on anything it had
/// been handed meanwhile.
pub struct Wait<C> {
    pool: Rc<ServerPool<C>>,
    waiter: Rc<Waiter<C>>,
    done: bool,
}

impl<C> Wait<C> {
    /// This wait ran out of time: counted as a queue timeout.
    pub fn timed_out(self) {
        let c = &self.pool.queue_timeouts;
        c.set(c.get() + 1);
    }
}

impl<C> Future for Wait<C> {
    type Output = Got<C>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Got<C>> {
        let got = self.waiter.got.borrow_mut().take();
        match got {
            Some(Handoff::Conn(c)) => {
                self.done = true;
                Poll::Ready(Got::Idle(c, self.pool.permit(true)))
            }
            Some(Handoff::Open) => {
                self.done = true;
                Poll::Ready(Got::Open(self.pool.permit(false)))
            }
            None => {
                *self.waiter.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl<C> Drop for Wait<C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.pool
            .queue
            .borrow_mut()
            .retain(|w| !Rc::ptr_eq(w, &self.waiter));
        let got = self.waiter.got.borrow_mut().take();
        match got {
            Some(Handoff::Conn(c)) => self.pool.give(c),
            Some(Handoff::Open) => self.pool.free_slots(1),
            None => {}
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
