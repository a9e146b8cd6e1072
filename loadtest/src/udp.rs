//! UDP mode: `udp://host:port`. Each of the `-c` sockets sends the payload and
//! waits for one reply (closed loop), or sends on the open-loop schedule with
//! one datagram outstanding. A reply ends a request (latency recorded, counted
//! under status 0 in the histograms); no reply within `--timeout` counts a
//! timeout and the socket is replaced, so a late reply can never be taken for
//! the answer to a later datagram.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use monoio::net::udp::UdpSocket;

use crate::ctx::{publish_loop, sleep_until, ShardCtx};
use crate::net::start_connect;
use crate::pacer::pace;
use crate::stats::{ErrorKind, ShardStats};

pub async fn shard_main(ctx: ShardCtx) -> ShardStats {
    let ctx = Rc::new(ctx);
    let stats = Rc::new(RefCell::new(ctx.new_stats()));
    let done = Rc::new(Cell::new(false));
    let publisher = ctx
        .progress
        .then(|| monoio::spawn(publish_loop(ctx.clone(), stats.clone(), done.clone())));
    let tasks: Vec<_> = ctx
        .conns
        .clone()
        .map(|g| monoio::spawn(socket_loop(ctx.clone(), stats.clone(), g)))
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

fn open(ctx: &ShardCtx, g: usize) -> io::Result<UdpSocket> {
    let sock = start_connect(ctx.addr, ctx.source(g), false)?;
    let std: std::net::UdpSocket = sock.into();
    UdpSocket::from_std(std)
}

async fn socket_loop(ctx: Rc<ShardCtx>, stats: Rc<RefCell<ShardStats>>, g: usize) {
    let payload = ctx.cfg.payload.clone();
    let mut k = 0u64;
    let mut pacer = None;
    let mut sock: Option<UdpSocket> = None;
    let mut rbuf: Vec<u8> = Vec::with_capacity(65_536);
    sleep_until(ctx.start).await;
    loop {
        let from = if ctx.rate.is_some() {
            let Some(t) = ctx.intended(g, k) else { return };
            if ctx.shared.stopped() {
                return;
            }
            pace(&mut pacer, t).await;
            k += 1;
            Some(t)
        } else {
            if ctx.over(Instant::now()) || ctx.shared.claim(ctx.cfg.requests, 1) == 0 {
                return;
            }
            None
        };
        if sock.is_none() {
            match open(&ctx, g) {
                Ok(s) => sock = Some(s),
                Err(_) => {
                    stats.borrow_mut().error(ErrorKind::Connect, Instant::now());
                    monoio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let s = sock.as_ref().expect("socket opened above");
        let sent = Instant::now();
        let (r, p) = s.send(payload.clone()).await;
        drop(p);
        match r {
            Ok(n) => {
                let mut st = stats.borrow_mut();
                st.udp_sent += 1;
                st.bytes_written += n as u64;
            }
            Err(_) => {
                stats.borrow_mut().error(ErrorKind::Write, Instant::now());
                sock = None;
                continue;
            }
        }
        let mut until = sent + ctx.cfg.timeout;
        let mut is_timeout = true;
        if let (None, Some(d)) = (ctx.rate, ctx.deadline) {
            if d < until {
                until = d;
                is_timeout = false;
            }
        }
        let wait = until.saturating_duration_since(Instant::now());
        match monoio::time::timeout(wait, s.recv(std::mem::take(&mut rbuf))).await {
            Ok((r, b)) => {
                rbuf = b;
                let now = Instant::now();
                match r {
                    Ok(n) => {
                        let mut st = stats.borrow_mut();
                        st.read_bytes(n, now);
                        st.record(from.unwrap_or(sent), now, 0);
                    }
                    Err(_) => {
                        stats.borrow_mut().error(ErrorKind::Read, now);
                        sock = None;
                    }
                }
            }
            Err(_) => {
                rbuf = Vec::with_capacity(65_536);
                sock = None;
                if !is_timeout {
                    return;
                }
                stats.borrow_mut().error(ErrorKind::Timeout, Instant::now());
            }
        }
    }
}
