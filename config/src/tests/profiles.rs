use super::*;
use super::{compile_str, load_file};
use crate::{Driver, Shards, Steering, DEFAULT_PROFILE};
use gapura_gate::{ErrorStatus, HostAction, RequestLimits};
use std::path::Path;

const EXAMPLE: &str = include_str!("../../../profiles/example.toml");

#[test]
fn default_profile_serves_a_page_for_every_host_on_loopback() {
    let c = ok(DEFAULT_PROFILE);
    assert_eq!(c.runtime.listen, vec!["127.0.0.1:8080".parse().unwrap()]);
    assert_eq!(c.runtime.admin, Some("127.0.0.1:9090".parse().unwrap()));
    let hosts = &c.snapshot.hosts;
    assert_eq!(hosts.lookup(None), Some(0));
    assert_eq!(hosts.lookup(Some(b"anything.test")), Some(0));
    let HostAction::Respond(a) = &c.snapshot.entries[0].action else {
        panic!("the default host responds");
    };
    assert_eq!(a.status, 200);
    assert!(a
        .head()
        .starts_with(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"));
    let body = std::str::from_utf8(a.body()).unwrap();
    assert!(body.starts_with("Gapura is running.\n"), "{body}");
    for needle in [
        "gapura run --profile FILE",
        "/metrics",
        "profiles/example.toml",
    ] {
        assert!(body.contains(needle), "{needle}");
    }
}

#[test]
fn example_profile_compiles_with_every_layer() {
    let c = ok(EXAMPLE);
    let r = &c.runtime;
    assert_eq!(
        (r.shards, r.driver, r.steering),
        (Shards::Auto, Driver::Auto, Steering::Source)
    );
    assert_eq!(r.listen.len(), 2);
    assert_eq!(
        c.snapshot.server.unknown_host,
        ErrorStatus::MisdirectedRequest
    );
    let defaults = RequestLimits {
        max_body_bytes: 10 << 20,
        max_header_count: 64,
        max_header_bytes: 16 << 10,
        max_url_bytes: 4 << 10,
    };
    assert_eq!(c.snapshot.default_limits, defaults);

    let hosts = &c.snapshot.hosts;
    let limits =
        |name: &[u8]| c.snapshot.entries[hosts.lookup(Some(name)).unwrap() as usize].limits;
    assert_eq!(limits(b"example.com"), defaults);
    assert_eq!(
        limits(b"blog.example.com"),
        RequestLimits {
            max_body_bytes: 0,
            max_url_bytes: 1024,
            ..defaults
        }
    );
    assert_eq!(
        limits(b"upload.example.com"),
        RequestLimits {
            max_body_bytes: 1 << 30,
            max_url_bytes: 16 << 10,
            ..defaults
        }
    );
    assert_eq!(hosts.lookup(Some(b"nobody.org")), None);
    let kind = |name: &[u8]| match &c.snapshot.entries[hosts.lookup(Some(name)).unwrap() as usize]
        .action
    {
        HostAction::Respond(a) => a.status,
        HostAction::Redirect(r) => r.status,
        HostAction::Proxy(_) => 0,
    };
    assert_eq!(kind(b"www.example.com"), 200);
    assert_eq!(kind(b"blog.example.com"), 404);
    assert_eq!(kind(b"upload.example.com"), 202);
    assert_eq!(kind(b"a.example.net"), 308);
    assert_eq!(kind(b"old.example.com"), 302);
}

#[test]
fn example_proxy_host_routes_to_its_upstreams() {
    let c = ok(EXAMPLE);
    let id = c.snapshot.hosts.lookup(Some(b"app.example.com")).unwrap();
    let entry = &c.snapshot.entries[id as usize];
    let HostAction::Proxy(p) = &entry.action else {
        panic!("app.example.com is a proxy host");
    };
    let host = RequestLimits {
        max_body_bytes: 1 << 20,
        ..c.snapshot.default_limits
    };
    assert_eq!(entry.limits, host);
    let routes: Vec<(String, &str, bool, u64)> = p
        .routes
        .iter()
        .map(|r| {
            (
                format!("{:?}", r.matcher),
                c.snapshot.upstreams[r.upstream as usize].name.as_str(),
                r.websocket,
                r.limits.max_body_bytes,
            )
        })
        .collect();
    assert_eq!(
        routes,
        vec![
            ("Prefix(\"/\")".to_string(), "app", false, 1 << 20),
            ("Prefix(\"/api\")".to_string(), "app", false, 1 << 20),
            ("Exact(\"/ws\")".to_string(), "app", true, 1 << 20),
            ("Prefix(\"/assets\")".to_string(), "static", false, 1 << 20),
            ("Prefix(\"/upload\")".to_string(), "app", false, 1 << 30),
        ]
    );
    assert_eq!(p.routes[4].limits.max_url_bytes, host.max_url_bytes);
    let app = &c.snapshot.upstreams[0];
    let addrs: Vec<String> = app.servers.iter().map(|s| s.addr.to_string()).collect();
    assert_eq!(addrs[..2], ["127.0.0.1:9001", "[::1]:9002"]);
    // localhost:9003 gives one or two more servers.
    assert!(
        addrs[2..] == ["127.0.0.1:9003"]
            || addrs[2..] == ["[::1]:9003"]
            || addrs[2..] == ["127.0.0.1:9003", "[::1]:9003"]
            || addrs[2..] == ["[::1]:9003", "127.0.0.1:9003"],
        "{addrs:?}"
    );
    assert_eq!(app.servers[1].weight, 3);
    assert_eq!(
        app.active_health
            .as_ref()
            .map(|h| (h.interval_ms, h.timeout_ms)),
        Some((1000, 500))
    );
    assert_eq!(c.snapshot.upstreams[1].name, "static");
}

#[test]
fn unreadable_file_is_a_read_error_without_position() {
    let e = load_file(Path::new("/nonexistent/gapura/profile.toml")).unwrap_err();
    assert_eq!(e.len(), 1);
    assert_eq!(key(&e[0]), at("profile.read", "", 0, 0));
    assert!(e[0]
        .message
        .starts_with("cannot read /nonexistent/gapura/profile.toml: "));
}

#[test]
fn load_file_compiles_the_shipped_profiles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("profiles");
    for name in ["default.toml", "example.toml"] {
        if let Err(e) = load_file(&root.join(name)) {
            panic!("{name}: {e:#?}");
        }
    }
}

/// The profile the README's load command runs: every protection off, so
/// a load tester on one machine is answered, never refused, and no lane
/// step stands between it and the answer.
#[test]
fn the_measuring_profile_has_no_limit_a_load_tester_meets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("profiles");
    let c = match load_file(&root.join("measure.toml")) {
        Ok(c) => c,
        Err(e) => panic!("measure.toml: {e:#?}"),
    };
    let s = &c.snapshot;
    assert!(!s.gate.has_budgets());
    let entry = &s.entries[0];
    assert!(gapura_gate::chain::quiet_host(s, entry), "every block off");
}

#[test]
fn truncated_and_mangled_profiles_give_errors_not_panics() {
    for (i, _) in EXAMPLE.char_indices().step_by(5) {
        let _ = compile_str(&EXAMPLE[..i]);
        let mangled: String = EXAMPLE[..i]
            .chars()
            .chain("\u{0}]\"=[".chars())
            .chain(EXAMPLE[i..].chars())
            .collect();
        let _ = compile_str(&mangled);
    }
}
