//! The graceful binary upgrade: a new process takes the listeners of the
//! running one over its upgrade socket while a client keeps connecting,
//! and not one request fails; a profile that does not match is refused and
//! the running process serves on.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn two_shards() -> String {
    profile("", HELLO_HOST).replace("shards = 1", "shards = 2")
}

/// New connections, one request each, until `stop`; counts answers and
/// failures (anything but a whole 200).
fn load(addr: SocketAddr, stop: Arc<AtomicBool>, ok: Arc<AtomicU64>, failed: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let answered = (|| -> std::io::Result<bool> {
            let mut c = TcpStream::connect(addr)?;
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            c.write_all(b"GET / HTTP/1.1\r\nHost: hello.test\r\nConnection: close\r\n\r\n")?;
            let mut buf = Vec::new();
            c.read_to_end(&mut buf)?;
            Ok(buf.starts_with(b"HTTP/1.1 200") && buf.ends_with(b"hello\n"))
        })();
        match answered {
            Ok(true) => ok.fetch_add(1, Ordering::Relaxed),
            other => {
                eprintln!("failed request: {other:?}");
                failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

#[test]
fn a_new_process_takes_the_listeners_under_load_and_no_request_fails() {
    let dir = TempDir::new();
    let sock = dir.0.join("upgrade.sock");
    let sock_arg = sock.to_str().unwrap();
    let mut old = Gapura::try_start(&two_shards(), &["--upgrade-socket", sock_arg]).unwrap();
    let addr = old.addr;
    let (stop, ok, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (s, o, f) = (stop.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || load(addr, s, o, f))
        })
        .collect();
    assert!(wait_until(Duration::from_secs(15), || ok
        .load(Ordering::Relaxed)
        >= 200));

    // The new process: the same listeners, and hand-overs of its own.
    let mut new = Gapura::try_start(
        &two_shards(),
        &["--take-over", sock_arg, "--upgrade-socket", sock_arg],
    )
    .unwrap();
    assert_eq!(new.addr, addr);
    assert!(new.log_text().contains("taken over"), "{}", new.log_text());
    let status = old
        .wait_exit(Duration::from_secs(20))
        .expect("the old process exits");
    assert!(status.success(), "{status}");
    assert!(
        old.log_text().contains("a new process took over"),
        "{}",
        old.log_text()
    );
    let at_exit = ok.load(Ordering::Relaxed);
    assert!(wait_until(Duration::from_secs(15), || ok
        .load(Ordering::Relaxed)
        >= at_exit + 200));

    // And once more, from the new one: its socket replaced the old one's.
    let newer = Gapura::try_start(&two_shards(), &["--take-over", sock_arg]).unwrap();
    assert!(new
        .wait_exit(Duration::from_secs(20))
        .expect("exits")
        .success());
    let at_exit = ok.load(Ordering::Relaxed);
    assert!(wait_until(Duration::from_secs(15), || ok
        .load(Ordering::Relaxed)
        >= at_exit + 200));

    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "of {} requests",
        ok.load(Ordering::Relaxed)
    );
    drop(newer);
}

#[test]
fn a_take_over_with_other_listeners_is_refused_and_the_old_process_serves_on() {
    let dir = TempDir::new();
    let sock = dir.0.join("upgrade.sock");
    let sock_arg = sock.to_str().unwrap();
    let old = Gapura::try_start(&two_shards(), &["--upgrade-socket", sock_arg]).unwrap();
    // One shard instead of two: shard 1's socket would have no taker.
    let err = Gapura::try_start(&profile("", HELLO_HOST), &["--take-over", sock_arg])
        .err()
        .expect("refused");
    assert!(
        err.contains("same listen addresses and shard count"),
        "{err}"
    );
    assert!(
        old.wait_log("hand-over abandoned", Duration::from_secs(15)),
        "{}",
        old.log_text()
    );
    let r = request(old.addr, b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n");
    assert_eq!(r.status, 200);
    // Nobody serves hand-overs at a path that does not exist.
    let err = Gapura::try_start(&two_shards(), &["--take-over", "/nonexistent/u.sock"])
        .err()
        .expect("refused");
    assert!(err.contains("/nonexistent/u.sock"), "{err}");
}
