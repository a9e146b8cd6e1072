use super::*;
use gapura_gate::chain::{GateState, NoTrace, Request};
use gapura_gate::client::Peer;
use gapura_gate::upstream::{RequestId, RouteMatch};
use gapura_gate::{ErrorStatus, HostAction, ProxyHost, RequestLimits, Verdict};

/// Two groups on lines 1 to 6.
const UPSTREAMS: &str = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9001\"]\n\
                         [[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9002\"]\n";

/// A proxy host on lines 7 to 9 after the groups; tests append line 10 onwards.
fn proxy_host() -> String {
    format!("{UPSTREAMS}[[host]]\nnames = [\"p.test\"]\nkind = \"proxy\"\n")
}

/// A proxy host with one valid route (lines 10 to 12); tests append line 13 onwards.
fn with_route() -> String {
    format!(
        "{}[[host.route]]\npath = \"/\"\nupstream = \"app\"\n",
        proxy_host()
    )
}

fn proxy(c: &Compiled, host: &[u8]) -> ProxyHost {
    let id = c.snapshot.hosts.lookup(Some(host)).expect("host matches");
    match &c.snapshot.entries[id as usize].action {
        HostAction::Proxy(p) => p.clone(),
        _ => panic!("not a proxy host"),
    }
}

const FULL: &str = r#"
[defaults.limits]
max_body_bytes = "10 MiB"
max_url_bytes = 4096

[[host]]
names = ["app.test"]
kind = "proxy"
limits = { max_body_bytes = "1 MiB", max_header_count = 50 }

  [[host.route]]
  path = "/"
  upstream = "app"

  [[host.route]]
  path = "/api"
  upstream = "api"
  request_id = "generate"

  [[host.route]]
  path = "/api/health"
  match = "exact"
  upstream = "app"
  request_id = "off"

  [[host.route]]
  path = "/ws"
  upstream = "app"
  websocket = true

  [[host.route]]
  path = "/upload"
  match = "prefix"
  upstream = "api"
  [host.route.limits]
  max_body_bytes = "1 GiB"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001", { addr = "[::1]:9002", weight = 3 }]

[[upstream]]
name = "api"
servers = ["127.0.0.1:9003"]
balance = "least_outstanding"
"#;

#[test]
fn a_proxy_host_compiles_its_routes_in_order_with_layered_limits() {
    let c = ok(FULL);
    let host_limits = RequestLimits {
        max_body_bytes: 1 << 20,
        max_header_count: 50,
        max_header_bytes: 32 << 10,
        max_url_bytes: 4096,
    };
    assert_eq!(c.snapshot.entries[0].limits, host_limits);
    let p = proxy(&c, b"app.test");
    let summary: Vec<(RouteMatch, u32, bool, RequestId, RequestLimits)> = p
        .routes
        .iter()
        .map(|r| {
            (
                r.matcher.clone(),
                r.upstream,
                r.websocket,
                r.request_id,
                r.limits,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                RouteMatch::Prefix("/".into()),
                0,
                false,
                RequestId::Keep,
                host_limits
            ),
            (
                RouteMatch::Prefix("/api".into()),
                1,
                false,
                RequestId::Generate,
                host_limits
            ),
            (
                RouteMatch::Exact("/api/health".into()),
                0,
                false,
                RequestId::Off,
                host_limits
            ),
            (
                RouteMatch::Prefix("/ws".into()),
                0,
                true,
                RequestId::Keep,
                host_limits
            ),
            (
                RouteMatch::Prefix("/upload".into()),
                1,
                false,
                RequestId::Keep,
                // Only the body limit is the route's; the rest is the host's.
                RequestLimits {
                    max_body_bytes: 1 << 30,
                    ..host_limits
                }
            ),
        ]
    );
    let groups = &c.snapshot.upstreams;
    assert_eq!(groups[0].name, "app");
    let servers: Vec<(String, u32)> = groups[0]
        .servers
        .iter()
        .map(|s| (s.addr.to_string(), s.weight))
        .collect();
    assert_eq!(
        servers,
        vec![("127.0.0.1:9001".into(), 1), ("[::1]:9002".into(), 3)]
    );
    assert_eq!(groups[1].name, "api");
}

#[test]
fn the_gate_routes_a_compiled_proxy_host_by_precedence() {
    let c = ok(FULL);
    let decide = |path: &'static [u8], body: Option<u64>| {
        let mut scratch = Box::new([0u8; gapura_gate::path::MAX_PATH_BYTES]);
        let headers: [(&str, &[u8]); 0] = [];
        let req = Request {
            peer: Peer::tcp("127.0.0.1".parse().unwrap()),
            method: b"GET",
            host: Some(b"app.test"),
            target: path,
            path,
            header_count: 0,
            header_bytes: 0,
            content_length: body,
            headers: &headers[..],
            connection: None,
            tls: false,
        };
        let mut state = GateState::small();
        let d = c
            .snapshot
            .decide(&req, &mut state, 0, &mut scratch, &mut NoTrace);
        match d.verdict {
            Verdict::Forward(r, g) => (format!("{:?}", r.matcher), g.name.clone()),
            Verdict::Refuse(s) => (format!("{s:?}"), String::new()),
            _ => panic!("a proxy host forwards or refuses"),
        }
    };
    let fwd = |m: &str, g: &str| (m.to_string(), g.to_string());
    assert_eq!(decide(b"/", None), fwd("Prefix(\"/\")", "app"));
    assert_eq!(decide(b"/apix", None), fwd("Prefix(\"/\")", "app"));
    assert_eq!(decide(b"/api/v1?x=1", None), fwd("Prefix(\"/api\")", "api"));
    assert_eq!(
        decide(b"/api/health", None),
        fwd("Exact(\"/api/health\")", "app")
    );
    assert_eq!(decide(b"/ws/chat", None), fwd("Prefix(\"/ws\")", "app"));
    // 2 MiB: over the host's 1 MiB, under the upload route's 1 GiB.
    assert_eq!(
        decide(b"/upload/a", Some(2 << 20)),
        fwd("Prefix(\"/upload\")", "api")
    );
    assert_eq!(
        decide(b"/api", Some(2 << 20)),
        (format!("{:?}", ErrorStatus::PayloadTooLarge), String::new())
    );
}

#[test]
fn a_proxy_host_without_a_catch_all_leaves_other_paths_unrouted() {
    let c = ok(&format!(
        "{}[[host.route]]\npath = \"/api\"\nupstream = \"api\"\n",
        proxy_host()
    ));
    let p = proxy(&c, b"p.test");
    assert!(p.route(b"/other").is_none());
    assert_eq!(p.route(b"/api/x").map(|r| r.upstream), Some(1));
}

#[test]
fn a_proxy_host_needs_routes() {
    assert_eq!(
        one(&proxy_host()),
        at("host.routes.required", "host[0].route", 7, 1)
    );
}

#[test]
fn routes_are_unexpected_on_respond_and_redirect_hosts() {
    let src = format!(
        "{UPSTREAMS}[[host]]\nnames = [\"a.test\"]\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\n\
         [[host.route]]\npath = \"/x\"\nupstream = \"app\"\n"
    );
    assert_eq!(
        errors(&src).iter().map(key).collect::<Vec<_>>(),
        vec![
            at("host.route.unexpected", "host[0].route[0]", 9, 1),
            at("host.route.unexpected", "host[0].route[1]", 12, 1),
        ]
    );
    let src = format!(
        "{UPSTREAMS}[[host]]\nnames = [\"a.test\"]\nkind = \"redirect\"\ntarget = \"/\"\n\
         [[host.route]]\npath = \"/\"\nupstream = \"app\"\n"
    );
    assert_eq!(
        one(&src),
        at("host.route.unexpected", "host[0].route[0]", 11, 1)
    );
    assert_eq!(
        errors(&src)[0].message,
        "only a proxy host has routes; this host has kind = \"redirect\""
    );
}

#[test]
fn answer_fields_are_unexpected_on_a_proxy_host() {
    let route = "[[host.route]]\npath = \"/\"\nupstream = \"app\"\n";
    let src = format!(
        "{}status = 200\nbody = \"x\"\ncontent_type = \"text/plain\"\ntarget = \"/\"\nkeep = \"path\"\n\
         headers = {{ X-A = \"1\" }}\n{route}",
        proxy_host()
    );
    assert_eq!(
        errors(&src).iter().map(key).collect::<Vec<_>>(),
        vec![
            at("host.status.unexpected", "host[0].status", 10, 10),
            at("host.body.unexpected", "host[0].body", 11, 8),
            at(
                "host.content_type.unexpected",
                "host[0].content_type",
                12,
                16
            ),
            at("host.target.unexpected", "host[0].target", 13, 10),
            at("host.keep.unexpected", "host[0].keep", 14, 8),
            at("host.headers.unexpected", "host[0].headers", 15, 13),
        ]
    );
    // An empty headers table says nothing and is accepted.
    ok(&format!("{}headers = {{}}\n{route}", proxy_host()));
}

#[test]
fn a_route_needs_a_path_and_an_upstream() {
    let src = format!("{}[[host.route]]\nwebsocket = true\n", proxy_host());
    assert_eq!(
        errors(&src).iter().map(key).collect::<Vec<_>>(),
        vec![
            at("route.path.required", "host[0].route[0].path", 10, 1),
            at(
                "route.upstream.required",
                "host[0].route[0].upstream",
                10,
                1
            ),
        ]
    );
}

#[test]
fn a_route_upstream_must_name_a_group() {
    let src = format!(
        "{}[[host.route]]\npath = \"/\"\nupstream = \"ap\"\n",
        proxy_host()
    );
    assert_eq!(
        one(&src),
        at(
            "route.upstream.unknown",
            "host[0].route[0].upstream",
            12,
            12
        )
    );
    assert_eq!(
        errors(&src)[0].message,
        "no [[upstream]] is named \"ap\" (known: api, app)"
    );
    let src = "[[host]]\nnames = [\"p.test\"]\nkind = \"proxy\"\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\n";
    assert_eq!(
        errors(src)[0].message,
        "no [[upstream]] is named \"app\" (the profile has no [[upstream]])"
    );
}

#[test]
fn route_paths_without_a_canonical_spelling_are_invalid() {
    for bad in ["api", "", "/a?b=1", "/a\tb"] {
        let src = format!(
            "{}[[host.route]]\npath = {bad:?}\nupstream = \"app\"\n",
            proxy_host()
        );
        assert_eq!(
            one(&src),
            at("route.path.invalid", "host[0].route[0].path", 11, 8),
            "{bad:?}"
        );
    }
}

#[test]
fn route_paths_are_written_decoded() {
    for (bad, message) in [
        (
            "/a%2Fb",
            "\"/a%2Fb\" has '%' escapes: routes are written decoded; write it as \"/a/b\"",
        ),
        (
            "/caf%C3%A9",
            "\"/caf%C3%A9\" has '%' escapes: routes are written decoded; write it as \"/café\"",
        ),
        (
            "/100%25",
            "\"/100%25\" has '%' escapes: routes are written decoded, without them",
        ),
    ] {
        let src = format!(
            "{}[[host.route]]\npath = \"{bad}\"\nupstream = \"app\"\n",
            proxy_host()
        );
        let e = errors(&src);
        assert_eq!(
            e.iter().map(key).collect::<Vec<_>>(),
            vec![at("route.path.encoded", "host[0].route[0].path", 11, 8)],
            "{bad:?}"
        );
        assert_eq!(e[0].message, message);
    }
    // Decoded, a path may hold any character but a control or '?'.
    let c = ok(&format!(
        "{}[[host.route]]\npath = \"/café/a b#c\"\nupstream = \"app\"\n",
        proxy_host()
    ));
    assert_eq!(
        proxy(&c, b"p.test").routes[0].matcher,
        RouteMatch::Prefix("/café/a b#c".into())
    );
}

#[test]
fn route_paths_must_be_written_canonically() {
    for (bad, canonical) in [
        ("/API", "/api"),
        ("/a//b", "/a/b"),
        ("/a/./b", "/a/b"),
        ("/a/../b", "/b"),
        ("/a\\\\b", "/a/b"),
        ("/api/", "/api"),
        ("/a;v=1", "/a"),
        ("/admin.", "/admin"),
    ] {
        let src = format!(
            "{}[[host.route]]\npath = \"{bad}\"\nupstream = \"app\"\n",
            proxy_host()
        );
        let e = errors(&src);
        assert_eq!(
            e.iter().map(key).collect::<Vec<_>>(),
            vec![at(
                "route.path.notCanonical",
                "host[0].route[0].path",
                11,
                8
            )],
            "{bad:?}"
        );
        assert!(
            e[0].message
                .ends_with(&format!("so write it as {canonical:?}")),
            "{bad:?}: {}",
            e[0].message
        );
    }
}

#[test]
fn the_same_match_and_path_twice_on_a_host_is_a_duplicate() {
    let route = |path: &str, m: &str| {
        format!("[[host.route]]\npath = \"{path}\"\nmatch = \"{m}\"\nupstream = \"app\"\n")
    };
    let src = format!(
        "{}{}{}",
        proxy_host(),
        route("/api", "prefix"),
        route("/api", "prefix")
    );
    assert_eq!(
        one(&src),
        at("route.path.duplicate", "host[0].route[1].path", 15, 8)
    );
    assert_eq!(
        errors(&src)[0].message,
        "prefix \"/api\" is already routed by host[0].route[0]"
    );
    // Exact and prefix on one path are different routes; so are the same
    // route on two hosts.
    ok(&format!(
        "{}{}{}",
        proxy_host(),
        route("/api", "prefix"),
        route("/api", "exact")
    ));
    ok(&format!(
        "{}{}[[host]]\nnames = [\"q.test\"]\nkind = \"proxy\"\n{}",
        proxy_host(),
        route("/", "prefix"),
        route("/", "prefix")
    ));
}

#[test]
fn match_and_request_id_are_fixed_words() {
    let src = format!("{}match = \"regex\"\nrequest_id = \"new\"\n", with_route());
    assert_eq!(
        errors(&src).iter().map(key).collect::<Vec<_>>(),
        vec![
            at("route.match.invalid", "host[0].route[0].match", 13, 9),
            at(
                "route.request_id.invalid",
                "host[0].route[0].request_id",
                14,
                14
            ),
        ]
    );
}

#[test]
fn a_route_limits_only_the_body() {
    let src = format!(
        "{}[host.route.limits]\nmax_body_bytes = 1\nmax_header_count = 10\nmax_header_bytes = \"2 KiB\"\n\
         max_url_bytes = 512\n",
        with_route()
    );
    assert_eq!(
        errors(&src).iter().map(key).collect::<Vec<_>>(),
        vec![
            at(
                "limits.route.max_header_count.unexpected",
                "host[0].route[0].limits.max_header_count",
                15,
                20
            ),
            at(
                "limits.route.max_header_bytes.unexpected",
                "host[0].route[0].limits.max_header_bytes",
                16,
                20
            ),
            at(
                "limits.route.max_url_bytes.unexpected",
                "host[0].route[0].limits.max_url_bytes",
                17,
                17
            ),
        ]
    );
    let src = format!(
        "{}limits = {{ max_body_bytes = \"2 TiB\" }}\n",
        with_route()
    );
    assert_eq!(
        one(&src),
        at(
            "limits.max_body_bytes.range",
            "host[0].route[0].limits.max_body_bytes",
            13,
            29
        )
    );
    // 0 lifts the host's body limit on this route.
    let c = ok(&format!("{}limits.max_body_bytes = 0\n", with_route()));
    assert_eq!(proxy(&c, b"p.test").routes[0].limits.max_body_bytes, 0);
}

#[test]
fn every_error_of_a_proxy_profile_is_reported_in_source_order() {
    let src = r#"
[[host]]
names = ["p.test"]
kind = "proxy"
body = "x"
  [[host.route]]
  path = "/API"
  upstream = "missing"
  [[host.route]]
  path = "/b"
  match = "exact"
  upstream = "app"
  limits = { max_url_bytes = 300 }

[[upstream]]
name = "app"
servers = []

[[upstream]]
name = "app"
servers = ["127.0.0.1", "127.0.0.1:1", "127.0.0.1:1"]
balance = "fastest"
[upstream.health]
timeout_ms = 5000
"#;
    assert_eq!(
        codes(src),
        vec![
            ("host.body.unexpected", "host[0].body".to_string()),
            (
                "route.path.notCanonical",
                "host[0].route[0].path".to_string()
            ),
            (
                "route.upstream.unknown",
                "host[0].route[0].upstream".to_string()
            ),
            (
                "limits.route.max_url_bytes.unexpected",
                "host[0].route[1].limits.max_url_bytes".to_string()
            ),
            ("upstream.servers.empty", "upstream[0].servers".to_string()),
            ("upstream.name.duplicate", "upstream[1].name".to_string()),
            (
                "upstream.server.invalid",
                "upstream[1].servers[0]".to_string()
            ),
            (
                "upstream.server.duplicate",
                "upstream[1].servers[2]".to_string()
            ),
            (
                "upstream.balance.invalid",
                "upstream[1].balance".to_string()
            ),
            (
                "upstream.health.timeout_ms.range",
                "upstream[1].health.timeout_ms".to_string()
            ),
        ]
    );
}
