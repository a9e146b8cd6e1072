//! The floor: a minimal HTTP/1.1 reverse proxy (or fixed responder) that
//! does only the essential work of one (parse the request head, write a
//! rewritten head upstream, parse the response head, write a rewritten head
//! and the body to the client), with none of Gapura's features, on one
//! thread. It is what the comparison measures Gapura against to tell its
//! own cost from the kernel's and the runtime's.
//!
//! Two engines:
//!
//! - `monoio` (module `monoio_engine`): tasks on the runtime Gapura's
//!   shards run on (the same ring flags, `gapura_http::driver`), reading
//!   and writing through its stream API: one receive submitted per read,
//!   one timer-free send per write.
//! - `ring` (module `uring_engine`): the ring driven directly
//!   (`gapura_http::uring`): sockets in the registered file table, one
//!   multishot receive per socket taking buffers from a provided-buffer
//!   ring (no receive submitted per read, no poll re-armed), sends
//!   submitted in batches, `SINGLE_ISSUER | DEFER_TASKRUN`.
//! - `glommio` (module `glommio_engine`, built with the `glommio` feature):
//!   the same tasks on glommio's executor and its own io_uring rings,
//!   through its `AsyncRead`/`AsyncWrite` streams, to weigh glommio
//!   against monoio on the same work (docs/design-notes.md).
//!
//! Each client connection gets its own upstream connection, opened when it
//! is accepted: with one request in flight per client, what a pool of
//! keep-alive upstream connections amounts to. Requests have no bodies
//! (the benchmarks send GETs); responses are framed by Content-Length.
//!
//!   floor-proxy --listen PORT (--upstream PORT | --respond) [--engine ring|monoio|glommio]
//!               [--work-ns N] [--dated]
//!
//! `--work-ns N` adds about N ns of user-space work to every request (a
//! dependent chain of integer steps, its length calibrated at start): the
//! floor with a known extra cost, to read what a ratio of CPU per request
//! to the floor's means in nanoseconds of a server's own work.
//!
//! `--dated` (with `--respond --engine monoio`) answers what a server must
//! answer beyond the floor's minimum: a `Date` line in the fixed 200 (RFC
//! 9110, 6.6.1: an origin server with a clock sends one), formatted once a
//! second by a task, so the runtime always has a timer pending, as a
//! server with read and write timeouts does, and its ring waits with a
//! timeout.
//!
//! `--listen 0` takes a free port and prints it on standard output.
//!
//! Loopback only; it runs until killed.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};

const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n";
/// The fixed answer's head up to where `--dated` puts its `Date` line.
const STATUS_LINE: &[u8] = b"HTTP/1.1 200 OK\r\n";
const DATE_LINE_LEN: usize = gapura_http::server::date::DATE_LINE_LEN;
const DATED_LEN: usize = ANSWER.len() + DATE_LINE_LEN;

/// `--dated` (respond, monoio engine): the answer carries a `Date` line.
static DATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// The dated answer, formatted again once a second by a task of the
    /// runtime (`monoio_engine::run`).
    static DATED_ANSWER: std::cell::Cell<[u8; DATED_LEN]> =
        const { std::cell::Cell::new([0; DATED_LEN]) };
}

/// Formats the dated answer for the wall clock's second.
fn date_answer() {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut a = [0u8; DATED_LEN];
    let (status, rest) = a.split_at_mut(STATUS_LINE.len());
    status.copy_from_slice(STATUS_LINE);
    let (date, rest) = rest.split_at_mut(DATE_LINE_LEN);
    date.copy_from_slice(&gapura_http::server::date::format_date_line(secs));
    rest.copy_from_slice(&ANSWER[STATUS_LINE.len()..]);
    DATED_ANSWER.with(|c| c.set(a));
}

const MAX_HEAD: usize = 16 * 1024;

struct Args {
    /// 0: a free port, printed on standard output once listening.
    listen: Option<u16>,
    upstream: Option<SocketAddr>,
    ring: bool,
    glommio: bool,
    work_ns: u64,
    dated: bool,
}

/// The steps of `--work-ns` per request (0: none), set once at start.
static WORK_STEPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `steps` dependent integer steps the compiler cannot fold.
#[inline(never)]
fn work(steps: u64) -> u64 {
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..steps {
        x = std::hint::black_box(x.rotate_left(5) ^ 0x5851_f42d);
    }
    x
}

/// How many [`work`] steps take about `ns` nanoseconds here (the median of
/// five timings of a million steps).
fn calibrate(ns: u64) -> u64 {
    const STEPS: u64 = 1_000_000;
    let mut per_step: Vec<f64> = (0..5)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(work(STEPS));
            t.elapsed().as_nanos() as f64 / STEPS as f64
        })
        .collect();
    per_step.sort_by(f64::total_cmp);
    (ns as f64 / per_step[2]).round() as u64
}

fn args() -> Args {
    let mut a = Args {
        listen: None,
        upstream: None,
        ring: true,
        glommio: false,
        work_ns: 0,
        dated: false,
    };
    let mut it = std::env::args().skip(1);
    let usage = "floor-proxy --listen PORT (--upstream PORT | --respond) [--engine ring|monoio|glommio] [--work-ns N] [--dated]";
    while let Some(x) = it.next() {
        match x.as_str() {
            "--listen" => a.listen = Some(it.next().and_then(|v| v.parse().ok()).expect(usage)),
            "--upstream" => {
                let p: u16 = it.next().and_then(|v| v.parse().ok()).expect(usage);
                a.upstream = Some(SocketAddr::from(([127, 0, 0, 1], p)));
            }
            "--respond" => a.upstream = None,
            "--engine" => {
                let engine = it.next();
                a.ring = engine.as_deref() == Some("ring");
                a.glommio = engine.as_deref() == Some("glommio");
            }
            "--work-ns" => a.work_ns = it.next().and_then(|v| v.parse().ok()).expect(usage),
            "--dated" => a.dated = true,
            _ => panic!("{usage}"),
        }
    }
    assert!(a.listen.is_some(), "{usage}");
    assert!(
        !a.dated || (!a.ring && !a.glommio && a.upstream.is_none()),
        "--dated answers with --respond on --engine monoio"
    );
    a
}

/// Copies header fields but the hop-by-hop ones (`Connection`,
/// `Keep-Alive`) to `out`, one `Name: value` line each.
fn copy_fields(fields: &[httparse::Header<'_>], out: &mut Vec<u8>) {
    for h in fields {
        if h.name.eq_ignore_ascii_case("connection") || h.name.eq_ignore_ascii_case("keep-alive") {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// Parses one request head at the front of `buf` and appends it,
/// rewritten for the upstream (hop-by-hop fields dropped, the client's
/// address added), to `out`; or, with no upstream, appends the fixed
/// answer. Returns the head's length; `Ok(0)`: incomplete.
fn request(buf: &[u8], out: &mut Vec<u8>, upstream: bool) -> Result<usize, ()> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut fields);
    let n = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(0),
        _ => return Err(()),
    };
    let steps = WORK_STEPS.load(std::sync::atomic::Ordering::Relaxed);
    if steps > 0 {
        work(steps);
    }
    if !upstream {
        if DATED.load(std::sync::atomic::Ordering::Relaxed) {
            out.extend_from_slice(&DATED_ANSWER.with(std::cell::Cell::get));
        } else {
            out.extend_from_slice(ANSWER);
        }
        return Ok(n);
    }
    out.extend_from_slice(req.method.unwrap_or("GET").as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.path.unwrap_or("/").as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    copy_fields(req.headers, out);
    out.extend_from_slice(b"X-Forwarded-For: 127.0.0.1\r\n\r\n");
    Ok(n)
}

/// Parses one whole response at the front of `buf` and appends it, its
/// head rewritten (hop-by-hop fields dropped), to `out`. Returns its
/// length; `Ok(0)`: incomplete.
fn response(buf: &[u8], out: &mut Vec<u8>) -> Result<usize, ()> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut fields);
    let n = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => return Ok(0),
        _ => return Err(()),
    };
    let mut len = 0usize;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            len = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or(())?;
        }
    }
    if buf.len() < n + len {
        return Ok(0);
    }
    // Three digits, written without the formatting machinery.
    let code = resp.code.unwrap_or(502).clamp(100, 999);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&[
        b'0' + (code / 100) as u8,
        b'0' + (code / 10 % 10) as u8,
        b'0' + (code % 10) as u8,
        b' ',
    ]);
    out.extend_from_slice(resp.reason.unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    copy_fields(resp.headers, out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&buf[n..n + len]);
    Ok(n + len)
}

/// Feeds `data` through `parse`, holding an incomplete rest in `held`.
/// `Err` on a malformed or oversized message.
fn feed(
    held: &mut Vec<u8>,
    data: &[u8],
    out: &mut Vec<u8>,
    mut parse: impl FnMut(&[u8], &mut Vec<u8>) -> Result<usize, ()>,
) -> Result<(), ()> {
    let whole: &[u8] = if held.is_empty() {
        data
    } else {
        held.extend_from_slice(data);
        held
    };
    let mut at = 0;
    loop {
        let n = parse(&whole[at..], out)?;
        if n == 0 {
            break;
        }
        at += n;
    }
    let rest = whole[at..].to_vec();
    *held = rest;
    Ok(())
}

fn listener(port: u16) -> TcpListener {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    s.listen(4096).unwrap();
    s.into()
}

fn main() {
    let a = args();
    if a.work_ns > 0 {
        WORK_STEPS.store(calibrate(a.work_ns), std::sync::atomic::Ordering::Relaxed);
    }
    DATED.store(a.dated, std::sync::atomic::Ordering::Relaxed);
    let port = a.listen.unwrap_or_default();
    let l = listener(port);
    if port == 0 {
        println!("{}", l.local_addr().unwrap().port());
    }
    if a.glommio {
        #[cfg(feature = "glommio")]
        glommio_engine::run(l, a.upstream);
        #[cfg(not(feature = "glommio"))]
        panic!("--engine glommio: build with --features glommio");
    } else if a.ring {
        uring_engine::run(l, a.upstream);
    } else {
        monoio_engine::run(l, a.upstream);
    }
}

mod monoio_engine {
    use super::*;
    use monoio::io::{AsyncReadRent, AsyncWriteRentExt};

    pub fn run(l: TcpListener, upstream: Option<SocketAddr>) {
        let driver = gapura_http::driver::Driver::IoUring;
        gapura_http::driver::block_on(driver, 4096, |_| async move {
            l.set_nonblocking(true).unwrap();
            let l = monoio::net::TcpListener::from_std(l).unwrap();
            if DATED.load(std::sync::atomic::Ordering::Relaxed) {
                // Like a server's ticker: the runtime always has a timer
                // pending, as it does with any timeout armed.
                date_answer();
                monoio::spawn(async {
                    loop {
                        monoio::time::sleep(std::time::Duration::from_secs(1)).await;
                        date_answer();
                    }
                });
            }
            loop {
                let Ok((c, _)) = l.accept().await else {
                    continue;
                };
                monoio::spawn(serve(c, upstream));
            }
        })
        .expect("io_uring");
    }

    async fn serve(mut c: monoio::net::TcpStream, upstream: Option<SocketAddr>) {
        let _ = c.set_nodelay(true);
        let mut up = match upstream {
            Some(addr) => match monoio::net::TcpStream::connect_addr(addr).await {
                Ok(u) => {
                    let _ = u.set_nodelay(true);
                    Some(u)
                }
                Err(_) => return,
            },
            None => None,
        };
        let mut buf = Vec::with_capacity(4096);
        let mut held = Vec::new();
        let mut uheld = Vec::new();
        let mut out = Vec::with_capacity(4096);
        let mut ubuf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            let (r, b) = c.read(buf).await;
            buf = b;
            if !matches!(r, Ok(n) if n > 0) {
                return;
            }
            out.clear();
            if feed(&mut held, &buf, &mut out, |x, o| {
                request(x, o, up.is_some())
            })
            .is_err()
            {
                return;
            }
            if out.is_empty() {
                continue;
            }
            if let Some(u) = up.as_mut() {
                let (r, o) = u.write_all(out).await;
                out = o;
                if r.is_err() {
                    return;
                }
                out.clear();
                while out.is_empty() {
                    ubuf.clear();
                    let (r, b) = u.read(ubuf).await;
                    ubuf = b;
                    if !matches!(r, Ok(n) if n > 0) {
                        return;
                    }
                    if feed(&mut uheld, &ubuf, &mut out, response).is_err() {
                        return;
                    }
                }
            }
            let (r, o) = c.write_all(out).await;
            out = o;
            if r.is_err() {
                return;
            }
        }
    }
}

#[cfg(feature = "glommio")]
mod glommio_engine {
    use super::*;
    use futures_lite::{AsyncReadExt, AsyncWriteExt};

    pub fn run(l: TcpListener, upstream: Option<SocketAddr>) {
        let addr = l.local_addr().unwrap();
        drop(l);
        let ex = glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor");
        ex.run(async move {
            let l = glommio::net::TcpListener::bind(addr).expect("bind");
            loop {
                let Ok(c) = l.accept().await else {
                    continue;
                };
                glommio::spawn_local(serve(c, upstream)).detach();
            }
        });
    }

    async fn serve(mut c: glommio::net::TcpStream, upstream: Option<SocketAddr>) {
        let _ = c.set_nodelay(true);
        let mut up = match upstream {
            Some(addr) => match glommio::net::TcpStream::connect(addr).await {
                Ok(u) => {
                    let _ = u.set_nodelay(true);
                    Some(u)
                }
                Err(_) => return,
            },
            None => None,
        };
        let mut buf = vec![0u8; 4096];
        let mut ubuf = vec![0u8; 4096];
        let mut held = Vec::new();
        let mut uheld = Vec::new();
        let mut out = Vec::with_capacity(4096);
        loop {
            let n = match c.read(&mut buf).await {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            out.clear();
            if feed(&mut held, &buf[..n], &mut out, |x, o| {
                request(x, o, up.is_some())
            })
            .is_err()
            {
                return;
            }
            if out.is_empty() {
                continue;
            }
            if let Some(u) = up.as_mut() {
                if u.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
                while out.is_empty() {
                    let n = match u.read(&mut ubuf).await {
                        Ok(n) if n > 0 => n,
                        _ => return,
                    };
                    if feed(&mut uheld, &ubuf[..n], &mut out, response).is_err() {
                        return;
                    }
                }
            }
            if c.write_all(&out).await.is_err() {
                return;
            }
        }
    }
}

mod uring_engine {
    use super::*;
    use gapura_http::uring::{BufRing, RingUse};
    use io_uring::{cqueue, opcode, squeue, types, IoUring};

    const BGID: u16 = 1;
    const PAIRS: usize = 8192;
    const OP_ACCEPT: u64 = 0;
    const OP_RECV: u64 = 1;
    const OP_SEND: u64 = 2;
    const OP_CLOSE: u64 = 3;

    fn ud(op: u64, slot: u32, gen: u32) -> u64 {
        op | ((gen as u64) << 2) | ((slot as u64) << 40)
    }

    fn split(u: u64) -> (u64, u32, u32) {
        (u & 3, (u >> 40) as u32, ((u & ((1 << 40) - 1)) >> 2) as u32)
    }

    /// One direction's output: the bytes being sent and those queued
    /// behind them.
    #[derive(Default)]
    struct Out {
        sending: Vec<u8>,
        sent: usize,
        next: Vec<u8>,
        busy: bool,
    }

    #[derive(Default)]
    struct Pair {
        gen: u32,
        open: bool,
        /// Incomplete request head / response.
        held: Vec<u8>,
        uheld: Vec<u8>,
        /// To the upstream (slot 2i+1), to the client (slot 2i).
        to_up: Out,
        to_client: Out,
    }

    fn push(ring: &mut IoUring, e: squeue::Entry) {
        // SAFETY: every entry's buffers live in `Pair`s that stay put (the
        // pairs are allocated once) until their completion.
        while unsafe { ring.submission().push(&e) }.is_err() {
            ring.submit().expect("submit");
        }
    }

    fn send(ring: &mut IoUring, slot: u32, gen: u32, o: &mut Out) {
        if o.busy {
            return;
        }
        if o.sent == o.sending.len() {
            if o.next.is_empty() {
                return;
            }
            std::mem::swap(&mut o.sending, &mut o.next);
            o.next.clear();
            o.sent = 0;
        }
        o.busy = true;
        let rest = &o.sending[o.sent..];
        push(
            ring,
            opcode::Send::new(types::Fixed(slot), rest.as_ptr(), rest.len() as u32)
                .build()
                .user_data(ud(OP_SEND, slot, gen)),
        );
    }

    fn arm(ring: &mut IoUring, slot: u32, gen: u32) {
        push(
            ring,
            opcode::RecvMulti::new(types::Fixed(slot), BGID)
                .build()
                .user_data(ud(OP_RECV, slot, gen)),
        );
    }

    pub fn run(l: TcpListener, upstream: Option<SocketAddr>) {
        let mut ring = RingUse::SingleThread.build(4096, 65536).expect("ring");
        ring.submitter()
            .register_files_sparse((PAIRS * 2) as u32)
            .expect("registered files");
        let mut bufs = BufRing::new(ring.as_raw_fd(), BGID, 4096, 4096).expect("buffer ring");
        let mut pairs: Vec<Pair> = (0..PAIRS).map(|_| Pair::default()).collect();
        let mut free: Vec<u32> = (0..PAIRS as u32).rev().collect();
        let lfd = l.as_raw_fd();
        push(
            &mut ring,
            opcode::AcceptMulti::new(types::Fd(lfd))
                .build()
                .user_data(ud(OP_ACCEPT, 0, 0)),
        );
        let mut cqes = Vec::with_capacity(4096);
        loop {
            ring.submit_and_wait(1).expect("wait");
            cqes.clear();
            cqes.extend(ring.completion());
            for c in cqes.drain(..) {
                let (op, slot, gen) = split(c.user_data());
                match op {
                    OP_ACCEPT => {
                        if c.result() >= 0 {
                            accept(&mut ring, c.result(), upstream, &mut pairs, &mut free);
                        }
                        if !cqueue::more(c.flags()) {
                            push(
                                &mut ring,
                                opcode::AcceptMulti::new(types::Fd(lfd))
                                    .build()
                                    .user_data(ud(OP_ACCEPT, 0, 0)),
                            );
                        }
                    }
                    OP_RECV => {
                        let i = (slot / 2) as usize;
                        let live = pairs[i].open && pairs[i].gen == gen;
                        let bid = cqueue::buffer_select(c.flags());
                        if live && c.result() > 0 {
                            let data = bufs.buf(bid.unwrap_or(0), c.result() as usize);
                            let ok =
                                on_data(&mut ring, &mut pairs[i], slot, data, upstream.is_some());
                            if !ok {
                                close(&mut ring, &mut pairs[i], i as u32, &mut free);
                            } else if !cqueue::more(c.flags()) {
                                arm(&mut ring, slot, gen);
                            }
                        } else if live && c.result() == -libc::ENOBUFS {
                            arm(&mut ring, slot, gen);
                        } else if live {
                            close(&mut ring, &mut pairs[i], i as u32, &mut free);
                        }
                        if let Some(b) = bid {
                            bufs.push(b);
                        }
                    }
                    OP_SEND => {
                        let i = (slot / 2) as usize;
                        let p = &mut pairs[i];
                        if !(p.open && p.gen == gen) {
                            continue;
                        }
                        let o = if slot & 1 == 0 {
                            &mut p.to_client
                        } else {
                            &mut p.to_up
                        };
                        o.busy = false;
                        if c.result() <= 0 {
                            close(&mut ring, p, i as u32, &mut free);
                            continue;
                        }
                        o.sent += c.result() as usize;
                        send(&mut ring, slot, gen, o);
                    }
                    _ => {}
                }
            }
            bufs.publish();
        }
    }

    fn accept(
        ring: &mut IoUring,
        fd: RawFd,
        upstream: Option<SocketAddr>,
        pairs: &mut [Pair],
        free: &mut Vec<u32>,
    ) {
        // SAFETY: the accepted descriptor is ours.
        let c = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let _ = c.set_nodelay(true);
        let Some(i) = free.pop() else { return };
        let ufd = match upstream {
            Some(addr) => match TcpStream::connect(addr) {
                Ok(u) => {
                    let _ = u.set_nodelay(true);
                    u.into_raw_fd()
                }
                Err(_) => {
                    free.push(i);
                    return;
                }
            },
            None => -1,
        };
        // The table holds its own references: ours are closed after.
        let cfd = c.into_raw_fd();
        ring.submitter()
            .register_files_update(i * 2, &[cfd, ufd])
            .expect("register");
        // SAFETY: our own descriptors, registered above.
        unsafe {
            libc::close(cfd);
            if ufd >= 0 {
                libc::close(ufd);
            }
        }
        let p = &mut pairs[i as usize];
        p.gen = p.gen.wrapping_add(1) & 0x3ff_ffff;
        p.open = true;
        p.held.clear();
        p.uheld.clear();
        // Cleared, not freed: a send of the previous connection still in
        // flight reads memory that stays allocated.
        for o in [&mut p.to_up, &mut p.to_client] {
            o.sending.clear();
            o.next.clear();
            o.sent = 0;
            o.busy = false;
        }
        arm(ring, i * 2, p.gen);
        if ufd >= 0 {
            arm(ring, i * 2 + 1, p.gen);
        }
    }

    /// Handles bytes from the client (even slot) or the upstream (odd).
    fn on_data(ring: &mut IoUring, p: &mut Pair, slot: u32, data: &[u8], proxy: bool) -> bool {
        let gen = p.gen;
        if slot & 1 == 0 {
            let (held, out) = if proxy {
                (&mut p.held, &mut p.to_up.next)
            } else {
                (&mut p.held, &mut p.to_client.next)
            };
            if feed(held, data, out, |x, o| request(x, o, proxy)).is_err() {
                return false;
            }
            if proxy {
                send(ring, slot + 1, gen, &mut p.to_up);
            } else {
                send(ring, slot, gen, &mut p.to_client);
            }
        } else {
            if feed(&mut p.uheld, data, &mut p.to_client.next, response).is_err() {
                return false;
            }
            send(ring, slot - 1, gen, &mut p.to_client);
        }
        true
    }

    fn close(ring: &mut IoUring, p: &mut Pair, i: u32, free: &mut Vec<u32>) {
        if !p.open {
            return;
        }
        p.open = false;
        for slot in [i * 2, i * 2 + 1] {
            push(
                ring,
                opcode::Close::new(types::Fixed(slot))
                    .build()
                    .user_data(ud(OP_CLOSE, slot, p.gen)),
            );
        }
        // Reused last: the pair's buffers stay allocated for any send still
        // in flight.
        free.insert(0, i);
    }
}
