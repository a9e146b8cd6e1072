//! Nodes of a fleet: started until they share their fleet-scoped limits,
//! and their exchange's rounds with Redis counted.

use super::{wait_until, Gapura};
use std::time::Duration;

/// The longest wait for a node's start or its rounds.
pub const CEILING: Duration = Duration::from_secs(30);

/// A node on `profile`, once it says it shares its fleet-scoped limits.
pub fn start_node(profile: &str) -> Gapura {
    let g = Gapura::start(profile);
    assert!(
        g.wait_log("sharing fleet-scoped limits through", CEILING),
        "{}",
        g.log_text()
    );
    g
}

/// The rounds of a node's exchange with Redis so far.
pub fn rounds(g: &Gapura) -> u64 {
    g.metric("gapura_fleet_sync_rounds_total")
}

/// Waits until every node has run `n` more rounds than now.
pub fn wait_rounds(nodes: &[Gapura], n: u64) {
    let before: Vec<u64> = nodes.iter().map(rounds).collect();
    for (g, b) in nodes.iter().zip(before) {
        assert!(
            wait_until(CEILING, || rounds(g) >= b + n),
            "no sync rounds: {}",
            g.log_text()
        );
    }
}

/// A `key_file` for the fleet's profiles (the tests' Redis has no
/// password): written once a process.
pub fn key_file() -> String {
    let p = std::env::temp_dir().join(format!("gapura-test-fleet-key-{}", std::process::id()));
    if !p.exists() {
        std::fs::write(&p, "the tests' fleet key, forty characters\n").unwrap();
    }
    p.display().to_string()
}
