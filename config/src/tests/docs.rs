//! The profile examples in the docs compile as written.

use super::*;
use crate::codes::ProfileCode;

const LIMITS: &str = include_str!("../../../docs/limits.md");

/// The ```toml blocks of `doc`, in order.
fn toml_blocks(doc: &str) -> Vec<&str> {
    doc.split("```toml\n")
        .skip(1)
        .map(|b| &b[..b.find("```").expect("a closed block")])
        .collect()
}

#[test]
fn the_profile_keys_example_of_limits_md_compiles() {
    let blocks = toml_blocks(LIMITS);
    let example = blocks
        .iter()
        .find(|b| b.starts_with("[quota]"))
        .expect("limits.md has a [quota] example");
    let c = ok_with(example, 4);
    let g = &c.snapshot.gate;
    assert_eq!(g.rate_limits[0].name, "api");
    assert_eq!(g.operations, ["login"]);
    assert_eq!(g.identity_header.as_deref(), Some("authorization"));
    assert_eq!(g.rate_pairs.len(), 1);
    assert_eq!(c.snapshot.entries[0].policy.rate_pair, Some(0));
}

#[test]
fn the_gate_examples_of_profile_md_compile() {
    let blocks = toml_blocks(DOC);
    let mut seen = 0;
    for b in blocks {
        if ["[client]", "[[rate_limit]]", "[quota]"]
            .iter()
            .any(|t| b.starts_with(t))
        {
            ok_with(b, 4);
            seen += 1;
        }
    }
    assert_eq!(seen, 3);
}

#[test]
fn the_example_profile_compiles_its_gate_sections() {
    use crate::identity::pair_identity;
    use gapura_gate::policy::{RatePair, RequestPolicy};
    use gapura_gate::quota::{Class, RatePolicy};
    use gapura_gate::HostAction;
    let c = ok_with(include_str!("../../../profiles/example.toml"), 2);
    let g = &c.snapshot.gate;
    let names: Vec<&str> = g.rate_limits.iter().map(|d| d.name.as_str()).collect();
    // The profile's own limits, then the default per-client one for the
    // hosts that name none ([protection]).
    assert_eq!(names, ["site", "api", "client"]);
    assert_eq!(
        g.rate_limits[1].policy,
        RatePolicy::per_second(20, 40).unwrap().split(2).unwrap()
    );
    // Pairs in order of first use: the hosts before app.example.com take
    // the default per-client limit.
    assert_eq!(
        g.rate_pairs[5..7],
        [
            RatePair {
                identity: pair_identity("site", "app.example.com"),
                limit: 0,
            },
            RatePair {
                identity: pair_identity("api", "app.example.com"),
                limit: 1,
            },
        ]
    );
    for e in &c.snapshot.entries {
        let pair = &g.rate_pairs[e.policy.rate_pair.unwrap() as usize];
        let own = e.label == "app.example.com";
        assert_eq!(names[pair.limit as usize] == "client", !own, "{}", e.label);
    }
    assert_eq!(g.operations, ["upload"]);
    let id = c.snapshot.hosts.lookup(Some(b"app.example.com")).unwrap();
    let HostAction::Proxy(p) = &c.snapshot.entries[id as usize].action else {
        panic!("app.example.com is a proxy host");
    };
    let policy = |rate_pair, class, operation| RequestPolicy {
        rate_pair,
        class,
        operation,
        ..RequestPolicy::default()
    };
    let routes: Vec<RequestPolicy> = p.routes.iter().map(|r| r.policy.clone()).collect();
    assert_eq!(
        routes,
        [
            policy(Some(5), Class::Normal, None),
            policy(Some(6), Class::Normal, None),
            policy(Some(5), Class::Normal, None),
            policy(None, Class::Normal, None),
            policy(Some(5), Class::Critical, Some(0)),
        ]
    );
}

#[test]
fn load_file_with_divides_split_limits_by_the_given_cores() {
    use gapura_gate::quota::RatePolicy;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/example.toml");
    let full = RatePolicy::per_second(20, 40).unwrap();
    for cores in [1, 4] {
        let c = super::load_file_with(&path, cores).unwrap();
        assert_eq!(
            c.snapshot.gate.rate_limits[1].policy,
            full.split(cores).unwrap()
        );
    }
}

#[test]
fn the_example_profile_compiles_every_block() {
    use gapura_gate::access::password::verify;
    use gapura_gate::access::AddressRefusal;
    use gapura_gate::custom_pages::ReplaceUpstream;
    use gapura_gate::mode::Mode;
    use gapura_gate::policy::BlockRef;
    use gapura_gate::robots::RobotsMode;
    use gapura_gate::ErrorStatus;
    let c = ok_with(include_str!("../../../profiles/example.toml"), 2);
    assert!(c.warnings.is_empty(), "{:#?}", c.warnings);
    let s = &c.snapshot;
    let g = &s.gate;
    let lists: Vec<&str> = g.access_lists.iter().map(|l| l.name()).collect();
    assert_eq!(lists, ["office", "blocklist"]);
    assert_eq!(g.accept_list, Some(1));
    assert_eq!(
        g.access_lists[1].address_only_verdict("198.51.100.7".parse().unwrap()),
        Some(AddressRefusal::Drop)
    );
    assert_eq!(
        g.rule_set_names,
        [
            "edge",
            "suspects",
            "block_ai_crawlers",
            "block_known_scanners"
        ]
    );
    assert_eq!(g.rule_sets[0].len(), 5);
    // The example user's line is what its comment says.
    let users = g.access_lists[0].users();
    assert_eq!(users.len(), 1);
    let line = include_str!("../../../profiles/example.toml")
        .split('"')
        .find(|s| s.starts_with("$pbkdf2-sha256$"))
        .unwrap();
    assert!(verify(line, b"example-password"));

    let b = |index, mode| Some(BlockRef { index, mode });
    let entry = |name: &[u8]| &s.entries[s.hosts.lookup(Some(name)).unwrap() as usize];
    let intranet = entry(b"intranet.example.com");
    assert_eq!(intranet.policy.access, b(0, Mode::Enforce));
    assert_eq!(intranet.policy.rules, b(0, Mode::Shadow));
    assert_eq!(intranet.limits.max_body_bytes, 5 << 20);
    let gapura_gate::HostAction::Proxy(p) = &intranet.action else {
        panic!("intranet.example.com is a proxy host");
    };
    let routes: Vec<_> = p
        .routes
        .iter()
        .map(|r| (r.policy.access, r.policy.rules))
        .collect();
    assert_eq!(
        routes,
        [
            (b(0, Mode::Enforce), b(0, Mode::Shadow)),
            (None, b(3, Mode::Enforce)),
            (b(0, Mode::Enforce), b(0, Mode::Enforce)),
        ]
    );
    let x = &intranet.extras;
    assert_eq!(
        x.robots.as_ref().map(|r| r.mode()),
        Some(RobotsMode::DisallowAll)
    );
    assert_eq!(x.replace_upstream, ReplaceUpstream::Html);
    let pages = x.pages.as_ref().unwrap();
    assert!(pages.get(ErrorStatus::Forbidden).is_some());
    assert!(pages.get(ErrorStatus::NotFound).is_some());
    assert!(x.maintenance.is_none());

    let members = entry(b"members.example.com");
    let gapura_gate::HostAction::Proxy(p) = &members.action else {
        panic!("members.example.com is a proxy host");
    };
    let r = &p.routes;
    assert_eq!(r[0].policy.auth, b(0, Mode::Enforce));
    assert_eq!(r[1].policy.auth, None);
    let pow = r[0].policy.pow.expect("proof of work on /");
    assert_eq!((pow.difficulty, pow.when), (16, Some(1)));
    assert_eq!(r[1].policy.pow, None);
    assert_eq!(g.auth_providers[0].path, "/api/authz/forward-auth");
    assert_eq!(c.runtime.pow_key_file.as_deref(), Some("gapura-pow.key"));

    let shop = entry(b"shop.example.com");
    assert_eq!(
        (shop.policy.access, shop.policy.rules),
        (None, b(2, Mode::Enforce))
    );
    let m = shop.extras.maintenance.as_ref().unwrap();
    assert_eq!(
        (
            m.page.status(),
            m.page.retry_after_seconds(),
            m.bypass,
            m.mode
        ),
        (503, 600, Some(0), Mode::Enforce)
    );
    let robots = shop.extras.robots.as_ref().unwrap();
    let body = robots.answer(b"GET", b"/robots.txt").unwrap().body();
    assert_eq!(body, b"User-agent: *\nDisallow: /cart/\n");

    // The defaults reach every host that sets nothing of its own.
    let main = entry(b"example.com");
    assert_eq!(
        main.extras.robots.as_ref().map(|r| r.mode()),
        Some(RobotsMode::BlockAiCrawlers)
    );
    assert!(main
        .extras
        .pages
        .as_ref()
        .unwrap()
        .get(ErrorStatus::NotFound)
        .is_some());
    assert_eq!((main.policy.access, main.policy.rules), (None, None));
}

#[test]
fn the_block_examples_of_profile_md_compile() {
    let mut seen = Vec::new();
    for b in toml_blocks(DOC) {
        let first = b.lines().next().unwrap_or("");
        if ["[defaults]", "[[access_list]]", "[[rule_set]]"].contains(&first)
            || b.starts_with("[[host]]\nnames = [\"shop.example.com\"]")
        {
            let c = ok_with(b, 4);
            seen.push((first, c.warnings.len()));
        }
    }
    // The access-list example has one user without a hash: a warning.
    assert_eq!(
        seen,
        [
            ("[defaults]", 0),
            ("[[access_list]]", 1),
            ("[[rule_set]]", 0),
            ("[[host]]", 0)
        ]
    );
}

#[test]
fn the_profile_keys_examples_of_the_block_docs_compile() {
    for (name, doc) in [
        ("access.md", include_str!("../../../docs/access.md")),
        ("rules.md", include_str!("../../../docs/rules.md")),
        (
            "client-address.md",
            include_str!("../../../docs/client-address.md"),
        ),
    ] {
        let section = &doc[doc.find("## Profile keys").expect(name)..];
        let example = toml_blocks(section)[0];
        let c = match super::compile_with(example, 4) {
            Ok(c) => c,
            Err(e) => panic!("{name}: {e:#?}"),
        };
        let g = &c.snapshot.gate;
        match name {
            "access.md" => {
                let lists: Vec<&str> = g.access_lists.iter().map(|l| l.name()).collect();
                assert_eq!(lists, ["staff", "admins"]);
                assert_eq!(other_warnings(&c).len(), 1, "carol has no hash");
            }
            "rules.md" => {
                assert_eq!(g.rule_set_names, ["edge"]);
                let shop = &c.snapshot.entries[0].extras;
                assert!(shop.robots.is_some() && shop.pages.is_some());
                assert_eq!(shop.maintenance.as_ref().map(|m| m.bypass), Some(Some(0)));
            }
            _ => assert_eq!(g.accept_list, Some(0)),
        }
    }
}

#[test]
fn every_code_the_blocks_can_give_is_documented() {
    use gapura_gate::custom_pages::{PageError, PageField, PageProblem};
    use gapura_gate::glob::GlobError;
    use gapura_gate::maintenance::MaintenanceError;
    use gapura_gate::pathmatch::PatternError;
    use gapura_gate::robots::RobotsError;
    use gapura_gate::ruleset::{RuleError, RuleSetError};
    let mut all: Vec<&str> = vec![
        RobotsError::CustomTextRequired.code(),
        RobotsError::CustomTextTooLong.code(),
        RobotsError::CustomTextInvalid.code(),
        MaintenanceError::Status.code(),
        MaintenanceError::RetryAfter.code(),
        RuleSetError::TooManyRules.code(),
        RuleError::Empty.code(),
        RuleError::Glob(GlobError::NotRooted).code(),
        RuleError::Regex(String::new()).code(),
        RuleError::Methods { item: None }.code(),
        RuleError::UserAgent { item: None }.code(),
    ];
    for p in [
        PatternError::Invalid,
        PatternError::Encoded,
        PatternError::NotCanonical,
    ] {
        all.push(RuleError::Path(p).code());
    }
    for field in [PageField::Heading, PageField::Text, PageField::Html] {
        for problem in [
            PageProblem::Required,
            PageProblem::TooLong,
            PageProblem::Invalid,
            PageProblem::Unexpected,
            PageProblem::UnknownVariable(String::new()),
        ] {
            all.push(PageError { field, problem }.code());
        }
    }
    // The codes the config crate itself gives for the blocks and layers.
    all.extend([
        "errorPages.status.unsupported",
        "accessList.name.required",
        "accessList.name.invalid",
        "accessList.name.duplicate",
        "accessList.ip.dropDenied.withoutAddresses",
        "accessList.realm.invalid",
        "accessList.satisfy.invalid",
        "accessList.users.tooMany",
        "accessList.user.username.invalid",
        "accessList.user.username.duplicate",
        "accessList.user.password.plain",
        "accessList.user.password.malformed",
        "accessList.user.password.iterations",
        "accessList.countries.noSource",
        "accessList.user.noPassword",
        "accessList.empty",
        "country.invalid",
        "country.duplicate",
        "country.conflict",
        "ruleSet.name.required",
        "ruleSet.name.invalid",
        "ruleSet.name.duplicate",
        "ruleSet.id.reserved",
        "ruleSet.rule.action.required",
        "ruleSet.rule.action.invalid",
        "ruleSet.rule.path.kind",
        "bundle.name.required",
        "bundle.name.invalid",
        "bundle.name.duplicate",
        "host.bundle.unknown",
        "server.accessList.unknown",
        "server.accessList.noAddresses",
        "host.accessList.unknown",
        "host.accessList.invalid",
        "host.accessList.mode.invalid",
        "host.ruleSet.unknown",
        "host.ruleSet.invalid",
        "host.ruleSet.mode.invalid",
        "route.accessList.unknown",
        "route.accessList.invalid",
        "route.accessList.mode.invalid",
        "route.ruleSet.unknown",
        "route.ruleSet.invalid",
        "route.ruleSet.mode.invalid",
        "host.robots.invalid",
        "robots.custom_text.unexpected",
        "maintenance.mode.invalid",
        "host.maintenance.bypassUnknown",
        "host.replace_upstream.invalid",
    ]);
    let missing: Vec<&&str> = all
        .iter()
        .filter(|c| !DOC.contains(&format!("| `{c}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "missing from docs/profile.md: {missing:?}"
    );
}

#[test]
fn the_access_logs_step_names_are_the_ones_profile_md_lists() {
    use gapura_gate::chain::Block;
    let doc = include_str!("../../../docs/profile.md");
    let at = doc
        .find("and `step` (the gate step that")
        .expect("the step list");
    let list = &doc[at..at + doc[at..].find(").").expect("its end")];
    let blocks = [
        Block::Host,
        Block::Path,
        Block::Budgets,
        Block::ConnectionRate,
        Block::AccessAddress,
        Block::RuleSet,
        Block::Access,
        Block::RateLimit,
        Block::ForwardAuth,
        Block::Identity,
        Block::ProofOfWork,
        Block::RequestLimits,
        Block::HttpsRedirect,
        Block::Robots,
        Block::Maintenance,
        Block::Answer,
    ];
    assert_eq!(blocks.len(), Block::COUNT);
    for b in blocks {
        assert!(
            list.contains(&format!("`{}`", b.name())),
            "{} is not listed",
            b.name()
        );
    }
}

/// The keys a table takes, from the error an unknown key gets.
fn keys_of(table: &str) -> Vec<String> {
    let src = format!("{table}\nzz_unknown = 1\n");
    let errors = match compile_str(&src) {
        Ok(_) => panic!("{table}: an unknown key is an error"),
        Err(errors) => errors,
    };
    let e = errors
        .iter()
        .find(|e| e.code == "profile.unknown_key")
        .unwrap_or_else(|| panic!("{table}: {errors:?}"));
    let list = e.message.split("expected one of").nth(1).unwrap_or("");
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_example_profile_shows_every_key_the_profile_reads() {
    let example = include_str!("../../../profiles/example.toml");
    let tables = [
        "[server]",
        "[tls]",
        "[defaults.limits]",
        "[quota]",
        "[quota.global]",
        "[quota.source]",
        "[quota.connections]",
        "[client]",
        "[[upstream]]\nname = \"u\"\nservers = [\"127.0.0.1:1\"]",
        "[[rate_limit]]\nname = \"r\"\nrequests = 1",
        "[[access_list]]\nname = \"a\"",
        "[[auth_provider]]\nname = \"p\"\nurl = \"http://127.0.0.1:1\"",
        "[[host]]\nnames = [\"h.test\"]",
        "[[udp]]\nname = \"g\"\nlisten = [\"127.0.0.1:1\"]\nservers = [\"127.0.0.1:2\"]",
        "[fleet]\nredis = \"redis://127.0.0.1:1\"\nnodes_expected = 1",
    ];
    let mut missing = Vec::new();
    for t in tables {
        for k in keys_of(t) {
            let shown = example.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.starts_with(&format!("{k} ="))
                    || l.starts_with(&format!("{k}."))
                    || l.contains(&format!(" {k} = "))
                    || l.contains(&format!("{{ {k} ="))
                    || (l.starts_with('[')
                        && (l.contains(&format!(".{k}]")) || l.contains(&format!(".{k}."))))
            });
            if !shown {
                missing.push(format!("{}: {k}", t.lines().next().unwrap()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in profiles/example.toml: {missing:#?}"
    );
}

#[test]
fn the_host_level_table_of_profile_md_lists_every_host_level_key() {
    let start = DOC
        .find("Host-level settings (in `[defaults]`, a bundle or a host):")
        .expect("profile.md has the host-level table");
    let mut lines = DOC[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    assert_eq!(
        lines.next(),
        Some("| key | value | built-in | layers | meaning |")
    );
    // key, value, built-in and layers, backticks left out but the key's.
    let rows: Vec<[String; 4]> = lines
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let key = cells[0].split('`').nth(1).expect("a row names its key");
            let plain = |c: &str| c.replace('`', "");
            [
                key.to_string(),
                plain(cells[1]),
                plain(cells[2]),
                plain(cells[3]),
            ]
        })
        .collect();
    let table: Vec<[String; 3]> = crate::hostsettings::KEYS
        .iter()
        .map(|k| [k.key, k.value, k.builtin].map(str::to_string))
        .collect();
    let mut documented: Vec<[String; 3]> = rows
        .iter()
        .map(|[k, v, b, _]| [k.clone(), v.clone(), b.clone()])
        .collect();
    let mut declared = table.clone();
    documented.sort_unstable();
    declared.sort_unstable();
    assert_eq!(
        documented, declared,
        "profile.md's rows (key, value, built-in) against hostsettings' table"
    );
    // Every key the table lists is one that [defaults] and a bundle read,
    // and the layers column says "all" of those a route reads too.
    let keys: Vec<&str> = crate::hostsettings::KEYS.iter().map(|k| k.key).collect();
    for table in ["[defaults]", "[[bundle]]\nname = \"b\""] {
        let read = keys_of(table);
        for k in &keys {
            assert!(read.iter().any(|r| r == k), "{table} does not read {k}");
        }
    }
    let route = keys_of("[[host]]\nnames = [\"h.test\"]\n\n[[host.route]]\npath = \"/\"");
    for [key, _, _, layers] in &rows {
        if key == "websocket" {
            // A route's websocket is a key of its own: a switch that lets
            // Upgrade through, not the host's message limits.
            continue;
        }
        assert_eq!(
            layers.starts_with("all"),
            route.contains(key),
            "{key}: layers {layers:?}, a route reads it: {}",
            route.contains(key)
        );
    }
}
