use super::*;
use crate::{ClientRing, Driver, Shards, Steering};
use gapura_gate::ErrorStatus;
use std::net::SocketAddr;

#[test]
fn empty_profile_compiles_with_every_default() {
    let c = ok("");
    assert_eq!(c.runtime, crate::RuntimeSettings::default());
    assert_eq!(
        c.runtime.listen,
        vec!["127.0.0.1:8080".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(c.runtime.admin, Some("127.0.0.1:9090".parse().unwrap()));
    assert_eq!(c.runtime.drain_timeout_ms, 10_000);
    assert_eq!(c.snapshot.server, gapura_gate::ServerSettings::default());
    assert_eq!(c.snapshot.generation, 0);
    assert!(c.snapshot.entries.is_empty());
    assert_eq!(c.snapshot.hosts.lookup(Some(b"example.com")), None);
}

#[test]
fn every_server_key_is_read() {
    let c = ok(r#"
[server]
shards = 4
driver = "epoll"
ring = "on"
steering = "kernel"
listen = ["127.0.0.1:0", "[::1]:8081"]
admin = "off"
drain_timeout_ms = 0
header_timeout_ms = 1
idle_timeout_ms = 3600000
body_timeout_ms = 5000
write_timeout_ms = 6000
max_requests_per_connection = 1000
max_connections_per_shard = 1048576
unknown_host = 421
"#);
    assert_eq!(c.runtime.shards, Shards::Count(4));
    assert_eq!(c.runtime.driver, Driver::Epoll);
    assert_eq!(c.runtime.ring, ClientRing::On);
    assert_eq!(c.runtime.steering, Steering::Kernel);
    assert_eq!(
        c.runtime.listen,
        vec![
            "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
            "[::1]:8081".parse().unwrap()
        ]
    );
    assert_eq!(c.runtime.admin, None);
    assert_eq!(c.runtime.drain_timeout_ms, 0);
    let s = &c.snapshot.server;
    assert_eq!(s.header_timeout_ms, 1);
    assert_eq!(s.idle_timeout_ms, 3_600_000);
    assert_eq!(s.body_timeout_ms, 5000);
    assert_eq!(s.write_timeout_ms, 6000);
    assert_eq!(s.max_requests_per_connection, 1000);
    assert_eq!(s.max_connections_per_shard, 1_048_576);
    assert_eq!(s.unknown_host, ErrorStatus::MisdirectedRequest);
}

#[test]
fn word_settings_accept_their_other_values() {
    let c = ok("[server]\nshards = \"auto\"\ndriver = \"io_uring\"\nsteering = \"source\"\n");
    assert_eq!(c.runtime.shards, Shards::Auto);
    assert_eq!(c.runtime.driver, Driver::IoUring);
    assert_eq!(c.runtime.steering, Steering::Source);
    assert_eq!(ok("server.driver = \"auto\"").runtime.driver, Driver::Auto);
    assert_eq!(ok("server.ring = \"off\"").runtime.ring, ClientRing::Off);
    assert_eq!(ok("").runtime.ring, ClientRing::Off);
}

#[test]
fn shards_must_be_auto_or_a_count_in_range() {
    assert_eq!(
        one("[server]\nshards = \"many\"\n"),
        at("server.shards.invalid", "server.shards", 2, 10)
    );
    assert_eq!(
        one("[server]\nshards = 0\n"),
        at("server.shards.range", "server.shards", 2, 10)
    );
    assert_eq!(
        one("[server]\nshards = 1025\n"),
        at("server.shards.range", "server.shards", 2, 10)
    );
    assert_eq!(
        ok("[server]\nshards = 1024\n").runtime.shards,
        Shards::Count(1024)
    );
}

#[test]
fn driver_and_steering_refuse_unknown_words() {
    assert_eq!(
        one("[server]\ndriver = \"kqueue\"\n"),
        at("server.driver.invalid", "server.driver", 2, 10)
    );
    assert_eq!(
        one("[server]\nsteering = \"random\"\n"),
        at("server.steering.invalid", "server.steering", 2, 12)
    );
    assert_eq!(
        one("[server]\nring = \"auto\"\n"),
        at("server.ring.invalid", "server.ring", 2, 8)
    );
    let e = errors("[server]\ndriver = \"IO_URING\"\n");
    assert_eq!(
        e[0].message,
        "must be one of \"auto\", \"io_uring\", \"epoll\", got \"IO_URING\""
    );
}

#[test]
fn listen_must_be_a_non_empty_list_of_distinct_addresses() {
    assert_eq!(
        one("[server]\nlisten = []\n"),
        at("server.listen.empty", "server.listen", 2, 10)
    );
    assert_eq!(
        one("[server]\nlisten = [\"127.0.0.1:8080\", \"localhost:80\"]\n"),
        at("server.listen.invalid", "server.listen[1]", 2, 29)
    );
    assert_eq!(
        one("[server]\nlisten = [\"127.0.0.1:8080\", \"127.0.0.1:8080\"]\n"),
        at("server.listen.duplicate", "server.listen[1]", 2, 29)
    );
    let e = errors("[server]\nlisten = [\"127.0.0.1:8080\", \"127.0.0.1:8080\"]\n");
    assert_eq!(
        e[0].message,
        "127.0.0.1:8080 is already listed at server.listen[0]"
    );
}

#[test]
fn ephemeral_ports_are_never_duplicates_or_conflicts() {
    let c = ok("[server]\nlisten = [\"127.0.0.1:0\", \"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n");
    assert_eq!(c.runtime.listen.len(), 2);
    assert_eq!(c.runtime.admin, Some("127.0.0.1:0".parse().unwrap()));
}

#[test]
fn admin_must_be_an_address_or_off_and_not_a_listen_address() {
    assert_eq!(
        one("[server]\nadmin = \"on\"\n"),
        at("server.admin.invalid", "server.admin", 2, 9)
    );
    assert_eq!(
        one("[server]\nlisten = [\"127.0.0.1:7000\"]\nadmin = \"127.0.0.1:7000\"\n"),
        at("server.admin.conflict", "server.admin", 3, 9)
    );
    assert_eq!(
        ok("[server]\nadmin = \"[::1]:9191\"\n").runtime.admin,
        Some("[::1]:9191".parse().unwrap())
    );
}

#[test]
fn default_admin_address_conflict_points_at_the_listen_entry() {
    assert_eq!(
        one("[server]\nlisten = [\"127.0.0.1:8080\", \"127.0.0.1:9090\"]\n"),
        at("server.admin.conflict", "server.admin", 2, 29)
    );
    let e = errors("[server]\nlisten = [\"nowhere\", \"127.0.0.1:9090\"]\n");
    assert_eq!(
        key(&e[1]),
        at("server.admin.conflict", "server.admin", 2, 22)
    );
    assert_eq!(
        e[1].message,
        "the admin listener's default address 127.0.0.1:9090 is also listed in server.listen[1]; \
         set server.admin to another address or \"off\""
    );
}

#[test]
fn each_numeric_server_field_has_its_range_code() {
    let cases: [(&str, &str, &str); 7] = [
        (
            "drain_timeout_ms",
            "600001",
            "server.drain_timeout_ms.range",
        ),
        ("header_timeout_ms", "0", "server.header_timeout_ms.range"),
        ("idle_timeout_ms", "3600001", "server.idle_timeout_ms.range"),
        ("body_timeout_ms", "-1", "server.body_timeout_ms.range"),
        ("write_timeout_ms", "0", "server.write_timeout_ms.range"),
        (
            "max_requests_per_connection",
            "-5",
            "server.max_requests_per_connection.range",
        ),
        (
            "max_connections_per_shard",
            "0",
            "server.max_connections_per_shard.range",
        ),
    ];
    for (field, value, code) in cases {
        let src = format!("[server]\n{field} = {value}\n");
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&src),
            at(code, &format!("server.{field}"), 2, column),
            "{field}"
        );
    }
    let e = errors("[server]\nheader_timeout_ms = 0\n");
    assert_eq!(e[0].message, "must be between 1 and 3600000, got 0");
}

#[test]
fn unknown_host_status_is_404_or_421() {
    assert_eq!(
        one("[server]\nunknown_host = 403\n"),
        at("server.unknown_host.invalid", "server.unknown_host", 2, 16)
    );
    assert_eq!(
        ok("[server]\nunknown_host = 404\n")
            .snapshot
            .server
            .unknown_host,
        ErrorStatus::NotFound
    );
}

#[test]
fn the_access_log_needs_a_path_and_known_choices() {
    let c = ok("[server]\naccess_log = { path = \"/tmp/a.log\", format = \"combined\", log_addresses = \"hash\", log_query = true }\n");
    let a = c.snapshot.server.access_log.as_ref().unwrap();
    assert_eq!(a.path, "/tmp/a.log");
    assert_eq!(a.format, gapura_gate::snapshot::LogFormat::Combined);
    assert!(a.hash_addresses && a.log_query);
    assert!(ok("").snapshot.server.access_log.is_none());
    assert_eq!(
        one("[server]\naccess_log = { format = \"json\" }\n"),
        at(
            "server.access_log.path.required",
            "server.access_log.path",
            2,
            14
        )
    );
    assert_eq!(
        one("[server]\naccess_log = { path = \"a\", format = \"xml\" }\n"),
        at(
            "server.access_log.format.invalid",
            "server.access_log.format",
            2,
            37
        )
    );
}

#[test]
fn the_user_to_drop_to_is_a_user_name() {
    assert_eq!(ok("").runtime.user, None);
    assert_eq!(
        ok("[server]\nuser = \"gapura\"\n").runtime.user.as_deref(),
        Some("gapura")
    );
    assert_eq!(
        ok("[server]\nuser = \"_www-data9\"\n")
            .runtime
            .user
            .as_deref(),
        Some("_www-data9")
    );
    for bad in ["", "Root", "9lives", "a b", "a/b", &"a".repeat(33)] {
        assert_eq!(
            one(&format!("[server]\nuser = \"{bad}\"\n")),
            at("server.user.invalid", "server.user", 2, 8),
            "{bad:?}"
        );
    }
}

#[test]
fn an_admin_listener_beyond_loopback_needs_a_token() {
    assert_eq!(
        one("[server]\nadmin = \"0.0.0.0:9090\"\n"),
        at("server.admin.token_required", "server.admin", 2, 9)
    );
    let c =
        ok("[server]\nadmin = \"0.0.0.0:9090\"\nadmin_token_file = \"/etc/gapura/admin.token\"\n");
    assert_eq!(
        c.runtime.admin_token_file.as_deref(),
        Some("/etc/gapura/admin.token")
    );
    // Loopback needs none, and may have one.
    assert_eq!(
        ok("[server]\nadmin = \"127.0.0.1:9090\"\n")
            .runtime
            .admin_token_file,
        None
    );
    assert_eq!(
        one("[server]\nadmin_token_file = \" \"\n"),
        at(
            "server.admin_token_file.invalid",
            "server.admin_token_file",
            2,
            20
        )
    );
}
