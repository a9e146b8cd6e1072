//! `--find-max`: the highest open-loop rate whose p99 stays under `--slo-p99`
//! and whose error ratio stays under `--max-error-ratio`.
//!
//! Each step is a full open-loop run of `-d` (default 2 s; `--warmup` before
//! each). The rate doubles from `--find-max-start` until a step fails, halves
//! while no step has passed, then bisects between the best passing and the
//! lowest failing rate until they are within 3 % of each other or
//! `--find-max-steps` runs are spent. A step passes when p99 ≤ the bound, the
//! error ratio ≤ the bound, and the achieved rate is at least 90 % of the
//! rate asked. A failing step is run again, up to `--find-max-retries` times
//! (default 1), and counts as over only when every attempt fails: one stall
//! of the machine must not cap the search far below the real capacity.
//! Every attempt is printed as it ends: the curve walked.

use std::sync::Arc;

use crate::cli::Config;
use crate::ctx::Outcome;
use crate::report::fmt_ns;
use crate::shard::execute;

/// One step of the search.
#[derive(Clone, Debug)]
pub struct Step {
    pub rate: f64,
    pub achieved: f64,
    pub p99_ns: u64,
    pub error_ratio: f64,
    pub ok: bool,
    /// 1 for the first run at this rate, 2.. for the re-runs of a failure.
    pub attempt: u32,
}

/// The curve walked and its result.
#[derive(Clone, Debug)]
pub struct Curve {
    pub slo_p99_ns: u64,
    pub max_error_ratio: f64,
    pub steps: Vec<Step>,
    /// The highest passing rate, if any passed.
    pub max_rate: Option<f64>,
}

/// Relative width at which the bisection stops.
const CONVERGED: f64 = 0.03;

pub fn run(cfg: &Arc<Config>, progress: bool) -> i32 {
    let slo = cfg.slo_p99.as_nanos() as u64;
    let mut curve = Curve {
        slo_p99_ns: slo,
        max_error_ratio: cfg.max_error_ratio,
        steps: Vec::new(),
        max_rate: None,
    };
    let mut search = Search::default();
    if !cfg.quiet {
        print_intro(cfg, slo);
    }
    let mut rate = cfg.find_max_start;
    let mut attempt = 1u32;
    let mut step = 0u32;
    while step < cfg.find_max_steps {
        let o = match execute(cfg, Some(rate), cfg.duration, progress) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("gapura-loadtest: {e}");
                return crate::EXIT_USAGE;
            }
        };
        let judged = judge(cfg, &o, rate, attempt);
        if !cfg.quiet {
            print_step(cfg, &judged);
        }
        let ok = judged.ok;
        curve.steps.push(judged);
        if !ok && attempt <= cfg.find_max_retries {
            attempt += 1;
            search.last = Some(o);
            continue;
        }
        attempt = 1;
        step += 1;
        search.settle(rate, ok, o);
        match search.next_rate(rate) {
            Some(next) => rate = next,
            None => break,
        }
    }
    curve.max_rate = search.best.as_ref().map(|(r, _)| *r);
    conclude(cfg, &curve, search)
}

/// The search's bounds and the line above the table of steps.
fn print_intro(cfg: &Config, slo_ns: u64) {
    println!(
        "find-max @ {}: p99 <= {}, error ratio <= {}, {} per step",
        cfg.targets[0].url(),
        fmt_ns(slo_ns as f64),
        cfg.max_error_ratio,
        fmt_ns(cfg.duration.unwrap_or_default().as_nanos() as f64)
    );
    println!(
        "  {:>12} {:>12} {:>10} {:>8}  verdict",
        "rate", "achieved", "p99", "errors"
    );
}

/// Measures one attempt at `rate` against the bounds.
fn judge(cfg: &Config, o: &Outcome, rate: f64, attempt: u32) -> Step {
    let st = &o.stats;
    let achieved = st.requests as f64 / o.elapsed.as_secs_f64();
    let errors = st.errors.total();
    let error_ratio = if st.requests + errors == 0 {
        1.0
    } else {
        errors as f64 / (st.requests + errors) as f64
    };
    let p99 = st.hist_ns.value_at_quantile(0.99);
    let ok = st.requests > 0
        && p99 <= cfg.slo_p99.as_nanos() as u64
        && error_ratio <= cfg.max_error_ratio
        && achieved >= 0.9 * rate;
    Step {
        rate,
        achieved,
        p99_ns: p99,
        error_ratio,
        ok,
        attempt,
    }
}

/// One row of the table: the attempt's figures and its verdict.
fn print_step(cfg: &Config, s: &Step) {
    println!(
        "  {:>12.1} {:>12.1} {:>10} {:>7.3}%  {}",
        s.rate,
        s.achieved,
        fmt_ns(s.p99_ns as f64),
        s.error_ratio * 100.0,
        if s.ok {
            "ok"
        } else if s.attempt <= cfg.find_max_retries {
            "over, run again"
        } else {
            "over"
        }
    );
}

/// Where the search stands: the bounds found and the outcomes kept for the
/// final summary.
#[derive(Default)]
struct Search {
    /// The highest passing rate.
    lo: Option<f64>,
    /// The lowest failing rate.
    hi: Option<f64>,
    /// The highest passing rate and its run.
    best: Option<(f64, Outcome)>,
    /// The latest run not kept as the best.
    last: Option<Outcome>,
}

impl Search {
    /// Takes a step's final verdict at `rate` and its run.
    fn settle(&mut self, rate: f64, ok: bool, o: Outcome) {
        if !ok {
            self.hi = Some(self.hi.map_or(rate, |h| h.min(rate)));
            self.last = Some(o);
            return;
        }
        self.lo = Some(self.lo.map_or(rate, |l| l.max(rate)));
        if self.best.as_ref().is_none_or(|(r, _)| rate > *r) {
            self.best = Some((rate, o));
        } else {
            self.last = Some(o);
        }
    }

    /// The rate to try after `rate`: double until a step fails, halve while
    /// none passed, then bisect. None once the bounds are within
    /// [`CONVERGED`] or the rate fell under 0.5 req/s.
    fn next_rate(&self, rate: f64) -> Option<f64> {
        let next = match (self.lo, self.hi) {
            (_, None) => rate * 2.0,
            (None, Some(h)) => h / 2.0,
            (Some(l), Some(h)) => {
                if (h - l) / l <= CONVERGED {
                    return None;
                }
                (l + h) / 2.0
            }
        };
        (next >= 0.5).then_some(next)
    }
}

/// Prints the result and the summary of the best run (or the last one),
/// writes the outputs, and returns the exit status.
fn conclude(cfg: &Config, curve: &Curve, search: Search) -> i32 {
    if !cfg.quiet {
        match curve.max_rate {
            Some(r) => println!("max rate meeting the bounds: {r:.1} req/s"),
            None => println!("no rate tried met the bounds"),
        }
    }
    let shown = search.best.map(|(_, o)| o).or(search.last);
    if let Some(o) = &shown {
        if !cfg.quiet {
            print!("{}", crate::report::text(cfg, o, curve.max_rate));
        }
        if let Err(e) = crate::write_outputs(cfg, o, Some(curve)) {
            eprintln!("gapura-loadtest: {e}");
            return crate::EXIT_USAGE;
        }
    }
    if curve.steps.iter().all(|s| s.achieved == 0.0) {
        eprintln!("gapura-loadtest: no request succeeded");
        return crate::EXIT_NO_SUCCESS;
    }
    crate::EXIT_OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ShardStats;
    use std::time::{Duration, Instant};

    fn run_at() -> Outcome {
        Outcome {
            stats: ShardStats::new(Instant::now(), Duration::from_secs(1)),
            elapsed: Duration::from_secs(1),
            cpu_user: Duration::ZERO,
            cpu_sys: Duration::ZERO,
            missing_shards: 0,
            failures: Vec::new(),
        }
    }

    /// Walks the search over a target whose capacity is `cap`, from `start`.
    fn walk(start: f64, cap: f64) -> (Vec<f64>, Option<f64>) {
        let mut search = Search::default();
        let mut tried = Vec::new();
        let mut rate = start;
        while tried.len() < 50 {
            tried.push(rate);
            search.settle(rate, rate <= cap, run_at());
            match search.next_rate(rate) {
                Some(next) => rate = next,
                None => break,
            }
        }
        (tried, search.best.map(|(r, _)| r))
    }

    #[test]
    fn doubles_then_bisects_until_within_three_percent() {
        let (tried, best) = walk(1000.0, 5000.0);
        assert_eq!(
            tried,
            vec![1000.0, 2000.0, 4000.0, 8000.0, 6000.0, 5000.0, 5500.0, 5250.0, 5125.0]
        );
        assert_eq!(best, Some(5000.0));
    }

    #[test]
    fn halves_while_nothing_passed_and_stops_under_half_a_request() {
        let (tried, best) = walk(8.0, 2.5);
        assert_eq!(tried, vec![8.0, 4.0, 2.0, 3.0, 2.5, 2.75, 2.625, 2.5625]);
        assert_eq!(best, Some(2.5));
        let (tried, best) = walk(2.0, 0.0);
        assert_eq!(tried, vec![2.0, 1.0, 0.5]);
        assert_eq!(best, None);
    }

    #[test]
    fn a_lower_pass_after_a_higher_one_is_kept_as_the_last_run() {
        let mut search = Search::default();
        search.settle(100.0, true, run_at());
        search.settle(50.0, true, run_at());
        assert_eq!(search.lo, Some(100.0));
        assert_eq!(search.best.as_ref().map(|(r, _)| *r), Some(100.0));
        assert!(search.last.is_some());
    }
}
