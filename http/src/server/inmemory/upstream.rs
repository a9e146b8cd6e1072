//! The proxy from the in-memory client to a real loopback upstream (a
//! thread with a blocking socket): requests and bodies forwarded both
//! ways, an upstream that is down, an upstream that breaks off, and an
//! upgrade's tunnel.

use super::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;

/// What the upstream saw of one request: its head and body.
pub(super) struct Seen {
    pub(super) head: String,
    pub(super) body: Vec<u8>,
}

/// An upstream thread answering `answers` connections, one request each,
/// with `reply(request)`; what it saw goes to the receiver.
pub(super) fn upstream(
    answers: usize,
    reply: fn(&Seen) -> Vec<u8>,
) -> (SocketAddr, mpsc::Receiver<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..answers {
            let Ok((mut s, _)) = l.accept() else { return };
            let Some(seen) = read_request(&mut s) else {
                continue;
            };
            let answer = reply(&seen);
            let _ = tx.send(seen);
            if answer.is_empty() {
                // Closes without answering.
                continue;
            }
            let _ = s.write_all(&answer);
            // Hold the connection a moment for a pooled or upgraded use.
            let mut rest = [0u8; 4096];
            s.set_read_timeout(Some(Duration::from_secs(5))).ok();
            while let Ok(n) = s.read(&mut rest) {
                if n == 0 {
                    break;
                }
                // An upgraded tunnel: echo.
                let _ = s.write_all(&rest[..n]);
            }
        }
    });
    (addr, rx)
}

fn read_request(s: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
            let mut body = buf[end + 4..].to_vec();
            let lower = head.to_ascii_lowercase();
            if let Some(len) = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
            {
                while body.len() < len {
                    let n = s.read(&mut chunk).ok()?;
                    if n == 0 {
                        return None;
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
            } else if lower.contains("transfer-encoding: chunked") {
                while !body.ends_with(b"0\r\n\r\n") {
                    let n = s.read(&mut chunk).ok()?;
                    if n == 0 {
                        return None;
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
            }
            return Some(Seen { head, body });
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

pub(super) fn proxy(addr: SocketAddr) -> String {
    format!(
        "[[upstream]]\nname = \"app\"\nservers = [\"{addr}\"]\n\n[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"proxy\"\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\nwebsocket = true\n"
    )
}

/// Waits (on this runtime) for what the upstream thread saw.
pub(super) async fn seen(rx: &mpsc::Receiver<Seen>) -> Seen {
    let mut got = None;
    until(|| {
        got = rx.try_recv().ok();
        got.is_some()
    })
    .await;
    got.expect("the upstream saw nothing")
}

/// Reads a response, letting the runtime poll the upstream socket.
async fn response(c: &memio::Client) -> memio::Response {
    c.response(false).await.expect("an answer")
}

pub(super) fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Upstream: yes\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn a_get_is_forwarded_with_forwarding_headers_and_the_answer_relayed() {
    run(async {
        let (addr, rx) = upstream(1, |_| ok("from upstream"));
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(&get(
            "/a?b=1",
            &["Connection: keep-alive, X-Private", "X-Private: p"],
        ));
        let r = response(&c).await;
        assert_eq!((r.status, r.text().as_str()), (200, "from upstream"));
        assert_eq!(r.header("X-Upstream"), Some("yes"));
        let s = seen(&rx).await;
        assert!(s.head.starts_with("GET /a?b=1 HTTP/1.1\r\n"), "{}", s.head);
        let lower = s.head.to_ascii_lowercase();
        assert!(lower.contains("x-forwarded-for: 192.0.2.1"), "{}", s.head);
        assert!(
            !lower.contains("x-private"),
            "hop-by-hop removed: {}",
            s.head
        );
    })
}

#[test]
fn a_content_length_body_reaches_the_upstream_whole() {
    run(async {
        let (addr, rx) = upstream(1, |s| ok(&format!("{}", s.body.len())));
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        let mut req =
            b"POST /up HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 20000\r\n\r\n".to_vec();
        req.extend(std::iter::repeat_n(b'b', 20_000));
        c.send(&req);
        assert_eq!(response(&c).await.text(), "20000");
        assert_eq!(seen(&rx).await.body.len(), 20_000);
    })
}

#[test]
fn a_chunked_body_is_streamed_to_the_upstream_in_its_framing() {
    run(async {
        let (addr, rx) = upstream(1, |_| ok("done"));
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(b"POST /up HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
        settle().await;
        c.send(b"6\r\n world\r\n0\r\n\r\n");
        assert_eq!(response(&c).await.text(), "done");
        let s = seen(&rx).await;
        assert!(s.body.ends_with(b"0\r\n\r\n"));
        let text = String::from_utf8_lossy(&s.body);
        assert!(text.contains("hello") && text.contains(" world"), "{text}");
    })
}

#[test]
fn a_chunked_answer_is_relayed_to_the_client() {
    run(async {
        let (addr, _rx) = upstream(1, |_| {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                .to_vec()
        });
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(&get("/", &[]));
        let r = response(&c).await;
        assert_eq!(r.body, b"abcde");
    })
}

#[test]
fn a_chunked_answer_whose_chunks_come_after_its_head_is_relayed_whole() {
    run(async {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (go, wait) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            let _ = read_request(&mut s);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            // Each chunk once the client has what came before: every one
            // reaches the proxy in a read of its own.
            for chunk in [
                &b"3\r\nabc\r\n"[..],
                b"20\r\n0123456789abcdef0123456789abcdef\r\n",
                b"0\r\n\r\n",
            ] {
                if wait.recv().is_err() {
                    return;
                }
                let _ = s.write_all(chunk);
            }
            let mut rest = [0u8; 64];
            let _ = s.read(&mut rest);
        });
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(&get("/", &[]));
        let mut seen = 0;
        for _ in 0..3 {
            assert!(until(|| c.written() > seen).await);
            seen = c.written();
            go.send(()).unwrap();
        }
        let r = response(&c).await;
        assert_eq!(r.body, b"abc0123456789abcdef0123456789abcdef");
    })
}

#[test]
fn an_upstream_that_refuses_connections_is_a_502_page() {
    run(async {
        // A port with nothing listening: bound, then closed.
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(&get("/", &[]));
        let r = response(&c).await;
        assert_eq!(r.status, 502);
        assert_eq!(r.header("Cache-Control"), Some("no-store"));
        assert_eq!(shard.stats.upstream_failures.get(), 1);
    })
}

#[test]
fn an_upstream_that_closes_without_answering_is_a_502_page() {
    run(async {
        let (addr, _rx) = upstream(2, |_| Vec::new());
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(&get("/", &[]));
        assert_eq!(response(&c).await.status, 502);
    })
}

#[test]
fn an_upgrade_becomes_a_tunnel_both_ways() {
    run(async {
        let (addr, rx) = upstream(1, |_| {
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                .to_vec()
        });
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(&get(
            "/ws",
            &[
                "Connection: Upgrade",
                "Upgrade: websocket",
                "Sec-WebSocket-Version: 13",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            ],
        ));
        let r = response(&c).await;
        assert_eq!(r.status, 101);
        let s = seen(&rx).await;
        assert!(s.head.to_ascii_lowercase().contains("upgrade: websocket"));
        // A masked WebSocket text frame "hi": the upstream echoes it.
        let frame = [0x81u8, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2];
        c.send(&frame);
        let mut got = Vec::new();
        while got.len() < frame.len() {
            c.readable().await;
            got.extend(c.take_all());
        }
        assert_eq!(got, frame);
        assert_eq!(shard.stats.upgrades.get(), 1);
    })
}

/// The upstream of [`an_answer_that_waits_is_timed_from_its_head_to_its_end`]:
/// it answers once the test lets it.
static LET_ANSWER: std::sync::Mutex<Option<mpsc::Receiver<()>>> = std::sync::Mutex::new(None);

#[test]
fn an_answer_that_waits_is_timed_from_its_head_to_its_end() {
    run(async {
        let (go, wait) = mpsc::channel();
        *LET_ANSWER.lock().unwrap() = Some(wait);
        let (addr, rx) = upstream(1, |_| {
            // Taken first: the lock is not held while the answer waits.
            let wait = LET_ANSWER.lock().unwrap().take();
            if let Some(w) = wait {
                let _ = w.recv();
            }
            ok("late")
        });
        let shard = shard("", &proxy(addr));
        let c = open(&shard);
        c.send(&get("/slow", &[]));
        // The upstream holds the request (it took the gate's receiver)
        // while 300 ms pass on the test's clock; then the answer comes.
        until(|| LET_ANSWER.lock().unwrap().is_none()).await;
        advance(&shard, Duration::from_millis(300)).await;
        go.send(()).unwrap();
        let r = response(&c).await;
        assert_eq!((r.status, r.text().as_str()), (200, "late"));
        let _ = seen(&rx).await;
        settle().await;
        let h = shard.gate.borrow().latency[0];
        // Between 250 and 500 ms: the bucket of 500 ms, the eighth bound.
        let bucket = gapura_gate::latency::BOUNDS_US
            .iter()
            .position(|&b| b == 500_000)
            .unwrap();
        assert_eq!((h.count, h.buckets[bucket]), (1, 1), "{h:?}");
    })
}
