//! The datagram loop of one relay on one shard, on monoio (io_uring or
//! epoll alike).
//!
//! Receiving: each listening socket (non-blocking, steered by source like
//! the TCP listeners) has one task that waits for readiness, then drains
//! the socket with `recvmmsg` in batches of [`BATCH`] into buffers
//! allocated once, and decides every datagram with [`Relay::inbound`]
//! before anything else touches it. A datagram longer than the relay's
//! bound is truncated by the kernel (`MSG_TRUNC`) and dropped as
//! `oversized`, never read whole.
//!
//! Relaying: a new session gets a connected, non-blocking socket towards
//! its server and a task of its own that waits for replies, drains them
//! with `recvmmsg`, passes each through [`Relay::outbound`] (the
//! amplification bound) and sends the batch back to the client with one
//! `sendmmsg` from the listening socket the client used. Datagrams to
//! upstream go out with one non-blocking `send` each. A send that would
//! block drops the datagram (`unrelayed`): UDP has no backpressure to give.
//!
//! Sessions end when idle (their task's timer), when a reload resizes the
//! table, or at the drain: the listeners stop receiving first, and the
//! sessions are closed after [`DRAIN_GRACE_MS`] so replies in flight still
//! reach their clients.
//!
//! Steady state allocates nothing per datagram: buffers, message headers
//! and the reply batch are allocated per task or per relay; a session's
//! socket and task are allocated when it opens.

use crate::batch::Batch;
use crate::relay::{Inbound, Relay};
use crate::session::SessionRef;
use crate::stats::RelayStats;
use gapura_gate::udp::{UdpDrop, UdpPolicy};
use gapura_gate::Snapshot;
use monoio::net::udp::UdpSocket;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

/// Datagrams one `recvmmsg` or `sendmmsg` moves at most.
pub const BATCH: usize = 32;
/// How long a draining relay keeps its sessions for replies in flight.
pub const DRAIN_GRACE_MS: u64 = 500;
/// The largest reply relayed (a UDP payload's bound).
const REPLY_BYTES: usize = 65_536;
/// Replies one session drains per wake.
const REPLY_BATCH: usize = 8;

/// Where a relay's shard learns of a new snapshot.
pub trait PolicyFeed {
    /// The newer snapshot, if the generation moved.
    fn newer_than(&self, generation: u64) -> Option<Arc<Snapshot>>;
}

/// A one-way flag a task can wait on.
#[derive(Default)]
struct Signal {
    raised: Cell<bool>,
    wakers: RefCell<Vec<Waker>>,
}

impl Signal {
    fn raise(&self) {
        self.raised.set(true);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    fn wait(&self) -> SignalWait<'_> {
        SignalWait(self)
    }
}

struct SignalWait<'a>(&'a Signal);

impl Future for SignalWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.raised.get() {
            return Poll::Ready(());
        }
        let mut wakers = self.0.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A session's socket and the flag that ends its task.
struct SessionIo {
    /// The session's generation: a later session in the same place has
    /// another.
    generation: u32,
    sock: Rc<UdpSocket>,
    /// Which listening socket the client used: replies leave from it.
    listener: usize,
    closed: Signal,
}

/// What a drop's log line is told: the relay, the reason, the source.
/// How a drop is logged: (relay, reason, source prefix's keyed hash,
/// class, the shard's running total of drops for the reason).
pub type DropLog = fn(&str, UdpDrop, u64, &str, u64);

/// One relay on one shard.
pub struct RelayIo {
    relay: RefCell<Relay>,
    listeners: Vec<Rc<UdpSocket>>,
    sessions: RefCell<Vec<Option<Rc<SessionIo>>>>,
    stats: Arc<RelayStats>,
    started: Instant,
    generation: Cell<u64>,
    draining: Signal,
    /// The second each reason last logged (at most one line per reason per
    /// second per shard).
    logged_s: RefCell<[u64; UdpDrop::ALL.len()]>,
    log: DropLog,
    /// The reply batch every session of this relay shares (used only
    /// between awaits).
    replies: RefCell<ReplyBuffers>,
}

struct ReplyBuffers {
    data: Vec<u8>,
    lens: [usize; REPLY_BATCH],
}

impl RelayIo {
    /// A relay on `listeners` (bound, non-blocking std sockets) under
    /// `snapshot`'s policy `policy`.
    pub fn new(
        policy: Arc<UdpPolicy>,
        generation: u64,
        listeners: Vec<std::net::UdpSocket>,
        (seed, board): ([u8; 16], Arc<crate::replay::ReplayBoard>),
        stats: Arc<RelayStats>,
        log: DropLog,
    ) -> std::io::Result<Rc<RelayIo>> {
        let mut socks = Vec::with_capacity(listeners.len());
        for l in listeners {
            l.set_nonblocking(true)?;
            socks.push(Rc::new(UdpSocket::from_std(l)?));
        }
        Ok(Rc::new(RelayIo {
            sessions: RefCell::new(vec![None; policy.session.ceiling.entries()]),
            relay: RefCell::new(Relay::new(policy, seed, board)),
            listeners: socks,
            stats,
            started: Instant::now(),
            generation: Cell::new(generation),
            draining: Signal::default(),
            logged_s: RefCell::new([u64::MAX; UdpDrop::ALL.len()]),
            log,
            replies: RefCell::new(ReplyBuffers {
                data: vec![0; REPLY_BYTES * REPLY_BATCH],
                lens: [0; REPLY_BATCH],
            }),
        }))
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Shares the relay's fleet-scoped budgets (see
    /// [`Relay::enable_fleet`]); its clock's origin is taken now.
    pub fn enable_fleet(&self, seed: [u8; 16], shared_keys: usize) {
        let unix_now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let origin = unix_now_ms.saturating_sub(self.now_ms());
        self.relay
            .borrow_mut()
            .enable_fleet(seed, shared_keys, origin);
    }

    /// The relay's state, for the shard's sync timer (between datagram
    /// batches: the shard runs one task at a time).
    pub fn relay_mut(&self) -> std::cell::RefMut<'_, Relay> {
        self.relay.borrow_mut()
    }

    /// Starts the receive tasks; they end when the relay drains.
    pub fn spawn(self: &Rc<Self>, feed: Rc<dyn PolicyFeed>) {
        for i in 0..self.listeners.len() {
            monoio::spawn(receive_loop(self.clone(), i, feed.clone()));
        }
    }

    /// Publishes the counters (the shard's ticker calls this every second).
    pub fn publish(&self) {
        let r = self.relay.borrow();
        self.stats.publish(&r.counters, r.live_sessions());
    }

    /// Stops receiving, waits [`DRAIN_GRACE_MS`], closes every session.
    pub async fn drain(self: &Rc<Self>) {
        self.draining.raise();
        monoio::time::sleep(Duration::from_millis(DRAIN_GRACE_MS)).await;
        let live = self.relay.borrow().sessions();
        for r in live {
            self.end_session(r);
        }
        self.publish();
    }

    fn end_session(&self, r: SessionRef) {
        self.relay.borrow_mut().close(r);
        self.close_io(r);
    }

    /// Closes session `r`'s socket and ends its task, unless its place now
    /// holds a later session.
    fn close_io(&self, r: SessionRef) {
        let mut sessions = self.sessions.borrow_mut();
        let Some(slot) = sessions.get_mut(r.idx) else {
            return;
        };
        if slot
            .as_ref()
            .is_some_and(|io| io.generation == r.generation)
        {
            if let Some(io) = slot.take() {
                io.closed.raise();
            }
        }
    }

    /// Takes a newer snapshot's policy for this relay, if it has one.
    fn reload(&self, feed: &dyn PolicyFeed) {
        let Some(snap) = feed.newer_than(self.generation.get()) else {
            return;
        };
        self.generation.set(snap.generation);
        let name = self.relay.borrow().policy().name.clone();
        let Some(p) = snap.udp.iter().find(|p| p.name == name) else {
            return;
        };
        let ended = self.relay.borrow_mut().set_policy(p.clone());
        for r in ended {
            self.close_io(r);
        }
        let entries = p.session.ceiling.entries();
        let mut sessions = self.sessions.borrow_mut();
        if sessions.len() != entries {
            sessions.resize(entries, None);
        }
    }

    /// Logs a drop unless its reason logged this second (`now_ms`, the
    /// batch's clock: no clock read per datagram).
    fn note_drop(&self, reason: UdpDrop, src: SocketAddr, class: u8, now_ms: u64) {
        let now_s = now_ms / 1_000;
        {
            let mut logged = self.logged_s.borrow_mut();
            if logged[reason.index()] == now_s {
                return;
            }
            logged[reason.index()] = now_s;
        }
        let relay = self.relay.borrow();
        let prefix = relay.keyer().source(
            gapura_gate::quota::Domain::UdpLog,
            src.ip(),
            gapura_gate::quota::SourcePrefix::BUDGET,
        );
        let policy = relay.policy();
        let class = policy
            .classes
            .get(usize::from(class))
            .map_or("other", |c| c.name.as_str());
        let total = relay.counters.dropped[reason.index()];
        (self.log)(&policy.name, reason, prefix, class, total);
    }

    /// Opens session `r`'s socket towards `server` and starts its task.
    fn open_session(self: &Rc<Self>, r: SessionRef, server: SocketAddr, listener: usize) -> bool {
        let sock = match connect(server) {
            Ok(s) => Rc::new(s),
            Err(_) => return false,
        };
        let io = Rc::new(SessionIo {
            generation: r.generation,
            sock,
            listener,
            closed: Signal::default(),
        });
        if let Some(slot) = self.sessions.borrow_mut().get_mut(r.idx) {
            *slot = Some(io.clone());
        } else {
            return false;
        }
        monoio::spawn(session_loop(self.clone(), r, io));
        true
    }
}

/// A non-blocking UDP socket connected to `server`.
fn connect(server: SocketAddr) -> std::io::Result<UdpSocket> {
    let domain = socket2::Domain::for_address(server);
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    s.set_nonblocking(true)?;
    s.connect(&server.into())?;
    UdpSocket::from_std(s.into())
}

/// Sends `data` on connected socket `fd` without blocking.
fn send(fd: RawFd, data: &[u8]) -> bool {
    // SAFETY: `data` is a valid slice for the call's duration.
    let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), libc::MSG_DONTWAIT) };
    n >= 0
}

async fn receive_loop(relay: Rc<RelayIo>, listener: usize, feed: Rc<dyn PolicyFeed>) {
    let sock = relay.listeners[listener].clone();
    let fd = sock.as_raw_fd();
    let max = relay.relay.borrow().policy().max_datagram_bytes as usize;
    // One byte past the bound, so a datagram one byte too long is seen as
    // such even where MSG_TRUNC is not set.
    let mut batch = Batch::new(BATCH, max + 1);
    loop {
        monoio::select! {
            r = sock.readable(false) => { let _ = r; }
            _ = relay.draining.wait() => {}
        }
        if relay.draining.raised.get() {
            return;
        }
        relay.reload(&*feed);
        let want = relay.relay.borrow().policy().max_datagram_bytes as usize + 1;
        if want != batch.slot {
            batch = Batch::new(BATCH, want);
        }
        loop {
            let n = batch.receive(fd);
            if n == 0 {
                break;
            }
            // One clock read per batch; the wall clock only for envelopes.
            let now_ms = relay.now_ms();
            let sealed = relay.relay.borrow().policy().envelope.is_some();
            let unix_ms = if sealed {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64)
            } else {
                0
            };
            for i in 0..n {
                let (data, cut, src) = batch.get(i);
                let Some(src) = src else { continue };
                let data = if cut {
                    // Longer than the buffer: the bound refuses it unread.
                    &batch.data[i * batch.slot..(i + 1) * batch.slot]
                } else {
                    data
                };
                inbound(&relay, listener, src, data, now_ms, unix_ms);
            }
            if n < BATCH {
                break;
            }
        }
    }
}

fn inbound(
    relay: &Rc<RelayIo>,
    listener: usize,
    src: SocketAddr,
    data: &[u8],
    now_ms: u64,
    unix_ms: u64,
) {
    let decided = relay.relay.borrow_mut().inbound(src, data, now_ms, unix_ms);
    match decided {
        Inbound::Drop { reason, class } => relay.note_drop(reason, src, class, now_ms),
        Inbound::Forward {
            session,
            new,
            server,
            payload,
            class,
        } => {
            if new {
                let addr = relay.relay.borrow().policy().servers[server].addr;
                if !relay.open_session(session, addr, listener) {
                    relay.relay.borrow_mut().unrelayed(session, payload, true);
                    relay.note_drop(UdpDrop::Unrelayed, src, class, now_ms);
                    return;
                }
            }
            let fd = relay
                .sessions
                .borrow()
                .get(session.idx)
                .and_then(|s| s.as_ref().map(|s| s.sock.as_raw_fd()));
            let sent = fd.is_some_and(|fd| send(fd, &data[payload.0..payload.1]));
            if !sent {
                relay.relay.borrow_mut().unrelayed(session, payload, false);
                relay.note_drop(UdpDrop::Unrelayed, src, class, now_ms);
            }
        }
    }
}

async fn session_loop(relay: Rc<RelayIo>, r: SessionRef, io: Rc<SessionIo>) {
    let fd = io.sock.as_raw_fd();
    let out = relay.listeners[io.listener].as_raw_fd();
    let timeout_ms = relay.relay.borrow().policy().session.idle_timeout_ms;
    let sleep = monoio::time::sleep(Duration::from_millis(timeout_ms));
    let mut sleep = std::pin::pin!(sleep);
    loop {
        monoio::select! {
            _ = io.sock.readable(false) => {}
            _ = &mut sleep => {
                let now = relay.now_ms();
                match relay.relay.borrow_mut().idle_check(r, now) {
                    Some(left) => {
                        let at = monoio::time::Instant::now() + Duration::from_millis(left);
                        sleep.as_mut().reset(at);
                    }
                    None => break,
                }
                continue;
            }
            _ = io.closed.wait() => break,
        }
        if io.closed.raised.get() {
            break;
        }
        relay_replies(&relay, r, fd, out);
    }
    relay.end_session(r);
}

/// Drains session `r`'s replies and sends the ones the bound allows to its
/// client, one `sendmmsg` per batch.
fn relay_replies(relay: &RelayIo, r: SessionRef, fd: RawFd, out: RawFd) {
    let mut bufs = relay.replies.borrow_mut();
    let bufs = &mut *bufs;
    loop {
        let mut n = 0;
        while n < REPLY_BATCH {
            let slot = &mut bufs.data[n * REPLY_BYTES..(n + 1) * REPLY_BYTES];
            // SAFETY: `slot` is a valid, writable buffer for the call.
            let got =
                unsafe { libc::recv(fd, slot.as_mut_ptr().cast(), slot.len(), libc::MSG_DONTWAIT) };
            if got < 0 {
                break;
            }
            bufs.lens[n] = got as usize;
            n += 1;
        }
        if n == 0 {
            return;
        }
        let now = relay.now_ms();
        let mut client = None;
        let mut ok = [false; REPLY_BATCH];
        {
            let mut rel = relay.relay.borrow_mut();
            for (i, len) in bufs.lens[..n].iter().enumerate() {
                if let Ok(c) = rel.outbound(r, *len, now) {
                    client = Some(c);
                    ok[i] = true;
                }
            }
        }
        if let Some(client) = client {
            send_batch(out, client, &bufs.data, &bufs.lens[..n], &ok);
        }
        if n < REPLY_BATCH {
            return;
        }
    }
}

/// One `sendmmsg` of the allowed replies to `client`.
fn send_batch(fd: RawFd, client: SocketAddr, data: &[u8], lens: &[usize], ok: &[bool]) {
    let addr = socket2::SockAddr::from(client);
    let mut iov: [MaybeUninit<libc::iovec>; REPLY_BATCH] = [MaybeUninit::uninit(); REPLY_BATCH];
    // SAFETY: mmsghdr is plain data; all zeros is valid.
    let mut msgs: [libc::mmsghdr; REPLY_BATCH] = unsafe { MaybeUninit::zeroed().assume_init() };
    let mut k = 0;
    for (i, &len) in lens.iter().enumerate() {
        if !ok[i] {
            continue;
        }
        iov[k].write(libc::iovec {
            iov_base: data[i * REPLY_BYTES..].as_ptr() as *mut libc::c_void,
            iov_len: len,
        });
        msgs[k].msg_hdr.msg_iov = iov[k].as_mut_ptr();
        msgs[k].msg_hdr.msg_iovlen = 1;
        msgs[k].msg_hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
        msgs[k].msg_hdr.msg_namelen = addr.len();
        k += 1;
    }
    if k == 0 {
        return;
    }
    // SAFETY: the first k headers point at initialised iovecs over `data`
    // and at `addr`, all alive for the call. A failed or short send drops
    // the rest: UDP carries no promise of delivery.
    unsafe {
        libc::sendmmsg(fd, msgs.as_mut_ptr(), k as u32, libc::MSG_DONTWAIT);
    }
}
