//! Proves that rule sets, robots.txt, custom pages and maintenance decide and
//! write without allocating: a counting global allocator records every
//! allocation made on this test's thread while the calls run.

use gapura_gate::answer::WriteCtx;
use gapura_gate::custom_pages::{write_error_page, CustomPages, PageEntrySpec, PageVars};
use gapura_gate::maintenance::{Maintenance, MaintenanceCounters, MaintenanceSpec};
use gapura_gate::mode::Mode;
use gapura_gate::pages::{ErrorPages, ErrorStatus};
use gapura_gate::path::{canonical, PathScratch, MAX_PATH_BYTES};
use gapura_gate::robots::{Robots, RobotsMode};
use gapura_gate::ruleset::{
    Action, PathPatternKind, Preset, RegexCaches, RuleOutcome, RuleRefusal, RuleRequest, RuleSet,
    RuleSetCounters, RuleSpec,
};

mod common;
use common::allocations_in;

const CTX: WriteCtx<'static> = WriteCtx {
    date_line: b"Date: Mon, 30 Nov 2026 05:00:00 GMT\r\n",
    head_only: false,
    close: false,
    keep_alive_10: false,
};

fn reference_set() -> RuleSet {
    use PathPatternKind::*;
    RuleSet::compile(&[
        RuleSpec::new(Action::Allow).path(Exact, "/admin/health"),
        RuleSpec::new(Action::Deny).path(Prefix, "/admin"),
        RuleSpec::new(Action::Deny).path(Exact, "/.git/config"),
        RuleSpec::new(Action::Drop).path(Glob, "/**/.env"),
        RuleSpec::new(Action::Deny).path(Glob, "/**/*.php"),
        RuleSpec::new(Action::Deny).methods(&["TRACE", "TRACK"]),
        RuleSpec::new(Action::Deny).user_agent_contains(&["sqlmap", "nikto", "GPTBot"]),
        RuleSpec::new(Action::Deny).user_agent_empty(),
        RuleSpec::new(Action::Deny).path(Regex, r"\.(bak|old|swp)$"),
    ])
    .unwrap()
}

/// Canonicalises `raw`, evaluates, records under `mode`.
fn decide(
    set: &RuleSet,
    caches: &mut RegexCaches,
    counters: &mut RuleSetCounters,
    scratch: &mut PathScratch,
    method: &str,
    raw: &str,
    uas: &[&str],
) -> (RuleOutcome, Option<RuleRefusal>) {
    let path = canonical(raw.as_bytes(), scratch).unwrap();
    let req = RuleRequest {
        method: method.as_bytes(),
        path,
        user_agents: uas.iter().map(|u| u.as_bytes()),
    };
    let d = set.decide(&req, caches, counters, Mode::Enforce);
    (d.outcome, d.refusal)
}

#[test]
fn rule_set_decisions_allocate_nothing() {
    let set = reference_set();
    let mut caches = set.new_regex_caches();
    let mut counters = RuleSetCounters::default();
    let mut scratch: PathScratch = [0u8; MAX_PATH_BYTES];
    let browser = ["Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"];
    // Warm the regex on the path shapes it will see.
    for p in ["/static/app.js", "/db.bak", "/Index.HTML", "/admin/x"] {
        decide(
            &set,
            &mut caches,
            &mut counters,
            &mut scratch,
            "GET",
            p,
            &browser,
        );
    }
    let mut check = |name: &str,
                     method: &str,
                     raw: &str,
                     uas: &[&str],
                     rule: Option<usize>,
                     refusal: Option<RuleRefusal>| {
        let mut got = None;
        let n = allocations_in(|| {
            got = Some(decide(
                &set,
                &mut caches,
                &mut counters,
                &mut scratch,
                method,
                raw,
                uas,
            ));
        });
        let (outcome, r) = got.unwrap();
        assert_eq!((outcome.rule, r), (rule, refusal), "{name}");
        assert_eq!(n, 0, "{name} allocated {n} times");
    };
    check("pass", "GET", "/static/app.js", &browser, None, None);
    check(
        "pass, rewritten path",
        "GET",
        "/Static//./app.js;v=1",
        &browser,
        None,
        None,
    );
    check("allow", "GET", "/admin/health", &browser, Some(0), None);
    check(
        "exact deny",
        "GET",
        "/.git/config",
        &browser,
        Some(2),
        Some(RuleRefusal::Deny),
    );
    check(
        "prefix deny",
        "POST",
        "/ADMIN/users",
        &browser,
        Some(1),
        Some(RuleRefusal::Deny),
    );
    check(
        "glob drop",
        "GET",
        "/app/.env",
        &browser,
        Some(3),
        Some(RuleRefusal::Drop),
    );
    check(
        "glob deny",
        "GET",
        "/wp/login.php",
        &browser,
        Some(4),
        Some(RuleRefusal::Deny),
    );
    check(
        "method deny",
        "trace",
        "/x",
        &browser,
        Some(5),
        Some(RuleRefusal::Deny),
    );
    check(
        "user-agent deny",
        "GET",
        "/x",
        &["ok", "sqlmap/1.7"],
        Some(6),
        Some(RuleRefusal::Deny),
    );
    check(
        "blank user agent",
        "GET",
        "/x",
        &[" "],
        Some(7),
        Some(RuleRefusal::Deny),
    );
    check(
        "missing user agent",
        "GET",
        "/x",
        &[],
        Some(7),
        Some(RuleRefusal::Deny),
    );
    check(
        "regex deny, warmed",
        "GET",
        "/DB.bak",
        &browser,
        Some(8),
        Some(RuleRefusal::Deny),
    );
    assert_eq!(counters.allowed, 1);
}

#[test]
fn presets_and_shadow_mode_allocate_nothing() {
    let ai = Preset::BlockAiCrawlers.compile();
    let mut caches = ai.new_regex_caches();
    let mut counters = RuleSetCounters::default();
    let ua = ["Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)"];
    let n = allocations_in(|| {
        let req = RuleRequest {
            method: b"GET",
            path: b"",
            user_agents: ua.iter().map(|u| u.as_bytes()),
        };
        let d = ai.decide(&req, &mut caches, &mut counters, Mode::Shadow);
        assert_eq!(d.outcome.rule, Some(0));
        assert_eq!(d.refusal, None);
    });
    assert_eq!(n, 0);
    assert_eq!(counters.shadow_hits, 1);
}

#[test]
fn robots_answer_allocates_nothing() {
    let robots = Robots::compile(RobotsMode::BlockAiCrawlers, None).unwrap();
    let mut scratch: PathScratch = [0u8; MAX_PATH_BYTES];
    let mut out = Vec::with_capacity(4096);
    let n = allocations_in(|| {
        assert!(gapura_gate::robots::is_robots_candidate(b"/ROBOTS.txt?x=1"));
        let path = canonical(b"/ROBOTS.txt?x=1", &mut scratch).unwrap();
        let answer = robots.answer(b"GET", path).unwrap();
        answer.write_into(&mut out, &CTX);
        assert!(robots.answer(b"POST", path).is_none());
    });
    assert_eq!(n, 0);
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"));
}

#[test]
fn custom_page_write_allocates_nothing() {
    let pages = CustomPages::compile(&[
        (
            ErrorStatus::Forbidden,
            PageEntrySpec::message(
                "No entry, {host}",
                "Request {requestId} was refused ({status}).",
            ),
        ),
        (
            ErrorStatus::NotFound,
            PageEntrySpec::document("<h1>{status} {statusText}</h1><p>{host} {cfRay}</p>"),
        ),
    ])
    .unwrap();
    let builtin = ErrorPages::builtin();
    let vars = PageVars {
        request_id: b"01JDX3N4Q5R6S7T8",
        host: "<script>caf\u{e9}</script>.test".as_bytes(),
        cf_ray: b"8e1f2a3b4c5d6e7f-AMS",
    };
    let mut out = Vec::with_capacity(16 * 1024);
    let n = allocations_in(|| {
        for status in [
            ErrorStatus::Forbidden,
            ErrorStatus::NotFound,
            ErrorStatus::TooManyRequests,
        ] {
            for html in [true, false] {
                out.clear();
                write_error_page(
                    &mut out,
                    &builtin,
                    Some(&pages),
                    status,
                    html,
                    &vars,
                    Some(1),
                    &CTX,
                );
            }
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn maintenance_decision_and_page_allocate_nothing() {
    let m = Maintenance::compile(&MaintenanceSpec {
        enabled: true,
        retry_after_seconds: 300,
        ..MaintenanceSpec::default()
    })
    .unwrap()
    .unwrap();
    let mut counters = MaintenanceCounters::default();
    let mut out = Vec::with_capacity(8 * 1024);
    let vars = PageVars {
        request_id: b"r1",
        host: b"a.test",
        cf_ray: b"",
    };
    let n = allocations_in(|| {
        assert!(m.decide(false, Mode::Enforce, &mut counters).serves());
        assert!(!m.decide(true, Mode::Enforce, &mut counters).serves());
        assert!(!m.decide(false, Mode::Shadow, &mut counters).serves());
        m.write_into(&mut out, true, &vars, &CTX);
        out.clear();
        m.write_into(&mut out, false, &vars, &CTX);
    });
    assert_eq!(n, 0);
}

#[test]
fn the_counter_sees_an_allocation() {
    let n = allocations_in(|| {
        let v = std::hint::black_box(vec![1u8; 16]);
        drop(v);
    });
    assert_eq!(n, 1);
}
