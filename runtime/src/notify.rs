//! systemd's notification protocol, spoken directly: datagrams of
//! `KEY=VALUE` lines to the socket `$NOTIFY_SOCKET` names (a path, or an
//! abstract name after `@`), no C library.
//!
//! `READY=1` once every shard serves, `RELOADING=1` with `MONOTONIC_USEC`
//! when a reload begins and `READY=1` when it ends (either way),
//! `STOPPING=1` when the drain begins, `STATUS=` with the generation
//! served, and `WATCHDOG=1` every half `$WATCHDOG_USEC` while every shard
//! has turned its loop within that half. Without `$NOTIFY_SOCKET` nothing
//! is sent; a send that fails is logged once and never stops the server.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Where notifications go, and the watchdog's interval when systemd asked
/// for one.
pub struct Notifier {
    to: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
    failed: AtomicBool,
    /// When the last WATCHDOG=1 went (coarse monotonic ms).
    last_watchdog_ms: AtomicU64,
}

impl Notifier {
    /// From the environment systemd sets: `NOTIFY_SOCKET`, `WATCHDOG_USEC`
    /// and `WATCHDOG_PID` (the watchdog is ours only when it names this
    /// process or is absent).
    pub fn from_env() -> Notifier {
        let var = |k: &str| std::env::var(k).ok();
        Notifier::new(
            var("NOTIFY_SOCKET").as_deref(),
            var("WATCHDOG_USEC").as_deref(),
            var("WATCHDOG_PID").as_deref(),
            std::process::id(),
        )
    }

    fn new(socket: Option<&str>, usec: Option<&str>, pid: Option<&str>, me: u32) -> Notifier {
        let to = socket.and_then(|s| {
            let addr = address(s)?;
            match UnixDatagram::unbound() {
                Ok(sock) => Some((sock, addr)),
                Err(e) => {
                    crate::log!("systemd notifications: no socket ({e})");
                    None
                }
            }
        });
        let ours = pid.is_none_or(|p| p.trim().parse::<u32>().ok() == Some(me));
        let watchdog = usec
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0 && ours && to.is_some())
            .map(Duration::from_micros);
        Notifier {
            to,
            watchdog,
            failed: AtomicBool::new(false),
            last_watchdog_ms: AtomicU64::new(0),
        }
    }

    /// Sends one notification (lines of `KEY=VALUE`).
    pub fn send(&self, message: &str) {
        let Some((sock, addr)) = &self.to else {
            return;
        };
        if let Err(e) = sock.send_to_addr(message.as_bytes(), addr) {
            if !self.failed.swap(true, Ordering::Relaxed) {
                crate::log!("systemd notifications: cannot send ({e}); going on without");
            }
        }
    }

    /// Every shard serves.
    pub fn ready(&self, generation: u64) {
        self.send(&format!(
            "READY=1\nSTATUS=serving generation {generation}\nMAINPID={}",
            std::process::id()
        ));
    }

    /// A reload begins.
    pub fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nSTATUS=reloading\nMONOTONIC_USEC={}",
            monotonic_usec()
        ));
    }

    /// A reload has ended, published or refused.
    pub fn reloaded(&self, generation: u64, ok: bool) {
        let how = if ok { "" } else { " (the last reload failed)" };
        self.send(&format!(
            "READY=1\nSTATUS=serving generation {generation}{how}"
        ));
    }

    /// The drain begins.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=draining");
    }

    /// Sends `WATCHDOG=1` when half the watchdog interval has passed since
    /// the last one and every shard's last turn (`beats`, coarse
    /// monotonic ms) is within that half; a stuck shard stops the pings and
    /// systemd acts on its own timeout.
    pub fn watchdog(&self, now_ms: u64, beats: &[AtomicU64]) {
        let Some(interval) = self.watchdog else {
            return;
        };
        let half = (interval.as_millis() as u64 / 2).max(1);
        if now_ms.saturating_sub(self.last_watchdog_ms.load(Ordering::Relaxed)) < half {
            return;
        }
        if beats_fresh(now_ms, half, beats) {
            self.last_watchdog_ms.store(now_ms, Ordering::Relaxed);
            self.send("WATCHDOG=1");
        }
    }
}

/// Whether every beat is within `within_ms` of `now_ms`. A shard's loop
/// turns every 100 ms, so the bound never goes below 500 ms.
fn beats_fresh(now_ms: u64, within_ms: u64, beats: &[AtomicU64]) -> bool {
    let within = within_ms.max(500);
    beats
        .iter()
        .all(|b| now_ms.saturating_sub(b.load(Ordering::Relaxed)) <= within)
}

/// `$NOTIFY_SOCKET` as an address: a path, or an abstract name after `@`.
fn address(s: &str) -> Option<SocketAddr> {
    let made = match s.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None if s.starts_with('/') => SocketAddr::from_pathname(s),
        None => return None,
    };
    made.map_err(|e| crate::log!("systemd notifications: bad NOTIFY_SOCKET {s:?} ({e})"))
        .ok()
}

/// CLOCK_MONOTONIC in microseconds, the clock systemd compares with.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000 + (ts.tv_nsec as u64) / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> (UnixDatagram, String) {
        let name = format!(
            "gapura-notify-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sock = UnixDatagram::bind_addr(&addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (sock, format!("@{name}"))
    }

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn messages_reach_an_abstract_socket() {
        let (sock, name) = listener();
        let n = Notifier::new(Some(&name), None, None, 1);
        n.ready(3);
        let m = recv(&sock);
        assert!(
            m.starts_with("READY=1\nSTATUS=serving generation 3\nMAINPID="),
            "{m}"
        );
        n.reloading();
        let m = recv(&sock);
        let usec: u64 = m.split("MONOTONIC_USEC=").nth(1).unwrap().parse().unwrap();
        assert!(
            m.starts_with("RELOADING=1\n") && usec > 0 && usec <= monotonic_usec(),
            "{m}"
        );
        n.reloaded(4, false);
        assert_eq!(
            recv(&sock),
            "READY=1\nSTATUS=serving generation 4 (the last reload failed)"
        );
        n.stopping();
        assert_eq!(recv(&sock), "STOPPING=1\nSTATUS=draining");
    }

    #[test]
    fn the_watchdog_pings_every_half_interval_while_every_shard_turns() {
        let (sock, name) = listener();
        sock.set_nonblocking(true).unwrap();
        let n = Notifier::new(Some(&name), Some("2000000"), None, 1);
        let beats = [AtomicU64::new(10_000), AtomicU64::new(10_000)];
        n.watchdog(10_100, &beats);
        let mut buf = [0u8; 64];
        assert_eq!(
            sock.recv(&mut buf).map(|k| &buf[..k]).unwrap(),
            b"WATCHDOG=1"
        );
        // Within the half interval: nothing more.
        n.watchdog(10_900, &beats);
        assert!(sock.recv(&mut buf).is_err());
        // A shard that has not turned for 2.6 s stops the pings.
        beats[0].store(12_500, Ordering::Relaxed);
        n.watchdog(12_600, &beats);
        assert!(sock.recv(&mut buf).is_err());
        beats[1].store(12_500, Ordering::Relaxed);
        n.watchdog(12_600, &beats);
        assert_eq!(
            sock.recv(&mut buf).map(|k| &buf[..k]).unwrap(),
            b"WATCHDOG=1"
        );
    }

    #[test]
    fn the_watchdog_is_another_process_s_or_off_without_a_socket() {
        assert!(Notifier::new(Some("@x"), Some("1000000"), Some("4242"), 1)
            .watchdog
            .is_none());
        assert!(Notifier::new(Some("@x"), Some("1000000"), Some("1"), 1)
            .watchdog
            .is_some());
        assert!(Notifier::new(None, Some("1000000"), None, 1)
            .watchdog
            .is_none());
        assert!(Notifier::new(Some("@x"), Some("0"), None, 1)
            .watchdog
            .is_none());
        assert!(Notifier::new(Some("relative"), None, None, 1).to.is_none());
    }
}
