//! Rule-set micro benchmarks: a 50-rule set with exact and prefix paths,
//! globs, method and user-agent rules (the AI-crawler and scanner lists) and
//! one regex, evaluated for typical and refused requests; plus robots.txt
//! and a custom error page write for scale.
//!
//! `cargo bench -p gapura-bench --bench rules` (about two seconds). Each
//! figure is the median of 7 rounds of ns per operation, the canonical path
//! computed inside the measured call as the gate does. The regex's lazy DFA
//! is warmed by the first rounds.

use gapura_bench::measure;
use gapura_bench::reference::fifty_rules;
use gapura_gate::answer::WriteCtx;
use gapura_gate::custom_pages::{CustomPage, PageEntrySpec, PageVars};
use gapura_gate::mode::Mode;
use gapura_gate::path::{canonical, PathScratch, MAX_PATH_BYTES};
use gapura_gate::robots::{Robots, RobotsMode};
use gapura_gate::ruleset::{
    Action, PathPatternKind, RuleRequest, RuleSet, RuleSetCounters, RuleSpec,
};
use std::hint::black_box;

fn main() {
    let counters = fifty_rule_set();
    worst_cases();
    answers_for_scale();
    println!(
        "counters after the runs: denied {}, dropped {}, regex give-ups {}",
        counters.denied, counters.dropped, counters.regex_give_ups
    );
}

/// The 50-rule set on typical and refused requests; its counters after.
fn fifty_rule_set() -> RuleSetCounters {
    let set = RuleSet::compile(&fifty_rules()).unwrap();
    let mut caches = set.new_regex_caches();
    let mut counters = RuleSetCounters::default();
    let mut scratch: PathScratch = [0u8; MAX_PATH_BYTES];
    let chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
    let requests: [(&str, &str, &str); 8] = [
        ("GET", "/static/js/app.3f2a9c.js", chrome),
        ("GET", "/", chrome),
        ("GET", "/api/v1/users/42/orders?page=2", chrome),
        ("POST", "/api/v1/cart", chrome),
        ("GET", "/wp-login.php", chrome),
        ("GET", "/app/.env", chrome),
        (
            "GET",
            "/",
            "Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)",
        ),
        ("GET", "/Static/../db.BAK", chrome),
    ];
    let mut run = |i: usize| {
        let (method, target, ua) = requests[i];
        let path = canonical(target.as_bytes(), &mut scratch).unwrap();
        let req = RuleRequest {
            method: method.as_bytes(),
            path,
            user_agents: std::iter::once(ua.as_bytes()),
        };
        let d = set.decide(black_box(&req), &mut caches, &mut counters, Mode::Enforce);
        d.outcome.rule.map_or(99, |r| r as u64)
    };
    let expect: Vec<u64> = (0..requests.len()).map(&mut run).collect();
    println!("50-rule set: outcomes per request {expect:?} (99: no rule)");
    assert_eq!(expect, vec![99, 99, 99, 99, 10, 33, 3, 49]);
    for (name, i) in [
        ("browser GET static file (pass)", 0),
        ("browser GET / (pass)", 1),
        ("browser GET API with query (pass)", 2),
        ("GET /wp-login.php (prefix deny)", 4),
        ("GET /app/.env (glob drop)", 5),
        ("GPTBot (user-agent deny)", 6),
        ("non-canonical .BAK (regex deny)", 7),
    ] {
        measure(&format!("rule set, 50 rules: {name}"), 1_000_000, |_| {
            run(i)
        });
    }
    measure(
        "rule set, 50 rules: the 8 requests in turn",
        1_000_000,
        |i| run(i & 7),
    );
    counters
}

/// Worst cases: a hostile path against the classic quadratic glob, and an
/// operator's exponential regex against a path built to need a new DFA
/// state at almost every byte (it gives up and fails closed).
fn worst_cases() {
    let worst = RuleSet::compile(&[
        RuleSpec::new(Action::Deny).path(PathPatternKind::Glob, "/**/a*a*a*a*a*b"),
        RuleSpec::new(Action::Deny).path(PathPatternKind::Regex, r"(a|b)*a(a|b){20}x"),
    ])
    .unwrap();
    let mut worst_caches = worst.new_regex_caches();
    let mut worst_counters = RuleSetCounters::default();
    let glob_path = format!("/{}", "a".repeat(8_000));
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut regex_path = String::from("/");
    for _ in 0..8_000 {
        gapura_gate::testing::xorshift64(&mut x);
        regex_path.push(if x & 1 == 0 { 'a' } else { 'b' });
    }
    let mut run_worst = |path: &str| {
        let req = RuleRequest {
            method: b"GET",
            path: path.as_bytes(),
            user_agents: std::iter::empty(),
        };
        let d = worst.decide(
            black_box(&req),
            &mut worst_caches,
            &mut worst_counters,
            Mode::Enforce,
        );
        d.outcome.rule.map_or(99, |r| r as u64)
    };
    measure(
        "worst case: glob /**/a*a*a*a*a*b, 8,000 characters",
        2_000,
        |_| run_worst(&glob_path),
    );
    measure(
        "worst case: regex (a|b)*a(a|b){20}x, 8,000 characters",
        40,
        |_| run_worst(&regex_path),
    );
    println!(
        "worst-case regex: {} give-ups counted over the runs",
        worst_counters.regex_give_ups
    );
}

/// robots.txt and a custom error page write, for scale.
fn answers_for_scale() {
    let robots = Robots::compile(RobotsMode::BlockAiCrawlers, None).unwrap();
    let ctx = WriteCtx {
        date_line: b"Date: Mon, 30 Nov 2026 05:00:00 GMT\r\n",
        head_only: false,
        close: false,
        keep_alive_10: false,
    };
    let mut out = Vec::with_capacity(16 * 1024);
    measure("robots.txt answer (match and write)", 1_000_000, |_| {
        out.clear();
        if let Some(a) = robots.answer(black_box(b"GET"), black_box(b"/robots.txt")) {
            a.write_into(&mut out, &ctx);
        }
        out.len() as u64
    });
    let page = CustomPage::compile(
        403,
        &PageEntrySpec::message("No entry for {host}", "Request {requestId} was refused."),
        &[],
    )
    .unwrap();
    let vars = PageVars {
        request_id: b"01JDX3N4Q5R6S7T8",
        host: b"shop.example.com",
        cf_ray: b"",
    };
    measure("custom 403 message page write", 1_000_000, |_| {
        out.clear();
        page.write_into(&mut out, black_box(&vars), None, &ctx);
        out.len() as u64
    });
}
