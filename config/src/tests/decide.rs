//! Compiled profiles through the gate's chain: what a request gets.

use super::*;
use gapura_gate::chain::{GateState, NoTrace, Request};
use gapura_gate::client::Peer;
use gapura_gate::path::MAX_PATH_BYTES;
use gapura_gate::{ErrorStatus, Snapshot, Verdict};

/// What a request got, without borrowing the snapshot.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    /// A fixed answer with this status.
    Answer(u16),
    Forward,
    /// Refused with this status and Retry-After.
    Refused(ErrorStatus, u32),
}

/// One `GET` from `client` to `host` at `now_ms`; its leases are given back.
fn get(
    s: &Snapshot,
    state: &mut GateState,
    client: &str,
    host: &[u8],
    path: &[u8],
    now_ms: u64,
) -> Got {
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    let headers: [(&str, &[u8]); 0] = [];
    let req = Request {
        peer: Peer::tcp(client.parse().unwrap()),
        method: b"GET",
        host: Some(host),
        target: path,
        path,
        header_count: 1,
        header_bytes: 0,
        content_length: None,
        headers: &headers[..],
        connection: None,
        tls: false,
    };
    state.adopt(s, now_ms);
    let d = s.decide(&req, state, now_ms, &mut scratch, &mut NoTrace);
    if let Some(t) = d.ticket {
        state.release(t);
    }
    match d.verdict {
        Verdict::Respond(a) => Got::Answer(a.status),
        Verdict::Redirect(r) => Got::Answer(r.status),
        Verdict::Forward(..) => Got::Forward,
        Verdict::Refuse(st) => Got::Refused(st, d.retry_after_s),
        other => panic!("unexpected verdict {other:?}"),
    }
}

const ONE_A_MINUTE: &str = r#"
[[rate_limit]]
name = "slow"
requests = 1
per = "minute"

[[host]]
names = ["a.test"]
rate_limit = "slow"
body = "hi"

[[host]]
names = ["free.test"]
"#;

#[test]
fn a_one_per_minute_limit_refuses_the_second_request_with_retry_after() {
    let c = ok(ONE_A_MINUTE);
    let s = &c.snapshot;
    let mut state = GateState::small();
    let client = "192.0.2.1";
    assert_eq!(
        get(s, &mut state, client, b"a.test", b"/", 1_000),
        Got::Answer(200)
    );
    assert_eq!(
        get(s, &mut state, client, b"a.test", b"/", 1_000),
        Got::Refused(ErrorStatus::TooManyRequests, 60)
    );
    // 30 s later the token is 30 s away.
    assert_eq!(
        get(s, &mut state, client, b"a.test", b"/other", 31_000),
        Got::Refused(ErrorStatus::TooManyRequests, 30)
    );
    // Another client has its own bucket; a host without a limit has none.
    assert_eq!(
        get(s, &mut state, "192.0.2.2", b"a.test", b"/", 31_000),
        Got::Answer(200)
    );
    for _ in 0..3 {
        assert_eq!(
            get(s, &mut state, client, b"free.test", b"/", 31_000),
            Got::Answer(200)
        );
    }
    // robots.txt is never limited.
    assert_eq!(
        get(s, &mut state, client, b"a.test", b"/robots.txt", 31_000),
        Got::Answer(200)
    );
    // One minute after the first, one more.
    assert_eq!(
        get(s, &mut state, client, b"a.test", b"/", 61_000),
        Got::Answer(200)
    );
    assert_eq!(
        get(s, &mut state, client, b"a.test", b"/", 61_000),
        Got::Refused(ErrorStatus::TooManyRequests, 60)
    );
}

#[test]
fn a_shadowed_limit_lets_the_request_on_and_counts_it() {
    let src = ONE_A_MINUTE.replace("per = \"minute\"", "per = \"minute\"\nmode = \"shadow\"");
    let c = ok(&src);
    let mut state = GateState::small();
    for _ in 0..3 {
        assert_eq!(
            get(&c.snapshot, &mut state, "192.0.2.1", b"a.test", b"/", 0),
            Got::Answer(200)
        );
    }
    assert_eq!(state.counters.quota_shadow, 2);
}

#[test]
fn a_route_without_the_hosts_limit_forwards_every_time() {
    let c = ok(r#"
[[rate_limit]]
name = "slow"
requests = 1
per = "hour"
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
[[host]]
names = ["app.test"]
kind = "proxy"
rate_limit = "slow"
  [[host.route]]
  path = "/"
  upstream = "app"
  [[host.route]]
  path = "/free"
  upstream = "app"
  rate_limit = false
"#);
    let s = &c.snapshot;
    let mut state = GateState::small();
    let me = "2001:db8::1";
    assert_eq!(get(s, &mut state, me, b"app.test", b"/a", 0), Got::Forward);
    assert_eq!(
        get(s, &mut state, me, b"app.test", b"/b", 0),
        Got::Refused(ErrorStatus::TooManyRequests, 3600)
    );
    for _ in 0..3 {
        assert_eq!(
            get(s, &mut state, me, b"app.test", b"/free/x", 0),
            Got::Forward
        );
    }
}

#[test]
fn a_source_budget_refuses_past_its_requests_until_the_window_ends() {
    let c = ok(
        "[quota]\nwindow_ms = 1000\n[quota.source]\nrequests = 2\n[[host]]\nnames = [\"a.test\"]\n",
    );
    let s = &c.snapshot;
    let mut state = GateState::small();
    // 192.0.2.1 and 192.0.2.200 share a /24.
    assert_eq!(
        get(s, &mut state, "192.0.2.1", b"a.test", b"/", 100),
        Got::Answer(200)
    );
    assert_eq!(
        get(s, &mut state, "192.0.2.200", b"a.test", b"/", 100),
        Got::Answer(200)
    );
    assert_eq!(
        get(s, &mut state, "192.0.2.1", b"a.test", b"/", 100),
        Got::Refused(ErrorStatus::TooManyRequests, 1)
    );
    assert_eq!(
        get(s, &mut state, "198.51.100.1", b"a.test", b"/", 100),
        Got::Answer(200)
    );
    assert_eq!(
        get(s, &mut state, "192.0.2.1", b"a.test", b"/", 1_000),
        Got::Answer(200)
    );
}

#[test]
fn a_nodes_own_budget_windows_start_with_its_clock_and_a_fleets_with_unix_time() {
    let node = ok(
        "[protection]\noff = [\"all\"]\n[quota]\nwindow_ms = 60000\n[quota.source]\nrequests = 1\n[[host]]\nnames = [\"a.test\"]\n",
    );
    let mut state = GateState::new(&node.snapshot.gate.quota_sizes, [7; 16]).unwrap();
    // A Unix minute ends 1 ms after the shard's clock starts: a node's
    // windows do not care.
    state.unix_origin_ms = 60_000 * 29_000_000 - 1;
    let s = &node.snapshot;
    assert_eq!(
        get(s, &mut state, "192.0.2.1", b"a.test", b"/", 0),
        Got::Answer(200)
    );
    assert_eq!(
        get(s, &mut state, "192.0.2.1", b"a.test", b"/", 10),
        Got::Refused(ErrorStatus::TooManyRequests, 60)
    );
    // A fleet's windows are Unix minutes, the same on every node.
    let fleet = ok(
        "[protection]\noff = [\"all\"]\n[fleet]\nredis = \"redis://127.0.0.1:6379\"\nnodes_expected = 1\nkey_file = \"/k\"\n[quota]\nwindow_ms = 60000\n[quota.source]\nrequests = 1\nscope = \"fleet\"\n[[host]]\nnames = [\"a.test\"]\n",
    );
    let mut state = GateState::new(&fleet.snapshot.gate.quota_sizes, [7; 16]).unwrap();
    state.unix_origin_ms = 60_000 * 29_000_000 - 1;
    let s = &fleet.snapshot;
    assert_eq!(
        get(s, &mut state, "192.0.2.1", b"a.test", b"/", 0),
        Got::Answer(200)
    );
    assert_eq!(
        get(s, &mut state, "192.0.2.1", b"a.test", b"/", 10),
        Got::Answer(200)
    );
}

#[test]
fn requests_no_host_takes_count_in_their_own_operation() {
    let c = ok(r#"
[quota]
window_ms = 60000
unknown_host_operation = "stray"

[[quota.operation]]
name = "stray"
requests = 4    # 2 on each of the 2 shards

[[host]]
names = ["a.test"]
body = "hi"
"#);
    let s = &c.snapshot;
    let mut state = GateState::small();
    let client = "192.0.2.1";
    let stray = |state: &mut GateState| get(s, state, client, b"nowhere.test", b"/", 1_000);
    assert_eq!(stray(&mut state), Got::Refused(ErrorStatus::NotFound, 0));
    assert_eq!(stray(&mut state), Got::Refused(ErrorStatus::NotFound, 0));
    // The operation is spent: 429 to the window's end (the small tables'
    // window is 1 s), not 404.
    assert_eq!(
        stray(&mut state),
        Got::Refused(ErrorStatus::TooManyRequests, 1)
    );
    // A known host is another class.
    assert_eq!(
        get(s, &mut state, client, b"a.test", b"/", 1_000),
        Got::Answer(200)
    );
    assert_eq!(state.quota.operation_count(0), 2);
}

#[test]
fn the_live_view_reads_tokens_and_the_verification_cache_without_changing_them() {
    let c = ok(&format!(
        r#"
[[rate_limit]]
name = "few"
requests = 1
per = "minute"
burst = 4

[[access_list]]
name = "staff"
users = [{{ name = "alice", password_hash = "{}" }}]

[[host]]
names = ["a.test"]
body = "hi"
rate_limit = "few"
access_list = "staff"
"#,
        super::access::HASH
    ));
    let s = &c.snapshot;
    let mut state = GateState::small();
    state.adopt(s, 1_000);
    let mut scratch = Box::new([0u8; MAX_PATH_BYTES]);
    // alice:pw
    let headers: [(&str, &[u8]); 1] = [("authorization", b"Basic YWxpY2U6cHc=")];
    let req = Request {
        peer: Peer::tcp("192.0.2.1".parse().unwrap()),
        method: b"GET",
        host: Some(b"a.test"),
        target: b"/",
        path: b"/",
        header_count: 2,
        header_bytes: 30,
        content_length: None,
        headers: &headers[..],
        connection: None,
        tls: false,
    };
    let live = |state: &GateState, scratch: &mut gapura_gate::path::PathScratch| {
        state.live_view(s, &req, 1_000, scratch)
    };
    let v = live(&state, &mut scratch);
    assert_eq!(v.host.as_deref(), Some("a.test"));
    assert_eq!(v.rate, Some(("few".to_string(), 4, 0)));
    // The chain asks for a verification; once it passed, the cache holds it.
    let d = s.decide(&req, &mut state, 1_000, &mut scratch, &mut NoTrace);
    assert!(matches!(d.verdict, Verdict::Verify(_)), "{:?}", d.verdict);
    let job = state.take_job().unwrap();
    state.verify_cache.insert(job.cache_key(), 1_000);
    // The live view is the same whether or not the cache holds the
    // credentials: it is no oracle for a password.
    assert_eq!(live(&state, &mut scratch), v);
}

#[test]
fn a_rate_limit_without_a_bucket_slot_fails_closed_and_binds_once_one_frees() {
    let profile = |name: &str| {
        format!(
            "[quota]\npolicy_slots = 1\nslot_grace_ms = 1000\n\n[[rate_limit]]\nname = \"{name}\"\nrequests = 1000\nper = \"second\"\n\n[[host]]\nnames = [\"a.test\"]\nrate_limit = \"{name}\"\nbody = \"hi\"\n"
        )
    };
    let mut first = ok(&profile("one"));
    first.snapshot.generation = 1;
    // Another limit, with another rate: a (limit, host) pair of its own.
    let mut second = ok(&profile("two").replace("requests = 1000", "requests = 999"));
    second.snapshot.generation = 2;
    // The shard's tables as the profile sizes them: one slot.
    let mut state = GateState::new(&first.snapshot.gate.quota_sizes, [7; 16]).unwrap();
    let client = "192.0.2.1";
    assert_eq!(
        get(&first.snapshot, &mut state, client, b"a.test", b"/", 0),
        Got::Answer(200)
    );
    // The reload retires "one" (its buckets kept for the grace) and the
    // one slot is taken: "two" finds none. It refuses, never lets through.
    assert_eq!(state.adopt(&second.snapshot, 10), 1, "reported once");
    assert_eq!(
        get(&second.snapshot, &mut state, client, b"a.test", b"/", 10),
        Got::Refused(ErrorStatus::TooManyRequests, 1)
    );
    assert_eq!(state.counters.rate_unbound, 1);
    assert_eq!(state.counters.rate_unbound_refused, 1);
    // Past the grace the retired slot is swept and the limit binds.
    for t in [2_000, 4_000, 6_000] {
        state.sweep(t, 1 << 20);
    }
    assert_eq!(
        get(&second.snapshot, &mut state, client, b"a.test", b"/", 6_000),
        Got::Answer(200)
    );
    assert_eq!(state.counters.rate_unbound, 0);
}
