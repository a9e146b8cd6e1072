//! Helpers for the gate's integration tests: a password and its hash,
//! profiles with their own listeners, counters that may not be published
//! yet, an upstream that reports what it received, and `gapura explain`.

#![allow(dead_code)]

use super::upstream::{self, Reply, UpRequest, Upstream};
use super::{bin, Client, Gapura, TempDir};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The password every test user has.
pub const PASSWORD: &str = "open-sesame";

/// `PASSWORD` at 100,000 iterations (the fewest a profile accepts, so a
/// verification stays short), made with
/// `GAPURA_PASSWORD=open-sesame gapura passwd --iterations 100000`.
pub const PASSWORD_HASH: &str =
    "$pbkdf2-sha256$i=100000$YyL45f2NjRWx82ZN2Q0D2A$gWBUOhuyMMRVCLxwGPL+wC6YjqC2LMZqQ1Qx8O7uIUA";

/// Counters of the gate reach `/metrics` once a second.
pub const METRIC_WAIT: Duration = Duration::from_secs(3);

/// `GET path` for `host`, kept alive.
pub fn get(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

/// `GET path` for `host`, closing the connection after the answer.
pub fn get_close(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// A `respond` host answering `ok`, with `extra` lines in its table.
pub fn respond_host(name: &str, extra: &str) -> String {
    format!("[[host]]\nnames = [\"{name}\"]\nkind = \"respond\"\nbody = \"ok\\n\"\n{extra}\n")
}

/// The whole seconds of a `Retry-After` header.
pub fn retry_after(r: &super::Response) -> u32 {
    r.header("Retry-After")
        .expect("a Retry-After header")
        .parse()
        .expect("whole seconds")
}

/// A request with extra header lines (`"Name: value"` each).
pub fn req_with(method: &str, host: &str, path: &str, headers: &[&str]) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// The status of one request on a fresh connection.
pub fn status(g: &Gapura, req: &[u8]) -> u16 {
    super::request(g.addr, req).status
}

/// A response body as text.
pub fn text(r: &super::Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// How long a password check may take on the pool of a debug build on a
/// loaded machine (about a second each at 100,000 iterations).
pub const VERIFY_WAIT: Duration = Duration::from_secs(10);

/// `Authorization: Basic` for `name:password`.
pub fn basic(name: &str, password: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{name}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

/// A profile whose `[server]` has the given `listen` value (TOML), an
/// ephemeral admin port and one shard, plus `rest`.
pub fn profile_listening(listen: &str, server_extra: &str, rest: &str) -> String {
    let server_extra = super::with_ring(server_extra);
    format!(
        "[server]\nlisten = {listen}\nadmin = \"127.0.0.1:0\"\nshards = 1\ndrain_timeout_ms = 5000\n{server_extra}\n{rest}\n[protection]\noff = [\"all\"]\n"
    )
}

/// The value of one sample, or `None` while it is not published.
pub fn metric_sample(g: &Gapura, sample: &str) -> Option<u64> {
    let text = g.metrics();
    text.lines().find_map(|line| {
        line.strip_prefix(sample)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Polls a sample until it reads `want` (a missing sample reads 0) or
/// `timeout` passes, and returns the last value read.
pub fn wait_sample(g: &Gapura, sample: &str, want: u64, timeout: Duration) -> u64 {
    let mut v = 0;
    super::wait_until(timeout, || {
        v = metric_sample(g, sample).unwrap_or(0);
        v == want
    });
    v
}

/// `gapura_access_list_total{list="LIST",result="RESULT"}`.
pub fn access_sample(list: &str, result: &str) -> String {
    format!("gapura_access_list_total{{list=\"{list}\",result=\"{result}\"}}")
}

/// `gapura_rule_set_total{set="SET",result="RESULT"}`.
pub fn rule_sample(set: &str, result: &str) -> String {
    format!("gapura_rule_set_total{{set=\"{set}\",result=\"{result}\"}}")
}

/// Whether the server closed `c` without sending a single byte.
pub fn closed_without_a_byte(c: &mut Client) -> bool {
    c.closed_within(Duration::from_secs(3)) && c.buf.is_empty()
}

/// Sends `req` from `src` and says whether the connection was closed
/// without an answer.
pub fn dropped_from(src: &str, addr: SocketAddr, req: &[u8]) -> bool {
    let mut c = Client::connect_from(src, addr);
    // The server may close before the whole request is written.
    let _ = std::io::Write::write_all(&mut c.stream, req);
    closed_without_a_byte(&mut c)
}

/// An upstream that answers 200 and reports, in response headers, the
/// `Authorization` and `X-Forwarded-For` it received (`-` for none).
pub fn reporting_upstream() -> Upstream {
    upstream::start(Arc::new(|req: &UpRequest| {
        let auth = req.header("authorization").unwrap_or("-").to_string();
        let xff = req.header("x-forwarded-for").unwrap_or("-").to_string();
        Reply::Bytes(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Upstream: yes\r\nX-Saw-Authorization: {auth}\r\nX-Saw-Forwarded-For: {xff}\r\n\r\nup\n"
            )
            .into_bytes(),
        )
    }))
}

/// Runs `gapura explain --profile FILE ARGS...` and returns its stdout.
pub fn explain_text<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    profile: &std::path::Path,
    args: &[S],
) -> String {
    let out = std::process::Command::new(bin())
        .arg("explain")
        .arg("--profile")
        .arg(profile)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "explain {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `gapura explain --profile FILE --json ARGS...` and returns its JSON.
pub fn explain_json<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    profile: &std::path::Path,
    args: &[S],
) -> serde_json::Value {
    let mut all: Vec<std::ffi::OsString> = vec!["--json".into()];
    all.extend(args.iter().map(|a| a.as_ref().to_owned()));
    let text = explain_text(profile, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A profile written to a file of its own, for `explain`.
pub struct ProfileFile {
    pub path: std::path::PathBuf,
    _dir: TempDir,
}

impl ProfileFile {
    pub fn new(text: &str) -> ProfileFile {
        let dir = TempDir::new();
        let path = dir.0.join("explain.toml");
        std::fs::write(&path, text).unwrap();
        ProfileFile { path, _dir: dir }
    }
}

/// The `says` sentence of each step `explain` reported under `name`.
pub fn explain_steps<'a>(said: &'a serde_json::Value, name: &str) -> Vec<&'a str> {
    said["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["step"] == name)
        .map(|s| s["says"].as_str().unwrap())
        .collect()
}

/// `explain`'s answer as (kind, status or 0).
pub fn explain_answer(said: &serde_json::Value) -> (String, u64) {
    (
        said["answer"]["kind"].as_str().unwrap().to_string(),
        said["answer"]["status"].as_u64().unwrap_or(0),
    )
}
