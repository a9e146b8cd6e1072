//! A shard's QUIC endpoint: its own UDP socket (one of the listener's
//! SO_REUSEPORT group, steered by source like the shard's TCP sockets),
//! one quinn-proto `Endpoint` fed the datagrams, and the connections it
//! accepted, each on this shard for its whole life.
//!
//! A new connection's first Initial passes the connection-level gate
//! before any handshake work: the server's access list on the address
//! (dropped without a word), a Retry round trip when `[http3] retry` asks
//! for one, then the connection limits (refused statelessly with
//! CONNECTION_REFUSED), and the shard's connection table bound. Until the
//! address is validated QUIC itself holds the server to three times what
//! it received (RFC 9000 §8.1).
//!
//! One task drives it all: received datagrams, the connections' timers
//! (a heap of deadlines), and the request tasks' wake-ups (a task that
//! queued an answer or read a body marks its connection).

use super::conn::{QConn, Ready};
use super::keys::{derive, RotatingTokenKey};
use super::stream;
use crate::server::place::Place;
use crate::server::shard::Shard;
use bytes::BytesMut;
use gapura_gate::snapshot::{Http3Settings, RetryMode, RETRY_AUTO_HALF_OPEN};
use gapura_gate::tls::TlsSettings;
use gapura_udp::batch::{send_many, Batch};
use gapura_udp::io::BATCH;
use quinn_proto::{
    ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Incoming, ServerConfig,
    TransportConfig, VarInt,
};
use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// The largest datagram read (longer ones are cut and dropped): QUIC
/// clients send 1,200 to about 1,500 bytes.
const DATAGRAM_BYTES: usize = 4096;
/// Handshakes a shard holds in progress at once (clients that proved
/// their address and stall hold about 34 KiB each until the handshake
/// timeout): a new one past it closes the oldest, so stalling clients
/// must keep coming faster than the timeout to crowd anyone out.
const MAX_HALF_OPEN: usize = 1024;
/// Send buffers kept for the next datagrams.
const SPARE_DATAGRAMS: usize = 256;
/// How often the driver looks for a drain.
const TICK: Duration = Duration::from_millis(100);
/// Per-stream receive window: bounds what a client may have in flight on
/// one request (its body beyond what the task holds).
const STREAM_WINDOW: u32 = 256 * 1024;
/// Connection receive window: what one connection may have in flight in
/// all its streams together.
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// Unidirectional streams a client may open: its control stream, QPACK's
/// two, and a few of unknown types (grease).
const MAX_UNI_STREAMS: u32 = 8;

/// Resumable sessions a shard keeps for 0-RTT (`[http3] early_data`),
/// each used once: about 1 MiB a shard.
const EARLY_SESSIONS: usize = 4096;

/// No stateless tickets: with early data on, sessions resume statefully.
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// Marks connections with work for the driver, and wakes it.
#[derive(Default)]
pub(super) struct Wake {
    dirty: RefCell<Vec<ConnectionHandle>>,
    waker: RefCell<Option<Waker>>,
    pending: Cell<bool>,
}

impl Wake {
    pub(super) fn mark(&self, h: ConnectionHandle) {
        self.dirty.borrow_mut().push(h);
        self.pending.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    async fn wait(&self) {
        std::future::poll_fn(|cx| {
            if self.pending.replace(false) {
                return Poll::Ready(());
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// One accepted connection: its state, and its place on the shard.
struct Accepted {
    conn: Rc<RefCell<QConn>>,
    _place: Place,
    peer: gapura_gate::client::Peer,
    serial: u64,
    bucket: Rc<Cell<gapura_gate::quota::Bucket>>,
    /// The earliest deadline of it in the timer heap (entries later than
    /// it are stale): at most a few entries a connection.
    timer: Option<Instant>,
    /// When it was accepted (coarse ms): its handshake must end within the
    /// TLS handshake timeout.
    opened_ms: u64,
}

/// The endpoint and its connections.
struct Driver {
    shard: Rc<Shard>,
    endpoint: Endpoint,
    conns: HashMap<ConnectionHandle, Accepted>,
    /// Connections still in their handshake.
    half_open: HashSet<ConnectionHandle>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    wake: Rc<Wake>,
    /// The server configuration and the settings it was built from.
    config: Option<(Arc<TlsSettings>, Http3Settings, Arc<ServerConfig>)>,
    /// Datagrams waiting to be sent.
    out: Vec<(SocketAddr, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
}

/// Serves HTTP/3 on `socket` (shard `shard.id` of `shards`) until the
/// shard drains and its connections end.
pub async fn serve(socket: std::net::UdpSocket, shard: Rc<Shard>, shards: usize) {
    let local = socket.local_addr().ok();
    let socket = match monoio::net::udp::UdpSocket::from_std(socket) {
        Ok(s) => s,
        Err(e) => {
            if let Some(warn) = shard.logs.warn {
                warn(format_args!("shard {}: HTTP/3 on {local:?}: {e}", shard.id));
            }
            return;
        }
    };
    let secret = endpoint_secret(&shard);
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &derive(&secret, b"reset"));
    let mut config = EndpointConfig::new(Arc::new(reset_key));
    let id = shard.id;
    config.cid_generator(move || Box::new(super::cid::ShardCids::new(id, shards)));
    let mut d = Driver {
        endpoint: Endpoint::new(Arc::new(config), None, true, None),
        shard,
        conns: HashMap::new(),
        half_open: HashSet::new(),
        timers: BinaryHeap::new(),
        wake: Rc::new(Wake::default()),
        config: None,
        out: Vec::new(),
        spare: Vec::new(),
    };
    let wake = d.wake.clone();
    let fd = socket.as_raw_fd();
    let mut batch = Batch::new(BATCH, DATAGRAM_BYTES);
    let mut tick = std::pin::pin!(monoio::time::sleep(TICK));
    let mut goaway = false;
    loop {
        let next_timer = d.timers.peek().map(|Reverse((t, _))| *t);
        let timer = async {
            match next_timer {
                Some(t) => monoio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        monoio::select! {
            _ = socket.readable(false) => {
                // What waits, in batches, without blocking.
                loop {
                    let n = batch.receive(fd);
                    for i in 0..n {
                        // A datagram longer than the buffer is cut: no
                        // QUIC packet a client sends is that long.
                        if let (data, false, Some(from)) = batch.get(i) {
                            d.datagram(data, from, &secret);
                        }
                    }
                    if n < BATCH {
                        break;
                    }
                }
            }
            _ = timer => d.timeouts(),
            _ = wake.wait() => {}
            _ = &mut tick => {
                tick.as_mut().reset(monoio::time::Instant::now() + TICK);
                d.watch();
            }
        }
        let mut dirty: Vec<ConnectionHandle> = std::mem::take(&mut *d.wake.dirty.borrow_mut());
        // A connection marked many times in one turn is driven once.
        dirty.sort_unstable_by_key(|h| h.0);
        dirty.dedup();
        for h in dirty {
            d.drive(h);
        }
        d.flush(&socket).await;
        if d.shard.is_draining() {
            if !goaway {
                goaway = true;
                let handles: Vec<_> = d.conns.keys().copied().collect();
                for h in handles {
                    d.conns[&h].conn.borrow_mut().send_goaway();
                    d.wake.mark(h);
                }
            }
            if d.conns.is_empty() {
                return;
            }
        }
    }
}

/// The secret the endpoint's keys (stateless reset, Retry tokens) come
/// from: the TLS ticket secret every shard shares and every reload keeps;
/// a random one when tickets are off.
fn endpoint_secret(shard: &Shard) -> Vec<u8> {
    let snap = shard.snapshot();
    match snap.tls.as_ref().map(|t| t.ticket_secret.0.clone()) {
        Some(s) if !s.is_empty() => s,
        _ => {
            let mut s = vec![0u8; 32];
            let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut s);
            s
        }
    }
}

impl Driver {
    /// One received datagram.
    fn datagram(&mut self, data: &[u8], from: SocketAddr, secret: &[u8]) {
        let now = Instant::now();
        // New connections take the configuration of the snapshot served
        // now (one built per snapshot and `[http3]` settings).
        let snap = self.shard.snapshot();
        self.server_config(&snap, secret);
        let mut buf = self.spare.pop().unwrap_or_default();
        let event = self
            .endpoint
            .handle(now, from, None, None, BytesMut::from(data), &mut buf);
        match event {
            Some(DatagramEvent::ConnectionEvent(h, ev)) => {
                if let Some(a) = self.conns.get(&h) {
                    a.conn.borrow_mut().q.handle_event(ev);
                    self.wake.mark(h);
                }
                self.spare.push(buf);
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                self.incoming(incoming, now, buf, secret)
            }
            Some(DatagramEvent::Response(t)) => {
                buf.truncate(t.size);
                self.out.push((t.destination, buf));
            }
            None => self.spare.push(buf),
        }
    }

    /// A new connection's first Initial: the connection-level gate, then
    /// the handshake.
    fn incoming(&mut self, incoming: Incoming, now: Instant, mut buf: Vec<u8>, secret: &[u8]) {
        let shard = self.shard.clone();
        let snap = shard.snapshot();
        let from = incoming.remote_address();
        let peer = gapura_gate::client::Peer::tcp(from.ip());
        let settings = snap.server.http3;
        let direct = snap.gate.client.mode == gapura_gate::client::ClientMode::Direct;
        if let Some(i) = snap.gate.accept_list.filter(|_| direct) {
            let refused = snap
                .gate
                .access_lists
                .get(i as usize)
                .is_some_and(|l| l.address_only_verdict(peer.addr()).is_some());
            if refused {
                shard.stats.accept_drops.inc();
                self.endpoint.ignore(incoming);
                return self.spare.push(buf);
            }
        }
        let retry = match settings.retry {
            RetryMode::Always => true,
            RetryMode::Never => false,
            RetryMode::Auto => self.half_open.len() >= RETRY_AUTO_HALF_OPEN,
        };
        if retry && !incoming.remote_address_validated() && incoming.may_retry() {
            match self.endpoint.retry(incoming, &mut buf) {
                Ok(t) => {
                    shard.stats.h3_retries.inc();
                    buf.truncate(t.size);
                    self.out.push((t.destination, buf));
                }
                Err(e) => {
                    self.endpoint.ignore(e.into_incoming());
                    self.spare.push(buf);
                }
            }
            return;
        }
        let mut place = Place::open(&shard);
        if self.half_open.len() >= MAX_HALF_OPEN {
            self.evict_oldest_handshake(now);
        }
        let full = shard.open_connections() > snap.server.max_connections_per_shard;
        let admitted = if full {
            Err(())
        } else {
            shard
                .gate_mut()
                .admit_connection(snap.gate.connections.as_ref(), peer.addr(), shard.now_ms())
                .map_err(|_| ())
        };
        match admitted {
            Ok(token) => place.hold(token),
            Err(()) => {
                shard.stats.connections_refused.inc();
                let t = self.endpoint.refuse(incoming, &mut buf);
                buf.truncate(t.size);
                self.out.push((t.destination, buf));
                return;
            }
        }
        let _ = secret;
        match self.endpoint.accept(incoming, now, &mut buf, None) {
            Ok((h, q)) => {
                let max_field = gapura_gate::limits::OUTER_MAX_HEAD_BYTES;
                self.conns.insert(
                    h,
                    Accepted {
                        conn: Rc::new(RefCell::new(QConn::new(q, h, max_field))),
                        _place: place,
                        peer,
                        serial: shard.next_connection(),
                        bucket: Rc::default(),
                        timer: None,
                        opened_ms: crate::clock::now_ms(),
                    },
                );
                shard.stats.h3_connections.inc();
                self.half_open.insert(h);
                self.wake.mark(h);
                self.spare.push(buf);
            }
            Err(e) => match e.response {
                Some(t) => {
                    buf.truncate(t.size);
                    self.out.push((t.destination, buf));
                }
                None => self.spare.push(buf),
            },
        }
    }

    /// The QUIC server configuration for the snapshot's TLS and `[http3]`
    /// settings: the shard's rustls configuration (the same certificates
    /// and SNI resolver as TCP) offering `h3` alone.
    fn server_config(
        &mut self,
        snap: &gapura_gate::Snapshot,
        secret: &[u8],
    ) -> Option<Arc<ServerConfig>> {
        let Some(tls) = snap.tls.as_ref() else {
            // No certificates in this snapshot: no new connection either.
            if self.config.take().is_some() {
                self.endpoint.set_server_config(None);
            }
            return None;
        };
        let h3 = snap.server.http3;
        if let Some((t, s, c)) = &self.config {
            if Arc::ptr_eq(t, tls) && *s == h3 {
                return Some(c.clone());
            }
        }
        let base = self.shard.tls_config(tls)?;
        let mut rustls = (*base).clone();
        rustls.alpn_protocols = vec![b"h3".to_vec()];
        rustls.max_early_data_size = 0;
        if h3.early_data {
            // QUIC takes all or nothing: a resumed client may send as much
            // 0-RTT data as its windows allow. rustls allows early data
            // only with stateful resumption (RFC 8446 §8.1): a session is
            // this shard's, used once, so a replayed ClientHello resumes
            // nothing and its early data is refused.
            rustls.max_early_data_size = u32::MAX;
            rustls.ticketer = Arc::new(NoTickets);
            rustls.session_storage = rustls::server::ServerSessionMemoryCache::new(EARLY_SESSIONS);
        }
        let crypto =
            quinn_proto::crypto::rustls::QuicServerConfig::try_from(Arc::new(rustls)).ok()?;
        let token_key = RotatingTokenKey::new(secret, tls.ticket_rotation_s);
        let mut config = ServerConfig::new(Arc::new(crypto), Arc::new(token_key));
        let mut transport = TransportConfig::default();
        transport
            .max_concurrent_bidi_streams(VarInt::from_u32(h3.max_streams))
            .max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS))
            .max_idle_timeout(Some(VarInt::from_u32(h3.idle_timeout_ms as u32).into()))
            .stream_receive_window(VarInt::from_u32(STREAM_WINDOW))
            .receive_window(VarInt::from_u32(CONNECTION_WINDOW))
            .send_window(CONNECTION_WINDOW as u64)
            .enable_segmentation_offload(false)
            .datagram_receive_buffer_size(None);
        config.transport_config(Arc::new(transport));
        config.max_incoming(RETRY_AUTO_HALF_OPEN * 16);
        let config = Arc::new(config);
        self.endpoint.set_server_config(Some(config.clone()));
        self.config = Some((tls.clone(), h3, config.clone()));
        Some(config)
    }

    /// Closes the handshake in progress that began first: the shard holds
    /// [`MAX_HALF_OPEN`] at most.
    fn evict_oldest_handshake(&mut self, now: Instant) {
        let oldest = self
            .half_open
            .iter()
            .filter_map(|h| self.conns.get(h).map(|a| (a.opened_ms, *h)))
            .min();
        let Some((_, h)) = oldest else { return };
        let _ = now;
        self.discard(h);
        self.shard.stats.h3_handshakes_evicted.inc();
    }

    /// Drops a connection still in its handshake at once, its memory and
    /// place with it: nothing is sent (the client has no keys to read a
    /// close with yet), as a dropped SYN says nothing.
    fn discard(&mut self, h: ConnectionHandle) {
        self.half_open.remove(&h);
        if let Some(a) = self.conns.remove(&h) {
            a.conn.borrow_mut().abandon();
            let _ = self
                .endpoint
                .handle_event(h, quinn_proto::EndpointEvent::drained());
        }
    }

    /// Every connection's periodic checks (`QConn::watch`): slow heads,
    /// idle connections.
    fn watch(&mut self) {
        let snap = self.shard.snapshot();
        let (header_ms, idle_ms) = (
            snap.server.header_timeout_ms,
            snap.server.http3.idle_timeout_ms,
        );
        let handshake_ms = snap.tls.as_ref().map_or(10_000, |t| t.handshake_timeout_ms);
        let (now, now_ms) = (Instant::now(), crate::clock::now_ms());
        // A handshake that does not end in time (a client that proved its
        // address and stalled) gives its memory and place back at once.
        let slow: Vec<ConnectionHandle> = self
            .half_open
            .iter()
            .filter(|h| {
                self.conns
                    .get(h)
                    .is_some_and(|a| now_ms.saturating_sub(a.opened_ms) >= handshake_ms)
            })
            .copied()
            .collect();
        for h in slow {
            self.shard
                .stats
                .tls_failure(crate::transport::tls::HandshakeFail::Timeout);
            self.discard(h);
        }
        for (h, a) in &self.conns {
            let mut c = a.conn.borrow_mut();
            let changed = c.watch(now, now_ms, header_ms, idle_ms);
            let slow = std::mem::take(&mut c.slow_heads);
            if slow > 0 {
                self.shard
                    .stats
                    .error_n(crate::server::stats::ErrorKind::HeaderTimeout, slow);
            }
            if changed {
                self.wake.mark(*h);
            }
        }
    }

    /// Sends the datagrams waiting, in batches; waits for room when the
    /// socket's buffer is full (at most a second: what is left is dropped,
    /// as a lossy path would, and QUIC sends it again).
    async fn flush(&mut self, socket: &monoio::net::udp::UdpSocket) {
        let fd = socket.as_raw_fd();
        let mut out = std::mem::take(&mut self.out);
        let mut at = 0;
        let deadline = monoio::time::Instant::now() + Duration::from_secs(1);
        while at < out.len() {
            let pairs: Vec<(SocketAddr, &[u8])> = out[at..]
                .iter()
                .map(|(to, b)| (*to, b.as_slice()))
                .collect();
            let sent = send_many(fd, &pairs);
            at += sent;
            if at < out.len() && sent == 0 {
                let room = monoio::time::timeout_at(deadline, socket.writable(false)).await;
                if !matches!(room, Ok(Ok(()))) {
                    break;
                }
            }
        }
        for (_, mut buf) in out.drain(..) {
            // Enough spare buffers for a burst, not every burst's.
            if self.spare.len() < SPARE_DATAGRAMS {
                buf.clear();
                self.spare.push(buf);
            }
        }
        self.out = out;
    }

    /// Handles the connections' timers that are due.
    fn timeouts(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((t, h))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            let h = ConnectionHandle(h);
            let Some(a) = self.conns.get_mut(&h) else {
                continue;
            };
            if a.timer != Some(t) {
                // Stale: an earlier deadline replaced it.
                continue;
            }
            a.timer = None;
            let mut c = a.conn.borrow_mut();
            match c.q.poll_timeout() {
                Some(due) if due <= now => {
                    c.q.handle_timeout(now);
                    drop(c);
                    // Its drive schedules the next deadline.
                    self.wake.mark(h);
                }
                Some(later) => {
                    drop(c);
                    a.timer = Some(later);
                    self.timers.push(Reverse((later, h.0)));
                }
                None => {}
            }
        }
    }

    /// Everything a connection has to do: its endpoint events, its
    /// application events (new requests start their tasks), its datagrams,
    /// its next timer; a drained connection is dropped.
    fn drive(&mut self, h: ConnectionHandle) {
        let now = Instant::now();
        let Some(a) = self.conns.get(&h) else { return };
        let conn = a.conn.clone();
        let mut c = conn.borrow_mut();
        while let Some(ev) = c.q.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(h, ev) {
                c.q.handle_event(back);
            }
        }
        let mut ready: Ready = Vec::new();
        c.events(now, &mut ready);
        let ids: Vec<_> = c.streams.keys().copied().collect();
        for id in ids {
            c.flush_stream(id);
            // A stream that stopped reading while its task's body was full
            // reads again once the task took it.
            if c.wants_read(id) {
                c.read_request(now, id, &mut ready);
            }
        }
        c.reap();
        self.shard
            .stats
            .h3_refused_streams
            .add(std::mem::take(&mut c.refused));
        if !c.q.is_handshaking() {
            self.half_open.remove(&h);
        }
        loop {
            let mut buf = self.spare.pop().unwrap_or_default();
            match c.q.poll_transmit(now, 1, &mut buf) {
                Some(t) => {
                    buf.truncate(t.size);
                    self.out.push((t.destination, buf));
                }
                None => {
                    self.spare.push(buf);
                    break;
                }
            }
        }
        let next = c.q.poll_timeout();
        let drained = c.q.is_drained();
        drop(c);
        if let (Some(t), Some(a)) = (next, self.conns.get_mut(&h)) {
            if a.timer.is_none_or(|s| t < s) {
                a.timer = Some(t);
                self.timers.push(Reverse((t, h.0)));
            }
        }
        if !ready.is_empty() {
            let a = &self.conns[&h];
            for id in ready {
                stream::start(
                    &conn,
                    id,
                    &self.shard,
                    &self.wake,
                    a.peer,
                    a.serial,
                    &a.bucket,
                );
            }
        }
        if drained {
            while let Some(ev) = conn.borrow_mut().q.poll_endpoint_events() {
                let _ = self.endpoint.handle_event(h, ev);
            }
            self.half_open.remove(&h);
            self.conns.remove(&h);
        }
    }
}
