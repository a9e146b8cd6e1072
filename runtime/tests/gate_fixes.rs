//! Regressions of the gate through the binary: robots.txt is never ruled on
//! even when nothing else reads the path; replaced upstream errors and
//! Cloudflare-fronted pages fill `{host}` and `{cfRay}`; the server's accept
//! list judges the peer only where the peer is the client.

mod common;

use common::upstream::{self, Reply, UpRequest};
use common::*;
use std::sync::Arc;

#[test]
fn robots_txt_is_not_ruled_on_by_a_user_agent_set_on_a_respond_host() {
    let g = Gapura::start(&profile(
        "",
        "[[host]]\nnames = [\"a.test\"]\ndefault = true\nkind = \"respond\"\nbody = \"ok\"\nrule_set = \"block_ai_crawlers\"\n",
    ));
    let ask = |path: &str| {
        request(
            g.addr,
            format!("GET {path} HTTP/1.1\r\nHost: a.test\r\nUser-Agent: GPTBot/1.0\r\n\r\n")
                .as_bytes(),
        )
        .status
    };
    assert_eq!(ask("/robots.txt"), 200);
    assert_eq!(ask("/"), 403);
}

#[test]
fn a_replaced_upstream_error_page_fills_the_host() {
    let up = upstream::start(Arc::new(|_: &UpRequest| {
        Reply::Bytes(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: 4\r\n\r\noops"
                .to_vec(),
        )
    }));
    let text = profile(
        "",
        &format!(
            r#"
[[upstream]]
name = "app"
servers = ["{}"]

[[host]]
names = ["app.test"]
default = true
kind = "proxy"
replace_upstream = "html"
error_pages."502" = {{ heading = "Down", text = "{{host}} could not reach its application." }}

[[host.route]]
path = "/"
upstream = "app"
"#,
            up.addr
        ),
    );
    let g = Gapura::start(&text);
    let r = request(
        g.addr,
        b"GET / HTTP/1.1\r\nHost: app.test\r\nAccept: text/html\r\n\r\n",
    );
    assert_eq!(r.status, 502);
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("app.test could not reach its application."),
        "{body}"
    );
}

#[test]
fn a_page_behind_cloudflare_fills_the_ray() {
    let text = profile(
        "",
        r#"
[client]
mode = "cloudflare"
cloudflare_ranges = ["127.0.0.1/32"]

[[access_list]]
name = "no"
deny = ["203.0.113.0/24"]

[[host]]
names = ["a.test"]
default = true
kind = "respond"
body = "ok"
access_list = "no"
error_pages."403" = { heading = "No", text = "ray={cfRay}" }
"#,
    );
    let g = Gapura::start(&text);
    let r = request(
        g.addr,
        b"GET / HTTP/1.1\r\nHost: a.test\r\nAccept: text/html\r\nCF-Connecting-IP: 203.0.113.7\r\nCF-IPCountry: NL\r\nCF-Ray: 8f1a2b3c4d5e6f70-FRA\r\n\r\n",
    );
    assert_eq!(r.status, 403);
    let body = String::from_utf8_lossy(&r.body);
    assert!(body.contains("ray=8f1a2b3c4d5e6f70-FRA"), "{body}");
}

#[test]
fn the_accept_list_leaves_a_trusted_proxy_connected() {
    let text = profile(
        "access_list = \"edge\"",
        r#"
[client]
mode = "x_forwarded_for"
trusted_proxies = ["127.0.0.1/32"]

[[access_list]]
name = "edge"
deny = ["127.0.0.1/32"]
drop_denied = true

[[host]]
names = ["a.test"]
default = true
kind = "respond"
body = "ok"
"#,
    );
    let g = Gapura::start(&text);
    let r = request(
        g.addr,
        b"GET / HTTP/1.1\r\nHost: a.test\r\nX-Forwarded-For: 198.51.100.4\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}
