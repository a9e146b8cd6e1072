//! The admin listener: `/healthz` and `/metrics` (Prometheus text format).
//!
//! It runs on its own thread with blocking sockets, one short connection at
//! a time, and reads the shards' counters with relaxed loads: the request
//! path never waits for it. Labels carry shard numbers and fixed names only.

mod blocks;
mod metrics;
mod pools;

pub use metrics::render_metrics;

use gapura_http::server::ShardStats;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Process-wide counters kept by the control thread.
#[derive(Debug, Default)]
pub struct Global {
    pub reloads_ok: AtomicU64,
    /// Access log lines the writer could not write (a failed write, or no
    /// file after a failed reopen).
    pub access_log_unwritten: Arc<AtomicU64>,
    pub reloads_failed: AtomicU64,
    pub generation: AtomicU64,
    pub draining: std::sync::atomic::AtomicBool,
}

pub struct Admin {
    /// The bearer token every request but `/healthz` must send
    /// (`[server] admin_token_file`).
    pub token: Option<String>,
    pub shards: Vec<Arc<ShardStats>>,
    pub global: Arc<Global>,
    /// Each shard's queue of `explain --live` asks.
    pub live: Vec<std::sync::mpsc::SyncSender<gapura_http::server::live::LiveAsk>>,
    /// The UDP relays' counters.
    pub udp: crate::udp::RelayBoard,
    /// The verification pool (its line's length on `/metrics`).
    pub verifier: Option<Arc<gapura_http::server::verify::Pool>>,
    /// `[fleet]`: the reconciler's counters and each shard's.
    pub fleet: Option<(
        Arc<gapura_fleet::FleetStats>,
        Vec<Arc<crate::fleet::ShardFleetStats>>,
    )>,
    /// `[acme]`: the ACME thread's certificates and counters.
    pub acme: Arc<std::sync::Mutex<gapura_acme::Shared>>,
    /// `[fleet] profile = "pull"`: the version the node runs.
    pub profile: Option<Arc<gapura_fleet::profile::ProfileStats>>,
}

pub fn spawn(listener: TcpListener, admin: Admin) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("gapura-admin".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = handle(stream, &admin);
            }
        })?;
    Ok(())
}

fn handle(mut stream: TcpStream, admin: &Admin) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 2048];
    let mut len = 0;
    while len < buf.len() {
        let n = stream.read(&mut buf[len..])?;
        if n == 0 {
            break;
        }
        len += n;
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let line = buf[..len].split(|&b| b == b'\n').next().unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let method = parts.next().unwrap_or(&[]);
    let path = parts.next().unwrap_or(&[]);
    let authorized = match &admin.token {
        None => true,
        Some(token) => path == b"/healthz" || bearer_is(&buf[..len], token.as_bytes()),
    };
    let (status, ctype, body) = match (method, path) {
        _ if !authorized => (
            "401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"gapura-admin\"",
            "text/plain",
            "a bearer token is required\n".to_string(),
        ),
        (b"GET" | b"HEAD", b"/healthz") => {
            if admin.global.draining.load(Ordering::Relaxed) {
                (
                    "503 Service Unavailable",
                    "text/plain",
                    "draining\n".to_string(),
                )
            } else {
                ("200 OK", "text/plain", "ok\n".to_string())
            }
        }
        (b"GET" | b"HEAD", b"/metrics") => {
            ("200 OK", "text/plain; version=0.0.4", render_metrics(admin))
        }
        // Not among the metrics: reading it walks the allocator's free
        // lists with their locks held (milliseconds with many free chunks).
        (b"GET" | b"HEAD", b"/heap") => match heap_in_use() {
            Some(bytes) => ("200 OK", "text/plain", format!("{bytes}\n")),
            None => (
                "404 Not Found",
                "text/plain",
                "not known for this allocator\n".to_string(),
            ),
        },
        (b"GET", p) if p.starts_with(b"/explain?") => match live_explain(admin, &p[9..]) {
            Ok(json) => ("200 OK", "application/json", json),
            Err(why) => ("400 Bad Request", "text/plain", format!("{why}\n")),
        },
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if method != b"HEAD" {
        stream.write_all(body.as_bytes())?;
    }
    Ok(())
}

/// Percent-decodes a query value (`+` is a space).
/// Whether the request head `head` carries `Authorization: Bearer TOKEN`
/// for `token`; compared in constant time (for tokens of its length).
fn bearer_is(head: &[u8], token: &[u8]) -> bool {
    let mut ok = false;
    for line in head.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if !line[..colon].eq_ignore_ascii_case(b"authorization") {
            continue;
        }
        let value = line[colon + 1..].trim_ascii();
        let Some(given) = value
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case(b"bearer "))
            .map(|_| value[7..].trim_ascii())
        else {
            continue;
        };
        ok |= constant_time_eq(given, token);
    }
    ok
}

/// Equal bytes, in time that depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads the admin token file: its text, trimmed, at least 16 characters;
/// a file others can read or write is refused.
pub fn read_token(path: &str) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("admin token {path}: {e}"))?;
    let mode = meta.permissions().mode();
    if mode & 0o007 != 0 {
        return Err(format!(
            "admin token {path} is readable or writable by others (mode {:04o}): chmod 600 it",
            mode & 0o7777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("admin token {path}: {e}"))?;
    let token = text.trim();
    if token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "admin token {path} must hold one token of at least 16 characters, without spaces"
        ));
    }
    Ok(token.to_string())
}

pub fn percent_decode(v: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'%' => {
                let hex = std::str::from_utf8(v.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes a query value: unreserved characters as they are.
pub fn percent_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET /explain?method=M&path=P&peer=IP&h=Name:%20value...`: asks every
/// shard for its live tables as the request would meet them (read only)
/// and answers them as JSON, one entry per shard.
fn live_explain(admin: &Admin, query: &[u8]) -> Result<String, String> {
    let mut method = "GET".to_string();
    let mut path = "/".to_string();
    let mut peer: std::net::IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
    let mut headers = Vec::new();
    for pair in query.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        let v = percent_decode(v).ok_or("a value is not percent-encoded UTF-8")?;
        match k {
            b"method" => method = v,
            b"path" => path = v,
            b"peer" => peer = v.parse().map_err(|_| format!("{v:?} is not an address"))?,
            b"h" => {
                let (n, val) = v.split_once(':').ok_or("a header needs 'Name: value'")?;
                headers.push((n.trim().to_string(), val.trim().to_string()));
            }
            _ => return Err("unknown parameter: use method, path, peer and h".into()),
        }
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(admin.live.len().max(1));
    let mut asked = 0;
    for shard in &admin.live {
        let ask = gapura_http::server::live::LiveAsk {
            method: method.clone(),
            path: path.clone(),
            peer,
            headers: headers.clone(),
            reply: tx.clone(),
        };
        if shard.try_send(ask).is_ok() {
            asked += 1;
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let mut views = Vec::new();
    while views.len() < asked {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(v) => views.push(v),
            Err(_) => break,
        }
    }
    views.sort_by_key(|a| a.shard);
    let shards: Vec<serde_json::Value> = views
        .into_iter()
        .map(|a| {
            let (id, v) = (a.shard, a.view);
            serde_json::json!({
                "shard": id,
                "client": v.client.to_string(),
                "host": v.host,
                "global_window_count": v.global_count,
                "source_window_count": v.source_count,
                "leases_active": v.leases_active,
                "leases_for_source": v.leases_for_source,
                "rate_limit": v.rate.map(|(name, tokens, wait)| serde_json::json!({
                    "name": name, "tokens": tokens, "retry_after_ms": wait,
                })),
                "fleet": v.fleet.iter().map(|f| serde_json::json!({
                    "level": f.level, "name": f.name, "shared": f.shared,
                    "local": f.local, "fleet": f.fleet, "held": f.held, "pending": f.pending,
                    "fallback": f.fallback,
                })).collect::<Vec<_>>(),
                "upstreams": a.upstreams.iter().map(|(name, c)| serde_json::json!({
                    "name": name, "connections": c.open, "idle": c.idle,
                    "queued": c.queued, "queue_timeouts": c.queue_timeouts,
                    "queue_full": c.queue_full,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let profile = admin
        .profile
        .as_ref()
        .map(|p| p.version.load(std::sync::atomic::Ordering::Relaxed));
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "shards": shards,
        "fleet_profile_version": profile,
    }))
    .unwrap_or_default())
}

pub(super) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Bytes the C allocator has handed out and not had back (glibc's
/// `mallinfo2`: in-use chunks of every arena and the mapped blocks);
/// freed memory the allocator keeps is not counted. It walks every
/// arena's free lists under the arena's lock: `GET /heap` only.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> Option<u64> {
    // SAFETY: a plain query of the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    Some(info.uordblks as u64 + info.hblkhd as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> Option<u64> {
    None
}
