//! `proof_of_work`: layered host settings, the route's switch, `when`,
//! `[server] pow_key_file`, and their codes.

use super::*;
use gapura_gate::mode::Mode;
use gapura_gate::upstream::Route;
use gapura_gate::HostAction;

const BASE: &str = r#"
[server]
pow_key_file = "/var/lib/gapura/pow.key"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[rule_set]]
name = "suspects"

[[rule_set.rule]]
user_agent.contains = ["curl"]
action = "challenge"

[[rule_set]]
name = "plain"

[[rule_set.rule]]
path.prefix = "/x"
action = "deny"
"#;

fn routes(c: &Compiled, host: usize) -> &[Route] {
    match &c.snapshot.entries[host].action {
        HostAction::Proxy(p) => &p.routes,
        other => panic!("not a proxy host: {other:?}"),
    }
}

#[test]
fn routes_inherit_the_host_settings_and_override_only_the_switch() {
    let c = ok(&format!(
        r#"{BASE}
[defaults]
proof_of_work = {{ difficulty = 18 }}

[[host]]
names = ["a.test"]
kind = "proxy"
proof_of_work = {{ enabled = true, token_lifetime_hours = 24 }}
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/api"
  upstream = "app"
  proof_of_work = false

[[host]]
names = ["b.test"]
kind = "proxy"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/login"
  upstream = "app"
  proof_of_work = true
"#
    ));
    let a = routes(&c, 0);
    let pow = a[0].policy.pow.expect("on for /");
    assert_eq!(pow.difficulty, 18, "from the defaults");
    assert_eq!(pow.lifetime_s, 24 * 3600);
    assert_eq!(pow.host, gapura_gate::pow::host_id("a.test"));
    assert_eq!(pow.when, None);
    assert_eq!(pow.mode, Mode::Enforce);
    assert_eq!(a[1].policy.pow, None, "the route's switch turns it off");
    assert_eq!(
        c.snapshot.entries[0].policy.pow, None,
        "only routes challenge"
    );
    assert_eq!(c.snapshot.entries[0].extras.pow, Some(pow));
    let b = routes(&c, 1);
    assert_eq!(b[0].policy.pow, None);
    let login = b[1].policy.pow.expect("the route's switch turns it on");
    assert_eq!(login.difficulty, 18);
    assert_eq!(login.lifetime_s, 168 * 3600, "the built-in week");
    assert!(
        c.snapshot.entries[1].extras.pow.is_some(),
        "its verify endpoint"
    );
    assert!(c.snapshot.gate.pow_in_use);
    assert_eq!(
        c.runtime.pow_key_file.as_deref(),
        Some("/var/lib/gapura/pow.key")
    );
    assert!(other_warnings(&c).is_empty(), "{:?}", c.warnings);
}

#[test]
fn when_names_the_rule_set_whose_challenge_rules_mark() {
    let c = ok(&format!(
        r#"{BASE}
[[host]]
names = ["a.test"]
kind = "proxy"
rule_set = "suspects"
proof_of_work = {{ enabled = true, when = "suspects", mode = "shadow" }}
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/other"
  upstream = "app"
  rule_set = "plain"
"#
    ));
    let r = routes(&c, 0);
    let pow = r[0].policy.pow.unwrap();
    assert_eq!(pow.when, r[0].policy.rules.map(|b| b.index));
    assert_eq!(pow.mode, Mode::Shadow);
    let w: Vec<&str> = other_warnings(&c).iter().map(|w| w.code).collect();
    assert_eq!(
        w,
        ["route.proof_of_work.when.unapplied"],
        "/other applies another set"
    );
}

#[test]
fn bad_values_have_their_codes() {
    let cases = [
        ("difficulty = 0", "host.proof_of_work.difficulty.range"),
        ("difficulty = 33", "host.proof_of_work.difficulty.range"),
        (
            "token_lifetime_hours = 0",
            "host.proof_of_work.token_lifetime_hours.range",
        ),
        ("mode = \"loud\"", "host.proof_of_work.mode.invalid"),
        ("when = \"nope\"", "host.proof_of_work.when.unknown"),
        ("when = \"plain\"", "host.proof_of_work.when.no_challenge"),
        (
            "when = \"block_ai_crawlers\"",
            "host.proof_of_work.when.no_challenge",
        ),
    ];
    for (field, code) in cases {
        let src = format!(
            r#"{BASE}
[[host]]
names = ["a.test"]
kind = "proxy"
proof_of_work = {{ enabled = true, {field} }}
  [[host.route]]
  path = "/"
  upstream = "app"
"#
        );
        let (got, path, _, _) = one(&src);
        assert_eq!(got, code, "{field}");
        assert!(path.starts_with("host[0].proof_of_work."), "{path}");
    }
    let src = format!(
        "{}\n[[host]]\nnames = [\"a.test\"]\nkind = \"proxy\"\n  [[host.route]]\n  path = \"/\"\n  upstream = \"app\"\n  proof_of_work = {{ enabled = true }}\n",
        BASE
    );
    assert!(compile_str(&src).is_err(), "a route takes the switch only");
}

#[test]
fn a_missing_key_file_is_warned_and_a_blank_one_refused() {
    let src = BASE.replace("pow_key_file = \"/var/lib/gapura/pow.key\"", "")
        + r#"
[[host]]
names = ["a.test"]
kind = "proxy"
proof_of_work = { enabled = true }
  [[host.route]]
  path = "/"
  upstream = "app"
"#;
    let c = ok(&src);
    let w: Vec<&str> = other_warnings(&c).iter().map(|w| w.code).collect();
    assert_eq!(w, ["server.pow_key_file.missing"]);
    assert!(DOC.contains("| `server.pow_key_file.missing` |"));
    let blank = BASE.replace("/var/lib/gapura/pow.key", " ");
    assert_eq!(one(&blank).0, "server.pow_key_file.invalid");
}
