//! Automatic certificates end to end against a real ACME server (Debian's
//! pebble): the first certificate by each challenge type, answered by
//! Gapura itself; a certificate due for renewal renewed with the CA down
//! first (the old one served, a clear log line, backoff) and then up, with
//! a connection open across it; HTTP-01 answered before the chain, and
//! only for tokens in flight; three nodes through one Redis ordering the
//! name once, the one the authority reaches serving another's answers.

mod common;

use common::acme::{free_port, verifying_client, PebblePlan};
use common::tls::{client_config, ClientOptions, TlsClient};
use common::{profile, request, Gapura, TempDir};
use std::time::Duration;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";

/// A profile serving `a.test` on a plain listener at `http` and a TLS one
/// at `tls`, its certificate from ACME at `directory` with `challenges`;
/// the host redirects plaintext to HTTPS (so an HTTP-01 answer must come
/// before the chain).
fn acme_profile(ports: (u16, u16), plan: &PebblePlan, state: &TempDir, challenges: &str) -> String {
    fleet_profile(ports, plan, state, challenges, "")
}

/// [`acme_profile`] with `extra` lines in `[acme]` (and after it).
fn fleet_profile(
    ports: (u16, u16),
    plan: &PebblePlan,
    state: &TempDir,
    challenges: &str,
    extra: &str,
) -> String {
    let (http, tls) = ports;
    let text = profile(
        "",
        &format!(
            r#"
[[host]]
names = ["a.test"]
default = true
kind = "respond"
status = 200
body = "served\n"
https_redirect = true

[acme]
directory = "{dir}"
contact = ["mailto:ops@a.test"]
state_dir = "{state}"
challenges = {challenges}
ca_file = "{ca}"
{extra}
[[certificate]]
names = ["a.test"]
acme = true
"#,
            dir = plan.directory(),
            state = state.0.join("acme").display(),
            ca = plan.ca_file.display(),
        ),
    );
    text.replace(
        "listen = [\"127.0.0.1:0\"]",
        &format!("listen = [\"127.0.0.1:{http}\", {{ addr = \"127.0.0.1:{tls}\", tls = true }}]"),
    )
}

/// Waits for the ACME thread to publish a certificate (`n` in all).
fn wait_issued(g: &Gapura, n: u64) {
    let got = g.wait_metric(
        "gapura_acme_certificate_issued_total{name=\"a.test\"}",
        n,
        Duration::from_secs(60),
    );
    assert_eq!(got, n, "issued; log:\n{}", g.log_text());
    assert!(
        g.wait_log(
            "acme: serving the new certificate for a.test",
            Duration::from_secs(5)
        ),
        "{}",
        g.log_text()
    );
}

/// A request to `a.test` over TLS that verifies the chain under `root`.
fn verified_request(g: &Gapura, root: &[u8]) -> Vec<u8> {
    let config = verifying_client(root);
    let mut c = TlsClient::connect(g.tls_addr.unwrap(), Some("a.test"), &config)
        .expect("a handshake that verifies under pebble's root");
    let r = c.request(GET);
    assert_eq!((r.status, &r.body[..]), (200, &b"served\n"[..]));
    c.leaf()
}

fn first_certificate(challenges: &str) {
    let (http, tls) = (free_port(), free_port());
    let plan = PebblePlan::new();
    let state = TempDir::new();
    let text = acme_profile((http, tls), &plan, &state, challenges);
    let pebble = plan.start(http, tls, 30);
    let g = Gapura::start(&text);
    wait_issued(&g, 1);
    let root = pebble.root();
    let leaf = verified_request(&g, &root);
    // Stored with its key readable by the owner only.
    let key = state.0.join("acme/certificates/a.test.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(g.metric("gapura_acme_requests_total") >= 8);
    assert!(g.metric("gapura_acme_certificate_not_after_seconds{name=\"a.test\"}") > 0);
    // A restart serves the stored certificate and orders nothing.
    drop(g);
    // The ring's teardown lets the listeners go a moment after the exit.
    for port in [http, tls] {
        assert!(common::wait_until(Duration::from_secs(10), || {
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        }));
    }
    let g = Gapura::start(&text);
    assert_eq!(verified_request(&g, &root), leaf);
    // The thread's first turn reads the directory for renewal information
    // (pebble offers none), and orders nothing.
    assert_eq!(
        g.wait_metric("gapura_acme_requests_total", 1, Duration::from_secs(10)),
        1,
        "{}",
        g.log_text()
    );
    assert_eq!(
        g.metric("gapura_acme_certificate_issued_total{name=\"a.test\"}"),
        0
    );
}

#[test]
fn http_01_obtains_a_certificate_that_verifies_under_the_cas_root() {
    first_certificate(r#"["http-01"]"#);
}

#[test]
fn tls_alpn_01_obtains_a_certificate_that_verifies_under_the_cas_root() {
    first_certificate(r#"["tls-alpn-01"]"#);
}

/// Writes a certificate for `a.test` into the state directory, from an
/// authority of the test's, valid from two years ago to the next new
/// year: past two thirds of its life, so due for renewal at once.
fn write_due_certificate(state: &TempDir) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let year = 1970 + (now / 31_556_952) as i32;
    let ca = common::pki::Authority::new("old issuer");
    let mut p = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
    p.not_before = rcgen::date_time_ymd(year - 2, 1, 1);
    p.not_after = rcgen::date_time_ymd(year + 1, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();
    let dir = state.0.join("acme/certificates");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.test.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("a.test.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("a.test.names"), "a.test\n").unwrap();
    cert.der().to_vec()
}

#[test]
fn a_due_certificate_is_served_while_the_ca_is_down_and_renewed_once_it_is_up() {
    let (http, tls) = (free_port(), free_port());
    let plan = PebblePlan::new();
    let state = TempDir::new();
    let old = write_due_certificate(&state);
    let text = acme_profile((http, tls), &plan, &state, r#"["tls-alpn-01", "http-01"]"#);
    let g = Gapura::start(&text);
    // The CA is down: the order fails, is logged, and the old
    // certificate is served meanwhile.
    assert!(
        g.wait_log(
            "acme: order for a.test failed (1 in a row)",
            Duration::from_secs(20)
        ),
        "{}",
        g.log_text()
    );
    assert!(g.log_text().contains("serving the current certificate"));
    let any = client_config(ClientOptions::default());
    let mut open = TlsClient::connect(g.tls_addr.unwrap(), Some("a.test"), &any).unwrap();
    assert_eq!(open.leaf(), old);
    assert_eq!(open.request(GET).status, 200);
    // The CA comes up: the next attempt (after a backoff of 2.5 to 5 s)
    // renews, and the connection opened before goes on.
    let pebble = plan.start(http, tls, 0);
    wait_issued(&g, 1);
    assert_eq!(
        open.request(GET).status,
        200,
        "the open connection survives"
    );
    let fresh = verified_request(&g, &pebble.root());
    assert_ne!(fresh, old);
    assert!(g.metric("gapura_acme_orders_failed_total") >= 1);
}

#[test]
fn only_tokens_in_flight_are_answered_and_a_pending_name_refuses_handshakes() {
    let (http, tls) = (free_port(), free_port());
    let plan = PebblePlan::new();
    let state = TempDir::new();
    let text = acme_profile((http, tls), &plan, &state, r#"["http-01"]"#);
    // No CA: nothing is ever issued.
    let g = Gapura::start(&text);
    let addr = g.addr;
    let r = request(
        addr,
        b"GET /.well-known/acme-challenge/made-up HTTP/1.1\r\nHost: a.test\r\n\r\n",
    );
    assert_eq!(
        r.status, 308,
        "a token not in flight goes through the chain"
    );
    let any = client_config(ClientOptions::default());
    assert!(
        TlsClient::connect(g.tls_addr.unwrap(), Some("a.test"), &any).is_err(),
        "no certificate yet: the handshake fails"
    );
    // An acme-tls/1 handshake with no challenge in flight gets nothing.
    let alpn = client_config(ClientOptions {
        alpn: &[b"acme-tls/1"],
        ..ClientOptions::default()
    });
    assert!(TlsClient::connect(g.tls_addr.unwrap(), Some("a.test"), &alpn).is_err());
}

#[test]
fn three_nodes_through_one_redis_order_the_name_once_and_serve_it_all() {
    let redis = gapura_fleet::testing::RedisServer::start();
    let plan = PebblePlan::new();
    let shared = TempDir::new();
    let key = shared.0.join("acme.key");
    std::fs::write(&key, "a secret every node of this fleet has, 48 chars\n").unwrap();
    // The authority reaches only node a (its ports are pebble's); b and
    // c start first, so whichever orders, a must serve its answers.
    let ports = [
        (free_port(), free_port()),
        (free_port(), free_port()),
        (free_port(), free_port()),
    ];
    let states = [TempDir::new(), TempDir::new(), TempDir::new()];
    let text = |i: usize, node: &str| {
        fleet_profile(
            ports[i],
            &plan,
            &states[i],
            r#"["http-01"]"#,
            &format!(
                "shared_key_file = {key:?}\n\n[fleet]\nredis = \"{}\"\nnodes_expected = 3\nnode = \"{node}\"\nkey_file = {:?}\n",
                redis.url(),
                common::fleet::key_file()
            ),
        )
    };
    let profiles = [text(0, "a"), text(1, "b"), text(2, "c")];
    let pebble = plan.start(ports[0].0, ports[0].1, 0);
    let b = Gapura::start(&profiles[1]);
    let c = Gapura::start(&profiles[2]);
    let a = Gapura::start(&profiles[0]);
    let root = pebble.root();
    let config = verifying_client(&root);
    let mut leaves = Vec::new();
    for g in [&a, &b, &c] {
        let mut leaf = None;
        let served = common::wait_until(Duration::from_secs(60), || {
            match TlsClient::connect(g.tls_addr.unwrap(), Some("a.test"), &config) {
                Ok(mut t) => {
                    assert_eq!(t.request(GET).status, 200);
                    leaf = Some(t.leaf());
                    true
                }
                Err(_) => false,
            }
        });
        assert!(
            served,
            "a node serves the fleet's certificate; log:\n{}",
            g.log_text()
        );
        leaves.push(leaf.unwrap());
    }
    assert!(
        leaves.iter().all(|l| *l == leaves[0]),
        "one certificate for the fleet"
    );
    let ordered: u64 = [&a, &b, &c]
        .iter()
        .map(|g| g.metric("gapura_acme_certificate_issued_total{name=\"a.test\"}"))
        .sum();
    assert_eq!(
        ordered,
        1,
        "ordered once:\n{}\n{}\n{}",
        a.log_text(),
        b.log_text(),
        c.log_text()
    );
    let took = [&a, &b, &c]
        .iter()
        .filter(|g| {
            g.log_text()
                .contains("took the fleet's certificate for a.test")
        })
        .count();
    assert_eq!(took, 2);
}

/// An `ask` endpoint: 200 for `allowed`, 403 for any other name; every
/// name it was asked about, in order.
fn ask_server(allowed: &'static str) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 2048];
            let n = c.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let name = head
                .split("domain=")
                .nth(1)
                .and_then(|r| r.split([' ', '&']).next())
                .unwrap_or("")
                .to_string();
            let status = if name == allowed {
                "200 OK"
            } else {
                "403 Forbidden"
            };
            seen.lock().unwrap().push(name);
            let _ = c.write_all(
                format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    (port, asked)
}

#[test]
fn on_demand_orders_a_name_the_ask_endpoint_allows_and_never_another() {
    let (http, tls) = (free_port(), free_port());
    let plan = PebblePlan::new();
    let state = TempDir::new();
    let (ask, asked) = ask_server("b.test");
    let text = fleet_profile(
        (http, tls),
        &plan,
        &state,
        r#"["tls-alpn-01"]"#,
        &format!("on_demand = {{ ask = \"http://127.0.0.1:{ask}/check\", rate = \"5/minute\" }}\n"),
    );
    let pebble = plan.start(http, tls, 0);
    let g = Gapura::start(&text);
    let config = verifying_client(&pebble.root());
    let any = client_config(ClientOptions::default());
    let addr = g.tls_addr.unwrap();
    // b.test: its first handshake asks; a later one is served its own
    // certificate.
    let served = common::wait_until(Duration::from_secs(60), || {
        TlsClient::connect(addr, Some("b.test"), &config)
            .is_ok_and(|mut c| c.request(b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n").status == 200)
    });
    assert!(served, "{}", g.log_text());
    // evil.test: refused by ask, asked once however often it comes, and
    // never given a certificate of its own.
    for _ in 0..5 {
        let _ = TlsClient::connect(addr, Some("evil.test"), &any);
    }
    assert!(g.wait_log(
        "acme: on demand: ask refused evil.test",
        Duration::from_secs(10)
    ));
    for _ in 0..5 {
        let _ = TlsClient::connect(addr, Some("evil.test"), &any);
    }
    // A name after them: once it is asked about, the thread has taken
    // every evil.test handed over before it (one queue, in order).
    let _ = TlsClient::connect(addr, Some("late.test"), &any);
    assert!(common::wait_until(Duration::from_secs(10), || asked
        .lock()
        .unwrap()
        .iter()
        .any(|n| n == "late.test")));
    let asked = asked.lock().unwrap().clone();
    assert_eq!(
        asked.iter().filter(|n| *n == "evil.test").count(),
        1,
        "{asked:?}"
    );
    assert_eq!(
        asked.iter().filter(|n| *n == "b.test").count(),
        1,
        "{asked:?}"
    );
    assert!(TlsClient::connect(addr, Some("evil.test"), &config).is_err());
    assert!(!state.0.join("acme/certificates/evil.test.crt").exists());
    // A restart serves b.test from the state directory, asking nothing.
    drop(g);
    for port in [http, tls] {
        assert!(common::wait_until(Duration::from_secs(10), || {
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        }));
    }
    let g = Gapura::start(&text);
    let mut c = TlsClient::connect(g.tls_addr.unwrap(), Some("b.test"), &config)
        .expect("b.test served after a restart");
    assert_eq!(
        c.request(b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n").status,
        200
    );
}

/// `gapura doctor --json` on `profile`: its `acme.*` findings (id, level).
fn doctor_acme(profile: &str) -> Vec<(String, String, String)> {
    let dir = TempDir::new();
    let path = dir.0.join("profile.toml");
    std::fs::write(&path, profile).unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["doctor", "--json", "--profile"])
        .arg(&path)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"].as_str().unwrap().starts_with("acme."))
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap().to_string();
            (s("id"), s("level"), s("found"))
        })
        .collect()
}

#[test]
fn doctor_reads_the_directory_compares_clocks_and_names_the_challenges_ports() {
    let (http, tls) = (free_port(), free_port());
    let plan = PebblePlan::new();
    let state = TempDir::new();
    let text = acme_profile((http, tls), &plan, &state, r#"["tls-alpn-01", "http-01"]"#);
    // The authority down: the directory fails.
    let down = doctor_acme(&text);
    assert_eq!(down[0].0, "acme.directory");
    assert_eq!(down[0].1, "fail", "{down:?}");
    // Up: a directory, the clocks agree; neither port is 80 or 443.
    let _pebble = plan.start(http, tls, 0);
    let up = doctor_acme(&text);
    assert_eq!(up[0].1, "ok", "{up:?}");
    assert!(up[0].2.contains("an ACME directory"), "{up:?}");
    assert_eq!(up[1].0, "acme.ports");
    assert_eq!(up[1].1, "warn", "{up:?}");
    assert!(
        up[1].2.contains("port 443") && up[1].2.contains("port 80"),
        "{up:?}"
    );
    assert!(!state.0.join("acme").exists(), "doctor writes nothing");
}
