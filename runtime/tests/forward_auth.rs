//! Forward-auth through the real binary against a real auth endpoint (it
//! allows one token, refuses others, counts its calls, can be slowed or
//! gone) and an upstream that records the headers it sees.

mod common;

use common::gate::{explain_json, explain_steps, req_with, ProfileFile};
use common::pki;
use common::upstream::{self, Reply, UpRequest, Upstream};
use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const GOOD: &str = "Authorization: Bearer good";

/// What a held endpoint's calls wait for: released by the test (a call
/// answers at the latest after 30 s), counted while they wait.
#[derive(Default)]
struct Latch {
    in_flight: AtomicUsize,
    open: Mutex<bool>,
    opened: Condvar,
}

impl Latch {
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let open = self.open.lock().unwrap();
        let _ = self
            .opened
            .wait_timeout_while(open, Duration::from_secs(30), |open| !*open);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The endpoint: `Bearer good` is ana of ops; anything else 401 with a
/// challenge and a body. `held`: each call waits until the latch is
/// released.
fn auth_endpoint(held: bool) -> (Upstream, Arc<Latch>) {
    let latch = Arc::new(Latch::default());
    if !held {
        latch.release();
    }
    let l = latch.clone();
    let up = upstream::start(Arc::new(move |req: &UpRequest| {
        l.wait();
        if req.header("authorization") == Some("Bearer good") {
            Reply::Bytes(
                b"HTTP/1.1 200 OK\r\nRemote-User: ana\r\nRemote-Groups: ops\r\nRemote-Name: Jos\xc3\xa9\r\nX-Other: no\r\nContent-Length: 0\r\n\r\n".to_vec(),
            )
        } else {
            Reply::Bytes(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"sso\"\r\nSet-Cookie: tried=1\r\nX-Secret: no\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\nsign in now\n".to_vec(),
            )
        }
    }));
    (up, latch)
}

fn recording_upstream() -> Upstream {
    upstream::start(Arc::new(|_req: &UpRequest| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nup\n".to_vec())
    }))
}

fn auth_profile(
    endpoint: std::net::SocketAddr,
    up: std::net::SocketAddr,
    provider_extra: &str,
) -> String {
    auth_profile_at(&format!("http://{endpoint}/api/verify"), up, provider_extra)
}

/// [`auth_profile`] with the provider's `url` as written.
fn auth_profile_at(url: &str, up: std::net::SocketAddr, provider_extra: &str) -> String {
    profile(
        "",
        &format!(
            r#"
[[auth_provider]]
name = "sso"
url = "{url}"
preset = "authelia"
{provider_extra}

[[upstream]]
name = "app"
servers = ["{up}"]

[[host]]
names = ["f.test"]
default = true
kind = "proxy"
auth = "sso"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/public"
  upstream = "app"
  auth = false
"#
        ),
    )
}

fn saw(u: &Upstream, i: usize) -> UpRequest {
    u.requests.lock().unwrap()[i].clone()
}

#[test]
fn an_allow_passes_with_the_providers_identity_and_is_remembered() {
    let ep = auth_endpoint(false).0;
    let up = recording_upstream();
    let g = Gapura::start(&auth_profile(ep.addr, up.addr, ""));
    let forged = "Remote-User: mallory";
    let folded = "remote_groups: admins";
    let r = request(
        g.addr,
        &req_with(
            "GET",
            "f.test",
            "/app?x=%2F",
            &[GOOD, forged, folded, "X-Random: r", "Accept: */*"],
        ),
    );
    assert_eq!(r.status, 200);
    // What the provider was told.
    let call = saw(&ep, 0);
    assert_eq!(call.method, "GET");
    assert_eq!(call.target, "/api/verify");
    assert_eq!(call.header("x-forwarded-method"), Some("GET"));
    assert_eq!(call.header("x-forwarded-uri"), Some("/app?x=%2F"));
    assert_eq!(call.header("x-forwarded-host"), Some("f.test"));
    assert_eq!(call.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(call.header("authorization"), Some("Bearer good"));
    assert_eq!(call.header("accept"), Some("*/*"));
    assert_eq!(
        call.header("x-random"),
        None,
        "only the listed headers are sent"
    );
    // What the upstream saw: the provider's identity, never the client's.
    let seen = saw(&up, 0);
    assert_eq!(seen.header("remote-user"), Some("ana"));
    assert_eq!(seen.header("remote-groups"), Some("ops"));
    assert!(!seen.raw_head.contains("mallory") && !seen.raw_head.contains("admins"));
    assert_eq!(
        seen.header("remote-name"),
        Some("Jos\u{e9}"),
        "UTF-8 passes as sent"
    );
    assert_eq!(seen.header("x-other"), None, "not a copied header");
    assert_eq!(
        seen.header("authorization"),
        Some("Bearer good"),
        "credentials pass as sent"
    );
    // The same request again: remembered, no call.
    let r = request(
        g.addr,
        &req_with("GET", "f.test", "/app?x=%2F", &[GOOD, "Accept: */*"]),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        ep.requests.lock().unwrap().len(),
        1,
        "the allow is remembered"
    );
    assert_eq!(saw(&up, 1).header("remote-user"), Some("ana"));
    // Another target is another entry under Authelia's request scope.
    assert_eq!(
        request(g.addr, &req_with("GET", "f.test", "/other", &[GOOD])).status,
        200
    );
    assert_eq!(ep.requests.lock().unwrap().len(), 2);
    let sample = |r: &str| format!("gapura_auth_provider_total{{provider=\"sso\",result=\"{r}\"}}");
    assert_eq!(
        common::gate::wait_sample(&g, &sample("cache_hit"), 1, Duration::from_secs(5)),
        1
    );
    assert_eq!(
        common::gate::wait_sample(&g, &sample("allowed"), 2, Duration::from_secs(5)),
        2
    );
}

#[test]
fn a_refusal_is_relayed_and_client_identity_is_stripped_host_wide() {
    let ep = auth_endpoint(false).0;
    let up = recording_upstream();
    let g = Gapura::start(&auth_profile(ep.addr, up.addr, ""));
    let r = request(
        g.addr,
        &req_with("GET", "f.test", "/app", &["Authorization: Bearer bad"]),
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("WWW-Authenticate"), Some("Bearer realm=\"sso\""));
    assert_eq!(r.header("Set-Cookie"), Some("tried=1"));
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    assert_eq!(r.header("X-Secret"), None);
    assert_eq!(r.body, b"sign in now\n");
    assert!(
        up.requests.lock().unwrap().is_empty(),
        "the upstream never sees it"
    );
    // A route with sign-in off still loses the client's identity headers.
    let r = request(
        g.addr,
        &req_with(
            "GET",
            "f.test",
            "/public/x",
            &["Remote-User: mallory", "X-Kept: k"],
        ),
    );
    assert_eq!(r.status, 200);
    let seen = saw(&up, 0);
    assert_eq!(seen.header("remote-user"), None);
    assert_eq!(seen.header("x-kept"), Some("k"));
    assert_eq!(
        ep.requests.lock().unwrap().len(),
        1,
        "no call for a route with auth = false"
    );
    let denied = "gapura_auth_provider_total{provider=\"sso\",result=\"denied\"}";
    assert_eq!(
        common::gate::wait_sample(&g, denied, 1, Duration::from_secs(5)),
        1
    );
}

#[test]
fn failures_close_the_gate() {
    let up = recording_upstream();
    // Slow: past the timeout, 504.
    let (slow, latch) = auth_endpoint(true);
    let g = Gapura::start(&auth_profile(slow.addr, up.addr, "timeout_ms = 200"));
    let r = request(g.addr, &req_with("GET", "f.test", "/", &[GOOD]));
    assert_eq!(r.status, 504);
    latch.release();
    // Gone: 502.
    let gone = {
        let ep = auth_endpoint(false).0;
        ep.addr
    };
    let g2 = Gapura::start(&auth_profile(gone, up.addr, ""));
    let r = request(g2.addr, &req_with("GET", "f.test", "/", &[GOOD]));
    assert_eq!(r.status, 502);
    assert!(up.requests.lock().unwrap().is_empty());
    let t = "gapura_auth_provider_total{provider=\"sso\",result=\"timeout\"}";
    assert_eq!(
        common::gate::wait_sample(&g, t, 1, Duration::from_secs(5)),
        1
    );
    let e = "gapura_auth_provider_total{provider=\"sso\",result=\"error\"}";
    assert_eq!(
        common::gate::wait_sample(&g2, e, 1, Duration::from_secs(5)),
        1
    );
    // Each failure is logged, once a minute per provider at most.
    assert!(g.wait_log(
        "provider sso failed (no answer within timeout_ms)",
        Duration::from_secs(5)
    ));
    for _ in 0..3 {
        let r = request(g2.addr, &req_with("GET", "f.test", "/", &[GOOD]));
        assert_eq!(r.status, 502);
    }
    assert!(g2.wait_log(
        "provider sso failed (cannot connect",
        Duration::from_secs(5)
    ));
    assert_eq!(
        g2.log_text().matches("provider sso failed").count(),
        1,
        "{}",
        g2.log_text()
    );
    // A provider that answers with a status it should not: 502, and the
    // log says which status it gave.
    let broken = upstream::start(Arc::new(|_: &UpRequest| {
        Reply::Bytes(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_vec())
    }));
    let g3 = Gapura::start(&auth_profile(broken.addr, up.addr, ""));
    let r = request(g3.addr, &req_with("GET", "f.test", "/", &[GOOD]));
    assert_eq!(r.status, 502);
    assert!(
        g3.wait_log(
            "provider sso failed (an answer that is not a usable allow, refusal or redirect, status 500)",
            Duration::from_secs(5)
        ),
        "{}",
        g3.log_text()
    );
}

#[test]
fn a_provider_at_its_call_cap_answers_503() {
    let (ep, latch) = auth_endpoint(true);
    let up = recording_upstream();
    let g = Gapura::start(&auth_profile(ep.addr, up.addr, "timeout_ms = 10000"));
    let mut waiting = Vec::new();
    for i in 0..64 {
        let mut c = Client::connect(g.addr);
        c.send(&req_with("GET", "f.test", &format!("/slow/{i}"), &[GOOD]));
        waiting.push(c);
    }
    let running = || latch.in_flight.load(Ordering::SeqCst) == 64;
    assert!(
        wait_until(Duration::from_secs(10), running),
        "64 calls running"
    );
    let r = request(g.addr, &req_with("GET", "f.test", "/one-more", &[GOOD]));
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Retry-After"), Some("1"));
    latch.release();
    for mut c in waiting {
        assert_eq!(c.response(false).status, 200);
    }
}

#[test]
fn explain_names_the_provider_and_makes_no_call() {
    let ep = auth_endpoint(false).0;
    let up = recording_upstream();
    let file = ProfileFile::new(&auth_profile(ep.addr, up.addr, ""));
    let said = explain_json(&file.path, &["http://f.test/app", "-H", GOOD]);
    let steps = explain_steps(&said, "forward-auth");
    assert!(
        steps
            .iter()
            .any(|s| s.contains("would call GET /api/verify")),
        "{steps:?}"
    );
    assert_eq!(said["answer"]["kind"], "authenticate");
    assert!(
        ep.requests.lock().unwrap().is_empty(),
        "explain calls nobody"
    );
}

#[test]
fn a_shadowed_route_counts_refusals_and_lets_them_on() {
    let ep = auth_endpoint(false).0;
    let up = recording_upstream();
    let text = auth_profile(ep.addr, up.addr, "").replace(
        "auth = \"sso\"\n  [[host.route]]",
        "auth = \"sso\"\nauth_mode = \"shadow\"\n  [[host.route]]",
    );
    let g = Gapura::start(&text);
    let r = request(
        g.addr,
        &req_with(
            "GET",
            "f.test",
            "/app",
            &["Authorization: Bearer bad", "Remote-User: mallory"],
        ),
    );
    assert_eq!(r.status, 200, "let on");
    let seen = saw(&up, 0);
    assert_eq!(
        seen.header("remote-user"),
        None,
        "no identity, and the client's is removed"
    );
    let shadow = "gapura_auth_provider_total{provider=\"sso\",result=\"shadow\"}";
    assert_eq!(
        common::gate::wait_sample(&g, shadow, 1, Duration::from_secs(5)),
        1
    );
    // An allow still adds the identity.
    assert_eq!(
        request(g.addr, &req_with("GET", "f.test", "/app", &[GOOD])).status,
        200
    );
    assert_eq!(saw(&up, 1).header("remote-user"), Some("ana"));
}

#[test]
fn refusals_are_remembered_only_with_negative_ttl() {
    let ep = auth_endpoint(false).0;
    let up = recording_upstream();
    let bad = "Authorization: Bearer bad";
    // Without negative_ttl_ms every refusal is asked again.
    let g = Gapura::start(&auth_profile(ep.addr, up.addr, ""));
    for _ in 0..2 {
        assert_eq!(
            request(g.addr, &req_with("GET", "f.test", "/a", &[bad])).status,
            401
        );
    }
    assert_eq!(ep.requests.lock().unwrap().len(), 2);
    drop(g);
    let g = Gapura::start(&auth_profile(
        ep.addr,
        up.addr,
        "cache = { negative_ttl_ms = 60000 }",
    ));
    let first = request(g.addr, &req_with("GET", "f.test", "/a", &[bad]));
    let again = request(g.addr, &req_with("GET", "f.test", "/a", &[bad]));
    assert_eq!(
        ep.requests.lock().unwrap().len(),
        3,
        "the second came from memory"
    );
    assert_eq!((first.status, again.status), (401, 401));
    assert_eq!(again.body, first.body);
    assert_eq!(
        again.header("WWW-Authenticate"),
        first.header("WWW-Authenticate")
    );
    assert_eq!(again.header("Connection"), Some("close"));
    // Another target asks again; the good token is still let through.
    assert_eq!(
        request(g.addr, &req_with("GET", "f.test", "/b", &[bad])).status,
        401
    );
    assert_eq!(ep.requests.lock().unwrap().len(), 4);
    assert_eq!(
        request(g.addr, &req_with("GET", "f.test", "/a", &[GOOD])).status,
        200
    );
}

#[test]
fn an_answer_written_in_pieces_is_read_whole() {
    // The head, then the body a moment later, then the close: as Python's
    // http.server answers (HTTP/1.0, no keep-alive).
    let ep = upstream::start(Arc::new(|_req: &UpRequest| {
        Reply::Takeover(Box::new(|mut s: std::net::TcpStream| {
            use std::io::Write;
            let _ = s.write_all(
                b"HTTP/1.0 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\n",
            );
            // The body in a write of its own, once the head has been
            // read: the reader holds a head without its body.
            assert!(common::wait_peer_read(&s, Duration::from_secs(10)));
            let _ = s.write_all(b"sign in now\n");
        }))
    }));
    let up = recording_upstream();
    let g = Gapura::start(&auth_profile(ep.addr, up.addr, ""));
    for _ in 0..2 {
        let r = request(g.addr, &req_with("GET", "f.test", "/app", &[]));
        assert_eq!(r.status, 401);
        assert_eq!(r.header("WWW-Authenticate"), Some("Bearer"));
        assert_eq!(r.body, b"sign in now\n");
    }
    assert!(up.requests.lock().unwrap().is_empty());
}

#[test]
fn a_browsers_401_becomes_a_sign_in_redirect_and_an_apis_stays_401() {
    let ep = auth_endpoint(false).0;
    let up = recording_upstream();
    let g = Gapura::start(&auth_profile(
        ep.addr,
        up.addr,
        "sign_in = { url = \"https://sso.example/oauth2/start\" }",
    ));
    let html = "Accept: text/html,application/xhtml+xml";
    let r = request(g.addr, &req_with("GET", "f.test", "/app?x=1", &[html]));
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("Location"),
        Some("https://sso.example/oauth2/start?rd=http%3A%2F%2Ff.test%2Fapp%3Fx%3D1")
    );
    // An API client (no HTML) gets the provider's 401 as it was.
    let r = request(
        g.addr,
        &req_with("GET", "f.test", "/app", &["Accept: application/json"]),
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("WWW-Authenticate"), Some("Bearer realm=\"sso\""));
    // A POST is never redirected.
    let r = request(
        g.addr,
        &req_with("POST", "f.test", "/app", &[html, "Content-Length: 0"]),
    );
    assert_eq!(r.status, 401);
    // A script's fetch asking for HTML is not a navigation: its 401 stays.
    for mode in ["cors", "no-cors", "same-origin"] {
        let fetch = format!("Sec-Fetch-Mode: {mode}");
        let r = request(g.addr, &req_with("GET", "f.test", "/app", &[html, &fetch]));
        assert_eq!(r.status, 401, "{mode}");
    }
    // A navigation says so.
    let r = request(
        g.addr,
        &req_with("GET", "f.test", "/app", &[html, "Sec-Fetch-Mode: navigate"]),
    );
    assert_eq!(r.status, 302);
    assert!(up.requests.lock().unwrap().is_empty());
}

/// An auth provider over TLS with `config`: `Bearer good` is ana of ops
/// (200), anything else 401 with a challenge.
fn tls_provider(config: rustls::ServerConfig) -> pki::TlsServer {
    pki::tls_server(
        config,
        Arc::new(|head: &str| {
            if pki::head_header(head, "authorization") == Some("Bearer good") {
                b"HTTP/1.1 200 OK\r\nRemote-User: ana\r\nRemote-Groups: ops\r\nContent-Length: 0\r\n\r\n"
                    .to_vec()
            } else {
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"sso\"\r\nContent-Length: 12\r\n\r\nsign in now\n"
                    .to_vec()
            }
        }),
    )
}

fn provider_sample(g: &Gapura, result: &str, want: u64) -> u64 {
    common::gate::wait_sample(
        g,
        &format!("gapura_auth_provider_total{{provider=\"sso\",result=\"{result}\"}}"),
        want,
        Duration::from_secs(5),
    )
}

#[test]
fn an_https_provider_is_asked_over_tls_verified_for_the_urls_host() {
    let ca = pki::Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["127.0.0.1"]);
    let sso = tls_provider(pki::server_config((chain, key), None));
    let f = pki::files(&ca);
    let up = recording_upstream();
    let url = format!("https://127.0.0.1:{}/api/verify", sso.addr.port());
    let g = Gapura::start(&auth_profile_at(
        &url,
        up.addr,
        &format!("tls = {{ ca_file = \"{}\" }}", f.ca.display()),
    ));
    let r = request(g.addr, &req_with("GET", "f.test", "/app", &[GOOD]));
    assert_eq!(r.status, 200);
    let call = sso.heads.lock().unwrap()[0].clone();
    assert!(call.starts_with("GET /api/verify HTTP/1.1\r\n"), "{call}");
    assert_eq!(
        pki::head_header(&call, "host"),
        Some(format!("127.0.0.1:{}", sso.addr.port()).as_str())
    );
    assert_eq!(pki::head_header(&call, "x-forwarded-uri"), Some("/app"));
    assert_eq!(saw(&up, 0).header("remote-user"), Some("ana"));
    // A refusal comes over the same connection: it stayed TLS, idle.
    let r = request(
        g.addr,
        &req_with("GET", "f.test", "/app", &["Authorization: Bearer bad"]),
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("WWW-Authenticate"), Some("Bearer realm=\"sso\""));
    assert_eq!(r.body, b"sign in now\n");
    assert_eq!(sso.requests.load(Ordering::SeqCst), 2);
    assert_eq!(sso.handshakes.load(Ordering::SeqCst), 1);
    assert_eq!(up.requests.lock().unwrap().len(), 1);
    assert_eq!(provider_sample(&g, "allowed", 1), 1);
    assert_eq!(provider_sample(&g, "denied", 1), 1);
}

#[test]
fn a_provider_whose_certificate_does_not_verify_gets_no_byte_and_the_request_502() {
    let ours = pki::Authority::new("test authority");
    let rogue = pki::Authority::new("someone else");
    let (chain, key, _, _) = rogue.issue(&["127.0.0.1", "sso.test"]);
    let sso = tls_provider(pki::server_config((chain, key), None));
    let f = pki::files(&ours);
    let up = recording_upstream();
    let url = format!("https://127.0.0.1:{}/api/verify", sso.addr.port());
    let g = Gapura::start(&auth_profile_at(
        &url,
        up.addr,
        &format!("tls = {{ ca_file = \"{}\" }}", f.ca.display()),
    ));
    let r = request(g.addr, &req_with("GET", "f.test", "/app", &[GOOD]));
    assert_eq!(r.status, 502);
    assert_eq!(provider_sample(&g, "error", 1), 1);
    assert_eq!(
        g.wait_metric(
            "gapura_upstream_tls_failures_total{shard=\"0\",reason=\"tls_verify\"}",
            1,
            Duration::from_secs(5)
        ),
        1
    );
    assert!(g.wait_log(
        "provider sso failed (its TLS certificate did not verify",
        Duration::from_secs(5)
    ));
    // Without ca_file, the public roots do not vouch for it either.
    let public = Gapura::start(&auth_profile_at(&url, up.addr, ""));
    let r = request(public.addr, &req_with("GET", "f.test", "/app", &[GOOD]));
    assert_eq!(r.status, 502);
    assert_eq!(provider_sample(&public, "error", 1), 1);
    assert_eq!(sso.handshakes.load(Ordering::SeqCst), 0);
    assert_eq!(sso.requests.load(Ordering::SeqCst), 0);
    assert!(sso.heads.lock().unwrap().is_empty(), "no byte of the call");
    assert!(up.requests.lock().unwrap().is_empty());
}

#[test]
fn mutual_tls_to_a_provider_that_demands_a_client_certificate() {
    let ca = pki::Authority::new("test authority");
    let (chain, key, _, _) = ca.issue(&["sso.test"]);
    let sso = tls_provider(pki::server_config((chain, key), Some(&ca)));
    let f = pki::files(&ca);
    let up = recording_upstream();
    let url = format!("https://127.0.0.1:{}/api/verify", sso.addr.port());
    let g = Gapura::start(&auth_profile_at(
        &url,
        up.addr,
        &format!(
            "tls = {{ server_name = \"sso.test\", ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\" }}",
            f.ca.display(),
            f.client_cert.display(),
            f.client_key.display()
        ),
    ));
    let r = request(g.addr, &req_with("GET", "f.test", "/app", &[GOOD]));
    assert_eq!(r.status, 200);
    assert_eq!(saw(&up, 0).header("remote-user"), Some("ana"));
    assert_eq!(sso.requests.load(Ordering::SeqCst), 1);
    // Without the client certificate, the provider answers nothing: 502.
    let bare = Gapura::start(&auth_profile_at(
        &url,
        up.addr,
        &format!(
            "tls = {{ server_name = \"sso.test\", ca_file = \"{}\" }}",
            f.ca.display()
        ),
    ));
    let r = request(bare.addr, &req_with("GET", "f.test", "/app", &[GOOD]));
    assert_eq!(r.status, 502);
    assert_eq!(provider_sample(&bare, "error", 1), 1);
    assert_eq!(sso.requests.load(Ordering::SeqCst), 1);
    assert_eq!(up.requests.lock().unwrap().len(), 1);
}

#[test]
fn the_call_cap_is_the_processs_and_a_client_that_leaves_abandons_its_call() {
    let (ep, latch) = auth_endpoint(true);
    let up = recording_upstream();
    let text =
        auth_profile(ep.addr, up.addr, "timeout_ms = 10000").replace("shards = 1", "shards = 2");
    let g = Gapura::start(&text);
    // One address: one shard, which holds half of the process's 64.
    let mut waiting = Vec::new();
    for i in 0..32 {
        let mut c = Client::connect(g.addr);
        c.send(&req_with("GET", "f.test", &format!("/slow/{i}"), &[GOOD]));
        waiting.push(c);
    }
    let running = || latch.in_flight.load(Ordering::SeqCst) == 32;
    assert!(
        wait_until(Duration::from_secs(10), running),
        "32 calls running"
    );
    let r = request(g.addr, &req_with("GET", "f.test", "/one-more", &[GOOD]));
    assert_eq!(r.status, 503, "the shard's share of 64 is taken");
    // A client that goes away abandons its call.
    drop(waiting.pop());
    let abandoned = "gapura_auth_provider_total{provider=\"sso\",result=\"abandoned\"}";
    assert_eq!(
        common::gate::wait_sample(&g, abandoned, 1, Duration::from_secs(5)),
        1
    );
    latch.release();
    for mut c in waiting {
        assert_eq!(c.response(false).status, 200);
    }
}

/// The identity dimensions read the provider's copied headers on a route
/// with forward-auth, never the client's, and on the host's routes
/// without it ignore a header a provider copies.
#[test]
fn the_principal_budget_counts_the_providers_user_not_the_clients_claim() {
    let ep = auth_endpoint(false).0;
    let up = recording_upstream();
    let text = auth_profile(ep.addr, up.addr, "")
        + "\n[quota.principal]\nheader = \"remote-user\"\nrequests = 3\nscope = \"per_shard\"\n";
    let g = Gapura::start(&text);
    let status = |path: &str, extra: &[&str]| {
        request(g.addr, &req_with("GET", "f.test", path, extra)).status
    };
    // ana's three: the first asks the provider, the next are remembered
    // (a claim of another name changes nothing).
    assert_eq!(status("/a", &[GOOD]), 200);
    assert_eq!(status("/a", &[GOOD, "Remote-User: bob"]), 200);
    assert_eq!(status("/a", &[GOOD, "Remote-User: carol"]), 200);
    let r = request(g.addr, &req_with("GET", "f.test", "/a", &[GOOD]));
    assert_eq!(r.status, 429, "ana's budget is spent");
    assert!(r.header("Retry-After").is_some());
    // On the public route (no forward-auth) a client claiming to be ana
    // is not counted as ana, and is not refused for ana's budget.
    for _ in 0..5 {
        assert_eq!(status("/public", &["Remote-User: ana"]), 200);
    }
    assert_eq!(
        common::gate::wait_sample(
            &g,
            "gapura_quota_refused_total{shard=\"0\",level=\"principal\"}",
            1,
            Duration::from_secs(5)
        ),
        1
    );
}
