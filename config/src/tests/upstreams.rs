use super::*;
use crate::identity::server_key;
use gapura_gate::upstream::{ActiveHealth, Balance, HostHeader, UpstreamProtocol};
use gapura_gate::{UpstreamGroup, UpstreamServer};
use std::net::SocketAddr;

/// A valid group on lines 1 to 3; tests append line 4 onwards.
const U: &str = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9001\"]\n";

fn server(group: &str, addr: &str, weight: u32) -> UpstreamServer {
    let addr: SocketAddr = addr.parse().unwrap();
    UpstreamServer {
        addr,
        name: None,
        weight,
        key: server_key(group, addr),
        health_slot: 0,
    }
}

fn only_group(src: &str) -> UpstreamGroup {
    let c = ok(src);
    assert_eq!(c.snapshot.upstreams.len(), 1);
    c.snapshot.upstreams.into_iter().next().unwrap()
}

#[test]
fn every_upstream_key_is_read() {
    let g = only_group(
        r#"
[[upstream]]
name = "app_2-x"
servers = ["10.0.0.1:80", { addr = "[fd00::1]:8080", weight = 1000 }, { addr = "10.0.0.2:81" }]
balance = "least_outstanding"
host_header = "app.internal:8080"
connect_timeout_ms = 1
response_header_timeout_ms = 600000
read_timeout_ms = 2500
max_idle_per_server = 0
idle_timeout_ms = 45000
max_connections_per_server = 7
max_queued_per_server = 0
queue_timeout_ms = 250
fail_threshold = 0
fail_cooldown_ms = 3600000
protocol = "h2"
h2_streams_per_connection = 10000
h2_connections_per_server = 1
[upstream.health]
path = "/healthz?full=1"
interval_ms = 100
timeout_ms = 99
expect_status = "204"
"#,
    );
    assert_eq!(
        g,
        UpstreamGroup {
            name: "app_2-x".into(),
            servers: vec![
                server("app_2-x", "10.0.0.1:80", 1),
                server("app_2-x", "[fd00::1]:8080", 1000),
                server("app_2-x", "10.0.0.2:81", 1),
            ],
            balance: Balance::LeastOutstanding,
            host_header: HostHeader::Rewrite("app.internal:8080".into()),
            connect_timeout_ms: 1,
            response_header_timeout_ms: 600_000,
            read_timeout_ms: 2500,
            max_idle_per_server: 0,
            idle_timeout_ms: 45_000,
            max_connections_per_server: 7,
            max_queued_per_server: 0,
            queue_timeout_ms: 250,
            fail_threshold: 0,
            fail_cooldown_ms: 3_600_000,
            active_health: Some(ActiveHealth {
                path: "/healthz?full=1".into(),
                interval_ms: 100,
                timeout_ms: 99,
                expect_status: (204, 204),
            }),
            tls: None,
            protocol: UpstreamProtocol::H2,
            h2_streams_per_connection: 10_000,
            h2_connections_per_server: 1,
        }
    );
}

#[test]
fn an_upstream_with_only_name_and_servers_takes_every_default() {
    assert_eq!(
        only_group(U),
        UpstreamGroup {
            name: "app".into(),
            servers: vec![server("app", "127.0.0.1:9001", 1)],
            balance: Balance::RoundRobin,
            host_header: HostHeader::PassThrough,
            connect_timeout_ms: 5000,
            response_header_timeout_ms: 60_000,
            read_timeout_ms: 60_000,
            max_idle_per_server: 1024,
            idle_timeout_ms: 30_000,
            max_connections_per_server: 1024,
            max_queued_per_server: 16_384,
            queue_timeout_ms: 5000,
            fail_threshold: 3,
            fail_cooldown_ms: 10_000,
            active_health: None,
            tls: None,
            protocol: UpstreamProtocol::Http1,
            h2_streams_per_connection: 100,
            h2_connections_per_server: 16,
        }
    );
    let g = only_group(&format!("{U}host_header = \"pass\"\n[upstream.health]\n"));
    assert_eq!(g.host_header, HostHeader::PassThrough);
    assert_eq!(
        g.active_health,
        Some(ActiveHealth {
            path: "/".into(),
            interval_ms: 2000,
            timeout_ms: 1000,
            expect_status: (200, 399),
        })
    );
}

#[test]
fn groups_keep_profile_order_and_unused_groups_are_fine() {
    let c = ok(r#"
[[upstream]]
name = "b"
servers = ["127.0.0.1:2"]
[[upstream]]
name = "a"
servers = ["127.0.0.1:1"]
"#);
    let names: Vec<&str> = c
        .snapshot
        .upstreams
        .iter()
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(names, ["b", "a"]);
}

#[test]
fn a_name_resolves_to_every_address_it_has_with_the_entry_weight() {
    let g = only_group(
        "[[upstream]]\nname = \"app\"\nservers = [{ addr = \"localhost:9003\", weight = 5 }]\n",
    );
    assert!(!g.servers.is_empty());
    for s in &g.servers {
        assert!(
            s.addr == "127.0.0.1:9003".parse().unwrap() || s.addr == "[::1]:9003".parse().unwrap(),
            "localhost resolved to {}",
            s.addr
        );
        assert_eq!(s.weight, 5);
        assert_eq!(s.key, server_key("app", s.addr));
        assert_eq!(s.health_slot, 0);
    }
    let mut addrs: Vec<SocketAddr> = g.servers.iter().map(|s| s.addr).collect();
    addrs.dedup();
    assert_eq!(addrs.len(), g.servers.len(), "no address twice");
}

#[test]
fn server_keys_are_pinned_across_releases() {
    // FNV-1a 64 over "app", 0xFF, 0x04, 127.0.0.1, port 9001 big-endian.
    let g = only_group(U);
    assert_eq!(g.servers[0].key, 0x6ad8_38f3_cbf7_bf93);
    assert_eq!(
        server_key("app", "[::1]:9002".parse().unwrap()),
        0x98ac_7fdb_00d9_3fd3
    );
}

#[test]
fn an_upstream_needs_a_valid_unique_name() {
    assert_eq!(
        one("\n[[upstream]]\nservers = [\"127.0.0.1:1\"]\n"),
        at("upstream.name.required", "upstream[0].name", 2, 1)
    );
    assert_eq!(
        one("[[upstream]]\nname = \"App\"\nservers = [\"127.0.0.1:1\"]\n"),
        at("upstream.name.invalid", "upstream[0].name", 2, 8)
    );
    for bad in ["", "a.b", "a b", "é", &"a".repeat(65)] {
        let src = format!("[[upstream]]\nname = {bad:?}\nservers = [\"127.0.0.1:1\"]\n");
        assert_eq!(one(&src).0, "upstream.name.invalid", "{bad:?}");
    }
    ok(&format!(
        "[[upstream]]\nname = \"{}\"\nservers = [\"127.0.0.1:1\"]\n",
        "a".repeat(64)
    ));
    let src = format!("{U}[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:2\"]\n");
    assert_eq!(
        one(&src),
        at("upstream.name.duplicate", "upstream[1].name", 5, 8)
    );
    assert_eq!(
        errors(&src)[0].message,
        "\"app\" is already the name of upstream[0]"
    );
}

#[test]
fn an_upstream_needs_servers() {
    assert_eq!(
        one("[[upstream]]\nname = \"app\"\n"),
        at("upstream.servers.empty", "upstream[0].servers", 1, 1)
    );
    assert_eq!(
        one("[[upstream]]\nname = \"app\"\nservers = []\n"),
        at("upstream.servers.empty", "upstream[0].servers", 3, 11)
    );
}

#[test]
fn invalid_server_addresses_point_at_the_address() {
    let src =
        "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1\", { addr = \"x:0\", weight = 2 }]\n";
    assert_eq!(
        errors(src).iter().map(key).collect::<Vec<_>>(),
        vec![
            at("upstream.server.invalid", "upstream[0].servers[0]", 3, 12),
            at(
                "upstream.server.invalid",
                "upstream[0].servers[1].addr",
                3,
                34
            ),
        ]
    );
    assert_eq!(
        errors(src)[0].message,
        "\"127.0.0.1\" needs a port: use IPv4:PORT, [IPv6]:PORT or NAME:PORT, such as \"127.0.0.1:9000\""
    );
    for bad in [
        "0.0.0.0:80",
        "[::]:80",
        "bad name:80",
        "[::1]",
        "http://a:80",
    ] {
        let src = format!("[[upstream]]\nname = \"app\"\nservers = [{bad:?}]\n");
        assert_eq!(one(&src).0, "upstream.server.invalid", "{bad:?}");
    }
}

#[test]
fn a_name_that_does_not_resolve_fails_the_profile() {
    let src =
        "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:1\", \"no-such-host.invalid:80\"]\n";
    assert_eq!(
        one(src),
        at(
            "upstream.server.unresolved",
            "upstream[0].servers[1]",
            3,
            27
        )
    );
    assert!(errors(src)[0]
        .message
        .starts_with("\"no-such-host.invalid\" did not resolve: "));
}

#[test]
fn a_server_reached_twice_in_a_group_is_a_duplicate() {
    let src = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:1\", { addr = \"127.0.0.1:1\", weight = 2 }]\n";
    assert_eq!(
        one(src),
        at(
            "upstream.server.duplicate",
            "upstream[0].servers[1].addr",
            3,
            36
        )
    );
    assert_eq!(
        errors(src)[0].message,
        "127.0.0.1:1 is already a server of this upstream, from upstream[0].servers[0]"
    );
    // localhost resolves to 127.0.0.1 (and ::1) with the tests' names.
    let src = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9003\", \"localhost:9003\"]\n";
    let e = errors(src);
    assert_eq!(
        e.iter().map(key).collect::<Vec<_>>(),
        vec![at(
            "upstream.server.duplicate",
            "upstream[0].servers[1]",
            3,
            30
        )]
    );
    assert!(e[0]
        .message
        .ends_with("(\"localhost:9003\" resolves to it)"));
    // The same address in two groups is two servers.
    ok(&format!(
        "{U}[[upstream]]\nname = \"other\"\nservers = [\"127.0.0.1:9001\"]\n"
    ));
}

#[test]
fn weights_are_one_to_a_thousand() {
    let src = "[[upstream]]\nname = \"app\"\nservers = [{ addr = \"127.0.0.1:1\", weight = 0 }]\n";
    assert_eq!(
        one(src),
        at(
            "upstream.server.weight.range",
            "upstream[0].servers[0].weight",
            3,
            45
        )
    );
    let src =
        "[[upstream]]\nname = \"app\"\nservers = [{ addr = \"127.0.0.1:1\", weight = 1001 }]\n";
    assert_eq!(
        errors(src)[0].message,
        "must be between 1 and 1000, got 1001"
    );
}

#[test]
fn server_tables_are_closed_and_need_an_address() {
    assert_eq!(
        one("[[upstream]]\nname = \"app\"\nservers = [{ addr = \"127.0.0.1:1\", wieght = 2 }]\n"),
        at(
            "profile.unknown_key",
            "upstream[0].servers[0].wieght",
            3,
            36
        )
    );
    assert_eq!(
        one("[[upstream]]\nname = \"app\"\nservers = [{ weight = 2 }]\n").0,
        "profile.type"
    );
    assert_eq!(
        one("[[upstream]]\nname = \"app\"\nservers = [9001]\n"),
        at("profile.type", "upstream[0].servers[0]", 3, 12)
    );
}

#[test]
fn each_numeric_upstream_field_has_its_range_code() {
    let cases: [(&str, &str, &str); 17] = [
        (
            "connect_timeout_ms",
            "0",
            "upstream.connect_timeout_ms.range",
        ),
        (
            "connect_timeout_ms",
            "600001",
            "upstream.connect_timeout_ms.range",
        ),
        (
            "response_header_timeout_ms",
            "0",
            "upstream.response_header_timeout_ms.range",
        ),
        (
            "read_timeout_ms",
            "600001",
            "upstream.read_timeout_ms.range",
        ),
        ("idle_timeout_ms", "0", "upstream.idle_timeout_ms.range"),
        (
            "max_idle_per_server",
            "-1",
            "upstream.max_idle_per_server.range",
        ),
        (
            "max_idle_per_server",
            "65537",
            "upstream.max_idle_per_server.range",
        ),
        ("fail_threshold", "-1", "upstream.fail_threshold.range"),
        ("fail_threshold", "1001", "upstream.fail_threshold.range"),
        ("fail_cooldown_ms", "0", "upstream.fail_cooldown_ms.range"),
        (
            "fail_cooldown_ms",
            "3600001",
            "upstream.fail_cooldown_ms.range",
        ),
        ("read_timeout_ms", "-5", "upstream.read_timeout_ms.range"),
        (
            "max_connections_per_server",
            "0",
            "upstream.max_connections_per_server.range",
        ),
        (
            "max_connections_per_server",
            "65537",
            "upstream.max_connections_per_server.range",
        ),
        (
            "max_queued_per_server",
            "-1",
            "upstream.max_queued_per_server.range",
        ),
        (
            "max_queued_per_server",
            "65537",
            "upstream.max_queued_per_server.range",
        ),
        ("queue_timeout_ms", "0", "upstream.queue_timeout_ms.range"),
    ];
    for (field, value, code) in cases {
        let src = format!("{U}{field} = {value}\n");
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&src),
            at(code, &format!("upstream[0].{field}"), 4, column),
            "{field} = {value}"
        );
    }
    let g = only_group(&format!(
        "{U}max_idle_per_server = 65536\nfail_threshold = 1000\nread_timeout_ms = 600000\n"
    ));
    assert_eq!(
        (g.max_idle_per_server, g.fail_threshold, g.read_timeout_ms),
        (65_536, 1000, 600_000)
    );
}

#[test]
fn the_idle_pool_and_the_queue_timeout_follow_their_bounds_when_unset() {
    // Unset, every connection a burst opened stays pooled (up to the
    // connection bound), and a request waits for one as long as it would
    // wait for a new one to be made.
    let g = only_group(&format!(
        "{U}max_connections_per_server = 300\nconnect_timeout_ms = 1500\n"
    ));
    assert_eq!(
        (
            g.max_connections_per_server,
            g.max_idle_per_server,
            g.queue_timeout_ms
        ),
        (300, 300, 1500)
    );
    let g = only_group(&format!(
        "{U}max_connections_per_server = 300\nmax_idle_per_server = 8\nqueue_timeout_ms = 20\n"
    ));
    assert_eq!((g.max_idle_per_server, g.queue_timeout_ms), (8, 20));
}

#[test]
fn balance_and_host_header_refuse_bad_values() {
    assert_eq!(
        one(&format!("{U}balance = \"random\"\n")),
        at("upstream.balance.invalid", "upstream[0].balance", 4, 11)
    );
    assert_eq!(
        one(&format!("{U}host_header = \"a b\"\n")),
        at(
            "upstream.host_header.invalid",
            "upstream[0].host_header",
            4,
            15
        )
    );
    for bad in ["", "app:0", "app:x", "*.app", "http://app", "app/x"] {
        let src = format!("{U}host_header = {bad:?}\n");
        assert_eq!(one(&src).0, "upstream.host_header.invalid", "{bad:?}");
    }
    let g = only_group(&format!("{U}host_header = \"[::1]:8080\"\n"));
    assert_eq!(g.host_header, HostHeader::Rewrite("[::1]:8080".into()));
}

#[test]
fn the_protocol_is_one_of_three_and_auto_needs_tls() {
    assert_eq!(
        one(&format!("{U}protocol = \"h3\"\n")),
        at("upstream.protocol.invalid", "upstream[0].protocol", 4, 12)
    );
    assert_eq!(
        one(&format!("{U}protocol = \"auto\"\n")),
        at(
            "upstream.protocol.auto_without_tls",
            "upstream[0].protocol",
            4,
            12
        )
    );
    // HTTP/2 without TLS is h2c by prior knowledge.
    let g = only_group(&format!("{U}protocol = \"h2\"\n"));
    assert_eq!(g.protocol, UpstreamProtocol::H2);
    for (field, bad) in [
        ("h2_streams_per_connection", 0),
        ("h2_streams_per_connection", 10_001),
        ("h2_connections_per_server", 0),
        ("h2_connections_per_server", 1_001),
    ] {
        let src = format!("{U}{field} = {bad}\n");
        assert_eq!(
            one(&src).0,
            format!("upstream.{field}.range"),
            "{field} {bad}"
        );
    }
}

#[test]
fn health_checks_refuse_bad_paths_intervals_and_statuses() {
    let h = format!("{U}[upstream.health]\n");
    assert_eq!(
        one(&format!("{h}path = \"healthz\"\n")),
        at(
            "upstream.health.path.invalid",
            "upstream[0].health.path",
            5,
            8
        )
    );
    assert_eq!(
        one(&format!("{h}path = \"/a b\"\n")).0,
        "upstream.health.path.invalid"
    );
    assert_eq!(
        one(&format!("{h}interval_ms = 99\n")),
        at(
            "upstream.health.interval_ms.range",
            "upstream[0].health.interval_ms",
            5,
            15
        )
    );
    assert_eq!(
        one(&format!("{h}timeout_ms = 60001\n")),
        at(
            "upstream.health.timeout_ms.range",
            "upstream[0].health.timeout_ms",
            5,
            14
        )
    );
    assert_eq!(
        one(&format!("{h}expect_status = \"399-200\"\n")),
        at(
            "upstream.health.expect_status.invalid",
            "upstream[0].health.expect_status",
            5,
            17
        )
    );
    assert_eq!(
        one(&format!("{h}expect_status = 600\n")).0,
        "upstream.health.expect_status.invalid"
    );
}

#[test]
fn a_health_timeout_must_be_shorter_than_the_interval() {
    let h = format!("{U}[upstream.health]\n");
    let src = format!("{h}interval_ms = 1000\ntimeout_ms = 1000\n");
    assert_eq!(
        one(&src),
        at(
            "upstream.health.timeout_ms.range",
            "upstream[0].health.timeout_ms",
            6,
            14
        )
    );
    assert_eq!(
        errors(&src)[0].message,
        "timeout_ms (1000) must be less than interval_ms (1000)"
    );
    // Against the default interval (2000), and a timeout defaulting to 1000.
    let src = format!("{h}timeout_ms = 2000\n");
    assert_eq!(
        errors(&src)[0].message,
        "timeout_ms (2000) must be less than interval_ms (2000, the default)"
    );
    assert_eq!(
        one(&format!("{h}interval_ms = 500\n")),
        at(
            "upstream.health.timeout_ms.range",
            "upstream[0].health.interval_ms",
            5,
            15
        )
    );
    // An interval out of range is reported once, not compared.
    assert_eq!(
        one(&format!("{h}interval_ms = 50\ntimeout_ms = 60\n")).0,
        "upstream.health.interval_ms.range"
    );
    ok(&format!("{h}interval_ms = 500\ntimeout_ms = 499\n"));
}

#[test]
fn an_upstream_holds_at_most_64_servers() {
    let servers: Vec<String> = (0..65)
        .map(|i| format!("\"127.0.0.1:{}\"", 9000 + i))
        .collect();
    let src = format!(
        "[[upstream]]\nname = \"big\"\nservers = [{}]\n",
        servers.join(", ")
    );
    assert_eq!(one(&src).0, "upstream.servers.tooMany");
    let src = src.replace(", \"127.0.0.1:9064\"", "");
    assert_eq!(ok(&src).snapshot.upstreams[0].servers.len(), 64);
}
