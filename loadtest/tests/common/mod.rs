//! Servers started inside the tests on 127.0.0.1 ephemeral ports, and a
//! runner for the gapura-loadtest binary that returns its JSON result.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// What the in-test HTTP/1.1 server does with each request.
#[derive(Clone, Copy)]
pub enum Behaviour {
    /// Answer 200 at once.
    Ok,
    /// Answer garbage bytes.
    Garbage,
    /// Never answer.
    Stall,
    /// Hold any request that arrives within the first `pause` of each `period`
    /// (measured from server start) until that pause ends, then answer.
    Pauses { period: Duration, pause: Duration },
    /// Serve at most `per_s` requests per second, in arrival order (a D/D/1 queue).
    Capacity { per_s: f64 },
    /// Answer 200 with `Connection: close` every `n`-th response on a connection, then close.
    CloseEvery { n: u64 },
}

/// What the server saw.
#[derive(Default)]
pub struct Seen {
    pub requests: AtomicU64,
    pub connections: AtomicU64,
    /// Most complete requests found buffered at once on one connection.
    pub max_in_flight: AtomicU64,
    pub peers: Mutex<BTreeSet<IpAddr>>,
    pub stop: AtomicBool,
}

pub struct Server {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.seen.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts the HTTP/1.1 server; one thread per connection.
pub fn http1(b: Behaviour) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    let epoch = Instant::now();
    let next_free = Arc::new(Mutex::new(epoch));
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(c) = c else { continue };
            if s2.stop.load(Ordering::Relaxed) {
                return;
            }
            s2.connections.fetch_add(1, Ordering::Relaxed);
            s2.peers.lock().unwrap().insert(c.peer_addr().unwrap().ip());
            let s3 = s2.clone();
            let nf = next_free.clone();
            std::thread::spawn(move || serve_conn(c, b, s3, epoch, nf));
        }
    });
    Server { addr, seen }
}

/// Splits complete requests (head plus Content-Length body) off `buf`.
pub fn take_requests(buf: &mut Vec<u8>) -> usize {
    let mut n = 0;
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            return n;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap_or(0))
            })
            .unwrap_or(0);
        if buf.len() < end + 4 + len {
            return n;
        }
        buf.drain(..end + 4 + len);
        n += 1;
    }
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

fn serve_conn(
    mut c: TcpStream,
    b: Behaviour,
    seen: Arc<Seen>,
    epoch: Instant,
    next_free: Arc<Mutex<Instant>>,
) {
    let _ = c.set_nodelay(true);
    let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    let mut answered = 0u64;
    loop {
        if seen.stop.load(Ordering::Relaxed) {
            return;
        }
        let n = match c.read(&mut tmp) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        };
        buf.extend_from_slice(&tmp[..n]);
        let got = take_requests(&mut buf) as u64;
        if got == 0 {
            continue;
        }
        seen.requests.fetch_add(got, Ordering::Relaxed);
        seen.max_in_flight.fetch_max(got, Ordering::Relaxed);
        let mut out = Vec::new();
        for _ in 0..got {
            match b {
                Behaviour::Ok => out.extend_from_slice(OK),
                Behaviour::Garbage => out.extend_from_slice(b"NOT HTTP AT ALL\r\n\r\n"),
                Behaviour::Stall => {}
                Behaviour::Pauses { period, pause } => {
                    let into = (Instant::now() - epoch).as_nanos() % period.as_nanos();
                    if into < pause.as_nanos() {
                        std::thread::sleep(Duration::from_nanos((pause.as_nanos() - into) as u64));
                    }
                    out.extend_from_slice(OK);
                }
                Behaviour::Capacity { per_s } => {
                    let slot = {
                        let mut nf = next_free.lock().unwrap();
                        let now = Instant::now();
                        if *nf < now {
                            *nf = now;
                        }
                        *nf += Duration::from_secs_f64(1.0 / per_s);
                        *nf
                    };
                    let now = Instant::now();
                    if slot > now {
                        std::thread::sleep(slot - now);
                    }
                    out.extend_from_slice(OK);
                }
                Behaviour::CloseEvery { n } => {
                    answered += 1;
                    if answered.is_multiple_of(n) {
                        out.extend_from_slice(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        );
                        let _ = c.write_all(&out);
                        return;
                    }
                    out.extend_from_slice(OK);
                }
            }
        }
        if !out.is_empty() && c.write_all(&out).is_err() {
            return;
        }
    }
}

/// The load tester's exit status, its JSON result (if written), stdout and stderr, and how long it ran.
pub struct Run {
    pub code: i32,
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Runs gapura-loadtest with `args` plus `--json` and `--no-progress`.
pub fn run(args: &[&str]) -> Run {
    let path = std::env::temp_dir().join(format!(
        "gapura-loadtest-{}-{}.json",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&path);
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_gapura-loadtest"))
        .args(args)
        .arg("--no-progress")
        .arg("--json")
        .arg(&path)
        .output()
        .expect("the binary runs");
    let took = t.elapsed();
    let json = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let _ = std::fs::remove_file(&path);
    Run {
        code: out.status.code().unwrap_or(-1),
        json,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    }
}

pub fn u(v: &Value, path: &str) -> u64 {
    let mut x = v;
    for k in path.split('.') {
        x = &x[k];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path} is not an integer in {v}"))
}

pub fn f(v: &Value, path: &str) -> f64 {
    let mut x = v;
    for k in path.split('.') {
        x = &x[k];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}
