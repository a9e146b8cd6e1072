//! Open loop against a server that pauses: the CO-corrected percentiles match
//! the distribution the pause schedule implies, the closed loop shows the
//! omission, and find-max converges on a server of known capacity.
//!
//! Timing tests share two cores with whatever else runs, so they run one at a time.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{f, http1, run, u, Behaviour};

static SERIAL: Mutex<()> = Mutex::new(());

/// Expected latency at percentile `p` (0..1) for requests sent uniformly in
/// time against a server that pauses `pause` in every `period`: a request
/// intended at offset x into a pause waits `pause - x`, so latency is 0 with
/// probability 1 - f and uniform on (0, pause] with probability f = pause / period.
fn expected_ms(p: f64, period_ms: f64, pause_ms: f64) -> f64 {
    let frac = pause_ms / period_ms;
    ((p - (1.0 - frac)) / frac).max(0.0) * pause_ms
}

#[test]
fn open_loop_percentiles_match_the_co_corrected_expectation_and_closed_loop_hides_the_stalls() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (period, pause) = (400.0, 100.0);
    let s = http1(Behaviour::Pauses {
        period: Duration::from_millis(400),
        pause: Duration::from_millis(100),
    });
    // 800 requests at 250/s: exactly 8 periods, so the share of intended
    // send times inside pauses is exactly pause/period whatever the phase.
    // 40 connections at 6.25/s each: at most one request per connection per
    // pause, so no connection has a backlog to catch up on after one.
    let r = run(&[
        "-c",
        "40",
        "-t",
        "2",
        "-R",
        "250",
        "-n",
        "800",
        "--timeout",
        "1s",
        &s.url(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 800);
    // The server's own service time outside pauses (the median falls outside
    // them) adds to every sample.
    let base = f(&r.json, "latency_us.percentiles.50") / 1000.0;
    assert!(base < 2.0, "p50 {base} ms");
    for (key, p) in [("90", 0.90), ("95", 0.95), ("99", 0.99)] {
        let got = r.json["latency_us"]["percentiles"][key].as_f64().unwrap() / 1000.0;
        let want = expected_ms(p, period, pause) + base;
        assert!(
            (got - want).abs() <= want * 0.08,
            "p{key}: got {got:.2} ms, want {want:.2} ms ±8%"
        );
    }

    // The closed loop records one long sample per connection per pause and
    // many fast ones between: its p90 stays far below the corrected figure.
    let r = run(&["-c", "20", "-t", "2", "-d", "1s", &s.url()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let closed_p90 = f(&r.json, "latency_us.percentiles.90") / 1000.0;
    assert!(
        closed_p90 < expected_ms(0.90, period, pause) / 4.0,
        "closed-loop p90 {closed_p90} ms"
    );
}

#[test]
fn a_rate_below_the_shard_count_still_sends_on_schedule() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = http1(Behaviour::Ok);
    let r = run(&["-t", "2", "-c", "4", "-R", "1", "-n", "2", &s.url()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 2);
    // The second request is due one second after the first.
    assert!(r.took >= Duration::from_millis(1000), "{:?}", r.took);
}

#[test]
fn find_max_converges_near_a_known_capacity() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cap = 2000.0;
    let s = http1(Behaviour::Capacity { per_s: cap });
    let r = run(&[
        "--find-max",
        "--find-max-start",
        "500",
        "--slo-p99",
        "20ms",
        "-d",
        "500ms",
        "-c",
        "32",
        "-t",
        "2",
        "--find-max-steps",
        "10",
        "--warmup",
        "100ms",
        &s.url(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let max = f(&r.json, "find_max.max_rate");
    assert!(
        max >= cap * 0.8 && max <= cap * 1.1,
        "max rate {max}\n{}",
        r.stdout
    );
    assert!(r.stdout.contains("max rate meeting the bounds"));
    let steps = r.json["find_max"]["steps"].as_array().unwrap();
    assert!(
        steps.iter().any(|s| s["ok"] == false),
        "the curve went past the capacity"
    );
    // Every failing first attempt was run again at the same rate.
    for (i, st) in steps.iter().enumerate() {
        if st["ok"] == false && st["attempt"] == 1 {
            let next = &steps[i + 1];
            assert_eq!(next["rate"], st["rate"], "{}", r.stdout);
            assert_eq!(next["attempt"], 2, "{}", r.stdout);
        }
    }
}

#[test]
fn without_retries_a_failing_step_counts_at_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = http1(Behaviour::Capacity { per_s: 400.0 });
    // 4000 req/s against 400: every attempt fails, the search halves.
    let r = run(&[
        "--find-max",
        "--find-max-start",
        "4000",
        "--find-max-retries",
        "0",
        "--find-max-steps",
        "1",
        "--slo-p99",
        "20ms",
        "-d",
        "300ms",
        "-c",
        "8",
        "-t",
        "2",
        &s.url(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let steps = r.json["find_max"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{}", r.stdout);
    assert_eq!(steps[0]["ok"], false);
    assert_eq!(steps[0]["attempt"], 1);
    assert!(r.json["find_max"]["max_rate"].is_null());
}
