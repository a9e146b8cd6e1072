//! Active health checks and the health board's slots.
//!
//! One thread probes every server of every group that has `[upstream.health]`:
//! `GET path` over a fresh connection (HTTP/2 for a group of `protocol =
//! "h2"`, else HTTP/1.1; over the group's TLS), within the check's timeout,
//! expecting a status in its range. Results go to the shared [`HealthBoard`], which
//! shards read with a relaxed load; a server that comes back is used again
//! as soon as its next check passes. Slots on the board are assigned per
//! server identity, so a reload keeps each server's state.

use crate::log;
use crate::publish::SnapshotCell;
use gapura_gate::upstream::{UpstreamProtocol, UpstreamTls};
use gapura_gate::Snapshot;
use gapura_http::transport::h2client::{self, H2Live};
use gapura_http::transport::plain::Plain;
use gapura_http::transport::upstream::UpstreamConn;
use gapura_http::upstream::health::BOARD_SLOTS;
use gapura_http::upstream::HealthBoard;
use rustls::pki_types::ServerName;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Assigns board slots by server key: a server keeps its slot while
/// published snapshots name it (a reload keeps its state); a slot whose
/// server no published snapshot names any more is freed at the next
/// assignment, and given again (marked up first) to a new server. So the
/// slots in use are at most the servers of the current snapshot; past the
/// board's capacity, servers share slot 0, which reads as up.
pub struct Slots {
    by_key: HashMap<u64, u32>,
    free: Vec<u32>,
    /// The next never-used slot.
    next: u32,
    board: Arc<HealthBoard>,
}

impl Slots {
    pub fn new(board: Arc<HealthBoard>) -> Slots {
        Slots {
            by_key: HashMap::new(),
            free: Vec::new(),
            next: 1,
            board,
        }
    }

    /// Sets `health_slot` on every server of `snap`, the snapshot about to
    /// be published. Slot 0 is never assigned.
    pub fn assign(&mut self, snap: &mut Snapshot) {
        let named: std::collections::HashSet<u64> = snap
            .upstreams
            .iter()
            .flat_map(|g| g.servers.iter().map(|s| s.key))
            .collect();
        let free = &mut self.free;
        self.by_key.retain(|key, slot| {
            let keep = named.contains(key);
            if !keep && *slot != 0 {
                free.push(*slot);
            }
            keep
        });
        for group in &mut snap.upstreams {
            for server in &mut group.servers {
                let slot = match self.by_key.get(&server.key) {
                    Some(&slot) => slot,
                    None => {
                        let slot = match self.free.pop() {
                            Some(slot) => slot,
                            None if (self.next as usize) < BOARD_SLOTS => {
                                self.next += 1;
                                self.next - 1
                            }
                            None => 0,
                        };
                        // Whatever the slot's last server was, this one
                        // starts up.
                        self.board.set_down(slot, false);
                        self.by_key.insert(server.key, slot);
                        slot
                    }
                };
                server.health_slot = slot;
            }
        }
    }

    /// The board the slots are on.
    pub fn board(&self) -> Arc<HealthBoard> {
        self.board.clone()
    }

    /// Slots held now.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.by_key.values().filter(|&&s| s != 0).count()
    }
}

/// Probes `addr` once, over TLS with `tls` (the group's client
/// configuration and the server's name) as requests go. Ok(status) or the
/// reason it failed.
fn probe(
    addr: SocketAddr,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    host: &str,
    path: &str,
    timeout: Duration,
) -> Result<u16, String> {
    let tcp = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    match tls {
        None => exchange(tcp, host, path),
        Some((config, name)) => {
            let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
            exchange(rustls::StreamOwned::new(conn, tcp), host, path)
        }
    }
}

/// The check's request and its answer's status.
fn exchange(mut s: impl Read + Write, host: &str, path: &str) -> Result<u16, String> {
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

/// The client configurations the checks built, by the group's TLS
/// settings (a reload's new settings build anew; old ones are dropped past
/// a few).
#[derive(Default)]
struct Configs(
    Vec<(
        Arc<UpstreamTls>,
        UpstreamProtocol,
        Arc<rustls::ClientConfig>,
    )>,
);

impl Configs {
    fn get(
        &mut self,
        tls: &Arc<UpstreamTls>,
        protocol: UpstreamProtocol,
    ) -> Result<Arc<rustls::ClientConfig>, String> {
        if let Some((_, _, c)) = self
            .0
            .iter()
            .find(|(t, p, _)| Arc::ptr_eq(t, tls) && *p == protocol)
        {
            return Ok(c.clone());
        }
        let c = gapura_http::transport::upstream::client_config(tls, protocol)?;
        if self.0.len() >= 16 {
            self.0.clear();
        }
        self.0.push((tls.clone(), protocol, c.clone()));
        Ok(c)
    }
}

/// The runtime the HTTP/2 checks run on (the checker's thread is
/// otherwise blocking), made on first use.
type H2Runtime = monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>>;

/// Probes `addr` once in HTTP/2 (`protocol = "h2"`: over TLS by ALPN, else
/// h2c), as requests go: `GET path` on a new connection within `timeout`.
fn probe_h2(
    rt: &mut Option<H2Runtime>,
    addr: SocketAddr,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    host: &str,
    path: &str,
    timeout: Duration,
) -> Result<u16, String> {
    if rt.is_none() {
        let built = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .map_err(|e| format!("no runtime for HTTP/2 checks: {e}"))?;
        *rt = Some(built);
    }
    let Some(rt) = rt.as_mut() else {
        return Err("no runtime for HTTP/2 checks".into());
    };
    let uri = format!(
        "{}://{host}{path}",
        if tls.is_some() { "https" } else { "http" }
    );
    rt.block_on(async move {
        let deadline = monoio::time::Instant::now() + timeout;
        let check = async {
            let tcp = monoio::net::TcpStream::connect_addr(addr)
                .await
                .map_err(|e| e.to_string())?;
            let conn = match tls {
                None => UpstreamConn::Plain(Plain::new(tcp, None)),
                Some((config, name)) => UpstreamConn::Tls(
                    gapura_http::transport::tls::connect(tcp, config, name, deadline)
                        .await
                        .map_err(|why| format!("TLS: {}", why.label()))?,
                ),
            };
            let live = H2Live::new(Default::default());
            let (read, write) = conn.split();
            let send = h2client::handshake(read, write, deadline, &live, 1)
                .await
                .map_err(|e| e.to_string())?;
            let request = http::Request::get(uri.as_str())
                .header("user-agent", "gapura-health")
                .body(())
                .map_err(|e| e.to_string())?;
            let mut send = send.ready().await.map_err(|e| e.to_string())?;
            let (answer, _) = send
                .send_request(request, true)
                .map_err(|e| e.to_string())?;
            let answer = answer.await.map_err(|e| e.to_string())?;
            Ok(answer.status().as_u16())
        };
        match monoio::time::timeout_at(deadline, check).await {
            Ok(r) => r,
            Err(_) => Err("timed out".to_string()),
        }
    })
}

/// Runs the checker until `stop` is set.
pub fn spawn(cell: Arc<SnapshotCell>, board: Arc<HealthBoard>, stop: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("gapura-health".into())
        .spawn(move || {
            let mut due: HashMap<u64, Instant> = HashMap::new();
            let mut down: HashMap<u64, bool> = HashMap::new();
            let mut configs = Configs::default();
            let mut h2_runtime = None;
            let mut generation = 0;
            while !stop.load(Ordering::Relaxed) {
                let snap = cell.load();
                let now = Instant::now();
                if snap.generation != generation {
                    // Servers no snapshot names any more are forgotten.
                    generation = snap.generation;
                    let named: std::collections::HashSet<u64> = snap
                        .upstreams
                        .iter()
                        .filter(|g| g.active_health.is_some())
                        .flat_map(|g| g.servers.iter().map(|s| s.key))
                        .collect();
                    due.retain(|k, _| named.contains(k));
                    down.retain(|k, _| named.contains(k));
                }
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
                        // A TLS client that cannot start fails the check like
                        // any other failure (logged once, as the server goes
                        // down).
                        // HTTP/2 only with `h2`: an `auto` group's servers
                        // are checked in HTTP/1.1, which ALPN offers.
                        let h2 = group.protocol == UpstreamProtocol::H2;
                        let alpn = if h2 {
                            UpstreamProtocol::H2
                        } else {
                            UpstreamProtocol::Http1
                        };
                        let tls = match &group.tls {
                            None => Ok(None),
                            Some(t) => match (
                                configs.get(t, alpn),
                                gapura_http::transport::upstream::server_name(t, server),
                            ) {
                                (Ok(config), Ok(name)) => Ok(Some((config, name))),
                                (Err(e), _) | (_, Err(e)) => Err(format!("TLS cannot start: {e}")),
                            },
                        };
                        let timeout = Duration::from_millis(check.timeout_ms);
                        let result = tls.and_then(|tls| {
                            if h2 {
                                let rt = &mut h2_runtime;
                                probe_h2(rt, server.addr, tls, &host, &check.path, timeout)
                            } else {
                                probe(server.addr, tls, &host, &check.path, timeout)
                            }
                        });
                        let (ok, why) = match result {
                            Ok(s) if s >= check.expect_status.0 && s <= check.expect_status.1 => {
                                (true, String::new())
                            }
                            Ok(s) => (false, format!("status {s}")),
                            Err(e) => (false, e),
                        };
                        // Slot 0 is shared by servers past the board's
                        // capacity: it always reads as up.
                        if server.health_slot != 0 {
                            board.set_down(server.health_slot, !ok);
                        }
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
mod slot_tests {
    use super::*;

    fn snapshot(keys: &[u64]) -> Snapshot {
        let mut c = gapura_config::compile_with(
            "[[upstream]]\nname = \"a\"\nservers = [\"127.0.0.1:1\"]\n",
            &gapura_config::Environment {
                cores: 1,
                memory_bytes: 1 << 30,
                resolver: &gapura_config::NoNames,
                certificates: &gapura_config::NoFiles,
            },
        )
        .unwrap();
        let template = c.snapshot.upstreams[0].servers[0].clone();
        c.snapshot.upstreams[0].servers = keys
            .iter()
            .map(|&key| gapura_gate::upstream::UpstreamServer {
                key,
                ..template.clone()
            })
            .collect();
        c.snapshot
    }

    fn slots_of(s: &Snapshot) -> Vec<u32> {
        s.upstreams[0]
            .servers
            .iter()
            .map(|s| s.health_slot)
            .collect()
    }

    #[test]
    fn slots_stay_with_their_servers_and_freed_ones_are_reused_up() {
        let board = Arc::new(HealthBoard::default());
        let mut slots = Slots::new(board.clone());
        let mut first = snapshot(&[10, 20, 30]);
        slots.assign(&mut first);
        assert_eq!(slots_of(&first), [1, 2, 3]);
        board.set_down(2, true);
        // A reload keeps 10 and 30, drops 20, adds 40: 40 gets 20's slot,
        // marked up.
        let mut second = snapshot(&[30, 40, 10]);
        slots.assign(&mut second);
        assert_eq!(slots_of(&second), [3, 2, 1]);
        assert!(!board.is_down(2));
        assert_eq!(slots.in_use(), 3);
        // A thousand reloads of fresh servers hold no more slots than the
        // snapshot has servers.
        for round in 0..1_000u64 {
            let keys: Vec<u64> = (0..3).map(|i| 1_000 + round * 3 + i).collect();
            let mut s = snapshot(&keys);
            slots.assign(&mut s);
            assert!(slots_of(&s).iter().all(|&slot| (1..=3).contains(&slot)));
        }
        assert_eq!(slots.in_use(), 3);
    }
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
