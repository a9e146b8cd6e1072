use super::*;
use crate::identity::pair_identity;
use gapura_gate::policy::{RatePair, RequestPolicy};
use gapura_gate::quota::Class;
use gapura_gate::HostAction;

const LAYERS: &str = r#"
[[rate_limit]]
name = "api"
requests = 20

[[rate_limit]]
name = "login"
requests = 5
per = "minute"

[[quota.operation]]
name = "signin"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["app.test", "www.app.test"]
kind = "proxy"
rate_limit = "api"
class = "critical"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/static"
  upstream = "app"
  rate_limit = false
  [[host.route]]
  path = "/login"
  upstream = "app"
  rate_limit = "login"
  class = "normal"
  operation = "signin"
  [[host.route]]
  path = "/api"
  upstream = "app"
  rate_limit = "api"
  [[host.route]]
  path = "/health"
  upstream = "app"
  rate_limit = "login"
  class = "health"

[[host]]
names = ["b.test"]
rate_limit = "api"

[[host]]
names = ["c.test"]
kind = "redirect"
target = "https://b.test"
class = "critical"

[[host]]
names = ["d.test"]
"#;

fn policy(rate_pair: Option<u32>, class: Class, operation: Option<u16>) -> RequestPolicy {
    RequestPolicy {
        rate_pair,
        class,
        operation,
        ..RequestPolicy::default()
    }
}

#[test]
fn routes_inherit_the_hosts_rate_limit_and_class_unless_they_set_their_own() {
    let c = ok(LAYERS);
    let s = &c.snapshot;
    let HostAction::Proxy(p) = &s.entries[0].action else {
        panic!("app.test is a proxy host");
    };
    assert_eq!(s.entries[0].policy, policy(Some(0), Class::Critical, None));
    let routes: Vec<RequestPolicy> = p.routes.iter().map(|r| r.policy.clone()).collect();
    assert_eq!(
        routes,
        [
            // "/": the host's pair and class.
            policy(Some(0), Class::Critical, None),
            // "/static": rate_limit = false, the host's class.
            policy(None, Class::Critical, None),
            // "/login": its own limit, class and operation.
            policy(Some(1), Class::Normal, Some(0)),
            // "/api": names the host's limit, so shares the host's pair.
            policy(Some(0), Class::Critical, None),
            // "/health": the same other limit as "/login", one pair.
            policy(Some(1), Class::Health, None),
        ]
    );
    assert_eq!(s.entries[1].policy, policy(Some(2), Class::Normal, None));
    assert_eq!(s.entries[2].policy, policy(None, Class::Critical, None));
    assert_eq!(s.entries[3].policy, RequestPolicy::default());
    assert_eq!(s.gate.operations, ["signin"]);
}

#[test]
fn each_distinct_limit_and_host_is_one_pair_with_a_name_derived_identity() {
    let c = ok(LAYERS);
    assert_eq!(
        c.snapshot.gate.rate_pairs,
        [
            RatePair {
                identity: 0x0c69_f0a9_8b20_6363,
                limit: 0,
            },
            RatePair {
                identity: 0x85ab_4c37_d175_4f10,
                limit: 1,
            },
            RatePair {
                identity: 0xaa2e_eef8_e746_8c34,
                limit: 0,
            },
        ]
    );
}

#[test]
fn pair_identity_is_fnv1a_of_the_limit_0xff_and_the_lowercase_host() {
    // FNV-1a 64 of b"api\xFFapp.test", computed independently.
    assert_eq!(pair_identity("api", "app.test"), 0x0c69_f0a9_8b20_6363);
    assert_eq!(pair_identity("api", "App.Test."), 0x0c69_f0a9_8b20_6363);
    assert_ne!(
        pair_identity("api", "b.test"),
        pair_identity("api", "app.test")
    );
    assert_ne!(
        pair_identity("login", "app.test"),
        pair_identity("api", "app.test")
    );
    // The separator keeps ("ab", "c") and ("a", "bc") apart.
    assert_ne!(pair_identity("ab", "c.test"), pair_identity("a", "bc.test"));
}

#[test]
fn pair_identities_survive_a_reordered_profile() {
    let first = ok(LAYERS);
    // Limits declared the other way round, and another host in front.
    let reordered = LAYERS
        .replacen(
            "[[rate_limit]]\nname = \"api\"\nrequests = 20\n",
            "[[rate_limit]]\nname = \"other\"\nrequests = 1\n",
            1,
        )
        .replacen(
            "[[host]]\nnames = [\"d.test\"]\n",
            "[[host]]\nnames = [\"d.test\"]\n[[rate_limit]]\nname = \"api\"\nrequests = 30\n",
            1,
        );
    let second = ok(&format!(
        "[[host]]\nnames = [\"z.test\"]\nrate_limit = \"login\"\n{reordered}"
    ));
    let pairs = |g: &gapura_gate::policy::GatePolicy| -> Vec<(String, u64)> {
        g.rate_pairs
            .iter()
            .map(|p| (g.rate_limits[p.limit as usize].name.clone(), p.identity))
            .collect()
    };
    let before = pairs(&first.snapshot.gate);
    let after = pairs(&second.snapshot.gate);
    assert_eq!(after.len(), 4);
    // Every pair of the first profile is there again with the same identity.
    for pair in &before {
        assert!(after.contains(pair), "{pair:?} in {after:?}");
    }
    assert_eq!(
        after[0],
        ("login".to_string(), pair_identity("login", "z.test"))
    );
    // The pair's limit index follows the new order; its identity does not.
    let g = &second.snapshot.gate;
    assert_eq!(g.rate_pairs[1].limit, 2);
    assert_eq!(g.rate_limits[2].name, "api");
}

#[test]
fn fixed_answer_hosts_may_set_a_rate_limit_and_class() {
    let c = ok(r#"
[[rate_limit]]
name = "r"
requests = 1
[[host]]
names = ["a.test"]
rate_limit = "r"
class = "health"
[[host]]
names = ["b.test"]
kind = "redirect"
target = "/x"
rate_limit = "r"
"#);
    let s = &c.snapshot;
    assert_eq!(s.entries[0].policy, policy(Some(0), Class::Health, None));
    assert_eq!(s.entries[1].policy, policy(Some(1), Class::Normal, None));
    assert_eq!(s.gate.rate_pairs[0].identity, pair_identity("r", "a.test"));
    assert_eq!(s.gate.rate_pairs[1].identity, pair_identity("r", "b.test"));
    assert!(s.gate.uses_clock());
}

#[test]
fn host_references_must_name_what_exists() {
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nrate_limit = \"nope\"\n"),
        at("host.rate_limit.unknown", "host[0].rate_limit", 3, 14)
    );
    let e = errors("[[host]]\nnames = [\"a.test\"]\nrate_limit = \"nope\"\n");
    assert_eq!(
        e[0].message,
        "no [[rate_limit]] is named \"nope\" (the profile has no [[rate_limit]])"
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nclass = \"vip\"\n"),
        at("host.class.invalid", "host[0].class", 3, 9)
    );
    assert_eq!(
        one("[[host]]\nnames = [\"a.test\"]\nrate_limit = false\n"),
        at("profile.type", "host[0].rate_limit", 3, 14)
    );
}

const ROUTE: &str = "[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9001\"]\n\
                     [[rate_limit]]\nname = \"api\"\nrequests = 1\n\
                     [[host]]\nnames = [\"a.test\"]\nkind = \"proxy\"\n\
                     [[host.route]]\npath = \"/\"\nupstream = \"app\"\n";

#[test]
fn route_references_must_name_what_exists() {
    let cases = [
        (
            "rate_limit = \"nope\"",
            "route.rate_limit.unknown",
            "rate_limit",
        ),
        (
            "rate_limit = true",
            "route.rate_limit.invalid",
            "rate_limit",
        ),
        ("operation = \"x\"", "route.operation.unknown", "operation"),
        ("class = \"vip\"", "route.class.invalid", "class"),
    ];
    for (line, code, field) in cases {
        let column = field.len() as u32 + 4;
        assert_eq!(
            one(&format!("{ROUTE}{line}\n")),
            at(code, &format!("host[0].route[0].{field}"), 13, column),
            "{line}"
        );
    }
    let e = errors(&format!("{ROUTE}rate_limit = \"nope\"\n"));
    assert_eq!(
        e[0].message,
        "no [[rate_limit]] is named \"nope\" (known: api)"
    );
    let e = errors(&format!("{ROUTE}operation = \"x\"\n"));
    assert_eq!(
        e[0].message,
        "no [[quota.operation]] is named \"x\" (the profile has no [[quota.operation]])"
    );
}
