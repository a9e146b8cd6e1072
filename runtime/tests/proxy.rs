//! The reverse proxy through the real binary, against real upstream
//! servers started by the tests.

mod common;

use common::upstream::{self, Reply, UpRequest};
use common::*;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn servers(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A profile with one proxy host `app.test` routing `/` to group `app`.
fn proxy_profile(addrs: &[SocketAddr], upstream_extra: &str, routes: &str) -> String {
    let routes = if routes.is_empty() {
        "[[host.route]]\npath = \"/\"\nupstream = \"app\"\nwebsocket = true\n".to_string()
    } else {
        routes.to_string()
    };
    profile(
        "header_timeout_ms = 2000",
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [{}]\nconnect_timeout_ms = 1000\nresponse_header_timeout_ms = 1000\nread_timeout_ms = 1000\n{upstream_extra}\n\n[[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n{routes}",
            servers(addrs)
        ),
    )
}

fn get(g: &Gapura, path: &str) -> Response {
    request(
        g.addr,
        format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes(),
    )
}

#[test]
fn forwards_with_forwarding_headers_and_without_hop_by_hop_ones() {
    let up = upstream::fixed(b"from upstream");
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    let r = request(
        g.addr,
        b"GET /a/b?c=1 HTTP/1.1\r\nHost: app.test\r\nConnection: keep-alive, X-Private\r\nX-Private: p\r\nKeep-Alive: 5\r\nX-Forwarded-For: 203.0.113.9\r\nX-Custom: kept\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"from upstream");
    assert_eq!(r.header("X-Upstream"), Some("yes"));
    let seen = up.requests.lock().unwrap()[0].clone();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.target, "/a/b?c=1");
    assert_eq!(seen.header("Host"), Some("app.test"));
    // The peer is the client (`direct`): what the client wrote of its own
    // address is not passed on; Gapura writes its own.
    assert_eq!(seen.header("X-Forwarded-For"), Some("127.0.0.1"));
    assert_eq!(seen.header("X-Forwarded-Proto"), Some("http"));
    assert_eq!(seen.header("X-Forwarded-Host"), Some("app.test"));
    assert_eq!(seen.header("X-Custom"), Some("kept"));
    assert_eq!(seen.header("X-Request-Id").map(str::len), Some(24));
    assert_eq!(seen.header("X-Private"), None);
    assert_eq!(seen.header("Keep-Alive"), None);
    assert_eq!(seen.header("Connection"), None);
}

/// A client's own `X-Forwarded-For`, `X-Real-IP`, `Forwarded` and
/// `CF-Connecting-IP` reach the upstream only from a trusted proxy (whose
/// chain is kept and appended to); from anyone else they are dropped, so
/// an upstream reading the first element never sees an address the client
/// chose.
#[test]
fn forwarding_headers_are_believed_only_from_trusted_proxies() {
    let claims = b"GET / HTTP/1.1\r\nHost: app.test\r\nX-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nCF-Connecting-IP: 6.6.6.6\r\n\r\n";
    for (client, kept) in [
        ("", false),
        (
            "[client]\nmode = \"x_forwarded_for\"\ntrusted_proxies = [\"10.0.0.0/16\"]\n",
            false,
        ),
        (
            "[client]\nmode = \"x_forwarded_for\"\ntrusted_proxies = [\"127.0.0.0/16\"]\n",
            true,
        ),
    ] {
        let up = upstream::fixed(b"ok");
        let text = proxy_profile(&[up.addr], "", "")
            .replace("[[upstream]]", &format!("{client}\n[[upstream]]"));
        let g = Gapura::start(&text);
        assert_eq!(request(g.addr, claims).status, 200, "{client}");
        let seen = up.requests.lock().unwrap()[0].clone();
        if kept {
            assert_eq!(seen.header("X-Forwarded-For"), Some("6.6.6.6, 127.0.0.1"));
            assert_eq!(seen.header("X-Real-IP"), Some("6.6.6.6"));
        } else {
            assert_eq!(
                seen.header("X-Forwarded-For"),
                Some("127.0.0.1"),
                "{client}"
            );
            for h in ["X-Real-IP", "Forwarded", "CF-Connecting-IP"] {
                assert_eq!(seen.header(h), None, "{h} {client}");
            }
        }
    }
}

#[test]
fn routes_pick_upstreams_by_exact_and_segment_bounded_prefix() {
    let a = upstream::fixed(b"A");
    let b = upstream::fixed(b"B");
    let c = upstream::fixed(b"C");
    let text = profile(
        "",
        &format!(
            r#"
[[upstream]]
name = "a"
servers = ["{}"]
[[upstream]]
name = "b"
servers = ["{}"]
[[upstream]]
name = "c"
servers = ["{}"]

[[host]]
names = ["app.test"]
default = true
kind = "proxy"
[[host.route]]
path = "/"
upstream = "a"
[[host.route]]
path = "/admin"
upstream = "b"
[[host.route]]
path = "/admin/status"
match = "exact"
upstream = "c"
"#,
            a.addr, b.addr, c.addr
        ),
    );
    let g = Gapura::start(&text);
    let body = |p: &str| String::from_utf8(get(&g, p).body).unwrap();
    assert_eq!(body("/"), "A");
    assert_eq!(body("/administrator"), "A");
    assert_eq!(body("/admin"), "B");
    assert_eq!(body("/admin/"), "B");
    assert_eq!(body("/admin/x"), "B");
    assert_eq!(body("/ADMIN/x"), "B");
    assert_eq!(body("/admin/status"), "C");
    assert_eq!(body("/admin/status/more"), "B");
    // No redundant spelling dodges a route.
    for spelling in [
        "/%61dmin/x",
        "/admin%2Fx",
        "/admin%5cx",
        "/admin\\x",
        "//admin//x",
        "/x/../admin/x",
        "/./admin/./x",
        "/Admin;jsessionid=1/x",
        "/admin./x",
        "/%2e%2e/admin/x",
    ] {
        assert_eq!(body(spelling), "B", "{spelling}");
    }
    assert_eq!(body("/admin/%73tatus"), "C");
    assert_eq!(get(&g, "/bad%zz").status, 400);
    // The upstream still receives the path as the client sent it.
    get(&g, "/ADMIN/x?q=1");
    assert_eq!(
        b.requests.lock().unwrap().last().unwrap().target,
        "/ADMIN/x?q=1"
    );
}

#[test]
fn a_proxy_host_without_a_matching_route_answers_404() {
    let up = upstream::fixed(b"x");
    let routes = "[[host.route]]\npath = \"/api\"\nupstream = \"app\"\n";
    let g = Gapura::start(&proxy_profile(&[up.addr], "", routes));
    assert_eq!(get(&g, "/other").status, 404);
    assert_eq!(get(&g, "/api/x").status, 200);
}

use gapura_gate::testing::xorshift64 as xorshift;

#[test]
fn bodies_of_random_sizes_and_chunking_arrive_byte_identical_both_ways() {
    let up = upstream::echo();
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut c = Client::connect(g.addr);
    for case in 0..40 {
        let len = (xorshift(&mut seed) % 200_000) as usize;
        let body: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + case) as u8).collect();
        let chunked = case % 2 == 1;
        let mut req = if chunked {
            b"POST /echo HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()
        } else {
            format!("POST /echo HTTP/1.1\r\nHost: app.test\r\nContent-Length: {len}\r\n\r\n")
                .into_bytes()
        };
        if chunked {
            let mut off = 0;
            while off < len {
                let n = ((xorshift(&mut seed) % 9000) as usize + 1).min(len - off);
                req.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                req.extend_from_slice(&body[off..off + n]);
                req.extend_from_slice(b"\r\n");
                off += n;
            }
            req.extend_from_slice(b"0\r\n\r\n");
        } else {
            req.extend_from_slice(&body);
        }
        // Send in random slices to exercise partial reads.
        let mut off = 0;
        while off < req.len() {
            let n = ((xorshift(&mut seed) % 70_000) as usize + 1).min(req.len() - off);
            c.send(&req[off..off + n]);
            off += n;
        }
        let r = c.response(false);
        assert_eq!(r.status, 200, "case {case}");
        assert_eq!(r.body.len(), len, "case {case}");
        assert!(r.body == body, "case {case}: body differs");
    }
}

#[test]
fn chunked_and_close_delimited_responses_are_relayed() {
    let up = upstream::start(Arc::new(|req: &UpRequest| {
        match req.target.as_str() {
        "/chunked" => Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n".to_vec(),
        ),
        "/close" => Reply::Close(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end".to_vec()),
        "/head" => Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n".to_vec()),
        "/nocontent" => Reply::Bytes(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
        _ => Reply::Bytes(upstream::ok(b"?")),
    }
    }));
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    let mut c = Client::connect(g.addr);
    c.send(b"GET /chunked HTTP/1.1\r\nHost: app.test\r\n\r\n");
    // Read the raw chunked answer until its end.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.buf.ends_with(b"0\r\nX-Trailer: t\r\n\r\n") && Instant::now() < deadline {
        let mut tmp = [0u8; 4096];
        let n = c.stream.read(&mut tmp).unwrap();
        c.buf.extend_from_slice(&tmp[..n]);
    }
    let text = String::from_utf8_lossy(&c.buf).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("Transfer-Encoding: chunked\r\n"));
    assert!(
        text.ends_with("\r\n\r\n5\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"),
        "{text}"
    );
    c.buf.clear();
    // The connection stays usable after a chunked answer.
    c.send(b"HEAD /head HTTP/1.1\r\nHost: app.test\r\n\r\n");
    let r = c.response(true);
    assert_eq!((r.status, r.header("Content-Length")), (200, Some("99")));
    c.send(b"GET /nocontent HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert_eq!(c.response(true).status, 204);
    c.send(b"GET /close HTTP/1.1\r\nHost: app.test\r\n\r\n");
    let mut rest = Vec::new();
    c.stream.read_to_end(&mut rest).unwrap();
    let all = [c.buf.clone(), rest].concat();
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("Connection: close\r\n"));
    assert!(text.ends_with("\r\n\r\nuntil the end"), "{text}");
}

#[test]
fn interim_responses_are_passed_on() {
    let up = upstream::start(Arc::new(|_: &UpRequest| {
        Reply::Bytes(
            b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        )
    }));
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n");
    let early = c.response(false);
    assert_eq!(early.status, 103);
    assert_eq!(early.header("Link"), Some("</s.css>; rel=preload"));
    let r = c.response(false);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
}

#[test]
fn expect_continue_is_answered_before_the_body_is_streamed() {
    let up = upstream::echo();
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    let mut c = Client::connect(g.addr);
    c.send(
        b"PUT /x HTTP/1.1\r\nHost: app.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    );
    assert_eq!(c.response(false).status, 100);
    c.send(b"abcde");
    let r = c.response(false);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"abcde"[..]));
    assert_eq!(up.requests.lock().unwrap()[0].header("Expect"), None);
}

#[test]
fn websocket_upgrade_tunnels_bytes_both_ways() {
    let up = upstream::start(Arc::new(|req: &UpRequest| {
        assert_eq!(req.header("Upgrade"), Some("websocket"));
        Reply::Takeover(Box::new(|mut s: std::net::TcpStream| {
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n").unwrap();
            let mut buf = [0u8; 1024];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let mut out = b"echo:".to_vec();
                        out.extend_from_slice(&buf[..n]);
                        if s.write_all(&out).is_err() {
                            return;
                        }
                    }
                }
            }
        }))
    }));
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    let mut c = Client::connect(g.addr);
    c.send(b"GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 101);
    assert_eq!(r.header("Upgrade"), Some("websocket"));
    for msg in [&b"one"[..], b"two", b"three"] {
        c.send(msg);
        let mut got = Vec::new();
        let want = [&b"echo:"[..], msg].concat();
        while got.len() < want.len() {
            let mut tmp = [0u8; 64];
            let n = c.stream.read(&mut tmp).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&tmp[..n]);
        }
        assert_eq!(got, want);
    }
    assert_eq!(g.metric("gapura_upgrades_total{shard=\"0\"}"), 1);
}

#[test]
fn a_client_that_stops_reading_is_closed_at_the_write_timeout() {
    // More than the loopback socket buffers hold, so the relay's writes to
    // the client block once they are full.
    let big = Arc::new(upstream::ok(&vec![b'x'; 32 << 20]));
    let up = upstream::start(Arc::new(move |_: &UpRequest| Reply::Bytes(big.to_vec())));
    let text = proxy_profile(&[up.addr], "", "").replacen(
        "header_timeout_ms = 2000",
        "header_timeout_ms = 2000\nwrite_timeout_ms = 300",
        1,
    );
    let g = Gapura::start(&text);
    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n");
    // Never read: the write that cannot finish meets its deadline (the
    // default is 30 s), and the connection closes.
    let sample = "gapura_connections_closed_total{shard=\"0\"}";
    assert_eq!(g.wait_metric(sample, 1, Duration::from_secs(10)), 1);
    assert!(c.closed_within(Duration::from_secs(10)));
    // The server serves on.
    assert_eq!(get(&g, "/").status, 200);
}

#[test]
fn upstream_failures_get_their_statuses() {
    // Each failure: its status, its own words on the page, and a log line
    // naming the upstream, the server and the reason.
    let said = |g: &Gapura, status: u16, words: &str, line: &str| {
        let r = get(g, "/");
        assert_eq!(r.status, status, "{line}");
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert!(body.contains(words), "{line}: {body}");
        assert!(
            g.wait_log(line, Duration::from_secs(5)),
            "{line}:\n{}",
            g.log_text()
        );
    };
    let dead = upstream::dead_addr();
    let g = Gapura::start(&proxy_profile(&[dead], "fail_threshold = 0", ""));
    said(
        &g,
        502,
        "The upstream server refused the connection.",
        &format!("upstream app server {dead}: connection refused (502;"),
    );

    let reset = upstream::start(Arc::new(|_: &UpRequest| Reply::Drop));
    let g = Gapura::start(&proxy_profile(&[reset.addr], "fail_threshold = 0", ""));
    said(
        &g,
        502,
        "closed the connection without an answer",
        &format!(
            "upstream app server {}: connection closed before the answer",
            reset.addr
        ),
    );

    let slow = upstream::start(Arc::new(|_: &UpRequest| {
        std::thread::sleep(Duration::from_millis(1800));
        Reply::Bytes(upstream::ok(b"late"))
    }));
    let g = Gapura::start(&proxy_profile(&[slow.addr], "fail_threshold = 0", ""));
    // Answered by the timeout (1 s), not by the late answer (1.8 s).
    said(
        &g,
        504,
        "The upstream server did not answer in time.",
        &format!("upstream app server {}: no answer within", slow.addr),
    );

    let garbage = upstream::start(Arc::new(|_: &UpRequest| {
        Reply::Bytes(b"SURPRISE\r\n\r\n".to_vec())
    }));
    let g = Gapura::start(&proxy_profile(&[garbage.addr], "fail_threshold = 0", ""));
    said(
        &g,
        502,
        "an answer that is not valid HTTP",
        &format!(
            "upstream app server {}: the answer is not valid HTTP",
            garbage.addr
        ),
    );

    // A response that breaks after it started: the client connection closes.
    let broken = upstream::start(Arc::new(|_: &UpRequest| {
        Reply::Close(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part".to_vec())
    }));
    let g = Gapura::start(&proxy_profile(&[broken.addr], "fail_threshold = 0", ""));
    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n");
    assert!(c.closed_within(Duration::from_secs(3)));
    let text = String::from_utf8_lossy(&c.buf);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
    assert_eq!(text.matches("HTTP/1.1").count(), 1, "never a second status");
}

#[test]
fn a_group_whose_servers_are_all_out_still_tries_one() {
    // A group's only server is never taken out: each request tries it.
    let dead = upstream::dead_addr();
    let g = Gapura::start(&proxy_profile(
        &[dead],
        "fail_threshold = 1\nfail_cooldown_ms = 60000",
        "",
    ));
    assert_eq!(get(&g, "/").status, 502);
    assert_eq!(get(&g, "/").status, 502);
    // Two servers, both out for a minute: a request still probes one.
    let (a, b) = (upstream::dead_addr(), upstream::dead_addr());
    let g = Gapura::start(&proxy_profile(
        &[a, b],
        "fail_threshold = 1\nfail_cooldown_ms = 60000",
        "",
    ));
    assert_eq!(get(&g, "/").status, 502);
    assert_eq!(get(&g, "/").status, 502, "probed though both are out");
}

#[test]
fn a_server_back_from_an_outage_serves_at_once() {
    // Down: its port refuses; both servers go out for a minute.
    let addr = upstream::released_addr();
    let other = upstream::dead_addr();
    let g = Gapura::start(&proxy_profile(
        &[addr, other],
        "fail_threshold = 1\nfail_cooldown_ms = 60000",
        "",
    ));
    for _ in 0..3 {
        assert_eq!(get(&g, "/").status, 502);
    }
    // Restored on the same port: the next request's probe finds it, and its
    // first success brings it back without waiting out the cooldown.
    let listener = std::net::TcpListener::bind(addr).expect("the port is free again");
    let _up = upstream::start_on(
        listener,
        Arc::new(|_: &UpRequest| upstream::Reply::Bytes(upstream::ok(b"back"))),
    );
    let mut ok = 0;
    for _ in 0..4 {
        if get(&g, "/").status == 200 {
            ok += 1;
        }
    }
    assert!(ok >= 3, "{ok} of 4 served after the server came back");
}

#[test]
fn a_refused_server_is_retried_on_another() {
    let dead = upstream::dead_addr();
    let alive = upstream::fixed(b"alive");
    let g = Gapura::start(&proxy_profile(
        &[dead, alive.addr],
        "fail_threshold = 0",
        "",
    ));
    for _ in 0..6 {
        let r = get(&g, "/");
        assert_eq!((r.status, r.body.as_slice()), (200, &b"alive"[..]));
    }
    // POST is retried too when the connection could not be made.
    let r = request(
        g.addr,
        b"POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn passive_health_takes_a_failing_server_out_for_its_cooldown() {
    let dead = upstream::dead_addr();
    let alive = upstream::fixed(b"alive");
    let g = Gapura::start(&proxy_profile(
        &[dead, alive.addr],
        "fail_threshold = 2\nfail_cooldown_ms = 60000",
        "",
    ));
    for _ in 0..4 {
        assert_eq!(get(&g, "/").status, 200);
    }
    let failures = g.metric("gapura_upstream_failures_total{shard=\"0\"}");
    assert_eq!(failures, 2);
    for _ in 0..10 {
        assert_eq!(get(&g, "/").status, 200);
    }
    assert_eq!(
        g.metric("gapura_upstream_failures_total{shard=\"0\"}"),
        failures
    );
}

#[test]
fn active_health_checks_take_servers_out_and_bring_them_back() {
    let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let h = healthy.clone();
    let flaky = upstream::start(Arc::new(move |req: &UpRequest| {
        if req.target == "/healthz" {
            if h.load(Ordering::Relaxed) {
                Reply::Close(upstream::ok(b"ok"))
            } else {
                Reply::Close(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n".to_vec(),
                )
            }
        } else {
            Reply::Bytes(upstream::ok(b"flaky"))
        }
    }));
    let steady = upstream::fixed(b"steady");
    let g = Gapura::start(&proxy_profile(
        &[flaky.addr, steady.addr],
        "[upstream.health]\npath = \"/healthz\"\ninterval_ms = 200\ntimeout_ms = 100\nexpect_status = \"200-299\"",
        "",
    ));
    assert!(
        g.wait_log("unhealthy", Duration::from_secs(3)),
        "{}",
        g.log_text()
    );
    for _ in 0..8 {
        assert_eq!(get(&g, "/").body, b"steady");
    }
    healthy.store(true, Ordering::Relaxed);
    assert!(g.wait_log("healthy again", Duration::from_secs(3)));
    let mut seen_flaky = false;
    for _ in 0..8 {
        seen_flaky |= get(&g, "/").body == b"flaky";
    }
    assert!(seen_flaky);
}

#[test]
fn a_client_abort_mid_body_leaves_the_pool_healthy() {
    let up = upstream::echo();
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    {
        let mut c = Client::connect(g.addr);
        c.send(b"POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 100000\r\n\r\npartial body");
        // The server has read the head and the body's start, and is
        // passing them on to the upstream.
        assert!(
            wait_peer_read(&c.stream, Duration::from_secs(10)),
            "the server never read the partial request"
        );
        assert!(
            wait_until(Duration::from_secs(10), || {
                up.connections.load(Ordering::Relaxed) == 1
            }),
            "the upstream never saw a connection"
        );
    }
    // The abort is seen: the client's connection is counted closed.
    let sample = "gapura_connections_closed_total{shard=\"0\"}";
    assert_eq!(g.wait_metric(sample, 1, Duration::from_secs(10)), 1);
    for i in 0..10 {
        let r = request(
            g.addr,
            format!("POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 3\r\n\r\nr{i:02}")
                .as_bytes(),
        );
        assert_eq!((r.status, r.body), (200, format!("r{i:02}").into_bytes()));
    }
}

#[test]
fn the_pool_reuses_upstream_connections() {
    let up = upstream::fixed(b"pooled");
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    for _ in 0..5 {
        let mut c = Client::connect(g.addr);
        for _ in 0..10 {
            c.send(b"GET / HTTP/1.1\r\nHost: app.test\r\n\r\n");
            assert_eq!(c.response(false).body, b"pooled");
        }
    }
    assert_eq!(up.requests.lock().unwrap().len(), 50);
    assert!(
        up.connections.load(Ordering::Relaxed) <= 2,
        "{}",
        up.connections.load(Ordering::Relaxed)
    );
}

#[test]
fn answer_latency_is_a_histogram_per_host() {
    let up = upstream::fixed(b"ok");
    let g = Gapura::start(&proxy_profile(&[up.addr], "", ""));
    for _ in 0..5 {
        assert_eq!(get(&g, "/").status, 200);
    }
    let count = "gapura_request_duration_seconds_count{host=\"app.test\"}";
    assert_eq!(
        common::gate::wait_sample(&g, count, 5, Duration::from_secs(3)),
        5
    );
    assert_eq!(
        g.metric("gapura_request_duration_seconds_bucket{host=\"app.test\",le=\"+Inf\"}"),
        5
    );
    let text = g.metrics();
    assert!(
        text.contains("# TYPE gapura_request_duration_seconds histogram"),
        "{text}"
    );
    // Loopback answers in well under a second: every request is in a
    // bucket at or below 1 s.
    assert_eq!(
        g.metric("gapura_request_duration_seconds_bucket{host=\"app.test\",le=\"1\"}"),
        5
    );
}
