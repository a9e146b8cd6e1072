use super::*;
use gapura_gate::mode::Mode;
use gapura_gate::policy::{default_quota_sizes, RequestPolicy};
use gapura_gate::quota::{Budget, Ceiling, LeaseLimits, OperationLimits, QuotaLimits, QuotaSizes};

const HOST: &str = "[[host]]\nnames = [\"a.test\"]\n";

fn budget(limit: u32, normal: u32) -> Option<Budget> {
    Some(Budget::new(limit, normal).unwrap())
}

#[test]
fn a_profile_without_quota_keys_compiles_to_no_budgets_and_builtin_sizes() {
    let c = ok(HOST);
    let g = &c.snapshot.gate;
    assert_eq!(g.quota, QuotaLimits::default());
    assert!(!g.has_budgets());
    assert!(!g.uses_clock());
    // The tracked-key tables are sized from the machine's memory (8 GiB
    // over 2 shards: 262,144 keys a shard, 1/16 reserved); the rest are the
    // built-in sizes.
    let sized = Ceiling::new(262_144, 16_384).unwrap();
    assert_eq!(
        g.quota_sizes,
        QuotaSizes {
            window_keys: sized,
            lease_keys: sized,
            ..default_quota_sizes()
        }
    );
    assert_eq!(g.quota_mode, Mode::Enforce);
    assert_eq!(g.identity_header, None);
    assert!(g.operations.is_empty());
    assert!(g.rate_limits.is_empty());
    assert!(g.rate_pairs.is_empty());
    assert_eq!(c.snapshot.entries[0].policy, RequestPolicy::default());
    assert!(c.runtime.proxy_protocol.is_empty());
}

#[test]
fn sizes_compile_into_the_shard_tables() {
    let c = ok(r#"
[quota]
rate_table_entries = 1024
policy_slots = 16
slot_grace_ms = 0
window_ms = 100
tracked_keys = 1000
critical_reserve = 10
lease_tracked_keys = 64
lease_critical_reserve = 0
max_leases = 32
mode = "shadow"
"#);
    let g = &c.snapshot.gate;
    assert_eq!(
        g.quota_sizes,
        QuotaSizes {
            rate_entries: 1024,
            policy_slots: 16,
            slot_grace_ms: 0,
            window_ms: 100,
            window_keys: Ceiling::new(1000, 10).unwrap(),
            lease_keys: Ceiling::new(64, 0).unwrap(),
            max_leases: 32,
            operations: 64,
        }
    );
    assert_eq!(g.quota_mode, Mode::Shadow);
    // The tables can be built from what the profile accepted.
    assert!(gapura_gate::quota::Quota::new(&g.quota_sizes).is_ok());
    let c = ok(
        "[quota]\nrate_table_entries = 16777216\ntracked_keys = 8388608\nmax_leases = 16777216\n",
    );
    assert_eq!(c.snapshot.gate.quota_sizes.rate_entries, 1 << 24);
}

#[test]
fn a_written_tracked_keys_reserves_a_sixteenth_by_default() {
    let c = ok("[quota]\ntracked_keys = 1600\nlease_tracked_keys = 15\n");
    let s = c.snapshot.gate.quota_sizes;
    assert_eq!(s.window_keys, Ceiling::new(1600, 100).unwrap());
    assert_eq!(s.lease_keys, Ceiling::new(15, 0).unwrap());
    // Only a reserve: the built-in ceiling stays.
    let c = ok("[quota]\ncritical_reserve = 0\n");
    assert_eq!(
        c.snapshot.gate.quota_sizes.window_keys,
        Ceiling::new(65_536, 0).unwrap()
    );
}

#[test]
fn each_size_refuses_values_out_of_range() {
    let cases: [(&str, &str, &str); 17] = [
        (
            "rate_table_entries",
            "512",
            "quota.rate_table_entries.range",
        ),
        (
            "rate_table_entries",
            "3000",
            "quota.rate_table_entries.range",
        ),
        (
            "rate_table_entries",
            "33554432",
            "quota.rate_table_entries.range",
        ),
        ("policy_slots", "0", "quota.policy_slots.range"),
        ("policy_slots", "65536", "quota.policy_slots.range"),
        ("slot_grace_ms", "-1", "quota.slot_grace_ms.range"),
        ("slot_grace_ms", "3600001", "quota.slot_grace_ms.range"),
        ("window_ms", "99", "quota.window_ms.range"),
        ("window_ms", "3600001", "quota.window_ms.range"),
        ("tracked_keys", "0", "quota.tracked_keys.range"),
        ("tracked_keys", "8388609", "quota.tracked_keys.range"),
        ("lease_tracked_keys", "0", "quota.tracked_keys.range"),
        ("critical_reserve", "65536", "quota.critical_reserve.range"),
        (
            "lease_critical_reserve",
            "-1",
            "quota.critical_reserve.range",
        ),
        ("max_leases", "0", "quota.max_leases.range"),
        ("max_leases", "16777217", "quota.max_leases.range"),
        ("mode", "\"off\"", "quota.mode.invalid"),
    ];
    for (field, value, code) in cases {
        let src = format!("[quota]\n{field} = {value}\n");
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&src),
            at(code, &format!("quota.{field}"), 2, column),
            "{field} = {value}"
        );
    }
    let e = errors("[quota]\nrate_table_entries = 3000\n");
    assert_eq!(
        e[0].message,
        "must be a power of two between 1024 and 16777216, got 3000"
    );
    let e = errors("[quota]\ntracked_keys = 100\ncritical_reserve = 100\n");
    assert_eq!(
        (e[0].code, e[0].line, e[0].message.as_str()),
        (
            "quota.critical_reserve.range",
            3,
            "must be at least 0 and less than quota.tracked_keys (100), got 100"
        )
    );
}

const BUDGETS: &str = r#"
[quota.global]
requests = 100
optional = 80
concurrent = 10
concurrent_optional = 7
scope = "split"

[quota.source]
requests = 2000
optional = 1600
concurrent = 128
concurrent_optional = 100

[quota.health]
requests = 100

[quota.identity]
header = "Authorization"
requests = 600
optional = 500

[[quota.operation]]
name = "login"
requests = 200
concurrent = 16

[[quota.operation]]
name = "export"
requests = 3
optional = 2
scope = "per_shard"
"#;

#[test]
fn budgets_compile_per_shard_split_over_two_and_four_shards() {
    // Source and health budgets are steered: never divided.
    let source = budget(2000, 1600);
    let source_leases = budget(128, 100);
    let health = budget(100, 100);
    let export = OperationLimits {
        requests: budget(3, 2),
        concurrent: None,
    };
    for (cores, global, leases, identity, login) in [
        (1, (100, 80), (10, 7), (600, 500), (200, 16)),
        (2, (50, 40), (5, 3), (300, 250), (100, 8)),
        (4, (25, 20), (2, 1), (150, 125), (50, 4)),
    ] {
        let c = ok_with(BUDGETS, cores);
        let g = &c.snapshot.gate;
        assert_eq!(
            g.quota,
            QuotaLimits {
                global: budget(global.0, global.1),
                source,
                health,
                identity: budget(identity.0, identity.1),
                operations: vec![
                    OperationLimits {
                        requests: budget(login.0, login.0),
                        concurrent: budget(login.1, login.1),
                    },
                    export,
                ]
                .into_boxed_slice(),
                leases: LeaseLimits {
                    global: budget(leases.0, leases.1),
                    per_key: source_leases,
                },
                fleet: Default::default(),
                dims: Default::default(),
            },
            "{cores} cores"
        );
        assert_eq!(g.identity_header.as_deref(), Some("authorization"));
        assert_eq!(g.operations, ["login", "export"]);
        assert!(g.has_budgets());
    }
}

#[test]
fn a_fixed_shard_count_overrides_the_cores_and_splits_clamp_at_one() {
    let src = format!("[server]\nshards = 2\n{BUDGETS}");
    let c = ok_with(&src, 8);
    assert_eq!(c.snapshot.gate.quota.global, budget(50, 40));
    let c = ok_with("[quota.global]\nrequests = 3\nconcurrent = 1\n", 4);
    let g = &c.snapshot.gate.quota;
    assert_eq!(g.global, budget(1, 1));
    assert_eq!(g.leases.global, budget(1, 1));
    let c = ok_with("[quota.global]\nrequests = 100\nscope = \"per_shard\"\n", 4);
    assert_eq!(c.snapshot.gate.quota.global, budget(100, 100));
}

#[test]
fn budget_bounds_and_their_codes() {
    assert_eq!(
        one("[quota.global]\nrequests = 0\n"),
        at("quota.requests.range", "quota.global.requests", 2, 12)
    );
    assert_eq!(
        one("[quota.source]\nrequests = 4294967296\n"),
        at("quota.requests.range", "quota.source.requests", 2, 12)
    );
    assert_eq!(
        one("[quota.health]\nrequests = -5\n"),
        at("quota.requests.range", "quota.health.requests", 2, 12)
    );
    assert_eq!(
        one("[quota.global]\nrequests = 100\noptional = 101\n"),
        at("quota.optional.range", "quota.global.optional", 3, 12)
    );
    assert_eq!(
        one("[quota.identity]\nheader = \"x-key\"\nrequests = 10\noptional = 0\n"),
        at("quota.optional.range", "quota.identity.optional", 4, 12)
    );
    assert_eq!(
        one("[quota]\nmax_leases = 8\n[quota.global]\nconcurrent = 9\n"),
        at("quota.concurrent.range", "quota.global.concurrent", 4, 14)
    );
    assert_eq!(
        one("[quota.source]\nconcurrent = 16385\n"),
        at("quota.concurrent.range", "quota.source.concurrent", 2, 14)
    );
    assert_eq!(
        one("[quota.global]\nconcurrent = 4\nconcurrent_optional = 5\n"),
        at(
            "quota.optional.range",
            "quota.global.concurrent_optional",
            3,
            23
        )
    );
    assert_eq!(
        one("[quota.global]\noptional = 5\n"),
        at("quota.optional.unexpected", "quota.global.optional", 2, 12)
    );
    assert_eq!(
        one("[quota.source]\nconcurrent_optional = 3\n"),
        at(
            "quota.optional.unexpected",
            "quota.source.concurrent_optional",
            2,
            23
        )
    );
    assert_eq!(
        one("[quota.global]\nscope = \"global\"\n"),
        at("quota.scope.invalid", "quota.global.scope", 2, 9)
    );
    assert_eq!(
        one("[quota.identity]\nheader = \"k\"\nrequests = 1\nscope = \"all\"\n"),
        at("quota.scope.invalid", "quota.identity.scope", 4, 9)
    );
    let e = errors("[quota.global]\nrequests = 100\noptional = 101\n");
    assert_eq!(
        e[0].message,
        "must be between 1 and requests (100), got 101"
    );
    let e = errors("[quota]\nmax_leases = 8\n[quota.global]\nconcurrent = 9\n");
    assert_eq!(
        e[0].message,
        "must be between 1 and 8 (quota.max_leases), got 9"
    );
}

#[test]
fn a_source_budget_is_not_split_and_health_has_no_scope_or_optional() {
    assert_eq!(
        one("[quota.source]\nrequests = 1\nscope = \"split\"\n"),
        at("quota.scope.invalid", "quota.source.scope", 3, 9)
    );
    assert_eq!(
        one("[quota.health]\nrequests = 2\nscope = \"per_shard\"\n"),
        at("profile.unknown_key", "quota.health.scope", 3, 1)
    );
    assert_eq!(
        one("[quota.health]\nrequests = 2\noptional = 1\n"),
        at("profile.unknown_key", "quota.health.optional", 3, 1)
    );
}

#[test]
fn an_identity_budget_needs_a_valid_header_and_requests() {
    assert_eq!(
        one("[quota.identity]\nheader = \"x key\"\nrequests = 5\n"),
        at(
            "quota.identity.header.invalid",
            "quota.identity.header",
            2,
            10
        )
    );
    assert_eq!(
        one("[quota.identity]\nrequests = 5\n"),
        at(
            "quota.identity.header.required",
            "quota.identity.header",
            2,
            12
        )
    );
    assert_eq!(
        one("[quota.identity]\nheader = \"x-key\"\n"),
        at(
            "quota.identity.requests.required",
            "quota.identity.requests",
            2,
            10
        )
    );
}

#[test]
fn operations_need_unique_valid_names_and_at_most_sixty_four() {
    assert_eq!(
        one("[[quota.operation]]\nrequests = 5\n"),
        at(
            "quota.operation.name.required",
            "quota.operation[0].name",
            1,
            1
        )
    );
    assert_eq!(
        one("[[quota.operation]]\nname = \"Login\"\n"),
        at(
            "quota.operation.name.invalid",
            "quota.operation[0].name",
            2,
            8
        )
    );
    assert_eq!(
        one("[[quota.operation]]\nname = \"a\"\n[[quota.operation]]\nname = \"a\"\n"),
        at(
            "quota.operation.name.duplicate",
            "quota.operation[1].name",
            4,
            8
        )
    );
    let e = errors("[[quota.operation]]\nname = \"a\"\n[[quota.operation]]\nname = \"a\"\n");
    assert_eq!(
        e[0].message,
        "\"a\" is already the name of quota.operation[0]"
    );
    assert_eq!(
        one("[[quota.operation]]\nname = \"login\"\nrequests = 10\nscope = \"all\"\n"),
        at("quota.scope.invalid", "quota.operation[0].scope", 4, 9)
    );
    let many: String = (0..65)
        .map(|i| format!("[[quota.operation]]\nname = \"op{i}\"\n"))
        .collect();
    assert_eq!(
        one(&many),
        at("quota.operation.too_many", "quota.operation[64]", 129, 1)
    );
    let c = ok(&many[..many.len() - "[[quota.operation]]\nname = \"op64\"\n".len()]);
    assert_eq!(c.snapshot.gate.operations.len(), 64);
    assert_eq!(c.snapshot.gate.operations[63], "op63");
    // Named operations that limit nothing keep the quota tables out of the chain.
    assert!(c.snapshot.gate.quota.operations.is_empty());
    assert!(!c.snapshot.gate.has_budgets());
}

#[test]
fn connection_limits_compile_and_refuse_values_out_of_range() {
    let c = ok("[quota.connections]\nconcurrent = 64\nper_second = 20\nburst = 40\n");
    let l = c.snapshot.gate.connections.expect("connection limits");
    assert_eq!(l.concurrent, Some(64));
    let rate = l.rate.expect("a connection rate");
    assert_eq!((rate.requests(), rate.burst()), (20, 40));
    assert_eq!(l.mode, Mode::Enforce);
    assert!(ok(HOST).snapshot.gate.connections.is_none());
    let cases: [(&str, &str, &str); 5] = [
        ("concurrent", "0", "quota.connections.concurrent.range"),
        ("per_second", "0", "quota.connections.per_second.range"),
        (
            "per_second",
            "1000001",
            "quota.connections.per_second.range",
        ),
        ("burst", "1048576", "quota.connections.burst.range"),
        ("mode", "\"soft\"", "quota.connections.mode.invalid"),
    ];
    for (field, value, code) in cases {
        let src = format!("[quota.connections]\n{field} = {value}\n");
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&src),
            at(code, &format!("quota.connections.{field}"), 2, column),
            "{field} = {value}"
        );
    }
}

#[test]
fn the_unknown_host_operation_names_a_profile_operation() {
    let c = ok("[quota]\nunknown_host_operation = \"stray\"\n[[quota.operation]]\nname = \"login\"\nrequests = 5\n[[quota.operation]]\nname = \"stray\"\nrequests = 7\n");
    assert_eq!(c.snapshot.gate.unknown_host_policy.operation, Some(1));
    assert_eq!(
        one("[quota]\nunknown_host_operation = \"nope\"\n"),
        at(
            "quota.unknown_host_operation.unknown",
            "quota.unknown_host_operation",
            2,
            26
        )
    );
}

#[test]
fn per_connection_limits_are_checked_and_zero_turns_them_off() {
    let c = ok("[[host]]\nnames = [\"a.test\"]\nconnection_rate = { requests = 10 }\nwebsocket = { messages_per_second = 5, max_message_bytes = \"1 MiB\", on_limit = \"close\" }\n");
    let x = &c.snapshot.entries[0].extras;
    let rate = x.connection_rate.unwrap();
    assert_eq!((rate.requests(), rate.burst()), (10, 20));
    let ws = x.websocket.unwrap();
    assert_eq!(ws.messages.unwrap().burst(), 10);
    assert_eq!(ws.max_message_bytes, Some(1 << 20));
    assert_eq!(ws.on_limit, gapura_gate::policy::OnLimit::Close);
    // 0 turns a layer's limit off.
    let c = ok("[defaults]\nconnection_rate = { requests = 10 }\n[[host]]\nnames = [\"a.test\"]\nconnection_rate = { requests = 0 }\n[[host]]\nnames = [\"b.test\"]\n");
    assert_eq!(c.snapshot.entries[0].extras.connection_rate, None);
    assert!(c.snapshot.entries[1].extras.connection_rate.is_some());
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nconnection_rate = { burst = 3 }\n"),
        at(
            "host.connection_rate.range",
            "host[0].connection_rate.requests",
            3,
            19
        )
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nwebsocket = { on_limit = \"kill\" }\n"),
        at(
            "host.websocket.on_limit.invalid",
            "host[0].websocket.on_limit",
            3,
            26
        )
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nwebsocket = { messages_per_second = 2000000 }\n"),
        at(
            "host.websocket.range",
            "host[0].websocket.messages_per_second",
            3,
            37
        )
    );
}

#[test]
fn a_ceiling_that_cannot_hold_its_budgets_sources_is_warned_of() {
    let codes = |src: &str| -> Vec<&'static str> {
        let c = ok_with(src, 1);
        c.warnings
            .iter()
            .map(|w| w.code)
            .filter(|c| c.starts_with("quota."))
            .collect()
    };
    assert_eq!(
        codes(
            "[quota]\nlease_tracked_keys = 100\n[quota.global]\nconcurrent = 1000\n\
             [quota.source]\nconcurrent = 4\n"
        ),
        ["quota.lease_tracked_keys.small"]
    );
    assert_eq!(
        codes(
            "[quota]\ntracked_keys = 100\n[quota.global]\nrequests = 1000\n\
             [quota.source]\nrequests = 10\n"
        ),
        ["quota.tracked_keys.small"]
    );
    // Room for every source the budgets admit: no warning.
    assert!(codes(
        "[quota]\nlease_tracked_keys = 2000\ntracked_keys = 2000\n[quota.global]\n\
         requests = 1000\nconcurrent = 1000\n[quota.source]\nrequests = 10\nconcurrent = 4\n"
    )
    .is_empty());
}

#[test]
fn identity_dimensions_compile_split_with_their_headers_and_leases() {
    let c = ok_with(
        "[quota.tenant]\nheader = \"X-Tenant\"\nrequests = 1000\nconcurrent = 40\n\n\
         [quota.principal]\nheader = \"x-user\"\nrequests = 100\noptional = 80\nscope = \"per_shard\"\n\n\
         [quota.resource]\nrequests = 500\n",
        2,
    );
    let g = &c.snapshot.gate;
    assert_eq!(g.tenant_header.as_deref(), Some("x-tenant"));
    assert_eq!(g.principal_header.as_deref(), Some("x-user"));
    let d = &g.quota.dims;
    assert_eq!(d.tenant.requests, budget(500, 500), "split over 2 shards");
    assert_eq!(d.tenant.concurrent, budget(20, 20));
    assert_eq!(d.principal.requests, budget(100, 80), "per_shard");
    assert_eq!(d.principal.concurrent, None);
    assert_eq!(d.resource, budget(250, 250));
    assert!(d.any());
}

#[test]
fn each_identity_dimension_error_has_its_code_and_position() {
    assert_eq!(
        one("[quota.tenant]\nrequests = 5\n"),
        at("quota.tenant.header.required", "quota.tenant.header", 2, 12)
    );
    assert_eq!(
        one("[quota.principal]\nheader = \"a b\"\nconcurrent = 2\n"),
        at(
            "quota.principal.header.invalid",
            "quota.principal.header",
            2,
            10
        )
    );
    assert_eq!(
        one("[quota.tenant]\nheader = \"x-t\"\n"),
        at("quota.tenant.limit.required", "quota.tenant", 2, 10)
    );
    assert_eq!(
        one("[quota.principal]\nheader = \"x-p\"\n"),
        at("quota.principal.limit.required", "quota.principal", 2, 10)
    );
    assert_eq!(
        one("[quota.resource]\nscope = \"split\"\n"),
        at(
            "quota.resource.requests.required",
            "quota.resource.requests",
            2,
            9
        )
    );
    assert_eq!(
        one("[quota.tenant]\nheader = \"x-t\"\nrequests = 0\n"),
        at("quota.requests.range", "quota.tenant.requests", 3, 12)
    );
    assert_eq!(
        one("[quota.resource]\nrequests = 5\nscope = \"fleet\"\n"),
        at("quota.scope.fleet", "quota.resource.scope", 3, 9)
    );
}
