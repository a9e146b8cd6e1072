//! The connection's deadlines on the test's clock: each fires when the
//! clock passes it and not before, and is counted as what it is.

use super::*;
use crate::server::stats::ErrorKind;

const TIMEOUTS: &str = "header_timeout_ms = 10000\nidle_timeout_ms = 60000\nbody_timeout_ms = 30000\nwrite_timeout_ms = 30000";

fn errors(shard: &Shard, kind: ErrorKind) -> u64 {
    shard.stats.errors[kind as usize].get()
}

#[test]
fn an_idle_connection_closes_at_the_idle_timeout_and_not_before() {
    run(async {
        let shard = shard(TIMEOUTS, HELLO);
        let c = open(&shard);
        c.send(&get("/", &[]));
        assert_eq!(c.response(false).await.unwrap().status, 200);
        advance(&shard, Duration::from_secs(59)).await;
        assert!(!c.server_ended(), "59 s of 60");
        advance(&shard, Duration::from_secs(61)).await;
        assert!(c.closed());
        assert_eq!(shard.stats.idle_timeouts.get(), 1);
        assert_eq!(open_count(&shard), 0);
    })
}

#[test]
fn a_connection_that_never_speaks_closes_at_the_idle_timeout() {
    run(async {
        let shard = shard(TIMEOUTS, HELLO);
        let c = open(&shard);
        advance(&shard, Duration::from_secs(61)).await;
        assert!(c.closed());
        assert_eq!(c.written(), 0, "nothing to answer");
        assert_eq!(shard.stats.idle_timeouts.get(), 1);
    })
}

#[test]
fn a_partial_head_closes_at_the_header_timeout() {
    run(async {
        let shard = shard(TIMEOUTS, HELLO);
        let c = open(&shard);
        c.send(b"GET / HTTP/1.1\r\nHost: hel");
        advance(&shard, Duration::from_secs(9)).await;
        assert!(!c.server_ended(), "9 s of 10");
        advance(&shard, Duration::from_secs(11)).await;
        assert!(c.server_ended());
        assert_eq!(errors(&shard, ErrorKind::HeaderTimeout), 1);
        assert_eq!(shard.stats.idle_timeouts.get(), 0);
    })
}

#[test]
fn a_trickled_head_does_not_move_the_header_deadline() {
    run(async {
        let shard = shard(TIMEOUTS, HELLO);
        let c = open(&shard);
        c.send(b"GET / HTTP/1.1\r\n");
        settle().await;
        // More bytes arrive, each before a read deadline would pass.
        for _ in 0..3 {
            c.send(b"X-Slow: a\r\n");
            settle().await;
        }
        advance(&shard, Duration::from_secs(11)).await;
        assert!(c.server_ended());
        assert_eq!(errors(&shard, ErrorKind::HeaderTimeout), 1);
    })
}

#[test]
fn a_stalled_body_closes_at_the_body_timeout() {
    run(async {
        let shard = shard(TIMEOUTS, HELLO);
        let c = open(&shard);
        c.send(b"POST / HTTP/1.1\r\nHost: hello.test\r\nContent-Length: 10\r\n\r\nabc");
        advance(&shard, Duration::from_secs(29)).await;
        assert!(!c.server_ended(), "29 s of 30");
        advance(&shard, Duration::from_secs(31)).await;
        c.until_closed().await;
        assert_eq!(errors(&shard, ErrorKind::BodyTimeout), 1);
    })
}

#[test]
fn a_client_that_stops_reading_meets_the_write_timeout() {
    run(async {
        let big = format!(
            "[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"respond\"\nbody = \"{}\"\n",
            "z".repeat(60_000)
        );
        let shard = shard(TIMEOUTS, &big);
        let c = open(&shard);
        c.set_window(Some(1000));
        c.send(&get("/", &[]));
        settle().await;
        assert!(c.written() >= 1000);
        advance(&shard, Duration::from_secs(29)).await;
        assert!(c.server_holds(), "29 s of 30");
        advance(&shard, Duration::from_secs(31)).await;
        assert!(!c.server_holds(), "the connection is gone");
        assert_eq!(errors(&shard, ErrorKind::WriteTimeout), 1);
        assert_eq!(open_count(&shard), 0);
    })
}

#[test]
fn a_slow_reader_that_keeps_reading_gets_the_whole_answer() {
    run(async {
        let body = "q".repeat(50_000);
        let host = format!(
            "[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"respond\"\nbody = \"{body}\"\n"
        );
        let shard = shard(TIMEOUTS, &host);
        let c = open(&shard);
        c.set_window(Some(4096));
        c.send(&get("/", &[]));
        let mut got = Vec::new();
        while got.len() < body.len() + 50 {
            c.readable().await;
            got.extend(c.take_all());
            if crate::server::inmemory::memio::parse_response(&got, false, false).is_some() {
                break;
            }
        }
        let (r, _) = crate::server::inmemory::memio::parse_response(&got, false, false).unwrap();
        assert_eq!(r.body.len(), body.len());
        assert_eq!(errors(&shard, ErrorKind::WriteTimeout), 0);
    })
}

#[test]
fn answered_requests_reset_the_idle_clock() {
    run(async {
        let shard = shard(TIMEOUTS, HELLO);
        let c = open(&shard);
        for _ in 0..3 {
            advance(&shard, Duration::from_secs(50)).await;
            c.send(&get("/", &[]));
            assert_eq!(c.response(false).await.unwrap().status, 200);
        }
        assert!(!c.server_ended());
        assert_eq!(shard.stats.idle_timeouts.get(), 0);
    })
}
