//! Layering through `[defaults]`, a `[[bundle]]`, the host and the route,
//! field by field, and the bundle codes.

use super::access::HASH;
use super::*;
use crate::identity::pair_identity;
use gapura_gate::mode::Mode;
use gapura_gate::policy::{BlockRef, RatePair, RequestPolicy};
use gapura_gate::quota::Class;
use gapura_gate::{HostAction, RequestLimits};

fn block(index: u32, mode: Mode) -> Option<BlockRef> {
    Some(BlockRef { index, mode })
}

const FOUR_LAYERS: &str = r#"
[[access_list]]
name = "office"
allow = ["192.0.2.0/24"]

[[access_list]]
name = "admins"
allow = ["192.0.2.10"]

[[rule_set]]
name = "edge"
[[rule_set.rule]]
path.prefix = "/private"
action = "deny"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[defaults]
access_list = "office"
rule_set = "block_known_scanners"
rule_set_mode = "shadow"
limits = { max_body_bytes = "10 MiB", max_url_bytes = 2048 }

[[bundle]]
name = "internal"
rule_set = "edge"
access_list_mode = "shadow"
limits = { max_body_bytes = "1 MiB", max_header_count = 50 }

[[host]]
names = ["wiki.test"]
kind = "proxy"
use = "internal"
access_list = "admins"
limits = { max_body_bytes = "2 MiB" }
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/public"
  upstream = "app"
  access_list = false
  rule_set_mode = "enforce"
  [[host.route]]
  path = "/scan"
  upstream = "app"
  rule_set = "block_known_scanners"
  access_list_mode = "enforce"
  [[host.route]]
  path = "/upload"
  upstream = "app"
  access_list = "office"
  limits = { max_body_bytes = "100 MiB" }

[[host]]
names = ["plain.test"]
"#;

#[test]
fn blocks_layer_through_defaults_bundle_host_and_route() {
    let c = ok(FOUR_LAYERS);
    let g = &c.snapshot.gate;
    let lists: Vec<&str> = g.access_lists.iter().map(|l| l.name()).collect();
    assert_eq!(lists, ["office", "admins"]);
    assert_eq!(g.rule_set_names, ["edge", "block_known_scanners"]);
    let (office, admins, edge, scanners) = (0, 1, 0, 1);

    let wiki = &c.snapshot.entries[0];
    // Host: its own list, the bundle's list mode, the bundle's set, the
    // defaults' set mode.
    assert_eq!(wiki.policy.access, block(admins, Mode::Shadow));
    assert_eq!(wiki.policy.rules, block(edge, Mode::Shadow));
    let HostAction::Proxy(p) = &wiki.action else {
        panic!("a proxy host");
    };
    let routes: Vec<(Option<BlockRef>, Option<BlockRef>)> = p
        .routes
        .iter()
        .map(|r| (r.policy.access, r.policy.rules))
        .collect();
    assert_eq!(
        routes,
        [
            // "/": everything from the host.
            (block(admins, Mode::Shadow), block(edge, Mode::Shadow)),
            // "/public": no list; the host's set, enforced.
            (None, block(edge, Mode::Enforce)),
            // "/scan": the host's list, enforced; a preset in the host's mode.
            (block(admins, Mode::Enforce), block(scanners, Mode::Shadow)),
            // "/upload": another list in the host's mode.
            (block(office, Mode::Shadow), block(edge, Mode::Shadow)),
        ]
    );
    // A host without a bundle: the defaults alone.
    let plain = &c.snapshot.entries[1];
    assert_eq!(plain.policy.access, block(office, Mode::Enforce));
    assert_eq!(plain.policy.rules, block(scanners, Mode::Shadow));
}

#[test]
fn limits_layer_through_defaults_bundle_host_and_route() {
    let c = ok(FOUR_LAYERS);
    let s = &c.snapshot;
    let defaults = RequestLimits {
        max_body_bytes: 10 << 20,
        max_url_bytes: 2048,
        ..RequestLimits::default()
    };
    assert_eq!(s.default_limits, defaults);
    // Host over bundle over defaults over built-ins, field by field.
    let wiki = RequestLimits {
        max_body_bytes: 2 << 20,
        max_header_count: 50,
        ..defaults
    };
    assert_eq!(s.entries[0].limits, wiki);
    let HostAction::Proxy(p) = &s.entries[0].action else {
        panic!("a proxy host");
    };
    let bodies: Vec<u64> = p.routes.iter().map(|r| r.limits.max_body_bytes).collect();
    assert_eq!(bodies, [2 << 20, 2 << 20, 2 << 20, 100 << 20]);
    assert_eq!(
        p.routes[3].limits,
        RequestLimits {
            max_body_bytes: 100 << 20,
            ..wiki
        }
    );
    assert_eq!(s.entries[1].limits, defaults);
}

#[test]
fn an_empty_bundle_changes_nothing() {
    let without = ok(FOUR_LAYERS.replace("use = \"internal\"\n", "").as_str());
    let with_empty = ok(&FOUR_LAYERS
        .replace("use = \"internal\"\n", "use = \"nothing\"\n")
        .replace(
            "[[host]]\nnames = [\"wiki",
            "[[bundle]]\nname = \"nothing\"\n[[host]]\nnames = [\"wiki",
        ));
    let a = &without.snapshot.entries[0];
    let b = &with_empty.snapshot.entries[0];
    assert_eq!(a.limits, b.limits);
    assert_eq!(a.policy, b.policy);
    // Without the bundle, the defaults' list mode and set apply.
    assert_eq!(a.policy.access, block(1, Mode::Enforce));
    assert_eq!(
        without.snapshot.gate.rule_set_names,
        ["block_known_scanners"]
    );
}

#[test]
fn rate_limit_and_class_come_from_defaults_and_bundles() {
    let c = ok(r#"
[[rate_limit]]
name = "site"
requests = 10
[[rate_limit]]
name = "api"
requests = 5

[defaults]
rate_limit = "site"

[[bundle]]
name = "vip"
class = "critical"
rate_limit = "api"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["a.test"]

[[host]]
names = ["b.test"]
use = "vip"

[[host]]
names = ["c.test"]
use = "vip"
class = "health"
rate_limit = "site"
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/free"
  upstream = "app"
  rate_limit = false
"#);
    let s = &c.snapshot;
    let policy = |rate_pair, class| RequestPolicy {
        rate_pair,
        class,
        ..RequestPolicy::default()
    };
    assert_eq!(s.entries[0].policy, policy(Some(0), Class::Normal));
    assert_eq!(s.entries[1].policy, policy(Some(1), Class::Critical));
    assert_eq!(s.entries[2].policy, policy(Some(2), Class::Health));
    let HostAction::Proxy(p) = &s.entries[2].action else {
        panic!("a proxy host");
    };
    assert_eq!(p.routes[0].policy, policy(Some(2), Class::Health));
    assert_eq!(p.routes[1].policy, policy(None, Class::Health));
    assert_eq!(
        s.gate.rate_pairs,
        [
            RatePair {
                identity: pair_identity("site", "a.test"),
                limit: 0
            },
            RatePair {
                identity: pair_identity("api", "b.test"),
                limit: 1
            },
            RatePair {
                identity: pair_identity("site", "c.test"),
                limit: 0
            },
        ]
    );
}

#[test]
fn bundle_codes_have_their_key_path_and_position() {
    let cases: Vec<(String, &str, &str, u32, u32)> = vec![
        (
            "[[bundle]]\nclass = \"critical\"\n".into(),
            "bundle.name.required",
            "bundle[0].name",
            1,
            1,
        ),
        (
            "[[bundle]]\nname = \"Public Site\"\n".into(),
            "bundle.name.invalid",
            "bundle[0].name",
            2,
            8,
        ),
        (
            "[[bundle]]\nname = \"b\"\n[[bundle]]\nname = \"b\"\n".into(),
            "bundle.name.duplicate",
            "bundle[1].name",
            4,
            8,
        ),
        (
            "[[bundle]]\nname = \"b\"\n[[host]]\nnames = [\"a.test\"]\nuse = \"c\"\n".into(),
            "host.bundle.unknown",
            "host[0].use",
            5,
            7,
        ),
        // Host-level codes wherever the setting is written.
        (
            "[[bundle]]\nname = \"b\"\nrate_limit = \"none\"\n".into(),
            "host.rate_limit.unknown",
            "bundle[0].rate_limit",
            3,
            14,
        ),
        (
            "[[bundle]]\nname = \"b\"\nclass = \"vip\"\n".into(),
            "host.class.invalid",
            "bundle[0].class",
            3,
            9,
        ),
        (
            "[[bundle]]\nname = \"b\"\naccess_list = \"x\"\n".into(),
            "host.accessList.unknown",
            "bundle[0].access_list",
            3,
            15,
        ),
        (
            "[[bundle]]\nname = \"b\"\n[bundle.limits]\nmax_url_bytes = 10\n".into(),
            "limits.max_url_bytes.range",
            "bundle[0].limits.max_url_bytes",
            4,
            17,
        ),
        (
            "[defaults]\nrule_set = \"x\"\n".into(),
            "host.ruleSet.unknown",
            "defaults.rule_set",
            2,
            12,
        ),
        (
            "[defaults]\nrate_limit = \"x\"\n".into(),
            "host.rate_limit.unknown",
            "defaults.rate_limit",
            2,
            14,
        ),
    ];
    for (src, code, path, line, column) in cases {
        assert_eq!(one(&src), at(code, path, line, column), "{src}");
    }
    assert_eq!(
        errors("[[host]]\nnames = [\"a.test\"]\nuse = \"c\"\n")[0].message,
        "no [[bundle]] is named \"c\" (the profile has no [[bundle]])"
    );
}

#[test]
fn a_bad_value_in_a_shared_layer_is_reported_once() {
    let e = codes(
        "[defaults]\naccess_list = \"x\"\n[[bundle]]\nname = \"b\"\nrule_set = \"y\"\n\
         [[host]]\nnames = [\"a.test\"]\nuse = \"b\"\n[[host]]\nnames = [\"b.test\"]\nuse = \"b\"\n",
    );
    assert_eq!(
        e,
        [
            (
                "host.accessList.unknown",
                "defaults.access_list".to_string()
            ),
            ("host.ruleSet.unknown", "bundle[0].rule_set".into()),
        ]
    );
}

#[test]
fn a_maintenance_bypass_uses_its_list_only_while_maintenance_is_on() {
    let src = |enabled: bool| {
        format!(
            "[[access_list]]\nname = \"office\"\nallow = [\"192.0.2.0/24\"]\n\
             [[access_list]]\nname = \"staff\"\nusers = [{{ name = \"a\", password_hash = \"{HASH}\" }}]\n\
             [[bundle]]\nname = \"b\"\naccess_list = \"staff\"\n\
             maintenance = {{ enabled = {enabled}, bypass = \"office\" }}\n\
             [[host]]\nnames = [\"a.test\"]\nuse = \"b\"\n"
        )
    };
    let on = ok(&src(true));
    let lists: Vec<&str> = on
        .snapshot
        .gate
        .access_lists
        .iter()
        .map(|l| l.name())
        .collect();
    assert_eq!(lists, ["office", "staff"]);
    let m = on.snapshot.entries[0].extras.maintenance.as_ref().unwrap();
    assert_eq!((m.bypass, m.mode), (Some(0), Mode::Enforce));
    assert_eq!(
        on.snapshot.entries[0].policy.access,
        block(1, Mode::Enforce)
    );
    let off = ok(&src(false));
    let lists: Vec<&str> = off
        .snapshot
        .gate
        .access_lists
        .iter()
        .map(|l| l.name())
        .collect();
    assert_eq!(lists, ["staff"]);
    assert!(off.snapshot.entries[0].extras.maintenance.is_none());
    assert_eq!(
        off.snapshot.entries[0].policy.access,
        block(0, Mode::Enforce)
    );
}

#[test]
fn an_inherited_rate_limit_past_the_builtin_slots_is_refused_where_it_is_written() {
    let mut src = String::from(
        "[[rate_limit]]\nname = \"a\"\nrequests = 1\n[defaults]\nrate_limit = \"a\"\n",
    );
    for i in 0..4097 {
        src.push_str(&format!("[[host]]\nnames = [\"h{i}.test\"]\n"));
    }
    assert_eq!(
        one(&src),
        at("rate_limit.slots.exhausted", "defaults.rate_limit", 5, 14)
    );
}
