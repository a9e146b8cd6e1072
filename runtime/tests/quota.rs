//! Rate limits, budgets, leases and connection limits through the real
//! binary: the 429 answer, leases given back on client aborts, buckets kept
//! across reloads, exact per-client limits over many connections and shards,
//! the twelve-host soak, and refusals at accept.

mod common;

use common::gate::{get, get_close, respond_host, retry_after, METRIC_WAIT};
use common::upstream::{self, Reply, UpRequest};
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn over_the_rate_limit_answers_429_with_retry_after_and_robots_txt_is_exempt() {
    let text = profile(
        "",
        &format!(
            "[[rate_limit]]\nname = \"tight\"\nrequests = 1\nper = \"minute\"\nburst = 2\n\n{}",
            respond_host("rl.test", "default = true\nrate_limit = \"tight\"")
        ),
    );
    let g = Gapura::start(&text);
    let mut c = Client::connect(g.addr);
    for _ in 0..2 {
        c.send(&get("rl.test", "/"));
        assert_eq!(c.response(false).status, 200);
    }

    // Plain text: the stable body with the same number as the header.
    c.send(&get("rl.test", "/"));
    let r = c.response(false);
    assert_eq!(r.status, 429);
    let s = retry_after(&r);
    // One token a minute, the last taken a moment ago: 60 s, rounded up.
    assert!((59..=60).contains(&s), "Retry-After {s}");
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    let body = String::from_utf8(r.body.clone()).unwrap();
    let id = body
        .strip_prefix(&format!(
            "429 Too Many Requests\nToo many requests. Retry after {s} seconds.\nrequest "
        ))
        .and_then(|rest| rest.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("{body:?}"));
    assert!(
        id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{body:?}"
    );

    // HTML for a browser, on the same keep-alive connection.
    c.send(b"GET /page HTTP/1.1\r\nHost: rl.test\r\nAccept: text/html,*/*;q=0.8\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 429);
    let s = retry_after(&r);
    assert!((59..=60).contains(&s), "Retry-After {s}");
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    assert!(r.header("Content-Security-Policy").is_some());
    let html = String::from_utf8(r.body.clone()).unwrap();
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(
        html.contains(&format!("Retry after {s} seconds.")),
        "{html}"
    );

    // GET and HEAD of /robots.txt are never limited; other methods are.
    for req in [
        &b"GET /robots.txt HTTP/1.1\r\nHost: rl.test\r\n\r\n"[..],
        b"GET /robots.txt?x=1 HTTP/1.1\r\nHost: rl.test\r\n\r\n",
        b"GET /%72obots.txt HTTP/1.1\r\nHost: rl.test\r\n\r\n",
    ] {
        c.send(req);
        let r = c.response(false);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"ok\n"[..]),
            "{}",
            String::from_utf8_lossy(req)
        );
    }
    c.send(b"HEAD /robots.txt HTTP/1.1\r\nHost: rl.test\r\n\r\n");
    assert_eq!(c.response(true).status, 200);
    c.send(b"POST /robots.txt HTTP/1.1\r\nHost: rl.test\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.response(false).status, 429);
    c.send(&get("rl.test", "/robots.txt.bak"));
    assert_eq!(c.response(false).status, 429);

    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"rate\"}",
            4,
            METRIC_WAIT
        ),
        4
    );
    assert_eq!(
        g.wait_metric("gapura_quota_exempt_total{shard=\"0\"}", 4, METRIC_WAIT),
        4
    );
    // The limit's own counters, by its name.
    assert_eq!(
        g.metric("gapura_rate_limit_total{limit=\"tight\",result=\"refused\"}"),
        4
    );
    assert_eq!(
        g.metric("gapura_rate_limit_total{limit=\"tight\",result=\"shadow\"}"),
        0
    );
    // What it let through (its burst of two), apart from its refusals;
    // robots.txt is exempt, not let through by the limit.
    assert_eq!(
        g.metric("gapura_rate_limit_total{limit=\"tight\",result=\"allowed\"}"),
        2
    );
    assert_eq!(
        g.metric("gapura_quota_refused_total{shard=\"0\",level=\"global\"}"),
        0
    );
}

/// An upstream that holds `/slow` requests until `release` is set (or 5 s
/// pass) and answers everything else at once.
fn slow_upstream(release: Arc<AtomicBool>) -> upstream::Upstream {
    upstream::start(Arc::new(move |req: &UpRequest| {
        if req.target.starts_with("/slow") {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !release.load(Ordering::Relaxed) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Reply::Bytes(upstream::ok(b"done"))
    }))
}

fn slow_requests_seen(up: &upstream::Upstream) -> usize {
    up.requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.target.starts_with("/slow"))
        .count()
}

fn wait_slow_requests(up: &upstream::Upstream, n: usize) {
    assert!(
        wait_until(Duration::from_secs(10), || slow_requests_seen(up) >= n),
        "the upstream never saw {n} /slow"
    );
}

#[test]
fn concurrency_leases_are_given_back_when_clients_abort() {
    let release = Arc::new(AtomicBool::new(false));
    let up = slow_upstream(release.clone());
    let text = profile(
        "",
        &format!(
            r#"
[quota.source]
concurrent = 2

[[upstream]]
name = "app"
servers = ["{}"]
response_header_timeout_ms = 10000

[[host]]
names = ["app.test"]
default = true
kind = "proxy"
[[host.route]]
path = "/"
upstream = "app"
"#,
            up.addr
        ),
    );
    let g = Gapura::start(&text);

    // Two requests hold the source's two leases against the slow upstream.
    let mut held: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = Client::connect(g.addr);
            c.send(&get("app.test", "/slow"));
            c
        })
        .collect();
    wait_slow_requests(&up, 2);
    let r = request(g.addr, &get("app.test", "/fast"));
    assert_eq!(r.status, 429);
    assert_eq!(retry_after(&r), 1);
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"concurrent_source\"}",
            1,
            METRIC_WAIT
        ),
        1
    );

    // The clients give up: their sockets close while the upstream still works.
    for c in held.drain(..) {
        let _ = c.stream.shutdown(std::net::Shutdown::Both);
    }
    let admitted = wait_until(Duration::from_secs(10), || {
        let r = request(g.addr, &get("app.test", "/fast"));
        if r.status != 200 {
            assert_eq!(r.status, 429);
        }
        r.status == 200
    });
    assert!(admitted, "the aborted requests still hold their leases");

    // Each lease came back exactly once: two new slow requests fill the
    // budget again, and completion gives their leases back too.
    let mut held: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = Client::connect(g.addr);
            c.send(&get("app.test", "/slow/again"));
            c
        })
        .collect();
    wait_slow_requests(&up, 4);
    assert_eq!(request(g.addr, &get("app.test", "/fast")).status, 429);
    release.store(true, Ordering::Relaxed);
    for c in &mut held {
        let r = c.response(false);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"done"[..]));
    }
    assert_eq!(request(g.addr, &get("app.test", "/fast")).status, 200);
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"concurrent_source\"}",
            2,
            METRIC_WAIT
        ),
        2
    );
}

fn reload_profile(requests: u32, per: &str, burst: u32, second_host: bool) -> String {
    profile(
        "",
        &format!(
            "[[rate_limit]]\nname = \"once\"\nrequests = {requests}\nper = \"{per}\"\nburst = {burst}\n\n{}{}",
            respond_host("a.test", "default = true\nrate_limit = \"once\""),
            if second_host {
                respond_host("b.test", "")
            } else {
                String::new()
            }
        ),
    )
}

fn reload(g: &Gapura, text: &str, generation: u32) {
    std::fs::write(&g.profile, text).unwrap();
    g.signal(libc::SIGHUP);
    assert!(
        g.wait_log(
            &format!("reloaded: generation {generation}"),
            Duration::from_secs(5)
        ),
        "{}",
        g.log_text()
    );
}

#[test]
fn a_reload_keeps_rate_buckets_and_raised_limits_apply_on_the_next_touch() {
    let g = Gapura::start(&reload_profile(1, "minute", 1, false));
    let mut c = Client::connect(g.addr);
    let mut status = |host: &str| {
        c.send(&get(host, "/"));
        c.response(false).status
    };
    assert_eq!(status("a.test"), 200);
    assert_eq!(status("a.test"), 429);

    // An unrelated change: the (limit, host) pair keeps its bucket.
    reload(&g, &reload_profile(1, "minute", 1, true), 2);
    assert_eq!(status("a.test"), 429);
    assert_eq!(status("b.test"), 200);

    // A faster refill reads the same bucket with the new interval: the time
    // since it emptied is worth a token at 10/s once 100 ms have passed
    // (the live view shows the bucket without touching it).
    reload(&g, &reload_profile(600, "minute", 1, true), 3);
    wait_tokens(&g, 1);
    assert_eq!(status("a.test"), 200);
    assert_eq!(status("a.test"), 429);

    // A raised burst lets the same bucket fill higher: 300 ms at 10/s are
    // worth 3 tokens, and a burst of 3 keeps them (a burst of 1 kept 1).
    reload(&g, &reload_profile(600, "minute", 3, true), 4);
    wait_tokens(&g, 3);
    let got: Vec<u16> = (0..4).map(|_| status("a.test")).collect();
    assert_eq!(got, [200, 200, 200, 429]);
}

/// Waits until the bucket of `a.test`'s limit for 127.0.0.1 holds `want`
/// whole tokens, as the admin listener's live view tells.
fn wait_tokens(g: &Gapura, want: u64) {
    let mut tokens = 0;
    let filled = wait_until(Duration::from_secs(10), || {
        tokens = g.rate_tokens("a.test", "/", "127.0.0.1");
        tokens >= want
    });
    assert!(filled, "the bucket holds {tokens} tokens, not {want}");
}

#[test]
fn one_client_over_many_connections_is_limited_exactly_on_two_shards() {
    let text = profile(
        "",
        &format!(
            "[[rate_limit]]\nname = \"five\"\nrequests = 1\nper = \"hour\"\nburst = 5\n\n{}",
            respond_host("rl.test", "default = true\nrate_limit = \"five\"")
        ),
    )
    .replace("shards = 1\n", "shards = 2\n");
    let g = Gapura::start(&text);
    for src in ["127.0.0.2", "127.0.0.3"] {
        let statuses: Vec<u16> = (0..9)
            .map(|_| request_from(src, g.addr, &get_close("rl.test", "/")).status)
            .collect();
        assert_eq!(
            statuses,
            [200, 200, 200, 200, 200, 429, 429, 429, 429],
            "from {src}"
        );
    }
    let refused = |shard: u32| {
        g.metric(&format!(
            "gapura_quota_refused_total{{shard=\"{shard}\",level=\"rate\"}}"
        ))
    };
    wait_until(METRIC_WAIT, || refused(0) + refused(1) >= 8);
    assert_eq!(refused(0) + refused(1), 8);
}

/// The seed's soak test: one client sends 4x its limit to each of 12
/// rate-limited hosts (12 buckets of one client, one per (limit, host)
/// pair, competing for the same probe windows) and is admitted at its limit
/// on every host: its burst plus the rate times the time it sent for. A
/// burst of 5 (250 ms of tokens) keeps a stall of the client or the server
/// on a loaded machine from wasting refills at a full bucket.
#[test]
fn a_client_at_four_times_its_limit_over_twelve_hosts_gets_its_limit_on_each() {
    const HOSTS: usize = 12;
    const THREADS: usize = 4;
    const RATE_PER_S: f64 = 20.0;
    const BURST: f64 = 5.0;
    const SEND_PER_S: u64 = 80;
    const RUN: Duration = Duration::from_secs(3);
    let hosts: String = (0..HOSTS)
        .map(|i| respond_host(&format!("h{i}.test"), "rate_limit = \"api\""))
        .collect();
    let text = profile(
        "",
        &format!(
            "[[rate_limit]]\nname = \"api\"\nrequests = 20\nper = \"second\"\nburst = 5\n\n{hosts}"
        ),
    )
    .replace("shards = 1\n", "shards = 2\n");
    let g = Gapura::start(&text);
    let addr = g.addr;

    let start = Instant::now() + Duration::from_millis(100);
    let period = Duration::from_nanos(1_000_000_000 / SEND_PER_S);
    let rounds = (RUN.as_nanos() / period.as_nanos()) as u32;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mine: Vec<usize> = (0..HOSTS).filter(|h| h % THREADS == t).collect();
                let mut conns: Vec<Client> = mine
                    .iter()
                    .map(|_| Client::connect_from("127.0.0.9", addr))
                    .collect();
                // Per host: admitted, refused, first and last send.
                let mut seen = vec![(0u32, 0u32, None::<Instant>, None::<Instant>); mine.len()];
                for k in 0..rounds {
                    let at = start + period * k;
                    if let Some(wait) = at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    for (i, h) in mine.iter().enumerate() {
                        let sent = Instant::now();
                        conns[i].send(&get(&format!("h{h}.test"), "/"));
                        let s = &mut seen[i];
                        s.2.get_or_insert(sent);
                        s.3 = Some(sent);
                        match conns[i].response(false).status {
                            200 => s.0 += 1,
                            429 => s.1 += 1,
                            other => panic!("h{h}.test answered {other}"),
                        }
                    }
                }
                mine.into_iter().zip(seen).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut report = Vec::new();
    for w in workers {
        for (h, (admitted, refused, first, last)) in w.join().unwrap() {
            let elapsed = last.unwrap() - first.unwrap();
            let expected = BURST + RATE_PER_S * elapsed.as_secs_f64();
            report.push((h, admitted, refused, elapsed, expected));
        }
    }
    report.sort_by_key(|r| r.0);
    let text: String = report
        .iter()
        .map(|(h, admitted, refused, elapsed, expected)| {
            format!(
                "h{h}.test: {admitted} admitted, {refused} refused in {:.3} s, {expected:.1} expected\n",
                elapsed.as_secs_f64()
            )
        })
        .collect();
    eprint!("{text}");
    for (h, admitted, refused, elapsed, expected) in &report {
        let sent = admitted + refused;
        // The client really sent about four times its limit.
        assert!(
            f64::from(sent) >= 3.5 * RATE_PER_S * elapsed.as_secs_f64(),
            "h{h}.test: only {sent} sent\n{text}"
        );
        let off = (f64::from(*admitted) - expected).abs() / expected;
        assert!(
            off <= 0.05,
            "h{h}.test: {admitted} admitted, {expected:.1} expected ({:.1} %)\n{text}",
            off * 100.0
        );
    }
}

/// Opens a connection from `src`, sends one request and returns its status,
/// or None when the server closes it without an answer.
fn status_or_closed(src: &str, g: &Gapura) -> Option<u16> {
    let mut c = Client::connect_from(src, g.addr);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // The request may meet a closed socket: the answer is what matters.
    let _ = std::io::Write::write_all(&mut c.stream, &get_close("c.test", "/"));
    c.try_response(false).map(|r| r.status)
}

#[test]
fn connections_past_the_concurrent_limit_are_closed_before_any_answer() {
    let text = profile(
        "",
        &format!(
            "[quota.connections]\nconcurrent = 3\n\n{}",
            respond_host("c.test", "default = true")
        ),
    );
    let g = Gapura::start(&text);
    let mut open: Vec<Client> = (0..3)
        .map(|_| {
            let mut c = Client::connect_from("127.0.0.2", g.addr);
            c.send(&get("c.test", "/"));
            assert_eq!(c.response(false).status, 200);
            c
        })
        .collect();

    // The fourth from the same prefix is closed without reading a byte.
    let mut fourth = Client::connect_from("127.0.0.2", g.addr);
    assert!(fourth.closed_within(Duration::from_secs(2)));
    assert!(fourth.buf.is_empty());
    // Another address of the same /24 counts in the same place.
    assert_eq!(status_or_closed("127.0.0.3", &g), None);
    // Another /24 is not affected.
    assert_eq!(status_or_closed("127.0.1.2", &g), Some(200));
    // Both refusals are counted by kind.
    assert_eq!(
        g.wait_metric(
            "gapura_connection_limit_refused_total{shard=\"0\",kind=\"concurrent\"}",
            2,
            METRIC_WAIT
        ),
        2
    );

    // Closing one gives its place back.
    let gone = open.pop().unwrap();
    drop(gone);
    let back = wait_until(Duration::from_secs(10), || {
        let got = status_or_closed("127.0.0.2", &g);
        if got != Some(200) {
            assert_eq!(got, None);
        }
        got == Some(200)
    });
    assert!(back, "no place came back");
    // The ones still open keep being served.
    for c in &mut open {
        c.send(&get("c.test", "/"));
        assert_eq!(c.response(false).status, 200);
    }
}

#[test]
fn new_connections_past_the_per_second_burst_are_closed_before_any_answer() {
    let text = profile(
        "",
        &format!(
            "[quota.connections]\nper_second = 1\nburst = 3\n\n{}",
            respond_host("c.test", "default = true")
        ),
    );
    let g = Gapura::start(&text);
    let first = Instant::now();
    let statuses: Vec<Option<u16>> = (0..5).map(|_| status_or_closed("127.0.0.2", &g)).collect();
    // (Five connections take milliseconds; one taking a second would let
    // a token in between: the time taken is told with the statuses.)
    assert_eq!(
        statuses,
        [Some(200), Some(200), Some(200), None, None],
        "five connections in {:?}",
        first.elapsed()
    );
    // Another /24 has a bucket of its own.
    assert_eq!(status_or_closed("127.0.1.2", &g), Some(200));
    // A second later the bucket has one more token: refused until then (a
    // refusal takes nothing), then one connection and no second.
    let refilled = wait_until(Duration::from_secs(10), || {
        let got = status_or_closed("127.0.0.2", &g);
        if got != Some(200) {
            assert_eq!(got, None);
        }
        got == Some(200)
    });
    assert!(refilled, "the bucket never refilled");
    assert_eq!(status_or_closed("127.0.0.2", &g), None);
}

fn shadow_profile(mode: &str, limited: bool) -> String {
    profile(
        "",
        &format!(
            "[[rate_limit]]\nname = \"once\"\nrequests = 1\nper = \"minute\"\nburst = 1\nmode = \"{mode}\"\n\n{}",
            respond_host(
                "a.test",
                if limited {
                    "default = true\nrate_limit = \"once\""
                } else {
                    "default = true"
                }
            )
        ),
    )
}

/// Three requests under the shadowed limit of one: all answered 200, the
/// two over it counted as shadow hits. The connection, for more.
fn three_let_through(g: &Gapura) -> Client {
    let mut c = Client::connect(g.addr);
    for _ in 0..3 {
        c.send(&get("a.test", "/"));
        assert_eq!(c.response(false).status, 200);
    }
    assert_eq!(
        g.wait_metric("gapura_quota_shadow_total{shard=\"0\"}", 2, METRIC_WAIT),
        2
    );
    c
}

#[test]
fn a_rate_limit_in_shadow_mode_counts_what_it_would_refuse_and_lets_it_through() {
    let g = Gapura::start(&shadow_profile("shadow", true));
    let mut c = three_let_through(&g);
    // Enforced after a reload, on the same bucket.
    reload(&g, &shadow_profile("enforce", true), 2);
    c.send(&get("a.test", "/"));
    assert_eq!(c.response(false).status, 429);
}

#[test]
fn shadowed_rate_refusals_are_not_counted_as_429s() {
    let g = Gapura::start(&shadow_profile("shadow", true));
    three_let_through(&g);
    assert_eq!(
        g.metric("gapura_quota_refused_total{shard=\"0\",level=\"rate\"}"),
        0
    );
}

#[test]
fn a_rate_limit_taken_off_and_put_back_within_the_grace_period_keeps_its_bucket() {
    let g = Gapura::start(&shadow_profile("enforce", true));
    let mut c = Client::connect(g.addr);
    let mut status = || {
        c.send(&get("a.test", "/"));
        c.response(false).status
    };
    assert_eq!(status(), 200);
    assert_eq!(status(), 429);
    reload(&g, &shadow_profile("enforce", false), 2);
    assert_eq!(status(), 200);
    assert_eq!(status(), 200);
    // Back within `slot_grace_ms` (60 s): the retired pair's bucket revives.
    reload(&g, &shadow_profile("enforce", true), 3);
    assert_eq!(status(), 429);
}

#[test]
fn leases_are_given_back_when_a_request_is_refused_for_its_size() {
    let text = profile(
        "",
        &format!(
            "[quota.source]\nconcurrent = 1\n\n{}",
            respond_host(
                "a.test",
                "default = true\nlimits = { max_body_bytes = 100, max_url_bytes = 256, max_header_count = 8 }"
            )
        ),
    );
    let g = Gapura::start(&text);
    let long = format!("/{}", "a".repeat(300));
    let many: String = (0..8).map(|i| format!("X-H{i}: 1\r\n")).collect();
    for (refused, want) in [
        (
            "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1000\r\n\r\n".to_string(),
            413,
        ),
        (format!("GET {long} HTTP/1.1\r\nHost: a.test\r\n\r\n"), 414),
        (format!("GET / HTTP/1.1\r\nHost: a.test\r\n{many}\r\n"), 431),
    ] {
        assert_eq!(request(g.addr, refused.as_bytes()).status, want);
        // The source's one place is free again.
        assert_eq!(
            request(g.addr, &get_close("a.test", "/")).status,
            200,
            "after a {want}"
        );
    }
}

#[test]
fn an_upgraded_tunnel_holds_its_lease_for_its_whole_life() {
    let up = upstream::upgrading_echo();
    let text = profile(
        "",
        &format!(
            r#"
[quota.source]
concurrent = 1

[[upstream]]
name = "app"
servers = ["{}"]

[[host]]
names = ["app.test"]
default = true
kind = "proxy"
[[host.route]]
path = "/"
upstream = "app"
websocket = true
"#,
            up.addr
        ),
    );
    let g = Gapura::start(&text);
    let mut ws = Client::connect(g.addr);
    ws.send(b"GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    assert_eq!(ws.response(true).status, 101);
    assert_eq!(
        g.wait_metric("gapura_leases_active{shard=\"0\"}", 1, METRIC_WAIT),
        1,
        "the tunnel's lease is on the gauge"
    );
    // The tunnel is the source's one running request.
    let r = request(g.addr, &get_close("app.test", "/"));
    assert_eq!(r.status, 429, "a second request while the tunnel is open");
    // The tunnel works meanwhile.
    ws.send(b"ping");
    let mut got = [0u8; 4];
    std::io::Read::read_exact(&mut ws.stream, &mut got).unwrap();
    assert_eq!(&got, b"ping");
    // Closed, it gives the lease back.
    drop(ws);
    let mut refused = 1;
    let back = wait_until(Duration::from_secs(10), || {
        let r = request(g.addr, &get_close("app.test", "/"));
        if r.status != 200 {
            assert_eq!(r.status, 429);
            refused += 1;
        }
        r.status == 200
    });
    assert!(back, "the lease never came back");
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"concurrent_source\"}",
            refused,
            METRIC_WAIT
        ),
        refused
    );
}

/// A rate-limited client's 200s while 200 new snapshots are published one
/// after another (a reload each, each waited for in the log): never more
/// than the burst plus the rate over the time the client ran (measured
/// from before its first request to after its last answer, so a slow
/// machine only widens the bound), every answer a 200 or a 429 on
/// connections that stay open, and tokens refilled across the storm.
#[test]
fn a_storm_of_publishes_keeps_a_rate_limit_exact() {
    let text = |body: u32| {
        profile(
            "",
            &format!(
                "[[rate_limit]]\nname = \"storm\"\nrequests = 50\nper = \"second\"\nburst = 20\n\n\
                 [[host]]\nnames = [\"s.test\"]\ndefault = true\nkind = \"respond\"\nstatus = 200\n\
                 body = \"ok {body}\"\nrate_limit = \"storm\"\n"
            ),
        )
        .replace("shards = 1\n", "shards = 2\n")
    };
    let g = Gapura::start(&text(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (addr, stop) = (g.addr, stop.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect_from("127.0.0.5", addr);
                let (mut ok, mut refused) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    c.send(&get("s.test", "/"));
                    match c.response(false).status {
                        200 => ok += 1,
                        429 => refused += 1,
                        other => panic!("answered {other}"),
                    }
                }
                (ok, refused)
            })
        })
        .collect();
    for generation in 2..=201 {
        std::fs::write(&g.profile, text(generation)).unwrap();
        g.signal(libc::SIGHUP);
        let line = format!("reloaded: generation {generation}");
        assert!(
            g.wait_log(&line, Duration::from_secs(10)),
            "{}",
            g.log_text()
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut refused) = (0, 0);
    for c in clients {
        let (o, r) = c.join().unwrap();
        ok += o;
        refused += r;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let bound = 20 + (50.0 * elapsed).ceil() as u64;
    eprintln!(
        "200 publishes in {elapsed:.1} s: {ok} admitted (at most {bound}), {refused} refused"
    );
    assert!(refused > 0, "the client never met the limit: {ok} admitted");
    assert!(ok <= bound, "{ok} admitted, more than {bound}");
    assert!(ok > 20, "no token refilled across the storm: {ok} admitted");
}

/// A tenant's lease through the real binary: one running request per
/// tenant; another tenant is not held by it; an aborted client gives the
/// lease back.
#[test]
fn a_tenants_lease_holds_its_running_requests_and_comes_back_when_the_client_leaves() {
    let release = Arc::new(AtomicBool::new(false));
    let up = slow_upstream(release.clone());
    let text = profile(
        "",
        &format!(
            "[quota.tenant]\nheader = \"x-tenant\"\nconcurrent = 1\nscope = \"per_shard\"\n\n\
             [quota.principal]\nheader = \"x-user\"\nrequests = 1000\n\n\
             [[upstream]]\nname = \"app\"\nservers = [\"{}\"]\nresponse_header_timeout_ms = 10000\n\n\
             [[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n\
             [[host.route]]\npath = \"/\"\nupstream = \"app\"\n",
            up.addr
        ),
    );
    let g = Gapura::start(&text);
    let get_as = |tenant: &str, user: &str, path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: app.test\r\nX-Tenant: {tenant}\r\nX-User: {user}\r\n\r\n"
        )
        .into_bytes()
    };
    let mut held = Client::connect(g.addr);
    held.send(&get_as("acme", "ana", "/slow"));
    wait_slow_requests(&up, 1);
    let r = request(g.addr, &get_as("acme", "bob", "/fast"));
    assert_eq!(r.status, 429, "acme's one running request is held");
    assert_eq!(request(g.addr, &get_as("beta", "bob", "/fast")).status, 200);
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"concurrent_tenant\"}",
            1,
            METRIC_WAIT
        ),
        1
    );
    let _ = held.stream.shutdown(std::net::Shutdown::Both);
    let admitted = wait_until(Duration::from_secs(10), || {
        request(g.addr, &get_as("acme", "bob", "/fast")).status == 200
    });
    assert!(admitted, "the aborted request still holds acme's lease");
    release.store(true, Ordering::Relaxed);
}
