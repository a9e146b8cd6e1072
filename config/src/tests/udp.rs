//! `[[udp]]`: a relay compiles to the policy it says, divided per shard
//! where its scope says so; every error has its code, path and position.

use super::*;
use gapura_gate::quota::Budget;
use gapura_gate::upstream::Balance;

const RELAY: &str = r#"
[server]
listen = []
shards = 4

[[udp]]
name = "game"
listen = ["127.0.0.1:7000", "[::1]:7000"]
servers = ["127.0.0.1:7001", { addr = "127.0.0.1:7002", weight = 3 }]
balance = "least_outstanding"
max_datagram_bytes = 1200
session = { rate = 50, burst = 100, idle_timeout_ms = 30000, max_sessions = 4096, critical_reserve = 64 }
window_ms = 2000
global = { requests = 100000, optional = 80000 }
prefix = { requests = 500 }
tracked_keys = 1024
tracked_reserve = 16
operation = { offset = 18, bytes = 1 }
classes = [
  { name = "join", values = [1, 2], requests = 400, critical = true },
  { name = "state", values = [3], requests = 40000, scope = "per_shard" },
]
auth = { keys = ["/var/lib/gapura/game.key"], max_age_ms = 3000, replay_window = 2048, strip = false }
"#;

#[test]
fn a_relay_compiles_to_its_policy() {
    let c = compile_str(RELAY).unwrap();
    assert!(c.runtime.listen.is_empty(), "a UDP-only profile");
    assert_eq!(
        c.runtime.udp_listen,
        vec![
            "127.0.0.1:7000".parse().unwrap(),
            "[::1]:7000".parse().unwrap()
        ]
    );
    let p = &c.snapshot.udp[0];
    assert_eq!(p.name, "game");
    assert_eq!(p.servers.len(), 2);
    assert_eq!(p.servers[1].weight, 3);
    assert_eq!(p.balance, Balance::LeastOutstanding);
    assert_eq!(p.max_datagram_bytes, 1_200);
    let s = p.session;
    assert_eq!(s.idle_timeout_ms, 30_000);
    let rate = s.rate.unwrap();
    assert_eq!((rate.requests(), rate.burst()), (50, 100));
    assert_eq!(
        (s.ceiling.max_keys(), s.ceiling.critical_reserve()),
        (4_096, 64)
    );
    let b = p.budgets;
    assert_eq!(b.window_ms, 2_000);
    // Split over 4 shards; the prefix is exact.
    assert_eq!(b.global, Some(Budget::new(25_000, 20_000).unwrap()));
    assert_eq!(b.prefix, Some(Budget::flat(500).unwrap()));
    assert_eq!(
        (b.tracked.max_keys(), b.tracked.critical_reserve()),
        (1_024, 16)
    );
    let op = p.operation.unwrap();
    assert_eq!((op.offset, op.len), (18, 1));
    assert_eq!(p.classes.len(), 3);
    assert_eq!(p.classes[0].name, "other");
    assert_eq!(p.classes[1].values, vec![1, 2]);
    assert!(p.classes[1].critical);
    assert_eq!(p.classes[1].budget, Some(Budget::flat(100).unwrap()));
    assert_eq!(p.classes[2].budget, Some(Budget::flat(40_000).unwrap()));
    let env = p.envelope.as_ref().unwrap();
    assert_eq!(env.key_files, vec!["/var/lib/gapura/game.key".to_string()]);
    assert_eq!(
        (env.max_age_ms, env.replay_window, env.strip),
        (3_000, 2_048, false)
    );
}

#[test]
fn a_bare_relay_gets_protective_defaults() {
    let c = compile_str(
        r#"
[server]
shards = 2
[[udp]]
name = "voice"
listen = ["127.0.0.1:0"]
servers = ["localhost:9000"]
"#,
    )
    .unwrap();
    let p = &c.snapshot.udp[0];
    assert_eq!(p.servers.len(), 2, "localhost resolves to two addresses");
    assert_eq!(p.max_datagram_bytes, 1_472);
    let rate = p.session.rate.unwrap();
    assert_eq!((rate.requests(), rate.burst()), (100, 200));
    assert_eq!(p.session.ceiling.max_keys(), 16_384);
    assert_eq!(p.budgets.prefix, Some(Budget::flat(10_000).unwrap()));
    assert_eq!(p.budgets.global, Some(Budget::flat(500_000).unwrap()));
    assert!(p.operation.is_none());
    assert!(p.envelope.is_none());
    assert_eq!(c.runtime.listen.len(), 1, "the HTTP default listener stays");
}

#[test]
fn rate_zero_disables_the_session_bucket() {
    let c = compile_str(
        r#"
[[udp]]
name = "bench"
listen = ["127.0.0.1:0"]
servers = ["127.0.0.1:9000"]
session = { rate = 0 }
"#,
    )
    .unwrap();
    assert!(c.snapshot.udp[0].session.rate.is_none());
}

#[test]
fn udp_errors_have_codes_and_positions() {
    let base = "[[udp]]\nname = \"g\"\nservers = [\"127.0.0.1:9\"]\n";
    let case = |extra: &str| one(&format!("{base}{extra}"));
    assert_eq!(
        one("[[udp]]\nlisten = [\"127.0.0.1:1\"]\nservers = [\"127.0.0.1:9\"]\n"),
        at("udp.name.required", "udp[0].name", 1, 1)
    );
    assert_eq!(
        one("[[udp]]\nname = \"g\"\nlisten = [\"127.0.0.1:1\"]\n"),
        at("upstream.servers.empty", "udp[0].servers", 1, 1)
    );
    assert_eq!(case(""), at("udp.listen.empty", "udp[0].listen", 1, 1));
    assert_eq!(
        case("listen = [\"7000\"]"),
        at("udp.listen.invalid", "udp[0].listen[0]", 4, 11)
    );
    assert_eq!(
        case("listen = [\"127.0.0.1:7\", \"127.0.0.1:7\"]"),
        at("udp.listen.duplicate", "udp[0].listen[1]", 4, 26)
    );
    let l = "listen = [\"127.0.0.1:7\"]\n";
    let case = |extra: &str| one(&format!("{base}{l}{extra}"));
    assert_eq!(
        case("max_datagram_bytes = 70000"),
        at(
            "udp.max_datagram_bytes.range",
            "udp[0].max_datagram_bytes",
            5,
            22
        )
    );
    assert_eq!(
        case("session = { rate = -1 }"),
        at("udp.session.rate.range", "udp[0].session.rate", 5, 20)
    );
    assert_eq!(
        case("session = { burst = 0 }"),
        at("udp.session.burst.range", "udp[0].session.burst", 5, 21)
    );
    assert_eq!(
        case("session = { idle_timeout_ms = 5 }"),
        at(
            "udp.session.idle_timeout_ms.range",
            "udp[0].session.idle_timeout_ms",
            5,
            31
        )
    );
    assert_eq!(
        case("session = { max_sessions = 0 }"),
        at(
            "udp.session.max_sessions.range",
            "udp[0].session.max_sessions",
            5,
            28
        )
    );
    assert_eq!(
        case("session = { max_sessions = 8, critical_reserve = 8 }"),
        at(
            "udp.session.critical_reserve.range",
            "udp[0].session.critical_reserve",
            5,
            50
        )
    );
    assert_eq!(
        case("window_ms = 10"),
        at("quota.window_ms.range", "udp[0].window_ms", 5, 13)
    );
    assert_eq!(
        case("global = { requests = 0 }"),
        at("quota.requests.range", "udp[0].global.requests", 5, 23)
    );
    assert_eq!(
        case("prefix = { requests = 5, scope = \"split\" }"),
        at("udp.prefix.scope.unexpected", "udp[0].prefix.scope", 5, 34)
    );
    assert_eq!(
        case("operation = { bytes = 5 }"),
        at("udp.operation.bytes.range", "udp[0].operation.bytes", 5, 23)
    );
    assert_eq!(
        case("classes = [{ name = \"j\", values = [1] }]"),
        at("udp.classes.operation", "udp[0].classes", 5, 11)
    );
    let op = "operation = { offset = 0, bytes = 1 }\n";
    let case = |extra: &str| one(&format!("{base}{l}{op}{extra}"));
    assert_eq!(
        case("classes = [{ name = \"j\", values = [256] }]"),
        at(
            "udp.class.values.range",
            "udp[0].classes[0].values[0]",
            6,
            36
        )
    );
    assert_eq!(
        case("classes = [{ name = \"j\", values = [1] }, { name = \"k\", values = [1] }]"),
        at(
            "udp.class.values.duplicate",
            "udp[0].classes[1].values[0]",
            6,
            66
        )
    );
    assert_eq!(
        case("classes = [{ name = \"j\" }]"),
        at("udp.class.values.empty", "udp[0].classes[0].values", 6, 12)
    );
    assert_eq!(
        case("classes = [{ values = [1] }]"),
        at("udp.class.name.required", "udp[0].classes[0].name", 6, 12)
    );
    assert_eq!(
        case("auth = { keys = [] }"),
        at("udp.auth.keys.empty", "udp[0].auth.keys", 6, 17)
    );
    assert_eq!(
        case("auth = { keys = [\"k\"], replay_window = 100 }"),
        at(
            "udp.auth.replay_window.range",
            "udp[0].auth.replay_window",
            6,
            40
        )
    );
    assert_eq!(
        case("auth = { keys = [\"k\"], max_age_ms = 0 }"),
        at("udp.auth.max_age_ms.range", "udp[0].auth.max_age_ms", 6, 37)
    );
    assert_eq!(
        case("auth = { keys = [\"k\"], key_budget = 0 }"),
        at("udp.auth.key_budget.range", "udp[0].auth.key_budget", 6, 37)
    );
}

#[test]
fn relay_names_and_addresses_are_unique_across_relays() {
    let src = r#"
[[udp]]
name = "a"
listen = ["127.0.0.1:7000"]
servers = ["127.0.0.1:9"]
[[udp]]
name = "a"
listen = ["127.0.0.1:7000"]
servers = ["127.0.0.1:9"]
"#;
    assert_eq!(
        codes(src),
        vec![
            ("udp.name.duplicate", "udp[1].name".to_string()),
            ("udp.listen.duplicate", "udp[1].listen[0]".to_string()),
        ]
    );
}

#[test]
fn an_empty_http_listen_is_refused_without_relays() {
    assert_eq!(
        one("[server]\nlisten = []\n"),
        at("server.listen.empty", "server.listen", 2, 10)
    );
}
