//! Counted, not timed: what a pipelined batch of answers costs the
//! connection loop in allocations. Once a connection's buffers are warm, a
//! batch of 16 pipelined requests, each decided by the gate and answered
//! at once, allocates nothing, with the protections off and with the
//! embedded default's protections on (budgets, their leases, the
//! per-client rate limit). The workspace's counting allocator notes the
//! allocations of the test's thread while it is switched on; what the
//! test's own scheduling allocates (the yields that let the connection
//! run) is counted alone first and taken off.

use super::*;

// The workspace's counting allocator (gate's allocation tests and the
// bench crate's use it too), installed for this test binary.
#[path = "../../../../gate/tests/common/mod.rs"]
mod counting;

/// The allocations of this thread while the ready tasks run ([`settle`]).
async fn counted_settle() -> u64 {
    counting::count_from_zero();
    settle().await;
    counting::counted()
}

/// Serves two warm-up batches of 16 pipelined GETs on one connection, then
/// a third counted: the allocations the third costs beyond the test's own
/// scheduling.
async fn batch_allocations(rest: String) -> u64 {
    let shard = shard("", &rest);
    let c = open(&shard);
    let batch: Vec<u8> = (0..16)
        .flat_map(|i| get(&format!("/item-{i}?x=1"), &["Accept: */*"]))
        .collect();
    for _ in 0..2 {
        c.send(&batch);
        settle().await;
        for _ in 0..16 {
            assert_eq!(c.response(false).await.unwrap().status, 200);
        }
    }
    let scheduling = counted_settle().await;
    c.send(&batch);
    let served = counted_settle().await;
    for _ in 0..16 {
        assert_eq!(c.response(false).await.unwrap().status, 200);
    }
    assert_eq!(c.pending(), 0);
    assert_eq!(shard.stats.requests.get(), 48);
    served.saturating_sub(scheduling)
}

#[test]
fn a_warm_pipelined_batch_allocates_nothing() {
    let n = run(batch_allocations(HELLO.to_string()));
    assert_eq!(n, 0, "16 pipelined answers allocated {n} times");
}

#[test]
fn a_warm_pipelined_batch_allocates_nothing_with_the_default_protections() {
    let rest = format!("{HELLO}\n[protection]\noff = []\n");
    let n = run(batch_allocations(rest));
    assert_eq!(n, 0, "16 pipelined answers allocated {n} times");
}
