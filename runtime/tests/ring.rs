//! Plain HTTP/1.1 connections receiving from the shard's own ring
//! (`[server] ring = "on"`), clients' and upstreams', through the real
//! binary. (CI also runs the HTTP/1.1, proxy, framing and upgrade suites
//! with `GAPURA_TEST_RING` set, which turns the ring on in their profiles.)

mod common;

use common::upstream;
use common::*;
use std::net::Shutdown;
use std::time::Duration;

const PROXY_HOST: &str = "[[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\n";

fn proxy_profile(up: std::net::SocketAddr) -> String {
    profile(
        "ring = \"on\"\nheader_timeout_ms = 2000",
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"{up}\"]\nconnect_timeout_ms = 1000\nresponse_header_timeout_ms = 2000\nread_timeout_ms = 2000\n\n{PROXY_HOST}"
        ),
    )
}

/// Where the shard runs io_uring, its start line says it receives from
/// its own ring; else (epoll) it does not.
fn assert_ring_said(g: &Gapura) {
    assert!(g.wait_log("ready", Duration::from_secs(5)));
    let log = g.log_text();
    if log.contains("driver io_uring") {
        assert!(log.contains("client ring"), "{log}");
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn large_bodies_both_ways_and_pipelined_requests_arrive_whole() {
    let up = upstream::echo();
    let g = Gapura::start(&proxy_profile(up.addr));
    assert_ring_said(&g);
    let mut c = Client::connect(g.addr);
    // Larger than a connection may hold unread (its receive stops and
    // starts again) and than the shard's buffers in flight at once.
    let bodies: Vec<Vec<u8>> = (0..3).map(|i| pattern(100_000 + i * 7, i as u8)).collect();
    for body in &bodies {
        let mut req = format!(
            "POST /up HTTP/1.1\r\nHost: app.test\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        c.send(&req);
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), body.len());
        assert!(r.body == *body, "the echoed body differs");
    }
    // Ten requests in one write: ten answers, in order.
    let mut pipelined = Vec::new();
    for i in 0..10 {
        pipelined
            .extend_from_slice(format!("GET /p{i} HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes());
    }
    c.send(&pipelined);
    for i in 0..10 {
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("X-Seen-Target"), Some(format!("/p{i}").as_str()));
    }
    // One upstream connection carried them all.
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_client_that_half_closes_after_its_requests_gets_every_answer() {
    let g = Gapura::start(&profile("ring = \"on\"", HELLO_HOST));
    assert_ring_said(&g);
    let mut c = Client::connect(g.addr);
    c.send(b"GET /1 HTTP/1.1\r\nHost: hello.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: hello.test\r\n\r\nGET /3 HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    c.stream.shutdown(Shutdown::Write).unwrap();
    for _ in 0..3 {
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"hello\n");
    }
    assert!(c.closed_within(Duration::from_secs(5)));
    if g.log_text().contains("client ring") {
        // One receive armed for the connection's life; none waited for a
        // buffer or stopped at the cap (copied once a second).
        let armed = "gapura_ring_receives_armed_total{shard=\"0\"}";
        assert_eq!(g.wait_metric(armed, 1, Duration::from_secs(5)), 1);
        assert_eq!(g.metric("gapura_ring_starved_total{shard=\"0\"}"), 0);
        assert_eq!(g.metric("gapura_ring_capped_total{shard=\"0\"}"), 0);
    }
}

#[test]
fn an_upstream_that_closes_its_idle_connection_is_replaced() {
    // Answers, then closes: the pooled connection's end arrives on the
    // ring while it is idle, and the next request goes on a new one.
    let up = upstream::start(std::sync::Arc::new(|_: &upstream::UpRequest| {
        upstream::Reply::Close(upstream::ok(b"once"))
    }));
    let g = Gapura::start(&proxy_profile(up.addr));
    for _ in 0..3 {
        let r = request(g.addr, b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n");
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"once");
    }
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 3);
}
