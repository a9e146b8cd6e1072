//! Keep-alive and pipelining: one connection, many requests, answers in
//! order, and the ways a connection ends after an answer.

use super::*;

#[test]
fn keep_alive_serves_requests_one_after_another() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        for i in 0..3 {
            c.send(&get(&format!("/{i}"), &[]));
            let r = c.response(false).await.unwrap();
            assert_eq!((r.status, r.body.as_slice()), (200, &b"hello\n"[..]));
            assert_eq!(r.header("Connection"), None, "keep-alive is the default");
        }
        assert_eq!(shard.stats.requests.get(), 3);
        assert_eq!(open_count(&shard), 1);
    })
}

#[test]
fn pipelined_requests_are_answered_in_order_in_one_write() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut all = Vec::new();
        for p in ["/a", "/b", "/c"] {
            all.extend(get(p, &[]));
        }
        c.send(&all);
        settle().await;
        assert_eq!(shard.stats.writes.get(), 1, "three answers, one write");
        for _ in 0..3 {
            assert_eq!(c.response(false).await.unwrap().status, 200);
        }
        assert_eq!(c.pending(), 0);
    })
}

#[test]
fn a_head_trickled_a_byte_at_a_time_is_parsed_once_whole() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let req = get("/slow", &["X-Pad: abcdefghij"]);
        for b in &req[..req.len() - 1] {
            c.send(std::slice::from_ref(b));
            settle().await;
            assert_eq!(c.pending(), 0, "no answer before the head is whole");
        }
        c.send(&req[req.len() - 1..]);
        assert_eq!(c.response(false).await.unwrap().status, 200);
    })
}

#[test]
fn a_pipeline_split_mid_head_answers_the_whole_heads_first() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut all = get("/one", &[]);
        let second = get("/two", &[]);
        all.extend_from_slice(&second[..10]);
        c.send(&all);
        assert_eq!(c.response(false).await.unwrap().status, 200);
        settle().await;
        assert_eq!(c.pending(), 0);
        c.send(&second[10..]);
        assert_eq!(c.response(false).await.unwrap().status, 200);
    })
}

#[test]
fn head_gets_the_head_only_and_the_next_request_follows() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut both = b"HEAD / HTTP/1.1\r\nHost: hello.test\r\n\r\n".to_vec();
        both.extend(get("/", &[]));
        c.send(&both);
        let head = c.response(true).await.unwrap();
        assert_eq!(head.header("Content-Length"), Some("6"));
        assert!(head.body.is_empty());
        let r = c.response(false).await.unwrap();
        assert_eq!(r.body, b"hello\n");
    })
}

#[test]
fn http10_without_keep_alive_is_answered_and_closed() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.send(b"GET / HTTP/1.0\r\n\r\n");
        let r = c.response(false).await.unwrap();
        assert_eq!(r.header("Connection"), Some("close"));
        c.until_closed().await;
        settle().await;
        assert_eq!(open_count(&shard), 0);
        assert_eq!(shard.stats.connections_closed.get(), 1);
    })
}

#[test]
fn http10_with_keep_alive_stays_open() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        for _ in 0..2 {
            c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
            let r = c.response(false).await.unwrap();
            assert_eq!(r.header("Connection"), Some("keep-alive"));
        }
        assert!(!c.server_ended());
    })
}

#[test]
fn connection_close_ends_the_connection_after_its_answer() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut both = get("/", &["Connection: close"]);
        both.extend(get("/never", &[]));
        c.send(&both);
        let r = c.response(false).await.unwrap();
        assert_eq!(r.header("Connection"), Some("close"));
        let rest = c.until_closed().await;
        assert!(rest.is_empty(), "the request after close is not answered");
        assert_eq!(shard.stats.requests.get(), 1);
    })
}

#[test]
fn max_requests_per_connection_closes_after_the_last_one() {
    run(async {
        let shard = shard("max_requests_per_connection = 2", HELLO);
        let c = open(&shard);
        c.send(&get("/1", &[]));
        assert_eq!(c.response(false).await.unwrap().header("Connection"), None);
        c.send(&get("/2", &[]));
        let r = c.response(false).await.unwrap();
        assert_eq!((r.status, r.header("Connection")), (200, Some("close")));
        c.until_closed().await;
    })
}

#[test]
fn a_client_half_close_after_its_requests_ends_the_connection_as_done() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.send(&get("/", &[]));
        c.finish();
        assert_eq!(c.response(false).await.unwrap().status, 200);
        c.until_closed().await;
        settle().await;
        assert_eq!(open_count(&shard), 0);
        assert_eq!(shard.stats.errors.iter().map(Counter::get).sum::<u64>(), 0);
        assert_eq!(shard.stats.idle_timeouts.get(), 0);
    })
}

#[test]
fn each_connection_has_its_own_serial_and_shares_the_shard() {
    run(async {
        let shard = shard("", HELLO);
        let (a, b) = (open(&shard), open(&shard));
        a.send(&get("/a", &[]));
        b.send(&get("/b", &[]));
        assert_eq!(a.response(false).await.unwrap().status, 200);
        assert_eq!(b.response(false).await.unwrap().status, 200);
        assert_eq!(open_count(&shard), 2);
        assert_eq!(shard.next_connection(), 3, "two serials handed out");
    })
}

#[test]
fn the_unknown_host_gets_the_servers_answer_and_the_connection_goes_on() {
    run(async {
        let shard = shard(
            "",
            "[[host]]\nnames = [\"only.test\"]\nkind = \"respond\"\nbody = \"x\"\n",
        );
        let c = open(&shard);
        c.send(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n");
        let r = c.response(false).await.unwrap();
        assert_eq!(r.status, 404);
        c.send(b"GET / HTTP/1.1\r\nHost: only.test\r\n\r\n");
        assert_eq!(c.response(false).await.unwrap().body, b"x");
    })
}

use crate::server::stats::Counter;

#[test]
fn answers_made_without_waiting_are_timed_in_the_first_bucket() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut all = Vec::new();
        for p in ["/a", "/b", "/c", "/d"] {
            all.extend(get(p, &[]));
        }
        c.send(&all);
        for _ in 0..4 {
            assert_eq!(c.response(false).await.unwrap().status, 200);
        }
        let h = shard.gate.borrow().latency[0];
        assert_eq!((h.count, h.buckets[0], h.sum_us), (4, 4, 0), "{h:?}");
    })
}

#[test]
fn answers_of_one_batch_are_timed_in_their_own_hosts() {
    run(async {
        let other = r#"
[[host]]
names = ["other.test"]
kind = "respond"
status = 200
body = "other\n"
content_type = "text/plain"
"#;
        let shard = shard("", &format!("{HELLO}{other}"));
        let c = open(&shard);
        let order = [
            "hello.test",
            "other.test",
            "other.test",
            "hello.test",
            "other.test",
        ];
        let mut all = Vec::new();
        for host in order {
            all.extend(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes());
        }
        c.send(&all);
        for _ in order {
            assert_eq!(c.response(false).await.unwrap().status, 200);
        }
        let gate = shard.gate.borrow();
        let counts: Vec<(u64, u64)> = gate
            .latency
            .iter()
            .map(|h| (h.count, h.buckets[0]))
            .collect();
        assert_eq!(counts, [(2, 2), (3, 3)]);
    })
}
