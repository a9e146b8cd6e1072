//! Active health checks and the health board's slots.
//!
//! One thread probes every server of every group that has `[upstream.health]`:
//! `GET path` over a fresh connection, within the check's timeout, expecting
//! a status in its range. Results go to the shared [`HealthBoard`], which
//! shards read with a relaxed load; a server that comes back is used again
//! as soon as its next check passes. Slots on the board are assigned per
//! server identity, so a reload keeps each server's state.

use crate::log;
use crate::publish::SnapshotCell;
use gapura_gate::Snapshot;
use gapura_http::upstream::health::BOARD_SLOTS;
use gapura_http::upstream::HealthBoard;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Assigns board slots by server key; stable for the process's life.
#[derive(Default)]
pub struct Slots {
    by_key: HashMap<u64, u32>,
}

impl Slots {
    /// Sets `health_slot` on every server of `snap`. Slot 0 is never
    /// assigned: servers past the board's capacity share it and read as up.
    pub fn assign(&mut self, snap: &mut Snapshot) {
        for group in &mut snap.upstreams {
            for server in &mut group.servers {
                let next = self.by_key.len() as u32 + 1;
                let slot = *self.by_key.entry(server.key).or_insert(next);
                server.health_slot = if (slot as usize) < BOARD_SLOTS {
                    slot
                } else {
                    0
                };
            }
        }
    }
}

/// Probes `addr` once. Ok(status) or the reason it failed.
fn probe(addr: SocketAddr, host: &str, path: &str, timeout: Duration) -> Result<u16, String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: gapura-health\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        let k = s.read(&mut buf[n..]).map_err(|e| e.to_string())?;
        if k == 0 {
            return Err("closed before a status line".into());
        }
        n += k;
    }
    status_of(&buf[..n])
}

/// The status of a response that starts `HTTP/1.x NNN`, read as bytes (an
/// upstream may send anything: never sliced as text).
fn status_of(line: &[u8]) -> Result<u16, String> {
    if !line.starts_with(b"HTTP/1.") || line.get(8) != Some(&b' ') {
        return Err("not HTTP".into());
    }
    match line.get(9..12) {
        Some(d) if d.iter().all(u8::is_ascii_digit) => {
            Ok(d.iter().fold(0u16, |a, &b| a * 10 + u16::from(b - b'0')))
        }
        _ => Err("bad status line".into()),
    }
}

/// Runs the checker until `stop` is set.
pub fn spawn(cell: Arc<SnapshotCell>, board: Arc<HealthBoard>, stop: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("gapura-health".into())
        .spawn(move || {
            let mut due: HashMap<u64, Instant> = HashMap::new();
            let mut down: HashMap<u64, bool> = HashMap::new();
            while !stop.load(Ordering::Relaxed) {
                let snap = cell.load();
                let now = Instant::now();
                for group in &snap.upstreams {
                    let Some(check) = &group.active_health else {
                        continue;
                    };
                    for server in &group.servers {
                        let next = due.entry(server.key).or_insert(now);
                        if *next > now {
                            continue;
                        }
                        *next = now + Duration::from_millis(check.interval_ms);
                        let host = match &group.host_header {
                            gapura_gate::upstream::HostHeader::Rewrite(h) => h.clone(),
                            gapura_gate::upstream::HostHeader::PassThrough => {
                                server.addr.to_string()
                            }
                        };
                        let result = probe(
                            server.addr,
                            &host,
                            &check.path,
                            Duration::from_millis(check.timeout_ms),
                        );
                        let (ok, why) = match result {
                            Ok(s) if s >= check.expect_status.0 && s <= check.expect_status.1 => {
                                (true, String::new())
                            }
                            Ok(s) => (false, format!("status {s}")),
                            Err(e) => (false, e),
                        };
                        board.set_down(server.health_slot, !ok);
                        let was_down = down.insert(server.key, !ok).unwrap_or(false);
                        if was_down == ok {
                            if ok {
                                log!("upstream {} {}: healthy again", group.name, server.addr);
                            } else {
                                log!("upstream {} {}: unhealthy ({why})", group.name, server.addr);
                            }
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
}

#[cfg(test)]
mod status_tests {
    use super::status_of;

    #[test]
    fn status_lines_are_read_as_bytes() {
        assert_eq!(status_of(b"HTTP/1.1 204 No Content"), Ok(204));
        assert!(status_of("HTTP/1.1 2\u{e9}4 x".as_bytes()).is_err());
        assert!(status_of("\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}".as_bytes()).is_err());
        assert!(status_of(b"HTTP/1.1 20").is_err());
        assert!(status_of(b"SSH-2.0-OpenSSH").is_err());
    }
}
