//! The lanes' answers written where the head is parsed (`conn::lane`)
//! against the whole path: the same bytes on the wire and the same
//! counters for every kind of head, pipelined in one write, with the
//! protections off (the quiet lane) and with budgets and a rate limit
//! that refuse a share of them (the paying lane).

use super::*;
use crate::server::conn::lane::OFF;

/// Quiet hosts of every kind: a fixed answer, one with tight head limits,
/// one whose body is sent as shared bytes, a redirect; the default host
/// takes unknown names.
fn profile() -> String {
    let big = "x".repeat(gapura_gate::answer::SHARED_BODY_BYTES + 1);
    format!(
        r#"{HELLO}
[[host]]
names = ["small.test"]
kind = "respond"
status = 201
body = "small"
limits = {{ max_url_bytes = 256, max_header_count = 8, max_header_bytes = "1 KiB", max_body_bytes = 8 }}

[[host]]
names = ["big.test"]
kind = "respond"
status = 200
body = "{big}"

[[host]]
names = ["go.test"]
kind = "redirect"
status = 301
target = "https://example.com"
"#
    )
}

/// One head with `extra` lines, then `body` as it is.
fn add(all: &mut Vec<u8>, (method, host, target): (&str, &str, &str), extra: &[&str], body: &[u8]) {
    let version = if extra.contains(&"Connection: keep-alive") {
        "1.0"
    } else {
        "1.1"
    };
    all.extend(format!("{method} {target} HTTP/{version}\r\nHost: {host}\r\n").bytes());
    for line in extra {
        all.extend(line.bytes());
        all.extend(b"\r\n");
    }
    all.extend(b"\r\n");
    all.extend(body);
}

/// Every kind of head the lane takes or leaves to the whole path, each
/// its own connection's first, followed by a GET that asks to close; then
/// a pipelined batch of the lane's heads.
fn cases() -> Vec<Vec<u8>> {
    let pad = format!("X-Pad: {}", "p".repeat(1100));
    let long = format!("/{}", "l".repeat(300));
    let lines = [
        "A: 1", "B: 2", "C: 3", "D: 4", "E: 5", "F: 6", "G: 7", "H: 8",
    ];
    let mut cases = Vec::new();
    let mut case = |head: (&str, &str, &str), extra: &[&str], body: &[u8]| {
        let mut all = Vec::new();
        add(&mut all, head, extra, body);
        add(
            &mut all,
            ("GET", head.1, "/last"),
            &["Connection: close"],
            b"",
        );
        cases.push(all);
    };
    for host in [
        "hello.test",
        "small.test",
        "big.test",
        "go.test",
        "other.test",
    ] {
        case(("GET", host, "/"), &[], b"");
        case(("GET", host, "/a?b=c"), &["Accept: text/html"], b"");
        case(("POST", host, "/"), &[], b"");
        case(("HEAD", host, "/"), &[], b"");
        case(("GET", host, "/"), &["Connection: keep-alive"], b"");
        case(("GET", host, &long), &[], b"");
        case(("GET", host, "/"), &lines, b"");
        case(("GET", host, "/"), &[&pad], b"");
        case(("POST", host, "/"), &["Content-Length: 0"], b"");
        case(("POST", host, "/"), &["Content-Length: 3"], b"abc");
        case(
            ("GET", host, "/"),
            &["Transfer-Encoding: chunked"],
            b"0\r\n\r\n",
        );
        case(("GET", host, "/"), &["Connection: close"], b"");
    }
    case(("GET", "hello.test:80", "/"), &[], b"");
    case(("GET", "x", "http://hello.test/abs"), &[], b"");
    case(("OPTIONS", "hello.test", "*"), &[], b"");
    let mut batch = Vec::new();
    for i in 0..20 {
        let host = ["hello.test", "small.test", "other.test"][i % 3];
        add(&mut batch, ("GET", host, &format!("/{i}")), &[], b"");
    }
    add(
        &mut batch,
        ("GET", "hello.test", "/"),
        &["Connection: close"],
        b"",
    );
    cases.push(batch);
    cases
}

/// The default's protections with budgets and a rate limit small enough
/// to refuse some of the cases' requests, in a window longer than a run
/// (an hour), a token a host an hour: the same requests meet the same
/// counts on every run.
const PAYING: &str = r#"
[protection]

[quota]
window_ms = 3600000

[quota.source]
requests = 100
concurrent = 5

[[rate_limit]]
name = "tight"
requests = 1
per = "hour"
burst = 25

[defaults]
rate_limit = "tight"
"#;

/// What each case's connection sent back, its Date lines blanked, and the
/// shard's and its gate's counters, with the lane on or off, with
/// `protection` added to the profile.
fn served(lane: bool, server: &str, protection: &str) -> (Vec<Vec<u8>>, Vec<u64>, String) {
    OFF.with(|off| off.set(!lane));
    let got = run({
        let server = server.to_string();
        let rest = format!("{}{protection}", profile());
        async move {
            let shard = shard(&server, &rest);
            let mut got = Vec::new();
            for case in cases() {
                let c = open(&shard);
                c.send(&case);
                assert!(until(|| c.server_ended()).await, "the connection closes");
                got.push(blank_dates(&c.take_all()));
            }
            let s = &shard.stats;
            let mut counters = vec![s.requests.get(), s.writes.get()];
            counters.extend(s.responses.iter().map(|r| r.get()));
            counters.extend(s.errors.iter().map(|e| e.get()));
            let gate = shard.gate_mut();
            let gate = format!(
                "{:?} {:?} {:?}",
                gate.counters, gate.quota.counters, gate.rate_counters
            );
            (got, counters, gate)
        }
    });
    OFF.with(|off| off.set(false));
    got
}

/// `bytes` with every `Date:` line's value replaced by the same text,
/// each checked first to be the shard's clock's (a second of the last
/// minute).
fn blank_dates(bytes: &[u8]) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let lines: Vec<_> = (now - 60..=now + 1)
        .map(crate::server::date::format_date_line)
        .collect();
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = rest.windows(8).position(|w| w == b"\r\nDate: ") {
        out.extend_from_slice(&rest[..at + 2]);
        rest = &rest[at + 2..];
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or(rest.len())
            + 2;
        let line = &rest[..end.min(rest.len())];
        assert!(
            lines.iter().any(|l| l.as_slice() == line),
            "{}",
            String::from_utf8_lossy(line)
        );
        out.extend_from_slice(b"Date: (now)\r\n");
        rest = &rest[end.min(rest.len())..];
    }
    out.extend_from_slice(rest);
    out
}

#[test]
fn the_lanes_write_and_count_what_the_whole_path_does() {
    let runs = [
        ("", ""),
        ("max_requests_per_connection = 7", ""),
        ("", PAYING),
    ];
    for (server, protection) in runs {
        let (lane, lane_counts, lane_gate) = served(true, server, protection);
        let (whole, whole_counts, whole_gate) = served(false, server, protection);
        let answers: Vec<usize> = lane
            .iter()
            .map(|b| b.windows(9).filter(|w| w == b"HTTP/1.1 ").count())
            .collect();
        // Every case is answered; the pipelined batch 21 times, or 7 with
        // the connection's cap.
        assert!(answers.iter().all(|&n| n >= 1), "{server:?}: {answers:?}");
        assert!(answers[answers.len() - 1] >= 7, "{server:?}: {answers:?}");
        for (i, (l, w)) in lane.iter().zip(&whole).enumerate() {
            assert_eq!(
                String::from_utf8_lossy(l),
                String::from_utf8_lossy(w),
                "{server:?}, case {i}"
            );
        }
        assert_eq!(lane_counts, whole_counts, "{server:?}");
        assert_eq!(lane_gate, whole_gate, "{server:?}");
        if !protection.is_empty() {
            // The budgets and the rate limit refused some of them.
            let refused = |b: &Vec<u8>| b.windows(12).any(|w| w == b"HTTP/1.1 429");
            assert!(
                lane.iter().filter(|b| refused(b)).count() > 5,
                "{lane_gate}"
            );
            assert!(
                !lane_gate.contains("RateLimitCounters { refused: 0,"),
                "{lane_gate}"
            );
        }
    }
}

/// The shard looks for a host with a fixed answer on a lane once a
/// snapshot: a respond host with the protections off has one, and so has
/// the same host under the default's protections (budgets); a host behind
/// an access list has none, nor has a proxying host.
#[test]
fn the_shard_knows_once_a_snapshot_whether_the_lane_can_answer() {
    run(async {
        assert!(shard("", HELLO).lane_hint());
        let protected = format!("{HELLO}\n[protection]\n");
        assert!(shard("", &protected).lane_hint());
        let listed = format!(
            "{}\n[[access_list]]\nname = \"office\"\nallow = [\"192.0.2.0/24\"]\n",
            HELLO.replace("default = true", "default = true\naccess_list = \"office\"")
        );
        assert!(!shard("", &listed).lane_hint());
        let proxy = r#"
[[upstream]]
name = "app"
servers = ["127.0.0.1:9"]

[[host]]
names = ["p.test"]
default = true
kind = "proxy"

[[host.route]]
path = "/"
upstream = "app"
"#;
        assert!(!shard("", proxy).lane_hint());
    })
}
