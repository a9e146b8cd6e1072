//! Properties of the quota tables over arbitrary arrival patterns.

use gapura_gate::quota::{Ceiling, Class, RatePolicy, RateTable, Slot, WindowTable};
use proptest::prelude::*;

/// A policy from arbitrary parameters within the bounds.
fn policy() -> impl Strategy<Value = RatePolicy> {
    (
        1u64..=50,
        prop_oneof![Just(1_000u64), Just(3_700), Just(60_000)],
        1u32..=20,
    )
        .prop_map(|(requests, per_ms, burst)| RatePolicy::new(requests, per_ms, burst).unwrap())
}

/// Arrivals: (gap in ms since the previous one, requests at that instant).
fn arrivals() -> impl Strategy<Value = Vec<(u64, usize)>> {
    prop::collection::vec(
        (prop_oneof![0u64..5, 0u64..200, 0u64..5_000], 1usize..=4),
        1..300,
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x9A7B_0005),
        ..ProptestConfig::default()
    })]

    /// For any arrival pattern, the requests admitted in any interval
    /// [a, b] number at most burst + rate x (b - a).
    #[test]
    fn admitted_in_any_interval_is_at_most_burst_plus_rate_times_interval(
        p in policy(),
        arrivals in arrivals(),
        start in 0u64..10_000_000,
    ) {
        let mut t = RateTable::new(64).unwrap();
        let slot = Slot::new(1).unwrap();
        let mut now = start;
        let mut admitted = Vec::new();
        for (gap, n) in arrivals {
            now += gap;
            for _ in 0..n {
                if t.try_acquire(&p, slot, 0xdead_beef, now).allowed {
                    admitted.push(now);
                }
            }
        }
        // The worst interval starts and ends at admissions.
        for i in 0..admitted.len() {
            for j in i..admitted.len() {
                let count = (j - i + 1) as u128;
                let span_ms = (admitted[j] - admitted[i]) as u128;
                // count <= burst + requests * span / per, in integers.
                prop_assert!(
                    count.saturating_sub(p.burst() as u128) * p.per_ms() as u128
                        <= p.requests() as u128 * span_ms,
                    "{} admitted in {} ms under {:?}", count, span_ms, p
                );
            }
        }
    }

    /// A refused request always says when to retry, and retrying then is
    /// admitted.
    #[test]
    fn retrying_after_the_announced_wait_is_admitted(
        p in policy(),
        arrivals in arrivals(),
    ) {
        let mut t = RateTable::new(64).unwrap();
        let slot = Slot::new(1).unwrap();
        let mut now = 0;
        for (gap, n) in arrivals {
            now += gap;
            for _ in 0..n {
                let d = t.try_acquire(&p, slot, 7, now);
                if !d.allowed {
                    prop_assert!(d.retry_after_ms >= 1);
                    prop_assert_eq!(t.peek(&p, slot, 7, now + d.retry_after_ms - 1).tokens, 0);
                    prop_assert!(t.peek(&p, slot, 7, now + d.retry_after_ms).tokens >= 1);
                }
            }
        }
    }

    /// For any arrival pattern, a window budget admits at most its limit per
    /// window per key, and the first request of a window is admitted.
    #[test]
    fn a_window_admits_at_most_its_limit(
        limit in 1u32..10,
        arrivals in arrivals(),
    ) {
        let mut w = WindowTable::new(1_000, Ceiling::new(64, 0).unwrap()).unwrap();
        let mut now = 0u64;
        let mut per_window = std::collections::HashMap::new();
        let mut last_window = u64::MAX;
        for (gap, n) in arrivals {
            now += gap;
            for _ in 0..n {
                let ok = w.try_consume(5, limit, Class::Normal, now).is_ok();
                let win = now / 1_000;
                if win != last_window {
                    prop_assert!(ok, "first request of window {} refused", win);
                    last_window = win;
                }
                if ok {
                    *per_window.entry(win).or_insert(0u32) += 1;
                }
            }
        }
        prop_assert!(per_window.values().all(|&c| c <= limit));
    }
}
