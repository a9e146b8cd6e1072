//! What a host answers besides its content, through the real binary: rule
//! sets (every condition, first match, presets, shadow mode), the managed
//! robots.txt, settings layered through a bundle and a route, and `explain`
//! agreeing with the server about the rule steps. Error pages and
//! maintenance are in gate_pages.rs.

mod common;

use common::gate::*;
use common::upstream;
use common::*;

fn respond_host(name: &str, extra: &str) -> String {
    format!("[[host]]\nnames = [\"{name}\"]\nkind = \"respond\"\nbody = \"site\\n\"\n{extra}\n")
}

// ---------------------------------------------------------------------
// Rule sets
// ---------------------------------------------------------------------

const EDGE: &str = r#"
[[rule_set]]
name = "edge"

[[rule_set.rule]]
path.exact = "/public/ok"
action = "allow"

[[rule_set.rule]]
path.prefix = "/admin"
methods = ["POST", "DELETE"]
action = "deny"

[[rule_set.rule]]
path.glob = "/**/.env"
action = "drop"

[[rule_set.rule]]
path.regex = '\.(bak|old)$'
action = "deny"

[[rule_set.rule]]
user_agent.contains = ["evilbot"]
action = "deny"

[[rule_set.rule]]
path.prefix = "/private"
action = "deny"

[[rule_set.rule]]
path.exact = "/private/open"
action = "allow"

[[rule_set.rule]]
methods = ["PURGE"]
action = "deny"
"#;

fn rules_profile() -> String {
    profile(
        "",
        &format!(
            "{EDGE}\n{}{}{}{}{}",
            respond_host("rules.test", "default = true\nrule_set = \"edge\""),
            respond_host(
                "airobots.test",
                "rule_set = \"block_ai_crawlers\"\nrobots = \"block_ai_crawlers\""
            ),
            respond_host("ai.test", "rule_set = \"block_ai_crawlers\""),
            respond_host("scan.test", "rule_set = \"block_known_scanners\""),
            respond_host("empty.test", "rule_set = \"block_empty_user_agent\""),
        ),
    )
}

#[test]
fn a_rule_set_denies_by_path_method_and_user_agent() {
    let g = Gapura::start(&rules_profile());
    let s = |method: &str, path: &str, headers: &[&str]| {
        status(&g, &req_with(method, "rules.test", path, headers))
    };

    // Prefix with methods: only the named methods, on the canonical path.
    assert_eq!(s("GET", "/admin/users", &[]), 200);
    assert_eq!(s("POST", "/admin/users", &["Content-Length: 0"]), 403);
    assert_eq!(s("DELETE", "/admin", &[]), 403);
    assert_eq!(s("POST", "/%41DMIN//users", &["Content-Length: 0"]), 403);
    assert_eq!(s("POST", "/administrator", &["Content-Length: 0"]), 200);
    // A regex, ignoring case; a longer name is not matched.
    assert_eq!(s("GET", "/backup/db.bak", &[]), 403);
    assert_eq!(s("GET", "/backup/DB.OLD", &[]), 403);
    assert_eq!(s("GET", "/backup/db.bak.txt", &[]), 200);
    // A method alone.
    assert_eq!(s("PURGE", "/anything", &[]), 403);
    // A user agent, in any of the User-Agent lines.
    assert_eq!(s("GET", "/", &["User-Agent: Mozilla/5.0 EvilBot/2.1"]), 403);
    assert_eq!(
        s(
            "GET",
            "/",
            &["User-Agent: Mozilla/5.0", "User-Agent: evilbot/1.0"]
        ),
        403
    );
    assert_eq!(s("GET", "/", &["User-Agent: Mozilla/5.0"]), 200);

    // The refusal is the 403 page.
    let r = request(g.addr, &req_with("PURGE", "rules.test", "/", &[]));
    assert!(text(&r).starts_with("403 Forbidden\n"), "{}", text(&r));

    assert_eq!(
        wait_sample(&g, &rule_sample("edge", "denied"), 9, METRIC_WAIT),
        9
    );
}

#[test]
fn a_drop_rule_closes_the_connection_without_a_byte() {
    let g = Gapura::start(&rules_profile());
    assert!(dropped_from(
        "127.0.0.1",
        g.addr,
        &get("rules.test", "/a/b/.env")
    ));
    assert!(dropped_from(
        "127.0.0.1",
        g.addr,
        &get("rules.test", "/a/%2Eenv")
    ));
    // Another file of that name is not the glob's.
    assert_eq!(status(&g, &get("rules.test", "/a/.envrc")), 200);
    assert_eq!(
        wait_sample(&g, &rule_sample("edge", "dropped"), 2, METRIC_WAIT),
        2
    );
    assert_eq!(
        metric_sample(&g, "gapura_gate_drops_total{at=\"request\"}"),
        Some(2)
    );
}

#[test]
fn the_first_matching_rule_decides_and_allow_ends_the_set() {
    let g = Gapura::start(&rules_profile());
    let s =
        |path: &str, headers: &[&str]| status(&g, &req_with("GET", "rules.test", path, headers));
    // An allow before the user-agent deny: the deny is never reached.
    assert_eq!(s("/public/ok", &["User-Agent: evilbot"]), 200);
    // A deny before the allow: the allow is never reached.
    assert_eq!(s("/private/open", &[]), 403);
    assert_eq!(s("/private/x", &[]), 403);
    assert_eq!(
        wait_sample(&g, &rule_sample("edge", "allowed"), 1, METRIC_WAIT),
        1
    );
    assert_eq!(metric_sample(&g, &rule_sample("edge", "denied")), Some(2));
}

#[test]
fn robots_txt_is_never_ruled_on() {
    let g = Gapura::start(&rules_profile());
    for req in [
        req_with("GET", "rules.test", "/robots.txt", &["User-Agent: evilbot"]),
        req_with(
            "HEAD",
            "rules.test",
            "/robots.txt",
            &["User-Agent: evilbot"],
        ),
        req_with(
            "GET",
            "rules.test",
            "/ROBOTS.TXT?x=1",
            &["User-Agent: evilbot"],
        ),
        req_with(
            "GET",
            "airobots.test",
            "/robots.txt",
            &["User-Agent: GPTBot/1.0"],
        ),
    ] {
        let r = request(g.addr, &req);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&req));
    }
    // The same crawler is refused everywhere else on that host.
    assert_eq!(
        status(
            &g,
            &req_with("GET", "airobots.test", "/", &["User-Agent: GPTBot/1.0"])
        ),
        403
    );
    // Other methods on it are ruled on like any path.
    assert_eq!(
        status(
            &g,
            &req_with(
                "POST",
                "rules.test",
                "/robots.txt",
                &["User-Agent: evilbot", "Content-Length: 0"]
            )
        ),
        403
    );
}

#[test]
fn presets_are_named_like_sets() {
    let g = Gapura::start(&rules_profile());
    let s = |host: &str, headers: &[&str]| status(&g, &req_with("GET", host, "/", headers));
    assert_eq!(
        s(
            "ai.test",
            &["User-Agent: Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)"]
        ),
        403
    );
    assert_eq!(s("ai.test", &["User-Agent: ClaudeBot/1.0"]), 403);
    assert_eq!(
        s("ai.test", &["User-Agent: Mozilla/5.0 Firefox/128.0"]),
        200
    );
    assert_eq!(s("ai.test", &[]), 200);
    assert_eq!(s("scan.test", &["User-Agent: sqlmap/1.8"]), 403);
    assert_eq!(s("scan.test", &["User-Agent: curl/8.5"]), 200);
    assert_eq!(s("empty.test", &[]), 403);
    assert_eq!(s("empty.test", &["User-Agent:  "]), 403);
    assert_eq!(s("empty.test", &["User-Agent: curl/8.5"]), 200);
    assert_eq!(
        wait_sample(
            &g,
            &rule_sample("block_ai_crawlers", "denied"),
            2,
            METRIC_WAIT
        ),
        2
    );
}

#[test]
fn a_shadowed_rule_set_lets_the_request_through_and_counts_it() {
    let prof = profile(
        "",
        &format!(
            "{EDGE}\n{}",
            respond_host(
                "shadow.test",
                "default = true\nrule_set = \"edge\"\nrule_set_mode = \"shadow\""
            )
        ),
    );
    let g = Gapura::start(&prof);
    let s = |method: &str, path: &str, headers: &[&str]| {
        status(&g, &req_with(method, "shadow.test", path, headers))
    };
    assert_eq!(s("POST", "/admin", &["Content-Length: 0"]), 200);
    assert_eq!(s("GET", "/a/.env", &[]), 200);
    assert_eq!(s("GET", "/", &["User-Agent: evilbot"]), 200);
    // An allow is counted as allowed in either mode.
    assert_eq!(s("GET", "/public/ok", &[]), 200);
    assert_eq!(
        wait_sample(&g, &rule_sample("edge", "allowed"), 1, METRIC_WAIT),
        1
    );
    assert_eq!(metric_sample(&g, &rule_sample("edge", "shadow")), Some(3));
    assert_eq!(metric_sample(&g, &rule_sample("edge", "denied")), Some(0));
    assert_eq!(metric_sample(&g, &rule_sample("edge", "dropped")), Some(0));
}

// ---------------------------------------------------------------------
// Managed robots.txt
// ---------------------------------------------------------------------

#[test]
fn a_managed_robots_txt_answers_get_and_head_and_other_methods_fall_through() {
    let prof = profile(
        "",
        &format!(
            "{}{}{}{}",
            respond_host("closed.test", "robots = \"disallow_all\""),
            respond_host("noai.test", "robots = \"block_ai_crawlers\""),
            respond_host(
                "custom.test",
                "robots = \"custom\"\nrobots_text = \"User-agent: *\\r\\nDisallow: /cart/\""
            ),
            respond_host("plain.test", ""),
        ),
    );
    let g = Gapura::start(&prof);

    let r = request(g.addr, &get("closed.test", "/robots.txt"));
    assert_eq!(r.status, 200);
    assert_eq!(text(&r), "User-agent: *\nDisallow: /\n");
    assert_eq!(r.header("Content-Type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("Cache-Control"), Some("max-age=3600"));
    assert_eq!(r.header("X-Content-Type-Options"), Some("nosniff"));
    let len = r.body.len().to_string();

    // HEAD: the same length, no body; the same file by any spelling.
    let r = request(
        g.addr,
        b"HEAD /robots.txt HTTP/1.1\r\nHost: closed.test\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Length"), Some(len.as_str()));
    for path in ["/ROBOTS.TXT?x=1", "//robots.txt", "/%72obots.txt"] {
        let r = request(g.addr, &get("closed.test", path));
        assert_eq!(text(&r), "User-agent: *\nDisallow: /\n", "{path}");
    }

    let r = request(g.addr, &get("noai.test", "/robots.txt"));
    let body = text(&r);
    assert!(body.contains("User-agent: GPTBot\n"), "{body}");
    assert!(body.contains("User-agent: ClaudeBot\n"), "{body}");
    assert!(body.ends_with("User-agent: *\nAllow: /\n"), "{body}");

    let r = request(g.addr, &get("custom.test", "/robots.txt"));
    assert_eq!(text(&r), "User-agent: *\nDisallow: /cart/\n");

    // Other methods, and other paths, go to the host.
    let r = request(
        g.addr,
        b"POST /robots.txt HTTP/1.1\r\nHost: closed.test\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!((r.status, text(&r).as_str()), (200, "site\n"));
    let r = request(g.addr, &get("closed.test", "/robots.txt.bak"));
    assert_eq!(text(&r), "site\n");
    // passthrough: the host answers.
    let r = request(g.addr, &get("plain.test", "/robots.txt"));
    assert_eq!(text(&r), "site\n");

    assert_eq!(
        wait_sample(&g, "gapura_robots_served_total", 7, METRIC_WAIT),
        7
    );
}

// ---------------------------------------------------------------------
// Layering: defaults, a bundle, a host, a route
// ---------------------------------------------------------------------

fn bundle_profile(up: std::net::SocketAddr) -> String {
    profile(
        "",
        &format!(
            r#"
[defaults]
rule_set = "block_ai_crawlers"

[[rule_set]]
name = "noadmin"

[[rule_set.rule]]
path.prefix = "/admin"
action = "deny"

[[access_list]]
name = "office"
allow = ["127.0.0.2"]

[[bundle]]
name = "internal"
rule_set = "noadmin"
access_list = "office"

[[upstream]]
name = "app"
servers = ["{up}"]

[[host]]
names = ["intra.test"]
kind = "proxy"
use = "internal"

  [[host.route]]
  path = "/"
  upstream = "app"

  [[host.route]]
  path = "/healthz"
  upstream = "app"
  access_list = false

  [[host.route]]
  path = "/open"
  upstream = "app"
  access_list = false
  rule_set = false

[[host]]
names = ["www.test"]
body = "site\n"
"#
        ),
    )
}

#[test]
fn a_host_using_a_bundle_gets_its_settings_and_a_route_can_turn_the_access_list_off() {
    let up = upstream::fixed(b"up");
    let g = Gapura::start(&bundle_profile(up.addr));
    let from = |src: &str, host: &str, path: &str, headers: &[&str]| {
        request_from(src, g.addr, &req_with("GET", host, path, headers)).status
    };
    let gpt = "User-Agent: GPTBot/1.2";

    // The bundle's access list and rule set.
    assert_eq!(from("127.0.0.2", "intra.test", "/", &[]), 200);
    assert_eq!(from("127.0.0.2", "intra.test", "/admin/x", &[]), 403);
    assert_eq!(from("127.0.0.1", "intra.test", "/", &[]), 403);
    // The bundle's set replaced the defaults' preset.
    assert_eq!(from("127.0.0.2", "intra.test", "/", &[gpt]), 200);
    // A route turns the list off and keeps the set...
    assert_eq!(from("127.0.0.1", "intra.test", "/healthz", &[]), 200);
    assert_eq!(from("127.0.0.1", "intra.test", "/healthz/admin", &[]), 200);
    // ...or turns both off.
    assert_eq!(from("127.0.0.1", "intra.test", "/open/admin", &[]), 200);

    // A host without the bundle has the defaults' preset only.
    assert_eq!(from("127.0.0.1", "www.test", "/admin", &[]), 200);
    assert_eq!(from("127.0.0.1", "www.test", "/", &[gpt]), 403);

    assert_eq!(
        wait_sample(&g, &rule_sample("noadmin", "denied"), 1, METRIC_WAIT),
        1
    );
    assert_eq!(
        metric_sample(&g, &access_sample("office", "refused")),
        Some(1)
    );
}

// ---------------------------------------------------------------------
// Explain agrees with the server
// ---------------------------------------------------------------------

#[test]
fn explain_reports_the_rule_step_with_the_servers_answer() {
    let prof = rules_profile();
    let file = ProfileFile::new(&prof);
    let g = Gapura::start(&prof);

    // A deny: rule 2 (prefix with methods), 403 on both.
    let said = explain_json(&file.path, &["POST", "http://rules.test/admin/x"]);
    assert_eq!(explain_answer(&said), ("refuse".into(), 403));
    let steps = explain_steps(&said, "rule set");
    assert_eq!(steps.len(), 1, "{said}");
    assert!(steps[0].starts_with("set edge: rule 2 matches"), "{said}");
    assert_eq!(
        status(
            &g,
            &req_with("POST", "rules.test", "/admin/x", &["Content-Length: 0"])
        ),
        403
    );

    // A drop: rule 3, and the server closes.
    let said = explain_json(&file.path, &["GET", "http://rules.test/a/.env"]);
    assert_eq!(explain_answer(&said), ("drop".into(), 0));
    assert!(
        explain_steps(&said, "rule set")[0].starts_with("set edge: rule 3 matches"),
        "{said}"
    );
    assert!(dropped_from(
        "127.0.0.1",
        g.addr,
        &get("rules.test", "/a/.env")
    ));

    // A user agent in a second line, given to explain as two headers.
    let said = explain_json(
        &file.path,
        &[
            "-H",
            "User-Agent: Mozilla/5.0",
            "-H",
            "User-Agent: EvilBot",
            "http://rules.test/",
        ],
    );
    assert_eq!(explain_answer(&said), ("refuse".into(), 403));
    assert!(
        explain_steps(&said, "rule set")[0].starts_with("set edge: rule 5 matches"),
        "{said}"
    );

    // An allow ends the set: the host answers.
    let said = explain_json(
        &file.path,
        &["-H", "User-Agent: evilbot", "http://rules.test/public/ok"],
    );
    assert_eq!(explain_answer(&said), ("respond".into(), 200));
    assert_eq!(
        status(
            &g,
            &req_with("GET", "rules.test", "/public/ok", &["User-Agent: evilbot"])
        ),
        200
    );

    // robots.txt is exempt.
    let said = explain_json(
        &file.path,
        &["-H", "User-Agent: evilbot", "http://rules.test/robots.txt"],
    );
    assert_eq!(explain_answer(&said), ("respond".into(), 200));
    assert!(
        explain_steps(&said, "rule set")[0].contains("never ruled on"),
        "{said}"
    );

    // A preset, by name.
    let said = explain_json(
        &file.path,
        &["-H", "User-Agent: GPTBot/1.2", "http://ai.test/"],
    );
    assert_eq!(explain_answer(&said), ("refuse".into(), 403));
    assert!(
        explain_steps(&said, "rule set")[0].starts_with("set block_ai_crawlers: rule 1 matches"),
        "{said}"
    );
    assert_eq!(
        status(
            &g,
            &req_with("GET", "ai.test", "/", &["User-Agent: GPTBot/1.2"])
        ),
        403
    );
}
