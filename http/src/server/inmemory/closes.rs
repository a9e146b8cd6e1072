//! The client gone at each stage: before a byte, mid-head, mid-answer,
//! by a reset. Nothing is answered to a client that left, nothing is
//! leaked: the shard's open count and busy count come back to zero.

use super::*;
use crate::server::stats::ErrorKind;

async fn gone(shard: &Shard) {
    settle().await;
    assert_eq!(open_count(shard), 0, "the connection's place is released");
    assert_eq!(shard.busy.get(), 0, "no request left busy");
    assert_eq!(shard.stats.connections_closed.get(), 1);
}

#[test]
fn a_client_that_closes_before_a_byte_ends_quietly() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.finish();
        assert!(c.until_closed().await.is_empty());
        gone(&shard).await;
        assert_eq!(shard.stats.errors.iter().map(|e| e.get()).sum::<u64>(), 0);
    })
}

#[test]
fn a_client_that_closes_mid_head_gets_no_answer() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.send(b"GET / HTTP/1.1\r\nHost: hel");
        settle().await;
        c.finish();
        assert!(c.until_closed().await.is_empty());
        gone(&shard).await;
        assert_eq!(shard.stats.requests.get(), 0);
    })
}

#[test]
fn a_reset_while_idle_ends_the_connection() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.send(&get("/", &[]));
        assert_eq!(c.response(false).await.unwrap().status, 200);
        c.reset();
        gone(&shard).await;
    })
}

#[test]
fn a_reset_mid_head_ends_the_connection_as_an_io_error() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        c.send(b"GET / HTT");
        settle().await;
        c.reset();
        gone(&shard).await;
        assert_eq!(shard.stats.errors[ErrorKind::Io as usize].get(), 1);
    })
}

#[test]
fn a_reset_while_the_answer_is_written_ends_it_as_an_io_error() {
    run(async {
        let host = format!(
            "[[host]]\nnames = [\"hello.test\"]\ndefault = true\nkind = \"respond\"\nbody = \"{}\"\n",
            "w".repeat(40_000)
        );
        let shard = shard("", &host);
        let c = open(&shard);
        c.set_window(Some(512));
        c.send(&get("/", &[]));
        settle().await;
        assert!(c.server_holds());
        c.reset();
        gone(&shard).await;
        assert_eq!(shard.stats.errors[ErrorKind::Io as usize].get(), 1);
    })
}

#[test]
fn a_client_gone_after_a_pipeline_is_answered_is_counted_once() {
    run(async {
        let shard = shard("", HELLO);
        let c = open(&shard);
        let mut all = get("/1", &[]);
        all.extend(get("/2", &[]));
        c.send(&all);
        c.finish();
        let bytes = c.until_closed().await;
        let (first, used) = memio::parse_response(&bytes, false, true).unwrap();
        let (second, _) = memio::parse_response(&bytes[used..], false, true).unwrap();
        assert_eq!((first.status, second.status), (200, 200));
        gone(&shard).await;
    })
}
