//! The chain's cost on the reference request, counted rather than timed:
//! the steps it runs and the allocations it makes. The reference is the
//! embedded default profile compiled (its protections) with a proxy host
//! (`gapura_bench::steps`); a step added to the chain, a step that starts
//! to apply to a typical request, or an allocation on the decision path
//! fails here with the steps or the count that changed.
//!
//! The steps are counted by a trace that records each one's name (the
//! trace's `Path` step builds its canonical path as a `String`, so
//! allocations are counted with the server's `NoTrace` only).

use gapura_bench::steps::{Policy, Reference, ALL};
use gapura_gate::chain::{Block, NoTrace, Step, Trace};

#[path = "../../gate/tests/common/mod.rs"]
mod counting;
use counting::allocations;

/// Records the name of every step the chain reports.
#[derive(Default)]
struct Steps(Vec<&'static str>);

impl Trace for Steps {
    fn step(&mut self, step: Step<'_>) {
        self.0.push(match step {
            Step::Client { .. } => "client",
            Step::Host { .. } => "host",
            Step::Path { .. } => "path",
            Step::Route { .. } => "route",
            Step::Budgets { .. } => "budgets",
            Step::ConnectionRate { .. } => "connection_rate",
            Step::RateLimit { .. } => "rate_limit",
            Step::Identity { .. } => "identity",
            Step::RequestLimits { .. } => "request_limits",
            Step::AccessAddress { .. } => "access_address",
            Step::RuleSet { .. } => "rule_set",
            Step::Access { .. } => "access",
            Step::HttpsRedirect { .. } => "https_redirect",
            Step::Robots { .. } => "robots",
            Step::Maintenance { .. } => "maintenance",
            Step::ProofOfWork { .. } => "proof_of_work",
            Step::ForwardAuth { .. } => "forward_auth",
            Step::PowEndpoint { .. } => "pow_endpoint",
        });
    }
    fn enabled(&self) -> bool {
        true
    }
}

/// The steps the reference request runs on `host`, and the allocations of
/// its next decisions with `NoTrace` (warm: each decided once before).
fn count(r: &mut Reference, host: &[u8]) -> (Vec<&'static str>, u64) {
    let mut steps = Steps::default();
    let (block, answered) = r.serve(host, &mut steps);
    assert!(
        answered && block == Block::Answer,
        "the reference request is answered by its host, not {block:?}: {:?}",
        steps.0
    );
    let _ = r.serve(host, &mut NoTrace);
    let used = allocations(|| {
        for _ in 0..16 {
            std::hint::black_box(r.serve(std::hint::black_box(host), &mut NoTrace));
        }
    });
    (steps.0, used)
}

/// The default profile's respond host: the client, the host, the path
/// (the budgets read it), the budgets, the request limits, the client rate
/// limit; the answer.
#[test]
fn the_default_profile_runs_six_steps_and_allocates_nothing() {
    let mut r = Reference::new(&[], &[]);
    let (steps, used) = count(&mut r, b"localhost");
    assert_eq!(
        steps,
        [
            "client",
            "host",
            "path",
            "budgets",
            "request_limits",
            "rate_limit"
        ],
        "the steps of the reference request on the default profile's host"
    );
    assert_eq!(steps.len(), 6);
    assert_eq!(
        used, 0,
        "16 warm decisions on the default profile allocated {used} times"
    );
}

/// The proxy host with the default profile's protections and nothing
/// else: the route joins the six.
#[test]
fn the_proxy_host_runs_seven_steps_and_allocates_nothing() {
    let mut r = Reference::new(&[], &[]);
    let (steps, used) = count(&mut r, b"app.test");
    assert_eq!(
        steps,
        [
            "client",
            "host",
            "path",
            "route",
            "budgets",
            "request_limits",
            "rate_limit"
        ],
        "the steps of the reference request on the proxy host"
    );
    assert_eq!(used, 0, "16 warm decisions allocated {used} times");
}

/// Every step's policy on the proxy host: every step of docs/gate.md from
/// 2 to 15 runs (the access list's two), and still nothing is allocated.
#[test]
fn every_policy_runs_every_step_and_allocates_nothing() {
    let mut r = Reference::new(&ALL, &[]);
    let (steps, used) = count(&mut r, b"app.test");
    assert_eq!(
        steps,
        [
            "client",
            "host",
            "path",
            "route",
            "budgets",
            "connection_rate",
            "access_address",
            "rule_set",
            "request_limits",
            "https_redirect",
            "robots",
            "maintenance",
            "access",
            "rate_limit",
            "forward_auth",
            "identity",
            "proof_of_work",
        ],
        "the steps of the reference request with every policy"
    );
    assert_eq!(steps.len(), 17);
    assert_eq!(
        used, 0,
        "16 warm decisions with every policy allocated {used} times"
    );
}

/// Each policy alone adds its own steps to the proxy host's seven, and no
/// allocation.
#[test]
fn each_policy_adds_its_steps_and_no_allocation() {
    for p in ALL {
        let mut r = Reference::new(&[p], &[]);
        let (steps, used) = count(&mut r, b"app.test");
        let added: &[&str] = match p {
            Policy::ConnectionRate => &["connection_rate"],
            Policy::AccessAddress => &["access_address"],
            Policy::RuleSet => &["rule_set"],
            Policy::HttpsRedirect => &["https_redirect"],
            Policy::Robots => &["robots"],
            Policy::Maintenance => &["maintenance"],
            Policy::AccessPassword => &["access_address", "access"],
            Policy::ForwardAuth => &["forward_auth"],
            Policy::Identity => &["identity"],
            Policy::ProofOfWork => &["proof_of_work"],
        };
        assert_eq!(steps.len(), 7 + added.len(), "{p:?}: {steps:?}");
        for a in added {
            assert!(steps.contains(a), "{p:?} runs {a}: {steps:?}");
        }
        assert_eq!(used, 0, "{p:?}: 16 warm decisions allocated {used} times");
    }
}

/// The chain's blocks: one more (or fewer) changes what the reference
/// must cover. A new block needs its policy in `gapura_bench::steps`
/// (`Policy`, `ALL`), its step in the lists above and here.
#[test]
fn the_chain_has_sixteen_blocks_and_the_reference_covers_each() {
    assert_eq!(
        Block::COUNT,
        16,
        "the chain's block count changed: give the new block its policy in \
         bench/src/steps.rs (Policy, ALL) and its step in these tests"
    );
    // Every block but the answer (the host and path are facts, the
    // budgets, request limits and rate limit the default profile's) has
    // a policy of its own in the reference.
    assert_eq!(ALL.len(), Block::COUNT - 6);
}
