//! The dated floor (`floor-proxy --respond --engine monoio --dated`,
//! bench/README.md) answers the floor's fixed 200 with a `Date` line for
//! the current second, 115 bytes in all, as Gapura's respond answer in the
//! benchmarks is; the plain floor answers the same 200 without one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The floor's answer body and the head lines both floors send.
const BODY: &[u8] = b"hello, world\n";

struct Floor(Child);

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the floor with `extra` flags on a free loopback port (it prints
/// the port once it listens) and returns it with a connection to it.
fn start(extra: &[&str]) -> (Floor, TcpStream) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floor-proxy"))
        .args(["--listen", "0", "--respond", "--engine", "monoio"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the floor starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let floor = Floor(child);
    let port: u16 = line.trim().parse().expect("the floor prints its port");
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (floor, c)
}

/// Sends one GET and reads its whole answer (framed by its length).
fn answer(c: &mut TcpStream) -> Vec<u8> {
    c.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(BODY) {
        let n = c.read(&mut buf).expect("an answer");
        assert!(n > 0, "closed before the answer ended: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn the_dated_floor_answers_with_the_current_date_line() {
    let (_floor, mut c) = start(&["--dated"]);
    let before = now_secs();
    let got = answer(&mut c);
    let after = now_secs();
    assert_eq!(got.len(), 115, "{}", String::from_utf8_lossy(&got));
    let (status, rest) = got.split_at(b"HTTP/1.1 200 OK\r\n".len());
    assert_eq!(status, b"HTTP/1.1 200 OK\r\n");
    let (date, rest) = rest.split_at(gapura_http::server::date::DATE_LINE_LEN);
    // Formatted once a second: the line of the task's last refresh, a
    // second or so before the request at most (three allowed for a loaded
    // machine's scheduling), up to its answer.
    let seconds: Vec<_> = (before.saturating_sub(3)..=after)
        .map(gapura_http::server::date::format_date_line)
        .collect();
    assert!(
        seconds.iter().any(|line| line.as_slice() == date),
        "{}",
        String::from_utf8_lossy(date)
    );
    assert_eq!(
        rest,
        b"Content-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n"
    );
    // Keep-alive: the next answer on the connection is dated too.
    let again = answer(&mut c);
    assert_eq!(again.len(), 115);
}

#[test]
fn the_plain_floor_answers_without_a_date_line() {
    let (_floor, mut c) = start(&[]);
    let got = answer(&mut c);
    assert_eq!(
        got,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n"
    );
}
