//! HTTP/1.1 over monoio streams: the general path (plain or TLS, closed or
//! open loop, pipelined batches), and the fallback of the direct io_uring engine.
//!
//! Each connection is one task. Closed loop: write a batch of `--pipeline`
//! requests, read until that many responses ended, record each response's
//! latency from the batch's write, repeat. Open loop: one request outstanding
//! per connection, sent at its intended time or as soon as the connection is
//! free after it, latency counted from the intended time (coordinated
//! omission corrected as wrk2 does). Any error closes the connection, is
//! counted by kind, and the task reconnects (with a short backoff after a
//! failed connect).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::ctx::{publish_loop, sleep_until, ShardCtx};
use crate::net::{connect_tcp, server_name, Conn};
use crate::pacer::{pace, Pacer};
use crate::response::ResponseParser;
use crate::stats::{ErrorKind, ShardStats};
use crate::target::RequestSet;

const READ_BUF_BYTES: usize = 64 * 1024;
const MAX_BACKOFF_MS: u64 = 100;

pub async fn shard_main(ctx: ShardCtx) -> ShardStats {
    let ctx = Rc::new(ctx);
    let stats = Rc::new(RefCell::new(ctx.new_stats()));
    let reqs = Rc::new(RequestSet::build(&ctx.cfg, ctx.cfg.pipeline));
    let done = Rc::new(Cell::new(false));
    let publisher = ctx
        .progress
        .then(|| monoio::spawn(publish_loop(ctx.clone(), stats.clone(), done.clone())));
    let tasks: Vec<_> = ctx
        .conns
        .clone()
        .map(|g| monoio::spawn(connection(ctx.clone(), stats.clone(), reqs.clone(), g)))
        .collect();
    for t in tasks {
        t.await;
    }
    done.set(true);
    if let Some(p) = publisher {
        p.await;
    }
    Rc::try_unwrap(stats)
        .ok()
        .expect("all tasks ended")
        .into_inner()
}

enum Step {
    /// Keep going on this connection.
    Continue,
    /// Reconnect (error counted, or the server closed).
    Reconnect,
    /// The run is over for this connection.
    Stop,
}

struct ConnState {
    ctx: Rc<ShardCtx>,
    stats: Rc<RefCell<ShardStats>>,
    reqs: Rc<RequestSet>,
    g: usize,
    rot: usize,
    /// Open-loop schedule position.
    k: u64,
    pacer: Option<Pacer>,
    parser: ResponseParser,
    buf: Vec<u8>,
}

async fn connection(
    ctx: Rc<ShardCtx>,
    stats: Rc<RefCell<ShardStats>>,
    reqs: Rc<RequestSet>,
    g: usize,
) {
    let head_only = reqs.head_only;
    let rot = g % reqs.count;
    let mut st = ConnState {
        ctx,
        stats,
        reqs,
        g,
        rot,
        k: 0,
        pacer: None,
        parser: ResponseParser::new(head_only),
        buf: Vec::with_capacity(READ_BUF_BYTES),
    };
    let mut backoff_ms = 1;
    sleep_until(st.ctx.start).await;
    loop {
        let now = Instant::now();
        if st.ctx.rate.is_none() && st.ctx.over(now) {
            return;
        }
        if st.ctx.rate.is_some()
            && (st.ctx.shared.stopped() || st.ctx.intended(st.g, st.k).is_none())
        {
            return;
        }
        let mut conn = match open(&st.ctx, g).await {
            Some(Ok(c)) => c,
            None => return,
            Some(Err(())) => {
                st.stats
                    .borrow_mut()
                    .error(ErrorKind::Connect, Instant::now());
                // A failed connect uses up a scheduled request (open loop) or one of
                // the -n budget, so runs bounded by count end against a dead target.
                if st.ctx.rate.is_some() {
                    st.k += 1;
                } else if st.ctx.shared.claim(st.ctx.cfg.requests, 1) == 0 {
                    return;
                }
                monoio::time::sleep(Duration::from_millis(backoff_ms)).await;
                backoff_ms = (backoff_ms * 2).min(MAX_BACKOFF_MS);
                continue;
            }
        };
        backoff_ms = 1;
        st.parser.reset();
        st.buf.clear();
        loop {
            match exchange(&mut st, &mut conn).await {
                Step::Continue => {}
                Step::Reconnect => break,
                Step::Stop => return,
            }
        }
    }
}

/// Connects (and completes TLS) within the timeout. None: the run ended meanwhile.
async fn open(ctx: &ShardCtx, g: usize) -> Option<Result<Conn, ()>> {
    let fut = async {
        let tcp = connect_tcp(ctx.addr, ctx.source(g)).await?;
        match &ctx.tls {
            None => Ok(Conn::Plain(tcp)),
            Some(cfg) => {
                let name = server_name(&ctx.cfg.targets[0].host).map_err(std::io::Error::other)?;
                Conn::tls(tcp, cfg.clone(), name).await
            }
        }
    };
    let mut limit = ctx.cfg.timeout;
    if ctx.rate.is_none() {
        if let Some(d) = ctx.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left < limit {
                limit = left;
                return match monoio::time::timeout(limit, fut).await {
                    Ok(r) => Some(r.map_err(|_| ())),
                    Err(_) => None,
                };
            }
        }
    }
    match monoio::time::timeout(limit, fut).await {
        Ok(r) => Some(r.map_err(|_| ())),
        Err(_) => Some(Err(())),
    }
}

/// One batch (closed loop) or one scheduled request (open loop) on `conn`.
async fn exchange(st: &mut ConnState, conn: &mut Conn) -> Step {
    let Some((depth, intended)) = next_batch(st).await else {
        return Step::Stop;
    };
    let sent = match send_batch(st, conn, depth).await {
        Ok(sent) => sent,
        Err(step) => return step,
    };
    let from = intended.unwrap_or(sent);
    let deadline = ReadDeadline::after(&st.ctx, sent);
    await_responses(st, conn, depth, from, deadline).await
}

/// How many requests go out now and, in the open loop, when they were due
/// (after waiting for that time). None: the run is over for this connection.
async fn next_batch(st: &mut ConnState) -> Option<(usize, Option<Instant>)> {
    let ctx = st.ctx.clone();
    if ctx.rate.is_some() {
        let t = ctx.intended(st.g, st.k)?;
        if ctx.shared.stopped() {
            return None;
        }
        pace(&mut st.pacer, t).await;
        st.k += 1;
        return Some((1, Some(t)));
    }
    if ctx.over(Instant::now()) {
        return None;
    }
    let depth = ctx.shared.claim(ctx.cfg.requests, ctx.cfg.pipeline as u64) as usize;
    (depth > 0).then_some((depth, None))
}

/// Writes the next `depth` requests within the timeout; returns when the
/// write started, or the step a failed write leads to (error counted).
async fn send_batch(st: &mut ConnState, conn: &mut Conn, depth: usize) -> Result<Instant, Step> {
    let batch = st.reqs.batch(st.rot, depth);
    st.rot = (st.rot + depth) % st.reqs.count;
    let sent = Instant::now();
    let batch_len = batch.len();
    let write = monoio::time::timeout(st.ctx.cfg.timeout, conn.send(batch)).await;
    let kind = match write {
        Ok(Ok(())) => {
            st.stats.borrow_mut().bytes_written += batch_len as u64;
            return Ok(sent);
        }
        Ok(Err(_)) => ErrorKind::Write,
        Err(_) => ErrorKind::Timeout,
    };
    st.stats.borrow_mut().error(kind, Instant::now());
    Err(Step::Reconnect)
}

/// When reading a batch's responses gives up: the request timeout after the
/// write, or (closed loop) the run's deadline if that comes first, which
/// ends the run rather than counting a timeout.
#[derive(Clone, Copy)]
struct ReadDeadline {
    until: Instant,
    is_timeout: bool,
}

impl ReadDeadline {
    fn after(ctx: &ShardCtx, sent: Instant) -> ReadDeadline {
        let t = sent + ctx.cfg.timeout;
        match (ctx.rate, ctx.deadline) {
            (None, Some(d)) if d < t => ReadDeadline {
                until: d,
                is_timeout: false,
            },
            _ => ReadDeadline {
                until: t,
                is_timeout: true,
            },
        }
    }

    /// The step when the deadline passed: a counted timeout, or the end.
    fn expired(self, stats: &RefCell<ShardStats>, now: Instant) -> Step {
        if self.is_timeout {
            stats.borrow_mut().error(ErrorKind::Timeout, now);
            return Step::Reconnect;
        }
        Step::Stop
    }
}

/// Reads until `depth` responses ended (latency counted from `from`), the
/// server closes, or the deadline passes.
async fn await_responses(
    st: &mut ConnState,
    conn: &mut Conn,
    depth: usize,
    from: Instant,
    deadline: ReadDeadline,
) -> Step {
    let mut got = 0;
    loop {
        let Some((ended, close)) = take_responses(st, depth - got, from) else {
            return Step::Reconnect;
        };
        got += ended;
        if close {
            return Step::Reconnect;
        }
        if got == depth {
            return Step::Continue;
        }
        if let Some(step) = read_more(st, conn, from, deadline).await {
            return step;
        }
    }
}

/// Parses up to `want` responses from what is buffered, records each, and
/// drops the bytes used. Returns how many ended and whether the server will
/// close after the last; None on a parse error (counted).
fn take_responses(st: &mut ConnState, want: usize, from: Instant) -> Option<(usize, bool)> {
    let mut ended = 0;
    let mut pos = 0;
    let mut close = false;
    while ended < want {
        match st.parser.advance(&st.buf[pos..]) {
            Ok((n, Some(done))) => {
                pos += n;
                ended += 1;
                st.stats
                    .borrow_mut()
                    .record(from, Instant::now(), done.status);
                if done.close {
                    close = true;
                    break;
                }
            }
            Ok((n, None)) => {
                pos += n;
                break;
            }
            Err(_) => {
                st.stats
                    .borrow_mut()
                    .error(ErrorKind::Parse, Instant::now());
                return None;
            }
        }
    }
    st.buf.drain(..pos);
    Some((ended, close))
}

/// Reads more of the responses into the buffer before the deadline. None:
/// bytes arrived; otherwise the step the read leads to (EOF, which ends a
/// close-delimited response, an error or the deadline).
async fn read_more(
    st: &mut ConnState,
    conn: &mut Conn,
    from: Instant,
    deadline: ReadDeadline,
) -> Option<Step> {
    let now = Instant::now();
    if now >= deadline.until {
        return Some(deadline.expired(&st.stats, now));
    }
    let buf = std::mem::take(&mut st.buf);
    let before = buf.len();
    let Ok((r, buf)) = monoio::time::timeout(deadline.until - now, conn.recv(buf)).await else {
        // The buffer went with the cancelled read; start a fresh one.
        st.buf = Vec::with_capacity(READ_BUF_BYTES);
        return Some(deadline.expired(&st.stats, Instant::now()));
    };
    st.buf = buf;
    let now = Instant::now();
    match r {
        Ok(0) => {
            if let Some(done) = st.parser.finish_at_eof() {
                st.stats.borrow_mut().record(from, now, done.status);
            } else {
                st.stats.borrow_mut().error(ErrorKind::Read, now);
            }
            Some(Step::Reconnect)
        }
        Ok(_) => {
            st.stats.borrow_mut().read_bytes(st.buf.len() - before, now);
            None
        }
        Err(_) => {
            st.stats.borrow_mut().error(ErrorKind::Read, now);
            Some(Step::Reconnect)
        }
    }
}
