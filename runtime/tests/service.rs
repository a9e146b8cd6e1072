//! Running as a service: systemd's notifications (READY, RELOADING,
//! STOPPING, STATUS, WATCHDOG) on a socket the test holds, and who the
//! process runs as (root refused without `user` or `--allow-root`; the drop
//! to `user`).

mod common;

use common::*;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// An abstract datagram socket for NOTIFY_SOCKET, and its `@name`.
fn notify_socket(tag: &str) -> (UnixDatagram, String) {
    let name = format!("gapura-service-test-{}-{tag}", std::process::id());
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    (sock, format!("@{name}"))
}

/// Waits for a notification that starts with `prefix`, returning it; the
/// ones before it are returned too, in order.
fn wait_for(sock: &UnixDatagram, prefix: &str) -> (String, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut before = Vec::new();
    let mut buf = [0u8; 1024];
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            if m.starts_with(prefix) {
                return (m, before);
            }
            before.push(m);
        }
    }
    panic!("no {prefix:?} notification; got {before:?}");
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

#[test]
fn systemd_hears_ready_reloading_stopping_and_the_watchdog() {
    let (sock, name) = notify_socket("notify");
    let mut g = Gapura::try_start_with(
        &profile("", HELLO_HOST),
        &["--allow-root"],
        &[("NOTIFY_SOCKET", &name), ("WATCHDOG_USEC", "400000")],
    )
    .unwrap();
    let (ready, _) = wait_for(&sock, "READY=1");
    assert!(ready.contains("STATUS=serving generation 1"), "{ready}");
    assert!(
        ready.contains(&format!("MAINPID={}", g.child.id())),
        "{ready}"
    );
    // Every shard turns its loop, so the pings come (every 200 ms).
    wait_for(&sock, "WATCHDOG=1");
    wait_for(&sock, "WATCHDOG=1");

    g.signal(libc::SIGHUP);
    let (reloading, _) = wait_for(&sock, "RELOADING=1");
    let usec: u64 = reloading
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .expect("MONOTONIC_USEC")
        .parse()
        .unwrap();
    assert!(usec > 0, "{reloading}");
    let (ready, _) = wait_for(&sock, "READY=1");
    assert!(ready.contains("STATUS=serving generation 2"), "{ready}");

    // A reload that fails is said in the status.
    std::fs::write(&g.profile, "[server]\nbogus = 1\n").unwrap();
    g.signal(libc::SIGHUP);
    wait_for(&sock, "RELOADING=1");
    let (ready, _) = wait_for(&sock, "READY=1");
    assert!(
        ready.contains("STATUS=serving generation 2 (the last reload failed)"),
        "{ready}"
    );

    g.signal(libc::SIGTERM);
    let (stopping, _) = wait_for(&sock, "STOPPING=1");
    assert!(stopping.contains("STATUS=draining"), "{stopping}");
    assert!(g.wait_exit(Duration::from_secs(15)).unwrap().success());
}

#[test]
fn root_without_a_user_is_refused_unless_allowed() {
    let started = Gapura::try_start_with(&profile("", HELLO_HOST), &[], &[]);
    if euid() == 0 {
        let err = started.err().expect("root without user must not start");
        assert!(err.contains("refusing to run as root"), "{err}");
        assert!(err.contains("--allow-root"), "{err}");
    } else {
        // Not root: nothing to refuse.
        let g = started.unwrap();
        assert_eq!(
            request(g.addr, b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n").status,
            200
        );
    }
}

/// The uid in /proc/PID/status (real, effective, saved, filesystem).
fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect()
}

#[test]
fn the_process_becomes_the_profile_s_user_once_its_ports_are_bound() {
    let dir = TempDir::new();
    // Open to the user it becomes, so the key it creates can be made there.
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let key = dir.0.join("pow.key");
    let server = format!("user = \"nobody\"\npow_key_file = \"{}\"", key.display());
    let started = Gapura::try_start_with(&profile(&server, HELLO_HOST), &[], &[]);
    if euid() != 0 {
        let err = started.err().expect("only root can become another user");
        assert!(err.contains("only root can become another user"), "{err}");
        return;
    }
    let g = started.unwrap();
    let nobody = 65534;
    assert_eq!(uids(g.child.id()), vec![nobody; 4]);
    assert!(
        g.log_text().contains("running as user nobody"),
        "{}",
        g.log_text()
    );
    // Bound before the drop: it serves on its port.
    assert_eq!(
        request(g.addr, b"GET / HTTP/1.1\r\nHost: hello.test\r\n\r\n").status,
        200
    );
    // The key it created as root was given to the user, so a reload can
    // read it again.
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&key).unwrap());
    assert_eq!(owner, nobody);
    g.signal(libc::SIGHUP);
    assert!(
        g.wait_log("reloaded: generation 2", Duration::from_secs(15)),
        "{}",
        g.log_text()
    );
}
