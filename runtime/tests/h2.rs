//! HTTP/2 end to end with the h2 client crate (and curl): h2c by prior
//! knowledge and h2 by ALPN over TLS, many streams through the gate on one
//! connection, bodies streamed both ways through the proxy, the
//! defences (rapid reset, CONTINUATION flood), and a gRPC call's refusal
//! as a trailers-only answer.

mod common;

use bytes::Bytes;
use common::tls::{client_config, write_cert, ClientOptions};
use common::{profile, Gapura, TempDir};
use h2::client::SendRequest;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const HELLO: &str = common::HELLO_HOST;

/// An h2c connection by prior knowledge; its driver runs on the runtime.
async fn h2c(
    addr: SocketAddr,
) -> (
    SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    (client, tokio::spawn(conn))
}

/// Sends a request (with `body` when given) and reads the whole answer.
async fn exchange(
    client: &SendRequest<Bytes>,
    method: &str,
    path: &str,
    body: Option<(Vec<u8>, bool)>,
) -> Result<(u16, http::HeaderMap, Vec<u8>), h2::Error> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://hello.test{path}"));
    if let Some((b, true)) = &body {
        req = req.header("content-length", b.len());
    }
    let req = req.body(()).unwrap();
    let mut client = client.clone().ready().await?;
    let (resp, mut send) = client.send_request(req, body.is_none())?;
    if let Some((b, _)) = body {
        let mut rest = Bytes::from(b);
        while !rest.is_empty() {
            send.reserve_capacity(rest.len());
            let n = std::future::poll_fn(|cx| send.poll_capacity(cx))
                .await
                .unwrap()?;
            let piece = rest.split_to(n.min(rest.len()));
            send.send_data(piece, rest.is_empty())?;
        }
    }
    let resp = resp.await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    Ok((status, headers, got))
}

#[test]
fn many_streams_on_one_connection_pass_the_gate_and_the_limit_refuses_the_rest() {
    let rest = format!(
        "[[rate_limit]]\nname = \"ten\"\nrequests = 1\nper = \"minute\"\nburst = 10\n{}rate_limit = \"ten\"\n",
        HELLO
    );
    let g = Gapura::start(&profile("", &rest));
    let rt = runtime();
    rt.block_on(async {
        let (client, driver) = h2c(g.addr).await;
        let streams: Vec<_> = (0..50)
            .map(|i| {
                let c = client.clone();
                tokio::spawn(async move { exchange(&c, "GET", &format!("/{i}"), None).await })
            })
            .collect();
        let mut ok = 0;
        let mut limited = 0;
        for s in streams {
            let (status, headers, body) = s.await.unwrap().unwrap();
            match status {
                200 => {
                    assert_eq!(body, b"hello\n");
                    ok += 1;
                }
                429 => {
                    assert!(headers.contains_key("retry-after"));
                    limited += 1;
                }
                other => panic!("status {other}"),
            }
        }
        assert_eq!(
            (ok, limited),
            (10, 40),
            "the burst passes, the rest is refused"
        );
        // Refusals are stream answers: the connection serves on.
        let (status, _, _) = exchange(&client, "GET", "/again", None).await.unwrap();
        assert_eq!(status, 429);
        assert!(!driver.is_finished());
    });
    assert_eq!(g.metric("gapura_h2_connections_total{shard=\"0\"}"), 1);
    assert_eq!(g.metric("gapura_h2_streams_total{shard=\"0\"}"), 51);
    assert_eq!(g.metric("gapura_requests_total{shard=\"0\"}"), 51);
}

#[test]
fn a_proxied_post_streams_both_ways_with_and_without_a_length() {
    let up = common::upstream::echo();
    let rest = format!(
        "[[upstream]]\nname = \"app\"\nservers = [\"{}\"]\n\n[[host]]\nnames = [\"hello.test\"]\nkind = \"proxy\"\n  [[host.route]]\n  path = \"/\"\n  upstream = \"app\"\n",
        up.addr
    );
    let g = Gapura::start(&profile("", &rest));
    let rt = runtime();
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    rt.block_on(async {
        let (client, _driver) = h2c(g.addr).await;
        for with_length in [true, false] {
            let (status, headers, got) = exchange(
                &client,
                "POST",
                "/upload",
                Some((body.clone(), with_length)),
            )
            .await
            .unwrap();
            assert_eq!(status, 200);
            assert_eq!(headers.get("x-seen-method").unwrap(), "POST");
            assert_eq!(got.len(), body.len(), "with a length: {with_length}");
            assert!(got == body);
        }
    });
    let seen = up.requests.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].header("x-forwarded-proto"), Some("http"));
    assert_eq!(seen[1].header("transfer-encoding"), Some("chunked"));
}

#[test]
fn h2_over_tls_is_chosen_by_alpn_and_http2_false_turns_it_off() {
    let dir = TempDir::new();
    let (cert, key, _) = write_cert(&dir.0, "hello", &["hello.test"]);
    let certs =
        format!("[[certificate]]\nnames = [\"hello.test\"]\ncert = {cert:?}\nkey = {key:?}\n");
    let tls_profile = |extra: &str| {
        profile(extra, &format!("{HELLO}{certs}")).replace(
            "listen = [\"127.0.0.1:0\"]",
            "listen = [\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true }]",
        )
    };
    let g = Gapura::start(&tls_profile(""));
    let addr = g.tls_addr.unwrap();
    let rt = runtime();
    rt.block_on(async {
        let config = client_config(ClientOptions {
            alpn: &[b"h2", b"http/1.1"],
            ..Default::default()
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("hello.test").unwrap();
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (client, conn) = h2::client::handshake(tls).await.unwrap();
        tokio::spawn(conn);
        let (status, _, body) = exchange(&client, "GET", "/", None).await.unwrap();
        assert_eq!((status, &body[..]), (200, &b"hello\n"[..]));
    });
    // curl, when the machine has it: HTTP/2 over TLS and h2c.
    if let Ok(out) = std::process::Command::new("curl")
        .args([
            "-sk",
            "--http2",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        ])
        .arg("--resolve")
        .arg(format!("hello.test:{}:127.0.0.1", addr.port()))
        .arg(format!("https://hello.test:{}/", addr.port()))
        .output()
    {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200");
    }
    // `http2 = false`: ALPN offers only http/1.1 and h2c is not spoken.
    let off = Gapura::start(&tls_profile("http2 = false"));
    let config = client_config(ClientOptions {
        alpn: &[b"h2", b"http/1.1"],
        ..Default::default()
    });
    let c = common::tls::TlsClient::connect(off.tls_addr.unwrap(), Some("hello.test"), &config)
        .unwrap();
    assert_eq!(c.alpn().as_deref(), Some(&b"http/1.1"[..]));
    let mut plain = std::net::TcpStream::connect(off.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1.1 400"),
        "read as HTTP/1.1: {:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn rapid_reset_gets_goaway_and_other_clients_keep_their_service() {
    let g = Gapura::start(&profile("http2_max_resets = 10", HELLO));
    let rt = runtime();
    rt.block_on(async {
        let (attacker, attack_conn) = h2c(g.addr).await;
        let (client, _driver) = h2c(g.addr).await;
        // Open streams and reset them at once, over and over.
        let mut sent = 0;
        for _ in 0..5_000 {
            let Ok(mut ready) = attacker.clone().ready().await else {
                break;
            };
            let req = http::Request::get("http://hello.test/").body(()).unwrap();
            let Ok((resp, mut stream)) = ready.send_request(req, false) else {
                break;
            };
            stream.send_reset(h2::Reason::CANCEL);
            drop(resp);
            sent += 1;
            if attack_conn.is_finished() {
                break;
            }
            if sent % 50 == 0 {
                // Lets the connection's task read the server's frames.
                tokio::task::yield_now().await;
            }
        }
        let ended = tokio::time::timeout(Duration::from_secs(10), attack_conn)
            .await
            .expect("the attacking connection is closed")
            .unwrap();
        let err = ended.expect_err("closed with an error");
        assert_eq!(err.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{err:?}");
        assert!(sent < 5_000, "cut off after {sent} resets");
        // The other client is served all along.
        for _ in 0..20 {
            let (status, _, body) = exchange(&client, "GET", "/", None).await.unwrap();
            assert_eq!((status, &body[..]), (200, &b"hello\n"[..]));
        }
    });
    assert_eq!(
        g.metric("gapura_h2_enhance_your_calm_total{shard=\"0\"}"),
        1
    );
    // Each reset stream was counted (the budget, or h2's own bound on
    // reset streams waiting to be accepted, sent the GOAWAY).
    assert!(g.metric("gapura_h2_resets_total{shard=\"0\"}") >= 10);
}

/// A frame header: length, type, flags, stream.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn a_continuation_flood_is_cut_off() {
    let g = Gapura::start(&profile("", HELLO));
    let mut s = std::net::TcpStream::connect(g.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.write_all(&frame(0x4, 0, 0, &[])).unwrap();
    // HEADERS without END_HEADERS: `:method GET` (static index 2), then
    // CONTINUATION frames of literal fields that never end the block.
    s.write_all(&frame(0x1, 0x1, 1, &[0x82])).unwrap();
    let mut literal = Vec::new();
    for _ in 0..1_000 {
        // Literal without indexing, new name "x-a" (3), value of 10 bytes.
        literal.extend_from_slice(&[0x00, 0x03, b'x', b'-', b'a', 0x0a]);
        literal.extend_from_slice(b"0123456789");
    }
    let continuation = frame(0x9, 0, 1, &literal[..16_000]);
    let reader = std::thread::spawn({
        let mut r = s.try_clone().unwrap();
        move || {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            seen
        }
    });
    let mut sent = 0usize;
    while sent < 4_000 {
        if s.write_all(&continuation).is_err() {
            break;
        }
        sent += 1;
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let seen = reader.join().unwrap();
    // The server's frames: a GOAWAY (type 7) after its SETTINGS.
    let goaway = frames(&seen).iter().any(|(k, _)| *k == 0x7);
    assert!(
        goaway || sent < 4_000,
        "the flood was cut off ({sent} frames sent)"
    );
    assert!(goaway, "a GOAWAY ended it: {} bytes seen", seen.len());
    assert!(common::wait_until(Duration::from_secs(5), || {
        g.metric("gapura_connections_open{shard=\"0\"}") == 0
    }));
}

/// The frames a server sent: (type, payload) each.
fn frames(mut seen: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while seen.len() >= 9 {
        let len = (usize::from(seen[0]) << 16) | (usize::from(seen[1]) << 8) | usize::from(seen[2]);
        if seen.len() < 9 + len {
            break;
        }
        out.push((seen[3], seen[9..9 + len].to_vec()));
        seen = &seen[9 + len..];
    }
    out
}

#[test]
fn a_ping_flood_gets_goaway_enhance_your_calm() {
    let g = Gapura::start(&profile("http2_max_control_frames = 100", HELLO));
    let mut s = std::net::TcpStream::connect(g.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut flood = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    flood.extend_from_slice(&frame(0x4, 0, 0, &[]));
    for i in 0..1_000u64 {
        flood.extend_from_slice(&frame(0x6, 0, 0, &i.to_be_bytes()));
    }
    // Some of it may meet a closed socket.
    let _ = s.write_all(&flood);
    let mut seen = Vec::new();
    let _ = s.read_to_end(&mut seen);
    let frames = frames(&seen);
    let pongs = frames.iter().filter(|(k, _)| *k == 0x6).count();
    let goaway = frames.iter().find(|(k, _)| *k == 0x7).expect("a GOAWAY");
    // Last stream id (4 bytes), then the error code: ENHANCE_YOUR_CALM (0xb).
    assert_eq!(&goaway.1[4..8], &[0, 0, 0, 0xb]);
    assert!(pongs <= 101, "answered {pongs} pings of 1000");
    assert_eq!(g.metric("gapura_h2_floods_total{shard=\"0\"}"), 1);
}

#[test]
fn the_streams_of_a_connection_share_its_request_rate() {
    let host = HELLO.replace(
        "default = true",
        "default = true\nconnection_rate = { requests = 1, burst = 2 }",
    );
    let g = Gapura::start(&profile("", &host));
    let rt = runtime();
    rt.block_on(async {
        let (client, driver) = h2c(g.addr).await;
        let mut statuses = Vec::new();
        for i in 0..4 {
            let (status, _, _) = exchange(&client, "GET", &format!("/{i}"), None)
                .await
                .unwrap();
            statuses.push(status);
        }
        assert_eq!(statuses, [200, 200, 429, 429]);
        assert!(
            !driver.is_finished(),
            "a refused stream is the stream's answer"
        );
        // A second connection has a bucket of its own.
        let (other, _d) = h2c(g.addr).await;
        assert_eq!(exchange(&other, "GET", "/", None).await.unwrap().0, 200);
    });
}

#[test]
fn a_trickled_header_block_meets_the_header_timeout() {
    // The idle timeout cannot be what closes it.
    let g = Gapura::start(&profile(
        "header_timeout_ms = 300\nidle_timeout_ms = 600000",
        HELLO,
    ));
    let mut s = std::net::TcpStream::connect(g.addr).unwrap();
    // A generous ceiling: the close comes at the header timeout.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    s.write_all(&frame(0x4, 0, 0, &[])).unwrap();
    // HEADERS without END_HEADERS, and then nothing.
    s.write_all(&frame(0x1, 0x1, 1, &[0x82])).unwrap();
    let mut seen = Vec::new();
    s.read_to_end(&mut seen)
        .expect("the server closes the connection");
    assert!(frames(&seen).iter().any(|(k, _)| *k == 0x7), "a GOAWAY");
    assert_eq!(
        g.metric("gapura_errors_total{shard=\"0\",kind=\"header_timeout\"}"),
        1
    );
}

/// A HEADERS frame (END_HEADERS | END_STREAM) asking `GET http://hello.test/`
/// on `stream`, then a RST_STREAM (CANCEL) for it: the rapid reset pair.
fn reset_pair(stream: u32, out: &mut Vec<u8>) {
    // :method GET, :scheme http, :path / (static 2, 6, 4); :authority
    // hello.test as a literal with the static name 1.
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 10];
    block.extend_from_slice(b"hello.test");
    out.extend_from_slice(&frame(0x1, 0x5, stream, &block));
    out.extend_from_slice(&frame(0x3, 0, stream, &8u32.to_be_bytes()));
}

/// Sends rapid reset pairs `per_write` to a write, at most 15,000 streams
/// or until the server closes; returns the streams opened,
/// whether a GOAWAY ENHANCE_YOUR_CALM came, and whether the connection
/// ended.
fn rapid_reset(addr: SocketAddr, per_write: u32) -> (u32, bool, bool) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&frame(0x4, 0, 0, &[]));
    s.write_all(&hello).unwrap();
    let reader = std::thread::spawn({
        let mut r = s.try_clone().unwrap();
        move || {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    return (seen, true);
                }
                seen.extend_from_slice(&buf[..n]);
            }
            (seen, false)
        }
    });
    let mut stream = 1u32;
    let mut opened = 0;
    while opened < 15_000 {
        let mut batch = Vec::new();
        for _ in 0..per_write {
            reset_pair(stream, &mut batch);
            stream += 2;
        }
        if s.write_all(&batch).is_err() {
            break;
        }
        opened += per_write;
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let (seen, ended) = reader.join().unwrap();
    let calm = frames(&seen)
        .iter()
        .any(|(k, p)| *k == 0x7 && p.get(4..8) == Some(&[0, 0, 0, 0xb][..]));
    (opened, calm, ended)
}

#[test]
fn rapid_reset_through_a_proxy_host_reaches_the_origin_at_most_the_limit_and_closes() {
    let up = common::upstream::fixed(b"origin\n");
    let rest = format!(
        "[[upstream]]\nname = \"app\"\nservers = [\"{}\"]\n\n[[host]]\nnames = [\"hello.test\"]\nkind = \"proxy\"\n  [[host.route]]\n  path = \"/\"\n  upstream = \"app\"\n",
        up.addr
    );
    let g = Gapura::start(&profile("http2_max_resets = 100", &rest));
    let mut calm_total = 0;
    for (i, per_write) in [1u32, 20, 100].into_iter().enumerate() {
        let before = up.requests.lock().unwrap().len();
        let (opened, calm, ended) = rapid_reset(g.addr, per_write);
        let reached = up.requests.lock().unwrap().len() - before;
        eprintln!(
            "{per_write} a write: {opened} opened, {reached} reached, resets {}",
            g.metric("gapura_h2_resets_total{shard=\"0\"}")
        );
        assert!(calm, "{per_write} a write: GOAWAY ENHANCE_YOUR_CALM");
        assert!(ended, "{per_write} a write: the connection was closed");
        assert!(
            reached <= 100,
            "{per_write} a write: {reached} of {opened} reset streams reached the origin"
        );
        calm_total += 1;
        assert_eq!(
            g.metric("gapura_h2_enhance_your_calm_total{shard=\"0\"}"),
            calm_total,
            "round {i}"
        );
    }
    // Every stream the client reset was counted, however it was noticed.
    let resets = g.metric("gapura_h2_resets_total{shard=\"0\"}");
    assert!(resets >= 2 * 101, "{resets} resets counted");
    assert!(g.wait_log(
        "http2 connection closed (enhance_your_calm",
        Duration::from_secs(5)
    ));
    // A well-behaved client is still answered through the proxy.
    let rt = runtime();
    rt.block_on(async {
        let (client, _driver) = h2c(g.addr).await;
        let (status, _, body) = exchange(&client, "GET", "/", None).await.unwrap();
        assert_eq!((status, &body[..]), (200, &b"origin\n"[..]));
    });
}

#[test]
fn a_stream_reset_while_its_upstream_answers_ends_that_exchange() {
    use common::upstream::{Reply, UpRequest};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    let (ended_tx, ended_rx) = mpsc::channel::<usize>();
    let ended_tx = Mutex::new(ended_tx);
    let (reached_tx, reached_rx) = mpsc::channel::<()>();
    let reached_tx = Mutex::new(reached_tx);
    let seen = AtomicUsize::new(0);
    // The first request is never answered: its connection reports how
    // it ended (0: closed by Gapura). The others get 200.
    let up = common::upstream::start(Arc::new(move |_: &UpRequest| {
        if seen.fetch_add(1, Ordering::SeqCst) > 0 {
            return Reply::Bytes(common::upstream::ok(b"origin\n"));
        }
        let tx = ended_tx.lock().unwrap().clone();
        let _ = reached_tx.lock().unwrap().send(());
        Reply::Takeover(Box::new(move |mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
            let mut b = [0u8; 64];
            let n = s.read(&mut b).unwrap_or(usize::MAX);
            let _ = tx.send(n);
        }))
    }));
    let rest = format!(
        "[[upstream]]\nname = \"app\"\nservers = [\"{}\"]\n\n[[host]]\nnames = [\"hello.test\"]\nkind = \"proxy\"\n  [[host.route]]\n  path = \"/\"\n  upstream = \"app\"\n",
        up.addr
    );
    let g = Gapura::start(&profile("", &rest));
    let rt = runtime();
    rt.block_on(async {
        let (client, _driver) = h2c(g.addr).await;
        let req = http::Request::get("http://hello.test/slow")
            .body(())
            .unwrap();
        let mut ready = client.clone().ready().await.unwrap();
        let (_resp, mut stream) = ready.send_request(req, true).unwrap();
        tokio::task::spawn_blocking(move || reached_rx.recv_timeout(Duration::from_secs(10)))
            .await
            .unwrap()
            .expect("the request reached the origin");
        stream.send_reset(h2::Reason::CANCEL);
        // Gapura gives up the exchange: the upstream connection is closed.
        let n = tokio::task::spawn_blocking(move || ended_rx.recv_timeout(Duration::from_secs(10)))
            .await
            .unwrap()
            .expect("the upstream connection ended");
        assert_eq!(n, 0, "closed by Gapura, not reused or timed out");
        // The connection goes on serving.
        let (status, _, body) = exchange(&client, "GET", "/", None).await.unwrap();
        assert_eq!((status, &body[..]), (200, &b"origin\n"[..]));
    });
    assert_eq!(g.metric("gapura_h2_resets_total{shard=\"0\"}"), 1);
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A `respond` host whose body is `len` bytes of a pattern.
fn big_body_host(len: usize) -> (String, Vec<u8>) {
    let body: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    let host = format!(
        "[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"respond\"\nstatus = 200\nbody = \"{}\"\n",
        String::from_utf8(body.clone()).unwrap()
    );
    (host, body)
}

#[test]
fn a_large_built_in_answer_reaches_h2_and_http1_clients_whole() {
    let (host, body) = big_body_host(1_000_000);
    let g = Gapura::start(&profile("", &host));
    let rt = runtime();
    rt.block_on(async {
        let (client, _driver) = h2c(g.addr).await;
        // Several at once on one connection, and HEAD without the body.
        let mut running = Vec::new();
        for _ in 0..4 {
            let c = client.clone();
            running.push(tokio::spawn(async move {
                exchange(&c, "GET", "/", None).await.unwrap()
            }));
        }
        for r in running {
            let (status, headers, got) = r.await.unwrap();
            assert_eq!(status, 200);
            assert_eq!(headers.get("content-length").unwrap(), "1000000");
            assert!(got == body, "{} bytes", got.len());
        }
        let (status, _, got) = exchange(&client, "HEAD", "/", None).await.unwrap();
        assert_eq!((status, got.len()), (200, 0));
    });
    // HTTP/1.1: the large body, then a pipelined request's answer after it.
    let mut c = common::Client::connect(g.addr);
    c.send(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\nHEAD / HTTP/1.1\r\nHost: hello.test\r\n\r\nGET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    let r = c.response(false);
    assert!(r.body == body);
    let r = c.response(true);
    assert_eq!(r.header("Content-Length"), Some("1000000"));
    let r = c.response(false);
    assert!(r.body == body);
}

#[test]
fn zero_window_streams_hold_no_copy_of_a_large_built_in_answer() {
    let (host, _) = big_body_host(1_000_000);
    let g = Gapura::start(&profile("http2_max_streams = 128", &host));
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    let before = rss(g.child.id());
    // 2 connections x 128 streams asking for 1 MB each, the window shut.
    let mut conns = Vec::new();
    for _ in 0..2 {
        let mut s = std::net::TcpStream::connect(g.addr).unwrap();
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // SETTINGS_INITIAL_WINDOW_SIZE (4) = 0.
        out.extend_from_slice(&frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
        let mut block = vec![0x82, 0x86, 0x84, 0x01, 10];
        block.extend_from_slice(b"hello.test");
        for i in 0..128u32 {
            out.extend_from_slice(&frame(0x1, 0x5, 1 + 2 * i, &block));
        }
        s.write_all(&out).unwrap();
        conns.push(s);
    }
    // Every stream has its answer's head out (each waits on its window).
    assert!(common::wait_until(Duration::from_secs(10), || {
        g.metric("gapura_responses_total{shard=\"0\",class=\"2xx\"}") >= 256
    }));
    let grown = rss(g.child.id()).saturating_sub(before);
    // 256 answers of 1 MB: a copy each would be 256 MB.
    assert!(grown < 32 * 1024 * 1024, "grew {grown} bytes");
    drop(conns);
}

#[test]
fn the_access_log_names_one_connection_for_its_streams_and_keep_alive_requests() {
    let dir = TempDir::new();
    let path = dir.0.join("access.log");
    let g = Gapura::start(&profile(
        &format!("access_log = {{ path = \"{}\" }}", path.display()),
        HELLO,
    ));
    let rt = runtime();
    rt.block_on(async {
        let (client, _driver) = h2c(g.addr).await;
        for i in 0..3 {
            let got = exchange(&client, "GET", &format!("/h2/{i}"), None).await;
            assert_eq!(got.unwrap().0, 200);
        }
    });
    // Two requests on one HTTP/1.1 connection, then one on another.
    let mut c = common::Client::connect(g.addr);
    c.send(b"GET /one/a HTTP/1.1\r\nHost: hello.test\r\n\r\nGET /one/b HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    assert_eq!(c.response(false).status, 200);
    assert_eq!(c.response(false).status, 200);
    let r = common::request(
        g.addr,
        b"GET /two HTTP/1.1\r\nHost: hello.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    let mut lines: Vec<serde_json::Value> = Vec::new();
    common::wait_until(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        lines = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.len() >= 6
    });
    assert_eq!(lines.len(), 6, "{lines:?}");
    let conn_of = |prefix: &str| -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l["path"].as_str().unwrap().starts_with(prefix))
            .map(|l| l["connection"].as_u64().unwrap())
            .collect()
    };
    let (h2, one, two) = (conn_of("/h2/"), conn_of("/one/"), conn_of("/two"));
    assert_eq!(h2.len(), 3);
    assert!(h2.iter().all(|&c| c == h2[0]), "{h2:?}");
    assert_eq!(one.len(), 2);
    assert_eq!(one[0], one[1]);
    assert_eq!(two.len(), 1);
    let all: std::collections::BTreeSet<u64> = [h2[0], one[0], two[0]].into();
    assert_eq!(all.len(), 3, "three connections, three serials");
}

#[test]
fn a_grpc_call_past_its_rate_limit_gets_resource_exhausted_and_the_log_names_it() {
    let dir = TempDir::new();
    let path = dir.0.join("access.log");
    let rest = format!(
        "[[rate_limit]]\nname = \"one\"\nrequests = 1\nper = \"minute\"\nburst = 1\n{HELLO}rate_limit = \"one\"\n"
    );
    let log = format!("access_log = {{ path = \"{}\" }}", path.display());
    let g = Gapura::start(&profile(&log, &rest));
    let calls = runtime().block_on(async {
        let (client, _driver) = h2c(g.addr).await;
        let mut calls = Vec::new();
        for _ in 0..2 {
            let req = http::Request::post("http://hello.test/pkg.Greeter/SayHello")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap();
            let mut c = client.clone().ready().await.unwrap();
            let (resp, mut send) = c.send_request(req, false).unwrap();
            send.send_data(Bytes::from_static(b"\0\0\0\0\0"), true)
                .unwrap();
            let resp = resp.await.unwrap();
            let ended = resp.body().is_end_stream();
            calls.push((resp.status().as_u16(), resp.headers().clone(), ended));
        }
        calls
    });
    // The first call passes (the host's answer as it is), the second is
    // over the limit: one HEADERS frame that ends the stream.
    assert_eq!(calls[0].0, 200);
    assert!(!calls[0].1.contains_key("grpc-status"));
    let (status, fields, ended) = &calls[1];
    assert_eq!((*status, *ended), (200, true));
    assert_eq!(fields["content-type"], "application/grpc");
    assert_eq!(fields["grpc-status"], "8");
    let message = fields["grpc-message"].to_str().unwrap();
    let id = message
        .strip_prefix("429 Too Many Requests (request ")
        .and_then(|m| m.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{message}"));
    // The access log shows both calls as requests, the refusal under the
    // id its grpc-message names.
    let mut lines: Vec<serde_json::Value> = Vec::new();
    common::wait_until(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        lines = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.len() >= 2
    });
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[1]["status"], 429);
    assert_eq!(lines[1]["method"], "POST");
    assert_eq!(lines[1]["path"], "/pkg.Greeter/SayHello");
    assert_eq!(lines[1]["request_id"], id, "{lines:?}");
}
