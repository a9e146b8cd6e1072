//! The direct io_uring engine: plain closed-loop HTTP/1.1 with the ring
//! driven by hand, for the lowest generator CPU per request (measured: a
//! client through monoio's stream API spends 0.82–0.86× wrk's CPU per
//! request, one driving io_uring itself 0.72–0.74×).
//!
//! One ring per shard, created on the shard thread with SINGLE_ISSUER |
//! DEFER_TASKRUN (`gapura_http::uring::RingUse::SingleThread`: completions
//! are posted only when this thread waits for them, so there are no
//! task-work interruptions). Sockets live in the
//! registered file table (slot = local connection index). Each connection has
//! one multishot recv armed that takes buffers from a provided-buffer ring
//! shared by the shard, so a read needs no submission at all; a batch is one
//! send. Responses are parsed in place in the provided buffer (a partial head
//! is copied aside) and the buffer goes straight back to the ring. A 10 ms
//! timeout op is the tick that checks the deadline, per-request timeouts and
//! the progress counters; the clock is read once per wait.
//!
//! Setup failure (no ring, no buffer ring, first connect refused) returns an
//! error before any request was sent, and the caller falls back to the monoio
//! path. Reconnects during the run are blocking connects bounded by the
//! timeout (on loopback a few microseconds).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gapura_http::uring::{BufRing, RingUse};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::ctx::ShardCtx;
use crate::response::ResponseParser;
use crate::stats::{ErrorKind, ShardStats};
use crate::target::RequestSet;

const BGID: u16 = 7;
const BUF_BYTES: usize = 16 * 1024;
const TICK: Duration = Duration::from_millis(10);
/// Longest wait for a full batch of completions.
const BATCH_WAIT: Duration = Duration::from_micros(200);
const OP_SEND: u64 = 1;
const OP_RECV: u64 = 2;
const OP_TICK: u64 = 3;

fn ud(op: u64, conn: usize, gen: u32) -> u64 {
    op | ((gen as u64 & 0x3fff_ffff) << 2) | ((conn as u64) << 32)
}

fn ud_split(u: u64) -> (u64, usize, u32) {
    (u & 3, (u >> 32) as usize, ((u >> 2) & 0x3fff_ffff) as u32)
}

struct Conn {
    g: usize,
    sock: Option<socket2::Socket>,
    gen: u32,
    parser: ResponseParser,
    pending: Vec<u8>,
    inflight: usize,
    sent_at: Instant,
    rot: usize,
    out: Bytes,
    out_done: usize,
    recv_armed: bool,
    close_after: bool,
    retry_at: Option<Instant>,
    backoff_ms: u64,
}

fn connect_blocking(
    addr: SocketAddr,
    src: Option<std::net::IpAddr>,
    limit: Duration,
) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_nodelay(true)?;
    if let Some(ip) = src {
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    s.connect_timeout(&addr.into(), limit.max(Duration::from_millis(1)))?;
    Ok(s)
}

struct Engine<'a> {
    ctx: &'a ShardCtx,
    reqs: RequestSet,
    conns: Vec<Conn>,
    stats: ShardStats,
    over: bool,
}

/// Runs the shard on the direct engine; an error means nothing was sent yet.
pub fn run_shard(ctx: &ShardCtx) -> Result<ShardStats, String> {
    let n = ctx.conns.len();
    if n == 0 {
        let mut s = ctx.new_stats();
        s.engine = "uring-direct";
        s.driver = "io_uring";
        return Ok(s);
    }
    let entries = ((n * 2 + 8).next_power_of_two()).clamp(256, 32768) as u32;
    let (mut ring, mut bufring, first) = set_up(ctx, n, entries)?;
    let mut eng = Engine::new(ctx, n);
    let tick_ts = types::Timespec::from(TICK);
    let wait = ctx.start.saturating_duration_since(Instant::now());
    std::thread::sleep(wait);
    let mut first = Some(first);
    for i in 0..n {
        let sock = first.take();
        eng.open(&mut ring, i, sock);
    }
    push(
        &mut ring,
        opcode::Timeout::new(&tick_ts).build().user_data(OP_TICK),
    );
    eng.run(&mut ring, &mut bufring, &tick_ts, entries as usize * 4);
    let stats = std::mem::replace(&mut eng.stats, ctx.new_stats());
    drop(eng);
    // The ring first: the kernel writes into the buffer ring's buffers.
    drop(ring);
    drop(bufring);
    Ok(stats)
}

/// The ring with `entries` entries, its registered file table and buffer
/// ring for `n` connections, and the first connection, which proves the
/// target is reachable before committing to this engine.
fn set_up(
    ctx: &ShardCtx,
    n: usize,
    entries: u32,
) -> Result<(IoUring, BufRing, socket2::Socket), String> {
    let count = (n * 4).next_power_of_two().clamp(64, 4096) as u16;
    let ring: IoUring = RingUse::SingleThread
        .build(entries, entries * 4)
        .map_err(|e| format!("ring setup: {e}"))?;
    ring.submitter()
        .register_files_sparse(n as u32)
        .map_err(|e| format!("registered files: {e}"))?;
    let bufring = BufRing::new(ring.as_raw_fd(), BGID, count, BUF_BYTES)
        .map_err(|e| format!("provided buffer ring: {e}"))?;
    let first = connect_blocking(ctx.addr, ctx.source(ctx.conns.start), ctx.cfg.timeout)
        .map_err(|e| format!("connect: {e}"))?;
    Ok((ring, bufring, first))
}

impl<'a> Engine<'a> {
    /// The engine for the shard's `n` connections, none open yet.
    fn new(ctx: &'a ShardCtx, n: usize) -> Engine<'a> {
        let reqs = RequestSet::build(&ctx.cfg, ctx.cfg.pipeline);
        let mut eng = Engine {
            ctx,
            conns: Vec::with_capacity(n),
            stats: ctx.new_stats(),
            over: false,
            reqs,
        };
        eng.stats.engine = "uring-direct";
        eng.stats.driver = "io_uring";
        let head_only = eng.reqs.head_only;
        for g in ctx.conns.clone() {
            eng.conns.push(Conn {
                g,
                sock: None,
                gen: 0,
                parser: ResponseParser::new(head_only),
                pending: Vec::new(),
                inflight: 0,
                sent_at: Instant::now(),
                rot: g % eng.reqs.count,
                out: Bytes::new(),
                out_done: 0,
                recv_armed: false,
                close_after: false,
                retry_at: None,
                backoff_ms: 1,
            });
        }
        eng
    }

    /// Waits for completions and handles them until the run is over or no
    /// connection is left.
    fn run(
        &mut self,
        ring: &mut IoUring,
        bufring: &mut BufRing,
        tick_ts: &types::Timespec,
        cq_entries: usize,
    ) {
        let mut last_publish = Instant::now();
        let mut cqes: Vec<cqueue::Entry> = Vec::with_capacity(cq_entries);
        let batch_wait = types::Timespec::from(BATCH_WAIT);
        loop {
            // Wait for a batch of completions, not one: with DEFER_TASKRUN the
            // kernel wakes this thread only once `want` are pending (or after
            // BATCH_WAIT), so one enter serves many responses. A quarter of the
            // busy connections keeps the other three quarters' requests queued
            // at the server meanwhile.
            let busy = self.conns.iter().filter(|c| c.inflight > 0).count();
            let want = (busy / 4).clamp(1, 64);
            let args = types::SubmitArgs::new().timespec(&batch_wait);
            if let Err(e) = ring.submitter().submit_with_args(want, &args) {
                let code = e.raw_os_error();
                if code != Some(libc::EINTR)
                    && code != Some(libc::EBUSY)
                    && code != Some(libc::ETIME)
                {
                    break;
                }
            }
            let now = Instant::now();
            let mut recycled = false;
            cqes.clear();
            cqes.extend(ring.completion());
            for cqe in cqes.drain(..) {
                let (op, i, gen) = ud_split(cqe.user_data());
                match op {
                    OP_TICK => {
                        if self.ctx.over(now) {
                            self.over = true;
                        }
                        self.tick(ring, now);
                        if self.ctx.progress && now - last_publish >= Duration::from_millis(200) {
                            self.stats.publish(&self.ctx.shared.live[self.ctx.index]);
                            last_publish = now;
                        }
                        push(
                            ring,
                            opcode::Timeout::new(tick_ts).build().user_data(OP_TICK),
                        );
                    }
                    OP_SEND => self.on_send(ring, i, gen, cqe.result(), now),
                    OP_RECV => recycled |= self.on_recv(ring, bufring, &cqe, i, gen, now),
                    _ => {}
                }
            }
            if recycled {
                bufring.publish();
            }
            if self.over
                || self
                    .conns
                    .iter()
                    .all(|c| c.sock.is_none() && c.retry_at.is_none())
            {
                break;
            }
        }
    }

    /// A receive's completion: its bytes to the connection, its buffer back
    /// to the ring (returns whether one went back), its status.
    fn on_recv(
        &mut self,
        ring: &mut IoUring,
        bufring: &mut BufRing,
        cqe: &cqueue::Entry,
        i: usize,
        gen: u32,
        now: Instant,
    ) -> bool {
        let res = cqe.result();
        let flags = cqe.flags();
        let bid = cqueue::buffer_select(flags);
        if let Some(b) = bid {
            if res > 0 && self.conns[i].gen == gen {
                self.on_data(ring, i, bufring.buf(b, res as usize), now);
            }
            bufring.push(b);
        }
        if self.conns[i].gen == gen {
            self.on_recv_status(ring, i, res, cqueue::more(flags), now);
        }
        bid.is_some()
    }
}

fn push(ring: &mut IoUring, e: squeue::Entry) {
    // SAFETY: every buffer an entry points to outlives the operation: request
    // bytes are held in the connection until its send completes, the tick's
    // timespec lives for the whole loop, and recv buffers belong to the ring.
    unsafe {
        while ring.submission().push(&e).is_err() {
            let _ = ring.submit();
        }
    }
}

impl Engine<'_> {
    /// Installs a connected socket (or connects) in slot `i` and starts its first batch.
    fn open(&mut self, ring: &mut IoUring, i: usize, sock: Option<socket2::Socket>) {
        let now = Instant::now();
        let c = &mut self.conns[i];
        let sock = match sock {
            Some(s) => Ok(s),
            None => {
                let mut limit = self.ctx.cfg.timeout;
                if let Some(d) = self.ctx.deadline {
                    limit = limit.min(d.saturating_duration_since(now));
                }
                connect_blocking(self.ctx.addr, self.ctx.source(c.g), limit)
            }
        };
        let sock = match sock {
            Ok(s) => s,
            Err(_) => {
                self.stats.error(ErrorKind::Connect, Instant::now());
                if self.ctx.shared.claim(self.ctx.cfg.requests, 1) == 0 {
                    c.retry_at = None;
                    return;
                }
                c.retry_at = Some(Instant::now() + Duration::from_millis(c.backoff_ms));
                c.backoff_ms = (c.backoff_ms * 2).min(100);
                return;
            }
        };
        if ring
            .submitter()
            .register_files_update(i as u32, &[sock.as_raw_fd()])
            .is_err()
        {
            self.stats.error(ErrorKind::Connect, Instant::now());
            c.retry_at = Some(Instant::now() + Duration::from_millis(10));
            return;
        }
        c.sock = Some(sock);
        c.gen = c.gen.wrapping_add(1) & 0x3fff_ffff;
        c.parser.reset();
        c.pending.clear();
        c.inflight = 0;
        c.close_after = false;
        c.retry_at = None;
        c.backoff_ms = 1;
        c.recv_armed = true;
        push(
            ring,
            opcode::RecvMulti::new(types::Fixed(i as u32), BGID)
                .build()
                .user_data(ud(OP_RECV, i, c.gen)),
        );
        self.start_batch(ring, i, Instant::now());
    }

    /// Drops connection `i` and reconnects it unless the run is over.
    fn reset(&mut self, ring: &mut IoUring, i: usize) {
        let c = &mut self.conns[i];
        c.sock = None; // closes our descriptor; the slot update below drops the ring's reference
        c.gen = c.gen.wrapping_add(1) & 0x3fff_ffff;
        c.inflight = 0;
        c.recv_armed = false;
        let _ = ring.submitter().register_files_update(i as u32, &[-1]);
        if !self.over {
            self.open(ring, i, None);
        }
    }

    fn start_batch(&mut self, ring: &mut IoUring, i: usize, now: Instant) {
        if self.over || self.ctx.over(now) {
            self.over = self.over
                || self.ctx.deadline.is_some_and(|d| now >= d)
                || self.ctx.shared.stopped();
            return;
        }
        let depth =
            self.ctx
                .shared
                .claim(self.ctx.cfg.requests, self.ctx.cfg.pipeline as u64) as usize;
        let c = &mut self.conns[i];
        if depth == 0 {
            c.sock = None;
            let _ = ring.submitter().register_files_update(i as u32, &[-1]);
            return;
        }
        c.out = self.reqs.batch(c.rot, depth);
        c.rot = (c.rot + depth) % self.reqs.count;
        c.out_done = 0;
        c.inflight = depth;
        c.sent_at = now;
        self.stats.bytes_written += c.out.len() as u64;
        // MSG_WAITALL makes the kernel finish short sends itself, and a send
        // that completes in full posts no completion at all (SKIP_SUCCESS):
        // only failures and short sends come back.
        let e = opcode::Send::new(types::Fixed(i as u32), c.out.as_ptr(), c.out.len() as u32)
            .flags(libc::MSG_WAITALL)
            .build()
            .flags(squeue::Flags::SKIP_SUCCESS)
            .user_data(ud(OP_SEND, i, c.gen));
        push(ring, e);
    }

    fn on_send(&mut self, ring: &mut IoUring, i: usize, gen: u32, res: i32, now: Instant) {
        let c = &mut self.conns[i];
        if c.gen != gen {
            return;
        }
        if res < 0 {
            self.stats.error(ErrorKind::Write, now);
            self.reset(ring, i);
            return;
        }
        // A short send: `res` bytes of the unsent part went out.
        c.out_done += res as usize;
        if c.out_done < c.out.len() {
            let rest = &c.out[c.out_done..];
            let e = opcode::Send::new(types::Fixed(i as u32), rest.as_ptr(), rest.len() as u32)
                .flags(libc::MSG_WAITALL)
                .build()
                .flags(squeue::Flags::SKIP_SUCCESS)
                .user_data(ud(OP_SEND, i, c.gen));
            push(ring, e);
        }
    }

    fn on_data(&mut self, ring: &mut IoUring, i: usize, data: &[u8], now: Instant) {
        self.stats.read_bytes(data.len(), now);
        let c = &mut self.conns[i];
        let mut pending = std::mem::take(&mut c.pending);
        let src: &[u8] = if pending.is_empty() {
            data
        } else {
            pending.extend_from_slice(data);
            &pending
        };
        let mut pos = 0;
        let mut batch_done = false;
        let mut broken = false;
        loop {
            match c.parser.advance(&src[pos..]) {
                Ok((n, Some(done))) => {
                    pos += n;
                    if c.inflight > 0 {
                        c.inflight -= 1;
                        self.stats.record(c.sent_at, now, done.status);
                        batch_done = c.inflight == 0;
                    }
                    if done.close {
                        c.close_after = true;
                        break;
                    }
                }
                Ok((n, None)) => {
                    pos += n;
                    break;
                }
                Err(_) => {
                    self.stats.error(ErrorKind::Parse, now);
                    broken = true;
                    break;
                }
            }
        }
        if !broken && pos < src.len() {
            let rest = src[pos..].to_vec();
            pending.clear();
            pending.extend_from_slice(&rest);
        } else {
            pending.clear();
        }
        c.pending = pending;
        if broken || c.close_after {
            self.reset(ring, i);
        } else if batch_done {
            self.start_batch(ring, i, now);
        }
    }

    fn on_recv_status(&mut self, ring: &mut IoUring, i: usize, res: i32, more: bool, now: Instant) {
        let c = &mut self.conns[i];
        if c.sock.is_none() {
            return;
        }
        if res == 0 {
            if let Some(done) = c.parser.finish_at_eof() {
                if c.inflight > 0 {
                    self.stats.record(c.sent_at, now, done.status);
                }
            } else if c.inflight > 0 {
                self.stats.error(ErrorKind::Read, now);
            }
            self.reset(ring, i);
            return;
        }
        if res < 0 && res != -libc::ENOBUFS {
            self.stats.error(ErrorKind::Read, now);
            self.reset(ring, i);
            return;
        }
        if !more {
            push(
                ring,
                opcode::RecvMulti::new(types::Fixed(i as u32), BGID)
                    .build()
                    .user_data(ud(OP_RECV, i, c.gen)),
            );
        }
    }

    /// Request timeouts and reconnect retries.
    fn tick(&mut self, ring: &mut IoUring, now: Instant) {
        if self.over {
            return;
        }
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.sock.is_some()
                && c.inflight > 0
                && now.saturating_duration_since(c.sent_at) >= self.ctx.cfg.timeout
            {
                self.stats.error(ErrorKind::Timeout, now);
                self.reset(ring, i);
            } else if c.sock.is_none() && c.retry_at.is_some_and(|t| now >= t) {
                self.open(ring, i, None);
            }
        }
    }
}
