//! Upstreams over TLS through the real binary: a rustls upstream with a
//! certificate from the test's own authority, one that demands a client
//! certificate (mTLS), one whose certificate no configured authority
//! vouches for, and one whose certificate names someone else.

mod common;

use common::pki::{files, server_config, tls_server, Authority, TlsServer};
use common::*;
use rustls::ServerConfig;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A TLS upstream: answers every request on a connection with `200` and
/// the path it saw.
fn tls_upstream(config: ServerConfig) -> TlsServer {
    tls_server(
        config,
        Arc::new(|head: &str| {
            let path = head.split(' ').nth(1).unwrap_or("");
            let body = format!("tls upstream saw {path}");
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        }),
    )
}

/// One proxy host `app.test` routing to the upstream with `tls`.
fn tls_profile(addr: SocketAddr, tls: &str) -> String {
    profile(
        "",
        &format!(
            "[[upstream]]\nname = \"app\"\nservers = [\"{addr}\"]\nconnect_timeout_ms = 2000\nresponse_header_timeout_ms = 2000\n{tls}\n\n[[host]]\nnames = [\"app.test\"]\ndefault = true\nkind = \"proxy\"\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\n"
        ),
    )
}

fn get(g: &Gapura, path: &str) -> Response {
    request(
        g.addr,
        format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n\r\n").as_bytes(),
    )
}

const METRIC_WAIT: Duration = Duration::from_secs(10);

fn tls_failures(g: &Gapura, reason: &str, want: u64) -> u64 {
    g.wait_metric(
        &format!("gapura_upstream_tls_failures_total{{shard=\"0\",reason=\"{reason}\"}}"),
        want,
        METRIC_WAIT,
    )
}

#[test]
fn mutual_tls_to_an_upstream_that_demands_a_client_certificate_answers() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), Some(&ca)));
    let f = files(&ca);
    let g = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
            f.ca.display(),
            f.client_cert.display(),
            f.client_key.display()
        ),
    ));
    let r = get(&g, "/one");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /one"[..])
    );
    // The pooled connection stays TLS across requests: one handshake.
    let r = get(&g, "/two");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /two"[..])
    );
    assert_eq!(up.requests.load(Ordering::SeqCst), 2);
    assert_eq!(up.handshakes.load(Ordering::SeqCst), 1);
}

#[test]
fn without_its_client_certificate_the_same_upstream_does_not_answer() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), Some(&ca)));
    let f = files(&ca);
    let g = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    ));
    let r = get(&g, "/secret");
    assert_eq!(r.status, 502);
    assert!(!String::from_utf8_lossy(&r.body).contains("tls upstream saw"));
    assert_eq!(up.requests.load(Ordering::SeqCst), 0);
    // Over TLS 1.3 the refusal comes after the handshake: counted all the
    // same.
    assert_eq!(
        g.metric("gapura_upstream_tls_failures_total{shard=\"0\",reason=\"refused\"}"),
        1
    );
}

#[test]
fn an_upstream_no_configured_authority_vouches_for_gets_502_and_nothing_is_relayed() {
    let ours = Authority::new("test authority");
    let rogue = Authority::new("someone else");
    let (chain, key, _, _) = rogue.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), None));
    let f = files(&ours);
    let g = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    ));
    let r = get(&g, "/");
    assert_eq!(r.status, 502);
    // Its own words, and a log line naming the name it was checked for.
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("The upstream server's certificate was not accepted."),
        "{body}"
    );
    assert!(
        g.wait_log(
            &format!(
                "server {}: certificate not valid for name upstream.test",
                up.addr
            ),
            Duration::from_secs(5)
        ),
        "{}",
        g.log_text()
    );
    assert_eq!(tls_failures(&g, "tls_verify", 1), 1);
    assert_eq!(up.requests.load(Ordering::SeqCst), 0);
    // verify = false takes it (a lab), with the profile's warning.
    let lab = Gapura::start(&tls_profile(up.addr, "tls = { verify = false }"));
    let r = get(&lab, "/lab");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /lab"[..])
    );
}

#[test]
fn a_certificate_for_another_name_gets_502() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test", "127.0.0.1"]);
    let up = tls_upstream(server_config((chain, key), None));
    let f = files(&ca);
    let wrong = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"other.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    ));
    assert_eq!(get(&wrong, "/").status, 502);
    assert_eq!(tls_failures(&wrong, "tls_verify", 1), 1);
    // Without a server_name, the server's address is what the certificate
    // must name: this one names 127.0.0.1.
    let by_address = Gapura::start(&tls_profile(
        up.addr,
        &format!("tls = {{ ca_file = \"{}\" }}", f.ca.display()),
    ));
    let r = get(&by_address, "/ip");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /ip"[..])
    );
    assert_eq!(up.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn an_upstream_that_stalls_its_handshake_is_cut_off_at_the_connect_timeout() {
    // A server that accepts and never says a word: the handshake waits
    // for its ServerHello until the group's connect timeout (2 s here).
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    let g = Gapura::start(&tls_profile(addr, "tls = { verify = false }"));
    assert_eq!(get(&g, "/").status, 504);
    assert_eq!(tls_failures(&g, "timeout", 1), 1);
    assert_eq!(held.lock().unwrap().len(), 1);
}

#[test]
fn health_checks_go_over_the_groups_tls() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), Some(&ca)));
    let f = files(&ca);
    let g = Gapura::start(&tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}\n[upstream.health]\npath = \"/healthz\"\ninterval_ms = 200\ntimeout_ms = 150",
            f.ca.display(),
            f.client_cert.display(),
            f.client_key.display()
        ),
    ));
    // The check's request reaches the upstream that demands mTLS: it came
    // over the group's TLS with its client certificate.
    assert!(
        wait_until(Duration::from_secs(10), || up
            .heads
            .lock()
            .unwrap()
            .iter()
            .any(|h| h.starts_with("GET /healthz HTTP/1.1\r\n"))),
        "no health check reached the TLS upstream"
    );
    let r = get(&g, "/after");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls upstream saw /after"[..])
    );
}

#[test]
fn a_reload_that_changes_the_ca_file_retires_the_connections_made_under_the_old_one() {
    let ca = Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["upstream.test"]);
    let up = tls_upstream(server_config((chain, key), None));
    let f = files(&ca);
    let text = tls_profile(
        up.addr,
        &format!(
            "tls = {{ server_name = \"upstream.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    );
    let g = Gapura::start(&text);
    assert_eq!(get(&g, "/one").status, 200);
    assert_eq!(get(&g, "/two").status, 200);
    assert_eq!(up.handshakes.load(Ordering::SeqCst), 1, "pooled");
    // The authority is no longer trusted: its file now holds another one.
    std::fs::write(&f.ca, Authority::new("another authority").cert.pem()).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 2", Duration::from_secs(10)));
    let r = get(&g, "/three");
    assert_eq!(r.status, 502, "the pooled connection is not reused");
    assert_eq!(up.requests.load(Ordering::SeqCst), 2);
    // A reload that changes nothing keeps the pool.
    std::fs::write(&f.ca, ca.cert.pem()).unwrap();
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 3", Duration::from_secs(10)));
    assert_eq!(get(&g, "/four").status, 200);
    let handshakes = up.handshakes.load(Ordering::SeqCst);
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 4", Duration::from_secs(10)));
    assert_eq!(get(&g, "/five").status, 200);
    assert_eq!(up.handshakes.load(Ordering::SeqCst), handshakes, "reused");
}
