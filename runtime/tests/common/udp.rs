//! A UDP relay's upstream and where a relay listens.

use super::Gapura;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// An upstream that answers every datagram with `copies` copies of it
/// (1: an echo; more: an amplifier), on its own thread until dropped.
pub struct Upstream {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Upstream {
    pub fn start(copies: usize) -> Upstream {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 65_536];
            while !stopped.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    for _ in 0..copies {
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            }
        });
        Upstream { addr, stop }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The address relay `name` listens on, as the binary logged it.
pub fn relay_addr(g: &Gapura, name: &str) -> SocketAddr {
    let lines = g.log.lock().unwrap().clone();
    let line = lines
        .iter()
        .find(|l| l.contains("relaying udp://") && l.contains(&format!("({name},")))
        .expect("the relay's address is logged");
    let rest = &line[line.find("udp://").unwrap() + 6..];
    rest.split_whitespace().next().unwrap().parse().unwrap()
}
