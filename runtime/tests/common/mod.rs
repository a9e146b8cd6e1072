//! Starts the real `gapura` binary on ephemeral loopback ports and talks to
//! it over real sockets.

#![allow(dead_code)]

pub mod acme;
pub mod fleet;
pub mod gate;
pub mod pki;
pub mod tls;
pub mod udp;
pub mod upstream;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Gapura {
    pub child: Child,
    pub addr: SocketAddr,
    /// The first TLS listener, when the profile has one.
    pub tls_addr: Option<SocketAddr>,
    pub admin: SocketAddr,
    pub profile: PathBuf,
    pub log: Arc<Mutex<Vec<String>>>,
    _dir: TempDir,
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gapura-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gapura")
}

/// A profile's `[server]` with ephemeral ports, plus `rest`, without the
/// protective defaults (a test states the limits it checks; the tests of
/// the defaults write `[protection]` themselves).
pub fn profile(server_extra: &str, rest: &str) -> String {
    let server_extra = &with_ring(server_extra);
    let protection = if rest.contains("[protection]") {
        ""
    } else {
        "\n[protection]\noff = [\"all\"]\n"
    };
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\nshards = 1\ndrain_timeout_ms = 5000\n{server_extra}\n{rest}{protection}"
    )
}

/// `server_extra` with `ring = "on"` when `GAPURA_TEST_RING` is set (CI
/// runs the HTTP/1.1 and proxy suites once more that way), unless it says
/// `ring` itself.
pub fn with_ring(server_extra: &str) -> String {
    if std::env::var_os("GAPURA_TEST_RING").is_some() && !server_extra.contains("ring =") {
        format!("ring = \"on\"\n{server_extra}")
    } else {
        server_extra.to_string()
    }
}

pub const HELLO_HOST: &str = r#"
[[host]]
names = ["hello.test"]
default = true
kind = "respond"
status = 200
body = "hello\n"
content_type = "text/plain"
"#;

impl Gapura {
    pub fn start(profile_text: &str) -> Gapura {
        Self::try_start(profile_text, &[]).expect("gapura starts")
    }

    pub fn try_start(profile_text: &str, extra_args: &[&str]) -> Result<Gapura, String> {
        // The tests may run as root; what running as root means is tested
        // on its own.
        let mut args = vec!["--allow-root"];
        args.extend_from_slice(extra_args);
        Self::try_start_with(profile_text, &args, &[])
    }

    /// Starts with exactly `extra_args` after the profile, and `env` set.
    pub fn try_start_with(
        profile_text: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Gapura, String> {
        let dir = TempDir::new();
        let profile = dir.0.join("profile.toml");
        std::fs::write(&profile, profile_text).unwrap();
        let mut child = Command::new(bin())
            .arg("run")
            .arg("--profile")
            .arg(&profile)
            .args(extra_args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gapura");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let lines = log.lock().unwrap().clone();
            if lines.iter().any(|l| l.contains(" ready: ")) {
                let find = |key: &str| -> SocketAddr {
                    let line = lines.iter().find(|l| l.contains(key)).unwrap();
                    let rest = &line[line.find("http://").unwrap() + 7..];
                    rest.split_whitespace().next().unwrap().parse().unwrap()
                };
                let addr = find("listening on http://");
                let admin = find("admin on http://");
                let tls_addr = lines
                    .iter()
                    .find_map(|l| l.split("listening on https://").nth(1))
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|a| a.parse().ok());
                return Ok(Gapura {
                    child,
                    addr,
                    tls_addr,
                    admin,
                    profile,
                    log,
                    _dir: dir,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Its last lines: the reader ends at the end of stderr.
                wait_until(Duration::from_secs(10), || reader.is_finished());
                return Err(format!(
                    "exited {status}: {}",
                    log.lock().unwrap().join("\n")
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!("not ready: {}", lines.join("\n")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        wait_until(timeout, || self.log_text().contains(needle))
    }

    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.admin).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// The value of one sample, e.g. `gapura_requests_total{shard="0"}`.
    pub fn metric(&self, sample: &str) -> u64 {
        let text = self.metrics();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(sample) {
                if let Some(v) = rest.strip_prefix(' ') {
                    return v.trim().parse().unwrap();
                }
            }
        }
        panic!("no sample {sample} in\n{text}");
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let mut status = None;
        wait_until(timeout, || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        status
    }
}

impl Drop for Gapura {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Parses one response (Content-Length bodies; no body for HEAD/1xx/204/304
/// when `head` is set) from the front of `buf`; returns it and its length.
pub fn parse_response(buf: &[u8], head: bool) -> Option<(Response, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let status: u16 = status_line.split(' ').nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    for l in lines {
        if l.is_empty() {
            continue;
        }
        let (n, v) = l.split_once(':')?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = if head || status / 100 == 1 || status == 204 || status == 304 {
        0
    } else {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or(0)
    };
    if buf.len() < end + len {
        return None;
    }
    Some((
        Response {
            status,
            headers,
            body: buf[end..end + len].to_vec(),
        },
        end + len,
    ))
}

/// A client connection with a buffer of unread bytes.
pub struct Client {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        Client::over(TcpStream::connect(addr).unwrap())
    }

    /// A client on a connected stream, reading with a 5 s timeout.
    fn over(stream: TcpStream) -> Client {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads one response (waiting up to the read timeout).
    pub fn response(&mut self, head: bool) -> Response {
        self.try_response(head).expect("a response")
    }

    pub fn try_response(&mut self, head: bool) -> Option<Response> {
        loop {
            if let Some((r, n)) = parse_response(&self.buf, head) {
                self.buf.drain(..n);
                return Some(r);
            }
            let mut tmp = [0u8; 65536];
            match self.stream.read(&mut tmp) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }

    /// Whether the server closed the connection (EOF) within `timeout`.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        let mut tmp = [0u8; 4096];
        loop {
            match self.stream.read(&mut tmp) {
                Ok(0) => return true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) => {
                    return matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                    )
                }
            }
        }
    }
}

/// Sends `req` on a fresh connection and returns the first response.
pub fn request(addr: SocketAddr, req: &[u8]) -> Response {
    let mut c = Client::connect(addr);
    c.send(req);
    c.response(req.starts_with(b"HEAD "))
}

impl Client {
    /// A connection from the local address `src` (any address of
    /// 127.0.0.0/8), so a test can speak as several clients.
    pub fn connect_from(src: &str, addr: SocketAddr) -> Client {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let local: SocketAddr = format!("{src}:0").parse().unwrap();
        sock.bind(&local.into()).unwrap();
        sock.connect(&addr.into()).unwrap();
        Client::over(sock.into())
    }
}

/// Sends `req` from the local address `src` on a fresh connection and
/// returns the first response.
pub fn request_from(src: &str, addr: SocketAddr, req: &[u8]) -> Response {
    let mut c = Client::connect_from(src, addr);
    c.send(req);
    c.response(req.starts_with(b"HEAD "))
}

/// Waits for `event` (asked every 20 ms) until it holds or `ceiling`
/// passes; whether it held. The one polling loop of the tests: a ceiling
/// is generous, the wait ends as soon as the event is seen.
pub fn wait_until(ceiling: Duration, mut event: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + ceiling;
    loop {
        if event() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The send and receive queues (bytes) of the IPv4 TCP socket from
/// `local` to `remote`, as /proc/net/tcp shows them.
fn tcp_queues(local: SocketAddr, remote: SocketAddr) -> Option<(u64, u64)> {
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        )),
        SocketAddr::V6(_) => None,
    };
    let (l, r) = (hex(local)?, hex(remote)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) != Some(&l.as_str()) || f.get(2) != Some(&r.as_str()) {
            return None;
        }
        let (tx, rx) = f.get(4)?.split_once(':')?;
        Some((
            u64::from_str_radix(tx, 16).ok()?,
            u64::from_str_radix(rx, 16).ok()?,
        ))
    })
}

/// Waits until everything written on `s` (an IPv4 loopback connection)
/// has been read by its peer: sent from `s`'s queue and gone from the
/// peer's receive queue. Whether it was within `ceiling`.
pub fn wait_peer_read(s: &std::net::TcpStream, ceiling: Duration) -> bool {
    let (Ok(local), Ok(remote)) = (s.local_addr(), s.peer_addr()) else {
        return false;
    };
    wait_until(ceiling, || {
        tcp_queues(local, remote).is_some_and(|(tx, _)| tx == 0)
            && tcp_queues(remote, local).is_some_and(|(_, rx)| rx == 0)
    })
}

impl Gapura {
    /// Polls a sample until it reads `want` or `timeout` passes, and returns
    /// the last value read (the gate's counters reach `/metrics` once a
    /// second).
    pub fn wait_metric(&self, sample: &str, want: u64, timeout: Duration) -> u64 {
        let mut v = 0;
        wait_until(timeout, || {
            v = self.metric(sample);
            v == want
        });
        v
    }
}

impl Gapura {
    /// The admin listener's live view of a request (`GET /explain`) for
    /// `host` and `path` from `peer`: each shard's tables as that request
    /// would meet them now, read without changing them (its `rate_limit`
    /// tells the whole tokens in the client's bucket).
    pub fn live_view(&self, host: &str, path: &str, peer: &str) -> serde_json::Value {
        live_view_at(self.admin, host, path, peer)
    }

    /// The whole tokens in `peer`'s bucket of the rate limit that a `GET
    /// path` for `host` meets, on the first shard, as the live view tells.
    pub fn rate_tokens(&self, host: &str, path: &str, peer: &str) -> u64 {
        let view = self.live_view(host, path, peer);
        view["shards"][0]["rate_limit"]["tokens"]
            .as_u64()
            .unwrap_or_else(|| panic!("no rate limit in {view}"))
    }
}

/// [`Gapura::live_view`] of the server whose admin listener is `admin`
/// (for a thread that cannot borrow the server).
pub fn live_view_at(admin: SocketAddr, host: &str, path: &str, peer: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(admin).unwrap();
    write!(
        s,
        "GET /explain?method=GET&path={path}&peer={peer}&h=Host:%20{host} HTTP/1.1\r\nHost: admin\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"))
}
