//! The client gone at each stage: before a byte, mid-head, mid-answer,
//! by a reset. Nothing is answered to a client that left, nothing is
//! leaked: the shard's open count and busy count come back to zero.

use super::*;
use crate::server::stats::ErrorKind;

async fn gone(shard: &Shard) {
    settle().await;
    assert_eq!(open_count(shard), 0, "the connection's place is released");
    assert_eq!(shard.conns.busy.get(), 0, "no request left busy");
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

/// A connection holding its place in a one-connection-per-prefix limit,
/// admitted as the accept step admits it.
fn open_limited(shard: &Rc<Shard>) -> Option<memio::Client> {
    let addr = std::net::IpAddr::from([192, 0, 2, 1]);
    let snap = shard.snapshot();
    let now = shard.now_ms();
    let token = shard
        .gate_mut()
        .admit_connection(snap.gate.connections.as_ref(), addr, now)
        .ok()?;
    let (mem, client) = memio::pair();
    let mut place = crate::server::place::Place::open(shard);
    place.hold(token);
    let io = ClientIo::new(
        mem,
        Vec::with_capacity(READ_BUF_BYTES),
        0,
        shard.conns.deadlines.register(),
    );
    let peer = Peer::tcp(addr);
    monoio::spawn(crate::server::opening::serve_http1(
        io,
        shard.clone(),
        peer,
        place,
        None,
    ));
    Some(client)
}

const ONE_PER_PREFIX: &str = "[quota.connections]\nconcurrent = 1\n";

/// Each way a connection ends gives its place in the limit back: the
/// next connection from the same prefix is admitted.
#[test]
fn every_end_releases_the_connections_place_in_its_limit() {
    type Ending = fn(memio::Client, Rc<Shard>) -> std::pin::Pin<Box<dyn Future<Output = ()>>>;
    let endings: [(&str, Ending); 5] = [
        ("half-close", |c, _| {
            Box::pin(async move {
                c.finish();
                c.until_closed().await;
            })
        }),
        ("reset", |c, _| {
            Box::pin(async move {
                c.reset();
                settle().await;
            })
        }),
        ("idle timeout", |_c, s| {
            Box::pin(async move {
                advance(&s, Duration::from_secs(3601)).await;
            })
        }),
        ("refusal", |c, s| {
            Box::pin(async move {
                c.send(b"GARBAGE\r\n\r\n");
                c.until_closed().await;
                advance(&s, Duration::from_secs(2)).await;
            })
        }),
        ("connection: close", |c, _| {
            Box::pin(async move {
                c.send(&get("/", &["Connection: close"]));
                c.until_closed().await;
            })
        }),
    ];
    for (name, end) in endings {
        run(async move {
            let shard = shard("", &format!("{HELLO}\n{ONE_PER_PREFIX}"));
            let c = open_limited(&shard).expect("the first is admitted");
            settle().await;
            assert!(open_limited(&shard).is_none(), "{name}: one at a time");
            end(c, shard.clone()).await;
            settle().await;
            assert_eq!(open_count(&shard), 0, "{name}");
            assert!(open_limited(&shard).is_some(), "{name}: place given back");
        });
    }
}
