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
use crate::report::fmt_ns;
use crate::shard::{execute, Outcome};

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
    let mut best: Option<(f64, Outcome)> = None;
    let mut last: Option<Outcome> = None;
    let mut lo: Option<f64> = None;
    let mut hi: Option<f64> = None;
    let mut rate = cfg.find_max_start;
    if !cfg.quiet {
        println!(
            "find-max @ {}: p99 <= {}, error ratio <= {}, {} per step",
            cfg.targets[0].url(),
            fmt_ns(slo as f64),
            cfg.max_error_ratio,
            fmt_ns(cfg.duration.unwrap_or_default().as_nanos() as f64)
        );
        println!(
            "  {:>12} {:>12} {:>10} {:>8}  verdict",
            "rate", "achieved", "p99", "errors"
        );
    }
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
            && p99 <= slo
            && error_ratio <= cfg.max_error_ratio
            && achieved >= 0.9 * rate;
        if !cfg.quiet {
            println!(
                "  {:>12.1} {:>12.1} {:>10} {:>7.3}%  {}",
                rate,
                achieved,
                fmt_ns(p99 as f64),
                error_ratio * 100.0,
                if ok {
                    "ok"
                } else if attempt <= cfg.find_max_retries {
                    "over, run again"
                } else {
                    "over"
                }
            );
        }
        curve.steps.push(Step {
            rate,
            achieved,
            p99_ns: p99,
            error_ratio,
            ok,
            attempt,
        });
        if !ok && attempt <= cfg.find_max_retries {
            attempt += 1;
            last = Some(o);
            continue;
        }
        attempt = 1;
        step += 1;
        if ok {
            lo = Some(lo.map_or(rate, |l: f64| l.max(rate)));
            if best.as_ref().is_none_or(|(r, _)| rate > *r) {
                best = Some((rate, o));
            } else {
                last = Some(o);
            }
        } else {
            hi = Some(hi.map_or(rate, |h: f64| h.min(rate)));
            last = Some(o);
        }
        rate = match (lo, hi) {
            (_, None) => rate * 2.0,
            (None, Some(h)) => h / 2.0,
            (Some(l), Some(h)) => {
                if (h - l) / l <= CONVERGED {
                    break;
                }
                (l + h) / 2.0
            }
        };
        if rate < 0.5 {
            break;
        }
    }
    curve.max_rate = best.as_ref().map(|(r, _)| *r);
    if !cfg.quiet {
        match curve.max_rate {
            Some(r) => println!("max rate meeting the bounds: {r:.1} req/s"),
            None => println!("no rate tried met the bounds"),
        }
    }
    let shown = best.map(|(_, o)| o).or(last);
    if let Some(o) = &shown {
        if !cfg.quiet {
            print!("{}", crate::report::text(cfg, o, curve.max_rate));
        }
        if let Err(e) = crate::write_outputs(cfg, o, Some(&curve)) {
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
