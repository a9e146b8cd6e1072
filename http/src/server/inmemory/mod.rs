//! Unit tests of the connection layer on an in-memory transport
//! (`memio`): a real shard on a profile compiled as the runtime compiles
//! it, its connections served by the code the server runs, their client
//! scripted byte by byte, and time passed in (the shard's deadlines fire
//! only when a test moves the clock: no test waits on the wall clock).
//!
//! Modules by what they drive: `keepalive` (keep-alive and pipelining),
//! `counted` (a warm pipelined batch's allocations: none),
//! `framing` (every framing refusal), `bodies` (bodies both ways,
//! 100-continue), `upstream` (the proxy against a loopback upstream,
//! upgrades), `timeouts` (the deadlines by the test clock), `closes` (the
//! client gone at each stage), `h2` (HTTP/2 streams, windows, resets and
//! GOAWAY over the in-memory duplex), `lanes` (the quiet and paying
//! lanes' answers against the whole path).

mod bodies;
mod closes;
mod counted;
mod framing;
mod h2;
mod keepalive;
mod lanes;
pub(crate) mod memio;
mod timeouts;
mod upstream;

use super::client::{ClientIo, READ_BUF_BYTES};
use super::{Shard, SnapshotFeed};
use crate::upstream::HealthBoard;
use gapura_config::{Environment, NoFiles, NoNames};
use gapura_gate::chain::GateState;
use gapura_gate::client::Peer;
use gapura_gate::Snapshot;
use memio::Client;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

struct NoFeed;

impl SnapshotFeed for NoFeed {
    fn newer_than(&self, _: u64) -> Option<Arc<Snapshot>> {
        None
    }
}

/// `[server]` lines and the rest of a profile, compiled as the runtime
/// compiles it (protections off unless the profile has `[protection]`).
pub(crate) fn snapshot(server_extra: &str, rest: &str) -> Snapshot {
    let protection = if rest.contains("[protection]") {
        ""
    } else {
        "\n[protection]\noff = [\"all\"]\n"
    };
    let src = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nshards = 1\n{server_extra}\n{rest}{protection}"
    );
    let env = Environment {
        cores: 1,
        memory_bytes: gapura_config::FALLBACK_MEMORY_BYTES,
        resolver: &NoNames,
        certificates: &NoFiles,
    };
    let mut compiled = gapura_config::compile_with(&src, &env)
        .unwrap_or_else(|e| panic!("profile does not compile: {e:?}\n{src}"));
    compiled.snapshot.generation = 1;
    compiled.snapshot
}

/// A shard serving `snapshot`, its deadlines on the test's clock. Call
/// inside [`run`].
pub(crate) fn shard_of(snapshot: Snapshot) -> Rc<Shard> {
    let gate = GateState::new(&snapshot.gate.quota_sizes, [7; 16]).expect("quota tables");
    let shard = Shard::new(
        0,
        Box::new(NoFeed),
        Arc::new(snapshot),
        Arc::default(),
        Arc::new(HealthBoard::default()),
        1,
        gate,
    );
    shard.conns.deadlines.set_manual();
    Rc::new(shard)
}

/// A shard on `[server]` lines and the rest of a profile.
pub(crate) fn shard(server_extra: &str, rest: &str) -> Rc<Shard> {
    shard_of(snapshot(server_extra, rest))
}

/// A respond host answering every request with `hello\n`.
pub(crate) const HELLO: &str = r#"
[[host]]
names = ["hello.test"]
default = true
kind = "respond"
status = 200
body = "hello\n"
content_type = "text/plain"
"#;

/// Runs a test's body on a single-threaded runtime with a timer (as a
/// shard runs), as a task of its own, so that its yields let the
/// connections' tasks run. A body still waiting after 20 s of the
/// machine's time has hung: the test fails.
pub(crate) fn run<F: Future + 'static>(f: F) -> F::Output
where
    F::Output: 'static,
{
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("runtime")
        .block_on(async {
            let body = monoio::spawn(f);
            monoio::time::timeout(Duration::from_secs(20), body)
                .await
                .expect("the test hung")
        })
}

/// A connection whose opening steps passed, from `addr`, served as
/// HTTP/1.1 on its own task; the client's end comes back.
pub(crate) fn open_from(shard: &Rc<Shard>, addr: [u8; 4]) -> Client {
    let (mem, client) = memio::pair();
    let place = super::place::Place::open(shard);
    let io = ClientIo::new(
        mem,
        Vec::with_capacity(READ_BUF_BYTES),
        0,
        shard.conns.deadlines.register(),
    );
    let peer = Peer::tcp(std::net::IpAddr::from(addr));
    monoio::spawn(super::opening::serve_http1(
        io,
        shard.clone(),
        peer,
        place,
        None,
    ));
    client
}

/// [`open_from`] 192.0.2.1.
pub(crate) fn open(shard: &Rc<Shard>) -> Client {
    open_from(shard, [192, 0, 2, 1])
}

/// Lets every task that can run run (the served connections), a few
/// rounds.
pub(crate) async fn settle() {
    for _ in 0..16 {
        yield_now().await;
    }
}

/// Lets the other ready tasks run once. (A task that wakes itself is
/// polled again first; one woken by another task queues behind the
/// ready ones.)
pub(crate) async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        let waker = cx.waker().clone();
        monoio::spawn(async move { waker.wake() });
        std::task::Poll::Pending
    })
    .await
}

/// Waits for `event`, which the machine's own I/O brings (a loopback
/// upstream, the HTTP/2 driver's ticker): the tasks run between looks, a
/// millisecond apart, until it holds or 10 s pass. Whether it held.
pub(crate) async fn until(mut event: impl FnMut() -> bool) -> bool {
    for _ in 0..10_000 {
        settle().await;
        if event() {
            return true;
        }
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// Moves the shard's clock on by `by`: every deadline due by then fires,
/// and the tasks it wakes run.
pub(crate) async fn advance(shard: &Shard, by: Duration) {
    settle().await;
    shard.conns.deadlines.advance(by);
    settle().await;
}

/// `GET path` for `hello.test` with `extra` header lines.
pub(crate) fn get(path: &str, extra: &[&str]) -> Vec<u8> {
    let mut out = format!("GET {path} HTTP/1.1\r\nHost: hello.test\r\n");
    for line in extra {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// Connections the shard counts open.
pub(crate) fn open_count(shard: &Shard) -> u32 {
    shard.conns.open.get()
}
