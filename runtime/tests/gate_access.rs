//! Who may pass, through the real binary: the client address from a
//! trusted proxy, Cloudflare or a PROXY header; access lists that allow,
//! deny and drop, at accept and per request; basic auth verified on the
//! pool and then from the cache; `satisfy = "any"` with countries;
//! credentials stripped or passed on; shadow mode; and `explain` agreeing
//! with the server about each.

mod common;

use common::gate::*;
use common::*;
use std::time::Duration;

/// A GET with extra header lines (`"Name: value"` each).
fn get_with(host: &str, path: &str, headers: &[&str]) -> Vec<u8> {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

fn proxy_host(name: &str, extra: &str) -> String {
    format!(
        "[[host]]\nnames = [\"{name}\"]\nkind = \"proxy\"\n{extra}\n  [[host.route]]\n  path = \"/\"\n  upstream = \"app\"\n"
    )
}

fn upstream_section(addr: std::net::SocketAddr) -> String {
    format!("[[upstream]]\nname = \"app\"\nservers = [\"{addr}\"]\n")
}

fn status_from(src: &str, g: &Gapura, req: &[u8]) -> u16 {
    request_from(src, g.addr, req).status
}

// ---------------------------------------------------------------------
// Client address
// ---------------------------------------------------------------------

fn xff_profile() -> String {
    profile(
        "",
        &format!(
            r#"
[client]
mode = "x_forwarded_for"
trusted_proxies = ["127.0.0.1/32"]

[[access_list]]
name = "partners"
allow = ["203.0.113.0/24"]

{}"#,
            respond_host("xff.test", "default = true\naccess_list = \"partners\"")
        ),
    )
}

#[test]
fn a_trusted_proxy_names_the_client_in_x_forwarded_for_and_an_untrusted_peer_cannot() {
    let g = Gapura::start(&xff_profile());
    let xff = |v: &str| get_with("xff.test", "/", &[&format!("X-Forwarded-For: {v}")]);

    // From the trusted proxy: its last hop is the client.
    assert_eq!(status_from("127.0.0.1", &g, &xff("203.0.113.9")), 200);
    assert_eq!(
        status_from("127.0.0.1", &g, &xff("198.51.100.1, 203.0.113.9")),
        200
    );
    // Only the rightmost element counts; a client cannot prepend its way in.
    assert_eq!(
        status_from("127.0.0.1", &g, &xff("203.0.113.9, 198.51.100.1")),
        403
    );
    // No header: the proxy itself is the client, and it is not allowed.
    assert_eq!(status_from("127.0.0.1", &g, &get("xff.test", "/")), 403);
    // The same header from a peer nobody trusts is ignored.
    assert_eq!(status_from("127.0.0.2", &g, &xff("203.0.113.9")), 403);

    assert_eq!(
        wait_sample(&g, &access_sample("partners", "allowed"), 2, METRIC_WAIT),
        2
    );
    assert_eq!(
        wait_sample(&g, &access_sample("partners", "refused"), 3, METRIC_WAIT),
        3
    );
}

fn cloudflare_profile() -> String {
    profile(
        "",
        &format!(
            r#"
[client]
mode = "cloudflare"
cloudflare_ranges = ["127.0.0.1/32"]

[[access_list]]
name = "geo"
deny = ["203.0.113.66"]
countries.deny = ["RU", "T1"]

[[access_list]]
name = "germany"
countries.allow = ["DE"]

{}{}"#,
            respond_host("geo.test", "access_list = \"geo\""),
            respond_host("de.test", "access_list = \"germany\""),
        ),
    )
}

#[test]
fn cloudflare_headers_are_believed_from_the_configured_ranges_only() {
    let g = Gapura::start(&cloudflare_profile());
    let cf = |host: &str, ip: &str, country: &str| {
        get_with(
            host,
            "/",
            &[
                &format!("CF-Connecting-IP: {ip}"),
                &format!("CF-IPCountry: {country}"),
            ],
        )
    };

    // (peer, host, CF-Connecting-IP, CF-IPCountry, status)
    let cases = [
        // From the Cloudflare range: the address and the country count.
        ("127.0.0.1", "geo.test", "198.51.100.1", "DE", 200),
        ("127.0.0.1", "geo.test", "198.51.100.1", "RU", 403),
        ("127.0.0.1", "geo.test", "198.51.100.1", "t1", 403),
        ("127.0.0.1", "geo.test", "203.0.113.66", "DE", 403),
        ("127.0.0.1", "de.test", "198.51.100.1", "DE", 200),
        ("127.0.0.1", "de.test", "198.51.100.1", "FR", 403),
        // XX (unknown) is outside an allow list that does not name it.
        ("127.0.0.1", "de.test", "198.51.100.1", "XX", 403),
        // Forged headers from a peer outside the range are ignored: no
        // country and no address. The deny rules do not fire...
        ("127.0.0.2", "geo.test", "203.0.113.66", "RU", 200),
        // ...and a country allow list does not let it in.
        ("127.0.0.2", "de.test", "198.51.100.1", "DE", 403),
    ];
    for (peer, host, ip, country, want) in cases {
        assert_eq!(
            status_from(peer, &g, &cf(host, ip, country)),
            want,
            "{peer} {host} {ip} {country}"
        );
    }

    assert_eq!(
        wait_sample(&g, &access_sample("geo", "refused"), 3, METRIC_WAIT),
        3
    );
    assert_eq!(
        wait_sample(&g, &access_sample("germany", "refused"), 3, METRIC_WAIT),
        3
    );
}

// ---------------------------------------------------------------------
// PROXY protocol
// ---------------------------------------------------------------------

fn proxy_protocol_profile(up: std::net::SocketAddr) -> String {
    profile_listening(
        "[{ addr = \"127.0.0.1:0\", proxy_protocol = true }]",
        "",
        &format!(
            r#"
[client]
proxy_protocol_peers = ["127.0.0.1/32"]

[[access_list]]
name = "balanced"
allow = ["198.51.100.0/24"]

{}
{}"#,
            upstream_section(up),
            proxy_host("pp.test", "default = true\naccess_list = \"balanced\"")
        ),
    )
}

#[test]
fn a_proxy_header_from_a_trusted_peer_names_the_client() {
    let up = reporting_upstream();
    let g = Gapura::start(&proxy_protocol_profile(up.addr));

    // v1 from a trusted peer: the gate and the upstream see the source.
    let mut req = b"PROXY TCP4 198.51.100.7 127.0.0.1 5000 80\r\n".to_vec();
    req.extend_from_slice(&get("pp.test", "/v1"));
    let r = request_from("127.0.0.1", g.addr, &req);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Saw-Forwarded-For"), Some("198.51.100.7"));

    // v2 (binary) from a trusted peer, two requests on the connection.
    let mut v2 = Vec::new();
    assert!(gapura_http::codec::proxyproto::encode_v2(
        &gapura_http::codec::proxyproto::ProxyHeader::Tcp {
            src: "198.51.100.8:4000".parse().unwrap(),
            dst: "127.0.0.1:80".parse().unwrap(),
        },
        &[],
        &mut v2
    ));
    let mut c = Client::connect_from("127.0.0.1", g.addr);
    c.send(&v2);
    c.send(&get("pp.test", "/v2"));
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Saw-Forwarded-For"), Some("198.51.100.8"));
    c.send(&get("pp.test", "/v2/again"));
    assert_eq!(c.response(false).status, 200);

    // A source the access list does not allow is refused.
    let mut req = b"PROXY TCP4 203.0.113.5 127.0.0.1 5000 80\r\n".to_vec();
    req.extend_from_slice(&get("pp.test", "/"));
    assert_eq!(request_from("127.0.0.1", g.addr, &req).status, 403);

    // A trusted peer that sends no PROXY header is closed without an answer.
    assert!(dropped_from("127.0.0.1", g.addr, &get("pp.test", "/")));

    let seen = up.requests.lock().unwrap().len();
    assert_eq!(seen, 3, "only the admitted requests reach the upstream");
}

#[test]
fn a_proxy_header_from_a_peer_outside_proxy_protocol_peers_is_not_believed() {
    let up = reporting_upstream();
    let g = Gapura::start(&proxy_protocol_profile(up.addr));

    // Its bytes are read as HTTP: the PROXY line is not a request line.
    let mut req = b"PROXY TCP4 198.51.100.7 127.0.0.1 5000 80\r\n".to_vec();
    req.extend_from_slice(&get("pp.test", "/"));
    let mut c = Client::connect_from("127.0.0.2", g.addr);
    c.send(&req);
    let r = c.response(false);
    assert_eq!(r.status, 400);
    assert!(c.closed_within(Duration::from_secs(3)));

    // A plain request from it is its own: 127.0.0.2 is not allowed.
    assert_eq!(status_from("127.0.0.2", &g, &get("pp.test", "/")), 403);
    assert!(up.requests.lock().unwrap().is_empty());
}

// ---------------------------------------------------------------------
// Access lists: allow, deny, drop, at accept, shadow
// ---------------------------------------------------------------------

fn lists_profile() -> String {
    profile(
        "access_list = \"blocklist\"",
        &format!(
            r#"
[[access_list]]
name = "blocklist"
deny = ["127.0.0.9"]
drop_denied = true

[[access_list]]
name = "office"
allow = ["127.0.0.0/29"]
deny = ["127.0.0.3"]

[[access_list]]
name = "vault"
deny = ["127.0.0.4"]
drop_denied = true

[[access_list]]
name = "trial"
allow = ["127.0.0.2"]

{}{}{}{}"#,
            respond_host("office.test", "default = true\naccess_list = \"office\""),
            respond_host("vault.test", "access_list = \"vault\""),
            respond_host(
                "trial.test",
                "access_list = \"trial\"\naccess_list_mode = \"shadow\""
            ),
            respond_host("open.test", ""),
        ),
    )
}

#[test]
fn an_access_list_allows_denies_and_drops_by_address() {
    let g = Gapura::start(&lists_profile());

    // Allowed, denied (deny wins inside the allow list), not in the allow list.
    let r = request_from("127.0.0.2", g.addr, &get("office.test", "/"));
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok\n"[..]));
    let r = request_from("127.0.0.3", g.addr, &get("office.test", "/"));
    assert_eq!(r.status, 403);
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert!(
        String::from_utf8_lossy(&r.body).starts_with("403 Forbidden\n"),
        "{:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(status_from("127.0.0.8", &g, &get("office.test", "/")), 403);
    // A browser gets the HTML page.
    let r = request_from(
        "127.0.0.8",
        g.addr,
        &get_with("office.test", "/", &["Accept: text/html"]),
    );
    assert_eq!(r.status, 403);
    assert_eq!(r.header("Content-Type"), Some("text/html; charset=utf-8"));

    // drop_denied: the connection is closed without a byte.
    assert!(dropped_from("127.0.0.4", g.addr, &get("vault.test", "/")));
    assert_eq!(status_from("127.0.0.5", &g, &get("vault.test", "/")), 200);

    // A host without a list lets everyone through.
    assert_eq!(status_from("127.0.0.8", &g, &get("open.test", "/")), 200);

    assert_eq!(
        wait_sample(&g, &access_sample("office", "refused"), 3, METRIC_WAIT),
        3
    );
    assert_eq!(
        wait_sample(&g, &access_sample("vault", "dropped"), 1, METRIC_WAIT),
        1
    );
    assert_eq!(
        wait_sample(
            &g,
            "gapura_gate_drops_total{at=\"request\"}",
            1,
            METRIC_WAIT
        ),
        1
    );
}

#[test]
fn the_server_access_list_closes_a_denied_address_at_accept_before_any_answer() {
    let g = Gapura::start(&lists_profile());

    // Nothing sent: the server closes the connection by itself.
    let mut c = Client::connect_from("127.0.0.9", g.addr);
    assert!(closed_without_a_byte(&mut c));
    // Whatever it would have asked for, on any host.
    assert!(dropped_from("127.0.0.9", g.addr, &get("open.test", "/")));

    // Everyone else is served.
    assert_eq!(status_from("127.0.0.8", &g, &get("open.test", "/")), 200);
    assert_eq!(
        wait_sample(&g, "gapura_gate_drops_total{at=\"accept\"}", 2, METRIC_WAIT),
        2
    );
    assert_eq!(
        metric_sample(&g, "gapura_gate_drops_total{at=\"request\"}"),
        Some(0)
    );
}

#[test]
fn a_shadowed_access_list_counts_its_refusals_and_lets_them_through() {
    let g = Gapura::start(&lists_profile());
    // Two addresses the list would refuse, then one it allows.
    assert_eq!(status_from("127.0.0.5", &g, &get("trial.test", "/")), 200);
    assert_eq!(status_from("127.0.0.6", &g, &get("trial.test", "/")), 200);
    assert_eq!(status_from("127.0.0.2", &g, &get("trial.test", "/")), 200);
    // Once the last one is counted, the first two are.
    assert_eq!(
        wait_sample(&g, &access_sample("trial", "allowed"), 1, METRIC_WAIT),
        1
    );
    // Each would-be refusal is one shadow hit, however many steps saw it.
    assert_eq!(
        metric_sample(&g, &access_sample("trial", "shadow")),
        Some(2)
    );
    assert_eq!(
        metric_sample(&g, &access_sample("trial", "refused")),
        Some(0)
    );
    assert_eq!(
        metric_sample(&g, &access_sample("trial", "dropped")),
        Some(0)
    );
}

// ---------------------------------------------------------------------
// Basic auth
// ---------------------------------------------------------------------

fn auth_profile(up: std::net::SocketAddr) -> String {
    profile(
        "",
        &format!(
            r#"
[[access_list]]
name = "staff"
realm = "Staff area"
users = [{{ name = "alice", password_hash = "{PASSWORD_HASH}" }}, {{ name = "carol" }}]

[[access_list]]
name = "relay"
pass_credentials = true
users = [{{ name = "alice", password_hash = "{PASSWORD_HASH}" }}]

{}
{}{}"#,
            upstream_section(up),
            proxy_host("staff.test", "default = true\naccess_list = \"staff\""),
            proxy_host("relay.test", "access_list = \"relay\""),
        ),
    )
}

#[test]
fn basic_auth_asks_then_verifies_on_the_pool_then_answers_from_the_cache() {
    let up = reporting_upstream();
    let g = Gapura::start(&auth_profile(up.addr));

    // No credentials: 401 with the realm, from the gate.
    let r = request(g.addr, &get("staff.test", "/"));
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("WWW-Authenticate"),
        Some("Basic realm=\"Staff area\", charset=\"UTF-8\"")
    );
    assert_eq!(r.header("Cache-Control"), Some("no-store"));
    // The page names its request: 24 hex digits in the slot kept for them.
    let text = String::from_utf8(r.body.clone()).unwrap();
    let id = text
        .strip_prefix("401 Unauthorized\nauthentication required\nrequest ")
        .and_then(|rest| rest.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(id.len(), 24);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");

    // The right password: checked on the pool, forwarded without it.
    let auth = format!("Authorization: {}", basic("alice", PASSWORD));
    let mut c = Client::connect(g.addr);
    c.stream.set_read_timeout(Some(VERIFY_WAIT)).unwrap();
    c.send(&get_with("staff.test", "/first", &[&auth]));
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Upstream"), Some("yes"));
    assert_eq!(r.header("X-Saw-Authorization"), Some("-"));
    assert_eq!(
        wait_sample(&g, &access_sample("staff", "verification"), 1, METRIC_WAIT),
        1
    );

    // The same credentials again, on another connection: from the cache.
    let r = request(g.addr, &get_with("staff.test", "/second", &[&auth]));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Saw-Authorization"), Some("-"));
    assert_eq!(
        wait_sample(&g, &access_sample("staff", "cache_hit"), 1, METRIC_WAIT),
        1
    );
    assert_eq!(
        metric_sample(&g, &access_sample("staff", "verification")),
        Some(1)
    );
    assert_eq!(
        metric_sample(&g, &access_sample("staff", "challenged")),
        Some(1)
    );
    let targets: Vec<String> = up
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.target.clone())
        .collect();
    assert_eq!(targets, ["/first", "/second"]);
}

#[test]
fn a_wrong_password_an_unknown_user_and_a_user_without_a_hash_get_401() {
    let up = reporting_upstream();
    let g = Gapura::start(&auth_profile(up.addr));
    let ask = |auth: &str| {
        let mut c = Client::connect(g.addr);
        c.stream.set_read_timeout(Some(VERIFY_WAIT)).unwrap();
        c.send(&get_with(
            "staff.test",
            "/",
            &[&format!("Authorization: {auth}")],
        ));
        c.response(false)
    };
    for auth in [
        basic("alice", "not-the-password"),
        basic("mallory", PASSWORD),
        basic("carol", PASSWORD),
    ] {
        let r = ask(&auth);
        assert_eq!(r.status, 401, "{auth}");
        assert_eq!(
            r.header("WWW-Authenticate"),
            Some("Basic realm=\"Staff area\", charset=\"UTF-8\"")
        );
    }
    // Every one of them cost a check (the dummy for the unknown name and
    // the user without a hash), and each failed.
    assert_eq!(
        wait_sample(
            &g,
            &access_sample("staff", "verification_failed"),
            3,
            METRIC_WAIT
        ),
        3
    );
    assert_eq!(
        metric_sample(&g, &access_sample("staff", "verification")),
        Some(3)
    );
    // None waited past its bound or found the line full, counted apart;
    // the line is empty again.
    assert_eq!(
        metric_sample(&g, &access_sample("staff", "verification_timeout")),
        Some(0)
    );
    assert_eq!(
        metric_sample(&g, &access_sample("staff", "queue_refused")),
        Some(0)
    );
    assert_eq!(metric_sample(&g, "gapura_verification_queued"), Some(0));
    assert_eq!(metric_sample(&g, "gapura_verification_running"), Some(0));

    // Malformed credentials are refused from the bytes alone, at once.
    for auth in ["Bearer abc", "Basic", "Basic !!!!", &basic("alice", "")] {
        assert_eq!(ask(auth).status, 401, "{auth}");
    }
    let mut twice = Client::connect(g.addr);
    let a = format!("Authorization: {}", basic("alice", PASSWORD));
    twice.send(&get_with("staff.test", "/", &[&a, &a]));
    assert_eq!(twice.response(false).status, 401);
    assert_eq!(
        metric_sample(&g, &access_sample("staff", "verification")),
        Some(3)
    );
    assert!(up.requests.lock().unwrap().is_empty());
}

#[test]
fn pass_credentials_forwards_authorization_to_the_upstream() {
    let up = reporting_upstream();
    let g = Gapura::start(&auth_profile(up.addr));
    let value = basic("alice", PASSWORD);
    let mut c = Client::connect(g.addr);
    c.stream.set_read_timeout(Some(VERIFY_WAIT)).unwrap();
    c.send(&get_with(
        "relay.test",
        "/",
        &[&format!("Authorization: {value}")],
    ));
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Saw-Authorization"), Some(value.as_str()));
    // From the cache too.
    c.send(&get_with(
        "relay.test",
        "/",
        &[&format!("Authorization: {value}")],
    ));
    let r = c.response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Saw-Authorization"), Some(value.as_str()));
}

fn any_profile(up: std::net::SocketAddr) -> String {
    profile(
        "",
        &format!(
            r#"
[client]
mode = "cloudflare"
cloudflare_ranges = ["127.0.0.1/32"]

[[access_list]]
name = "either"
allow = ["203.0.113.0/24"]
countries.deny = ["RU"]
satisfy = "any"
users = [{{ name = "alice", password_hash = "{PASSWORD_HASH}" }}]

{}
{}"#,
            upstream_section(up),
            proxy_host("any.test", "default = true\naccess_list = \"either\""),
        ),
    )
}

#[test]
fn satisfy_any_lets_an_allowed_address_in_without_a_password_and_never_reads_one_from_a_denied_country(
) {
    let up = reporting_upstream();
    let g = Gapura::start(&any_profile(up.addr));
    let auth = format!("Authorization: {}", basic("alice", PASSWORD));
    let from = |ip: &str, country: &str, extra: &[&str]| {
        let mut h = vec![
            format!("CF-Connecting-IP: {ip}"),
            format!("CF-IPCountry: {country}"),
        ];
        h.extend(extra.iter().map(|s| s.to_string()));
        let h: Vec<&str> = h.iter().map(String::as_str).collect();
        let mut c = Client::connect_from("127.0.0.1", g.addr);
        c.stream.set_read_timeout(Some(VERIFY_WAIT)).unwrap();
        c.send(&get_with("any.test", "/", &h));
        c.response(false)
    };

    // An allowed address passes without a password; an Authorization meant
    // for the upstream was not consumed, so it goes on.
    let r = from(
        "203.0.113.9",
        "DE",
        &["Authorization: Bearer upstream-token"],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("X-Saw-Authorization"),
        Some("Bearer upstream-token")
    );

    // Outside the allow list: a password is asked for.
    let r = from("198.51.100.1", "DE", &[]);
    assert_eq!(r.status, 401);
    assert!(r.header("WWW-Authenticate").is_some());

    // A denied country is refused, the right password notwithstanding, and
    // the password is never checked; an allowed address too.
    assert_eq!(from("198.51.100.1", "RU", &[&auth]).status, 403);
    assert_eq!(from("203.0.113.9", "RU", &[]).status, 403);
    assert_eq!(
        wait_sample(&g, &access_sample("either", "refused"), 2, METRIC_WAIT),
        2
    );
    assert_eq!(
        metric_sample(&g, &access_sample("either", "verification")),
        Some(0)
    );

    // Outside the allow list, from a country not denied, a password is
    // enough, and it is stripped before the upstream.
    let r = from("198.51.100.1", "DE", &[&auth]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-Saw-Authorization"), Some("-"));
    assert_eq!(
        wait_sample(&g, &access_sample("either", "verification"), 1, METRIC_WAIT),
        1
    );
}

// ---------------------------------------------------------------------
// Explain agrees with the server
// ---------------------------------------------------------------------

#[test]
fn explain_reports_the_access_steps_with_the_servers_answer() {
    let up = reporting_upstream();
    let text = format!(
        "{}\n{}",
        auth_profile(up.addr),
        r#"
[[access_list]]
name = "office"
allow = ["127.0.0.0/29"]
deny = ["127.0.0.3"]

[[access_list]]
name = "vault"
deny = ["127.0.0.4"]
drop_denied = true

[[host]]
names = ["office.test"]
access_list = "office"
body = "ok\n"

[[host]]
names = ["vault.test"]
access_list = "vault"
body = "ok\n"
"#
    );
    let file = ProfileFile::new(&text);
    let g = Gapura::start(&text);

    // A password asked for: explain says "challenge" where the server says 401.
    let said = explain_json(&file.path, &["GET", "http://staff.test/"]);
    assert_eq!(explain_answer(&said), ("challenge".into(), 401));
    let steps = explain_steps(&said, "access list");
    assert_eq!(steps.len(), 1, "{said}");
    assert!(steps[0].starts_with("list staff:"), "{said}");
    assert!(steps[0].contains("missing"), "{said}");
    assert_eq!(request(g.addr, &get("staff.test", "/")).status, 401);

    // Denied by address: 403 on both.
    let said = explain_json(
        &file.path,
        &["--client", "127.0.0.3", "GET", "http://office.test/"],
    );
    assert_eq!(explain_answer(&said), ("refuse".into(), 403));
    let steps = explain_steps(&said, "access address");
    assert_eq!(steps.len(), 1, "{said}");
    assert!(
        steps[0].starts_with("list office: the address is refused"),
        "{said}"
    );
    assert_eq!(status_from("127.0.0.3", &g, &get("office.test", "/")), 403);

    // Allowed: the host's answer on both.
    let said = explain_json(
        &file.path,
        &["--client", "127.0.0.2", "GET", "http://office.test/"],
    );
    assert_eq!(explain_answer(&said), ("respond".into(), 200));
    assert!(
        explain_steps(&said, "access address")[0].contains("refuses nothing"),
        "{said}"
    );
    assert_eq!(status_from("127.0.0.2", &g, &get("office.test", "/")), 200);

    // drop_denied: explain says "drop" and the server closes.
    let said = explain_json(
        &file.path,
        &["--client", "127.0.0.4", "GET", "http://vault.test/"],
    );
    assert_eq!(explain_answer(&said), ("drop".into(), 0));
    assert!(dropped_from("127.0.0.4", g.addr, &get("vault.test", "/")));

    // Credentials to check: explain runs no PBKDF2 and says the pool would.
    let auth = format!("Authorization: {}", basic("alice", PASSWORD));
    let said = explain_json(&file.path, &["-H", &auth, "GET", "http://staff.test/"]);
    assert_eq!(explain_answer(&said), ("verify".into(), 0));
    assert!(
        explain_steps(&said, "access list")[0].contains("deferred"),
        "{said}"
    );
}

#[test]
fn a_users_file_signs_in_its_users_and_is_read_again_at_a_reload() {
    use std::os::unix::fs::PermissionsExt;
    let up = reporting_upstream();
    let dir = TempDir::new();
    let users = dir.0.join("staff.users");
    let write = |text: String, mode: u32| {
        std::fs::write(&users, text).unwrap();
        std::fs::set_permissions(&users, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let text = profile(
        "",
        &format!(
            "[[access_list]]\nname = \"staff\"\nusers_file = {:?}\n\n{}\n{}",
            users.display().to_string(),
            upstream_section(up.addr),
            proxy_host("staff.test", "default = true\naccess_list = \"staff\""),
        ),
    );
    // Readable by others: the start is refused, naming the code.
    write(format!("alice:{PASSWORD_HASH}\n"), 0o644);
    let e = Gapura::try_start(&text, &[]).err().expect("refused");
    assert!(e.contains("accessList.usersFile.unreadable"), "{e}");
    assert!(e.contains("chmod 600"), "{e}");

    write(format!("# staff\nalice:{PASSWORD_HASH}\n"), 0o600);
    let g = Gapura::start(&text);
    let status = |name: &str| {
        let auth = format!("Authorization: {}", basic(name, PASSWORD));
        let mut c = Client::connect(g.addr);
        c.stream.set_read_timeout(Some(VERIFY_WAIT)).unwrap();
        c.send(&get_with("staff.test", "/", &[&auth]));
        c.response(false).status
    };
    assert_eq!(request(g.addr, &get("staff.test", "/")).status, 401);
    assert_eq!(status("alice"), 200);
    assert_eq!(status("bob"), 401);

    // The file edited and the server reloaded: bob in, alice out.
    write(format!("bob:{PASSWORD_HASH}\n"), 0o600);
    g.signal(libc::SIGHUP);
    assert!(g.wait_log("reloaded: generation 2", Duration::from_secs(10)));
    assert_eq!(status("bob"), 200);
    assert_eq!(status("alice"), 401);

    // A file made readable by others: the reload is refused, bob stays.
    write(format!("alice:{PASSWORD_HASH}\n"), 0o644);
    g.signal(libc::SIGHUP);
    assert!(
        g.wait_log("accessList.usersFile.unreadable", Duration::from_secs(10)),
        "{}",
        g.log_text()
    );
    assert_eq!(status("bob"), 200);
}
