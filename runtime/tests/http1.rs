//! HTTP/1.1 behaviour through the real binary: keep-alive, pipelining,
//! bodies, limits, ambiguous framing, timeouts, hosts and pages.

mod common;

use common::*;
use std::time::Duration;

fn hello() -> Gapura {
    Gapura::start(&profile(
        "header_timeout_ms = 1000\nidle_timeout_ms = 1500",
        HELLO_HOST,
    ))
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let g = hello();
    let mut c = Client::connect(g.addr);
    for _ in 0..20 {
        c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"hello\n");
        assert_eq!(r.header("Content-Type"), Some("text/plain"));
        assert!(r.header("Date").unwrap().ends_with(" GMT"));
        assert_eq!(r.header("Connection"), None);
    }
    assert_eq!(
        g.metric("gapura_connections_accepted_total{shard=\"0\"}"),
        1
    );
    assert_eq!(g.metric("gapura_requests_total{shard=\"0\"}"), 20);
}

#[test]
fn pipelined_requests_are_answered_in_order_in_one_write() {
    let g = hello();
    let profile2 = profile(
        "",
        r#"
[[host]]
names = ["a.test"]
kind = "respond"
body = "A"
[[host]]
names = ["b.test"]
kind = "respond"
body = "BB"
"#,
    );
    std::fs::write(&g.profile, profile2).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 2", Duration::from_secs(5)));
    let mut batch = Vec::new();
    for i in 0..16 {
        let host = if i % 2 == 0 { "a.test" } else { "b.test" };
        batch.extend_from_slice(format!("GET /{i} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
    }
    let writes_before = g.metric("gapura_writes_total{shard=\"0\"}");
    let mut c = Client::connect(g.addr);
    c.send(&batch);
    for i in 0..16 {
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, if i % 2 == 0 { &b"A"[..] } else { &b"BB"[..] });
    }
    assert_eq!(
        g.metric("gapura_writes_total{shard=\"0\"}") - writes_before,
        1
    );
}

#[test]
fn content_length_and_chunked_bodies_are_read_and_the_connection_continues() {
    let g = hello();
    let mut c = Client::connect(g.addr);
    c.send(b"POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 11\r\n\r\nhello world");
    assert_eq!(c.response(false).status, 200);
    c.send(b"POST / HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nTrailer: t\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    // (A body split over reads, byte by byte: the connection layer's
    // in-memory tests, `bodies`.)
    c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    let r = c.response(false);
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello\n"[..]));
}

#[test]
fn expect_100_continue_gets_the_interim_response_first() {
    let g = hello();
    let mut c = Client::connect(g.addr);
    c.send(
        b"POST / HTTP/1.1\r\nHost: hello.test\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
    );
    let interim = c.response(false);
    assert_eq!(interim.status, 100);
    c.send(b"data");
    assert_eq!(c.response(false).status, 200);
}

#[test]
fn head_gets_headers_only_and_http10_closes() {
    let g = hello();
    let mut c = Client::connect(g.addr);
    c.send(
        b"HEAD / HTTP/1.1\r\nHost: hello.test\r\n\r\nGET / HTTP/1.1\r\nHost: hello.test\r\n\r\n",
    );
    let r = c.response(true);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Length"), Some("6"));
    let r = c.response(false);
    assert_eq!(r.body, b"hello\n");

    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.0\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(2)));

    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.response(false).header("Connection"), Some("keep-alive"));
    c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
}

const LIMITED: &str = r#"
[defaults.limits]
max_body_bytes = 100
max_header_count = 10
max_header_bytes = 2048
max_url_bytes = 512

[[host]]
names = ["hello.test"]
default = true
kind = "respond"
body = "hello\n"
"#;

fn limited() -> Gapura {
    Gapura::start(&profile("", LIMITED))
}

fn assert_refused_and_closed(g: &Gapura, req: &[u8], status: u16) {
    let mut c = Client::connect(g.addr);
    c.send(req);
    let r = c.response(false);
    assert_eq!(
        r.status,
        status,
        "for {:?}",
        String::from_utf8_lossy(&req[..req.len().min(80)])
    );
    assert_eq!(r.header("Connection"), Some("close"));
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    assert!(c.closed_within(Duration::from_secs(3)));
}

#[test]
fn every_limit_answers_with_its_status() {
    let g = limited();
    // 413: declared body over the host limit.
    assert_refused_and_closed(
        &g,
        b"POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 101\r\n\r\n",
        413,
    );
    // 413: a chunked body that grows past it.
    let mut chunked =
        b"POST / HTTP/1.1\r\nHost: hello.test\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"28\r\n");
        chunked.extend_from_slice(&[b'x'; 40]);
        chunked.extend_from_slice(b"\r\n");
    }
    assert_refused_and_closed(&g, &chunked, 413);
    // At the limit passes.
    let mut c = Client::connect(g.addr);
    let mut at = b"POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 100\r\n\r\n".to_vec();
    at.extend_from_slice(&[b'y'; 100]);
    c.send(&at);
    assert_eq!(c.response(false).status, 200);
    // 414: target over the host limit.
    let long = format!(
        "GET /{} HTTP/1.1\r\nHost: hello.test\r\n\r\n",
        "a".repeat(600)
    );
    assert_refused_and_closed(&g, long.as_bytes(), 414);
    // 414 before the line even ends, past the outer bound.
    let huge = format!("GET /{}", "a".repeat(20_000));
    assert_refused_and_closed(&g, huge.as_bytes(), 414);
    // 431: too many header lines.
    let mut many = String::from("GET / HTTP/1.1\r\nHost: hello.test\r\n");
    for i in 0..12 {
        many.push_str(&format!("X-{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert_refused_and_closed(&g, many.as_bytes(), 431);
    // 431: header bytes over the limit.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: hello.test\r\nX-Big: {}\r\n\r\n",
        "b".repeat(3000)
    );
    assert_refused_and_closed(&g, big.as_bytes(), 431);
    // 431: past the parser's outer bound.
    let mut enormous = String::from("GET / HTTP/1.1\r\nHost: hello.test\r\n");
    for i in 0..100 {
        enormous.push_str(&format!("X-{i}: {}\r\n", "c".repeat(1200)));
    }
    assert_refused_and_closed(&g, enormous.as_bytes(), 431);
    // Each refused connection is counted when it ends; the last may still be
    // lingering for a moment.
    let limit = "gapura_errors_total{shard=\"0\",kind=\"limit\"}";
    assert_eq!(g.wait_metric(limit, 7, Duration::from_secs(5)), 7);
}

#[test]
fn ambiguous_framing_is_refused_with_400_and_closed() {
    let g = hello();
    let cases: [&[u8]; 9] = [
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Bare: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
        b"GARBAGE\r\n\r\n",
    ];
    for case in cases {
        assert_refused_and_closed(&g, case, 400);
    }
}

/// The binary applies its timeouts: a head that does not finish and a
/// keep-alive connection left idle are closed and counted. When each fires
/// (not before its time, soon after) is pinned on the test clock by the
/// connection layer's in-memory tests (`timeouts`).
#[test]
fn a_head_that_never_finishes_is_closed_at_the_header_timeout() {
    let g = hello(); // header_timeout_ms = 1000
    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\nX-Slow: aaa");
    assert!(c.closed_within(Duration::from_secs(10)));
    assert_eq!(
        g.wait_metric(
            "gapura_errors_total{shard=\"0\",kind=\"header_timeout\"}",
            1,
            Duration::from_secs(5),
        ),
        1
    );
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let g = hello(); // idle_timeout_ms = 1500
    let mut c = Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    assert!(c.closed_within(Duration::from_secs(10)));
    assert_eq!(
        g.wait_metric(
            "gapura_idle_timeouts_total{shard=\"0\"}",
            1,
            Duration::from_secs(5),
        ),
        1
    );
}

#[test]
fn hosts_redirects_unknown_hosts_and_page_forms() {
    let g = Gapura::start(&profile(
        "unknown_host = 421",
        r#"
[[host]]
names = ["site.test", "*.site.test"]
kind = "respond"
status = 201
body = "site"
headers = { "X-Extra" = "1" }

[[host]]
names = ["old.test"]
kind = "redirect"
status = 301
target = "https://site.test"
keep = "path_and_query"
"#,
    ));
    let r = request(
        g.addr,
        b"GET / HTTP/1.1\r\nHost: WWW.Site.Test:8080\r\n\r\n",
    );
    assert_eq!((r.status, r.body.as_slice()), (201, &b"site"[..]));
    assert_eq!(r.header("X-Extra"), Some("1"));
    let r = request(g.addr, b"GET /a/b?c=d HTTP/1.1\r\nHost: old.test\r\n\r\n");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("Location"), Some("https://site.test/a/b?c=d"));
    let r = request(g.addr, b"GET / HTTP/1.1\r\nHost: nobody.test\r\n\r\n");
    assert_eq!(r.status, 421);
    assert!(r.header("Content-Type").unwrap().starts_with("text/plain"));
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    let r = request(
        g.addr,
        b"GET / HTTP/1.1\r\nHost: nobody.test\r\nAccept: text/html\r\n\r\n",
    );
    assert_eq!(r.status, 421);
    assert!(r.header("Content-Type").unwrap().starts_with("text/html"));
    assert!(r
        .header("Content-Security-Policy")
        .unwrap()
        .contains("default-src 'none'"));
    assert!(String::from_utf8_lossy(&r.body).contains("Misdirected Request"));
    let r = request(g.addr, b"HEAD / HTTP/1.1\r\nHost: nobody.test\r\n\r\n");
    assert_eq!(r.status, 421);
    assert!(r.body.is_empty());
}

/// An idle connection quiet for a second parks (gives its read buffer
/// back); a request then wakes it and is answered, and its end (a close
/// while parked) is counted.
#[test]
fn idle_connections_park_and_wake_on_their_next_request() {
    park_and_wake("io_uring");
}

#[test]
fn idle_connections_park_and_wake_under_the_epoll_driver() {
    park_and_wake("epoll");
}

fn park_and_wake(driver: &str) {
    let g = Gapura::start(&profile(
        &format!("idle_timeout_ms = 600000\ndriver = \"{driver}\""),
        HELLO_HOST,
    ));
    let parked = "gapura_connections_parked{shard=\"0\"}";
    // Connections park while the shard holds more than 512.
    let filler: Vec<std::net::TcpStream> = (0..512)
        .map(|_| std::net::TcpStream::connect(g.addr).unwrap())
        .collect();
    assert_eq!(
        g.wait_metric(
            "gapura_connections_open{shard=\"0\"}",
            512,
            Duration::from_secs(10)
        ),
        512
    );
    let mut clients: Vec<Client> = (0..20).map(|_| Client::connect(g.addr)).collect();
    for c in clients.iter_mut() {
        c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
        assert_eq!(c.response(false).status, 200);
    }
    assert_eq!(g.wait_metric(parked, 20, Duration::from_secs(10)), 20);
    // Every parked connection wakes for its request, the pipelined ones
    // with all their bytes.
    for (i, c) in clients.iter_mut().enumerate() {
        if i % 2 == 0 {
            c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\nGET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
            assert_eq!(c.response(false).status, 200);
        } else {
            c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
        }
        assert_eq!(c.response(false).status, 200);
    }
    // They park again, and closing them while parked ends them.
    assert_eq!(g.wait_metric(parked, 20, Duration::from_secs(10)), 20);
    drop(clients);
    assert_eq!(g.wait_metric(parked, 0, Duration::from_secs(10)), 0);
    drop(filler);
    assert_eq!(
        g.wait_metric(
            "gapura_connections_open{shard=\"0\"}",
            0,
            Duration::from_secs(10)
        ),
        0
    );
    assert_eq!(g.metric("gapura_requests_total{shard=\"0\"}"), 50);
}

/// Only `hello.test`: any other name is refused (the `unknown_host` 404).
fn hello_only() -> Gapura {
    Gapura::start(&profile(
        "header_timeout_ms = 1000\nidle_timeout_ms = 1500",
        "[[host]]\nnames = [\"hello.test\"]\nkind = \"respond\"\nstatus = 200\nbody = \"hello\\n\"\n",
    ))
}

#[test]
fn a_refused_request_gets_no_100_continue_and_its_body_is_not_read() {
    let g = hello_only();
    let mut c = Client::connect(g.addr);
    c.send(b"POST / HTTP/1.1\r\nHost: other.test\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n");
    // The refusal comes first, and says the connection ends.
    let r = c.response(false);
    assert_eq!(r.status, 404);
    assert_eq!(r.header("Connection"), Some("close"));
    // A client that sends its body anyway is cut off long before the end:
    // the server reads none of it past its short linger.
    let mut w = c.stream.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let piece = vec![b'x'; 64 * 1024];
    let mut sent = 0usize;
    while sent < 100_000_000 {
        use std::io::Write;
        if w.write_all(&piece).is_err() {
            break;
        }
        sent += piece.len();
    }
    assert!(
        sent < 32 * 1024 * 1024,
        "{sent} bytes of the body were taken"
    );
    assert_eq!(
        g.metric("gapura_responses_total{shard=\"0\",class=\"1xx\"}"),
        0
    );
}

#[test]
fn a_refusal_reads_a_small_declared_body_and_keeps_the_connection() {
    let g = hello_only();
    let mut c = Client::connect(g.addr);
    c.send(b"POST / HTTP/1.1\r\nHost: other.test\r\nContent-Length: 11\r\n\r\nhello world");
    let r = c.response(false);
    assert_eq!((r.status, r.header("Connection")), (404, None));
    c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    // Past the bound (64 KiB), or without a length, or held back for
    // `100 Continue`: the refusal closes the connection unread.
    for head in [
        "POST / HTTP/1.1\r\nHost: other.test\r\nContent-Length: 65537\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: other.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    ] {
        let mut c = Client::connect(g.addr);
        c.send(head.as_bytes());
        let r = c.response(false);
        assert_eq!(
            (r.status, r.header("Connection")),
            (404, Some("close")),
            "{head:?}"
        );
        assert!(c.closed_within(Duration::from_secs(5)), "{head:?}");
    }
    // An admitted request is still invited to send its body.
    let mut c = Client::connect(g.addr);
    c.send(
        b"POST / HTTP/1.1\r\nHost: hello.test\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
    );
    assert_eq!(c.response(false).status, 100);
    c.send(b"data");
    assert_eq!(c.response(false).status, 200);
}

#[test]
fn the_default_body_limit_is_one_mebibyte_and_its_page_names_the_key() {
    let g = hello_only();
    let ok = request(
        g.addr,
        &[
            b"POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 1048576\r\n\r\n".as_slice(),
            &vec![b'x'; 1_048_576],
        ]
        .concat(),
    );
    assert_eq!(ok.status, 200);
    let r = request(
        g.addr,
        b"POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 1048577\r\n\r\n",
    );
    assert_eq!(r.status, 413);
    assert!(
        String::from_utf8_lossy(&r.body).contains("limits.max_body_bytes"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}
