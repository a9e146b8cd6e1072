//! `[fleet]` and `scope = "fleet"`.

use super::*;
use gapura_gate::quota::{Budget, RatePolicy};

const FLEET: &str =
    "[fleet]\nredis = \"redis://127.0.0.1:6379\"\nnodes_expected = 3\nkey_file = \"/etc/gapura/fleet.key\"\n";

#[test]
fn a_fleet_scoped_limit_holds_the_whole_limit_and_a_local_share() {
    let src = format!(
        "{FLEET}sync_ms = 50\nnode = \"edge-1\"\n\
         [[rate_limit]]\nname = \"client\"\nrequests = 300\nper = \"minute\"\nscope = \"fleet\"\n"
    );
    let c = ok_with(&src, 4);
    let f = c.runtime.fleet.as_ref().expect("[fleet] is read");
    assert_eq!(f.redis, (vec!["redis://127.0.0.1:6379".to_string()], false));
    assert_eq!((f.sync_ms, f.nodes_expected), (50, 3));
    assert_eq!(f.node.as_deref(), Some("edge-1"));
    let def = &c.snapshot.gate.rate_limits[0];
    // Every shard holds the whole limit against the fleet's count (a
    // client's address keeps it on one shard).
    assert_eq!(def.policy, RatePolicy::per_minute(300, 300).unwrap());
    let fleet = def.fleet.expect("fleet-scoped");
    assert_eq!(
        fleet.local_share,
        RatePolicy::per_minute(300, 300).unwrap().split(3).unwrap()
    );
}

#[test]
fn a_header_keyed_fleet_limit_shares_its_local_share_among_shards() {
    let src = format!(
        "{FLEET}[[rate_limit]]\nname = \"k\"\nrequests = 1200\nkey = \"header\"\n\
         header = \"x-api-key\"\nscope = \"fleet\"\n"
    );
    let c = ok_with(&src, 4);
    let fleet = c.snapshot.gate.rate_limits[0].fleet.unwrap();
    assert_eq!(
        fleet.local_share,
        RatePolicy::per_second(1200, 1200)
            .unwrap()
            .split(12)
            .unwrap()
    );
}

#[test]
fn a_cluster_is_a_list_of_addresses() {
    let c = ok("[fleet]\nredis = [\"redis://127.0.0.1:7000\", \"rediss://10.0.0.2:7001\"]\nnodes_expected = 2\npassword_file = \"/etc/gapura/redis.pw\"\n");
    let f = c.runtime.fleet.unwrap();
    assert!(f.redis.1, "a list is a cluster");
    assert_eq!(f.redis.0.len(), 2);
    assert_eq!(f.sync_ms, 100, "the default");
}

#[test]
fn limits_without_a_fleet_scope_are_unchanged() {
    let c = ok(&format!(
        "{FLEET}[[rate_limit]]\nname = \"r\"\nrequests = 10\n"
    ));
    assert_eq!(c.snapshot.gate.rate_limits[0].fleet, None);
}

#[test]
fn each_fleet_error_has_its_code_and_position() {
    assert_eq!(
        one("[[rate_limit]]\nname = \"r\"\nrequests = 10\nscope = \"fleet\"\n"),
        at("rate_limit.scope.fleet", "rate_limit[0].scope", 4, 9)
    );
    let cases = [
        (
            "redis = \"http://x:1\"\nnodes_expected = 3",
            "fleet.redis.invalid",
            "fleet.redis",
            2,
            9,
        ),
        (
            "redis = \"redis://:pw@x:1\"\nnodes_expected = 3",
            "fleet.redis.invalid",
            "fleet.redis",
            2,
            9,
        ),
        (
            "redis = [1]\nnodes_expected = 3",
            "fleet.redis.invalid",
            "fleet.redis",
            2,
            9,
        ),
        (
            "redis = 5\nnodes_expected = 3",
            "fleet.redis.invalid",
            "fleet.redis",
            2,
            9,
        ),
        (
            "redis = \"redis://x:1\"\nnodes_expected = 0",
            "fleet.nodes_expected.range",
            "fleet.nodes_expected",
            3,
            18,
        ),
        (
            "redis = \"redis://x:1\"\nnodes_expected = 3\nsync_ms = 5",
            "fleet.sync_ms.range",
            "fleet.sync_ms",
            4,
            11,
        ),
        (
            "redis = \"redis://x:1\"\nnodes_expected = 3\nshared_keys = 1",
            "fleet.shared_keys.range",
            "fleet.shared_keys",
            4,
            15,
        ),
        (
            "redis = \"redis://x:1\"\nnodes_expected = 3\nnode = \"a b\"",
            "fleet.node.invalid",
            "fleet.node",
            4,
            8,
        ),
        (
            "redis = \"redis://x:1\"\nnodes_expected = 3\npassword_file = \" \"",
            "fleet.password_file.invalid",
            "fleet.password_file",
            4,
            17,
        ),
    ];
    for (body, code, path, line, column) in cases {
        let src = format!("[fleet]\n{body}\nkey_file = \"/etc/gapura/fleet.key\"\n");
        assert_eq!(one(&src), at(code, path, line, column), "{body}");
    }
    let missing = codes("[fleet]\nsync_ms = 100\n");
    assert_eq!(
        missing,
        [
            ("fleet.redis.required", "fleet.redis".to_string()),
            (
                "fleet.nodes_expected.required",
                "fleet.nodes_expected".to_string()
            ),
            ("fleet.secret.required", "fleet.key_file".to_string()),
        ]
    );
    // A share the division takes under the slowest rate is refused at scope.
    assert_eq!(
        one(
            "[fleet]\nredis = \"redis://x:1\"\nnodes_expected = 5\nkey_file = \"/k\"\n\
             [[rate_limit]]\nname = \"r\"\nrequests = 1\nper = \"hour\"\nscope = \"fleet\"\n"
        ),
        at("rate_limit.rate.invalid", "rate_limit[0].scope", 9, 9)
    );
}

#[test]
fn fleet_scoped_budgets_hold_the_whole_budget_and_a_local_share() {
    let c = ok_with(
        &format!(
            "{FLEET}[quota.global]\nrequests = 9000\nconcurrent = 400\nscope = \"fleet\"\n\n\
             [quota.source]\nrequests = 300\nscope = \"fleet\"\n\n\
             [quota.identity]\nheader = \"authorization\"\nrequests = 600\nscope = \"fleet\"\n"
        ),
        2,
    );
    let q = &c.snapshot.gate.quota;
    let flat = |n| Some(Budget::flat(n).unwrap());
    // Every shard holds the whole budget against the fleet's count.
    assert_eq!(q.global, flat(9000));
    assert_eq!(q.source, flat(300));
    assert_eq!(q.identity, flat(600));
    // Alone: the node's share (3 nodes), and a shard's of it where the
    // key is not the steered source (2 shards).
    assert_eq!(q.fleet.global, flat(1500));
    assert_eq!(q.fleet.source, flat(100));
    assert_eq!(q.fleet.identity, flat(100));
    // Concurrency stays the node's, split among its shards.
    assert_eq!(q.leases.global, flat(200));
}

#[test]
fn identity_dimensions_are_shared_like_the_other_budgets_and_their_leases_stay_the_nodes() {
    let c = ok_with(
        &format!(
            "{FLEET}[quota.tenant]\nheader = \"x-t\"\nrequests = 6000\nconcurrent = 40\nscope = \"fleet\"\n\n\
             [quota.principal]\nheader = \"x-p\"\nrequests = 600\nscope = \"fleet\"\n\n\
             [quota.resource]\nrequests = 1200\nscope = \"fleet\"\n"
        ),
        2,
    );
    let q = &c.snapshot.gate.quota;
    let flat = |n| Some(Budget::flat(n).unwrap());
    assert_eq!(q.dims.tenant.requests, flat(6000));
    assert_eq!(q.dims.principal.requests, flat(600));
    assert_eq!(q.dims.resource, flat(1200));
    // Alone: a shard's part of the node's share (3 nodes, 2 shards).
    assert_eq!(q.fleet.tenant, flat(1000));
    assert_eq!(q.fleet.principal, flat(100));
    assert_eq!(q.fleet.resource, flat(200));
    assert_eq!(q.dims.tenant.concurrent, flat(20), "the node's, split");
}

#[test]
fn budgets_without_a_fleet_scope_are_not_shared() {
    let c = ok(&format!(
        "{FLEET}[quota.global]\nrequests = 9000\n\n[quota.source]\nrequests = 300\n"
    ));
    assert_eq!(
        c.snapshot.gate.quota.fleet,
        gapura_gate::quota::fleetwindow::FleetBudgets::default()
    );
}

#[test]
fn a_fleet_scoped_budget_needs_a_fleet() {
    assert_eq!(
        one("[quota.global]\nrequests = 10\nscope = \"fleet\"\n"),
        at("quota.scope.fleet", "quota.global.scope", 3, 9)
    );
    assert_eq!(
        one("[quota.source]\nrequests = 10\nscope = \"split\"\n"),
        at("quota.scope.invalid", "quota.source.scope", 3, 9)
    );
}

const RELAY: &str =
    "[[udp]]\nname = \"game\"\nlisten = [\"127.0.0.1:7000\"]\nservers = [\"127.0.0.1:7001\"]\n";

#[test]
fn a_relays_fleet_scoped_budgets_are_whole_per_shard_with_a_local_share() {
    let c = ok_with(
        &format!(
            "{FLEET}{RELAY}global = {{ requests = 9000, scope = \"fleet\" }}\n\
             prefix = {{ requests = 300, scope = \"fleet\" }}\n"
        ),
        2,
    );
    let b = &c.snapshot.udp[0].budgets;
    let flat = |n| Some(Budget::flat(n).unwrap());
    // Every shard holds the whole budget against the fleet's count.
    assert_eq!(b.global, flat(9000));
    assert_eq!(b.prefix, flat(300));
    // Alone: the node's share (3 nodes), and for the global budget a
    // shard's of it (2 shards); a prefix is steered to one shard.
    assert_eq!(b.fleet.global, flat(1500));
    assert_eq!(b.fleet.prefix, flat(100));
    assert!(b.fleet.any());
    assert_ne!(b.fleet.global_identity, b.fleet.prefix_identity);
}

#[test]
fn a_relays_budgets_without_a_fleet_scope_are_not_shared() {
    let c = ok_with(
        &format!("{FLEET}{RELAY}global = {{ requests = 9000 }}\nprefix = {{ requests = 300 }}\n"),
        2,
    );
    let b = &c.snapshot.udp[0].budgets;
    assert_eq!(b.global, Some(Budget::flat(4500).unwrap()), "split");
    assert!(!b.fleet.any());
}

#[test]
fn each_relay_fleet_scope_error_has_its_code_and_position() {
    assert_eq!(
        one(&format!(
            "{RELAY}global = {{ requests = 10, scope = \"fleet\" }}\n"
        )),
        at("quota.scope.fleet", "udp[0].global.scope", 5, 35)
    );
    assert_eq!(
        one(&format!(
            "{RELAY}prefix = {{ requests = 10, scope = \"fleet\" }}\n"
        )),
        at("quota.scope.fleet", "udp[0].prefix.scope", 5, 35)
    );
    assert_eq!(
        one(&format!(
            "{FLEET}{RELAY}prefix = {{ requests = 10, scope = \"per_shard\" }}\n"
        )),
        at("udp.prefix.scope.unexpected", "udp[0].prefix.scope", 9, 35)
    );
    assert_eq!(
        one(&format!(
            "{FLEET}{RELAY}global = {{ requests = 10, scope = \"fleets\" }}\n"
        )),
        at("quota.scope.invalid", "udp[0].global.scope", 9, 35)
    );
}

#[test]
fn a_redis_others_can_reach_is_warned_of() {
    let fleet_warnings = |src: &str| -> Vec<&'static str> {
        let c = ok(src);
        c.warnings
            .iter()
            .map(|w| w.code)
            .filter(|c| c.starts_with("fleet."))
            .collect()
    };
    assert_eq!(
        fleet_warnings(
            "[fleet]\nredis = \"redis://10.0.0.9:6379\"\nnodes_expected = 3\nkey_file = \"/k\"\n"
        ),
        ["fleet.redis.plaintext", "fleet.password_file.missing"]
    );
    assert!(fleet_warnings(
        "[fleet]\nredis = \"rediss://10.0.0.9:6379\"\nnodes_expected = 3\npassword_file = \"/p\"\n"
    )
    .is_empty());
    for local in [
        "redis://127.0.0.1:6379",
        "redis://localhost:6379",
        "redis://[::1]:6379",
    ] {
        assert!(
            fleet_warnings(&format!(
                "[fleet]\nredis = \"{local}\"\nnodes_expected = 3\nkey_file = \"/k\"\n"
            ))
            .is_empty(),
            "{local}"
        );
    }
}

#[test]
fn a_pulling_node_has_its_publisher_key_state_dir_and_bounds() {
    let key = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=";
    let c = ok(&format!(
        "{FLEET}profile = \"pull\"\npublisher_key = \"{key}\"\nprofile_poll_ms = 250\n"
    ));
    let p = c.runtime.fleet.unwrap().profile.expect("pulls");
    assert_eq!(p.publisher_key, key);
    assert_eq!(p.state_dir, "/var/lib/gapura/fleet");
    assert_eq!((p.poll_ms, p.max_bytes), (250, 1 << 20));
    let local = ok(&format!("{FLEET}profile = \"local\"\n"));
    assert_eq!(local.runtime.fleet.unwrap().profile, None);
}

#[test]
fn each_pull_setting_error_has_its_code_and_position() {
    assert_eq!(
        one(&format!("{FLEET}profile = \"push\"\n")),
        at("fleet.profile.invalid", "fleet.profile", 5, 11)
    );
    assert_eq!(
        one(&format!("{FLEET}profile = \"pull\"\n")),
        at("fleet.publisher_key.required", "fleet.publisher_key", 5, 11)
    );
    assert_eq!(
        one(&format!(
            "{FLEET}profile = \"pull\"\npublisher_key = \"abc\"\n"
        )),
        at("fleet.publisher_key.invalid", "fleet.publisher_key", 6, 17)
    );
    assert_eq!(
        one(&format!("{FLEET}profile_poll_ms = 5\n")),
        at(
            "fleet.profile_poll_ms.range",
            "fleet.profile_poll_ms",
            5,
            19
        )
    );
    assert_eq!(
        one(&format!("{FLEET}profile_max_bytes = 5\n")),
        at(
            "fleet.profile_max_bytes.range",
            "fleet.profile_max_bytes",
            5,
            21
        )
    );
}
