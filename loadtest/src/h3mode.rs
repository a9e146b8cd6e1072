//! HTTP/3 (`--http3`, `-m` streams per connection) over QUIC: quinn-proto
//! (sans-IO) driven on the shard's monoio runtime, one UDP socket and one
//! endpoint per connection, and Gapura's own HTTP/3 codec (frames, QPACK
//! without a dynamic table). Each of the `-m` streams of a connection is
//! its own closed loop (or open-loop slot, as `--http2` spreads them); a
//! request is one bidirectional stream: its HEADERS frame (a DATA frame
//! with `--body`), finished; its answer's HEADERS give the status, its
//! DATA frames the bytes read.
//!
//! Per connection, one task drives QUIC (datagrams in and out, timers)
//! and the streams' tasks queue their requests with it and wait for their
//! answers. monoio's timer has millisecond resolution: open-loop sends may
//! start up to 1 ms late.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use gapura_http::codec::h3::{frame, qpack};
use quinn_proto::{ClientConfig, Connection, DatagramEvent, Dir, Endpoint, StreamId};

use crate::ctx::{ShardCtx, Slot};
use crate::stats::{ErrorKind, ShardStats};

/// The largest answer head read.
const MAX_FIELD_SECTION: usize = 64 * 1024;

pub fn run_shard(ctx: ShardCtx) -> Result<ShardStats, String> {
    crate::shard::with_monoio(ctx.cfg.driver, || shard_main(ctx)).and_then(|(s, d)| {
        let mut s = s?;
        s.driver = d;
        s.engine = "quic";
        Ok(s)
    })
}

struct Shared {
    ctx: ShardCtx,
    stats: RefCell<ShardStats>,
    /// Each target's request as frames (HEADERS, then DATA with a body).
    requests: Vec<Bytes>,
    config: ClientConfig,
}

async fn shard_main(ctx: ShardCtx) -> Result<ShardStats, String> {
    let tls = ctx.tls.clone().ok_or("--http3 needs an https:// target")?;
    let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| format!("--http3: {e}"))?;
    let mut config = ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn_proto::TransportConfig::default();
    transport
        .stream_receive_window(quinn_proto::VarInt::from_u32(1 << 20))
        .receive_window(quinn_proto::VarInt::from_u32(1 << 24))
        .max_concurrent_uni_streams(quinn_proto::VarInt::from_u32(8))
        .enable_segmentation_offload(false);
    config.transport_config(Arc::new(transport));
    let requests = ctx
        .cfg
        .targets
        .iter()
        .map(|t| request_frames(&ctx, &t.authority(), &t.path))
        .collect();
    let stats = RefCell::new(ctx.new_stats());
    let sh = Rc::new(Shared {
        ctx,
        stats,
        requests,
        config,
    });
    let tasks: Vec<_> = sh
        .ctx
        .conns
        .clone()
        .map(|g| monoio::spawn(connection(sh.clone(), g)))
        .collect();
    let done = Rc::new(std::cell::Cell::new(false));
    if sh.ctx.progress {
        let (sh, done) = (sh.clone(), done.clone());
        monoio::spawn(async move {
            while !done.get() {
                monoio::time::sleep(Duration::from_millis(200)).await;
                sh.stats.borrow().publish(&sh.ctx.shared.live[sh.ctx.index]);
            }
        });
    }
    for t in tasks {
        t.await;
    }
    done.set(true);
    let stats = sh.stats.borrow().clone();
    Ok(stats)
}

/// A target's request: its HEADERS frame, and its body's DATA frame.
fn request_frames(ctx: &ShardCtx, authority: &str, path: &str) -> Bytes {
    let lower: Vec<(String, String)> = ctx
        .cfg
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "host" | "connection" | "keep-alive" | "transfer-encoding" | "upgrade"
            )
        })
        .collect();
    let mut section = Vec::new();
    qpack::encode_request(
        &mut section,
        (&ctx.cfg.method, "https", authority, path),
        lower.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
    );
    let mut out = Vec::with_capacity(section.len() + ctx.cfg.body.len() + 16);
    frame::write_frame_head(&mut out, frame::HEADERS, section.len() as u64);
    out.extend_from_slice(&section);
    if !ctx.cfg.body.is_empty() {
        frame::write_frame_head(&mut out, frame::DATA, ctx.cfg.body.len() as u64);
        out.extend_from_slice(&ctx.cfg.body);
    }
    Bytes::from(out)
}

/// An answer being read.
#[derive(Default)]
struct Answer {
    /// Bytes read and not yet split into frames.
    raw: Vec<u8>,
    /// What is left of the DATA (or unknown) frame being read.
    frame: Option<(u64, u64)>,
    status: u16,
    bytes: usize,
    done: bool,
    failed: Option<ErrorKind>,
    waker: Option<Waker>,
    /// Request bytes not yet taken by QUIC; the stream is finished once
    /// they are.
    out: Bytes,
    finished: bool,
}

impl Answer {
    /// Splits what was read into frames.
    fn split(&mut self) {
        let mut at = 0;
        loop {
            if let Some((kind, left)) = self.frame {
                let n = (left as usize).min(self.raw.len() - at);
                if kind == frame::DATA {
                    self.bytes += n;
                }
                at += n;
                self.frame = (left > n as u64).then_some((kind, left - n as u64));
                if self.frame.is_some() {
                    break;
                }
                continue;
            }
            let Some(h) = frame::read_frame_head(&self.raw[at..]) else {
                break;
            };
            if h.kind == frame::HEADERS {
                let end = at + h.header_len + h.len as usize;
                if h.len as usize > MAX_FIELD_SECTION {
                    self.failed = Some(ErrorKind::Parse);
                    break;
                }
                if self.raw.len() < end {
                    break;
                }
                if self.status == 0 {
                    match qpack::decode_status(&self.raw[at + h.header_len..end], MAX_FIELD_SECTION)
                    {
                        // An interim answer (1xx) is not the answer.
                        Ok(s) if s >= 200 => self.status = s,
                        Ok(_) => {}
                        Err(_) => self.failed = Some(ErrorKind::Parse),
                    }
                }
                at = end;
            } else {
                at += h.header_len;
                self.frame = (h.len > 0).then_some((h.kind, h.len));
            }
        }
        self.raw.drain(..at);
    }
}

/// One QUIC connection: its endpoint, socket, and answers by stream.
struct Link {
    endpoint: Endpoint,
    q: Connection,
    handle: quinn_proto::ConnectionHandle,
    answers: HashMap<StreamId, Answer>,
    connected: bool,
    lost: bool,
    /// Tasks waiting for the handshake or for a stream to open.
    waiting: Vec<Waker>,
    /// Wakes the driver.
    driver: Option<Waker>,
    dirty: bool,
    control: Option<StreamId>,
}

impl Link {
    fn wake_driver(&mut self) {
        self.dirty = true;
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    fn wake_waiting(&mut self) {
        for w in self.waiting.drain(..) {
            w.wake();
        }
    }

    /// Takes the connection's events: answers read, streams flushed.
    fn events(&mut self) {
        use quinn_proto::{Event, StreamEvent};
        while let Some(ev) = self.q.poll() {
            match ev {
                Event::Connected => {
                    self.connected = true;
                    if let Some(id) = self.q.streams().open(Dir::Uni) {
                        let preface = frame::control_stream_preface(MAX_FIELD_SECTION as u64);
                        let _ = self.q.send_stream(id).write(&preface);
                        self.control = Some(id);
                    }
                    self.wake_waiting();
                }
                Event::ConnectionLost { .. } => {
                    self.lost = true;
                    self.wake_waiting();
                    for a in self.answers.values_mut() {
                        a.failed.get_or_insert(ErrorKind::Read);
                        if let Some(w) = a.waker.take() {
                            w.wake();
                        }
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => self.read(id),
                Event::Stream(StreamEvent::Writable { id }) => self.flush(id),
                Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                    while let Some(id) = self.q.streams().accept(Dir::Uni) {
                        self.drain_uni(id);
                    }
                }
                Event::Stream(StreamEvent::Available { .. }) => self.wake_waiting(),
                _ => {}
            }
        }
    }

    /// The server's unidirectional streams (control, QPACK) are read and
    /// dropped.
    fn drain_uni(&mut self, id: StreamId) {
        if let Ok(mut chunks) = self.q.recv_stream(id).read(true) {
            while let Ok(Some(_)) = chunks.next(usize::MAX) {}
            let _ = chunks.finalize();
        }
    }

    fn read(&mut self, id: StreamId) {
        let Some(a) = self.answers.get_mut(&id) else {
            return self.drain_uni(id);
        };
        if let Ok(mut chunks) = self.q.recv_stream(id).read(true) {
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(c)) => {
                        a.raw.extend_from_slice(&c.bytes);
                        a.split();
                    }
                    Ok(None) => {
                        a.done = true;
                        break;
                    }
                    Err(quinn_proto::ReadError::Blocked) => break,
                    Err(quinn_proto::ReadError::Reset(_)) => {
                        a.failed = Some(ErrorKind::Read);
                        break;
                    }
                }
            }
            let _ = chunks.finalize();
        }
        if a.done && a.status == 0 {
            a.failed.get_or_insert(ErrorKind::Parse);
        }
        if a.done || a.failed.is_some() {
            if let Some(w) = a.waker.take() {
                w.wake();
            }
        }
    }

    fn flush(&mut self, id: StreamId) {
        let Some(a) = self.answers.get_mut(&id) else {
            return;
        };
        let mut send = self.q.send_stream(id);
        if !a.out.is_empty() {
            match send.write(&a.out) {
                Ok(n) => bytes::Buf::advance(&mut a.out, n),
                Err(quinn_proto::WriteError::Blocked) => {}
                Err(_) => a.failed = Some(ErrorKind::Write),
            }
        }
        if a.out.is_empty() && !a.finished {
            let _ = send.finish();
            a.finished = true;
        }
    }
}

/// Opens a connection from a socket of its own and drives it on a task.
async fn dial(sh: &Rc<Shared>, g: usize) -> Result<Rc<RefCell<Link>>, ErrorKind> {
    let ctx = &sh.ctx;
    let addr: SocketAddr = ctx.addr;
    let local: SocketAddr = match (ctx.source(g), addr.is_ipv4()) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, true) => "0.0.0.0:0".parse().unwrap_or(addr),
        (None, false) => "[::]:0".parse().unwrap_or(addr),
    };
    let socket = std::net::UdpSocket::bind(local).map_err(|_| ErrorKind::Connect)?;
    let socket = monoio::net::udp::UdpSocket::from_std(socket).map_err(|_| ErrorKind::Connect)?;
    let mut endpoint = Endpoint::new(Default::default(), None, false, None);
    let host = &ctx.cfg.targets[0].host;
    let (handle, q) = endpoint
        .connect(Instant::now(), sh.config.clone(), addr, host)
        .map_err(|_| ErrorKind::Connect)?;
    let link = Rc::new(RefCell::new(Link {
        endpoint,
        q,
        handle,
        answers: HashMap::new(),
        connected: false,
        lost: false,
        waiting: Vec::new(),
        driver: None,
        dirty: true,
        control: None,
    }));
    monoio::spawn(drive(link.clone(), socket, addr));
    // The handshake, within the timeout the caller sets.
    std::future::poll_fn(|cx| {
        let mut l = link.borrow_mut();
        if l.connected {
            return Poll::Ready(Ok(()));
        }
        if l.lost {
            return Poll::Ready(Err(ErrorKind::Connect));
        }
        l.waiting.push(cx.waker().clone());
        Poll::Pending
    })
    .await?;
    Ok(link)
}

/// Drives one connection until it is lost or closed and drained.
async fn drive(link: Rc<RefCell<Link>>, socket: monoio::net::udp::UdpSocket, to: SocketAddr) {
    let mut recv = std::pin::pin!(socket.recv_from(Vec::with_capacity(65_536)));
    loop {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let next = {
            let mut l = link.borrow_mut();
            let now = Instant::now();
            let l = &mut *l;
            while let Some(ev) = l.q.poll_endpoint_events() {
                if let Some(back) = l.endpoint.handle_event(l.handle, ev) {
                    l.q.handle_event(back);
                }
            }
            l.events();
            let ids: Vec<StreamId> = l.answers.keys().copied().collect();
            for id in ids {
                l.flush(id);
            }
            loop {
                let mut buf = Vec::new();
                match l.q.poll_transmit(now, 1, &mut buf) {
                    Some(t) => {
                        buf.truncate(t.size);
                        out.push(buf);
                    }
                    None => break,
                }
            }
            l.dirty = false;
            if l.q.is_drained() {
                return;
            }
            l.q.poll_timeout()
        };
        for buf in out {
            let _ = socket.send_to(buf, to).await;
        }
        if link.borrow().dirty {
            continue;
        }
        let timer = async {
            match next {
                Some(t) => monoio::time::sleep(t.saturating_duration_since(Instant::now())).await,
                None => std::future::pending().await,
            }
        };
        let woken = std::future::poll_fn(|cx| {
            let mut l = link.borrow_mut();
            if l.dirty {
                return Poll::Ready(());
            }
            l.driver = Some(cx.waker().clone());
            Poll::Pending
        });
        monoio::select! {
            (got, buf) = &mut recv => {
                if let Ok((n, from)) = got {
                    let mut l = link.borrow_mut();
                    let l = &mut *l;
                    let mut resp = Vec::new();
                    let ev = l.endpoint.handle(Instant::now(), from, None, None, BytesMut::from(&buf[..n]), &mut resp);
                    if let Some(DatagramEvent::ConnectionEvent(_, ev)) = ev {
                        l.q.handle_event(ev);
                    }
                }
                let mut buf = buf;
                buf.clear();
                recv.set(socket.recv_from(buf));
            }
            _ = timer => {
                let mut l = link.borrow_mut();
                l.q.handle_timeout(Instant::now());
            }
            _ = woken => {}
        }
    }
}

/// One request on a new stream of `link`: its status and the body bytes
/// read.
async fn exchange(link: &Rc<RefCell<Link>>, request: Bytes) -> Result<(u16, usize), ErrorKind> {
    let id = std::future::poll_fn(|cx| {
        let mut l = link.borrow_mut();
        if l.lost {
            return Poll::Ready(Err(ErrorKind::Write));
        }
        match l.q.streams().open(Dir::Bi) {
            Some(id) => Poll::Ready(Ok(id)),
            None => {
                l.waiting.push(cx.waker().clone());
                Poll::Pending
            }
        }
    })
    .await?;
    {
        let mut l = link.borrow_mut();
        l.answers.insert(
            id,
            Answer {
                out: request,
                ..Answer::default()
            },
        );
        l.flush(id);
        l.wake_driver();
    }
    let got = std::future::poll_fn(|cx| {
        let mut l = link.borrow_mut();
        let Some(a) = l.answers.get_mut(&id) else {
            return Poll::Ready(Err(ErrorKind::Read));
        };
        if let Some(e) = a.failed {
            return Poll::Ready(Err(e));
        }
        if a.done {
            return Poll::Ready(Ok((a.status, a.bytes)));
        }
        a.waker = Some(cx.waker().clone());
        Poll::Pending
    })
    .await;
    link.borrow_mut().answers.remove(&id);
    got
}

async fn connection(sh: Rc<Shared>, g: usize) {
    let ctx = &sh.ctx;
    crate::ctx::sleep_until(ctx.start).await;
    let m = ctx.cfg.streams;
    let mut ks = vec![0u64; m];
    let mut backoff = 1u64;
    loop {
        if ctx.shared.stopped() || (ctx.rate.is_none() && ctx.over(Instant::now())) {
            return;
        }
        let link = match monoio::time::timeout(ctx.cfg.timeout, dial(&sh, g)).await {
            Ok(Ok(l)) => l,
            _ => {
                if ctx.dial_failed(&mut sh.stats.borrow_mut(), g, &mut ks) {
                    return;
                }
                monoio::time::sleep(Duration::from_millis(backoff)).await;
                backoff = (backoff * 2).min(100);
                continue;
            }
        };
        backoff = 1;
        let streams: Vec<_> = (0..m)
            .map(|s| {
                let (sh, link, k) = (sh.clone(), link.clone(), ks[s]);
                monoio::spawn(async move { stream_loop(sh, link, g, s, k).await })
            })
            .collect();
        let mut again = false;
        for (s, t) in streams.into_iter().enumerate() {
            let (k, reconnect) = t.await;
            ks[s] = k;
            again |= reconnect;
        }
        {
            let mut l = link.borrow_mut();
            l.q.close(
                Instant::now(),
                quinn_proto::VarInt::from_u32(0x100),
                Bytes::new(),
            );
            l.wake_driver();
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
    link: Rc<RefCell<Link>>,
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
                crate::ctx::sleep_until(t).await;
                k += 1;
                Some(t)
            }
            Slot::Now => None,
        };
        let turn = ctx.turn(due);
        let req = sh.requests[rot].clone();
        rot = (rot + 1) % sh.requests.len();
        let wait = turn.until.saturating_duration_since(Instant::now());
        let outcome = monoio::time::timeout(wait, exchange(&link, req)).await.ok();
        if let Some(reconnect) = ctx.settle(&mut sh.stats.borrow_mut(), &turn, outcome) {
            return (k, reconnect);
        }
    }
}
