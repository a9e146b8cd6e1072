use super::*;
use gapura_gate::mode::Mode;
use gapura_gate::policy::{RateKey, RateLimitDef};
use gapura_gate::quota::{RatePolicy, SourcePrefix};

#[test]
fn rate_limits_compile_to_their_policies_in_order() {
    let c = ok(r#"
[[rate_limit]]
name = "api"
requests = 20
per = "second"
burst = 40
key = "ip"

[[rate_limit]]
name = "slow"
requests = 1
per = "minute"

[[rate_limit]]
name = "pages"
requests = 600
per = "hour"
burst = 10
key = "ip_path"
mode = "shadow"

[[rate_limit]]
name = "tiered"
requests = 10
ipv6_tiers = [ { prefix = 56, requests = 100, burst = 200 },
               { prefix = 48, requests = 400 } ]
"#);
    let defs = &c.snapshot.gate.rate_limits;
    assert_eq!(
        defs[..],
        [
            RateLimitDef {
                name: "api".into(),
                policy: RatePolicy::per_second(20, 40).unwrap(),
                key: RateKey::Ip,
                ipv6_tiers: vec![],
                mode: Mode::Enforce,
                fleet: None,
            },
            RateLimitDef {
                name: "slow".into(),
                // The burst defaults to the requests of one period.
                policy: RatePolicy::per_minute(1, 1).unwrap(),
                key: RateKey::Ip,
                ipv6_tiers: vec![],
                mode: Mode::Enforce,
                fleet: None,
            },
            RateLimitDef {
                name: "pages".into(),
                policy: RatePolicy::per_hour(600, 10).unwrap(),
                key: RateKey::IpPath,
                ipv6_tiers: vec![],
                mode: Mode::Shadow,
                fleet: None,
            },
            RateLimitDef {
                name: "tiered".into(),
                policy: RatePolicy::per_second(10, 10).unwrap(),
                key: RateKey::Ip,
                ipv6_tiers: vec![
                    (
                        SourcePrefix::TIER_56,
                        RatePolicy::per_second(100, 200).unwrap()
                    ),
                    (
                        SourcePrefix::TIER_48,
                        RatePolicy::per_second(400, 400).unwrap()
                    ),
                ],
                mode: Mode::Enforce,
                fleet: None,
            },
        ]
    );
    // Declared but unused: no pairs.
    assert!(c.snapshot.gate.rate_pairs.is_empty());
}

#[test]
fn a_default_burst_is_clamped_to_the_largest_burst() {
    let c = ok("[[rate_limit]]\nname = \"big\"\nrequests = 2000000\nper = \"hour\"\n");
    assert_eq!(
        c.snapshot.gate.rate_limits[0].policy,
        RatePolicy::per_hour(2_000_000, 1_048_575).unwrap()
    );
}

const HEADER_LIMIT: &str = r#"
[[rate_limit]]
name = "keys"
requests = 20
burst = 40
key = "header"
header = "X-Api-Key"
"#;

#[test]
fn header_limits_split_over_two_and_four_shards() {
    let full = RatePolicy::per_second(20, 40).unwrap();
    for (cores, policy) in [
        (1, full),
        // Rate divided exactly (the period multiplied), burst divided.
        (2, RatePolicy::new(20, 2_000, 20).unwrap()),
        (4, RatePolicy::new(20, 4_000, 10).unwrap()),
    ] {
        let c = ok_with(HEADER_LIMIT, cores);
        let d = &c.snapshot.gate.rate_limits[0];
        assert_eq!(d.policy, policy, "{cores} cores");
        assert_eq!(d.key, RateKey::Header("x-api-key".into()));
    }
    let per_shard = format!("{HEADER_LIMIT}scope = \"per_shard\"\n");
    assert_eq!(
        ok_with(&per_shard, 4).snapshot.gate.rate_limits[0].policy,
        full
    );
    // Address keys are steered: never divided.
    let ip = "[[rate_limit]]\nname = \"ip\"\nrequests = 20\nburst = 40\n";
    assert_eq!(ok_with(ip, 4).snapshot.gate.rate_limits[0].policy, full);
}

#[test]
fn a_split_under_the_slowest_rate_is_refused_with_the_shard_count() {
    // One an hour is 1/3600 per second; over 5 shards 1/18000, under 1/16384.
    let src = "[[rate_limit]]\nname = \"k\"\nrequests = 1\nper = \"hour\"\nkey = \"header\"\nheader = \"k\"\n";
    assert!(compile_with(src, 4).is_ok());
    assert_eq!(
        one_with(src, 5),
        at("rate_limit.rate.invalid", "rate_limit[0].requests", 3, 12)
    );
    let scoped = format!("{src}scope = \"split\"\n");
    assert_eq!(
        one_with(&scoped, 5),
        at("rate_limit.rate.invalid", "rate_limit[0].scope", 7, 9)
    );
    let e = compile_with(src, 5).unwrap_err();
    assert_eq!(
        e[0].message,
        "split over 5 shards, 1 per hour is one every 18000 seconds on each shard, under \
         1/16384 per second: raise requests or use scope = \"per_shard\""
    );
    let per_shard = format!("{src}scope = \"per_shard\"\n");
    assert!(compile_with(&per_shard, 5).is_ok());
    let fixed = format!("[server]\nshards = 5\n{src}");
    assert_eq!(one_with(&fixed, 1).0, "rate_limit.rate.invalid");
}

#[test]
fn rate_bounds_and_their_codes() {
    let base = "[[rate_limit]]\nname = \"r\"\n";
    let cases: [(&str, &str, &str); 10] = [
        ("requests = 0", "rate_limit.requests.invalid", "requests"),
        ("requests = -1", "rate_limit.requests.invalid", "requests"),
        ("requests = 1000001", "rate_limit.rate.invalid", "requests"),
        (
            "requests = 1\nburst = 0",
            "rate_limit.burst.invalid",
            "burst",
        ),
        (
            "requests = 1\nburst = 1048576",
            "rate_limit.burst.invalid",
            "burst",
        ),
        (
            "requests = 1\nper = \"day\"",
            "rate_limit.per.invalid",
            "per",
        ),
        (
            "requests = 1\nkey = \"cookie\"",
            "rate_limit.key.invalid",
            "key",
        ),
        (
            "requests = 1\nmode = \"dry\"",
            "rate_limit.mode.invalid",
            "mode",
        ),
        (
            "requests = 1\nkey = \"header\"\nheader = \"x key\"",
            "rate_limit.header.invalid",
            "header",
        ),
        (
            "requests = 1\nkey = \"header\"\nheader = \"k\"\nscope = \"all\"",
            "rate_limit.scope.invalid",
            "scope",
        ),
    ];
    for (body, code, field) in cases {
        let src = format!("{base}{body}\n");
        let line = 2 + body.lines().count() as u32;
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&src),
            at(code, &format!("rate_limit[0].{field}"), line, column),
            "{body}"
        );
    }
    let e = errors("[[rate_limit]]\nname = \"r\"\nrequests = 1000001\n");
    assert_eq!(
        e[0].message,
        "1000001 per second is 1000001 per second; a rate must be between 1/16384 and \
         1000000 per second"
    );
    // The slowest and fastest rates pass.
    ok("[[rate_limit]]\nname = \"r\"\nrequests = 1000000\n[[rate_limit]]\nname = \"s\"\nrequests = 1\nper = \"hour\"\n");
}

#[test]
fn header_and_scope_belong_to_header_keys() {
    assert_eq!(
        one("[[rate_limit]]\nname = \"r\"\nrequests = 1\nkey = \"header\"\n"),
        at("rate_limit.header.required", "rate_limit[0].header", 4, 7)
    );
    assert_eq!(
        one("[[rate_limit]]\nname = \"r\"\nrequests = 1\nheader = \"k\"\n"),
        at(
            "rate_limit.header.unexpected",
            "rate_limit[0].header",
            4,
            10
        )
    );
}

#[test]
fn an_address_limit_is_per_shard_unless_split_is_written() {
    let src = |scope: &str| {
        format!("[[rate_limit]]\nname = \"r\"\nrequests = 100\nburst = 100\n{scope}\n")
    };
    // Steered direct clients: each shard's bucket is the whole limit.
    let c = ok_with(&src(""), 4);
    let p = c.snapshot.gate.rate_limits[0].policy;
    assert_eq!((p.requests(), p.per_ms(), p.burst()), (100, 1_000, 100));
    // Behind proxies a client lands on any shard: split, a quarter each.
    let c = ok_with(&src("scope = \"split\""), 4);
    let p = c.snapshot.gate.rate_limits[0].policy;
    assert_eq!((p.requests(), p.per_ms(), p.burst()), (100, 4_000, 25));
}

#[test]
fn ipv6_tiers_are_56_and_48_once_each_and_only_for_ip_keys() {
    let base = "[[rate_limit]]\nname = \"r\"\nrequests = 1\n";
    assert_eq!(
        one(&format!(
            "{base}ipv6_tiers = [{{ prefix = 64, requests = 2 }}]\n"
        )),
        at(
            "rate_limit.tier.invalid",
            "rate_limit[0].ipv6_tiers[0].prefix",
            4,
            26
        )
    );
    assert_eq!(
        one(&format!(
            "{base}ipv6_tiers = [{{ prefix = 56, requests = 2 }}, {{ prefix = 56, requests = 3 }}]\n"
        )),
        at("rate_limit.tier.invalid", "rate_limit[0].ipv6_tiers[1].prefix", 4, 57)
    );
    assert_eq!(
        one(&format!("{base}ipv6_tiers = [{{ requests = 2 }}]\n")),
        at(
            "rate_limit.tier.invalid",
            "rate_limit[0].ipv6_tiers[0].prefix",
            4,
            15
        )
    );
    assert_eq!(
        one(&format!("{base}ipv6_tiers = [{{ prefix = 48 }}]\n")),
        at(
            "rate_limit.requests.required",
            "rate_limit[0].ipv6_tiers[0].requests",
            4,
            15
        )
    );
    assert_eq!(
        one(&format!(
            "{base}ipv6_tiers = [{{ prefix = 48, requests = 1, burst = 0 }}]\n"
        )),
        at(
            "rate_limit.burst.invalid",
            "rate_limit[0].ipv6_tiers[0].burst",
            4,
            52
        )
    );
    assert_eq!(
        one(&format!(
            "{base}key = \"ip_path\"\nipv6_tiers = [{{ prefix = 48, requests = 2 }}]\n"
        )),
        at(
            "rate_limit.tier.unexpected",
            "rate_limit[0].ipv6_tiers",
            5,
            14
        )
    );
}

#[test]
fn rate_limits_need_unique_valid_names_and_requests() {
    assert_eq!(
        one("[[rate_limit]]\nrequests = 1\n"),
        at("rate_limit.name.required", "rate_limit[0].name", 1, 1)
    );
    assert_eq!(
        one("[[rate_limit]]\nname = \"API\"\nrequests = 1\n"),
        at("rate_limit.name.invalid", "rate_limit[0].name", 2, 8)
    );
    assert_eq!(
        one("[[rate_limit]]\nname = \"a\"\nrequests = 1\n[[rate_limit]]\nname = \"a\"\nrequests = 2\n"),
        at("rate_limit.name.duplicate", "rate_limit[1].name", 5, 8)
    );
    assert_eq!(
        one("\n[[rate_limit]]\nname = \"a\"\n"),
        at(
            "rate_limit.requests.required",
            "rate_limit[0].requests",
            2,
            1
        )
    );
}

#[test]
fn more_pairs_than_policy_slots_is_refused() {
    let hosts = "[[rate_limit]]\nname = \"a\"\nrequests = 1\n\
                 [[host]]\nnames = [\"a.test\"]\nrate_limit = \"a\"\n\
                 [[host]]\nnames = [\"b.test\"]\nrate_limit = \"a\"\n";
    assert_eq!(
        one(&format!("[quota]\npolicy_slots = 1\n{hosts}")),
        at("rate_limit.slots.exhausted", "quota.policy_slots", 2, 16)
    );
    let c = ok(&format!("[quota]\npolicy_slots = 2\n{hosts}"));
    assert_eq!(c.snapshot.gate.rate_pairs.len(), 2);
}

#[test]
fn past_the_builtin_policy_slots_the_reference_that_needs_one_more_is_refused() {
    let mut src = String::from("[[rate_limit]]\nname = \"a\"\nrequests = 1\n");
    for i in 0..4097 {
        src.push_str(&format!(
            "[[host]]\nnames = [\"h{i}.test\"]\nrate_limit = \"a\"\n"
        ));
    }
    // Host 4096 starts on line 4 + 3 x 4096; its rate_limit is two lines on.
    assert_eq!(
        one(&src),
        at(
            "rate_limit.slots.exhausted",
            "host[4096].rate_limit",
            4 + 3 * 4096 + 2,
            14
        )
    );
}

/// An address-keyed limit each shard holds whole, in a profile whose
/// clients come through trusted proxies on several shards: a warning that
/// names the scopes that hold it (none on one shard, none in `direct`
/// mode, none with `scope = "split"`).
#[test]
fn a_per_shard_address_limit_behind_proxies_is_warned_of() {
    let limit = |scope: &str| {
        format!(
            "[client]\nmode = \"x_forwarded_for\"\ntrusted_proxies = [\"192.0.2.0/24\"]\n\n\
             [[rate_limit]]\nname = \"per-client\"\nrequests = 10\n{scope}\n\n\
             [[host]]\nnames = [\"a.test\"]\nkind = \"respond\"\nstatus = 200\nbody = \"a\"\nrate_limit = \"per-client\"\n"
        )
    };
    let codes = |src: &str, cores: u32| -> Vec<(&'static str, String)> {
        ok_with(src, cores)
            .warnings
            .iter()
            .map(|w| (w.code, w.path.clone()))
            .collect()
    };
    let warned = codes(&limit(""), 4);
    assert!(
        warned.contains(&(
            "rate_limit.scope.per_shard_behind_proxies",
            "rate_limit[0].scope".to_string()
        )),
        "{warned:?}"
    );
    let w = ok_with(&limit("scope = \"per_shard\""), 4);
    let w = w
        .warnings
        .iter()
        .find(|w| w.code == "rate_limit.scope.per_shard_behind_proxies")
        .unwrap();
    assert!(w.message.contains("up to 4 times"), "{}", w.message);
    assert!(w.message.contains("scope = \"split\""), "{}", w.message);
    let quiet = |src: &str, cores: u32| {
        !codes(src, cores)
            .iter()
            .any(|(c, _)| *c == "rate_limit.scope.per_shard_behind_proxies")
    };
    assert!(quiet(&limit("scope = \"split\""), 4));
    assert!(quiet(&limit(""), 1));
    let direct = limit("").replace(
        "mode = \"x_forwarded_for\"\ntrusted_proxies = [\"192.0.2.0/24\"]\n",
        "mode = \"direct\"\n",
    );
    assert!(quiet(&direct, 4));
}
