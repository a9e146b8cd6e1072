//! The HTTP/1.1 upstream pool through the real binary: many HTTP/2 streams
//! and HTTP/1.1 clients share at most `max_connections_per_server`
//! connections, reused rather than opened per request; a request that
//! waits past `queue_timeout_ms` gets 503 (UNAVAILABLE for a gRPC call),
//! a full queue refuses at once; each is counted, and the access log says
//! how long a request waited.

mod common;

use bytes::Bytes;
use common::gate::wait_sample;
use common::upstream::{Reply, UpRequest, Upstream};
use common::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// An upstream that answers `origin` after `ms`, or after 3 s for a
/// path starting with `/slow`.
fn slow_upstream(ms: u64) -> Upstream {
    common::upstream::start(Arc::new(move |r: &UpRequest| {
        let wait = if r.target.starts_with("/slow") {
            3_000
        } else {
            ms
        };
        std::thread::sleep(Duration::from_millis(wait));
        Reply::Bytes(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\norigin\n".to_vec())
    }))
}

fn proxy_profile(up: &Upstream, pool: &str, server_extra: &str) -> String {
    profile(
        server_extra,
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"{}\"]\n{pool}\n\n[[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n  [[host.route]]\n  path = \"/\"\n  upstream = \"app\"\n",
            up.addr
        ),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One request on an HTTP/2 connection: its status, `grpc-status` and body.
async fn h2_get(
    client: &h2::client::SendRequest<Bytes>,
    path: &str,
    grpc: bool,
) -> (u16, Option<String>, Vec<u8>) {
    let mut req = http::Request::builder()
        .method(if grpc { "POST" } else { "GET" })
        .uri(format!("http://app.test{path}"));
    if grpc {
        req = req.header("content-type", "application/grpc");
    }
    let mut client = client.clone().ready().await.unwrap();
    let (resp, _) = client.send_request(req.body(()).unwrap(), true).unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let grpc_status = resp
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string());
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    (status, grpc_status, got)
}

/// The requests waiting in the first group's queue on shard 0, as the
/// admin listener's live view tells (`explain --live`).
fn queued_now(admin: std::net::SocketAddr) -> Option<u64> {
    live_view_at(admin, "app.test", "/", "127.0.0.1")["shards"][0]["upstreams"][0]["queued"]
        .as_u64()
}

const OPENED: &str = "gapura_upstream_connections_opened_total{upstream=\"app\"}";
const QUEUED: &str = "gapura_upstream_queued_total{upstream=\"app\"}";
const TIMEOUTS: &str = "gapura_upstream_queue_timeouts_total{upstream=\"app\"}";
const FULL: &str = "gapura_upstream_queue_full_total{upstream=\"app\"}";

fn closed(reason: &str) -> String {
    format!("gapura_upstream_connections_closed_total{{upstream=\"app\",reason=\"{reason}\"}}")
}

#[test]
fn more_streams_than_the_pool_holds_share_its_connections_and_reuse_them() {
    let up = slow_upstream(20);
    let g = Gapura::start(&proxy_profile(&up, "max_connections_per_server = 4", ""));
    let rt = runtime();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(g.addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        // Three rounds of 40 streams at once, ten times the bound.
        for round in 0..3 {
            let calls: Vec<_> = (0..40)
                .map(|i| {
                    let c = client.clone();
                    tokio::spawn(async move { h2_get(&c, &format!("/{round}/{i}"), false).await })
                })
                .collect();
            for call in calls {
                let (status, _, body) = call.await.unwrap();
                assert_eq!((status, &body[..]), (200, &b"origin\n"[..]));
            }
        }
    });
    assert_eq!(up.requests.lock().unwrap().len(), 120);
    let made = up.connections.load(Ordering::Relaxed);
    assert!(
        (1..=4).contains(&made),
        "{made} upstream connections for 120 requests"
    );
    assert_eq!(
        wait_sample(&g, OPENED, made as u64, Duration::from_secs(5)),
        made as u64
    );
    let queued = g.metric(QUEUED);
    assert!(queued >= 100, "{queued} requests waited for a connection");
    for reason in ["pool_full", "not_reusable", "error", "idle_timeout"] {
        assert_eq!(g.metric(&closed(reason)), 0, "{reason}");
    }
    assert_eq!(
        g.metric("gapura_upstream_connections{upstream=\"app\"}"),
        made as u64
    );
    assert_eq!(
        g.metric("gapura_upstream_queue_length{upstream=\"app\"}"),
        0
    );
    assert_eq!(g.metric(TIMEOUTS), 0);
}

#[test]
fn http1_clients_beyond_the_pool_wait_for_its_connections() {
    let up = slow_upstream(20);
    let g = Gapura::start(&proxy_profile(&up, "max_connections_per_server = 3", ""));
    let addr = g.addr;
    let clients: Vec<_> = (0..12)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                for n in 0..5 {
                    c.send(format!("GET /{i}/{n} HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes());
                    let r = c.response(false);
                    assert_eq!((r.status, &r.body[..]), (200, &b"origin\n"[..]));
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let made = up.connections.load(Ordering::Relaxed);
    assert!((1..=3).contains(&made), "{made} upstream connections");
    assert_eq!(
        wait_sample(&g, OPENED, made as u64, Duration::from_secs(5)),
        made as u64
    );
    assert!(g.metric(QUEUED) > 0);
    assert_eq!(g.metric(&closed("pool_full")), 0);
}

#[test]
fn a_request_that_waits_past_the_queue_timeout_gets_503_and_is_counted() {
    let dir = TempDir::new();
    let log = dir.0.join("access.log");
    let up = slow_upstream(0);
    let g = Gapura::start(&proxy_profile(
        &up,
        "max_connections_per_server = 1\nqueue_timeout_ms = 200\nmax_queued_per_server = 1",
        &format!("access_log = {{ path = \"{}\" }}", log.display()),
    ));
    // The one connection is busy for 3 s.
    let addr = g.addr;
    let slow =
        std::thread::spawn(move || request(addr, b"GET /slow HTTP/1.1\r\nHost: app.test\r\n\r\n"));
    assert!(wait_until(Duration::from_secs(5), || up
        .requests
        .lock()
        .unwrap()
        .len()
        == 1));
    let r = request(
        g.addr,
        b"GET /waits HTTP/1.1\r\nHost: app.test\r\nAccept: text/html\r\n\r\n",
    );
    assert_eq!(r.status, 503);
    assert!(String::from_utf8_lossy(&r.body).contains("503"));
    assert_eq!(
        up.requests.lock().unwrap().len(),
        1,
        "it never reached the origin"
    );
    // A gRPC call in the same place gets UNAVAILABLE; beside it, with the
    // queue (of one) taken, another is refused at once.
    let rt = runtime();
    let admin = g.admin;
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(g.addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let c = client.clone();
        let first = tokio::spawn(async move { h2_get(&c, "/grpc", true).await });
        // Asked off the runtime's thread, so the call goes on meanwhile;
        // each ask is a round trip to the admin listener.
        let mut queued = false;
        for _ in 0..500 {
            let q = tokio::task::spawn_blocking(move || queued_now(admin))
                .await
                .unwrap();
            if q == Some(1) {
                queued = true;
                break;
            }
        }
        assert!(queued, "the gRPC call waits in the queue");
        let (status, grpc, _) = h2_get(&client, "/full", false).await;
        assert_eq!((status, grpc), (503, None), "the queue is full");
        let (status, grpc, body) = first.await.unwrap();
        assert_eq!(
            (status, grpc.as_deref(), &body[..]),
            (200, Some("14"), &b""[..])
        );
    });
    assert_eq!(
        slow.join().unwrap().status,
        200,
        "the busy request ends well"
    );
    assert_eq!(wait_sample(&g, TIMEOUTS, 2, Duration::from_secs(5)), 2);
    assert_eq!(g.metric(FULL), 1);
    assert_eq!(g.metric(QUEUED), 2);
    assert_eq!(g.metric("gapura_upstream_failures_total{shard=\"0\"}"), 0);
    // The access log says how long each waited.
    let mut lines = Vec::new();
    wait_until(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        lines = text.lines().map(str::to_string).collect();
        lines.len() >= 4
    });
    let waited: Vec<u64> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["status"] == 503 || v["path"] == "/grpc")
        .filter_map(|v| v["queue_ms"].as_u64())
        .collect();
    assert_eq!(waited.len(), 2, "{lines:?}");
    assert!(waited.iter().all(|&ms| ms >= 150), "{waited:?}");
    let slow_line = lines.iter().find(|l| l.contains("\"/slow\"")).unwrap();
    assert!(!slow_line.contains("queue_ms"), "{slow_line}");
}
