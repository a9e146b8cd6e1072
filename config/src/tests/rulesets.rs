//! `[[rule_set]]`, presets, references from hosts and routes, and every
//! rule-set code with its path and position.

use super::*;
use gapura_gate::mode::Mode;
use gapura_gate::policy::BlockRef;
use gapura_gate::ruleset::{
    Action, PathPatternKind, Preset, RuleOutcome, RuleRequest, RuleSet, RuleSpec,
};
use gapura_gate::HostAction;

const EDGE: &str = r#"
[[rule_set]]
name = "edge"

[[rule_set.rule]]
path.exact = "/admin/health"
action = "allow"

[[rule_set.rule]]
path.prefix = "/admin"
methods = ["post", "PUT", "DELETE"]
action = "deny"

[[rule_set.rule]]
path.glob = "/**/.env"
action = "drop"

[[rule_set.rule]]
path = { regex = '\.(bak|old)$' }
action = "deny"

[[rule_set.rule]]
user_agent = { contains = ["sqlmap", " Nikto "], empty = true }
action = "deny"
"#;

fn block(index: u32, mode: Mode) -> Option<BlockRef> {
    Some(BlockRef { index, mode })
}

fn evaluate(set: &RuleSet, method: &str, path: &str, ua: Option<&str>) -> RuleOutcome {
    let mut caches = set.new_regex_caches();
    let req = RuleRequest {
        method: method.as_bytes(),
        path: path.as_bytes(),
        user_agents: ua.map(str::as_bytes).into_iter(),
    };
    set.evaluate(&req, &mut caches)
}

#[test]
fn a_rule_set_compiles_every_condition_in_order() {
    let c = ok(&format!(
        "{EDGE}[[host]]\nnames = [\"a.test\"]\nrule_set = \"edge\"\n"
    ));
    let g = &c.snapshot.gate;
    assert_eq!(g.rule_set_names, ["edge"]);
    let set = &g.rule_sets[0];
    assert_eq!(set.len(), 5);
    // As stated, normalised: methods upper case and sorted, substrings
    // trimmed and sorted ignoring case.
    let stated: Vec<RuleSpec> = (0..5).map(|i| set.rule(i).unwrap().clone()).collect();
    assert_eq!(
        stated,
        [
            RuleSpec::new(Action::Allow).path(PathPatternKind::Exact, "/admin/health"),
            RuleSpec::new(Action::Deny)
                .path(PathPatternKind::Prefix, "/admin")
                .methods(&["DELETE", "POST", "PUT"]),
            RuleSpec::new(Action::Drop).path(PathPatternKind::Glob, "/**/.env"),
            RuleSpec::new(Action::Deny).path(PathPatternKind::Regex, r"\.(bak|old)$"),
            RuleSpec::new(Action::Deny)
                .user_agent_contains(&["Nikto", "sqlmap"])
                .user_agent_empty(),
        ]
    );
    // The first match decides.
    let rule = |m, p, ua| evaluate(set, m, p, ua).rule;
    assert_eq!(rule("POST", "/admin/health", None), Some(0));
    assert_eq!(rule("POST", "/admin/users", Some("curl")), Some(1));
    assert_eq!(rule("GET", "/admin/users", Some("curl")), None);
    assert_eq!(rule("GET", "/app/.env", Some("curl")), Some(2));
    assert_eq!(rule("GET", "/db.bak", Some("curl")), Some(3));
    assert_eq!(rule("GET", "/", Some("x nikto/2.5")), Some(4));
    assert_eq!(rule("GET", "/", None), Some(4));
    assert_eq!(c.snapshot.entries[0].policy.rules, block(0, Mode::Enforce));
}

#[test]
fn presets_are_named_like_sets_and_compiled_only_when_used() {
    let c = ok(&format!(
        r#"{EDGE}
[[rule_set]]
name = "unused"
[[rule_set.rule]]
methods = ["TRACE"]
action = "deny"

[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]

[[host]]
names = ["a.test"]
kind = "proxy"
rule_set = "block_empty_user_agent"
rule_set_mode = "shadow"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/api"
  upstream = "app"
  rule_set = "edge"
  [[host.route]]
  path = "/bots"
  upstream = "app"
  rule_set = "block_ai_crawlers"
  rule_set_mode = "enforce"
  [[host.route]]
  path = "/open"
  upstream = "app"
  rule_set = false
"#
    ));
    let g = &c.snapshot.gate;
    // The profile's own (used) sets first, then presets in Preset::ALL order.
    assert_eq!(
        g.rule_set_names,
        ["edge", "block_ai_crawlers", "block_empty_user_agent"]
    );
    assert_eq!(g.rule_sets.len(), 3);
    for (set, p) in g.rule_sets[1..]
        .iter()
        .zip([Preset::BlockAiCrawlers, Preset::BlockEmptyUserAgent])
    {
        assert_eq!(set.rule(0), p.compile().rule(0));
        assert_eq!(set.len(), 1);
    }
    let gpt = evaluate(&g.rule_sets[1], "GET", "/", Some("Mozilla/5.0 GPTBot/1.1"));
    assert_eq!(gpt.action, Some(Action::Deny));
    let entry = &c.snapshot.entries[0];
    assert_eq!(entry.policy.rules, block(2, Mode::Shadow));
    let HostAction::Proxy(p) = &entry.action else {
        panic!("a proxy host");
    };
    let routes: Vec<Option<BlockRef>> = p.routes.iter().map(|r| r.policy.rules).collect();
    assert_eq!(
        routes,
        [
            block(2, Mode::Shadow),
            // Its own set, the host's mode.
            block(0, Mode::Shadow),
            block(1, Mode::Enforce),
            None,
        ]
    );
}

#[test]
fn a_set_may_not_take_a_presets_name() {
    assert_eq!(
        one("[[rule_set]]\nname = \"block_ai_crawlers\"\n"),
        at("ruleSet.id.reserved", "rule_set[0].name", 2, 8)
    );
}

/// A set named "s" with one rule whose body is `rule`.
fn rule(body: &str) -> String {
    format!("[[rule_set]]\nname = \"s\"\n[[rule_set.rule]]\n{body}\n")
}

#[test]
fn rule_set_errors_have_their_code_key_path_and_position() {
    let cases: Vec<(String, &str, &str, u32, u32)> = vec![
        (
            "[[rule_set]]\n[[rule_set.rule]]\nmethods = [\"GET\"]\naction = \"deny\"\n".into(),
            "ruleSet.name.required",
            "rule_set[0].name",
            1,
            1,
        ),
        (
            "[[rule_set]]\nname = \"Edge\"\n".into(),
            "ruleSet.name.invalid",
            "rule_set[0].name",
            2,
            8,
        ),
        (
            "[[rule_set]]\nname = \"s\"\n[[rule_set]]\nname = \"s\"\n".into(),
            "ruleSet.name.duplicate",
            "rule_set[1].name",
            4,
            8,
        ),
        (
            rule("methods = [\"GET\"]"),
            "ruleSet.rule.action.required",
            "rule_set[0].rule[0].action",
            3,
            1,
        ),
        (
            rule("methods = [\"GET\"]\naction = \"block\""),
            "ruleSet.rule.action.invalid",
            "rule_set[0].rule[0].action",
            5,
            10,
        ),
        (
            rule("action = \"deny\""),
            "ruleSet.rule.empty",
            "rule_set[0].rule[0]",
            3,
            1,
        ),
        (
            rule("user_agent.contains = []\naction = \"deny\""),
            "ruleSet.rule.empty",
            "rule_set[0].rule[0]",
            3,
            1,
        ),
        (
            rule("path = { exact = \"/a\", glob = \"/b*\" }\naction = \"deny\""),
            "ruleSet.rule.path.kind",
            "rule_set[0].rule[0].path",
            4,
            31,
        ),
        (
            rule("path = {}\naction = \"deny\""),
            "ruleSet.rule.path.kind",
            "rule_set[0].rule[0].path",
            3,
            1,
        ),
        (
            rule("path.exact = \"admin\"\naction = \"deny\""),
            "ruleSet.rule.path.invalid",
            "rule_set[0].rule[0].path.exact",
            4,
            14,
        ),
        (
            rule("path.prefix = \"/a%2Fb\"\naction = \"deny\""),
            "ruleSet.rule.path.encoded",
            "rule_set[0].rule[0].path.prefix",
            4,
            15,
        ),
        (
            rule("path.prefix = \"/admin/\"\naction = \"deny\""),
            "ruleSet.rule.path.notCanonical",
            "rule_set[0].rule[0].path.prefix",
            4,
            15,
        ),
        (
            rule("path.glob = \"/a***\"\naction = \"deny\""),
            "ruleSet.rule.path.glob.invalid",
            "rule_set[0].rule[0].path.glob",
            4,
            13,
        ),
        (
            rule("path.regex = \"(a\"\naction = \"deny\""),
            "ruleSet.rule.path.regex.invalid",
            "rule_set[0].rule[0].path.regex",
            4,
            14,
        ),
        (
            rule("methods = [\"GET\", \"BAD METHOD\"]\naction = \"deny\""),
            "ruleSet.rule.methods.invalid",
            "rule_set[0].rule[0].methods[1]",
            4,
            19,
        ),
        (
            rule("user_agent.contains = [\"ok\", \"\\u0001\"]\naction = \"deny\""),
            "ruleSet.rule.userAgent.invalid",
            "rule_set[0].rule[0].user_agent.contains[1]",
            4,
            30,
        ),
    ];
    for (src, code, path, line, column) in cases {
        assert_eq!(one(&src), at(code, path, line, column), "{src}");
    }
}

#[test]
fn too_many_methods_or_substrings_are_reported_at_the_list() {
    let methods: Vec<String> = (0..17).map(|i| format!("\"M{i}\"")).collect();
    assert_eq!(
        one(&rule(&format!(
            "methods = [{}]\naction = \"deny\"",
            methods.join(", ")
        ))),
        at(
            "ruleSet.rule.methods.invalid",
            "rule_set[0].rule[0].methods",
            4,
            11
        )
    );
    let subs: Vec<String> = (0..101).map(|i| format!("\"bot{i}\"")).collect();
    assert_eq!(
        one(&rule(&format!(
            "user_agent = {{ contains = [{}] }}\naction = \"deny\"",
            subs.join(", ")
        ))),
        at(
            "ruleSet.rule.userAgent.invalid",
            "rule_set[0].rule[0].user_agent.contains",
            4,
            27
        )
    );
}

#[test]
fn more_than_two_hundred_rules_is_too_many_at_the_first_past_the_bound() {
    let mut src = String::from("[[rule_set]]\nname = \"s\"\n");
    for i in 0..201 {
        src.push_str(&format!(
            "[[rule_set.rule]]\npath.exact = \"/r{i}\"\naction = \"deny\"\n"
        ));
    }
    assert_eq!(
        one(&src),
        at("ruleSet.rules.tooMany", "rule_set[0].rule[200]", 603, 1)
    );
}

#[test]
fn every_refused_rule_is_reported_at_once() {
    let src = "[[rule_set]]\nname = \"s\"\n\
               [[rule_set.rule]]\npath.glob = \"x\"\naction = \"deny\"\n\
               [[rule_set.rule]]\nmethods = [\"GET\"]\n\
               [[rule_set.rule]]\npath = { exact = \"/a\", prefix = \"/b\" }\nmethods = [\"\"]\naction = \"allow\"\n";
    assert_eq!(
        codes(src),
        [
            (
                "ruleSet.rule.path.glob.invalid",
                "rule_set[0].rule[0].path.glob".to_string()
            ),
            (
                "ruleSet.rule.action.required",
                "rule_set[0].rule[1].action".into()
            ),
            ("ruleSet.rule.path.kind", "rule_set[0].rule[2].path".into()),
            (
                "ruleSet.rule.methods.invalid",
                "rule_set[0].rule[2].methods[0]".into()
            ),
        ]
    );
}

#[test]
fn host_and_route_references_must_name_a_set_or_a_preset() {
    let base = format!(
        "{EDGE}[[upstream]]\nname = \"app\"\nservers = [\"127.0.0.1:9001\"]\n\
         [[host]]\nnames = [\"a.test\"]\nkind = \"proxy\"\n"
    );
    // EDGE is 24 lines (its first is empty), the upstream 3, the host 3.
    let host =
        |line: &str| format!("{base}{line}\n[[host.route]]\npath = \"/\"\nupstream = \"app\"\n");
    let route =
        |line: &str| format!("{base}[[host.route]]\npath = \"/\"\nupstream = \"app\"\n{line}\n");
    let cases = [
        (
            host("rule_set = \"nope\""),
            "host.ruleSet.unknown",
            "host[0].rule_set",
            31,
            12,
        ),
        (
            host("rule_set = true"),
            "host.ruleSet.invalid",
            "host[0].rule_set",
            31,
            12,
        ),
        (
            host("rule_set_mode = \"off\""),
            "host.ruleSet.mode.invalid",
            "host[0].rule_set_mode",
            31,
            17,
        ),
        (
            route("rule_set = \"nope\""),
            "route.ruleSet.unknown",
            "host[0].route[0].rule_set",
            34,
            12,
        ),
        (
            route("rule_set = true"),
            "route.ruleSet.invalid",
            "host[0].route[0].rule_set",
            34,
            12,
        ),
        (
            route("rule_set_mode = \"off\""),
            "route.ruleSet.mode.invalid",
            "host[0].route[0].rule_set_mode",
            34,
            17,
        ),
    ];
    for (src, code, path, line, column) in cases {
        assert_eq!(one(&src), at(code, path, line, column), "{src}");
    }
    assert_eq!(
        errors(&host("rule_set = \"nope\""))[0].message,
        "no [[rule_set]] or preset is named \"nope\" (known: edge; presets: block_ai_crawlers, \
         block_known_scanners, block_empty_user_agent)"
    );
    assert_eq!(
        errors("[[host]]\nnames = [\"a.test\"]\nrule_set = \"x\"\n")[0].message,
        "no [[rule_set]] or preset is named \"x\" (presets: block_ai_crawlers, \
         block_known_scanners, block_empty_user_agent)"
    );
}

#[test]
fn unused_sets_are_checked_but_not_compiled() {
    let c = ok(EDGE);
    assert!(c.snapshot.gate.rule_sets.is_empty());
    assert!(c.snapshot.gate.rule_set_names.is_empty());
}
