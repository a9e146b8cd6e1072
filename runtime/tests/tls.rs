//! TLS termination end to end: real handshakes against certificates made
//! in the test, SNI, versions, resumption across shards, certificate
//! reloads, and failed handshakes counted by reason.

mod common;

use common::tls::{client_config, write_cert, ClientOptions, TlsClient};
use common::{profile, Gapura, TempDir, HELLO_HOST};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n";

/// Two certificates (`a.example`, and `*.b.example`), written to `dir`;
/// the profile's text for them and their DER.
fn two_certs(dir: &TempDir) -> (String, Vec<u8>, Vec<u8>) {
    let (ca, ka, a) = write_cert(&dir.0, "a", &["a.example"]);
    let (cb, kb, b) = write_cert(&dir.0, "b", &["x.b.example"]);
    let text = format!(
        "[[certificate]]\nnames = [\"a.example\"]\ncert = {ca:?}\nkey = {ka:?}\n\
         [[certificate]]\nnames = [\"*.b.example\"]\ncert = {cb:?}\nkey = {kb:?}\n"
    );
    (text, a, b)
}

fn tls_profile(server_extra: &str, rest: &str) -> String {
    profile(server_extra, rest).replace(
        "listen = [\"127.0.0.1:0\"]",
        "listen = [\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true }]",
    )
}

#[test]
fn sni_picks_the_certificate_and_unknown_names_get_the_default() {
    let dir = TempDir::new();
    let (certs, a, b) = two_certs(&dir);
    let g = Gapura::start(&tls_profile("", &format!("{HELLO_HOST}{certs}")));
    let addr = g.tls_addr.expect("a TLS listener");
    let config = client_config(ClientOptions::default());
    for (sni, want) in [
        (Some("a.example"), &a),
        (Some("x.b.example"), &b),
        (Some("deep.x.b.example"), &b),
        (Some("unknown.example"), &a),
        (None, &a),
    ] {
        let mut c = TlsClient::connect(addr, sni, &config).unwrap();
        assert_eq!(&c.leaf(), want, "SNI {sni:?}");
        assert_eq!(c.alpn(), None, "no ALPN offered, none chosen");
        // Requests flow over the session, kept alive.
        for _ in 0..2 {
            let r = c.request(GET);
            assert_eq!((r.status, &r.body[..]), (200, &b"hello\n"[..]));
        }
    }
    assert_eq!(
        g.wait_metric(
            "gapura_tls_handshakes_total{shard=\"0\"}",
            5,
            Duration::from_secs(5)
        ),
        5
    );
    assert_eq!(g.metric("gapura_tls_sni_default_total{shard=\"0\"}"), 1);
    assert_eq!(g.metric("gapura_tls_no_sni_total{shard=\"0\"}"), 1);
    // The plain listener still speaks plain HTTP.
    assert_eq!(common::request(g.addr, GET).status, 200);
}

#[test]
fn alpn_and_versions() {
    let dir = TempDir::new();
    let (certs, _, _) = two_certs(&dir);
    let g = Gapura::start(&tls_profile("", &format!("{HELLO_HOST}{certs}")));
    let addr = g.tls_addr.unwrap();
    let h1 = client_config(ClientOptions {
        alpn: &[b"http/1.1"],
        ..Default::default()
    });
    let c = TlsClient::connect(addr, Some("a.example"), &h1).unwrap();
    assert_eq!(c.alpn().as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(c.version(), rustls::ProtocolVersion::TLSv1_3);
    let v12 = client_config(ClientOptions {
        tls12_only: true,
        ..Default::default()
    });
    let mut c = TlsClient::connect(addr, Some("a.example"), &v12).unwrap();
    assert_eq!(c.version(), rustls::ProtocolVersion::TLSv1_2);
    assert_eq!(c.request(GET).status, 200);
    // Only protocols we do not speak: the handshake fails, counted.
    let other = client_config(ClientOptions {
        alpn: &[b"spdy/3"],
        ..Default::default()
    });
    assert!(TlsClient::connect(addr, Some("a.example"), &other).is_err());
    g.wait_metric(
        "gapura_tls_handshake_failures_total{shard=\"0\",reason=\"alpn\"}",
        1,
        Duration::from_secs(5),
    );
    assert_eq!(
        g.metric("gapura_tls_handshakes_tls12_total{shard=\"0\"}"),
        1
    );
}

#[test]
fn a_tls13_floor_refuses_tls12_clients() {
    let dir = TempDir::new();
    let (certs, _, _) = two_certs(&dir);
    let rest = format!("{HELLO_HOST}[tls]\nmin_version = \"1.3\"\n{certs}");
    let g = Gapura::start(&tls_profile("", &rest));
    let addr = g.tls_addr.unwrap();
    let v12 = client_config(ClientOptions {
        tls12_only: true,
        ..Default::default()
    });
    assert!(TlsClient::connect(addr, Some("a.example"), &v12).is_err());
    assert_eq!(
        g.wait_metric(
            "gapura_tls_handshake_failures_total{shard=\"0\",reason=\"protocol_version\"}",
            1,
            Duration::from_secs(5)
        ),
        1
    );
    let v13 = client_config(ClientOptions::default());
    let c = TlsClient::connect(addr, Some("a.example"), &v13).unwrap();
    assert_eq!(c.version(), rustls::ProtocolVersion::TLSv1_3);
}

/// A connection from `src` (127.0.0.0/8), so steering puts it on the
/// shard its address picks.
fn tls_from(
    src: &str,
    addr: std::net::SocketAddr,
    config: &std::sync::Arc<rustls::ClientConfig>,
) -> TlsClient {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = format!("{src}:0").parse().unwrap();
    sock.bind(&local.into()).unwrap();
    sock.connect(&addr.into()).unwrap();
    TlsClient::over(sock.into(), Some("a.example"), config).unwrap()
}

#[test]
fn sessions_resume_on_another_shard() {
    let dir = TempDir::new();
    let (certs, _, _) = two_certs(&dir);
    let server = "shards = 2\nsteering = \"source\"\n";
    let g = Gapura::start(
        &tls_profile(server, &format!("{HELLO_HOST}{certs}")).replace("shards = 1\n", ""),
    );
    let addr = g.tls_addr.unwrap();
    for tls12 in [false, true] {
        let config = client_config(ClientOptions {
            tls12_only: tls12,
            ..Default::default()
        });
        // 127.0.0.2 and 127.0.0.3 steer to different shards (source mod 2).
        let mut first = tls_from("127.0.0.2", addr, &config);
        assert!(!first.resumed());
        // The request lets the client read the tickets sent after the handshake.
        assert_eq!(first.request(GET).status, 200);
        let mut second = tls_from("127.0.0.3", addr, &config);
        assert!(
            second.resumed(),
            "resumed on the other shard (TLS 1.2 only: {tls12})"
        );
        assert_eq!(second.request(GET).status, 200);
    }
    let resumed = |shard: u32| g.metric(&format!("gapura_tls_resumed_total{{shard=\"{shard}\"}}"));
    assert!(common::wait_until(Duration::from_secs(5), || resumed(0)
        + resumed(1)
        == 2));
    let handshakes =
        |shard: u32| g.metric(&format!("gapura_tls_handshakes_total{{shard=\"{shard}\"}}"));
    assert_eq!(
        (handshakes(0), handshakes(1)),
        (2, 2),
        "each shard saw one of each pair"
    );
    assert_eq!(
        resumed(0) * resumed(1),
        0,
        "resumptions all on one shard: the second address's"
    );
}

#[test]
fn a_reload_serves_new_certificates_to_new_handshakes_only() {
    let dir = TempDir::new();
    let (ca, ka, old) = write_cert(&dir.0, "a", &["a.example"]);
    let certs = format!("[[certificate]]\nnames = [\"a.example\"]\ncert = {ca:?}\nkey = {ka:?}\n");
    let g = Gapura::start(&tls_profile("", &format!("{HELLO_HOST}{certs}")));
    let addr = g.tls_addr.unwrap();
    let config = client_config(ClientOptions::default());
    let mut open = TlsClient::connect(addr, Some("a.example"), &config).unwrap();
    assert_eq!(open.leaf(), old);
    assert_eq!(open.request(GET).status, 200);
    // New files in place of the old ones, then SIGHUP.
    let (_, _, new) = write_cert(&dir.0, "a", &["a.example"]);
    assert_ne!(new, old);
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 2", Duration::from_secs(10)));
    let fresh = TlsClient::connect(
        addr,
        Some("a.example"),
        &client_config(ClientOptions::default()),
    )
    .unwrap();
    assert_eq!(
        fresh.leaf(),
        new,
        "a new handshake gets the new certificate"
    );
    // The open connection goes on with the keys it agreed.
    assert_eq!(open.request(GET).status, 200);
    // A broken pair fails the reload: the running certificate stays.
    std::fs::write(&ka, "not a key").unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log(
        "reload failed; still serving generation 2",
        Duration::from_secs(10)
    ));
    assert!(g.log_text().contains("certificate.key.unreadable"));
    let after = TlsClient::connect(
        addr,
        Some("a.example"),
        &client_config(ClientOptions::default()),
    )
    .unwrap();
    assert_eq!(after.leaf(), new);
}

#[test]
fn a_broken_pair_fails_the_profile_naming_the_file() {
    let dir = TempDir::new();
    let (ca, _, _) = write_cert(&dir.0, "a", &["a.example"]);
    let (_, kb, _) = write_cert(&dir.0, "b", &["b.example"]);
    let certs = format!("[[certificate]]\nnames = [\"a.example\"]\ncert = {ca:?}\nkey = {kb:?}\n");
    let err = Gapura::try_start(&tls_profile("", &format!("{HELLO_HOST}{certs}")), &[])
        .err()
        .expect("the profile is refused");
    assert!(
        err.contains("error[certificate.key.mismatch] certificate[0].key"),
        "{err}"
    );
    assert!(err.contains("b.key"), "{err}");
}

#[test]
fn a_private_key_others_can_read_is_refused() {
    let dir = TempDir::new();
    let (cert, key, _) = write_cert(&dir.0, "a", &["a.example"]);
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let certs =
        format!("[[certificate]]\nnames = [\"a.example\"]\ncert = {cert:?}\nkey = {key:?}\n");
    let err = Gapura::try_start(&tls_profile("", &format!("{HELLO_HOST}{certs}")), &[])
        .err()
        .expect("the profile is refused");
    assert!(
        err.contains("error[certificate.key.unreadable] certificate[0].key"),
        "{err}"
    );
    assert!(
        err.contains("mode 0644") && err.contains("chmod 600"),
        "{err}"
    );
}

#[test]
fn failed_handshakes_are_counted_by_reason() {
    let dir = TempDir::new();
    let (certs, _, _) = two_certs(&dir);
    let rest = format!("{HELLO_HOST}[tls]\nhandshake_timeout_ms = 300\n{certs}");
    let g = Gapura::start(&tls_profile("", &rest));
    let addr = g.tls_addr.unwrap();
    // Plain HTTP to the TLS port: not a TLS record.
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.write_all(GET).unwrap();
    // Silence: the handshake times out.
    let _silent = TcpStream::connect(addr).unwrap();
    // A client that leaves before finishing.
    drop(TcpStream::connect(addr).unwrap());
    for reason in ["bad_record", "timeout", "closed"] {
        let sample =
            format!("gapura_tls_handshake_failures_total{{shard=\"0\",reason=\"{reason}\"}}");
        assert_eq!(
            g.wait_metric(&sample, 1, Duration::from_secs(5)),
            1,
            "{reason}"
        );
    }
    assert_eq!(g.metric("gapura_tls_handshakes_total{shard=\"0\"}"), 0);
    // Each of them was a connection, and each is closed.
    assert!(common::wait_until(Duration::from_secs(5), || {
        g.metric("gapura_connections_open{shard=\"0\"}") == 0
    }));
}

/// A proxy host behind TLS with the HTTPS redirect and HSTS, and a fixed
/// host with them; the upstream echoes.
fn https_hosts(upstream: std::net::SocketAddr) -> String {
    format!(
        r#"
[[upstream]]
name = "app"
servers = ["{upstream}"]

[[host]]
names = ["app.example"]
kind = "proxy"
https_redirect = true
hsts = {{ max_age_s = 600, include_subdomains = true }}
  [[host.route]]
  path = "/"
  upstream = "app"
  websocket = true

[[host]]
names = ["site.example"]
kind = "respond"
status = 200
body = "site\n"
https_redirect = true
https_port = 8443
hsts = {{}}
"#
    )
}

#[test]
fn plaintext_is_redirected_and_tls_answers_carry_hsts_and_the_scheme() {
    let dir = TempDir::new();
    let (ca, ka, _) = write_cert(&dir.0, "app", &["app.example"]);
    let up = common::upstream::echo();
    let rest = format!(
        "{}[[certificate]]\nnames = [\"app.example\", \"site.example\"]\ncert = {ca:?}\nkey = {ka:?}\n",
        https_hosts(up.addr)
    );
    let g = Gapura::start(&tls_profile("", &rest));
    // Plaintext: 308 to https, target kept, port named when not 443.
    let r = common::request(
        g.addr,
        b"GET /a/b?c=1 HTTP/1.1\r\nHost: APP.example:8080\r\n\r\n",
    );
    assert_eq!(r.status, 308);
    assert_eq!(r.header("location"), Some("https://APP.example/a/b?c=1"));
    assert_eq!(
        r.header("strict-transport-security"),
        None,
        "never over plaintext"
    );
    let r = common::request(g.addr, b"GET /x HTTP/1.1\r\nHost: site.example\r\n\r\n");
    assert_eq!(r.header("location"), Some("https://site.example:8443/x"));
    assert!(
        up.requests.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
    // Over TLS: proxied, with the scheme told upstream and HSTS added.
    let config = client_config(ClientOptions::default());
    let mut c = TlsClient::connect(g.tls_addr.unwrap(), Some("app.example"), &config).unwrap();
    let body = vec![b'x'; 100_000];
    let mut req = format!(
        "POST /upload HTTP/1.1\r\nHost: app.example\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let r = c.request(&req);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body, "the body streamed both ways");
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=600; includeSubDomains")
    );
    let seen = up.requests.lock().unwrap()[0].clone();
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
    // A fixed answer over TLS carries the default max-age.
    let mut s = TlsClient::connect(g.tls_addr.unwrap(), Some("site.example"), &config).unwrap();
    let r = s.request(b"GET / HTTP/1.1\r\nHost: site.example\r\n\r\n");
    assert_eq!((r.status, &r.body[..]), (200, &b"site\n"[..]));
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=31536000")
    );
}

#[test]
fn a_websocket_tunnel_runs_over_tls() {
    let dir = TempDir::new();
    let (ca, ka, _) = write_cert(&dir.0, "app", &["app.example"]);
    let up = common::upstream::upgrading_echo();
    let rest = format!(
        "{}[[certificate]]\nnames = [\"app.example\"]\ncert = {ca:?}\nkey = {ka:?}\n",
        https_hosts(up.addr)
    );
    let g = Gapura::start(&tls_profile("", &rest));
    let config = client_config(ClientOptions::default());
    let mut c = TlsClient::connect(g.tls_addr.unwrap(), Some("app.example"), &config).unwrap();
    let r = c.request(
        b"GET /ws HTTP/1.1\r\nHost: app.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    assert_eq!(r.status, 101);
    for message in [&b"ping"[..], &[7u8; 40_000][..]] {
        c.send(message);
        let mut got = Vec::new();
        while got.len() < message.len() {
            let mut tmp = [0u8; 16384];
            let n = std::io::Read::read(&mut c.tls, &mut tmp).unwrap();
            assert!(n > 0, "the tunnel stays open");
            got.extend_from_slice(&tmp[..n]);
        }
        assert_eq!(got, message);
    }
}

#[test]
fn the_ocsp_response_is_stapled() {
    let dir = TempDir::new();
    let (ca, ka, _) = write_cert(&dir.0, "a", &["a.example"]);
    let ocsp = dir.0.join("a.ocsp");
    std::fs::write(&ocsp, b"\x30\x03\x0a\x01\x00").unwrap();
    let certs = format!(
        "[[certificate]]\nnames = [\"a.example\"]\ncert = {ca:?}\nkey = {ka:?}\nocsp = {ocsp:?}\n"
    );
    let g = Gapura::start(&tls_profile("", &format!("{HELLO_HOST}{certs}")));
    for tls12 in [false, true] {
        let (config, stapled) = common::tls::client_config_keeping_ocsp(ClientOptions {
            tls12_only: tls12,
            ..Default::default()
        });
        let mut c = TlsClient::connect(g.tls_addr.unwrap(), Some("a.example"), &config).unwrap();
        assert_eq!(c.request(GET).status, 200);
        assert_eq!(
            *stapled.lock().unwrap(),
            b"\x30\x03\x0a\x01\x00",
            "TLS 1.2 only: {tls12}"
        );
    }
}
