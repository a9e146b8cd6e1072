//! Protective defaults: every dimension a profile leaves out gets its
//! default, sized from the machine, unless `[protection] off` names it.

use super::*;
use gapura_gate::quota::Budget;

const HOST: &str = "[[host]]\nnames = [\"a.test\"]\nbody = \"hi\"\n";

fn protected(src: &str, cores: u32) -> Compiled {
    match compile_protected(src, cores) {
        Ok(c) => c,
        Err(e) => panic!("{e:#?}"),
    }
}

#[test]
fn a_profile_that_says_nothing_gets_every_default_sized_from_the_machine() {
    let c = protected(HOST, 4);
    let g = &c.snapshot.gate;
    assert!(c.protection_off.is_empty());
    // 20,000 requests and 1,024 running per core, split over the 4 shards.
    assert_eq!(g.quota.global, Budget::new(20_000, 20_000).ok());
    assert_eq!(g.quota.leases.global, Budget::new(1_024, 1_024).ok());
    assert_eq!(g.quota.source, Budget::new(1_000, 1_000).ok());
    assert_eq!(g.quota.leases.per_key, Budget::new(128, 128).ok());
    let conn = g.connections.as_ref().unwrap();
    assert_eq!(conn.concurrent, Some(256));
    let rate = conn.rate.unwrap();
    assert_eq!((rate.requests(), rate.burst()), (50, 100));
    // 8 GiB over 4 shards at 64 bytes a key, 1/256 of it: 131,072 a shard.
    assert_eq!(g.quota_sizes.window_keys.max_keys(), 131_072);
    assert_eq!(g.quota_sizes.window_keys.critical_reserve(), 8_192);
    assert_eq!(g.quota_sizes.lease_keys.max_keys(), 131_072);
    // The per-client rate limit, on the host.
    let client = g
        .rate_limits
        .iter()
        .position(|r| r.name == "client")
        .expect("the default per-client rate limit");
    assert_eq!(g.rate_limits[client].policy.requests(), 100);
    assert_eq!(g.rate_limits[client].policy.burst(), 200);
    let pair = c.snapshot.entries[0].policy.rate_pair.unwrap();
    assert_eq!(g.rate_pairs[pair as usize].limit as usize, client);
}

#[test]
fn the_embedded_default_profile_protects() {
    let c = protected(crate::DEFAULT_PROFILE, 2);
    assert!(c.protection_off.is_empty());
    let g = &c.snapshot.gate;
    assert!(g.quota.global.is_some() && g.quota.source.is_some());
    assert!(g.connections.is_some());
    assert!(c.snapshot.entries[0].policy.rate_pair.is_some());
}

#[test]
fn off_names_the_dimensions_without_a_default() {
    let c = protected(
        &format!("{HOST}[protection]\noff = [\"client_rate\", \"source\"]\n"),
        2,
    );
    assert_eq!(c.protection_off, ["source", "client_rate"]);
    let g = &c.snapshot.gate;
    assert!(g.quota.source.is_none() && g.quota.leases.per_key.is_none());
    assert!(g.quota.global.is_some());
    assert!(g.rate_limits.is_empty());
    assert_eq!(c.snapshot.entries[0].policy.rate_pair, None);
    let all = protected(&format!("{HOST}[protection]\noff = [\"all\"]\n"), 2);
    assert_eq!(all.protection_off, crate::PROTECTION_DIMENSIONS);
    assert!(!all.snapshot.gate.has_budgets());
}

#[test]
fn written_settings_win_over_the_defaults() {
    let c = protected(
        &format!(
            "[quota.source]\nrequests = 5\n[[rate_limit]]\nname = \"own\"\nrequests = 1\nper = \"second\"\n{HOST}rate_limit = \"own\"\n"
        ),
        2,
    );
    let g = &c.snapshot.gate;
    assert_eq!(g.quota.source, Budget::new(5, 5).ok());
    assert_eq!(g.quota.leases.per_key, None, "the written table is whole");
    let pair = c.snapshot.entries[0].policy.rate_pair.unwrap();
    let limit = &g.rate_limits[g.rate_pairs[pair as usize].limit as usize];
    assert_eq!(limit.name, "own");
    // A [defaults] rate limit is the profile's own choice: no "client".
    let d = protected(
        &format!(
            "[defaults]\nrate_limit = \"own\"\n[[rate_limit]]\nname = \"own\"\nrequests = 1\nper = \"second\"\n{HOST}"
        ),
        2,
    );
    assert!(d
        .snapshot
        .gate
        .rate_limits
        .iter()
        .all(|r| r.name != "client"));
}

#[test]
fn an_unknown_dimension_is_an_error_at_its_position() {
    let e = compile_protected(
        &format!("{HOST}[protection]\noff = [\"source\", \"budgets\"]\n"),
        2,
    )
    .unwrap_err();
    assert_eq!(
        key(&e[0]),
        at("protection.off.unknown", "protection.off[1]", 5, 18)
    );
}

#[test]
fn a_protection_turned_off_with_nothing_in_its_place_is_a_warning() {
    let warned = |src: &str| -> Vec<String> {
        let c = protected(src, 4);
        c.warnings
            .iter()
            .filter(|w| w.code == "protection.off")
            .map(|w| {
                assert_eq!((w.path.as_str(), w.line), ("protection.off", 5), "{w:?}");
                w.message.split(" protection").next().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(
        warned(&format!("{HOST}[protection]\noff = [\"all\"]\n")),
        [
            "the default global",
            "the default source",
            "the default connections",
            "the default client_rate"
        ]
    );
    // A dimension turned off with the profile's own settings in its place
    // is no hole: no warning for it.
    assert_eq!(
        warned(&format!(
            "{HOST}[protection]\noff = [\"source\", \"connections\"]\n[quota.source]\nrequests = 500\n"
        )),
        ["the default connections"]
    );
    // Nothing off, nothing said.
    assert!(warned(&format!("{HOST}[protection]\noff = []\n")).is_empty());
    assert!(warned(HOST).is_empty());
}
