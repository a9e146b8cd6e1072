//! The profile examples in the docs compile as written.

use super::*;

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
    use crate::policy::pair_identity;
    use gapura_gate::policy::{RatePair, RequestPolicy};
    use gapura_gate::quota::{Class, RatePolicy};
    use gapura_gate::HostAction;
    let c = ok_with(include_str!("../../../profiles/example.toml"), 2);
    let g = &c.snapshot.gate;
    let names: Vec<&str> = g.rate_limits.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["site", "api"]);
    assert_eq!(
        g.rate_limits[1].policy,
        RatePolicy::per_second(20, 40).unwrap().split(2).unwrap()
    );
    assert_eq!(
        g.rate_pairs,
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
            policy(Some(0), Class::Normal, None),
            policy(Some(1), Class::Normal, None),
            policy(Some(0), Class::Normal, None),
            policy(None, Class::Normal, None),
            policy(Some(0), Class::Critical, Some(0)),
        ]
    );
}

#[test]
fn load_file_with_divides_split_limits_by_the_given_cores() {
    use gapura_gate::quota::RatePolicy;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles/example.toml");
    let full = RatePolicy::per_second(20, 40).unwrap();
    for cores in [1, 4] {
        let c = crate::load_file_with(&path, cores).unwrap();
        assert_eq!(
            c.snapshot.gate.rate_limits[1].policy,
            full.split(cores).unwrap()
        );
    }
}
