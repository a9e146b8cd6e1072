//! An in-memory client connection: a duplex of two byte queues. The test
//! holds the client's end ([`Client`]): it scripts what the client sends
//! and when (bytes, a half-close, a reset), how much the client lets the
//! server queue before the server's writes wait (its window), and reads
//! what the server wrote. The server's end ([`Mem`]) is a [`Transport`]
//! with no socket, as an HTTP/2 stream has none.

use crate::transport::{init_bytes, ReadSpare, Transport, WriteAll};
use monoio::buf::IoBuf;
use monoio::net::TcpStream;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};

#[derive(Default)]
struct Queue {
    bytes: VecDeque<u8>,
    /// The writer will write no more (after these bytes).
    end: bool,
    /// The writer reset the connection: reads fail at once.
    reset: bool,
    /// The reader waiting for bytes.
    reader: Option<Waker>,
}

impl Queue {
    fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }
}

#[derive(Default)]
struct Wire {
    /// Client to server.
    up: Queue,
    /// Server to client.
    down: Queue,
    /// Bytes the server may queue unread before its writes wait; `None`:
    /// no bound.
    window: Option<usize>,
    /// The server's writer waiting for room.
    writer: Option<Waker>,
    /// The client stopped reading for good: server writes fail.
    client_gone: bool,
    /// Server-side handles alive (the stream, or its two halves).
    handles: u32,
    /// Bytes the server wrote in all.
    written: u64,
}

type Shared = Rc<RefCell<Wire>>;

/// A fresh connection: the server's end and the client's.
pub(crate) fn pair() -> (Mem, Client) {
    let wire = Rc::new(RefCell::new(Wire {
        handles: 1,
        ..Wire::default()
    }));
    (Mem(wire.clone()), Client(wire))
}

/// The server's end.
pub(crate) struct Mem(Shared);
/// The server end's halves (a tunnel's).
pub(crate) struct MemRead(Shared);
pub(crate) struct MemWrite(Shared);

fn release(wire: &Shared) {
    let mut w = wire.borrow_mut();
    w.handles -= 1;
    if w.handles == 0 {
        // The server dropped its stream: the socket closes.
        w.down.end = true;
        w.down.wake_reader();
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        release(&self.0);
    }
}
impl Drop for MemRead {
    fn drop(&mut self) {
        release(&self.0);
    }
}
impl Drop for MemWrite {
    fn drop(&mut self) {
        release(&self.0);
    }
}

async fn read(wire: &Shared, mut buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
    let res = poll_fn(|cx| {
        let mut w = wire.borrow_mut();
        let q = &mut w.up;
        if q.reset {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        if !q.bytes.is_empty() {
            let n = (buf.capacity() - buf.len()).min(q.bytes.len());
            // Within the spare capacity: no reallocation.
            buf.extend(q.bytes.drain(..n));
            return Poll::Ready(Ok(n));
        }
        if q.end {
            return Poll::Ready(Ok(0));
        }
        q.reader = Some(cx.waker().clone());
        Poll::Pending
    })
    .await;
    (res, buf)
}

async fn write(wire: &Shared, bytes: &[u8]) -> io::Result<()> {
    let mut at = 0;
    poll_fn(|cx| {
        let mut w = wire.borrow_mut();
        loop {
            if w.client_gone || w.down.end {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            if at == bytes.len() {
                return Poll::Ready(Ok(()));
            }
            let room = w
                .window
                .map_or(usize::MAX, |win| win.saturating_sub(w.down.bytes.len()));
            if room == 0 {
                w.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let n = room.min(bytes.len() - at);
            w.down.bytes.extend(&bytes[at..at + n]);
            w.written += n as u64;
            at += n;
            w.down.wake_reader();
        }
    })
    .await
}

fn close(wire: &Shared) {
    let mut w = wire.borrow_mut();
    w.down.end = true;
    w.down.wake_reader();
}

impl ReadSpare for Mem {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        read(&self.0, buf).await
    }
}
impl ReadSpare for MemRead {
    async fn read_spare(&mut self, buf: Vec<u8>) -> (io::Result<usize>, Vec<u8>) {
        read(&self.0, buf).await
    }
}
impl WriteAll for Mem {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        let res = write(&self.0, init_bytes(&buf)).await;
        (res, buf)
    }
    async fn close_write(&mut self) {
        close(&self.0);
    }
}
impl WriteAll for MemWrite {
    async fn write_all_of<T: IoBuf + 'static>(&mut self, buf: T) -> (io::Result<()>, T) {
        let res = write(&self.0, init_bytes(&buf)).await;
        (res, buf)
    }
    async fn close_write(&mut self) {
        close(&self.0);
    }
}

impl Transport for Mem {
    type ReadHalf = MemRead;
    type WriteHalf = MemWrite;
    crate::transport::answers_as_bytes!();
    const TLS: bool = false;
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
    fn into_split(self) -> Option<(MemRead, MemWrite)> {
        let wire = self.0.clone();
        wire.borrow_mut().handles += 2;
        // `self` drops here: two handles are left, the halves'.
        Some((MemRead(wire.clone()), MemWrite(wire)))
    }
}

/// The client's end.
pub(crate) struct Client(Shared);

/// One response as the client read it.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Client {
    /// Sends `bytes` (they wait in the queue until the server reads).
    pub fn send(&self, bytes: &[u8]) {
        let mut w = self.0.borrow_mut();
        w.up.bytes.extend(bytes);
        w.up.wake_reader();
    }

    /// Half-closes: the client sends nothing more.
    pub fn finish(&self) {
        let mut w = self.0.borrow_mut();
        w.up.end = true;
        w.up.wake_reader();
    }

    /// Resets the connection: the server's reads and writes fail.
    pub fn reset(&self) {
        let mut w = self.0.borrow_mut();
        w.up.reset = true;
        w.client_gone = true;
        w.up.wake_reader();
        if let Some(wr) = w.writer.take() {
            wr.wake();
        }
    }

    /// The server may queue at most `bytes` unread (0: none).
    pub fn set_window(&self, bytes: Option<usize>) {
        let mut w = self.0.borrow_mut();
        w.window = bytes;
        if let Some(wr) = w.writer.take() {
            wr.wake();
        }
    }

    /// Bytes written by the server and not read yet.
    pub fn pending(&self) -> usize {
        self.0.borrow().down.bytes.len()
    }

    /// Bytes the server wrote in all.
    pub fn written(&self) -> u64 {
        self.0.borrow().written
    }

    /// Whether the server has closed (or dropped) its end and every byte
    /// it wrote was read.
    pub fn closed(&self) -> bool {
        let w = self.0.borrow();
        w.down.end && w.down.bytes.is_empty()
    }

    /// Whether the server has closed (or dropped) its end.
    pub fn server_ended(&self) -> bool {
        self.0.borrow().down.end
    }

    /// Whether the server still holds its end of the connection.
    pub fn server_holds(&self) -> bool {
        self.0.borrow().handles > 0
    }

    /// Takes every byte the server wrote so far.
    pub fn take_all(&self) -> Vec<u8> {
        let mut w = self.0.borrow_mut();
        let out: Vec<u8> = w.down.bytes.drain(..).collect();
        if let Some(wr) = w.writer.take() {
            wr.wake();
        }
        out
    }

    /// Waits until the server wrote something or closed.
    pub async fn readable(&self) {
        poll_fn(|cx| {
            let mut w = self.0.borrow_mut();
            if !w.down.bytes.is_empty() || w.down.end {
                return Poll::Ready(());
            }
            w.down.reader = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Waits until the server closes its end (reading what it writes).
    pub async fn until_closed(&self) -> Vec<u8> {
        let mut all = Vec::new();
        loop {
            self.readable().await;
            all.extend(self.take_all());
            if self.server_ended() {
                all.extend(self.take_all());
                return all;
            }
        }
    }

    /// Reads the next whole response; `head_only` for an answer to HEAD.
    /// `None` when the server closed before one was whole.
    pub async fn response(&self, head_only: bool) -> Option<Response> {
        loop {
            {
                let mut w = self.0.borrow_mut();
                let ended = w.down.end;
                let bytes = w.down.bytes.make_contiguous();
                match parse_response(bytes, head_only, ended) {
                    Some((r, used)) => {
                        w.down.bytes.drain(..used);
                        if let Some(wr) = w.writer.take() {
                            wr.wake();
                        }
                        return Some(r);
                    }
                    None if w.down.end => return None,
                    None => {}
                }
            }
            let mut waited = false;
            poll_fn(|cx| {
                if waited {
                    return Poll::Ready(());
                }
                let mut w = self.0.borrow_mut();
                if w.down.end {
                    return Poll::Ready(());
                }
                w.down.reader = Some(cx.waker().clone());
                waited = true;
                Poll::Pending
            })
            .await;
        }
    }
}

/// A whole response at the start of `buf` and its length. A response
/// without a length ends with the connection (`ended`).
pub(crate) fn parse_response(
    buf: &[u8],
    head_only: bool,
    ended: bool,
) -> Option<(Response, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let head_len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    let status = r.code?;
    let headers: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let rest = &buf[head_len..];
    let no_body = head_only || (100..200).contains(&status) || status == 204 || status == 304;
    let (body, used) = if no_body {
        (Vec::new(), 0)
    } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = find("content-length") {
        let len: usize = len.trim().parse().ok()?;
        if rest.len() < len {
            return None;
        }
        (rest[..len].to_vec(), len)
    } else if ended {
        (rest.to_vec(), rest.len())
    } else {
        return None;
    };
    Some((
        Response {
            status,
            headers,
            body,
        },
        head_len + used,
    ))
}

/// A whole chunked body at the start of `buf`: its bytes and the length
/// it took (trailers included).
fn dechunk(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut at = 0;
    let mut body = Vec::new();
    loop {
        let line_end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&buf[at..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailers up to an empty line.
            loop {
                let end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some((body, at));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

/// The client's end as a tokio byte stream, for the h2 client crate.
impl tokio::io::AsyncRead for Client {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut w = self.0.borrow_mut();
        if !w.down.bytes.is_empty() {
            let n = out.remaining().min(w.down.bytes.len());
            let (a, b) = w.down.bytes.as_slices();
            let from_a = n.min(a.len());
            out.put_slice(&a[..from_a]);
            out.put_slice(&b[..n - from_a]);
            w.down.bytes.drain(..n);
            if let Some(wr) = w.writer.take() {
                wr.wake();
            }
            return Poll::Ready(Ok(()));
        }
        if w.down.end {
            return Poll::Ready(Ok(()));
        }
        w.down.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl tokio::io::AsyncWrite for Client {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.0.borrow().up.end {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        self.send(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.finish();
        Poll::Ready(Ok(()))
    }
}

impl Client {
    /// A second handle on the same client end (one for the h2 client's
    /// codec, one for the test to look at the wire).
    pub fn watch(&self) -> Client {
        Client(self.0.clone())
    }
}
