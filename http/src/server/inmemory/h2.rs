//! HTTP/2 over the in-memory duplex, with the h2 client crate as the
//! client: streams through the gate, bodies, the stream limit, flow
//! control windows, resets and GOAWAY, and gRPC calls' refusals as
//! trailers-only answers.

use super::*;
use ::h2::client::SendRequest;
use bytes::Bytes;

/// An HTTP/2 connection served by the shard; the client's handle and a
/// view of the wire.
async fn connect(shard: &Rc<Shard>) -> (SendRequest<Bytes>, memio::Client) {
    let (mem, client) = memio::pair();
    let watch = client.watch();
    let place = crate::server::place::Place::open(shard);
    let peer = Peer::tcp(std::net::IpAddr::from([192, 0, 2, 1]));
    monoio::spawn(crate::server::h2::serve(
        mem,
        Vec::new(),
        shard.clone(),
        peer,
        place,
        None,
    ));
    let (send, conn) = ::h2::client::handshake(client).await.expect("handshake");
    monoio::spawn(async move {
        let _ = conn.await;
    });
    (send, watch)
}

async fn exchange(
    send: &SendRequest<Bytes>,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> Result<(u16, Vec<u8>), ::h2::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://hello.test{path}"))
        .body(())
        .unwrap();
    let mut send = send.clone().ready().await?;
    let (resp, mut stream) = send.send_request(req, body.is_none())?;
    if let Some(b) = body {
        stream.send_data(Bytes::copy_from_slice(b), true)?;
    }
    let resp = resp.await?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    Ok((status, got))
}

#[test]
fn streams_on_one_connection_are_answered() {
    run(async {
        let shard = shard("", HELLO);
        let (send, _wire) = connect(&shard).await;
        for i in 0..3 {
            let (status, body) = exchange(&send, "GET", &format!("/{i}"), None)
                .await
                .unwrap();
            assert_eq!((status, body.as_slice()), (200, &b"hello\n"[..]));
        }
        assert_eq!(shard.stats.h2_connections.get(), 1);
        assert_eq!(shard.stats.h2_streams.get(), 3);
        assert_eq!(shard.stats.requests.get(), 3);
    })
}

#[test]
fn concurrent_streams_are_served_side_by_side() {
    run(async {
        let shard = shard("", HELLO);
        let (send, _wire) = connect(&shard).await;
        let mut tasks = Vec::new();
        for i in 0..8 {
            let send = send.clone();
            tasks.push(monoio::spawn(async move {
                exchange(&send, "GET", &format!("/c{i}"), None).await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().0, 200);
        }
    })
}

#[test]
fn a_stream_with_a_body_is_read_and_answered() {
    run(async {
        let shard = shard("", HELLO);
        let (send, _wire) = connect(&shard).await;
        let (status, _) = exchange(&send, "POST", "/form", Some(b"a=1&b=2"))
            .await
            .unwrap();
        assert_eq!(status, 200);
    })
}

#[test]
fn a_gate_refusal_is_the_streams_answer_and_the_connection_goes_on() {
    run(async {
        let host = HELLO.replace(
            "default = true",
            "default = true\nconnection_rate = { requests = 1, burst = 2 }",
        );
        let shard = shard("", &host);
        let (send, _wire) = connect(&shard).await;
        let mut statuses = Vec::new();
        for i in 0..4 {
            statuses.push(
                exchange(&send, "GET", &format!("/{i}"), None)
                    .await
                    .unwrap()
                    .0,
            );
        }
        assert_eq!(statuses, [200, 200, 429, 429]);
    })
}

#[test]
fn a_stream_holds_no_more_than_its_window_for_a_client_that_does_not_read() {
    run(async {
        let big = format!(
            "[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"respond\"\nbody = \"{}\"\n",
            "d".repeat(300_000)
        );
        let shard = shard("", &big);
        let (send, wire) = connect(&shard).await;
        let req = http::Request::builder()
            .uri("http://hello.test/big")
            .body(())
            .unwrap();
        let mut send = send.ready().await.unwrap();
        let (resp, _) = send.send_request(req, true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        // The body is never read: no capacity is released.
        settle().await;
        let written = wire.written();
        // The default windows are 65,535 bytes; frame heads and the
        // connection's own frames add a little.
        assert!(
            written < 65_535 + 4096,
            "{written} bytes sent past the window"
        );
        assert!(written >= 60_000, "{written}: the window was used");
        drop(resp);
    })
}

#[test]
fn rapid_reset_past_the_budget_gets_goaway_enhance_your_calm() {
    run(async {
        let shard = shard("http2_max_resets = 10", HELLO);
        let (send, _wire) = connect(&shard).await;
        let mut refused = None;
        for i in 0..40 {
            let req = http::Request::builder()
                .uri(format!("http://hello.test/r{i}"))
                .body(())
                .unwrap();
            let mut s = match send.clone().ready().await {
                Ok(s) => s,
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            };
            match s.send_request(req, false) {
                Ok((_, mut stream)) => stream.send_reset(::h2::Reason::CANCEL),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
            settle().await;
        }
        let e = refused.expect("the connection ended");
        assert_eq!(e.reason(), Some(::h2::Reason::ENHANCE_YOUR_CALM), "{e:?}");
        assert_eq!(shard.stats.h2_calm.get(), 1);
        assert!(shard.stats.h2_resets.get() >= 11);
    })
}

#[test]
fn a_client_that_goes_away_ends_the_connection_and_releases_its_place() {
    run(async {
        let shard = shard("", HELLO);
        let (send, wire) = connect(&shard).await;
        assert_eq!(exchange(&send, "GET", "/", None).await.unwrap().0, 200);
        drop(send);
        wire.finish();
        assert!(until(|| open_count(&shard) == 0).await);
    })
}

/// A request with the given fields, proxied: what the upstream saw.
async fn proxied(
    method: &str,
    uri: &str,
    fields: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, super::upstream::Seen) {
    let (addr, rx) =
        super::upstream::upstream(1, |s| super::upstream::ok(&format!("{}", s.body.len())));
    let shard = shard("", &super::upstream::proxy(addr));
    let (send, _wire) = connect(&shard).await;
    let mut req = http::Request::builder().method(method).uri(uri);
    for (n, v) in fields {
        req = req.header(*n, *v);
    }
    let mut send = send.ready().await.unwrap();
    let (resp, mut stream) = send
        .send_request(req.body(()).unwrap(), body.is_none())
        .unwrap();
    if let Some(b) = body {
        stream.send_data(Bytes::copy_from_slice(b), true).unwrap();
    }
    let status = resp.await.unwrap().status().as_u16();
    (status, super::upstream::seen(&rx).await)
}

#[test]
fn a_stream_reaches_the_upstream_as_its_fields_say() {
    run(async {
        let (status, seen) = proxied(
            "GET",
            "http://hello.test/a/b?c=1",
            &[("cookie", "a=1"), ("x-one", "1"), ("cookie", "b=2")],
            None,
        )
        .await;
        assert_eq!(status, 200);
        let head = seen.head;
        assert!(
            head.starts_with("GET /a/b?c=1 HTTP/1.1\r\nHost: hello.test\r\n"),
            "{head}"
        );
        // The cookies joined into one line (RFC 9113 §8.2.3), the other
        // fields as they came.
        assert_eq!(head.matches("cookie: ").count(), 1, "{head}");
        assert!(head.contains("cookie: a=1; b=2\r\n"), "{head}");
        assert!(head.contains("x-one: 1\r\n"), "{head}");
        assert!(head.contains("X-Forwarded-Host: hello.test\r\n"), "{head}");
    })
}

#[test]
fn a_body_without_a_length_goes_upstream_chunked() {
    run(async {
        let (status, seen) = proxied("POST", "http://hello.test/up", &[], Some(b"abc")).await;
        assert_eq!(status, 200);
        assert!(
            seen.head.starts_with("POST /up HTTP/1.1\r\n"),
            "{}",
            seen.head
        );
        assert!(
            seen.head.contains("transfer-encoding: chunked\r\n"),
            "{}",
            seen.head
        );
        assert_eq!(seen.body, b"3\r\nabc\r\n0\r\n\r\n");
    })
}

#[test]
fn a_body_with_its_length_goes_upstream_as_it_is() {
    run(async {
        let (status, seen) = proxied(
            "PUT",
            "http://hello.test/up",
            &[("content-length", "5")],
            Some(b"hello"),
        )
        .await;
        assert_eq!(status, 200);
        assert!(seen.head.contains("content-length: 5\r\n"), "{}", seen.head);
        assert!(!seen.head.contains("transfer-encoding"), "{}", seen.head);
        assert_eq!(seen.body, b"hello");
    })
}

#[test]
fn heads_the_pipeline_refuses_are_the_streams_answers() {
    run(async {
        let shard = shard("", HELLO);
        let (send, _wire) = connect(&shard).await;
        let status = |req: http::Request<()>| {
            let send = send.clone();
            async move {
                let mut send = send.ready().await.unwrap();
                let (resp, _) = send.send_request(req, true).unwrap();
                resp.await.unwrap().status().as_u16()
            }
        };
        // No `:authority` and no `host` field: 400 (missing Host), as over
        // HTTP/1.1; a `host` field stands for the authority.
        let bare = http::Request::builder().uri("/a").body(()).unwrap();
        assert_eq!(status(bare).await, 400);
        let hosted = http::Request::builder()
            .uri("/a")
            .header("host", "hello.test")
            .body(())
            .unwrap();
        assert_eq!(status(hosted).await, 200);
        // Two `host` fields without `:authority`: 400 (duplicate Host).
        let twice = http::Request::builder()
            .uri("/a")
            .header("host", "hello.test")
            .header("host", "other.test")
            .body(())
            .unwrap();
        assert_eq!(status(twice).await, 400);
        // More field lines than a head may have: 431.
        let mut many = http::Request::builder().uri("http://hello.test/");
        for i in 0..crate::server::REQUEST_LINES {
            many = many.header(format!("x-{i}"), "v");
        }
        assert_eq!(status(many.body(()).unwrap()).await, 431);
        // The connection goes on.
        assert_eq!(exchange(&send, "GET", "/", None).await.unwrap().0, 200);
    })
}

/// What a gRPC client reads of an answer: the status, the fields, whether
/// the HEADERS frame ended the stream (a trailers-only answer), the body.
struct Answered {
    status: u16,
    fields: http::HeaderMap,
    headers_only: bool,
    body: Vec<u8>,
}

/// A unary call's POST to `authority` with `content_type`, its message
/// framed as gRPC frames it (a flag byte, a 4-byte length).
async fn call(send: &SendRequest<Bytes>, authority: &str, content_type: &str) -> Answered {
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{authority}/pkg.Greeter/SayHello"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut send = send.clone().ready().await.unwrap();
    let (resp, mut stream) = send.send_request(req, false).unwrap();
    stream
        .send_data(Bytes::from_static(b"\0\0\0\0\x02hi"), true)
        .unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let fields = resp.headers().clone();
    let mut body = resp.into_body();
    let headers_only = body.is_end_stream();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    Answered {
        status,
        fields,
        headers_only,
        body: got,
    }
}

/// The request id a refused call's `grpc-message` names, after checking
/// the answer is trailers-only with `grpc_status`, and the message is
/// `http_status`'s.
fn refused_as(a: &Answered, grpc_status: &str, http_status: &str) -> String {
    assert_eq!(a.status, 200);
    assert!(a.headers_only, "the HEADERS frame ends the stream");
    assert!(a.body.is_empty());
    assert_eq!(a.fields["content-type"], "application/grpc");
    assert_eq!(a.fields["grpc-status"], grpc_status, "{:?}", a.fields);
    let message = a.fields["grpc-message"].to_str().unwrap();
    let id = message
        .strip_prefix(&format!("{http_status} (request "))
        .and_then(|m| m.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{message}"));
    assert!(
        id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    // The page's own fields stay with the page.
    assert!(!a.fields.contains_key("cache-control"), "{:?}", a.fields);
    id.to_string()
}

#[test]
fn a_grpc_call_over_the_connection_rate_gets_resource_exhausted() {
    run(async {
        let host = HELLO.replace(
            "default = true",
            "default = true\nconnection_rate = { requests = 1, burst = 1 }",
        );
        let shard = shard("", &host);
        let (send, _wire) = connect(&shard).await;
        // A call the gate lets through: the host's answer as it is (a 200
        // is never rewritten).
        let passed = call(&send, "hello.test", "application/grpc").await;
        assert_eq!(
            (passed.status, passed.body.as_slice()),
            (200, &b"hello\n"[..])
        );
        assert!(!passed.fields.contains_key("grpc-status"));
        let first = call(&send, "hello.test", "application/grpc+proto").await;
        let a = refused_as(&first, "8", "429 Too Many Requests");
        assert!(first.fields.contains_key("grpc-retry-pushback-ms"));
        let second = call(&send, "hello.test", "application/grpc").await;
        let b = refused_as(&second, "8", "429 Too Many Requests");
        assert_ne!(a, b, "each call has its own id");
        // Calls count as requests; the connection goes on.
        assert_eq!(shard.stats.requests.get(), 3);
        assert_eq!(shard.stats.h2_streams.get(), 3);
    })
}

#[test]
fn a_grpc_call_to_an_unknown_host_is_unimplemented_and_a_denied_one_permission_denied() {
    run(async {
        let profile = r#"
[[access_list]]
name = "nobody"
deny = ["0.0.0.0/0", "::/0"]

[[host]]
names = ["hello.test"]
kind = "respond"
status = 200
body = "hello\n"
access_list = "nobody"
"#;
        let shard = shard("", profile);
        let (send, _wire) = connect(&shard).await;
        let unknown = call(&send, "other.test", "application/grpc").await;
        refused_as(&unknown, "12", "404 Not Found");
        let denied = call(&send, "hello.test", "application/grpc").await;
        refused_as(&denied, "7", "403 Forbidden");
        // Not gRPC (gRPC-Web carries its status in the body): the page.
        let web = call(&send, "hello.test", "application/grpc-web").await;
        assert_eq!(web.status, 403);
        assert!(!web.fields.contains_key("grpc-status"));
    })
}

#[test]
fn a_request_that_is_not_grpc_still_gets_its_page() {
    run(async {
        let host = HELLO.replace(
            "default = true",
            "default = true\nconnection_rate = { requests = 1, burst = 1 }",
        );
        let shard = shard("", &host);
        let (send, _wire) = connect(&shard).await;
        assert_eq!(exchange(&send, "GET", "/", None).await.unwrap().0, 200);
        let (status, body) = exchange(&send, "POST", "/", Some(b"x")).await.unwrap();
        assert_eq!(status, 429);
        let page = String::from_utf8(body).unwrap();
        assert!(page.starts_with("429 Too Many Requests\n"), "{page}");
        assert!(page.contains("\nrequest "), "{page}");
    })
}

#[test]
fn an_upstreams_error_to_a_grpc_call_is_unavailable_and_names_the_id_it_was_sent() {
    run(async {
        let (addr, rx) = super::upstream::upstream(1, |_| {
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy".to_vec()
        });
        let shard = shard("", &super::upstream::proxy(addr));
        let (send, _wire) = connect(&shard).await;
        let answered = call(&send, "hello.test", "application/grpc").await;
        let id = refused_as(&answered, "14", "503 Service Unavailable");
        let seen = super::upstream::seen(&rx).await;
        assert!(
            seen.head.contains(&format!("X-Request-Id: {id}\r\n")),
            "{}",
            seen.head
        );
    })
}

/// A request's answer: status, fields and body.
async fn answer_of(
    send: &SendRequest<Bytes>,
    method: &str,
    authority: &str,
    path: &str,
) -> (u16, http::HeaderMap, Vec<u8>) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://{authority}{path}"))
        .body(())
        .unwrap();
    let mut send = send.clone().ready().await.unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let (parts, mut body) = resp.await.unwrap().into_parts();
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    (parts.status.as_u16(), parts.headers, got)
}

#[test]
fn gapuras_own_answers_reach_an_http2_client_as_their_fields() {
    run(async {
        let big = "b".repeat(40 * 1024);
        let hosts = format!(
            r#"
[[host]]
names = ["big.test"]
kind = "respond"
status = 200
body = "{big}"
content_type = "text/plain"
headers = {{ "X-Own" = "yes" }}

[[host]]
names = ["go.test"]
kind = "redirect"
status = 301
target = "https://example.com"
keep = "path_and_query"
headers = {{ "Cache-Control" = "max-age=3600" }}

[[host]]
names = ["tight.test"]
kind = "respond"
status = 200
body = "ok"
rate_limit = "tight"

[[rate_limit]]
name = "tight"
requests = 1
per = "hour"
burst = 1
"#
        );
        let shard = shard("", &hosts);
        let (send, _wire) = connect(&shard).await;
        // A host's own answer, its body larger than one DATA frame and
        // sent from the snapshot's shared bytes.
        let (status, fields, body) = answer_of(&send, "GET", "big.test", "/").await;
        assert_eq!((status, body.len()), (200, big.len()));
        assert_eq!(fields["x-own"], "yes");
        assert_eq!(fields["content-length"], big.len().to_string().as_str());
        assert!(fields.contains_key("date"));
        assert!(!fields.contains_key("connection"));
        // HEAD: the fields, no body.
        let (status, fields, body) = answer_of(&send, "HEAD", "big.test", "/").await;
        assert_eq!((status, body.len()), (200, 0));
        assert_eq!(fields["content-length"], big.len().to_string().as_str());
        // A redirect: its Location made of the target and the path.
        let (status, fields, body) = answer_of(&send, "GET", "go.test", "/a/b?c=1").await;
        assert_eq!(status, 301);
        assert_eq!(fields["location"], "https://example.com/a/b?c=1");
        assert_eq!(fields["cache-control"], "max-age=3600");
        assert!(body.is_empty());
        // A refusal: 429 with its Retry-After and its page.
        let _ = answer_of(&send, "GET", "tight.test", "/").await;
        let (status, fields, body) = answer_of(&send, "GET", "tight.test", "/").await;
        assert_eq!(status, 429);
        let retry: u64 = fields["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry >= 1, "{retry}");
        assert_eq!(fields["content-length"], body.len().to_string().as_str());
        assert!(String::from_utf8_lossy(&body).contains(&retry.to_string()));
        // No such host: the built-in page, its request id stamped into
        // the body as for HTTP/1.1.
        let (status, fields, body) = answer_of(&send, "GET", "nowhere.test", "/").await;
        assert_eq!(status, 404);
        assert_eq!(fields["content-length"], body.len().to_string().as_str());
        assert!(!body.is_empty());
        assert!(!body.windows(24).any(|w| w == b"------------------------"));
    })
}
