//! One QUIC connection's HTTP/3 state, shared by the shard's endpoint
//! (which feeds it datagrams and timers and sends what it has to send)
//! and the tasks serving its requests (which read a request's body from
//! it and queue their answer's frames in it).
//!
//! A request stream's bytes are taken from QUIC only while what waits
//! unread for its task stays under [`BODY_HIGH`] (the rest stays in QUIC's
//! flow control, whose windows bound it), and split into frames here: the
//! HEADERS frame (at most the advertised field-section size) starts the
//! request's task; DATA frames' payloads become its body; trailers are
//! read and dropped. Answers wait in a per-stream queue until QUIC takes
//! them; a task writing more waits while the queue holds [`OUT_HIGH`].

use crate::codec::h3::frame::{self, code};
use crate::codec::h3::qpack::{self, FieldError};
use bytes::Bytes;
use quinn_proto::{Connection, ConnectionHandle, Dir, StreamId, VarInt};
use std::collections::{HashMap, VecDeque};
use std::task::Waker;
use std::time::Instant;

/// Body bytes a request stream holds for its task before QUIC's flow
/// control holds the rest.
pub(super) const BODY_HIGH: usize = 32 * 1024;
/// Answer bytes queued on a stream past which its task waits.
pub(super) const OUT_HIGH: usize = 32 * 1024;
/// Bytes read from a peer's control and QPACK streams per connection
/// before it is closed as a flood (SETTINGS once, and GOAWAY or
/// MAX_PUSH_ID now and then, are all a client needs).
const CONTROL_BUDGET: usize = 64 * 1024;

/// Where a request stream's frames are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for the request's HEADERS.
    Head,
    /// Its body's DATA frames (and any unknown frames, skipped).
    Body,
    /// After trailers: nothing but unknown frames may follow.
    Trailers,
}

/// One request stream.
pub(super) struct ReqState {
    /// Bytes read from QUIC and not yet split into frames.
    raw: Vec<u8>,
    stage: Stage,
    /// What is left of the frame being read: its type and bytes.
    frame: Option<(u64, u64)>,
    /// The request's parts, once its HEADERS arrived (taken by the task).
    pub head: Option<http::request::Parts>,
    /// Its head arrived before the handshake was done: in 0-RTT data,
    /// which an attacker may have replayed.
    pub early: bool,
    /// Whether a task serves it.
    pub started: bool,
    /// Body bytes the task has not read.
    pub body: Vec<u8>,
    /// Every byte of the request arrived.
    pub fin: bool,
    /// The client reset the stream, or it failed: its error code.
    pub failed: Option<u64>,
    pub reader: Option<Waker>,
    /// Answer bytes waiting for QUIC to take them.
    pub out: VecDeque<Bytes>,
    pub out_len: usize,
    /// The answer is whole: finish the stream once `out` is sent.
    pub finish: bool,
    pub finished: bool,
    pub writer: Option<Waker>,
    /// The task ended.
    pub done: bool,
    /// When the stream opened (coarse ms): its head must be whole within
    /// the header timeout.
    opened_ms: u64,
}

impl ReqState {
    fn new() -> ReqState {
        ReqState {
            raw: Vec::new(),
            stage: Stage::Head,
            frame: None,
            head: None,
            early: false,
            started: false,
            body: Vec::new(),
            fin: false,
            failed: None,
            reader: None,
            out: VecDeque::new(),
            out_len: 0,
            finish: false,
            finished: false,
            writer: None,
            done: false,
            opened_ms: crate::clock::now_ms(),
        }
    }

    fn wake(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    /// Splits what was read into frames. `Err`: a connection error's code;
    /// a malformed request fails the stream alone (`failed`).
    fn split(&mut self, max_field: usize) -> Result<(), u64> {
        let mut at = 0;
        loop {
            if let Some((kind, left)) = self.frame {
                let n = (left as usize).min(self.raw.len() - at);
                if kind == frame::DATA {
                    self.body.extend_from_slice(&self.raw[at..at + n]);
                }
                at += n;
                let left = left - n as u64;
                self.frame = (left > 0).then_some((kind, left));
                if left > 0 {
                    break;
                }
                continue;
            }
            let Some(h) = frame::read_frame_head(&self.raw[at..]) else {
                break;
            };
            match (self.stage, h.kind) {
                (_, frame::HEADERS) if self.stage != Stage::Trailers => {
                    if h.len > max_field as u64 {
                        self.failed = Some(code::EXCESSIVE_LOAD);
                        break;
                    }
                    let end = at + h.header_len + h.len as usize;
                    if self.raw.len() < end {
                        break;
                    }
                    if self.stage == Stage::Head {
                        match qpack::decode_request(&self.raw[at + h.header_len..end], max_field) {
                            Ok(parts) => self.head = Some(parts),
                            Err(FieldError::Decompression) => {
                                return Err(code::QPACK_DECOMPRESSION_FAILED)
                            }
                            Err(FieldError::Malformed) => {
                                self.failed = Some(code::MESSAGE_ERROR);
                                break;
                            }
                            Err(FieldError::TooLarge) => {
                                self.failed = Some(code::EXCESSIVE_LOAD);
                                break;
                            }
                        }
                        self.stage = Stage::Body;
                    } else {
                        // Trailers: read and dropped.
                        self.stage = Stage::Trailers;
                    }
                    at = end;
                }
                (Stage::Body, frame::DATA) => {
                    at += h.header_len;
                    self.frame = (h.len > 0).then_some((frame::DATA, h.len));
                }
                (_, frame::DATA | frame::HEADERS) => return Err(code::FRAME_UNEXPECTED),
                (_, k) if known_elsewhere(k) => return Err(code::FRAME_UNEXPECTED),
                (_, k) => {
                    // An unknown (or reserved) type: skipped.
                    at += h.header_len;
                    self.frame = (h.len > 0).then_some((k, h.len));
                }
            }
        }
        self.raw.drain(..at);
        if self.stage == Stage::Head && self.raw.len() > max_field + 16 {
            self.failed = Some(code::EXCESSIVE_LOAD);
        }
        Ok(())
    }

    /// Whether more may be read from QUIC now.
    fn wants_bytes(&self) -> bool {
        !self.fin && self.failed.is_none() && self.body.len() < BODY_HIGH
    }
}

/// Frame types that are known and never belong on a request stream.
fn known_elsewhere(kind: u64) -> bool {
    frame::reserved_http2_type(kind)
        || matches!(
            kind,
            frame::CANCEL_PUSH
                | frame::SETTINGS
                | frame::PUSH_PROMISE
                | frame::GOAWAY
                | frame::MAX_PUSH_ID
        )
}

/// A unidirectional stream the client opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Uni {
    /// Its type is not read yet.
    Unknown,
    /// The control stream (one per connection; it must open with
    /// SETTINGS and never end).
    Control { settings: bool },
    /// QPACK's encoder stream: with no dynamic table allowed, only "Set
    /// Dynamic Table Capacity 0" may come.
    Encoder,
    /// QPACK's decoder stream: acknowledgements of a table Gapura never
    /// fills, read and dropped.
    Decoder,
}

/// One QUIC connection and its HTTP/3 state.
pub(super) struct QConn {
    pub q: Connection,
    pub handle: ConnectionHandle,
    pub streams: HashMap<StreamId, ReqState>,
    uni: HashMap<StreamId, (Uni, Vec<u8>)>,
    control_read: usize,
    /// Gapura's control stream, once opened.
    control: Option<StreamId>,
    /// Its bytes not yet taken by QUIC.
    control_out: Vec<u8>,
    /// The largest field section a request may have.
    pub max_field: usize,
    /// Request streams accepted: the next one's id, for GOAWAY.
    pub next_request: u64,
    pub goaway: bool,
    /// The connection is gone: every stream fails.
    pub lost: bool,
    /// Request streams refused before a task took them, not yet counted
    /// in the shard's metrics.
    pub refused: u64,
    /// Heads not whole within the header timeout, not yet counted.
    pub slow_heads: u64,
    /// When a request stream last opened or ended (coarse ms): the
    /// connection's idle time starts there.
    pub active_ms: u64,
}

/// What [`QConn::events`] found: request streams whose head arrived and
/// no task serves yet.
pub(super) type Ready = Vec<StreamId>;

impl QConn {
    pub(super) fn new(q: Connection, handle: ConnectionHandle, max_field: usize) -> QConn {
        QConn {
            q,
            handle,
            streams: HashMap::new(),
            uni: HashMap::new(),
            control_read: 0,
            control: None,
            control_out: Vec::new(),
            max_field,
            next_request: 0,
            goaway: false,
            lost: false,
            refused: 0,
            slow_heads: 0,
            active_ms: crate::clock::now_ms(),
        }
    }

    /// Closes the connection with an HTTP/3 error code.
    pub(super) fn close(&mut self, now: Instant, code: u64) {
        let code = VarInt::from_u64(code).unwrap_or(VarInt::from_u32(0x102));
        self.q.close(now, code, Bytes::new());
    }

    /// Takes the connection's application events: new streams accepted,
    /// readable streams read and split, writable streams flushed. Pushes
    /// request streams whose task may start onto `ready`.
    pub(super) fn events(&mut self, now: Instant, ready: &mut Ready) {
        while let Some(event) = self.q.poll() {
            use quinn_proto::{Event, StreamEvent};
            match event {
                Event::Connected => self.open_control(),
                Event::ConnectionLost { .. } => self.fail_all(),
                Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                    while let Some(id) = self.q.streams().accept(Dir::Bi) {
                        if self.goaway {
                            // Past GOAWAY: refused, never served.
                            let _ = self
                                .q
                                .recv_stream(id)
                                .stop(VarInt::from_u32(code::REQUEST_REJECTED as u32));
                            let _ = self
                                .q
                                .send_stream(id)
                                .reset(VarInt::from_u32(code::REQUEST_REJECTED as u32));
                            continue;
                        }
                        self.next_request = id.index() * 4 + 4;
                        self.active_ms = crate::clock::now_ms();
                        self.streams.insert(id, ReqState::new());
                        self.read_request(now, id, ready);
                    }
                }
                Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                    while let Some(id) = self.q.streams().accept(Dir::Uni) {
                        self.uni.insert(id, (Uni::Unknown, Vec::new()));
                        self.read_uni(now, id);
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => {
                    if self.streams.contains_key(&id) {
                        self.read_request(now, id, ready);
                    } else if self.uni.contains_key(&id) {
                        self.read_uni(now, id);
                    }
                }
                Event::Stream(StreamEvent::Writable { id }) => self.flush_stream(id),
                Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                    if let Some(s) = self.streams.get_mut(&id) {
                        s.failed.get_or_insert(error_code.into_inner());
                        s.out.clear();
                        s.out_len = 0;
                        s.wake();
                    }
                }
                Event::Stream(StreamEvent::Finished { id }) => {
                    if let Some(s) = self.streams.get_mut(&id) {
                        s.finished = true;
                    }
                }
                _ => {}
            }
        }
        self.flush_control();
    }

    /// Whether a request stream would take bytes from QUIC now.
    pub(super) fn wants_read(&self, id: StreamId) -> bool {
        self.streams.get(&id).is_some_and(ReqState::wants_bytes)
    }

    /// Reads a request stream while it wants bytes, splitting frames.
    pub(super) fn read_request(&mut self, now: Instant, id: StreamId, ready: &mut Ready) {
        let max_field = self.max_field;
        let handshaking = self.q.is_handshaking();
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let mut error = None;
        let mut recv = self.q.recv_stream(id);
        if let Ok(mut chunks) = recv.read(true) {
            while s.wants_bytes() {
                // What waits for the task (the head's bytes, then body
                // bytes) stays within BODY_HIGH plus one field section.
                let room = BODY_HIGH
                    .saturating_sub(s.body.len() + s.raw.len())
                    .max(1024);
                match chunks.next(room) {
                    Ok(Some(chunk)) => s.raw.extend_from_slice(&chunk.bytes),
                    Ok(None) => {
                        s.fin = true;
                        break;
                    }
                    Err(quinn_proto::ReadError::Blocked) => break,
                    Err(quinn_proto::ReadError::Reset(code)) => {
                        s.failed = Some(code.into_inner());
                        break;
                    }
                }
                if let Err(code) = s.split(max_field) {
                    error = Some(code);
                    break;
                }
            }
            let _ = chunks.finalize();
        }
        if let Some(code) = error {
            return self.close(now, code);
        }
        if s.fin && s.frame.is_some_and(|(k, _)| k == frame::DATA) {
            // The stream ended inside a DATA frame: the request is cut.
            s.failed.get_or_insert(code::REQUEST_INCOMPLETE);
        }
        if s.fin && s.head.is_none() && s.failed.is_none() && !s.started {
            s.failed = Some(code::REQUEST_INCOMPLETE);
        }
        if s.failed.is_some() && !s.started {
            // Refused before a task took it: reset at once.
            let code = VarInt::from_u64(s.failed.unwrap_or(0)).unwrap_or(VarInt::from_u32(0));
            self.streams.remove(&id);
            self.refused += 1;
            let _ = self.q.recv_stream(id).stop(code);
            let _ = self.q.send_stream(id).reset(code);
            return;
        }
        if s.head.is_some() && !s.started {
            s.started = true;
            s.early = handshaking;
            ready.push(id);
        }
        s.wake();
    }

    /// Reads a unidirectional stream: its type, then what its type allows.
    fn read_uni(&mut self, now: Instant, id: StreamId) {
        let mut fresh = Vec::new();
        let mut ended = false;
        if let Ok(mut chunks) = self.q.recv_stream(id).read(true) {
            loop {
                match chunks.next(4096) {
                    Ok(Some(c)) => fresh.extend_from_slice(&c.bytes),
                    Ok(None) => {
                        ended = true;
                        break;
                    }
                    Err(_) => break,
                }
                if fresh.len() >= 4096 {
                    break;
                }
            }
            let _ = chunks.finalize();
        }
        self.control_read += fresh.len();
        if self.control_read > CONTROL_BUDGET {
            return self.close(now, code::EXCESSIVE_LOAD);
        }
        let Some((kind, buf)) = self.uni.get_mut(&id) else {
            return;
        };
        buf.extend_from_slice(&fresh);
        if *kind == Uni::Unknown {
            let Some((t, n)) = frame::read_varint(buf) else {
                return;
            };
            buf.drain(..n);
            let taken = |u: &HashMap<StreamId, (Uni, Vec<u8>)>, want: fn(&Uni) -> bool| {
                u.values().filter(|(k, _)| want(k)).count() > 0
            };
            let next = match t {
                frame::STREAM_CONTROL => Uni::Control { settings: false },
                frame::STREAM_QPACK_ENCODER => Uni::Encoder,
                frame::STREAM_QPACK_DECODER => Uni::Decoder,
                frame::STREAM_PUSH => return self.close(now, code::STREAM_CREATION_ERROR),
                _ => {
                    // Unknown types are ignored (RFC 9114 §6.2).
                    self.uni.remove(&id);
                    let _ = self
                        .q
                        .recv_stream(id)
                        .stop(VarInt::from_u32(code::STREAM_CREATION_ERROR as u32));
                    return;
                }
            };
            let dup = match next {
                Uni::Control { .. } => taken(&self.uni, |k| matches!(k, Uni::Control { .. })),
                Uni::Encoder => taken(&self.uni, |k| *k == Uni::Encoder),
                _ => taken(&self.uni, |k| *k == Uni::Decoder),
            };
            if dup {
                return self.close(now, code::STREAM_CREATION_ERROR);
            }
            if let Some((kind, _)) = self.uni.get_mut(&id) {
                *kind = next;
            }
        }
        let Some((kind, buf)) = self.uni.get_mut(&id) else {
            return;
        };
        let result = match kind {
            Uni::Control { settings } => control_frames(buf, settings),
            Uni::Encoder => match buf.iter().all(|&b| b == 0x20) {
                true => {
                    buf.clear();
                    Ok(())
                }
                false => Err(code::QPACK_ENCODER_STREAM_ERROR),
            },
            Uni::Decoder | Uni::Unknown => {
                buf.clear();
                Ok(())
            }
        };
        let critical = !matches!(kind, Uni::Unknown);
        if let Err(code) = result {
            return self.close(now, code);
        }
        if ended && critical {
            self.close(now, code::CLOSED_CRITICAL_STREAM);
        }
    }

    /// Opens Gapura's control stream with its SETTINGS.
    fn open_control(&mut self) {
        if self.control.is_some() {
            return;
        }
        self.control = self.q.streams().open(Dir::Uni);
        self.control_out = frame::control_stream_preface(self.max_field as u64);
    }

    /// Sends GOAWAY: requests not yet accepted are refused, those accepted
    /// finish.
    pub(super) fn send_goaway(&mut self) {
        if self.goaway {
            return;
        }
        self.goaway = true;
        self.open_control();
        let g = frame::goaway(self.next_request);
        self.control_out.extend_from_slice(&g);
        self.flush_control();
    }

    fn flush_control(&mut self) {
        let Some(id) = self.control else { return };
        if self.control_out.is_empty() {
            return;
        }
        if let Ok(n) = self.q.send_stream(id).write(&self.control_out) {
            self.control_out.drain(..n);
        }
    }

    /// Hands a stream's queued answer to QUIC as far as its windows allow,
    /// finishing it once all is taken.
    pub(super) fn flush_stream(&mut self, id: StreamId) {
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let mut send = self.q.send_stream(id);
        while let Some(front) = s.out.front_mut() {
            match send.write(front) {
                Ok(n) => {
                    s.out_len -= n;
                    if n == front.len() {
                        s.out.pop_front();
                    } else {
                        bytes::Buf::advance(front, n);
                        break;
                    }
                }
                Err(quinn_proto::WriteError::Blocked) => break,
                Err(_) => {
                    s.failed.get_or_insert(code::REQUEST_CANCELLED);
                    s.out.clear();
                    s.out_len = 0;
                    break;
                }
            }
        }
        if s.out.is_empty() && s.finish && !s.finished {
            let _ = send.finish();
            s.finished = true;
        }
        if s.out_len < OUT_HIGH {
            if let Some(w) = s.writer.take() {
                w.wake();
            }
        }
    }

    /// The connection is dropped without a word (a stalled handshake):
    /// every stream fails.
    pub(super) fn abandon(&mut self) {
        self.fail_all();
    }

    /// Every stream fails: the connection is gone.
    fn fail_all(&mut self) {
        self.lost = true;
        for s in self.streams.values_mut() {
            s.failed.get_or_insert(code::REQUEST_CANCELLED);
            s.wake();
        }
    }

    /// Drops the state of streams whose task ended and whose answer went.
    pub(super) fn reap(&mut self) {
        let before = self.streams.len();
        self.streams
            .retain(|_, s| !(s.done && (s.finished || s.failed.is_some())));
        if self.streams.len() != before {
            self.active_ms = crate::clock::now_ms();
        }
    }

    /// The connection's periodic checks: request heads not whole within
    /// `header_ms` are refused (a trickled head, as slowloris sends it);
    /// a connection without a request for `idle_ms` is closed (a client
    /// that keeps QUIC alive with pings holds nothing for long). Whether
    /// anything changed.
    pub(super) fn watch(
        &mut self,
        now: Instant,
        now_ms: u64,
        header_ms: u64,
        idle_ms: u64,
    ) -> bool {
        let late: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.started && now_ms.saturating_sub(s.opened_ms) >= header_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in &late {
            self.streams.remove(id);
            self.slow_heads += 1;
            let code = VarInt::from_u32(code::REQUEST_REJECTED as u32);
            let _ = self.q.recv_stream(*id).stop(code);
            let _ = self.q.send_stream(*id).reset(code);
        }
        let idle = self.streams.is_empty()
            && !self.lost
            && now_ms.saturating_sub(self.active_ms) >= idle_ms;
        if idle && !self.q.is_closed() {
            self.close(now, code::NO_ERROR);
            return true;
        }
        !late.is_empty()
    }
}

/// Reads a peer's control stream: SETTINGS first and once, then GOAWAY
/// and MAX_PUSH_ID (read and dropped) or unknown frames; anything else is
/// an error.
fn control_frames(buf: &mut Vec<u8>, settings: &mut bool) -> Result<(), u64> {
    let mut at = 0;
    while let Some(h) = frame::read_frame_head(&buf[at..]) {
        if h.len > 16 * 1024 {
            return Err(code::EXCESSIVE_LOAD);
        }
        let end = at + h.header_len + h.len as usize;
        if buf.len() < end {
            break;
        }
        match h.kind {
            frame::SETTINGS if !*settings => {
                settings_valid(&buf[at + h.header_len..end])?;
                *settings = true;
            }
            _ if !*settings => return Err(code::MISSING_SETTINGS),
            frame::SETTINGS => return Err(code::FRAME_UNEXPECTED),
            frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH => {}
            k if frame::reserved_http2_type(k) => return Err(code::FRAME_UNEXPECTED),
            frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => {
                return Err(code::FRAME_UNEXPECTED)
            }
            _ => {}
        }
        at = end;
    }
    buf.drain(..at);
    Ok(())
}

/// A SETTINGS payload: pairs of integers, none of HTTP/2's reserved
/// identifiers, none twice.
fn settings_valid(mut p: &[u8]) -> Result<(), u64> {
    let mut seen: Vec<u64> = Vec::new();
    while !p.is_empty() {
        let (id, a) = frame::read_varint(p).ok_or(code::FRAME_ERROR)?;
        let (_, b) = frame::read_varint(&p[a..]).ok_or(code::FRAME_ERROR)?;
        if matches!(id, 0x0 | 0x2 | 0x3 | 0x4 | 0x5) || seen.contains(&id) || seen.len() > 64 {
            return Err(code::SETTINGS_ERROR);
        }
        seen.push(id);
        p = &p[a + b..];
    }
    Ok(())
}
