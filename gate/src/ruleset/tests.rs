use super::*;
use crate::path::{canonical, MAX_PATH_BYTES};
use crate::robots::AI_CRAWLERS;
use PathPatternKind::{Exact, Glob as GlobKind, Prefix, Regex};

fn set(specs: &[RuleSpec]) -> RuleSet {
    RuleSet::compile(specs).unwrap()
}

/// (rule, action) for a request with the given user-agent lines.
fn eval(s: &RuleSet, method: &str, path: &str, uas: &[&str]) -> (Option<usize>, Option<Action>) {
    let mut caches = s.new_regex_caches();
    let out = eval_with(s, &mut caches, method, path, uas);
    (out.rule, out.action)
}

fn eval_with(
    s: &RuleSet,
    caches: &mut RegexCaches,
    method: &str,
    path: &str,
    uas: &[&str],
) -> RuleOutcome {
    let mut scratch = [0u8; MAX_PATH_BYTES];
    let path = canonical(path.as_bytes(), &mut scratch).unwrap();
    let req = RuleRequest {
        method: method.as_bytes(),
        path,
        user_agents: uas.iter().map(|u| u.as_bytes()),
    };
    s.evaluate(&req, caches)
}

fn deny() -> RuleSpec {
    RuleSpec::new(Action::Deny)
}

#[test]
fn first_match_decides_across_exact_prefix_glob_and_regex_rules() {
    let s = set(&[
        deny().path(Regex, r"\.bak$"),                             // 0
        deny().path(Prefix, "/admin"),                             // 1
        RuleSpec::new(Action::Allow).path(Exact, "/admin/health"), // 2: shadowed by 1
        RuleSpec::new(Action::Drop).path(GlobKind, "/**/.env"),    // 3
        deny().path(Exact, "/.env"),                               // 4: shadowed by 3
        RuleSpec::new(Action::Allow).path(Prefix, "/"),            // 5
    ]);
    assert_eq!(
        eval(&s, "GET", "/admin/x.bak", &[]),
        (Some(0), Some(Action::Deny))
    );
    assert_eq!(
        eval(&s, "GET", "/admin/health", &[]),
        (Some(1), Some(Action::Deny))
    );
    assert_eq!(eval(&s, "GET", "/.env", &[]), (Some(3), Some(Action::Drop)));
    assert_eq!(
        eval(&s, "GET", "/app/.env", &[]),
        (Some(3), Some(Action::Drop))
    );
    assert_eq!(
        eval(&s, "GET", "/index.html", &[]),
        (Some(5), Some(Action::Allow))
    );
    // The same rules in another order: the order is the precedence.
    let s = set(&[
        RuleSpec::new(Action::Allow).path(Exact, "/admin/health"),
        deny().path(Prefix, "/admin"),
        deny().path(Regex, r"\.bak$"),
    ]);
    assert_eq!(
        eval(&s, "GET", "/admin/health", &[]),
        (Some(0), Some(Action::Allow))
    );
    assert_eq!(
        eval(&s, "GET", "/admin/x.bak", &[]),
        (Some(1), Some(Action::Deny))
    );
    assert_eq!(
        eval(&s, "GET", "/x.bak", &[]),
        (Some(2), Some(Action::Deny))
    );
    assert_eq!(eval(&s, "GET", "/administrator", &[]), (None, None));
}

#[test]
fn an_indexed_match_is_beaten_by_an_earlier_scanned_rule_only() {
    let s = set(&[
        deny().path(GlobKind, "/a/*"), // 0
        deny().path(Exact, "/a/b"),    // 1
        deny().methods(&["POST"]),     // 2
        deny().path(Prefix, "/a"),     // 3
    ]);
    assert_eq!(eval(&s, "GET", "/a/b", &[]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/a/b/c", &[]).0, Some(3));
    assert_eq!(eval(&s, "POST", "/a/b/c", &[]).0, Some(2));
    assert_eq!(eval(&s, "POST", "/a/b", &[]).0, Some(0));
}

#[test]
fn no_spelling_of_a_path_dodges_a_rule() {
    let s = set(&[deny().path(Prefix, "/admin")]);
    for raw in [
        "/ADMIN",
        "//admin/",
        "/x/../admin",
        "/%61dmin",
        "/admin;x=1",
        "/admin.",
        "/static/..%2Fadmin",
        "/static\\..\\admin/panel",
    ] {
        assert_eq!(eval(&s, "GET", raw, &[]).0, Some(0), "{raw}");
    }
    assert_eq!(eval(&s, "GET", "/administrator", &[]).0, None);
}

#[test]
fn methods_compare_ignoring_case() {
    let s = set(&[deny().methods(&["post", "Delete"]).path(Prefix, "/api")]);
    for m in ["POST", "post", "PoSt", "DELETE", "delete"] {
        assert_eq!(eval(&s, m, "/api/x", &[]).0, Some(0), "{m}");
    }
    for m in ["GET", "POS", "POSTS", ""] {
        assert_eq!(eval(&s, m, "/api/x", &[]).0, None, "{m:?}");
    }
    assert_eq!(
        eval(&s, "POST", "/other", &[]).0,
        None,
        "both conditions must hold"
    );
    assert_eq!(s.rule(0).unwrap().methods, vec!["DELETE", "POST"]);
}

#[test]
fn user_agent_substrings_are_read_on_every_line() {
    let s = set(&[deny().user_agent_contains(&["sqlmap", "Nikto"])]);
    assert_eq!(eval(&s, "GET", "/", &["sqlmap/1.7.2#stable"]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/", &["Mozilla/5.0 (NIKTO)"]).0, Some(0));
    // A second User-Agent line cannot hide the name from the gate.
    assert_eq!(
        eval(&s, "GET", "/", &["Mozilla/5.0 Firefox/120", "sqlmap/1.7"]).0,
        Some(0)
    );
    assert_eq!(eval(&s, "GET", "/", &["Mozilla/5.0", "curl/8"]).0, None);
    assert_eq!(
        eval(&s, "GET", "/", &[]).0,
        None,
        "no user agent contains nothing"
    );
    assert_eq!(eval(&s, "GET", "/", &["sql", "map"]).0, None);
}

#[test]
fn empty_user_agent_matches_a_missing_or_blank_one() {
    let s = set(&[deny().user_agent_empty()]);
    assert_eq!(eval(&s, "GET", "/", &[]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/", &[""]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/", &["  \t"]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/", &["", " "]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/", &["", "curl/8"]).0, None);
    assert_eq!(eval(&s, "GET", "/", &["x"]).0, None);
    // `empty` with substrings: either holds.
    let s = set(&[deny().user_agent_contains(&["bot"]).user_agent_empty()]);
    assert_eq!(eval(&s, "GET", "/", &[]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/", &["Somebot"]).0, Some(0));
    assert_eq!(eval(&s, "GET", "/", &["Firefox"]).0, None);
}

#[test]
fn allow_ends_the_set_and_leaves_the_rest_of_the_chain_to_run() {
    let s = set(&[
        RuleSpec::new(Action::Allow).path(Prefix, "/admin/public"),
        deny().path(Prefix, "/admin"),
    ]);
    let mut counters = RuleSetCounters::default();
    let mut caches = s.new_regex_caches();
    let mut run = |path: &str| {
        let req = RuleRequest {
            method: b"GET",
            path: path.as_bytes(),
            user_agents: std::iter::empty(),
        };
        s.decide(&req, &mut caches, &mut counters, Mode::Enforce)
    };
    let allowed = run("/admin/public/x");
    assert_eq!(allowed.outcome.action, Some(Action::Allow));
    assert_eq!(allowed.refusal, None);
    assert_eq!(run("/admin/x").refusal, Some(RuleRefusal::Deny));
    assert_eq!(run("/x").refusal, None);
    assert_eq!(
        counters,
        RuleSetCounters {
            denied: 1,
            allowed: 1,
            ..Default::default()
        }
    );
}

#[test]
fn shadow_mode_counts_the_refusal_and_lets_the_request_on() {
    let s = set(&[
        deny().path(Exact, "/a"),
        RuleSpec::new(Action::Drop).path(Exact, "/b"),
        RuleSpec::new(Action::Allow).path(Exact, "/c"),
    ]);
    let mut counters = RuleSetCounters::default();
    let mut caches = s.new_regex_caches();
    for path in ["/a", "/b", "/c", "/d"] {
        let req = RuleRequest {
            method: b"GET",
            path: path.as_bytes(),
            user_agents: std::iter::empty(),
        };
        let d = s.decide(&req, &mut caches, &mut counters, Mode::Shadow);
        assert_eq!(d.refusal, None, "{path}");
    }
    assert_eq!(
        counters,
        RuleSetCounters {
            allowed: 1,
            shadow_hits: 2,
            ..Default::default()
        }
    );
}

#[test]
fn a_regex_that_gives_up_fails_closed_for_deny_and_drop_and_open_for_allow() {
    // Caches made for another set make every search give up: deterministic.
    let other = set(&[deny().path(Regex, "x")]);
    for (action, want) in [
        (Action::Deny, Some(0)),
        (Action::Drop, Some(0)),
        (Action::Allow, None),
    ] {
        let s = set(&[RuleSpec::new(action).path(Regex, r"^/never$")]);
        let mut foreign = other.new_regex_caches();
        assert!(!s.owns(&foreign));
        // The path ends with a byte a match may end with, so the search
        // runs (a path ending otherwise is refused before it).
        let out = eval_with(&s, &mut foreign, "GET", "/xr", &[]);
        assert_eq!(out.rule, want, "{action:?}");
        assert_eq!(out.regex_give_ups, 1);
        let mut counters = RuleSetCounters::default();
        counters.record(&out, Mode::Enforce);
        assert_eq!(counters.regex_give_ups, 1);
        let out = eval_with(&s, &mut foreign, "GET", "/x", &[]);
        assert_eq!((out.rule, out.regex_give_ups), (None, 0), "{action:?}");
    }
    // A real give-up: a pattern whose DFA is exponential, a path that meets
    // a new state at almost every byte.
    let hostile = r"(a|b)*a(a|b){20}x";
    let mut path = String::from("/");
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..16_000 {
        crate::testing::xorshift64(&mut x);
        path.push(if x & 1 == 0 { 'a' } else { 'b' });
    }
    let s = set(&[
        RuleSpec::new(Action::Allow).path(Regex, hostile),
        deny().path(Regex, hostile),
        RuleSpec::new(Action::Allow).path(Prefix, "/"),
    ]);
    let mut caches = s.new_regex_caches();
    let mut scratch = [0u8; MAX_PATH_BYTES];
    let p = canonical(path.as_bytes(), &mut scratch).unwrap();
    let req = RuleRequest {
        method: b"GET",
        path: p,
        user_agents: std::iter::empty(),
    };
    let out = s.evaluate(&req, &mut caches);
    assert_eq!(out.regex_give_ups, 2, "both searches gave up");
    assert_eq!((out.rule, out.action), (Some(1), Some(Action::Deny)));
    // After the give-up the caches serve ordinary paths again.
    assert_eq!(eval_with(&s, &mut caches, "GET", "/abx", &[]).rule, Some(2));
}

#[test]
fn catastrophic_regex_and_glob_worst_cases_get_their_answers() {
    // No backtracking: the glob's steps are counted in glob.rs
    // (`quadratic_case_runs_in_linear_time`); the regex is a lazy DFA
    // with a bounded cache (`exponential_dfa_gives_up_instead_of_rebuilding_forever`).
    let s = set(&[
        deny().path(Regex, r"^/(a+)+$").methods(&["POST"]),
        deny().path(GlobKind, "/**/a*a*a*a*a*b"),
    ]);
    let path = format!("/{}", "a".repeat(8_000));
    assert_eq!(eval(&s, "GET", &path, &[]).0, None);
    assert_eq!(eval(&s, "POST", &path, &[]).0, Some(0));
    assert_eq!(eval(&s, "GET", &format!("{path}b"), &[]).0, Some(1));
    assert_eq!(eval(&s, "POST", &format!("{path}!"), &[]).0, None);
}

#[test]
fn needs_path_only_when_a_rule_reads_it() {
    assert!(!set(&[deny().user_agent_empty(), deny().methods(&["TRACE"])]).needs_path());
    assert!(set(&[deny().methods(&["TRACE"]), deny().path(Exact, "/x")]).needs_path());
    assert!(set(&[deny().path(GlobKind, "/*.php")]).needs_path());
    assert!(set(&[deny().path(Regex, "x")]).needs_path());
    assert!(!set(&[]).needs_path());
    assert_eq!(eval(&set(&[]), "GET", "/", &[]), (None, None));
}

#[test]
fn more_than_200_rules_is_too_many() {
    let ok: Vec<RuleSpec> = (0..200)
        .map(|i| deny().path(Exact, &format!("/p{i}")))
        .collect();
    let s = set(&ok);
    assert_eq!(s.len(), 200);
    assert_eq!(eval(&s, "GET", "/p199", &[]).0, Some(199));
    let mut too_many = ok.clone();
    too_many.push(deny().path(Exact, "/last"));
    let errors = RuleSet::compile(&too_many).unwrap_err();
    assert_eq!(errors, vec![RuleSetError::TooManyRules]);
    let mut b = RuleSetBuilder::new();
    for spec in &ok {
        b.push(spec).unwrap();
    }
    assert_eq!(b.push(&ok[0]), Err(RuleSetError::TooManyRules));
    assert_eq!(b.len(), 200);
}

#[test]
fn stated_rules_are_normalised_for_explain() {
    let s = set(&[deny()
        .path(Prefix, "/Admin")
        .methods(&["post", "GET", "get"])
        .user_agent_contains(&[" Zgrab ", "curl", "ZGRAB", "Bot"])]);
    let r = s.rule(0).unwrap();
    assert_eq!(r.path.as_ref().unwrap().pattern, "/admin");
    assert_eq!(r.methods, vec!["GET", "POST"]);
    assert_eq!(r.user_agent.contains, vec!["Bot", "curl", "Zgrab"]);
    let s = set(&[deny().path(GlobKind, "/**/*.PHP")]);
    assert_eq!(
        s.rule(0).unwrap().path.as_ref().unwrap().pattern,
        "/**/*.php"
    );
}

#[test]
fn presets_refuse_what_they_name() {
    let ai = Preset::BlockAiCrawlers.compile();
    assert_eq!(ai.len(), 1);
    assert_eq!(
        ai.rule(0).unwrap().user_agent.contains.len(),
        AI_CRAWLERS.len()
    );
    for name in AI_CRAWLERS {
        let ua = format!("Mozilla/5.0 (compatible; {name}/1.0; +https://example.com)");
        assert_eq!(
            eval(&ai, "GET", "/", &[&ua]),
            (Some(0), Some(Action::Deny)),
            "{name}"
        );
    }
    let browsers = [
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_7_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
        "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "curl/8.11.0",
    ];
    let scanners = Preset::BlockKnownScanners.compile();
    for b in browsers {
        assert_eq!(eval(&ai, "GET", "/", &[b]).0, None, "{b}");
        assert_eq!(eval(&scanners, "GET", "/", &[b]).0, None, "{b}");
    }
    for ua in [
        "sqlmap/1.8#stable (https://sqlmap.org)",
        "Mozilla/5.00 (Nikto/2.5.0) (Evasions:None) (Test:000001)",
        "Mozilla/5.0 (compatible; Nmap Scripting Engine; https://nmap.org/book/nse.html)",
        "masscan/1.3 (https://github.com/robertdavidgraham/masscan)",
        "Mozilla/5.0 zgrab/0.x",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Nuclei - Open-source project",
    ] {
        assert_eq!(eval(&scanners, "GET", "/", &[ua]).0, Some(0), "{ua}");
    }
    let empty = Preset::BlockEmptyUserAgent.compile();
    assert_eq!(eval(&empty, "GET", "/", &[]).0, Some(0));
    assert_eq!(eval(&empty, "GET", "/", &["curl/8"]).0, None);
    for p in Preset::ALL {
        assert_eq!(Preset::from_name(p.name()), Some(p));
        assert!(!p.compile().needs_path());
    }
    assert_eq!(Preset::from_name("block_everything"), None);
}

#[test]
fn cheap_conditions_spare_the_regex() {
    // A method that does not match means the regex never runs: caches that
    // would give up are not consulted.
    let s = set(&[deny().methods(&["POST"]).path(Regex, "x")]);
    let mut foreign = RegexCaches::none();
    let out = eval_with(&s, &mut foreign, "GET", "/x", &[]);
    assert_eq!((out.rule, out.regex_give_ups), (None, 0));
    let out = eval_with(&s, &mut foreign, "POST", "/x", &[]);
    assert_eq!((out.rule, out.regex_give_ups), (Some(0), 1));
}

#[test]
fn glob_prefilters_never_change_the_answer() {
    let patterns = [
        "/**/.env",
        "/**/*.php",
        "/**/.git/**",
        "/*/admin/*",
        "/a**b",
        "/**",
        "/admin",
        "/x/**/",
        "/**/**/x",
        "/*.php",
        "/a/*",
        "/**.php",
        "/**/backup*",
        "/api/**/admin",
    ];
    let paths = [
        "/",
        "/.env",
        "/a/.env",
        "/a.env",
        "/index.php",
        "/a/b/c.php",
        "/.git/config",
        "/x/.git/head",
        "/a/admin/b",
        "/admin",
        "/ab",
        "/a/x/b",
        "/x",
        "/x/a",
        "/a/backup.tar",
        "/api/admin",
        "/api/v1/admin",
        "/php",
        "/p",
    ];
    let globs: Vec<crate::glob::Glob> = patterns
        .iter()
        .map(|p| crate::glob::Glob::compile(p).unwrap())
        .collect();
    let one_each: Vec<RuleSet> = patterns
        .iter()
        .map(|p| set(&[deny().path(GlobKind, p)]))
        .collect();
    let all = set(&patterns
        .iter()
        .map(|p| deny().path(GlobKind, p))
        .collect::<Vec<_>>());
    for path in paths {
        for (k, glob) in globs.iter().enumerate() {
            let want = glob.matches(path.as_bytes());
            assert_eq!(
                eval(&one_each[k], "GET", path, &[]).0.is_some(),
                want,
                "{} on {path}",
                patterns[k]
            );
        }
        let first = globs.iter().position(|g| g.matches(path.as_bytes()));
        assert_eq!(eval(&all, "GET", path, &[]).0, first, "{path}");
    }
}

/// Compiles only for a type every shard may read at once.
fn shared<T: Send + Sync>() {
    let _ = std::marker::PhantomData::<T>;
}

/// Compiles only for a type a shard may own.
fn owned<T: Send>() {
    let _ = std::marker::PhantomData::<T>;
}

#[test]
fn compiled_blocks_can_be_shared_by_every_shard() {
    shared::<RuleSet>();
    shared::<crate::robots::Robots>();
    shared::<crate::custom_pages::CustomPages>();
    shared::<crate::maintenance::Maintenance>();
    owned::<RegexCaches>();
    owned::<RuleSetCounters>();
}

#[test]
fn the_user_agent_memo_never_changes_an_answer() {
    let s = set(&[
        deny().user_agent_contains(&["gptbot", "ccbot"]),
        deny().user_agent_contains(&["sqlmap"]).methods(&["POST"]),
    ]);
    let mut shared = s.new_regex_caches();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        crate::testing::xorshift64(&mut x);
        x
    };
    let names = [
        "Mozilla/5.0",
        "GPTBot/1.0",
        "curl/8",
        "sqlmap/1.7",
        "CCBot",
        "",
    ];
    for _ in 0..5000 {
        // Short and long lines, repeats and near-repeats, so memo slots
        // collide and entries are replaced.
        let ua = format!(
            "{} ({}) {}",
            names[(next() % 6) as usize],
            next() % 40,
            "x".repeat((next() % 300) as usize)
        );
        let method = if next() % 2 == 0 { "GET" } else { "POST" };
        let fresh = eval(&s, method, "/", &[&ua]);
        let req = RuleRequest {
            method: method.as_bytes(),
            path: b"/",
            user_agents: [ua.as_bytes()].into_iter(),
        };
        let memo = s.evaluate(&req, &mut shared);
        assert_eq!((memo.rule, memo.action), fresh, "{ua:?}");
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    const METHODS: [&str; 5] = ["GET", "POST", "PUT", "TRACE", "PROPFIND"];
    const REQUEST_METHODS: [&str; 7] = ["GET", "get", "POST", "PUT", "TRACE", "DELETE", "PropFind"];
    const PATHS: [(PathPatternKind, &str); 14] = [
        (Exact, "/wp-login.php"),
        (Prefix, "/wp-admin"),
        (Prefix, "/"),
        (Exact, "/"),
        (GlobKind, "/**/*.php"),
        (GlobKind, "/**/.env"),
        (GlobKind, "/**/backup*"),
        (GlobKind, "/*/admin/*"),
        (GlobKind, "/**/*.PHP"),
        (GlobKind, "/**/x"),
        (Regex, r"\.(bak|old)$"),
        (Regex, r"^/api/v\d+/"),
        (Regex, r"admin"),
        (Regex, r"(?i)X$"),
    ];
    const REQUEST_PATHS: [&str; 14] = [
        "/",
        "/wp-login.php",
        "/wp-admin/setup.php",
        "/a/b/index.php",
        "/INDEX.PHP",
        "/app/.env",
        "/backup.tar",
        "/x/admin/y",
        "/api/v1/users",
        "/db.BAK",
        "/products/item-42",
        "/x",
        "/a/X",
        "/static/app.js",
    ];
    const AGENTS: [&str; 4] = ["Mozilla/5.0 Chrome", "GPTBot/1.2", "sqlmap/1.0", " "];

    #[derive(Clone, Debug)]
    struct Pick {
        methods: Vec<usize>,
        path: Option<usize>,
        ua_contains: Vec<usize>,
        ua_empty: bool,
        action: u8,
    }

    fn pick() -> impl Strategy<Value = Pick> {
        (
            proptest::collection::vec(0..METHODS.len(), 0..3),
            proptest::option::of(0..PATHS.len()),
            proptest::collection::vec(0..3usize, 0..2),
            any::<bool>(),
            0..3u8,
        )
            .prop_map(|(methods, path, ua_contains, ua_empty, action)| Pick {
                methods,
                path,
                ua_contains,
                ua_empty,
                action,
            })
    }

    fn spec(p: &Pick) -> RuleSpec {
        let action = [Action::Deny, Action::Drop, Action::Allow][usize::from(p.action)];
        let mut r = RuleSpec::new(action);
        if !p.methods.is_empty() {
            let m: Vec<&str> = p.methods.iter().map(|&i| METHODS[i]).collect();
            r = r.methods(&m);
        }
        if let Some(i) = p.path {
            r = r.path(PATHS[i].0, PATHS[i].1);
        }
        if !p.ua_contains.is_empty() {
            let names: Vec<&str> = p.ua_contains.iter().map(|&i| &AGENTS[i][..5]).collect();
            r = r.user_agent_contains(&names);
        }
        if p.ua_empty {
            r = r.user_agent_empty();
        }
        r
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 300,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0004),
            ..ProptestConfig::default()
        })]

        /// The whole set decides what trying each rule alone, in order,
        /// decides: no mask or index ever hides the first match.
        #[test]
        fn a_set_decides_like_its_rules_tried_one_by_one(
            picks in proptest::collection::vec(pick(), 1..14),
            method in 0..REQUEST_METHODS.len(),
            path in 0..REQUEST_PATHS.len(),
            agent in proptest::option::of(0..AGENTS.len()),
        ) {
            let specs: Vec<RuleSpec> = picks.iter().map(spec).collect();
            let specs: Vec<RuleSpec> = specs
                .into_iter()
                .filter(|s| RuleSet::compile(std::slice::from_ref(s)).is_ok())
                .collect();
            prop_assume!(!specs.is_empty());
            let whole = set(&specs);
            let uas: Vec<&str> = agent.map(|a| AGENTS[a]).into_iter().collect();
            let (m, p) = (REQUEST_METHODS[method], REQUEST_PATHS[path]);
            let first = specs
                .iter()
                .position(|s| eval(&set(std::slice::from_ref(s)), m, p, &uas).0 == Some(0));
            let got = eval(&whole, m, p, &uas);
            prop_assert_eq!(got.0, first);
            prop_assert_eq!(got.1, first.map(|i| specs[i].action));
        }
    }
}

#[test]
fn glob_pieces_are_found_the_same_in_short_and_long_paths() {
    let s = set(&[
        deny().path(GlobKind, "/**/backup*"),
        deny().path(GlobKind, "/**/.git/**"),
    ]);
    let long = "/x".repeat(1500);
    for (prefix, name) in [("", "short"), (long.as_str(), "long")] {
        assert_eq!(
            eval(&s, "GET", &format!("{prefix}/a/BACKUP.tar"), &[]).0,
            Some(0),
            "{name}"
        );
        assert_eq!(
            eval(&s, "GET", &format!("{prefix}/.git/config"), &[]).0,
            Some(1),
            "{name}"
        );
        assert_eq!(
            eval(&s, "GET", &format!("{prefix}/a/back/up"), &[]).0,
            None,
            "{name}"
        );
    }
}
