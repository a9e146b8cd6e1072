//! Per-connection limits through the real binary: a keep-alive connection
//! over its host's `connection_rate` gets 429 and is closed, and a
//! WebSocket tunnel's messages over the host's rate or size are dropped
//! whole or close the tunnel with 1008 or 1009, every one counted; out
//! of file descriptors, accepts fail, are counted, the waiting connections
//! are refused, and the server serves again once descriptors are free.

mod common;

use common::gate::{get, respond_host, METRIC_WAIT};
use common::upstream;
use common::*;
use std::io::Read;
use std::time::Duration;

#[test]
fn a_connection_over_its_request_rate_gets_429_and_is_closed() {
    let g = Gapura::start(&profile(
        "",
        &respond_host(
            "c.test",
            "default = true\nconnection_rate = { requests = 1, burst = 2 }",
        ),
    ));
    let mut c = Client::connect(g.addr);
    for _ in 0..2 {
        c.send(&get("c.test", "/"));
        assert_eq!(c.response(false).status, 200);
    }
    c.send(&get("c.test", "/"));
    let r = c.response(false);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("Retry-After"), Some("1"));
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(3)));
    // Another connection has a bucket of its own.
    let mut d = Client::connect(g.addr);
    d.send(&get("c.test", "/"));
    assert_eq!(d.response(false).status, 200);
    assert_eq!(
        g.wait_metric(
            "gapura_connection_rate_refused_total{shard=\"0\"}",
            1,
            METRIC_WAIT
        ),
        1
    );
}

/// A masked client frame.
fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    let key = [9, 8, 7, 6];
    v.extend_from_slice(&key);
    v.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    v
}

fn ws_gapura(up: std::net::SocketAddr, websocket: &str) -> Gapura {
    Gapura::start(&profile(
        "",
        &format!(
            r#"
[[upstream]]
name = "app"
servers = ["{up}"]

[[host]]
names = ["ws.test"]
default = true
kind = "proxy"
websocket = {websocket}
[[host.route]]
path = "/"
upstream = "app"
websocket = true
"#
        ),
    ))
}

fn open_tunnel(g: &Gapura) -> Client {
    let mut c = Client::connect(g.addr);
    c.send(b"GET /ws HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    assert_eq!(c.response(true).status, 101);
    c
}

/// Reads until `want` bytes came or the peer closed (ten seconds at most).
fn read_for(c: &mut Client, want: usize) -> Vec<u8> {
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = std::mem::take(&mut c.buf);
    let mut tmp = [0u8; 4096];
    while got.len() < want {
        match c.stream.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&tmp[..n]),
        }
    }
    got
}

#[test]
fn websocket_messages_over_the_rate_or_size_are_dropped_whole() {
    let up = upstream::upgrading_echo();
    let g = ws_gapura(
        up.addr,
        "{ messages_per_second = 1, burst = 2, max_message_bytes = 100 }",
    );
    let mut c = open_tunnel(&g);
    let (a, b, big, d) = (
        frame(1, b"one"),
        frame(1, b"two"),
        frame(2, &[0u8; 120]),
        frame(1, b"three"),
    );
    // Two pass on the burst; the big one is dropped for its size, the
    // last for the rate. A close frame, always relayed, comes back last:
    // what the upstream echoed before it is all that passed.
    let close = frame(8, &[3, 232]);
    c.send(&[a.clone(), b.clone(), big, d, close.clone()].concat());
    let want = [a, b, close].concat();
    let got = read_for(&mut c, want.len());
    assert_eq!(
        got, want,
        "only the messages within the limits reach the upstream"
    );
    assert_eq!(
        g.wait_metric(
            "gapura_websocket_dropped_total{shard=\"0\"}",
            2,
            METRIC_WAIT
        ),
        2
    );
}

#[test]
fn websocket_messages_over_the_rate_close_the_tunnel_with_1008_when_asked() {
    let up = upstream::upgrading_echo();
    let g = ws_gapura(
        up.addr,
        "{ messages_per_second = 1, burst = 1, on_limit = \"close\" }",
    );
    let mut c = open_tunnel(&g);
    let a = frame(1, b"one");
    c.send(&[a.clone(), frame(1, b"two")].concat());
    let got = read_for(&mut c, 100);
    // A close frame with 1008 from Gapura, after the first message's echo
    // when the upstream answered before the tunnel closed.
    let close = [0x88, 2, 0x03, 0xf0];
    assert!(
        got == close || got == [a.clone(), close.to_vec()].concat(),
        "a close frame with 1008: {got:?}"
    );
    assert!(c.closed_within(Duration::from_secs(3)));
    assert_eq!(
        g.wait_metric("gapura_websocket_closed_total{shard=\"0\"}", 1, METRIC_WAIT),
        1
    );
}

/// The file descriptors `pid` has open.
fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

#[test]
fn out_of_file_descriptors_accepts_fail_counted_and_service_resumes() {
    let mut g = Gapura::start(&profile("", &respond_host("f.test", "default = true")));
    let pid = g.child.id();
    let limit = open_fds(pid) + 6;
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reading and lowering the soft limit of our own child.
    unsafe {
        assert_eq!(
            libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut rl),
            0
        );
        let low = libc::rlimit {
            rlim_cur: limit,
            rlim_max: rl.rlim_max,
        };
        assert_eq!(
            libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &low, std::ptr::null_mut()),
            0
        );
    }
    // More connections than descriptors left: the kernel queues them, the
    // server accepts until it runs out.
    let mut clients: Vec<Client> = (0..24)
        .map(|_| {
            let mut c = Client::connect(g.addr);
            c.send(&get("f.test", "/"));
            c
        })
        .collect();
    assert!(
        g.wait_log("accept failed", Duration::from_secs(10)),
        "{} / {:?}",
        g.log_text(),
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    );
    // Those past the limit are refused (closed at once with a reserve
    // descriptor), not left waiting: the last one is closed unanswered.
    let last = clients.last_mut().unwrap();
    assert!(last.closed_within(Duration::from_secs(10)));
    assert!(
        matches!(g.child.try_wait(), Ok(None)),
        "the server died out of descriptors"
    );
    drop(clients);
    // Descriptors free again: the next request is served.
    let mut served = false;
    wait_until(Duration::from_secs(10), || {
        served = std::net::TcpStream::connect(g.addr)
            .ok()
            .and_then(|mut s| {
                use std::io::Write;
                s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                s.write_all(&get("f.test", "/")).ok()?;
                let mut buf = [0u8; 64];
                let n = s.read(&mut buf).ok()?;
                Some(buf[..n].starts_with(b"HTTP/1.1 200"))
            })
            .unwrap_or(false);
        served
    });
    assert!(served, "no request served after the descriptors were freed");
    assert!(g.metric("gapura_accept_errors_total{shard=\"0\"}") >= 1);
    assert!(g.metric("gapura_accept_refused_total{shard=\"0\"}") >= 1);
}
