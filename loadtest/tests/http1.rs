//! HTTP/1.1 behaviour against in-test servers: counts, pipelining, source
//! addresses, bad targets and exit statuses.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{http1, run, u, Behaviour};

#[test]
fn request_count_matches_what_the_server_saw() {
    let s = http1(Behaviour::Ok);
    let r = run(&["-c", "4", "-t", "2", "-n", "500", &s.url()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 500);
    assert_eq!(u(&r.json, "status_counts.200"), 500);
    assert_eq!(s.seen.requests.load(Ordering::Relaxed), 500);
    assert_eq!(u(&r.json, "errors.total"), 0);
}

#[test]
fn timed_run_counts_every_response_the_server_sent_but_the_abandoned_last_batch() {
    let s = http1(Behaviour::Ok);
    let r = run(&["-c", "3", "-d", "500ms", "--engine", "monoio", &s.url()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let counted = u(&r.json, "summary.requests");
    let served = s.seen.requests.load(Ordering::Relaxed);
    assert!(counted > 100, "{counted}");
    // At most one request per connection was in flight when the run ended.
    assert!(
        served >= counted && served <= counted + 3,
        "served {served}, counted {counted}"
    );
}

#[test]
fn pipelining_depth_is_what_the_server_observes_in_flight() {
    let s = http1(Behaviour::Ok);
    let r = run(&["-c", "2", "-n", "640", "--pipeline", "16", &s.url()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 640);
    assert_eq!(s.seen.requests.load(Ordering::Relaxed), 640);
    assert_eq!(s.seen.max_in_flight.load(Ordering::Relaxed), 16);
}

#[test]
fn url_lists_rotate_paths_on_one_connection() {
    let s = http1(Behaviour::Ok);
    let r = run(&["-c", "1", "-n", "30", &s.url(), "/a", "/b"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["config"]["targets"].as_array().unwrap().len(), 3);
    assert_eq!(s.seen.requests.load(Ordering::Relaxed), 30);
}

#[test]
fn source_ips_spread_connections_over_the_listed_addresses() {
    let s = http1(Behaviour::Ok);
    let r = run(&[
        "-c",
        "12",
        "-t",
        "2",
        "-n",
        "240",
        "--source-ips",
        "127.0.0.8/29",
        &s.url(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let peers: Vec<String> = s
        .seen
        .peers
        .lock()
        .unwrap()
        .iter()
        .map(|p| p.to_string())
        .collect();
    let want: Vec<String> = (9..=14).map(|i| format!("127.0.0.{i}")).collect();
    assert_eq!(peers, want);
}

#[test]
fn refused_connections_are_counted_and_exit_non_zero_on_time() {
    // Bound and never listening: connects are refused, and no other test
    // can take the port while the run lasts.
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    held.bind(&any.into()).unwrap();
    let port = held.local_addr().unwrap().as_socket().unwrap().port();
    let r = run(&[
        "-c",
        "2",
        "-d",
        "500ms",
        &format!("http://127.0.0.1:{port}/"),
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(u(&r.json, "errors.connect") > 0);
    assert!(r.stderr.contains("no request succeeded"));
    assert!(r.took < Duration::from_secs(4), "{:?}", r.took);
    drop(held);
}

#[test]
fn garbage_answers_are_parse_errors() {
    let s = http1(Behaviour::Garbage);
    let r = run(&["-c", "2", "-d", "300ms", &s.url()]);
    assert_eq!(r.code, 1);
    assert!(u(&r.json, "errors.parse") > 0);
    assert_eq!(u(&r.json, "summary.requests"), 0);
}

#[test]
fn a_stalling_server_ends_the_run_by_duration_plus_timeout() {
    let s = http1(Behaviour::Stall);
    let r = run(&["-c", "2", "-d", "300ms", "--timeout", "200ms", &s.url()]);
    assert_eq!(r.code, 1);
    assert!(
        r.took < Duration::from_millis(300 + 200 + 1500),
        "{:?}",
        r.took
    );
    // Requests sent early enough to expire inside the window count as timeouts.
    assert!(u(&r.json, "errors.timeout") >= 2, "{}", r.json["errors"]);
    // A bounded count also ends against a server that never answers.
    let r = run(&["-c", "2", "-n", "4", "--timeout", "100ms", &s.url()]);
    assert_eq!(u(&r.json, "errors.timeout"), 4);
    assert!(r.took < Duration::from_secs(3));
}

#[test]
fn server_closing_connections_is_not_an_error() {
    let s = http1(Behaviour::CloseEvery { n: 5 });
    let r = run(&["-c", "2", "-n", "100", &s.url()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(u(&r.json, "summary.requests"), 100);
    assert_eq!(u(&r.json, "errors.total"), 0);
    assert!(s.seen.connections.load(Ordering::Relaxed) >= 20);
}

#[test]
fn invalid_arguments_exit_2_with_a_message() {
    let r = run(&["-c", "0", "http://127.0.0.1:1/"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("-c"), "{}", r.stderr);
    let r = run(&["--pipeline", "4", "-R", "10", "http://127.0.0.1:1/"]);
    assert_eq!(r.code, 2);
    let r = run(&["ftp://x/"]);
    assert_eq!(r.code, 2);
}

#[test]
fn wrk_command_lines_work_as_they_are() {
    let s = http1(Behaviour::Ok);
    let r = run(&[
        "-t1",
        "-c4",
        "-d300ms",
        "--latency",
        "-H",
        "X-Test: 1",
        &s.url(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("Requests/sec:"));
    assert!(r.stdout.contains("Latency Distribution"));
    assert!(r.stdout.contains("Detailed Percentile spectrum"));
}

#[test]
fn warmup_requests_are_not_measured() {
    let s = http1(Behaviour::Ok);
    let r = run(&["-c", "2", "-d", "300ms", "--warmup", "200ms", &s.url()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(u(&r.json, "summary.warmup_requests") > 0);
    let served = s.seen.requests.load(Ordering::Relaxed);
    let counted = u(&r.json, "summary.requests") + u(&r.json, "summary.warmup_requests");
    assert!(
        served >= counted && served <= counted + 2,
        "{served} {counted}"
    );
}
