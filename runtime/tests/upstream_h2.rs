//! HTTP/2 to upstreams through the real binary: an h2 server (the h2
//! crate, h2c and over TLS with ALPN) as the upstream, HTTP/1.1 and
//! HTTP/2 clients in front; gRPC-shaped calls with their trailers both
//! ways, a call's `grpc-timeout`, streams sharing one connection within
//! the pool's limits, an upstream's GOAWAY, and `protocol = "auto"`.

mod common;

use bytes::Bytes;
use common::pki::{files, server_config, tls_server, Authority};
use common::*;
use h2::client::SendRequest;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the upstream saw of one request.
#[derive(Clone, Debug)]
struct Seen {
    version: http::Version,
    method: String,
    uri: String,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

/// An HTTP/2 upstream on its own thread.
struct H2Upstream {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    active: Arc<AtomicUsize>,
    most_active: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Body bytes of `/big` answers the proxy's windows let through.
    sent: Arc<AtomicUsize>,
}

/// An HTTP/2 server: h2c, or TLS with `tls` (ALPN `h2`). By path:
/// `/grpc/ok` echoes the body with trailers `grpc-status: 0`;
/// `/grpc/error` answers `grpc-status: 5` in trailers; `/grpc/stream`
/// sends three messages then trailers; `/grpc/slow` never answers;
/// `/big` sends 4 MiB as the proxy's windows allow (counted in `sent`);
/// `/hold` answers once four streams have been in at once (at most 3 s); `/status/NNN` answers with status NNN;
/// `/goaway` answers and then shuts the
/// connection down gracefully; anything else `200` with a body naming
/// the path.
fn h2_upstream(tls: Option<rustls::ServerConfig>) -> H2Upstream {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    let up = H2Upstream {
        addr,
        connections: Arc::new(AtomicUsize::new(0)),
        active: Arc::new(AtomicUsize::new(0)),
        most_active: Arc::new(AtomicUsize::new(0)),
        seen: Arc::new(Mutex::new(Vec::new())),
        sent: Arc::new(AtomicUsize::new(0)),
    };
    let state = (
        up.connections.clone(),
        up.active.clone(),
        up.most_active.clone(),
        up.seen.clone(),
        up.sent.clone(),
    );
    let tls = tls.map(|mut c| {
        c.alpn_protocols = vec![b"h2".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(c))
    });
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            loop {
                let Ok((tcp, _)) = l.accept().await else {
                    return;
                };
                state.0.fetch_add(1, Ordering::SeqCst);
                let state = state.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve(tcp, state).await,
                        Some(acceptor) => {
                            if let Ok(s) = acceptor.accept(tcp).await {
                                serve(s, state).await
                            }
                        }
                    }
                });
            }
        });
    });
    up
}

type State = (
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
    Arc<Mutex<Vec<Seen>>>,
    Arc<AtomicUsize>,
);

async fn serve<T>(io: T, state: State)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((req, respond))) = conn.accept().await {
        let goaway = req.uri().path() == "/goaway";
        let state = state.clone();
        let handled = tokio::spawn(handle(req, respond, state));
        if goaway {
            let _ = handled.await;
            conn.graceful_shutdown();
        }
    }
}

async fn handle(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    (_, active, most, seen, sent): State,
) {
    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    let (parts, mut recv) = req.into_parts();
    let mut body = Vec::new();
    while let Some(Ok(chunk)) = recv.data().await {
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    let path = parts.uri.path().to_string();
    seen.lock().unwrap().push(Seen {
        version: parts.version,
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let grpc = |status: &str, message: &str| {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", status.parse().unwrap());
        t.insert("grpc-message", message.parse().unwrap());
        t
    };
    let head = |grpc: bool| {
        let mut r = http::Response::builder().status(200);
        if grpc {
            r = r.header("content-type", "application/grpc");
        }
        r.body(()).unwrap()
    };
    match path.as_str() {
        "/grpc/ok" | "/grpc/error" | "/grpc/stream" => {
            let Ok(mut send) = respond.send_response(head(true), false) else {
                return;
            };
            let trailers = match path.as_str() {
                "/grpc/ok" => {
                    let _ = send.send_data(Bytes::from(body), false);
                    grpc("0", "fine")
                }
                "/grpc/error" => grpc("5", "no such thing"),
                _ => {
                    for i in 0..3u8 {
                        let _ = send.send_data(Bytes::from(vec![0, 0, 0, 0, 1, b'a' + i]), false);
                    }
                    grpc("0", "streamed")
                }
            };
            let _ = send.send_trailers(trailers);
        }
        "/big" => {
            // 4 MiB, sent only as the proxy's windows allow.
            let mut r = head(false);
            r.headers_mut().insert("content-length", BIG.into());
            let Ok(mut send) = respond.send_response(r, false) else {
                return;
            };
            let mut left = BIG;
            while left > 0 {
                send.reserve_capacity(left.min(64 * 1024));
                let Some(Ok(n)) = std::future::poll_fn(|cx| send.poll_capacity(cx)).await else {
                    break;
                };
                let n = n.min(left);
                if n == 0
                    || send
                        .send_data(Bytes::from(vec![b'b'; n]), n == left)
                        .is_err()
                {
                    break;
                }
                sent.fetch_add(n, Ordering::SeqCst);
                left -= n;
            }
        }
        "/grpc/slow" => {
            // Never answers: the call's deadline ends it (the proxy resets
            // the stream, which ends this wait).
            let _ = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
        }
        _ => {
            if path == "/hold" {
                // Held until four streams have been in at once (what the
                // test's pool allows), at most 3 s.
                let four = async {
                    while most.load(Ordering::SeqCst) < 4 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(3), four).await;
            }
            let text = format!("h2 upstream saw {path}");
            let mut r = head(false);
            if let Some(code) = path.strip_prefix("/status/") {
                *r.status_mut() = http::StatusCode::from_bytes(code.as_bytes()).unwrap();
            }
            r.headers_mut().insert("content-length", text.len().into());
            if let Ok(mut send) = respond.send_response(r, false) {
                let _ = send.send_data(Bytes::from(text), true);
            }
        }
    }
    active.fetch_sub(1, Ordering::SeqCst);
}

/// The body of `/big`.
const BIG: usize = 4 << 20;

/// One proxy host `app.test` routing everything to `addr`, the group
/// ending with `extra` lines.
fn h2_profile(addr: SocketAddr, extra: &str) -> String {
    profile(
        "",
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"{addr}\"]\nconnect_timeout_ms = 2000\nresponse_header_timeout_ms = 5000\n{extra}\n\n[[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\n"
        ),
    )
}

fn get(g: &Gapura, path: &str) -> Response {
    request(
        g.addr,
        format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn h2c(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    client
}

/// A gRPC-shaped call: its status, head fields, DATA bytes and trailers.
struct Call {
    status: u16,
    head: http::HeaderMap,
    data: Vec<u8>,
    trailers: Option<http::HeaderMap>,
}

async fn grpc_call(client: &SendRequest<Bytes>, path: &str, timeout: Option<&str>) -> Call {
    let mut req = http::Request::post(format!("http://app.test{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = timeout {
        req = req.header("grpc-timeout", t);
    }
    let mut c = client.clone().ready().await.unwrap();
    let (resp, mut send) = c.send_request(req.body(()).unwrap(), false).unwrap();
    send.send_data(Bytes::from_static(b"\0\0\0\0\x03abc"), true)
        .unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let head = resp.headers().clone();
    let mut body = resp.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap();
    Call {
        status,
        head,
        data,
        trailers,
    }
}

#[test]
fn an_h2c_upstream_is_spoken_to_in_http2_on_one_connection() {
    let up = h2_upstream(None);
    let g = Gapura::start(&h2_profile(up.addr, "protocol = \"h2\""));
    let mut c = Client::connect(g.addr);
    for i in 0..3 {
        c.send(format!("GET /page/{i}?q=1 HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes());
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, format!("h2 upstream saw /page/{i}").as_bytes());
    }
    // A body with its length reaches the upstream whole.
    let body = vec![b'x'; 100_000];
    let mut req =
        b"POST /upload HTTP/1.1\r\nHost: app.test\r\nContent-Length: 100000\r\n\r\n".to_vec();
    req.extend_from_slice(&body);
    c.send(&req);
    assert_eq!(c.response(false).status, 200);
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    for s in &seen {
        assert_eq!(s.version, http::Version::HTTP_2);
        // The Host line is the authority; connection fields are left out.
        assert!(s.uri.starts_with("http://app.test/"), "{}", s.uri);
        assert!(!s.headers.contains_key("connection"));
        assert!(s.headers.contains_key("x-forwarded-for"));
    }
    assert_eq!(seen[0].uri, "http://app.test/page/0?q=1");
    assert_eq!(
        (seen[3].method.as_str(), seen[3].body.len()),
        ("POST", 100_000)
    );
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn grpc_calls_keep_their_trailers_both_ways() {
    let up = h2_upstream(None);
    let g = Gapura::start(&h2_profile(up.addr, "protocol = \"h2\""));
    let (ok, error, stream) = runtime().block_on(async {
        let client = h2c(g.addr).await;
        (
            grpc_call(&client, "/grpc/ok", None).await,
            grpc_call(&client, "/grpc/error", None).await,
            grpc_call(&client, "/grpc/stream", None).await,
        )
    });
    assert_eq!((ok.status, &ok.data[..]), (200, &b"\0\0\0\0\x03abc"[..]));
    assert_eq!(ok.head["content-type"], "application/grpc");
    let t = ok.trailers.expect("trailers");
    assert_eq!(t["grpc-status"], "0");
    assert_eq!(t["grpc-message"], "fine");
    // An upstream's error status arrives as that status.
    let t = error.trailers.expect("trailers");
    assert_eq!(error.status, 200);
    assert_eq!(t["grpc-status"], "5");
    assert_eq!(t["grpc-message"], "no such thing");
    // A server-streaming call: every message, then its trailers.
    assert_eq!(stream.data, b"\0\0\0\0\x01a\0\0\0\0\x01b\0\0\0\0\x01c");
    assert_eq!(stream.trailers.expect("trailers")["grpc-status"], "0");
    // The upstream got the call as gRPC asks: HTTP/2, te: trailers.
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.version, http::Version::HTTP_2);
        assert_eq!(s.headers["te"], "trailers");
        assert_eq!(s.headers["content-type"], "application/grpc");
        assert_eq!(s.body, b"\0\0\0\0\x03abc");
    }
}

#[test]
fn a_calls_grpc_timeout_bounds_the_upstream_wait() {
    let up = h2_upstream(None);
    let g = Gapura::start(&h2_profile(up.addr, "protocol = \"h2\""));
    let call = runtime().block_on(async {
        let client = h2c(g.addr).await;
        grpc_call(&client, "/grpc/slow", Some("200m")).await
    });
    // 504 as gRPC: DEADLINE_EXCEEDED, trailers-only.
    assert_eq!(call.status, 200);
    assert_eq!(call.head["grpc-status"], "4", "{:?}", call.head);
    assert!(call.data.is_empty());
    // The upstream's stream was reset, not left running.
    assert!(wait_until(Duration::from_secs(10), || up
        .active
        .load(Ordering::SeqCst)
        == 0));
    // A deadline the call set is not the server's failure.
    assert_eq!(g.metric("gapura_upstream_failures_total{shard=\"0\"}"), 0);
}

#[test]
fn streams_share_the_pools_connections_within_their_limits() {
    let up = h2_upstream(None);
    let g = Gapura::start(&h2_profile(
        up.addr,
        "protocol = \"h2\"\nh2_connections_per_server = 1\nh2_streams_per_connection = 4",
    ));
    let answers = runtime().block_on(async {
        let client = h2c(g.addr).await;
        let calls: Vec<_> = (0..16)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let req = http::Request::get(format!("http://app.test/hold?{i}"))
                        .body(())
                        .unwrap();
                    let mut c = client.ready().await.unwrap();
                    let (resp, _) = c.send_request(req, true).unwrap();
                    resp.await.unwrap().status().as_u16()
                })
            })
            .collect();
        let mut answers = Vec::new();
        for c in calls {
            answers.push(c.await.unwrap());
        }
        answers
    });
    assert_eq!(answers, vec![200; 16]);
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
    // As many at once as the pool allows, never more.
    assert_eq!(up.most_active.load(Ordering::SeqCst), 4);
}

#[test]
fn an_upstreams_goaway_drains_and_the_next_request_reconnects() {
    let up = h2_upstream(None);
    let g = Gapura::start(&h2_profile(up.addr, "protocol = \"h2\""));
    assert_eq!(get(&g, "/goaway").status, 200);
    assert!(wait_until(Duration::from_secs(10), || {
        get(&g, "/after").status == 200 && up.connections.load(Ordering::SeqCst) == 2
    }));
    assert_eq!(get(&g, "/again").status, 200);
    assert_eq!(up.connections.load(Ordering::SeqCst), 2);
    let failures = g.metric("gapura_upstream_failures_total{shard=\"0\"}");
    assert_eq!(failures, 0);
}

#[test]
fn h2_over_tls_with_a_client_certificate_and_auto_by_alpn() {
    let ca = Authority::new("upstream-ca");
    let f = files(&ca);
    let tls = format!(
        "tls = {{ server_name = \"api.internal\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
        f.ca.display(),
        f.client_cert.display(),
        f.client_key.display()
    );
    let leaf = || {
        let (chain, key, _, _) = ca.issue(&["api.internal"]);
        (chain, key)
    };
    // An upstream demanding a client certificate, speaking h2 by ALPN.
    let up = h2_upstream(Some(server_config(leaf(), Some(&ca))));
    for protocol in ["h2", "auto"] {
        let g = Gapura::start(&h2_profile(
            up.addr,
            &format!("protocol = \"{protocol}\"\n{tls}"),
        ));
        let r = get(&g, &format!("/{protocol}"));
        assert_eq!(r.status, 200, "{protocol}");
        assert_eq!(r.body, format!("h2 upstream saw /{protocol}").as_bytes());
    }
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.version == http::Version::HTTP_2));
    assert!(
        seen[0].uri.starts_with("https://app.test/"),
        "{}",
        seen[0].uri
    );
    // `auto` to a server whose ALPN agrees to HTTP/1.1 only: HTTP/1.1.
    let h1 = tls_server(
        server_config(leaf(), None),
        Arc::new(|_: &str| b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nh1".to_vec()),
    );
    let g = Gapura::start(&h2_profile(h1.addr, &format!("protocol = \"auto\"\n{tls}")));
    for _ in 0..2 {
        let r = get(&g, "/x");
        assert_eq!((r.status, &r.body[..]), (200, &b"h1"[..]));
    }
    // The HTTP/1.1 connection was pooled and used again.
    assert_eq!(h1.handshakes.load(Ordering::SeqCst), 1);
}

#[test]
fn health_checks_of_an_h2_group_speak_http2() {
    let up = h2_upstream(None);
    let sick = h2_upstream(None);
    let health = "[upstream.health]\npath = \"/status/204\"\ninterval_ms = 100\ntimeout_ms = 90\nexpect_status = 204";
    let g = Gapura::start(&h2_profile(
        up.addr,
        &format!("protocol = \"h2\"\n{health}"),
    ));
    assert!(wait_until(Duration::from_secs(10), || {
        let seen = up.seen.lock().unwrap();
        seen.len() >= 2 && seen.iter().all(|s| s.version == http::Version::HTTP_2)
    }));
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen[0].uri, format!("http://{}/status/204", up.addr));
    assert_eq!(seen[0].headers["user-agent"], "gapura-health");
    assert_eq!(get(&g, "/x").status, 200);
    assert!(!g.log_text().contains("unhealthy"), "{}", g.log_text());
    // A server whose check answers another status is taken out.
    let health = health.replace("/status/204", "/status/503");
    let g = Gapura::start(&h2_profile(
        sick.addr,
        &format!("protocol = \"h2\"\n{health}"),
    ));
    assert!(
        g.wait_log("unhealthy (status 503)", Duration::from_secs(10)),
        "{}",
        g.log_text()
    );
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Clients that ask for large answers and never open their window: what
/// the proxy takes from the h2 upstream, and holds, is bounded by its own
/// windows, not by the answers' size; and a client beside them, on the
/// same upstream connection, is still answered (the blocked streams
/// cannot shut the connection's window).
#[test]
fn zero_window_clients_pin_no_more_than_the_upstream_windows() {
    let up = h2_upstream(None);
    let g = Gapura::start(&h2_profile(
        up.addr,
        "protocol = \"h2\"\nh2_connections_per_server = 1\nh2_streams_per_connection = 100\nread_timeout_ms = 60000",
    ));
    let before = rss(g.child.id());
    // 64 streams on one h2c connection, each GET /big, the window shut
    // (SETTINGS_INITIAL_WINDOW_SIZE = 0).
    let mut s = std::net::TcpStream::connect(g.addr).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    let mut block = vec![0x82, 0x86, 0x04, 4];
    block.extend_from_slice(b"/big");
    block.extend_from_slice(&[0x01, 8]);
    block.extend_from_slice(b"app.test");
    for i in 0..64u32 {
        out.extend_from_slice(&frame(0x1, 0x5, 1 + 2 * i, &block));
    }
    std::io::Write::write_all(&mut s, &out).unwrap();
    // Every stream reached the upstream, and what the upstream could send
    // stopped growing: the windows are full.
    assert!(wait_until(Duration::from_secs(20), || up
        .seen
        .lock()
        .unwrap()
        .len()
        == 64));
    let mut last = usize::MAX;
    let mut same = 0;
    assert!(wait_until(Duration::from_secs(20), || {
        let now = up.sent.load(Ordering::SeqCst);
        same = if now == last { same + 1 } else { 0 };
        last = now;
        same >= 25
    }));
    let sent = up.sent.load(Ordering::SeqCst);
    let grown = rss(g.child.id()).saturating_sub(before);
    eprintln!("the upstream sent {sent} bytes; the proxy grew by {grown} bytes");
    // 64 answers of 4 MiB asked for: 256 MiB. Taken: a stream's window
    // (16 KiB) and a frame (16 KiB) per stream, 2 MiB (and some room).
    assert!(sent <= 64 * (48 << 10), "the upstream sent {sent} bytes");
    assert!(grown < 16 << 20, "grew {grown} bytes");
    let mut c = Client::connect(g.addr);
    c.send(b"GET /big HTTP/1.1\r\nHost: app.test\r\n\r\n");
    let r = c.response(false);
    assert_eq!((r.status, r.body.len()), (200, BIG));
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
    drop(s);
}
