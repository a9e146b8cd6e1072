//! The recorded state-transition corpus of a keyed budget table: 1,000
//! mutated transitions from the recorded seed 0x1557A7E (known and unseen
//! keys, both classes, thresholds down to 0, time moving by random steps
//! across window boundaries, up to the ceiling and its reserve) against a
//! plain model of what the table promises. Every answer and every count
//! must be the model's.

use gapura_gate::quota::{Ceiling, Class, WindowRefusal, WindowTable};
use gapura_gate::testing::TestRng;
use std::collections::HashMap;

const SEED: u64 = 0x1557A7E;
const WINDOW_MS: u64 = 1_000;

/// What the table promises: per window, a count per key, a ceiling on live
/// keys (the reserve for critical work), refusals that add nothing.
struct Model {
    window: u64,
    counts: HashMap<u64, u32>,
    ceiling: Ceiling,
}

impl Model {
    fn consume(
        &mut self,
        key: u64,
        threshold: u32,
        class: Class,
        now: u64,
    ) -> Result<(), WindowRefusal> {
        let w = now / WINDOW_MS;
        if w > self.window {
            self.window = w;
            self.counts.clear();
        }
        let live = self.counts.len() as u32;
        match self.counts.get_mut(&key) {
            Some(c) if *c < threshold => {
                *c += 1;
                Ok(())
            }
            Some(_) => Err(WindowRefusal::Exhausted),
            // An unseen key past the ceiling is untracked, whatever its
            // threshold; under it, a threshold of 0 is exhausted.
            None if live >= self.ceiling.limit(class) => Err(WindowRefusal::Untracked),
            None if threshold == 0 => Err(WindowRefusal::Exhausted),
            None => {
                self.counts.insert(key, 1);
                Ok(())
            }
        }
    }
}

#[test]
fn a_thousand_recorded_transitions_keep_the_models_answers() {
    let ceiling = Ceiling::new(24, 4).unwrap();
    let mut table = WindowTable::new(WINDOW_MS, ceiling).unwrap();
    let mut model = Model {
        window: 0,
        counts: HashMap::new(),
        ceiling,
    };
    let mut rng = TestRng(SEED);
    let mut now = 0u64;
    let mut answers: HashMap<&'static str, u32> = HashMap::new();
    for step in 0..1_000u32 {
        // Mostly small steps, sometimes across one or more boundaries.
        now += match rng.below(10) {
            0 => 1_000 + rng.below(2_500),
            1..=3 => rng.below(200),
            _ => 0,
        };
        // Keys spread as keyed hashes are: a known few, or a fresh one.
        let k = if rng.below(3) == 0 {
            1_000 + u64::from(step)
        } else {
            rng.below(40)
        };
        let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995;
        let class = if rng.below(5) == 0 {
            Class::Critical
        } else {
            Class::Normal
        };
        let threshold = rng.below(6) as u32;
        let want = model.consume(key, threshold, class, now);
        let got = table.try_consume(key, threshold, class, now);
        assert_eq!(
            got, want,
            "step {step}: key {k}, {class:?}, threshold {threshold}, t={now}"
        );
        assert_eq!(
            table.tracked_keys() as usize,
            model.counts.len(),
            "step {step}"
        );
        assert_eq!(
            table.count(key),
            model.counts.get(&key).copied().unwrap_or(0)
        );
        assert!(table.tracked_keys() <= ceiling.max_keys());
        *answers
            .entry(match got {
                Ok(()) => "admitted",
                Err(WindowRefusal::Exhausted) => "exhausted",
                Err(WindowRefusal::Untracked) => "untracked",
            })
            .or_insert(0) += 1;
    }
    // Every kind of answer came up.
    for kind in ["admitted", "exhausted", "untracked"] {
        assert!(
            answers.get(kind).copied().unwrap_or(0) > 0,
            "{kind}: {answers:?}"
        );
    }
}
