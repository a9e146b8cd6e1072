//! HTTP/3 end to end with a real QUIC client (aioquic, through
//! `support/h3client.py`): answers of respond hosts, the gate's refusals
//! (429 with Retry-After, 401, the proof-of-work page) arriving over
//! HTTP/3, request bodies, Retry, and `Alt-Svc` on the listener's TCP
//! answers.

mod common;

use common::tls::{client_config, write_cert, ClientOptions, TlsClient};
use common::{profile, Gapura, TempDir};
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Command;

/// A profile whose one TLS listener serves HTTP/3 too, with a certificate
/// for `*.test` written to `dir`.
fn h3_profile(dir: &TempDir, server_extra: &str, rest: &str) -> String {
    let (cert, key, _) = write_cert(&dir.0, "t", &["*.test"]);
    let certs = format!("[[certificate]]\nnames = [\"*.test\"]\ncert = {cert:?}\nkey = {key:?}\n");
    profile(server_extra, &format!("{rest}\n{certs}")).replace(
        "listen = [\"127.0.0.1:0\"]",
        "listen = [\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true, http3 = true }]",
    )
}

/// Runs the HTTP/3 client against `addr`: one connection, `count`
/// requests; each answer as JSON.
fn h3(addr: SocketAddr, authority: &str, args: &[&str], count: u32) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/h3client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("--connect")
        .arg(addr.to_string())
        .arg("--authority")
        .arg(authority)
        .arg("--count")
        .arg(count.to_string())
        .args(args)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        out.status.success(),
        "h3client failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    answers
}

fn header<'a>(answer: &'a Value, name: &str) -> Option<&'a str> {
    answer["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0] == name)
        .and_then(|h| h[1].as_str())
}

const RESPOND: &str = r#"
[[host]]
names = ["hello.test"]
default = true
kind = "respond"
status = 200
body = "hello over h3\n"
content_type = "text/plain"
"#;

#[test]
fn a_respond_host_answers_over_http3_and_tcp_points_at_it() {
    let dir = TempDir::new();
    let g = Gapura::start(&h3_profile(&dir, "", RESPOND));
    let addr = g.tls_addr.expect("the TLS listener");
    let answers = h3(addr, "hello.test", &[], 3);
    assert_eq!(answers.len(), 3);
    for a in &answers {
        assert_eq!(a["status"], 200, "{a}");
        assert_eq!(a["body"], "hello over h3\n");
        assert_eq!(header(a, "content-type"), Some("text/plain"));
        assert_eq!(header(a, "content-length"), Some("14"));
        assert!(header(a, "date").is_some());
        // Fields a connection has in HTTP/1.1 never go out on a stream.
        assert_eq!(header(a, "connection"), None);
    }
    assert_eq!(g.metric("gapura_h3_connections_total{shard=\"0\"}"), 1);
    assert_eq!(g.metric("gapura_h3_streams_total{shard=\"0\"}"), 3);
    // The TCP listener's answers say where HTTP/3 is.
    let config = client_config(ClientOptions::default());
    let mut c = TlsClient::connect(addr, Some("hello.test"), &config).unwrap();
    let r = c.request(b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    assert_eq!(r.status, 200);
    let want = format!("h3=\":{}\"; ma=86400", addr.port());
    assert_eq!(r.header("alt-svc"), Some(want.as_str()));
    // The plaintext listener's do not.
    let r = common::request(g.addr, b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    assert_eq!(r.header("alt-svc"), None);
}

#[test]
fn the_gates_refusals_arrive_over_http3() {
    let dir = TempDir::new();
    let key = dir.0.join("pow.key");
    let rest = format!(
        r#"
[[rate_limit]]
name = "once"
requests = 1
per = "minute"

[[access_list]]
name = "staff"
users = [{{ name = "alice", password_hash = "$pbkdf2-sha256$i=100000$YyL45f2NjRWx82ZN2Q0D2A$gWBUOhuyMMRVCLxwGPL+wC6YjqC2LMZqQ1Qx8O7uIUA" }}]

[[host]]
names = ["slow.test"]
rate_limit = "once"
body = "once\n"

[[host]]
names = ["auth.test"]
access_list = "staff"
body = "secret\n"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9"]

[[host]]
names = ["pow.test"]
kind = "proxy"
proof_of_work = {{ enabled = true, difficulty = 8, token_lifetime_hours = 2 }}
  [[host.route]]
  path = "/"
  upstream = "app"
{RESPOND}"#
    );
    let g = Gapura::start(&h3_profile(
        &dir,
        &format!("pow_key_file = {:?}", key.display().to_string()),
        &rest,
    ));
    let addr = g.tls_addr.expect("the TLS listener");
    let slow = h3(addr, "slow.test", &[], 2);
    assert_eq!(slow[0]["status"], 200, "{}", slow[0]);
    assert_eq!(slow[1]["status"], 429, "{}", slow[1]);
    let retry: u64 = header(&slow[1], "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let auth = h3(addr, "auth.test", &[], 1);
    assert_eq!(auth[0]["status"], 401, "{}", auth[0]);
    assert!(header(&auth[0], "www-authenticate")
        .unwrap()
        .starts_with("Basic "));
    let pow = h3(addr, "pow.test", &["--header", "accept:text/html"], 1);
    assert_eq!(pow[0]["status"], 403, "{}", pow[0]);
    assert_eq!(header(&pow[0], "cache-control"), Some("no-store"));
    assert!(
        pow[0]["body"]
            .as_str()
            .unwrap()
            .contains("data-challenge=\""),
        "the challenge page: {}",
        pow[0]
    );
}

#[test]
fn a_request_body_is_read_from_data_frames() {
    let dir = TempDir::new();
    let rest = r#"
[[host]]
names = ["small.test"]
body = "took it\n"
limits = { max_body_bytes = 16 }
"#;
    let g = Gapura::start(&h3_profile(&dir, "", &format!("{rest}{RESPOND}")));
    let addr = g.tls_addr.expect("the TLS listener");
    let ok = h3(
        addr,
        "small.test",
        &["--method", "POST", "--data", "0123456789"],
        1,
    );
    assert_eq!(ok[0]["status"], 200, "{}", ok[0]);
    assert_eq!(ok[0]["body"], "took it\n");
    let big = "x".repeat(64);
    let refused = h3(addr, "small.test", &["--method", "POST", "--data", &big], 1);
    assert_eq!(refused[0]["status"], 413, "{}", refused[0]);
}

#[test]
fn the_access_log_says_which_protocol_carried_each_request() {
    let dir = TempDir::new();
    let log = dir.0.join("access.log");
    let g = Gapura::start(&h3_profile(
        &dir,
        &format!("access_log = {{ path = {:?} }}", log.display().to_string()),
        RESPOND,
    ));
    let addr = g.tls_addr.expect("the TLS listener");
    h3(addr, "hello.test", &["--path", "/three"], 1);
    common::request(g.addr, b"GET /one HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    let mut lines = Vec::new();
    common::wait_until(std::time::Duration::from_secs(10), || {
        lines = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect();
        lines.len() == 2
    });
    let by_path = |p: &str| lines.iter().find(|l| l["path"] == p).cloned().unwrap();
    assert_eq!(by_path("/three")["protocol"], "HTTP/3");
    assert_eq!(by_path("/three")["status"], 200);
    assert_eq!(by_path("/one")["protocol"], "HTTP/1.1");
}

#[test]
fn retry_always_validates_the_address_first() {
    let dir = TempDir::new();
    let g = Gapura::start(&h3_profile(
        &dir,
        "",
        &format!("[http3]\nretry = \"always\"\n{RESPOND}"),
    ));
    let addr = g.tls_addr.expect("the TLS listener");
    let answers = h3(addr, "hello.test", &[], 1);
    assert_eq!(answers[0]["status"], 200, "{}", answers[0]);
    assert_eq!(g.metric("gapura_h3_retries_total{shard=\"0\"}"), 1);
    assert_eq!(g.metric("gapura_h3_connections_total{shard=\"0\"}"), 1);
}

/// An h2c upstream that answers each request with its method, path and
/// body, and a trailer.
fn h2c_echo() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            while let Ok((tcp, _)) = l.accept().await {
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((req, mut respond))) = conn.accept().await {
                        tokio::spawn(async move {
                            let (parts, mut body) = req.into_parts();
                            let mut got = Vec::new();
                            while let Some(Ok(b)) = body.data().await {
                                let _ = body.flow_control().release_capacity(b.len());
                                got.extend_from_slice(&b);
                            }
                            let text = format!(
                                "{} {} {}",
                                parts.method,
                                parts.uri.path(),
                                String::from_utf8_lossy(&got)
                            );
                            let answer = http::Response::builder().status(200).body(()).unwrap();
                            let Ok(mut send) = respond.send_response(answer, false) else {
                                return;
                            };
                            let _ = send.send_data(bytes::Bytes::from(text), false);
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("x-trailer", "done".parse().unwrap());
                            let _ = send.send_trailers(trailers);
                        });
                    }
                });
            }
        });
    });
    addr
}

#[test]
fn proxied_answers_reach_an_http3_client_from_either_upstream_protocol() {
    let h1 = common::upstream::echo();
    let h2 = h2c_echo();
    let dir = TempDir::new();
    let rest = format!(
        r#"
[[upstream]]
name = "one"
servers = ["{}"]

[[upstream]]
name = "two"
servers = ["{h2}"]
protocol = "h2"

[[host]]
names = ["app.test"]
kind = "proxy"
  [[host.route]]
  path = "/one"
  upstream = "one"
  [[host.route]]
  path = "/two"
  upstream = "two"
"#,
        h1.addr
    );
    let g = Gapura::start(&h3_profile(&dir, "", &rest));
    let addr = g.tls_addr.expect("the TLS listener");
    let one = h3(
        addr,
        "app.test",
        &["--path", "/one/x", "--method", "POST", "--data", "ping"],
        2,
    );
    for a in &one {
        assert_eq!(a["status"], 200, "{a}");
        assert_eq!(a["body"], "ping");
        assert_eq!(header(a, "x-seen-method"), Some("POST"));
        assert_eq!(header(a, "x-seen-target"), Some("/one/x"));
    }
    let two = h3(
        addr,
        "app.test",
        &["--path", "/two/y", "--method", "PUT", "--data", "pong"],
        2,
    );
    for a in &two {
        assert_eq!(a["status"], 200, "{a}");
        assert_eq!(a["body"], "PUT /two/y pong");
    }
    // A bodiless request to the HTTP/2 upstream, and its trailer.
    let get = h3(addr, "app.test", &["--path", "/two/z"], 1);
    assert_eq!(get[0]["body"], "GET /two/z ", "{}", get[0]);
    assert_eq!(header(&get[0], "x-trailer"), Some("done"), "{}", get[0]);
}

#[test]
fn a_connection_stays_on_its_shard_when_its_address_changes() {
    // Two shards, steered by source: 127.0.0.2 lands on shard 0 and
    // 127.0.0.3 on shard 1. The client starts from the first and, after
    // two answers, its packets come from the second: the connection IDs
    // Gapura issued still take them to shard 0, which holds it.
    let dir = TempDir::new();
    let g = Gapura::start(&h3_profile(&dir, "", RESPOND).replace("shards = 1", "shards = 2"));
    let addr = g.tls_addr.expect("the TLS listener");
    let answers = h3(addr, "hello.test", &["--rebind-after", "2"], 5);
    assert_eq!(answers.len(), 5);
    for a in &answers {
        assert_eq!(a["status"], 200, "{a}");
    }
    assert_eq!(g.metric("gapura_h3_connections_total{shard=\"0\"}"), 1);
    assert_eq!(g.metric("gapura_h3_connections_total{shard=\"1\"}"), 0);
    assert_eq!(g.metric("gapura_h3_streams_total{shard=\"0\"}"), 5);
}

#[test]
fn a_trickled_head_is_refused_at_the_header_timeout_and_the_connection_goes_on() {
    let dir = TempDir::new();
    let g = Gapura::start(&h3_profile(&dir, "header_timeout_ms = 500", RESPOND));
    let addr = g.tls_addr.expect("the TLS listener");
    let got = h3(addr, "hello.test", &["--partial-head"], 1);
    assert_eq!(got[0]["status"], 200, "{}", got[0]);
    // H3_REQUEST_REJECTED: the stream was refused, never served.
    assert_eq!(got[1]["reset"], 0x10b, "{}", got[1]);
    assert_eq!(
        g.metric("gapura_errors_total{shard=\"0\",kind=\"header_timeout\"}"),
        1
    );
}

#[test]
fn a_connection_kept_alive_without_requests_is_closed_at_the_idle_timeout() {
    let dir = TempDir::new();
    let g = Gapura::start(&h3_profile(
        &dir,
        "",
        &format!("[http3]\nidle_timeout_ms = 1000\n{RESPOND}"),
    ));
    let addr = g.tls_addr.expect("the TLS listener");
    // Pings keep QUIC's own idle timer from firing: the connection is
    // closed for having no request, with H3_NO_ERROR.
    let got = h3(addr, "hello.test", &["--ping-for", "8"], 1);
    assert_eq!(got[0]["status"], 200, "{}", got[0]);
    assert_eq!(got[1]["closed"], 0x100, "{}", got[1]);
}

#[test]
fn early_data_serves_safe_requests_and_answers_the_rest_too_early() {
    let dir = TempDir::new();
    let g = Gapura::start(&h3_profile(
        &dir,
        "",
        &format!("[http3]\nearly_data = true\n{RESPOND}"),
    ));
    let addr = g.tls_addr.expect("the TLS listener");
    let get = h3(addr, "hello.test", &["--early"], 1);
    assert_eq!(get[0]["status"], 200, "{}", get[0]);
    assert_eq!(g.metric("gapura_h3_early_requests_total{shard=\"0\"}"), 1);
    // A POST in 0-RTT data may be a replay: 425, never served.
    let post = h3(
        addr,
        "hello.test",
        &["--early", "--method", "POST", "--data", "x"],
        1,
    );
    assert_eq!(post[0]["status"], 425, "{}", post[0]);
    assert_eq!(g.metric("gapura_h3_early_refused_total{shard=\"0\"}"), 1);
}

#[test]
fn without_early_data_zero_rtt_is_refused_and_the_request_goes_after_the_handshake() {
    let dir = TempDir::new();
    let g = Gapura::start(&h3_profile(&dir, "", RESPOND));
    let addr = g.tls_addr.expect("the TLS listener");
    let post = h3(
        addr,
        "hello.test",
        &["--early", "--method", "POST", "--data", "x"],
        1,
    );
    assert_eq!(post[0]["status"], 200, "{}", post[0]);
    assert_eq!(g.metric("gapura_h3_early_requests_total{shard=\"0\"}"), 0);
    assert_eq!(g.metric("gapura_h3_early_refused_total{shard=\"0\"}"), 0);
}

#[test]
fn a_replayed_zero_rtt_flight_reaches_nothing() {
    let origin = common::upstream::echo();
    let dir = TempDir::new();
    let rest = format!(
        r#"[http3]
early_data = true

[[upstream]]
name = "app"
servers = ["{}"]

[[host]]
names = ["app.test"]
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "app"
"#,
        origin.addr
    );
    let g = Gapura::start(&h3_profile(&dir, "", &rest));
    let addr = g.tls_addr.expect("the TLS listener");
    let got = h3(addr, "app.test", &["--replay-early", "--path", "/once"], 1);
    assert_eq!(got[0]["status"], 200, "{}", got[0]);
    assert!(got[1]["replayed"].as_u64().unwrap() >= 1, "{}", got[1]);
    // The session was used once: the replayed ClientHello resumes nothing
    // and its 0-RTT data is never read. The warm-up GET and the request
    // itself reached the origin, nothing more.
    assert_eq!(g.metric("gapura_h3_early_requests_total{shard=\"0\"}"), 1);
    assert_eq!(g.metric("gapura_h3_streams_total{shard=\"0\"}"), 2);
    assert_eq!(origin.requests.lock().unwrap().len(), 2);
}
