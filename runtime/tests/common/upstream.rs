//! Small real upstream servers for the proxy tests: std threads, blocking
//! sockets, one thread per connection, a handler per request.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct UpRequest {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub raw_head: String,
}

impl UpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What a handler does with the connection after reading a request.
pub enum Reply {
    /// Write these bytes and keep the connection for the next request.
    Bytes(Vec<u8>),
    /// Write these bytes and close.
    Close(Vec<u8>),
    /// Close without writing anything.
    Drop,
    /// Take over the connection (e.g. for a tunnel); the server forgets it.
    Takeover(Box<dyn FnOnce(TcpStream) + Send>),
}

pub type Handler = Arc<dyn Fn(&UpRequest) -> Reply + Send + Sync>;

pub struct Upstream {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    pub requests: Arc<Mutex<Vec<UpRequest>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<UpRequest> {
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let mut tmp = [0u8; 65536];
        let n = s.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    let mut lines = head.split("\r\n");
    let first = lines.next()?;
    let mut parts = first.split(' ');
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = Vec::new();
    for l in lines {
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut req = UpRequest {
        method,
        target,
        headers,
        body: Vec::new(),
        raw_head: head,
    };
    let fill = |s: &mut TcpStream, buf: &mut Vec<u8>, want: usize| -> Option<()> {
        while buf.len() < want {
            let mut tmp = [0u8; 65536];
            let n = s.read(&mut tmp).ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        Some(())
    };
    if let Some(len) = req
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        fill(s, buf, len)?;
        req.body = buf.drain(..len).collect();
    } else if req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().ends_with("chunked"))
    {
        loop {
            let line_end = loop {
                if let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                let want = buf.len() + 1;
                fill(s, buf, want)?;
            };
            let line = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            buf.drain(..line_end + 2);
            let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
            if size == 0 {
                // Trailers until the blank line.
                loop {
                    let p = loop {
                        if let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
                            break p;
                        }
                        let want = buf.len() + 1;
                        fill(s, buf, want)?;
                    };
                    buf.drain(..p + 2);
                    if p == 0 {
                        break;
                    }
                }
                break;
            }
            fill(s, buf, size + 2)?;
            req.body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
        }
    }
    Some(req)
}

/// Starts an upstream on 127.0.0.1 with `handler`.
pub fn start(handler: Handler) -> Upstream {
    start_on(TcpListener::bind("127.0.0.1:0").unwrap(), handler)
}

/// As [`start`], on a listener the caller bound (a port reused after an
/// outage).
pub fn start_on(listener: TcpListener, handler: Handler) -> Upstream {
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (c, r, st) = (connections.clone(), requests.clone(), stop.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            if st.load(Ordering::Relaxed) {
                break;
            }
            let Ok(mut s) = conn else { continue };
            c.fetch_add(1, Ordering::Relaxed);
            let (h, r) = (handler.clone(), r.clone());
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                let mut buf = Vec::new();
                while let Some(req) = read_request(&mut s, &mut buf) {
                    r.lock().unwrap().push(req.clone());
                    match h(&req) {
                        Reply::Bytes(b) => {
                            if s.write_all(&b).is_err() {
                                return;
                            }
                        }
                        Reply::Close(b) => {
                            let _ = s.write_all(&b);
                            return;
                        }
                        Reply::Drop => return,
                        Reply::Takeover(f) => {
                            f(s);
                            return;
                        }
                    }
                }
            });
        }
    });
    Upstream {
        addr,
        connections,
        requests,
        stop,
    }
}

/// A plain 200 with `body`.
pub fn ok(body: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Upstream: yes\r\n\r\n",
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(body);
    v
}

/// An upstream that answers 200 with `body` to everything.
pub fn fixed(body: &'static [u8]) -> Upstream {
    start(Arc::new(move |_| Reply::Bytes(ok(body))))
}

/// An upstream that echoes the request body and reports what it saw in headers.
pub fn echo() -> Upstream {
    start(Arc::new(|req: &UpRequest| {
        let mut v = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Seen-Method: {}\r\nX-Seen-Target: {}\r\n\r\n",
            req.body.len(),
            req.method,
            req.target
        )
        .into_bytes();
        v.extend_from_slice(&req.body);
        Reply::Bytes(v)
    }))
}

/// An upstream that upgrades a request asking for it (101) and then echoes
/// every byte it receives; anything else gets 200 `ok`.
pub fn upgrading_echo() -> Upstream {
    start(Arc::new(|req: &UpRequest| {
        if req.header("Upgrade").is_none() {
            return Reply::Bytes(ok(b"ok"));
        }
        Reply::Takeover(Box::new(|mut s: TcpStream| {
            let _ = s.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            );
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }))
    }))
}

/// A port free now, for a test that binds it again later (another test's
/// server could take it meanwhile: prefer [`dead_addr`]).
pub fn released_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A port nobody listens on, held for the test process's life: bound and
/// never listening, so connects are refused and no other test's server can
/// take it.
pub fn dead_addr() -> SocketAddr {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    s.bind(&any.into()).unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    std::mem::forget(s);
    addr
}
