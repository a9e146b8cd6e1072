//! A shard's own ring under its plain HTTP/1.1 client connections.
//!
//! Each connection's socket sits in the ring's registered file table (no
//! file lookup per operation) with one multishot receive armed over the
//! shard's provided buffers: a receive is submitted once per connection,
//! not once per read, and no poll is armed per read. Sends go through the
//! same ring, batched: every connection's sends of a loop turn leave in
//! one submission.
//!
//! The ring lives beside the runtime's: a driver task ([`ShardRing::drive`])
//! submits what the connections queued, reaps the completions and wakes
//! their owners, then waits, through the runtime, for the ring's file to
//! become readable (a completion arrived) or for a connection to queue an
//! operation.
//!
//! Bounds: a connection's received bytes wait in at most [`QUEUE_CAP`]
//! bytes of buffers (past it its receive is cancelled, and armed again
//! once its reader drained them); when the shard's buffers run out, the
//! receives that found none wait in line and are armed again as buffers
//! come back.

use super::BufRing;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::task::{Poll, Waker};

/// The provided buffers' group id.
const BGID: u16 = 7;
/// Submission entries; a full queue is submitted before the next push.
const ENTRIES: u32 = 1024;
/// Completion entries (a multishot receive posts many per submission).
const CQ_ENTRIES: u32 = 8192;
/// Provided buffers per shard, and their size.
pub const BUFS: u16 = 512;
pub const BUF_BYTES: usize = 4096;
/// Received bytes a connection may hold unread before its receive stops.
pub const QUEUE_CAP: usize = 4 * BUF_BYTES;
/// Most connections a shard's ring holds (its registered file table);
/// connections past it run on the runtime's streams.
pub const MAX_FILES: u32 = 16384;

/// What a completion's `user_data` names: the slot, shifted, and the kind.
const RECV: u64 = 0;
const SEND: u64 = 1;
const FILES: u64 = 2;
const CANCEL: u64 = 3;

fn ud(slot: u32, kind: u64) -> u64 {
    (slot as u64) << 2 | kind
}

/// Received bytes not yet read: `buf`'s bytes `at..end`.
#[derive(Clone, Copy)]
struct Chunk {
    bid: u16,
    at: u32,
    end: u32,
}

#[derive(Default)]
struct Slot {
    /// Owned by a stream; false once the stream is dropped (the slot is
    /// free when its operations have all completed).
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
    /// A send is in flight; its result once completed.
    sending: bool,
    sent: Option<i32>,
    writer: Option<Waker>,
    /// A dropped send's buffer, kept until the kernel is done with it.
    orphan: Option<Box<dyn std::any::Any>>,
    /// File table updates in flight.
    updates: u8,
}

impl Slot {
    fn idle(&self) -> bool {
        !self.open && !self.armed && !self.sending && self.updates == 0
    }
}

struct Inner {
    /// Declared before `bufs`: the ring closes before its buffers go.
    ring: IoUring,
    /// Dropped by `ShardRing`'s `Drop` once no operation is in flight.
    bufs: std::mem::ManuallyDrop<BufRing>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The descriptor each slot's file table update installs (-1 removes);
    /// stable for as long as the update may be in the queue.
    cells: Box<[RawFd]>,
    /// Receives that found no buffer, to arm again as buffers come back.
    starved: VecDeque<u32>,
    /// Buffers given back since the last turn.
    returned: u32,
    /// Entries pushed and not yet submitted.
    pending: bool,
}

/// Counters of a shard's ring, for the stats page and the tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RingCounts {
    /// `io_uring_enter` calls made by the driver.
    pub submits: u64,
    /// Receives armed (one per connection, plus re-arms).
    pub arms: u64,
    /// Receives that found no buffer.
    pub starved: u64,
    /// Receives stopped because their connection held [`QUEUE_CAP`] bytes.
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
}

impl ShardRing {
    /// Builds the ring (`SINGLE_ISSUER | COOP_TASKRUN | TASKRUN_FLAG`), its
    /// registered file table of `files` entries (at most the process's
    /// descriptor limit) and its provided buffers. On the shard's thread.
    pub fn new(files: u32) -> io::Result<Rc<ShardRing>> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(CQ_ENTRIES)
            .build(ENTRIES)?;
        let files = files.clamp(1, MAX_FILES).min(nofile_limit());
        ring.submitter().register_files_sparse(files)?;
        let bufs = BufRing::new(ring.as_raw_fd(), BGID, BUFS, BUF_BYTES)?;
        Ok(Rc::new(ShardRing {
            inner: RefCell::new(Inner {
                ring,
                bufs: std::mem::ManuallyDrop::new(bufs),
                slots: Vec::new(),
                free: Vec::new(),
                cells: vec![-1; files as usize].into_boxed_slice(),
                starved: VecDeque::new(),
                returned: 0,
                pending: false,
            }),
            kicked: Cell::new(false),
            driver: Cell::new(None),
            counts: Cell::new(RingCounts::default()),
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

    /// Connections the ring holds now.
    pub fn open_slots(&self) -> usize {
        let i = self.inner.borrow();
        i.slots.iter().filter(|s| s.open).count()
    }

    /// Takes `fd` (a connected socket, owned by the caller for as long as
    /// the slot is open) into the file table and arms its receive. `None`
    /// when the table is full.
    pub(crate) fn open(&self, fd: RawFd) -> Option<u32> {
        let mut i = self.inner.borrow_mut();
        let slot = match i.free.pop() {
            Some(s) => s,
            None if i.slots.len() < i.cells.len() => {
                i.slots.push(Slot::default());
                (i.slots.len() - 1) as u32
            }
            None => return None,
        };
        i.cells[slot as usize] = fd;
        let cell = &i.cells[slot as usize] as *const RawFd;
        let s = &mut i.slots[slot as usize];
        *s = Slot {
            queue: std::mem::take(&mut s.queue),
            open: true,
            updates: 1,
            armed: true,
            ..Slot::default()
        };
        let update = opcode::FilesUpdate::new(cell, 1)
            .offset(slot as i32)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(ud(slot, FILES));
        let recv = recv_entry(slot);
        let ok = i.push(&update).and_then(|_| i.push(&recv));
        drop(i);
        self.count(|c| c.arms += 1);
        if ok.is_err() {
            // Nothing went in: the entries are lost with the slot's state.
            let mut i = self.inner.borrow_mut();
            let s = &mut i.slots[slot as usize];
            s.armed = false;
            s.updates = 0;
            s.end = Some(-libc::EBUSY);
        }
        self.kick();
        Some(slot)
    }

    /// The stream of `slot` is gone: its receive and send are cancelled,
    /// its file leaves the table; the slot is free once all completed.
    pub(crate) fn close(&self, slot: u32) {
        let mut i = self.inner.borrow_mut();
        i.cells[slot as usize] = -1;
        let cell = &i.cells[slot as usize] as *const RawFd;
        let s = &mut i.slots[slot as usize];
        s.open = false;
        s.reader = None;
        s.writer = None;
        let cancel_recv = s.armed && !s.cancelling;
        s.cancelling |= cancel_recv;
        let cancel_send = s.sending;
        s.updates += 1;
        if cancel_recv {
            let _ = i.push(&cancel_entry(slot, RECV));
        }
        if cancel_send {
            let _ = i.push(&cancel_entry(slot, SEND));
        }
        let update = opcode::FilesUpdate::new(cell, 1)
            .offset(slot as i32)
            .build()
            .user_data(ud(slot, FILES));
        if i.push(&update).is_err() {
            i.slots[slot as usize].updates -= 1;
        }
        i.release_queue(slot);
        i.try_free(slot);
        drop(i);
        self.kick();
    }

    /// Wakes the driver for a turn (an entry was queued).
    fn kick(&self) {
        if !self.kicked.replace(true) {
            if let Some(w) = self.driver.take() {
                w.wake();
            }
        }
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
        let spare = dst.capacity() - dst.len();
        if !s.queue.is_empty() {
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
            let rearm = s.queue.is_empty() && !s.armed && s.end.is_none();
            if rearm {
                let _ = i.arm(slot);
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
            let armed = i.arm(slot);
            drop(guard);
            if armed.is_err() {
                return Poll::Ready(Err(io::Error::from_raw_os_error(libc::EBUSY)));
            }
            self.count(|c| c.arms += 1);
            self.kick();
        }
        Poll::Pending
    }

    /// Whether `slot` has bytes (or its end) to read; else `waker` is kept
    /// and the receive armed.
    pub(crate) fn poll_ready(&self, slot: u32, waker: &Waker) -> Poll<()> {
        let mut empty = Vec::new();
        match self.poll_read(slot, &mut empty, waker) {
            Poll::Ready(_) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Starts sending `len` bytes at `ptr` on `slot`. The bytes must stay
    /// in place until [`ShardRing::poll_sent`] answers, or until
    /// [`ShardRing::orphan`] takes them.
    pub(crate) fn start_send(&self, slot: u32, ptr: *const u8, len: usize) -> io::Result<()> {
        let mut i = self.inner.borrow_mut();
        let entry = opcode::Send::new(types::Fixed(slot), ptr, len.min(u32::MAX as usize) as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(ud(slot, SEND));
        i.push(&entry)?;
        let s = &mut i.slots[slot as usize];
        s.sending = true;
        s.sent = None;
        drop(i);
        self.kick();
        Ok(())
    }

    /// The result of `slot`'s send once completed (bytes sent or `-errno`).
    pub(crate) fn poll_sent(&self, slot: u32, waker: &Waker) -> Poll<i32> {
        let mut i = self.inner.borrow_mut();
        let s = &mut i.slots[slot as usize];
        match s.sent.take() {
            Some(r) => Poll::Ready(r),
            None => {
                if !matches!(&s.writer, Some(w) if w.will_wake(waker)) {
                    s.writer = Some(waker.clone());
                }
                Poll::Pending
            }
        }
    }

    /// A send's owner is gone while the send is in flight: its buffer
    /// stays with the slot until the send completes.
    pub(crate) fn orphan(&self, slot: u32, buf: Box<dyn std::any::Any>) {
        let mut i = self.inner.borrow_mut();
        let s = &mut i.slots[slot as usize];
        s.writer = None;
        if s.sending {
            s.orphan = Some(buf);
        } else {
            s.sent = None;
        }
    }

    /// One turn: submits what was queued, hands every completion to its
    /// slot, arms again receives that waited for buffers.
    fn turn(&self) {
        self.kicked.set(false);
        let mut submits = 0;
        let mut guard = self.inner.borrow_mut();
        let i = &mut *guard;
        for _ in 0..4 {
            if i.pending || i.ring.submission().taskrun() {
                i.pending = false;
                submits += 1;
                if let Err(e) = i.ring.submit() {
                    // EBUSY/EAGAIN: completions to reap first; what stayed
                    // queued leaves on the next turn.
                    i.pending = matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN));
                }
            }
            let mut capped = 0;
            let mut starved = 0;
            loop {
                let cqe = {
                    let mut cq = i.ring.completion();
                    let Some(cqe) = cq.next() else { break };
                    cqe
                };
                match i.complete(&cqe) {
                    Done::Capped => capped += 1,
                    Done::Starved => starved += 1,
                    Done::Plain => {}
                }
            }
            let mut rearmed = 0;
            while i.returned > 0 {
                let Some(slot) = i.starved.pop_front() else {
                    break;
                };
                let s = &i.slots[slot as usize];
                if s.open && !s.armed && s.end.is_none() && i.arm(slot).is_ok() {
                    i.returned -= 1;
                    rearmed += 1;
                }
            }
            i.returned = 0;
            if capped + starved + rearmed > 0 {
                self.count(|c| {
                    c.capped += capped;
                    c.starved += starved;
                    c.arms += rearmed;
                });
            }
            if !i.pending {
                break;
            }
        }
        drop(guard);
        if submits > 0 {
            self.count(|c| c.submits += submits);
        }
    }

    /// The driver: turns whenever a connection queued an entry or the
    /// ring has completions, and waits through the runtime in between.
    /// Runs for the shard's life (spawn it once).
    pub async fn drive(self: Rc<Self>) {
        let poller = match self.poller() {
            Ok(p) => p,
            Err(_) => return,
        };
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

    /// The ring's file, watched through the runtime: readable when a
    /// completion waits.
    fn poller(&self) -> io::Result<monoio::net::UnixDatagram> {
        let fd = self.inner.borrow().ring.as_raw_fd();
        // SAFETY: `dup` gives a descriptor of our own, owned by the
        // wrapper, which only polls it (and closes it when dropped).
        let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if own < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `own` is ours (above).
        let std = unsafe { std::os::unix::net::UnixDatagram::from_raw_fd(own) };
        monoio::net::UnixDatagram::from_std(std)
    }
}

enum Done {
    Plain,
    Capped,
    Starved,
}

impl Inner {
    /// Queues `e`, submitting first when the queue is full.
    fn push(&mut self, e: &squeue::Entry) -> io::Result<()> {
        self.pending = true;
        // SAFETY: every entry's pointers (file table cells, send buffers
        // held by their futures or the slot) outlive its completion.
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

    fn arm(&mut self, slot: u32) -> io::Result<()> {
        self.push(&recv_entry(slot))?;
        let s = &mut self.slots[slot as usize];
        s.armed = true;
        s.cancelling = false;
        Ok(())
    }

    fn complete(&mut self, cqe: &cqueue::Entry) -> Done {
        let data = cqe.user_data();
        let slot = (data >> 2) as u32;
        let res = cqe.result();
        let mut done = Done::Plain;
        match data & 3 {
            RECV => {
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
                        done = Done::Starved;
                    }
                } else if res != -libc::ECANCELED {
                    s.end = Some(res);
                }
                let s = &mut self.slots[slot as usize];
                if !more {
                    s.armed = false;
                    s.cancelling = false;
                } else if s.queued >= QUEUE_CAP && !s.cancelling && s.open {
                    s.cancelling = true;
                    let _ = self.push(&cancel_entry(slot, RECV));
                    done = Done::Capped;
                }
                // Not on a receive that found no buffer: it is armed again
                // as buffers come back, not by its reader.
                let s = &mut self.slots[slot as usize];
                if res != -libc::ENOBUFS {
                    if let Some(w) = s.reader.take() {
                        w.wake();
                    }
                }
            }
            SEND => {
                let s = &mut self.slots[slot as usize];
                s.sending = false;
                if s.orphan.take().is_none() && s.open {
                    s.sent = Some(res);
                    if let Some(w) = s.writer.take() {
                        w.wake();
                    }
                }
            }
            FILES => {
                let s = &mut self.slots[slot as usize];
                s.updates = s.updates.saturating_sub(1);
                if res < 0 && s.open && s.end.is_none() {
                    s.end = Some(res);
                    if let Some(w) = s.reader.take() {
                        w.wake();
                    }
                }
            }
            _ => {}
        }
        self.try_free(slot);
        done
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
        if s.open || !s.idle() || s.end == Some(i32::MIN) {
            return;
        }
        // Freed once: the marker keeps a second completion from listing
        // the slot twice.
        s.end = Some(i32::MIN);
        s.sent = None;
        s.orphan = None;
        self.release_queue(slot);
        self.free.push(slot);
    }
}

impl Drop for ShardRing {
    fn drop(&mut self) {
        let i = self.inner.get_mut();
        if i.slots.iter().any(|s| s.armed || s.sending) {
            // Operations still in flight may write into the buffers or
            // read from the orphans after the ring's file closes (its
            // teardown is asynchronous): cancel them all and wait, briefly,
            // for the cancellations.
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(u64::MAX);
            // SAFETY: the entry holds no pointers.
            let _ = unsafe { i.ring.submission().push(&cancel) };
            let ts = types::Timespec::new().nsec(10_000_000);
            for _ in 0..100 {
                let args = types::SubmitArgs::new().timespec(&ts);
                let _ = i.ring.submitter().submit_with_args(1, &args);
                let done: Vec<cqueue::Entry> = i.ring.completion().collect();
                for cqe in &done {
                    if cqe.user_data() != u64::MAX {
                        let _ = i.complete(cqe);
                    }
                }
                if !i.slots.iter().any(|s| s.armed || s.sending) {
                    break;
                }
            }
        }
        if i.slots.iter().any(|s| s.armed || s.sending) {
            // What did not end in time keeps its memory: the buffers and
            // the orphaned sends stay allocated for the kernel.
            std::mem::forget(std::mem::take(&mut i.slots));
            return;
        }
        // SAFETY: no operation is in flight: nothing uses the buffers.
        unsafe { std::mem::ManuallyDrop::drop(&mut i.bufs) };
    }
}

fn recv_entry(slot: u32) -> squeue::Entry {
    opcode::RecvMulti::new(types::Fixed(slot), BGID)
        .build()
        .user_data(ud(slot, RECV))
}

fn cancel_entry(slot: u32, kind: u64) -> squeue::Entry {
    opcode::AsyncCancel::new(ud(slot, kind))
        .build()
        .user_data(ud(slot, CANCEL))
}

/// The process's descriptor limit (the file table may not exceed it).
fn nofile_limit() -> u32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is valid for the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur.min(u32::MAX as u64) as u32
}
