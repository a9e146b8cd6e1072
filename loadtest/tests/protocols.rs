//! TLS, HTTP/2, HTTP/3 and UDP paths against in-test servers, and the JSON document
//! against the shipped schema.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{run, take_requests, u};

fn cert() -> (Vec<u8>, Vec<u8>) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    (c.cert.der().to_vec(), c.key_pair.serialize_der())
}

fn server_tls_config(alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    let (cert, key) = cert();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(cert)],
            rustls::pki_types::PrivatePkcs8KeyDer::from(key).into(),
        )
        .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

#[derive(Default)]
struct TlsSeen {
    requests: AtomicU64,
    handshakes: AtomicU64,
    resumed: AtomicU64,
}

/// HTTPS/1.1 server that closes each connection after `per_conn` responses.
fn https_server(per_conn: u64) -> (SocketAddr, Arc<TlsSeen>) {
    let cfg = server_tls_config(&[b"http/1.1"]);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(TlsSeen::default());
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let cfg = cfg.clone();
            let seen = s2.clone();
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(cfg).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, c);
                let mut buf = Vec::new();
                let mut tmp = [0u8; 16384];
                let mut answered = 0;
                let mut counted = false;
                loop {
                    let n = match tls.read(&mut tmp) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if !counted {
                        counted = true;
                        seen.handshakes.fetch_add(1, Ordering::Relaxed);
                        if tls.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                            seen.resumed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    for _ in 0..take_requests(&mut buf) {
                        seen.requests.fetch_add(1, Ordering::Relaxed);
                        answered += 1;
                        let close = answered == per_conn;
                        let head: &[u8] = if close {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                        } else {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                        };
                        if tls.write_all(head).is_err() {
                            return;
                        }
                        if close {
                            tls.conn.send_close_notify();
                            let _ = tls.flush();
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[test]
fn https_requests_are_counted_and_reconnects_resume_the_session() {
    let (addr, seen) = https_server(10);
    let url = format!("https://localhost:{}/", addr.port());
    let r = run(&["-k", "-c", "2", "-n", "200", &url]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 200);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 200);
    assert!(r.json["config"]["tls"].as_bool().unwrap());
    let (hs, resumed) = (
        seen.handshakes.load(Ordering::Relaxed),
        seen.resumed.load(Ordering::Relaxed),
    );
    assert!(hs >= 20, "{hs} handshakes");
    assert!(resumed >= hs / 2, "{resumed} of {hs} handshakes resumed");
}

#[test]
fn https_without_insecure_refuses_a_self_signed_certificate() {
    let (addr, _) = https_server(10);
    let url = format!("https://localhost:{}/", addr.port());
    let r = run(&["-c", "1", "-d", "300ms", &url]);
    assert_eq!(r.code, 1);
    assert!(u(&r.json, "errors.connect") > 0);
}

#[derive(Default)]
struct H2Seen {
    requests: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

/// h2 server (h2c prior knowledge, or TLS with ALPN h2) that holds each response 2 ms.
fn h2_server(tls: bool) -> (SocketAddr, Arc<H2Seen>) {
    let std_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_l.local_addr().unwrap();
    std_l.set_nonblocking(true).unwrap();
    let seen = Arc::new(H2Seen::default());
    let s2 = seen.clone();
    let tls_cfg = tls.then(|| server_tls_config(&[b"h2"]));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let l = tokio::net::TcpListener::from_std(std_l).unwrap();
            loop {
                let (sock, _) = l.accept().await.unwrap();
                let seen = s2.clone();
                let tls_cfg = tls_cfg.clone();
                tokio::task::spawn_local(async move {
                    match tls_cfg {
                        None => serve_h2(sock, seen).await,
                        Some(cfg) => {
                            let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(sock).await
                            else {
                                return;
                            };
                            serve_h2(s, seen).await
                        }
                    }
                });
            }
        });
    });
    (addr, seen)
}

async fn serve_h2<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static>(
    io: T,
    seen: Arc<H2Seen>,
) {
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((_req, mut respond))) = conn.accept().await {
        let seen = seen.clone();
        tokio::task::spawn_local(async move {
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            seen.in_flight.fetch_sub(1, Ordering::SeqCst);
            seen.requests.fetch_add(1, Ordering::Relaxed);
            let resp = http::Response::builder().status(200).body(()).unwrap();
            if let Ok(mut body) = respond.send_response(resp, false) {
                let _ = body.send_data(bytes::Bytes::from_static(b"ok"), true);
            }
        });
    }
}

#[test]
fn http2_streams_run_concurrently_on_each_connection() {
    let (addr, seen) = h2_server(false);
    let r = run(&[
        "--http2",
        "-c",
        "2",
        "-m",
        "8",
        "-n",
        "400",
        &format!("http://{addr}/"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 400);
    assert_eq!(u(&r.json, "status_counts.200"), 400);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 400);
    assert_eq!(r.json["config"]["protocol"], "http2");
    let max = seen.max_in_flight.load(Ordering::SeqCst);
    assert!(max > 8 && max <= 16, "{max} streams in flight");
}

#[test]
fn http2_over_tls_negotiates_h2() {
    let (addr, seen) = h2_server(true);
    let url = format!("https://localhost:{}/", addr.port());
    let r = run(&["--http2", "-k", "-c", "1", "-m", "4", "-n", "100", &url]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 100);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 100);
}

/// UDP echo that answers only every `answer_every`-th datagram.
fn udp_echo(answer_every: u64) -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicBool>) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (g2, st2) = (got.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while !st2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                let k = g2.fetch_add(1, Ordering::Relaxed) + 1;
                assert_eq!(&buf[..n], b"hellohellohe");
                if k.is_multiple_of(answer_every) {
                    let _ = s.send_to(&buf[..n], from);
                }
            }
        }
    });
    (addr, got, stop)
}

#[test]
fn udp_replies_and_timeouts_are_counted() {
    let (addr, got, stop) = udp_echo(1);
    let url = format!("udp://{addr}");
    let r = run(&[
        "-c",
        "4",
        "-n",
        "300",
        "--payload",
        "hello",
        "--payload-size",
        "12",
        &url,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "udp.sent"), 300);
    assert_eq!(u(&r.json, "udp.replies"), 300);
    assert_eq!(got.load(Ordering::Relaxed), 300);
    stop.store(true, Ordering::Relaxed);

    // Every other datagram unanswered: half time out, half are replies.
    let (addr, _, stop) = udp_echo(2);
    let url = format!("udp://{addr}");
    let r = run(&[
        "-c",
        "1",
        "-n",
        "20",
        "--timeout",
        "50ms",
        "--payload",
        "hello",
        "--payload-size",
        "12",
        &url,
    ]);
    assert_eq!(u(&r.json, "udp.replies"), 10);
    assert_eq!(u(&r.json, "udp.timeouts"), 10);
    stop.store(true, Ordering::Relaxed);
}

#[test]
fn udp_open_loop_sends_at_the_rate() {
    let (addr, got, stop) = udp_echo(1);
    let r = run(&[
        "-c",
        "2",
        "-R",
        "200",
        "-d",
        "500ms",
        "--payload",
        "hello",
        "--payload-size",
        "12",
        &format!("udp://{addr}"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sent = u(&r.json, "udp.sent");
    assert!((99..=101).contains(&sent), "{sent}");
    assert!(got.load(Ordering::Relaxed) >= sent);
    stop.store(true, Ordering::Relaxed);
}

/// Checks `v` against the subset of JSON Schema (2020-12) the shipped schema
/// uses: type (with unions), const, enum, required, properties,
/// additionalProperties (false or a schema), propertyNames.pattern (digits
/// only), items, minItems, minimum, oneOf. Any other keyword fails the check,
/// so the schema cannot silently outgrow this validator.
fn validate(schema: &serde_json::Value, v: &serde_json::Value, path: &str) -> Result<(), String> {
    use serde_json::Value;
    let obj = schema
        .as_object()
        .ok_or(format!("{path}: schema is not an object"))?;
    for (k, s) in obj {
        match k.as_str() {
            "$schema" | "$id" | "title" | "description" => {}
            "type" => {
                let types: Vec<&str> = match s {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(a) => a.iter().filter_map(|t| t.as_str()).collect(),
                    _ => return Err(format!("{path}: bad type")),
                };
                let ok = types.iter().any(|t| match *t {
                    "object" => v.is_object(),
                    "array" => v.is_array(),
                    "string" => v.is_string(),
                    "number" => v.is_number(),
                    "integer" => v.is_u64() || v.is_i64(),
                    "boolean" => v.is_boolean(),
                    "null" => v.is_null(),
                    _ => false,
                });
                if !ok {
                    return Err(format!("{path}: {v} is not {types:?}"));
                }
            }
            "const" => {
                if v != s {
                    return Err(format!("{path}: {v} != {s}"));
                }
            }
            "enum" => {
                if !s.as_array().unwrap().contains(v) {
                    return Err(format!("{path}: {v} not in {s}"));
                }
            }
            "required" => {
                for r in s.as_array().unwrap() {
                    if v.get(r.as_str().unwrap()).is_none() {
                        return Err(format!("{path}: missing {r}"));
                    }
                }
            }
            "properties" => {
                if let Some(o) = v.as_object() {
                    for (name, sub) in s.as_object().unwrap() {
                        if let Some(x) = o.get(name) {
                            validate(sub, x, &format!("{path}.{name}"))?;
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(o) = v.as_object() {
                    let known = obj.get("properties").and_then(|p| p.as_object());
                    for (name, x) in o {
                        if known.is_some_and(|k| k.contains_key(name)) {
                            continue;
                        }
                        match s {
                            Value::Bool(false) => return Err(format!("{path}: unexpected {name}")),
                            Value::Bool(true) => {}
                            sub => validate(sub, x, &format!("{path}.{name}"))?,
                        }
                    }
                }
            }
            "propertyNames" => {
                if let Some(o) = v.as_object() {
                    assert_eq!(
                        s["pattern"], "^[0-9]{1,3}$",
                        "only the digits pattern is supported"
                    );
                    for name in o.keys() {
                        if name.is_empty()
                            || name.len() > 3
                            || !name.bytes().all(|b| b.is_ascii_digit())
                        {
                            return Err(format!("{path}: bad key {name}"));
                        }
                    }
                }
            }
            "items" => {
                if let Some(a) = v.as_array() {
                    for (i, x) in a.iter().enumerate() {
                        validate(s, x, &format!("{path}[{i}]"))?;
                    }
                }
            }
            "minItems" => {
                if let Some(a) = v.as_array() {
                    if (a.len() as u64) < s.as_u64().unwrap() {
                        return Err(format!("{path}: too few items"));
                    }
                }
            }
            "minimum" => {
                if let Some(x) = v.as_f64() {
                    if x < s.as_f64().unwrap() {
                        return Err(format!("{path}: {x} below {s}"));
                    }
                }
            }
            "oneOf" => {
                let n = s
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|sub| validate(sub, v, path).is_ok())
                    .count();
                if n != 1 {
                    return Err(format!("{path}: {n} of oneOf match"));
                }
            }
            other => {
                return Err(format!(
                    "{path}: keyword {other} is not supported by this check"
                ))
            }
        }
    }
    Ok(())
}

fn schema() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schema/report-v1.schema.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn json_output_of_every_mode_validates_against_the_schema() {
    let schema = schema();
    let s = common::http1(common::Behaviour::Ok);
    for args in [
        vec!["-c", "2", "-d", "300ms", "--pipeline", "4"],
        vec!["-c", "2", "-R", "200", "-d", "300ms"],
        vec![
            "-c",
            "2",
            "--find-max",
            "--find-max-start",
            "100",
            "--find-max-steps",
            "2",
            "-d",
            "200ms",
        ],
    ] {
        let mut a = args.clone();
        let url = s.url();
        a.push(&url);
        let r = run(&a);
        assert_eq!(r.code, 0, "{}", r.stderr);
        validate(&schema, &r.json, "$").unwrap_or_else(|e| panic!("{args:?}: {e}"));
    }
    let (addr, _, stop) = udp_echo(1);
    let r = run(&["-c", "1", "-n", "10", &format!("udp://{addr}")]);
    validate(&schema, &r.json, "$").unwrap();
    stop.store(true, Ordering::Relaxed);
    // The validator does reject what the schema forbids.
    let mut bad = r.json.clone();
    bad["summary"]["requests"] = serde_json::json!(-1);
    assert!(validate(&schema, &bad, "$").is_err());
    bad = r.json.clone();
    bad["extra"] = serde_json::json!(1);
    assert!(validate(&schema, &bad, "$").is_err());
}

#[test]
fn html_report_is_self_contained_with_its_plots() {
    let s = common::http1(common::Behaviour::Ok);
    let path = std::env::temp_dir().join(format!(
        "gapura-loadtest-report-{}.html",
        std::process::id()
    ));
    let r = run(&[
        "-c",
        "2",
        "-d",
        "1200ms",
        "--report",
        path.to_str().unwrap(),
        &s.url(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let html = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(html.matches("<svg").count(), 3);
    assert!(
        html.contains("Latency by percentile")
            && html.contains("Throughput")
            && html.contains("p99 latency")
    );
    for fetch in ["<script", "<link", "src=", "@import", "url("] {
        assert!(!html.contains(fetch), "report holds {fetch}");
    }
}

#[test]
fn http3_requests_run_on_their_streams_over_quic() {
    use std::io::BufRead;
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = std::env::temp_dir().join(format!("gapura-loadtest-h3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/h3server.py");
    let mut server = std::process::Command::new("python3")
        .arg(script)
        .arg(&cert)
        .arg(&key)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the HTTP/3 server (aioquic)");
    let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port: u16 = line.trim().parse().expect("the server's port");
    let url = format!("https://localhost:{port}/");
    let r = run(&["--http3", "-k", "-c", "2", "-m", "4", "-n", "200", &url]);
    drop(server.stdin.take());
    line.clear();
    out.read_line(&mut line).unwrap();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 200);
    assert_eq!(r.json["config"]["protocol"], "http3");
    assert_eq!(r.json["status_counts"]["200"], 200, "{}", r.json);
    let seen: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(seen[0], 200, "the server answered every request: {line}");
    assert!(seen[1] >= 2, "streams ran at once on a connection: {line}");
}
