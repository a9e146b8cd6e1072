//! HTTP/2 via the h2 crate (`--http2`, `-m` streams per connection).
//!
//! h2 is written against tokio's I/O traits, so an HTTP/2 shard runs a tokio
//! current-thread runtime (one per pinned shard thread, tasks on a
//! `LocalSet`) instead of monoio. h2c with prior knowledge on http://, ALPN
//! `h2` over rustls on https://. Each of the `-m` streams of a connection is
//! its own closed loop (or open-loop slot: the schedule spreads the rate over
//! connections × streams). tokio's timer has millisecond resolution, so
//! open-loop sends here may start up to 1 ms late (the HTTP/1.1 path uses a
//! timerfd instead).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::ctx::{ShardCtx, Slot};
use crate::stats::{ErrorKind, ShardStats};

pub fn run_shard(ctx: ShardCtx) -> Result<ShardStats, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let local = tokio::task::LocalSet::new();
    let mut s = local.block_on(&rt, shard_main(ctx))?;
    s.driver = "tokio";
    s.engine = "h2";
    Ok(s)
}

struct Shared {
    ctx: ShardCtx,
    stats: RefCell<ShardStats>,
    requests: Vec<http::Request<()>>,
    body: Bytes,
}

async fn shard_main(ctx: ShardCtx) -> Result<ShardStats, String> {
    let mut requests = Vec::new();
    for t in &ctx.cfg.targets {
        let scheme = if t.scheme == crate::target::Scheme::Https {
            "https"
        } else {
            "http"
        };
        let mut b = http::Request::builder()
            .method(
                http::Method::from_bytes(ctx.cfg.method.as_bytes())
                    .map_err(|e| format!("-X: {e}"))?,
            )
            .uri(format!("{scheme}://{}{}", t.authority(), t.path));
        for (k, v) in &ctx.cfg.headers {
            let lower = k.to_ascii_lowercase();
            if matches!(
                lower.as_str(),
                "host" | "connection" | "keep-alive" | "transfer-encoding" | "upgrade"
            ) {
                continue;
            }
            b = b.header(lower, v);
        }
        requests.push(b.body(()).map_err(|e| format!("request: {e}"))?);
    }
    let body = Bytes::from(ctx.cfg.body.clone());
    let stats = RefCell::new(ctx.new_stats());
    let sh = Rc::new(Shared {
        ctx,
        stats,
        requests,
        body,
    });
    let tasks: Vec<_> = sh
        .ctx
        .conns
        .clone()
        .map(|g| tokio::task::spawn_local(connection(sh.clone(), g)))
        .collect();
    let progress = sh.ctx.progress.then(|| {
        let sh = sh.clone();
        tokio::task::spawn_local(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                sh.stats.borrow().publish(&sh.ctx.shared.live[sh.ctx.index]);
            }
        })
    });
    for t in tasks {
        let _ = t.await;
    }
    if let Some(p) = progress {
        p.abort();
        let _ = p.await;
    }
    let sh = Rc::try_unwrap(sh).ok().expect("all tasks ended");
    Ok(sh.stats.into_inner())
}

async fn sleep_until(t: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await;
}

async fn dial(ctx: &ShardCtx, g: usize) -> Result<h2::client::SendRequest<Bytes>, ()> {
    let addr: SocketAddr = ctx.addr;
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(|_| ())?;
    if let Some(ip) = ctx.source(g) {
        sock.bind(SocketAddr::new(ip, 0)).map_err(|_| ())?;
    }
    let tcp = sock.connect(addr).await.map_err(|_| ())?;
    let _ = tcp.set_nodelay(true);
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24);
    match &ctx.tls {
        None => {
            let (send, conn) = builder.handshake::<_, Bytes>(tcp).await.map_err(|_| ())?;
            tokio::task::spawn_local(async move {
                let _ = conn.await;
            });
            Ok(send)
        }
        Some(cfg) => {
            let name = crate::net::server_name(&ctx.cfg.targets[0].host).map_err(|_| ())?;
            let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name, tcp)
                .await
                .map_err(|_| ())?;
            if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(());
            }
            let (send, conn) = builder.handshake::<_, Bytes>(tls).await.map_err(|_| ())?;
            tokio::task::spawn_local(async move {
                let _ = conn.await;
            });
            Ok(send)
        }
    }
}

async fn connection(sh: Rc<Shared>, g: usize) {
    let ctx = &sh.ctx;
    sleep_until(ctx.start).await;
    let m = ctx.cfg.streams;
    let mut ks = vec![0u64; m];
    let mut backoff = 1u64;
    loop {
        if ctx.shared.stopped() || (ctx.rate.is_none() && ctx.over(Instant::now())) {
            return;
        }
        let dialed = tokio::time::timeout(ctx.cfg.timeout, dial(ctx, g)).await;
        let send = match dialed {
            Ok(Ok(s)) => s,
            _ => {
                if ctx.dial_failed(&mut sh.stats.borrow_mut(), g, &mut ks) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(backoff)).await;
                backoff = (backoff * 2).min(100);
                continue;
            }
        };
        backoff = 1;
        let streams: Vec<_> = (0..m)
            .map(|s| {
                let sh = sh.clone();
                let send = send.clone();
                let k = ks[s];
                tokio::task::spawn_local(async move { stream_loop(sh, send, g, s, k).await })
            })
            .collect();
        let mut again = false;
        for (s, t) in streams.into_iter().enumerate() {
            match t.await {
                Ok((k, reconnect)) => {
                    ks[s] = k;
                    again |= reconnect;
                }
                Err(_) => again = true,
            }
        }
        if !again {
            return;
        }
    }
}

/// Runs one stream's loop; returns its schedule position and whether the
/// connection must be replaced.
async fn stream_loop(
    sh: Rc<Shared>,
    send: h2::client::SendRequest<Bytes>,
    g: usize,
    s: usize,
    mut k: u64,
) -> (u64, bool) {
    let ctx = &sh.ctx;
    let mut rot = (g + s) % sh.requests.len();
    loop {
        let due = match ctx.next_slot(g, s, k) {
            Slot::Over => return (k, false),
            Slot::At(t) => {
                sleep_until(t).await;
                k += 1;
                Some(t)
            }
            Slot::Now => None,
        };
        let turn = ctx.turn(due);
        let req = sh.requests[rot].clone();
        rot = (rot + 1) % sh.requests.len();
        let fut = exchange(&sh, send.clone(), req);
        let until = tokio::time::Instant::from_std(turn.until);
        let outcome = tokio::time::timeout_at(until, fut).await.ok();
        if let Some(reconnect) = ctx.settle(&mut sh.stats.borrow_mut(), &turn, outcome) {
            return (k, reconnect);
        }
    }
}

async fn exchange(
    sh: &Shared,
    send: h2::client::SendRequest<Bytes>,
    req: http::Request<()>,
) -> Result<(u16, usize), ErrorKind> {
    let mut send = send.ready().await.map_err(|_| ErrorKind::Write)?;
    let no_body = sh.body.is_empty();
    let (resp, mut body_tx) = send
        .send_request(req, no_body)
        .map_err(|_| ErrorKind::Write)?;
    if !no_body {
        body_tx
            .send_data(sh.body.clone(), true)
            .map_err(|_| ErrorKind::Write)?;
    }
    let resp = resp.await.map_err(|e| {
        if e.is_io() {
            ErrorKind::Read
        } else {
            ErrorKind::Parse
        }
    })?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut bytes = 0;
    while let Some(chunk) = body.data().await {
        let c = chunk.map_err(|_| ErrorKind::Read)?;
        bytes += c.len();
        let _ = body.flow_control().release_capacity(c.len());
    }
    Ok((status, bytes))
}
