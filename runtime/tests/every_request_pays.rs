//! Every request pays its budgets, through the real binary: an unknown
//! host's 404, a 401 challenge, a wrong password, an access-list or
//! rule-set 403, a 413/414/431 and the maintenance page all count in the
//! global and source budgets, and once they are spent the next request,
//! wherever it goes, gets 429. A client over its budget never costs a
//! PBKDF2.

mod common;

use common::gate::{
    access_sample, basic, get, get_close, req_with, respond_host, wait_sample, METRIC_WAIT,
    PASSWORD_HASH, VERIFY_WAIT,
};
use common::*;
use std::time::Duration;

/// A global budget of `budget` requests a minute (no window boundary falls
/// inside a test), and a host for every kind of refusal.
fn paying_profile(budget: u32) -> String {
    profile(
        "",
        &format!(
            r#"[quota]
window_ms = 60000

[quota.global]
requests = {budget}

[[access_list]]
name = "staff"
users = [{{ name = "alice", password_hash = "{PASSWORD_HASH}" }}]

[[access_list]]
name = "nobody"
deny = ["0.0.0.0/0", "::/0"]

[[rule_set]]
name = "closed"

[[rule_set.rule]]
path.prefix = "/"
action = "deny"

{}{}{}{}{}{}"#,
            respond_host("open.test", ""),
            respond_host("auth.test", "access_list = \"staff\""),
            respond_host("denied.test", "access_list = \"nobody\""),
            respond_host("rules.test", "rule_set = \"closed\""),
            respond_host(
                "small.test",
                "limits = { max_body_bytes = 10, max_url_bytes = 256, max_header_count = 8 }"
            ),
            respond_host("down.test", "[host.maintenance]\nenabled = true"),
        ),
    )
}

/// Three requests of one kind get their own answer; the fourth request,
/// to a host that would answer 200, gets 429: the three were counted.
fn three_then_429(kind: &str, req: &[u8], want: u16) {
    let g = Gapura::start(&paying_profile(3));
    for i in 0..3 {
        let r = request(g.addr, req);
        assert_eq!(r.status, want, "{kind}: request {i}");
    }
    let r = request(g.addr, &get_close("open.test", "/"));
    assert_eq!(
        r.status, 429,
        "{kind}: the budget was spent by the refusals"
    );
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"global\"}",
            1,
            METRIC_WAIT
        ),
        1,
        "{kind}"
    );
    assert_eq!(
        g.wait_metric("gapura_quota_admitted_total{shard=\"0\"}", 3, METRIC_WAIT),
        3,
        "{kind}"
    );
}

#[test]
fn unknown_hosts_pay() {
    three_then_429("unknown host", &get_close("nowhere.test", "/"), 404);
}

#[test]
fn challenges_pay() {
    three_then_429("401", &get_close("auth.test", "/"), 401);
}

#[test]
fn access_list_refusals_pay() {
    three_then_429("access 403", &get_close("denied.test", "/"), 403);
}

#[test]
fn rule_set_refusals_pay() {
    three_then_429("rule 403", &get_close("rules.test", "/x"), 403);
}

#[test]
fn request_limit_refusals_pay() {
    let big_body = req_with(
        "POST",
        "small.test",
        "/",
        &["Content-Length: 11", "Connection: close"],
    );
    three_then_429("413", &big_body, 413);
    let long = format!("/{}", "a".repeat(300));
    three_then_429("414", &get_close("small.test", &long), 414);
    let headers: Vec<String> = (0..9).map(|i| format!("X-{i}: v")).collect();
    let refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    three_then_429("431", &req_with("GET", "small.test", "/", &refs), 431);
}

#[test]
fn maintenance_answers_pay() {
    three_then_429("maintenance", &get_close("down.test", "/"), 503);
}

#[test]
fn heads_the_parser_refuses_pay() {
    three_then_429(
        "malformed",
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n",
        400,
    );
}

#[test]
fn a_client_over_its_budget_costs_no_password_check() {
    let g = Gapura::start(&paying_profile(3));
    let wrong = basic("alice", "not-the-password");
    let auth = format!("Authorization: {wrong}");
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let r = request(
            g.addr,
            &req_with("GET", "auth.test", "/", &[&auth, "Connection: close"]),
        );
        statuses.push(r.status);
    }
    assert_eq!(statuses[..3], [401, 401, 401], "{statuses:?}");
    assert!(statuses[3..].iter().all(|&s| s == 429), "{statuses:?}");
    // Three checks ran; the seventeen over budget cost none. The ticker
    // publishes a shard's counters together: once the seventeen refusals
    // show, the checks counted before them do too.
    assert_eq!(
        g.wait_metric(
            "gapura_quota_refused_total{shard=\"0\",level=\"global\"}",
            17,
            VERIFY_WAIT
        ),
        17
    );
    assert_eq!(
        wait_sample(&g, &access_sample("staff", "verification"), 3, VERIFY_WAIT),
        3
    );
}

#[test]
fn a_right_password_is_checked_once_and_paid_once() {
    // Budget 2: the signed-in request is counted once, not once before its
    // check and again after it.
    let g = Gapura::start(&paying_profile(2));
    let auth = format!("Authorization: {}", basic("alice", common::gate::PASSWORD));
    let signed_in = req_with("GET", "auth.test", "/", &[&auth, "Connection: close"]);
    assert_eq!(request(g.addr, &signed_in).status, 200);
    assert_eq!(request(g.addr, &get_close("open.test", "/")).status, 200);
    assert_eq!(request(g.addr, &get_close("open.test", "/")).status, 429);
}

/// A request no host takes (404): its warning says so, and leaves out the
/// policy and host it has none of.
#[test]
fn a_request_no_host_takes_is_warned_in_words() {
    let g = Gapura::start(&profile("", &respond_host("only.test", "")));
    let r = request(g.addr, &get_close("nobody.test", "/"));
    assert_eq!(r.status, 404);
    assert!(g.wait_log("step host", Duration::from_secs(10)));
    let log = g.log_text();
    let line = log.lines().find(|l| l.contains("step host")).unwrap();
    assert!(
        line.contains("refused: shard 0 step host: no host takes it status 404 source "),
        "{line}"
    );
    assert!(
        !line.contains(" policy -") && !line.contains(" host -"),
        "{line}"
    );
}

#[test]
fn refusals_are_warned_at_most_once_a_second_per_kind() {
    let g = Gapura::start(&paying_profile(1000));
    for _ in 0..5 {
        assert_eq!(request(g.addr, &get_close("rules.test", "/x")).status, 403);
    }
    assert!(g.wait_log("step rule_set", Duration::from_secs(10)));
    let log = g.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("refused: ")).collect();
    // Five refusals in well under two seconds: one line, or two across a
    // second's boundary.
    assert!((1..=2).contains(&lines.len()), "{lines:#?}");
    let line = lines[0];
    assert!(
        line.contains("step rule_set policy closed host rules.test status 403 source "),
        "{line}"
    );
    assert!(
        !line.contains("127.0.0.1"),
        "the address is never logged: {line}"
    );
}

#[test]
fn the_protective_defaults_refuse_a_flood_from_one_source_and_serve_another() {
    // Nothing but a host: every protection is its default.
    let g = Gapura::start(&profile(
        "",
        &format!(
            "{}\n[protection]\noff = []\n",
            respond_host("open.test", "default = true")
        ),
    ));
    let mut flood = Client::connect_from("127.0.0.2", g.addr);
    let burst: Vec<u8> = (0..300).flat_map(|_| get("open.test", "/")).collect();
    flood.send(&burst);
    let statuses: Vec<u16> = (0..300).map(|_| flood.response(false).status).collect();
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    // The per-client default: a burst of 200 (and the odd token refilled
    // while the burst is read), then 429.
    assert!((200..=210).contains(&ok), "{ok} served: {statuses:?}");
    assert_eq!(ok + refused, 300);
    // Another source is served meanwhile.
    assert_eq!(
        request_from("127.0.1.2", g.addr, &get_close("open.test", "/")).status,
        200
    );
}

#[test]
fn check_says_which_protection_dimensions_are_off() {
    let dir = common::TempDir::new();
    let file = dir.0.join("p.toml");
    std::fs::write(
        &file,
        "[[host]]\nnames = [\"a.test\"]\nbody = \"hi\"\n[protection]\noff = [\"connections\", \"global\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::bin())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("protection off: global, connections"),
        "{text}"
    );
    std::fs::write(&file, "[[host]]\nnames = [\"a.test\"]\nbody = \"hi\"\n").unwrap();
    let out = std::process::Command::new(common::bin())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("protection: every dimension on (written or default)"),
        "{text}"
    );
}
