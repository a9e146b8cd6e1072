//! A shard's own ring for the receives of its plain HTTP/1.1 connections
//! (clients and upstreams).
//!
//! Each connection has one multishot receive armed over the shard's
//! provided buffers: a receive is submitted once per connection, not once
//! per read, and no poll is armed per read. Sends stay on the runtime's
//! ring, batched with everything else it submits in a loop turn.
//!
//! The ring lives beside the runtime's: a driver task ([`ShardRing::drive`])
//! submits what the connections queued (arms and cancellations, rare),
//! reaps the completions and wakes their owners, then waits, through the
//! runtime, for the ring's file to become readable (a completion arrived)
//! or for a connection to queue an entry.
//!
//! Bounds: a connection holds at most [`QUEUE_BUFS`] buffers' worth of
//! received bytes unread (past it its receive is cancelled, and armed again
//! once its reader drained them); when the shard's buffers run out, the
//! receives that found none wait in line and are armed again as buffers
//! come back.

use super::{BufRing, RingUse};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::task::{Poll, Waker};

/// The provided buffers' group id.
const BGID: u16 = 7;
/// Submission entries; a full queue is submitted before the next push.
const ENTRIES: u32 = 256;
/// Completion entries (a multishot receive posts many per submission).
const CQ_ENTRIES: u32 = 8192;
/// Provided buffers per shard, and their size.
pub const BUFS: u16 = 512;
pub const BUF_BYTES: usize = 4096;
/// Received buffers a connection may hold unread before its receive
/// stops (4 × 4 KiB: 16 KiB).
pub const QUEUE_BUFS: usize = 4;

/// What a completion's `user_data` names: the slot, shifted, and the kind.
const RECV: u64 = 0;
const CANCEL: u64 = 1;
/// The driver's own entries (the cancellations at the end).
const OWN: u64 = u64::MAX;

fn ud(slot: u32, kind: u64) -> u64 {
    (slot as u64) << 1 | kind
}

/// Received bytes not yet read: `bid`'s bytes `at..end`.
#[derive(Clone, Copy)]
struct Chunk {
    bid: u16,
    at: u32,
    end: u32,
}

#[derive(Default)]
struct Slot {
    /// The connected socket, owned by the slot's stream.
    fd: RawFd,
    /// Owned by a stream; false once the stream is gone (the slot is free
    /// when its receive has ended).
    open: bool,
    queue: VecDeque<Chunk>,
    queued: usize,
    /// The receive's end: 0 at the end of the stream, else `-errno`; read
    /// after the queued bytes.
    end: Option<i32>,
    /// A multishot receive is in flight.
    armed: bool,
    /// Its cancellation is in flight.
    cancelling: bool,
    reader: Option<Waker>,
}

struct Inner {
    /// Declared before `bufs`: the ring closes before its buffers go.
    ring: IoUring,
    /// Dropped by `ShardRing`'s `Drop` once no receive is in flight.
    bufs: std::mem::ManuallyDrop<BufRing>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Receives that found no buffer, to arm again as buffers come back.
    starved: VecDeque<u32>,
    /// Buffers given back since the last turn.
    returned: u32,
    /// Cancellations the full queue refused, queued again on the next turn
    /// (one per slot at most: the slot is marked `cancelling`).
    uncancelled: Vec<u32>,
    /// Entries pushed and not yet submitted.
    pending: bool,
    /// Bytes a connection may hold unread before its receive stops.
    cap: usize,
}

/// Counters of a shard's ring, for the tests and the profile.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingCounts {
    /// `io_uring_enter` calls made by the driver.
    pub submits: u64,
    /// Receives armed (one per connection, plus re-arms).
    pub arms: u64,
    /// Receives that found no buffer.
    pub starved: u64,
    /// Receives stopped because their connection held [`QUEUE_BUFS`]
    /// buffers' worth of bytes.
    pub capped: u64,
}

/// A shard's own ring: see the module's documentation.
pub struct ShardRing {
    inner: RefCell<Inner>,
    /// An entry was queued since the driver's last turn.
    kicked: Cell<bool>,
    /// The driver task, while it waits.
    driver: Cell<Option<Waker>>,
    counts: Cell<RingCounts>,
    /// The ring's file, watched through the runtime (`drive`).
    poller: monoio::net::UnixDatagram,
}

impl ShardRing {
    /// Builds the ring ([`RingUse::PolledByRuntime`]: `SINGLE_ISSUER |
    /// COOP_TASKRUN | TASKRUN_FLAG`) and its provided buffers. On the
    /// shard's thread.
    pub fn new() -> io::Result<Rc<ShardRing>> {
        Self::with_buffers(BUFS, BUF_BYTES)
    }

    /// [`ShardRing::new`] with `count` provided buffers (a power of two) of
    /// `bytes` each.
    pub fn with_buffers(count: u16, bytes: usize) -> io::Result<Rc<ShardRing>> {
        let ring = RingUse::PolledByRuntime.build(ENTRIES, CQ_ENTRIES)?;
        let bufs = BufRing::new(ring.as_raw_fd(), BGID, count, bytes)?;
        let poller = poller(ring.as_raw_fd())?;
        Ok(Rc::new(ShardRing {
            inner: RefCell::new(Inner {
                ring,
                bufs: std::mem::ManuallyDrop::new(bufs),
                slots: Vec::new(),
                free: Vec::new(),
                starved: VecDeque::new(),
                returned: 0,
                uncancelled: Vec::new(),
                pending: false,
                cap: QUEUE_BUFS * bytes,
            }),
            kicked: Cell::new(false),
            driver: Cell::new(None),
            counts: Cell::new(RingCounts::default()),
            poller,
        }))
    }

    pub fn counts(&self) -> RingCounts {
        self.counts.get()
    }

    fn count(&self, f: impl FnOnce(&mut RingCounts)) {
        let mut c = self.counts.get();
        f(&mut c);
        self.counts.set(c);
    }

    /// Slots in use: open, or closed with their receive still in flight.
    pub fn slots_in_use(&self) -> usize {
        let i = self.inner.borrow();
        i.slots.len() - i.free.len()
    }

    /// Arms a receive on `fd` (a connected socket the caller owns for as
    /// long as the slot is open). `None` when the ring's queue is full.
    pub(crate) fn open(&self, fd: RawFd) -> Option<u32> {
        let mut i = self.inner.borrow_mut();
        let slot = match i.free.pop() {
            Some(s) => s,
            None => {
                i.slots.push(Slot::default());
                (i.slots.len() - 1) as u32
            }
        };
        let s = &mut i.slots[slot as usize];
        *s = Slot {
            fd,
            queue: std::mem::take(&mut s.queue),
            open: true,
            ..Slot::default()
        };
        if i.arm(slot).is_err() {
            i.slots[slot as usize].open = false;
            i.slots[slot as usize].fd = -1;
            i.free.push(slot);
            return None;
        }
        drop(i);
        self.count(|c| c.arms += 1);
        self.kick();
        Some(slot)
    }

    /// The stream of `slot` is gone: its receive is cancelled and its
    /// buffers given back; the slot is free once the receive has ended.
    pub(crate) fn close(&self, slot: u32) {
        let mut i = self.inner.borrow_mut();
        let s = &mut i.slots[slot as usize];
        s.open = false;
        s.reader = None;
        let cancel = s.armed && !s.cancelling;
        if cancel {
            i.cancel(slot);
        }
        i.release_queue(slot);
        i.try_free(slot);
        drop(i);
        if cancel {
            self.kick();
        }
    }

    /// Wakes the driver for a turn (an entry was queued).
    fn kick(&self) {
        if !self.kicked.replace(true) {
            if let Some(w) = self.driver.take() {
                w.wake();
            }
        }
    }

    /// Whether `slot` holds received bytes not yet read.
    pub(crate) fn buffered(&self, slot: u32) -> bool {
        !self.inner.borrow().slots[slot as usize].queue.is_empty()
    }

    /// Reads `slot`'s received bytes into `dst`'s spare room: `Ready` with
    /// the count (0 at the end of the stream), or `Pending` with `waker`
    /// kept.
    pub(crate) fn poll_read(
        &self,
        slot: u32,
        dst: &mut Vec<u8>,
        waker: &Waker,
    ) -> Poll<io::Result<usize>> {
        let mut guard = self.inner.borrow_mut();
        let i = &mut *guard;
        let s = &mut i.slots[slot as usize];
        if !s.queue.is_empty() {
            let spare = dst.capacity() - dst.len();
            let mut n = 0;
            let mut gave = false;
            while n < spare {
                let Some(c) = s.queue.front_mut() else { break };
                let take = ((c.end - c.at) as usize).min(spare - n);
                let at = c.at as usize;
                dst.extend_from_slice(&i.bufs.buf(c.bid, c.end as usize)[at..at + take]);
                c.at += take as u32;
                n += take;
                if c.at == c.end {
                    i.bufs.push(c.bid);
                    i.returned += 1;
                    gave = true;
                    s.queue.pop_front();
                }
            }
            s.queued -= n;
            if gave {
                i.bufs.publish();
            }
            // A receive stopped at the cap goes again once drained.
            if s.queue.is_empty() && !s.armed && s.end.is_none() && i.arm(slot).is_ok() {
                drop(guard);
                self.count(|c| c.arms += 1);
                self.kick();
            }
            return Poll::Ready(Ok(n));
        }
        match s.end {
            Some(0) => return Poll::Ready(Ok(0)),
            Some(e) => return Poll::Ready(Err(io::Error::from_raw_os_error(-e))),
            None => {}
        }
        if !matches!(&s.reader, Some(w) if w.will_wake(waker)) {
            s.reader = Some(waker.clone());
        }
        if !s.armed {
            if let Err(e) = i.arm(slot) {
                return Poll::Ready(Err(e));
            }
            drop(guard);
            self.count(|c| c.arms += 1);
            self.kick();
        }
        Poll::Pending
    }

    /// Whether `slot` has bytes (or its end) to read; else `waker` is kept
    /// and the receive armed.
    pub(crate) fn poll_ready(&self, slot: u32, waker: &Waker) -> Poll<()> {
        let mut none = Vec::new();
        self.poll_read(slot, &mut none, waker).map(|_| ())
    }

    /// One turn: submits what was queued, hands every completion to its
    /// slot, arms again receives that waited for buffers.
    fn turn(&self) {
        self.kicked.set(false);
        let mut submits = 0;
        let mut counts = RingCounts::default();
        let mut guard = self.inner.borrow_mut();
        let i = &mut *guard;
        for _ in 0..4 {
            for slot in std::mem::take(&mut i.uncancelled) {
                let s = &i.slots[slot as usize];
                if s.armed && s.cancelling {
                    i.cancel(slot);
                }
            }
            if i.pending {
                i.pending = false;
                submits += 1;
                if let Err(e) = i.ring.submit() {
                    // EBUSY/EAGAIN: completions to reap first; what stayed
                    // queued leaves on the next pass.
                    i.pending = matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN));
                }
            }
            loop {
                let Some(cqe) = i.ring.completion().next() else {
                    break;
                };
                i.complete(&cqe, &mut counts);
            }
            while i.returned > 0 {
                let Some(slot) = i.starved.pop_front() else {
                    break;
                };
                let s = &i.slots[slot as usize];
                if s.open && !s.armed && s.end.is_none() && i.arm(slot).is_ok() {
                    i.returned -= 1;
                    counts.arms += 1;
                }
            }
            i.returned = 0;
            if !i.pending {
                break;
            }
        }
        drop(guard);
        counts.submits = submits;
        if counts != RingCounts::default() {
            self.count(|c| {
                c.submits += counts.submits;
                c.arms += counts.arms;
                c.starved += counts.starved;
                c.capped += counts.capped;
            });
        }
    }

    /// The driver: turns whenever a connection queued an entry or the
    /// ring has completions, and waits through the runtime in between.
    /// Runs for the shard's life (spawn it once).
    pub async fn drive(self: Rc<Self>) {
        let poller = &self.poller;
        let mut ready = None;
        loop {
            self.turn();
            let wait = ready.get_or_insert_with(|| Box::pin(poller.readable(false)));
            let fired = std::future::poll_fn(|cx| {
                if self.kicked.get() {
                    return Poll::Ready(false);
                }
                if wait.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(true);
                }
                self.driver.set(Some(cx.waker().clone()));
                Poll::Pending
            })
            .await;
            if fired {
                ready = None;
            }
        }
    }
}

impl Inner {
    /// Queues `e`, submitting first when the queue is full.
    fn push(&mut self, e: &squeue::Entry) -> io::Result<()> {
        self.pending = true;
        // SAFETY: the entries hold no pointers but the provided buffers'
        // group, which outlives every receive (see `Drop`).
        unsafe {
            if self.ring.submission().push(e).is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
            self.ring
                .submission()
                .push(e)
                .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))
        }
    }

    /// Cancels `slot`'s receive, now or, when the queue is full, on the
    /// next turn.
    fn cancel(&mut self, slot: u32) {
        self.slots[slot as usize].cancelling = true;
        if self.push(&cancel_entry(slot)).is_err() {
            self.uncancelled.push(slot);
        }
    }

    fn arm(&mut self, slot: u32) -> io::Result<()> {
        let fd = self.slots[slot as usize].fd;
        let recv = opcode::RecvMulti::new(types::Fd(fd), BGID)
            .build()
            .user_data(ud(slot, RECV));
        self.push(&recv)?;
        let s = &mut self.slots[slot as usize];
        s.armed = true;
        s.cancelling = false;
        Ok(())
    }

    fn complete(&mut self, cqe: &cqueue::Entry, counts: &mut RingCounts) {
        let data = cqe.user_data();
        if data == OWN || data & 1 == CANCEL {
            return;
        }
        let slot = (data >> 1) as u32;
        let res = cqe.result();
        let more = cqueue::more(cqe.flags());
        let s = &mut self.slots[slot as usize];
        if res > 0 {
            if let Some(bid) = cqueue::buffer_select(cqe.flags()) {
                if s.open {
                    s.queue.push_back(Chunk {
                        bid,
                        at: 0,
                        end: res as u32,
                    });
                    s.queued += res as usize;
                } else {
                    self.bufs.push(bid);
                    self.bufs.publish();
                }
            }
        } else if res == 0 {
            s.end = Some(0);
        } else if res == -libc::ENOBUFS {
            if s.open && !more {
                self.starved.push_back(slot);
                counts.starved += 1;
            }
        } else if res != -libc::ECANCELED {
            s.end = Some(res);
        }
        let s = &mut self.slots[slot as usize];
        if !more {
            s.armed = false;
            s.cancelling = false;
        } else if s.queued >= self.cap && !s.cancelling && s.open {
            self.cancel(slot);
            counts.capped += 1;
        }
        // Not on a receive that found no buffer: it is armed again as
        // buffers come back, not by its reader.
        let s = &mut self.slots[slot as usize];
        if res != -libc::ENOBUFS {
            if let Some(w) = s.reader.take() {
                w.wake();
            }
        }
        self.try_free(slot);
    }

    /// Gives `slot`'s unread buffers back.
    fn release_queue(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.queue.is_empty() {
            return;
        }
        for c in s.queue.drain(..) {
            self.bufs.push(c.bid);
            self.returned += 1;
        }
        s.queued = 0;
        self.bufs.publish();
    }

    fn try_free(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.open || s.armed || s.fd < 0 {
            return;
        }
        // Freed once: the marker keeps a late completion from listing the
        // slot twice.
        s.fd = -1;
        self.release_queue(slot);
        self.free.push(slot);
    }
}

impl Drop for ShardRing {
    fn drop(&mut self) {
        let i = self.inner.get_mut();
        if i.slots.iter().any(|s| s.armed) {
            // Receives still in flight may write into the buffers after the
            // ring's file closes (its teardown is asynchronous): cancel them
            // all and wait, briefly, for the cancellations.
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(OWN);
            // SAFETY: the entry holds no pointers.
            let _ = unsafe { i.ring.submission().push(&cancel) };
            let ts = types::Timespec::new().nsec(10_000_000);
            let mut counts = RingCounts::default();
            for _ in 0..100 {
                let args = types::SubmitArgs::new().timespec(&ts);
                let _ = i.ring.submitter().submit_with_args(1, &args);
                loop {
                    let Some(cqe) = i.ring.completion().next() else {
                        break;
                    };
                    i.complete(&cqe, &mut counts);
                }
                if !i.slots.iter().any(|s| s.armed) {
                    break;
                }
            }
        }
        if i.slots.iter().any(|s| s.armed) {
            // What did not end in time keeps the buffers it may write to.
            return;
        }
        // SAFETY: no receive is in flight: nothing uses the buffers.
        unsafe { std::mem::ManuallyDrop::drop(&mut i.bufs) };
    }
}

/// The ring's file, watched through the runtime: readable when a
/// completion waits. On the shard's thread, inside its runtime.
fn poller(fd: RawFd) -> io::Result<monoio::net::UnixDatagram> {
    // SAFETY: a duplicate of our own, owned by the wrapper, which only
    // polls it (and closes it when dropped).
    let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if own < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `own` is ours (above).
    let std = unsafe { std::os::unix::net::UnixDatagram::from_raw_fd(own) };
    monoio::net::UnixDatagram::from_std(std)
}

fn cancel_entry(slot: u32) -> squeue::Entry {
    opcode::AsyncCancel::new(ud(slot, RECV))
        .build()
        .user_data(ud(slot, CANCEL))
}

#[cfg(test)]
mod tests;
