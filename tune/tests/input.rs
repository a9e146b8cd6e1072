//! Bounded tables, malformed lines, hashed and IPv6 clients, and the
//! whole command on a file.

mod common;

use common::{line, opts, run, BASE_MS};
use gapura_tune::{report, Options};

#[test]
fn the_client_table_stays_within_its_capacity_and_counts_evictions() {
    let log: String = (0..10_000u64)
        .map(|i| {
            let ip = format!("10.{}.{}.{}", i / 65536, i / 256 % 256, i % 256);
            line(BASE_MS + i, &ip, "a.test", "/")
        })
        .collect();
    let mut o = opts();
    o.max_clients = 100;
    let a = run(&log, &o);
    assert_eq!(a.peak_clients, 100);
    assert_eq!(a.client_evictions, 9_900);
    assert_eq!(a.peak_prefixes, 40);
    assert_eq!(a.prefix_evictions, 0);
    let g = &a.groups[0];
    assert_eq!(
        (g.clients, g.per_second.count(), g.requests),
        (10_000, 10_000, 10_000)
    );
    let text = report::render(&a, &ctx(&o));
    assert!(text.contains("most held 100, evictions 9900"), "{text}");
}

fn ctx(o: &Options) -> report::Context<'_> {
    report::Context {
        log: "test.log",
        window_from: "the default",
        max_clients: o.max_clients,
        max_groups: o.max_groups,
    }
}

#[test]
fn groups_past_the_limit_fold_into_other() {
    let log: String = (0..10u64)
        .map(|i| line(BASE_MS + i, "192.0.2.1", &format!("h{i}.test"), "/"))
        .collect();
    let mut o = opts();
    o.max_groups = 3;
    let a = run(&log, &o);
    assert_eq!(a.groups.len(), 4);
    assert_eq!(a.groups[3].name.host, "(other)");
    assert_eq!(a.groups[3].requests, 7);
}

#[test]
fn malformed_lines_are_counted_and_skipped() {
    let good = line(BASE_MS, "192.0.2.1", "a.test", "/");
    let bad = [
        "garbage\n",
        "{}\n",
        "{\"time\":\"2026-12-01T00:00:00.000Z\",\"client\":\"nope\",\"host\":\"a\",\"path\":\"/\"}\n",
        "{\"time\":\"yesterday\",\"client\":\"192.0.2.1\",\"host\":\"a\",\"path\":\"/\"}\n",
        "{\"time\":\"2026-12-01T00:00:00.000Z\",\"client\":\"192.0.2.1\",\"host\":\"\\u0100\",\"path\":\"/\"}\n",
        "[1,2]\n",
        "\u{0}\u{ff}\n",
    ];
    let mut log = good.clone();
    for b in bad {
        log.push_str(b);
    }
    log.push_str("\n   \n");
    log.push_str(&line(BASE_MS + 1, "-", "a.test", "/"));
    log.push_str(good.trim_end());
    let a = run(&log, &opts());
    assert_eq!(a.lines, 12);
    assert_eq!(
        (a.malformed, a.blank, a.no_client, a.requests),
        (7, 2, 1, 2)
    );
}

#[test]
fn hashed_clients_skip_the_source_budget() {
    let log: String = (0..20u64)
        .map(|i| line(BASE_MS + i * 100, &format!("{:016x}", i % 3), "a.test", "/"))
        .collect();
    let a = run(&log, &opts());
    assert_eq!(a.hashed, 20);
    assert_eq!(a.sources.prefixes, 0);
    assert_eq!(a.groups[0].clients, 3);
    let text = report::render(&a, &ctx(&opts()));
    assert!(text.contains("budgets skipped"), "{text}");
    assert!(text.contains("cannot be derived"), "{text}");
    // Three clients over two seconds: too little to suggest from, and it
    // says so.
    assert!(
        text.contains("not enough to suggest from: 3 client(s) over 2 s of log"),
        "{text}"
    );
    assert!(!text.contains("suggested rate"), "{text}");
}

#[test]
fn requests_the_limits_refused_are_told_apart_from_those_admitted() {
    // 20 clients over 90 s, every other request refused with 429.
    let log: String = (0..1800u64)
        .map(|i| {
            let l = line(
                BASE_MS + i * 50,
                &format!("192.0.2.{}", i % 20),
                "a.test",
                "/",
            );
            if i % 2 == 1 {
                l.replace("\"status\":200", "\"status\":429")
            } else {
                l
            }
        })
        .collect();
    let a = run(&log, &opts());
    assert_eq!((a.groups[0].requests, a.groups[0].refused), (1800, 900));
    assert_eq!(a.span_seconds(), 90);
    let text = report::render(&a, &ctx(&opts()));
    assert!(
        text.contains("requests 1800 (admitted 900, refused with 429 900), clients 20"),
        "{text}"
    );
    assert!(
        text.contains("note: 900 of these 1800 requests (50.0 %) were refused with 429"),
        "{text}"
    );
    assert!(
        text.contains("this rests on 20 clients over 90 s of log"),
        "{text}"
    );
    assert!(text.contains("suggested rate"), "{text}");
}

#[test]
fn ipv6_clients_are_keyed_by_64_and_fold_into_56_prefixes() {
    let clients = [
        "2001:db8:0:1::1",
        "2001:db8:0:1::2",
        "2001:db8:0:ff::1",
        "2001:db8:0:100::1",
        "::ffff:192.0.2.1",
        "192.0.2.200",
    ];
    let log: String = clients
        .iter()
        .enumerate()
        .map(|(i, c)| line(BASE_MS + i as u64, c, "a.test", "/"))
        .collect();
    let a = run(&log, &opts());
    // /64s: 0:1, 0:ff, 0:100, and two IPv4 addresses.
    assert_eq!(a.groups[0].clients, 5);
    // /56s: 2001:db8:0:0 and 2001:db8:0:100; /24: 192.0.2.
    assert_eq!(a.sources.prefixes, 3);
    assert_eq!(a.sources.peaks.max(), 3);
}

#[test]
fn the_command_reads_a_file_and_shows_progress_when_asked() {
    let dir = std::env::temp_dir().join(format!("gapura-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("access.log");
    let (log, _) = common::known(300, 60, &[1, 2, 3], 5);
    std::fs::write(&path, &log).unwrap();
    let mut o = Options::new(path.clone());
    o.progress = true;
    let (mut out, mut progress) = (Vec::new(), Vec::new());
    gapura_tune::run(&o, &mut out, &mut progress).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("host a.test  route *"), "{text}");
    assert!(text.contains("suggested [quota.source] requests"), "{text}");
    let shown = String::from_utf8(progress).unwrap();
    assert!(shown.is_empty() || shown.contains(" %), "), "{shown}");
    o.write = true;
    o.progress = false;
    let (mut out, mut progress) = (Vec::new(), Vec::new());
    gapura_tune::run(&o, &mut out, &mut progress).unwrap();
    assert!(String::from_utf8(out).unwrap().contains("[[rate_limit]]"));
    assert!(progress.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
    o.access_log = dir.join("missing.log");
    let e = gapura_tune::run(&o, &mut Vec::new(), &mut Vec::new()).unwrap_err();
    assert!(e.contains("cannot open the access log"), "{e}");
}

#[test]
fn a_log_it_cannot_read_fails_with_what_it_expected_and_one_client_is_warned_of() {
    let dir = std::env::temp_dir().join(format!("gapura-tune-x-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("not-a-log.txt");
    std::fs::write(
        &path,
        "hello\nthis is not an access log\n{\"json\": true}\n",
    )
    .unwrap();
    let o = Options::new(path.clone());
    let e = gapura_tune::run(&o, &mut Vec::new(), &mut Vec::new()).unwrap_err();
    assert!(
        e.contains("none of its 3 lines") && e.contains("expected"),
        "{e}"
    );
    // One client alone: the report says what that is worth.
    let log: String = (0..20u64)
        .map(|s| line(BASE_MS + s * 1000, "192.0.2.1", "a.test", "/"))
        .collect();
    std::fs::write(&path, log).unwrap();
    let mut out = Vec::new();
    gapura_tune::run(&o, &mut out, &mut Vec::new()).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("warning: the log has one client"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
