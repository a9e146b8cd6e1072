//! The figures and suggestions of a log with a known distribution, and
//! their independence from the order shards flush lines in.

mod common;

use common::{known, opts, run, Lcg};
use gapura_tune::suggest::{self, round_up};

/// The per-second counts a client draws from.
const KS: [u64; 10] = [1, 2, 2, 3, 3, 3, 4, 5, 8, 12];
const SEED: u64 = 0x5eed_0003;

fn stats(samples: &[u64]) -> (f64, f64, u64, u64) {
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<u64>() as f64 / n;
    let var = samples
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (0.99 * n).ceil() as usize;
    (mean, var.sqrt(), sorted[rank - 1], *sorted.last().unwrap())
}

#[test]
fn the_suggested_rate_is_mean_plus_three_and_a_half_sigma_rounded_up() {
    let (log, samples) = known(40, 30, &KS, SEED);
    let a = run(&log, &opts());
    assert_eq!(a.groups.len(), 1);
    let g = &a.groups[0];
    let (mean, sigma, p99, max) = stats(&samples);
    assert_eq!(g.per_second.count(), samples.len() as u64);
    assert_eq!(g.requests, samples.iter().sum::<u64>());
    assert!((g.per_second.mean() - mean).abs() < 1e-9);
    assert!((g.per_second.std_dev() - sigma).abs() < 1e-9);
    assert_eq!(g.per_second.quantile(0.99), p99);
    assert_eq!(g.per_second.max(), max);
    assert_eq!(max, 12);
    let r = suggest::rate(&g.per_second, &g.client_peaks).unwrap();
    let raw = (mean + 3.5 * sigma).ceil() as u64;
    assert_eq!(r.rate, round_up(raw));
    // The burst: ten times the busiest second any client had.
    assert_eq!(r.burst, round_up((max * 10).max(r.rate)));
    assert_eq!(r.clients, 40);
    // Window = second here: the window figures are the same samples.
    assert_eq!(g.per_window.count(), g.per_second.count());
    assert_eq!(a.malformed + a.late + a.no_client, 0);
}

#[test]
fn the_burst_sits_ten_times_above_the_busiest_second_so_no_peak_is_refused() {
    // Ten clients send 1 a second; one sends 50 once.
    let mut log = String::new();
    for s in 0..20u64 {
        for c in 0..10 {
            log.push_str(&common::line(
                common::BASE_MS + s * 1000 + c,
                &format!("192.0.2.{c}"),
                "a.test",
                "/",
            ));
        }
    }
    for j in 0..49 {
        log.push_str(&common::line(
            common::BASE_MS + 19_000 + 100 + j,
            "192.0.2.0",
            "a.test",
            "/",
        ));
    }
    let a = run(&log, &opts());
    let g = &a.groups[0];
    let r = suggest::rate(&g.per_second, &g.client_peaks).unwrap();
    // One client's 50 in a second: the burst is 500, and no client's
    // busiest second passes it.
    assert_eq!(g.client_peaks.max(), 50);
    assert_eq!(r.burst, 500, "{r:?}");
    assert_eq!((r.refused, r.clients), (0, 10));
}

#[test]
fn lines_out_of_order_by_a_few_seconds_count_as_the_sorted_log() {
    let (log, _) = known(30, 40, &KS, SEED + 1);
    let lines: Vec<&str> = log.split_inclusive('\n').collect();
    let mut rng = Lcg(7);
    let mut shuffled = String::new();
    // Shuffle within blocks of about three seconds of lines.
    for block in lines.chunks(lines.len() / 13) {
        let mut block = block.to_vec();
        for i in (1..block.len()).rev() {
            block.swap(i, rng.below(i as u64 + 1) as usize);
        }
        shuffled.extend(block);
    }
    assert_ne!(shuffled, log);
    let (a, b) = (run(&log, &opts()), run(&shuffled, &opts()));
    assert_eq!(b.late, 0);
    let (ga, gb) = (&a.groups[0], &b.groups[0]);
    for (x, y) in [
        (&ga.per_second, &gb.per_second),
        (&ga.per_window, &gb.per_window),
        (&ga.client_peaks, &gb.client_peaks),
        (&a.sources.per_window, &b.sources.per_window),
        (&a.sources.peaks, &b.sources.peaks),
    ] {
        assert_eq!(x.count(), y.count());
        assert_eq!(x.sum(), y.sum());
        assert_eq!(x.max(), y.max());
        assert_eq!(x.quantile(0.99), y.quantile(0.99));
        assert_eq!(x.std_dev(), y.std_dev());
    }
    assert_eq!(ga.clients, gb.clients);
}

#[test]
fn a_line_far_behind_the_newest_is_late_and_skipped() {
    let log = [
        common::line(common::BASE_MS + 60_000, "192.0.2.1", "a.test", "/"),
        common::line(common::BASE_MS + 1000, "192.0.2.1", "a.test", "/"),
        common::line(common::BASE_MS + 55_000, "192.0.2.1", "a.test", "/"),
    ]
    .concat();
    let a = run(&log, &opts());
    assert_eq!((a.late, a.requests), (1, 2));
}

#[test]
fn connection_rate_is_suggested_per_host_from_each_connections_seconds() {
    use common::{conn_line, BASE_MS};
    let mut log = String::new();
    let at = |s: u64, i: u64| BASE_MS + s * 1000 + i * 10;
    // a.test, one client on three connections: shard 1 serial 1 sends 2 in
    // each of seconds 0, 1, 2; shard 1 serial 2 sends 5 in second 0; shard
    // 2 serial 1 (another shard, the same serial) sends 1 in second 1.
    for s in 0..3 {
        for i in 0..2 {
            log.push_str(&conn_line(at(s, i), "192.0.2.1", "a.test", (1, 1)));
        }
        if s == 0 {
            for i in 2..7 {
                log.push_str(&conn_line(at(s, i), "192.0.2.1", "a.test", (1, 2)));
            }
        }
        if s == 1 {
            log.push_str(&conn_line(at(s, 9), "192.0.2.1", "a.test", (2, 1)));
        }
    }
    // b.test: one connection, 1 a second; and a line from an older log.
    for s in 0..3 {
        log.push_str(&conn_line(at(s, 20), "192.0.2.2", "b.test", (1, 3)));
    }
    log.push_str(&common::line(at(3, 0), "192.0.2.2", "b.test", "/"));
    let a = run(&log, &opts());
    assert_eq!(a.without_connection, 1);
    let host = |name: &str| a.connections.iter().find(|h| h.host == name).unwrap();
    let h = host("a.test");
    assert_eq!(h.connections, 3);
    // Samples 2, 2, 2, 5, 1: mean 2.4, σ 1.357, mean + 3.5σ = 7.15: 8; the
    // busiest second of any connection was 5: burst 50.
    assert_eq!(h.per_second.count(), 5);
    assert!((h.per_second.mean() - 2.4).abs() < 1e-9);
    let r = suggest::rate(&h.per_second, &h.peaks).unwrap();
    assert_eq!((r.rate, r.burst, r.refused, r.clients), (8, 50, 0, 3));
    let b = host("b.test");
    assert_eq!((b.connections, b.per_second.count()), (1, 3));
    let o = opts();
    let report = gapura_tune::report::render(
        &a,
        &gapura_tune::report::Context {
            log: "test.log",
            window_from: "the default",
            max_clients: o.max_clients,
            max_groups: o.max_groups,
        },
    );
    assert!(
        report.contains("host a.test: connections 3")
            && report.contains("connection_rate = { requests = 8, burst = 50 }"),
        "{report}"
    );
    assert!(report.contains("not suggested: a WebSocket tunnel's messages"));
    let text = gapura_tune::fragment::render(&a, "test.log");
    let suggested = text
        .lines()
        .find_map(|l| l.strip_prefix("# connection_rate = "))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(suggested, "{ requests = 8, burst = 50 }");
    // The suggestion, uncommented into the host, is a profile that compiles.
    let profile = format!(
        "[server]\nlisten = [\"127.0.0.1:8080\"]\n\n[[host]]\nnames = [\"a.test\"]\n\
         connection_rate = {suggested}\n\n{text}"
    );
    let c =
        gapura_tune::compile_profile_text(&profile).unwrap_or_else(|e| panic!("{e}\n{profile}"));
    let want = gapura_gate::quota::RatePolicy::per_second(8, 50).unwrap();
    assert_eq!(c.snapshot.entries[0].extras.connection_rate, Some(want));
}
