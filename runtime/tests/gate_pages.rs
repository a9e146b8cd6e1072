//! Error pages and maintenance through the real binary: custom pages with
//! their slots filled and encoded, upstream error replacement, maintenance
//! with its Retry-After and bypass list, and maintenance in shadow mode.

mod common;

use common::gate::*;
use common::upstream::{self, Reply, UpRequest};
use common::*;
use std::sync::Arc;

// ---------------------------------------------------------------------
// Error pages
// ---------------------------------------------------------------------

/// An upstream that answers `/api/html502` with an HTML 502 and
/// `/api/json502` with a JSON 502, and 200 otherwise.
fn failing_upstream() -> upstream::Upstream {
    upstream::start(Arc::new(|req: &UpRequest| {
        let (status, ctype, body): (&str, &str, &str) = match req.target.as_str() {
            "/api/html502" => (
                "502 Bad Gateway",
                "text/html; charset=utf-8",
                "<h1>upstream broke</h1>",
            ),
            "/api/json502" => (
                "502 Bad Gateway",
                "application/json",
                "{\"error\":\"broke\"}",
            ),
            _ => ("200 OK", "text/plain", "fine"),
        };
        Reply::Bytes(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nX-Upstream: yes\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }))
}

fn pages_profile(up: std::net::SocketAddr) -> String {
    profile(
        "",
        &format!(
            r#"
[[upstream]]
name = "app"
servers = ["{up}"]

[[host]]
names = ["pages.test"]
default = true
kind = "proxy"
replace_upstream = "html"

  [[host.route]]
  path = "/api"
  upstream = "app"

[host.error_pages."404"]
heading = "Nothing here"
text = "{{host}} has no page here. Request {{requestId}}."

[host.error_pages."502"]
heading = "Upstream trouble"
text = "The application could not be reached."
"#
        ),
    )
}

/// The 24 hex digits after `Request ` in a page.
fn request_id_in(body: &str) -> &str {
    let at = body.find("Request ").expect("a request id") + "Request ".len();
    &body[at..at + 24]
}

#[test]
fn a_custom_404_page_fills_its_slots_html_encoded_for_browsers_only() {
    let up = failing_upstream();
    let g = Gapura::start(&pages_profile(up.addr));
    let html = "Accept: text/html,application/xhtml+xml;q=0.9";

    let r = request(g.addr, &req_with("GET", "pages.test", "/nothing", &[html]));
    assert_eq!(r.status, 404);
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    assert!(r.header("Content-Security-Policy").is_some());
    let body = text(&r);
    assert!(body.contains("Nothing here"), "{body}");
    assert!(body.contains("pages.test has no page here."), "{body}");
    let id = request_id_in(&body);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{body}");

    // A Host no host name can hold is refused by the parser.
    let r = request(
        g.addr,
        &req_with("GET", "<script>alert(1)</script>", "/nothing", &[html]),
    );
    assert_eq!(r.status, 400);
    assert!(!text(&r).contains("<script>"));
    // What a Host may hold (the default host takes it) comes back encoded.
    let r = request(g.addr, &req_with("GET", "a'&b", "/nothing", &[html]));
    assert_eq!(r.status, 404);
    let body = text(&r);
    assert!(body.contains("&amp;"), "{body}");
    assert!(!body.contains("a'&b has"), "{body}");

    // Each request has its own id.
    let r2 = request(g.addr, &req_with("GET", "pages.test", "/nothing", &[html]));
    assert_ne!(request_id_in(&text(&r2)), id);

    // A client that does not ask for HTML gets the built-in plain text.
    let r = request(g.addr, &get("pages.test", "/nothing"));
    assert_eq!(r.status, 404);
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert!(text(&r).starts_with("404 Not Found\n"), "{}", text(&r));
    assert!(!text(&r).contains("Nothing here"));
}

#[test]
fn an_unknown_host_gets_the_defaults_pages() {
    // No default host: a Host no host names is refused (404, and 421 by
    // `unknown_host`), with [defaults]' page for a browser.
    let text_of = |status: &str| {
        profile(
            &format!("unknown_host = {status}"),
            r#"
[defaults.error_pages."404"]
heading = "No such site"
text = "{host} is not served here."

[defaults.error_pages."421"]
heading = "Wrong door"
text = "{host} is not served here."

[[host]]
names = ["known.test"]
kind = "respond"
status = 200
body = "ok"
"#,
        )
    };
    let html = "Accept: text/html";
    for (status, heading) in [("404", "No such site"), ("421", "Wrong door")] {
        let g = Gapura::start(&text_of(status));
        let r = request(g.addr, &req_with("GET", "other.test", "/", &[html]));
        assert_eq!(r.status.to_string(), status);
        let body = text(&r);
        assert!(body.contains(heading), "{body}");
        assert!(body.contains("other.test is not served here."), "{body}");
        // A client that does not ask for HTML keeps the plain text.
        let r = request(g.addr, &get("other.test", "/"));
        assert!(!text(&r).contains(heading));
        // A known host keeps its answer.
        assert_eq!(request(g.addr, &get("known.test", "/")).status, 200);
    }
}

#[test]
fn replace_upstream_html_replaces_an_html_502_and_leaves_a_json_one() {
    let up = failing_upstream();
    let g = Gapura::start(&pages_profile(up.addr));
    let html = "Accept: text/html";

    let r = request(
        g.addr,
        &req_with("GET", "pages.test", "/api/html502", &[html]),
    );
    assert_eq!(r.status, 502);
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    let body = text(&r);
    assert!(body.contains("Upstream trouble"), "{body}");
    assert!(
        body.contains("The application could not be reached."),
        "{body}"
    );
    assert!(!body.contains("upstream broke"), "{body}");

    let r = request(
        g.addr,
        &req_with("GET", "pages.test", "/api/json502", &[html]),
    );
    assert_eq!(r.status, 502);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(text(&r), "{\"error\":\"broke\"}");

    // A success is untouched.
    let r = request(g.addr, &req_with("GET", "pages.test", "/api/fine", &[html]));
    assert_eq!((r.status, text(&r).as_str()), (200, "fine"));
}

// ---------------------------------------------------------------------
// Maintenance
// ---------------------------------------------------------------------

fn maintenance_profile() -> String {
    profile(
        "",
        r#"
[[access_list]]
name = "office"
allow = ["127.0.0.2"]

[[host]]
names = ["m.test"]
body = "live\n"
robots = "disallow_all"

[host.maintenance]
enabled = true
status = 503
retry_after_seconds = 600
bypass = "office"

[host.error_pages.maintenance]
html = "<!doctype html><title>{statusText}</title><p>{host} is being upgraded.</p>"

[[host]]
names = ["trial.test"]
body = "live\n"

[host.maintenance]
enabled = true
mode = "shadow"
"#,
    )
}

#[test]
fn maintenance_answers_503_with_retry_after_and_its_page_except_to_the_bypass_list() {
    let g = Gapura::start(&maintenance_profile());

    let r = request_from(
        "127.0.0.1",
        g.addr,
        &req_with("GET", "m.test", "/", &["Accept: text/html"]),
    );
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Retry-After"), Some("600"));
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));
    assert!(r.header("Content-Security-Policy").is_some());
    assert_eq!(
        text(&r),
        "<!doctype html><title>Service Unavailable</title><p>m.test is being upgraded.</p>"
    );

    // Plain text for other clients.
    let r = request_from("127.0.0.1", g.addr, &get("m.test", "/"));
    assert_eq!(r.status, 503);
    assert_eq!(r.header("Retry-After"), Some("600"));
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert!(
        text(&r).starts_with("503 Service Unavailable\n"),
        "{}",
        text(&r)
    );

    // The bypass list's address is served.
    let r = request_from("127.0.0.2", g.addr, &get("m.test", "/"));
    assert_eq!((r.status, text(&r).as_str()), (200, "live\n"));

    // The managed robots.txt comes before maintenance.
    let r = request_from("127.0.0.1", g.addr, &get("m.test", "/robots.txt"));
    assert_eq!(
        (r.status, text(&r).as_str()),
        (200, "User-agent: *\nDisallow: /\n")
    );

    assert_eq!(
        wait_sample(
            &g,
            "gapura_maintenance_total{host=\"m.test\",result=\"bypassed\"}",
            1,
            METRIC_WAIT
        ),
        1
    );
    assert_eq!(
        metric_sample(
            &g,
            "gapura_maintenance_total{host=\"m.test\",result=\"served\"}"
        ),
        Some(2)
    );
}

#[test]
fn shadowed_maintenance_serves_the_site_and_counts() {
    let g = Gapura::start(&maintenance_profile());
    for _ in 0..2 {
        let r = request(g.addr, &get("trial.test", "/"));
        assert_eq!((r.status, text(&r).as_str()), (200, "live\n"));
    }
    assert_eq!(
        wait_sample(
            &g,
            "gapura_maintenance_total{host=\"trial.test\",result=\"shadow\"}",
            2,
            METRIC_WAIT
        ),
        2
    );
    assert_eq!(
        metric_sample(
            &g,
            "gapura_maintenance_total{host=\"trial.test\",result=\"served\"}"
        ),
        Some(0)
    );
}

#[test]
fn the_gates_own_429_uses_the_hosts_page_with_its_retry_after() {
    let g = Gapura::start(&profile(
        "",
        r#"
[[rate_limit]]
name = "once"
requests = 1
per = "minute"

[[host]]
names = ["slow.test"]
default = true
body = "ok\n"
rate_limit = "once"

[host.error_pages."429"]
heading = "Easy there"
text = "Too fast for {host}. Request {requestId}."
"#,
    ));
    let html = "Accept: text/html";
    assert_eq!(
        request(g.addr, &req_with("GET", "slow.test", "/", &[html])).status,
        200
    );
    let r = request(g.addr, &req_with("GET", "slow.test", "/", &[html]));
    assert_eq!(r.status, 429);
    let retry: u32 = r.header("Retry-After").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let body = text(&r);
    assert!(body.contains("Easy there"), "{body}");
    assert!(body.contains("Too fast for slow.test."), "{body}");
    assert!(request_id_in(&body).bytes().all(|b| b.is_ascii_hexdigit()));
    // A client that does not ask for HTML gets the built-in text page, with
    // its request id.
    let r = request(g.addr, &get_close("slow.test", "/"));
    assert_eq!(r.status, 429);
    let body = text(&r);
    assert!(body.starts_with("429 Too Many Requests\n"), "{body}");
    let id = body.trim_end().rsplit(' ').next().unwrap();
    assert_eq!(id.len(), 24, "{body}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{body}");
}

#[test]
fn gapuras_own_upstream_errors_use_the_hosts_pages() {
    let dead = upstream::dead_addr();
    // Never answers: the connection is held until Gapura gives up on it.
    let slow = upstream::start(std::sync::Arc::new(|_: &upstream::UpRequest| {
        upstream::Reply::Takeover(Box::new(|mut s: std::net::TcpStream| {
            use std::io::Read;
            let mut b = [0u8; 64];
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        }))
    }));
    let text = profile(
        "",
        &format!(
            r#"
[[upstream]]
name = "dead"
servers = ["{dead}"]

[[upstream]]
name = "slow"
servers = ["{}"]
response_header_timeout_ms = 300

[[host]]
names = ["own.test"]
default = true
kind = "proxy"

  [[host.route]]
  path = "/dead"
  upstream = "dead"
  [[host.route]]
  path = "/slow"
  upstream = "slow"

[host.error_pages."502"]
heading = "Upstream trouble"
text = "{{host}} could not reach its application. Request {{requestId}}."

[host.error_pages."504"]
heading = "Too slow"
text = "{{host}} waited too long. Request {{requestId}}."
"#,
            slow.addr
        ),
    );
    let g = Gapura::start(&text);
    let html = "Accept: text/html";
    let r = request(g.addr, &req_with("GET", "own.test", "/dead/x", &[html]));
    assert_eq!(r.status, 502);
    let body = String::from_utf8(r.body.clone()).unwrap();
    assert!(body.contains("Upstream trouble"), "{body}");
    assert!(
        body.contains("own.test could not reach its application."),
        "{body}"
    );
    let r = request(g.addr, &req_with("GET", "own.test", "/slow/x", &[html]));
    assert_eq!(r.status, 504);
    assert!(String::from_utf8_lossy(&r.body).contains("waited too long"));
    // Not a browser: the built-in text page.
    let r = request(g.addr, &req_with("GET", "own.test", "/dead/x", &[]));
    assert_eq!(r.status, 502);
    assert!(!String::from_utf8_lossy(&r.body).contains("Upstream trouble"));
}
