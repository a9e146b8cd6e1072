//! One deadline per connection, and one timer per shard.
//!
//! A connection's reads and writes (the client's, and its upstream
//! exchange's) wait one at a time, so each connection needs one deadline,
//! not a timer per operation. [`Deadline::within`] sets the connection's
//! deadline (a write to its entry in the shard's table) and clears it when
//! the wait ends; the operation itself is polled as it is. Nothing is put
//! on the runtime's timer wheel per operation.
//!
//! A sweeper task per shard sleeps until the earliest deadline it knows of.
//! When it wakes it walks the table: an entry whose deadline has passed is
//! marked fired and its waiting task woken (its wait then ends with
//! [`Elapsed`], dropping the operation, as a timeout would); the others
//! give the next wake. A deadline set earlier than the sweeper's next wake
//! moves the wake up. Under load deadlines move later with every request,
//! so the sweeper wakes about once per shortest timeout and walks the
//! table then: O(connections) per timeout period, not per request.
//!
//! Deadlines are never early: the sweeper compares them with the precise
//! clock. Walks are at least [`GAP`] apart, so however the deadlines of
//! many connections spread out (10,000 idle ones, each timing out at its
//! own moment), the table is walked at most 200 times a second; a deadline
//! fires at most that gap plus the runtime timer's millisecond after its
//! time.

use monoio::time::Instant;
use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The least time between two walks of a shard's table.
pub(crate) const GAP: Duration = Duration::from_millis(5);

/// A wait that ran past its connection's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Elapsed;

#[derive(Default)]
struct Entry {
    /// The deadline of the wait in progress; `None`: no wait.
    at: Option<Instant>,
    /// The deadline passed while waiting.
    fired: bool,
    /// The waiting task.
    waker: Option<Waker>,
}

#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    /// Indices of unused entries.
    free: Vec<u32>,
    live: u32,
}

/// A shard's deadlines: one entry per connection, and the sweeper's state.
#[derive(Default)]
pub(crate) struct Deadlines {
    table: RefCell<Table>,
    /// When the sweeper wakes next; `None`: only when a deadline is set.
    next: Cell<Option<Instant>>,
    /// The sweeper, to wake when a deadline comes before `next`.
    sweeper: RefCell<Option<Waker>>,
    /// A sweeper task is running (it ends when no entry is left).
    running: Cell<bool>,
    /// Walks of the table so far.
    sweeps: Cell<u64>,
    /// No sweeper: time is passed in ([`Deadlines::advance`]).
    #[cfg(test)]
    manual: Cell<bool>,
}

impl Deadlines {
    /// A new connection's deadline; starts the sweeper when none runs.
    pub(crate) fn register(self: &Rc<Self>) -> Deadline {
        let index = {
            let mut t = self.table.borrow_mut();
            t.live += 1;
            match t.free.pop() {
                Some(i) => i,
                None => {
                    t.entries.push(Entry::default());
                    (t.entries.len() - 1) as u32
                }
            }
        };
        #[cfg(test)]
        if self.manual.get() {
            return Deadline {
                shard: self.clone(),
                index,
            };
        }
        if !self.running.get() {
            self.running.set(true);
            monoio::spawn(sweep(self.clone()));
        }
        Deadline {
            shard: self.clone(),
            index,
        }
    }

    /// Connections registered now.
    pub(crate) fn live(&self) -> u32 {
        self.table.borrow().live
    }

    /// Walks of the table so far.
    #[cfg(test)]
    pub(crate) fn sweeps(&self) -> u64 {
        self.sweeps.get()
    }

    /// From now on no sweeper runs: deadlines fire only when the test
    /// passes time in with [`Deadlines::advance`].
    #[cfg(test)]
    pub(crate) fn set_manual(&self) {
        self.manual.set(true);
    }

    /// Moves the test's clock on by `by` and fires every deadline due by
    /// then.
    #[cfg(test)]
    pub(crate) fn advance(&self, by: Duration) {
        crate::clock::skew(by);
        let next = self.walk(crate::clock::precise_now());
        self.next.set(next);
    }

    fn nudge(&self, at: Instant) {
        if self.next.get().is_none_or(|n| at < n) {
            self.next.set(Some(at));
            if let Some(w) = self.sweeper.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
    }

    /// Fires what has passed `now` and returns the earliest deadline left.
    fn walk(&self, now: Instant) -> Option<Instant> {
        self.sweeps.set(self.sweeps.get() + 1);
        let mut next: Option<Instant> = None;
        let mut woken = Vec::new();
        {
            let mut t = self.table.borrow_mut();
            for e in t.entries.iter_mut() {
                let Some(at) = e.at else { continue };
                if at <= now {
                    e.at = None;
                    e.fired = true;
                    if let Some(w) = e.waker.take() {
                        woken.push(w);
                    }
                } else if next.is_none_or(|n| at < n) {
                    next = Some(at);
                }
            }
        }
        // Woken outside the borrow: a waker may run code that sets a deadline.
        for w in woken {
            w.wake();
        }
        next
    }
}

/// The sweeper: sleeps until the earliest deadline (or until one is set),
/// then walks the table. Ends when no connection is registered.
async fn sweep(shard: Rc<Deadlines>) {
    let mut sleep = pin!(monoio::time::sleep_until(Instant::now()));
    let mut sleeping_until: Option<Instant> = None;
    let mut walked: Option<Instant> = None;
    loop {
        poll_fn(|cx| {
            if shard.live() == 0 {
                return Poll::Ready(());
            }
            {
                let mut w = shard.sweeper.borrow_mut();
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
            }
            let Some(mut at) = shard.next.get() else {
                return Poll::Pending;
            };
            if let Some(w) = walked {
                at = at.max(w + GAP);
            }
            if sleeping_until != Some(at) {
                sleep.as_mut().reset(at);
                sleeping_until = Some(at);
            }
            sleep.as_mut().poll(cx)
        })
        .await;
        if shard.live() == 0 {
            shard.running.set(false);
            shard.next.set(None);
            shard.sweeper.borrow_mut().take();
            return;
        }
        let now = Instant::now();
        walked = Some(now);
        let next = shard.walk(now);
        shard.next.set(next);
    }
}

/// A connection's deadline: its entry in its shard's table, freed on drop.
pub(crate) struct Deadline {
    shard: Rc<Deadlines>,
    index: u32,
}

impl Deadline {
    /// Runs `fut` to its end, or until `at` passes: then `Elapsed`, and
    /// `fut` is dropped. One wait at a time per connection.
    pub(crate) fn within<F: Future>(&self, at: Instant, fut: F) -> Within<'_, F> {
        Within {
            deadline: self,
            at,
            armed: false,
            fut,
        }
    }

    fn arm(&self, at: Instant) {
        {
            let mut t = self.shard.table.borrow_mut();
            let e = &mut t.entries[self.index as usize];
            e.at = Some(at);
            e.fired = false;
        }
        self.shard.nudge(at);
    }

    fn clear(&self) {
        let mut t = self.shard.table.borrow_mut();
        let e = &mut t.entries[self.index as usize];
        e.at = None;
        e.fired = false;
    }
}

/// [`Deadline::within`]'s wait: sets the deadline when first polled and
/// clears it when it ends or is dropped. The operation is polled in place
/// (a future of its own rather than an `async fn`, so it is not moved
/// once more into a wrapper's state).
pub(crate) struct Within<'a, F> {
    deadline: &'a Deadline,
    at: Instant,
    armed: bool,
    fut: F,
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `fut` is structurally pinned: it is never moved out of
        // `self` (not by `Drop` either); the other fields are plain data.
        let this = unsafe { self.get_unchecked_mut() };
        if !this.armed {
            this.deadline.arm(this.at);
            this.armed = true;
        }
        // SAFETY: as above.
        let fut = unsafe { std::pin::Pin::new_unchecked(&mut this.fut) };
        if let Poll::Ready(v) = fut.poll(cx) {
            this.armed = false;
            this.deadline.clear();
            return Poll::Ready(Ok(v));
        }
        let fired = {
            let mut t = this.deadline.shard.table.borrow_mut();
            let e = &mut t.entries[this.deadline.index as usize];
            if !e.fired && !e.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                e.waker = Some(cx.waker().clone());
            }
            e.fired
        };
        if fired {
            this.armed = false;
            this.deadline.clear();
            return Poll::Ready(Err(Elapsed));
        }
        Poll::Pending
    }
}

impl<F> Drop for Within<'_, F> {
    fn drop(&mut self) {
        if self.armed {
            self.deadline.clear();
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        let last = {
            let mut t = self.shard.table.borrow_mut();
            t.entries[self.index as usize] = Entry::default();
            t.free.push(self.index);
            t.live -= 1;
            t.live == 0
        };
        if last {
            // Lets the sweeper end.
            if let Some(w) = self.shard.sweeper.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
    }
}

#[cfg(test)]
mod tests;
