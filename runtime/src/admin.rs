//! The admin listener: `/healthz` and `/metrics` (Prometheus text format).
//!
//! It runs on its own thread with blocking sockets, one short connection at
//! a time, and reads the shards' counters with relaxed loads: the request
//! path never waits for it. Labels carry shard numbers and fixed names only.

mod pools;

use gapura_http::server::{ErrorKind, ShardStats};
use std::collections::BTreeMap;
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
    /// `[fleet]`: the reconciler's counters and each shard's.
    pub fleet: Option<(
        Arc<gapura_fleet::FleetStats>,
        Vec<Arc<crate::fleet::ShardFleetStats>>,
    )>,
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
                    "local": f.local, "fleet": f.fleet, "pending": f.pending,
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
    Ok(serde_json::to_string_pretty(&serde_json::json!({ "shards": shards })).unwrap_or_default())
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

type Getter = fn(&ShardStats) -> u64;

/// The per-shard samples: name, type, help, value.
#[rustfmt::skip]
const SHARD_METRICS: &[(&str, &str, &str, Getter)] = &[
    ("gapura_connections_accepted_total", "counter", "Connections accepted.", |s| s.connections_accepted.get()),
    ("gapura_connections_closed_total", "counter", "Connections closed.", |s| s.connections_closed.get()),
    ("gapura_connections_open", "gauge", "Connections open now.", |s| s.open_connections()),
    ("gapura_connections_refused_total", "counter", "Connections closed at accept because the shard was full.", |s| s.connections_refused.get()),
    ("gapura_connections_parked", "gauge", "Idle connections waiting without a buffer (quiet for a second).", |s| s.parked_connections()),
    ("gapura_accept_refused_total", "counter", "Connections closed at accept because the process was out of descriptors.", |s| s.accept_refused_no_fd.get()),
    ("gapura_accept_errors_total", "counter", "Accepts that failed (out of file descriptors or memory); the listener waits 10 ms after each.", |s| s.accept_errors.get()),
    ("gapura_ring_receives_armed_total", "counter", "Multishot receives armed on the shard's own ring (one per connection, plus re-arms); 0 without the ring.", |s| s.ring_arms.get()),
    ("gapura_ring_starved_total", "counter", "Receives on the shard's own ring that found no provided buffer and waited for one.", |s| s.ring_starved.get()),
    ("gapura_ring_capped_total", "counter", "Receives on the shard's own ring stopped because their connection held 4 buffers unread.", |s| s.ring_capped.get()),
    ("gapura_idle_timeouts_total", "counter", "Keep-alive connections closed after the idle timeout.", |s| s.idle_timeouts.get()),
    ("gapura_requests_total", "counter", "Requests received.", |s| s.requests.get()),
    ("gapura_writes_total", "counter", "Socket writes of responses; pipelined answers ready together share one.", |s| s.writes.get()),
    ("gapura_upstream_failures_total", "counter", "Upstream exchanges that failed (connect, timeout, reset, malformed answer).", |s| s.upstream_failures.get()),
    ("gapura_upstream_idle_connections", "gauge", "Idle pooled upstream connections.", |s| s.upstream_idle.get()),
    ("gapura_upgrades_total", "counter", "Connections tunnelled after 101 Switching Protocols.", |s| s.upgrades.get()),
    ("gapura_websocket_dropped_total", "counter", "WebSocket messages dropped over their host's message rate or size.", |s| s.websocket_dropped.get()),
    ("gapura_websocket_closed_total", "counter", "WebSocket tunnels closed over a message limit (1008 or 1009).", |s| s.websocket_closed.get()),
    ("gapura_access_log_lines_total", "counter", "Access log lines written into the shard's buffer.", |s| s.access_log_lines.get()),
    ("gapura_access_log_dropped_total", "counter", "Access log lines dropped because the writer's queue or the shard's buffer was full.", |s| s.access_log_dropped.get()),
    ("gapura_connection_rate_refused_total", "counter", "Requests over their connection's request rate (429, then the connection closes).", |s| s.connection_rate_refused.get()),
    ("gapura_quota_admitted_total", "counter", "Requests that passed the budgets (global, source, operation, leases, identity).", |s| s.quota_admitted.get()),
    ("gapura_leases_active", "gauge", "Requests holding concurrency leases now.", |s| s.leases_active.get()),
    ("gapura_lease_keys", "gauge", "Source prefixes with a running request now (tracked lease keys).", |s| s.lease_keys.get()),
    ("gapura_connection_limit_shadow_total", "counter", "Connections a shadowed [quota.connections] would have refused.", |s| s.connection_limit_shadow.get()),
    ("gapura_quota_shadow_total", "counter", "Quota refusals let through by shadow mode.", |s| s.quota_shadow.get()),
    ("gapura_quota_exempt_total", "counter", "Requests exempt from a rate limit (robots.txt).", |s| s.quota_exempt.get()),
    ("gapura_rate_limit_unbound", "gauge", "Rate limits without a bucket slot (each refuses every request until one frees up).", |s| s.rate_unbound.get()),
    ("gapura_rate_limit_unbound_refused_total", "counter", "Requests refused because their rate limit had no bucket slot.", |s| s.rate_unbound_refused.get()),
    ("gapura_snapshot_generation", "gauge", "Profile generation the shard serves.", |s| s.snapshot_generation.get()),
    ("gapura_tls_handshakes_total", "counter", "TLS handshakes completed.", |s| s.tls_handshakes.get()),
    ("gapura_tls_handshakes_tls12_total", "counter", "Of the TLS handshakes completed, those over TLS 1.2.", |s| s.tls_12.get()),
    ("gapura_tls_resumed_total", "counter", "Of the TLS handshakes completed, those resumed by a session ticket.", |s| s.tls_resumed.get()),
    ("gapura_tls_sni_default_total", "counter", "TLS handshakes naming a server no certificate claims (served the default certificate).", |s| s.tls_sni_default.get()),
    ("gapura_tls_no_sni_total", "counter", "TLS handshakes without a server name (served the default certificate).", |s| s.tls_no_sni.get()),
    ("gapura_h2_connections_total", "counter", "HTTP/2 connections (h2 by ALPN, h2c by prior knowledge).", |s| s.h2_connections.get()),
    ("gapura_h2_streams_total", "counter", "HTTP/2 streams, each a request through the gate.", |s| s.h2_streams.get()),
    ("gapura_h2_resets_total", "counter", "HTTP/2 streams reset by the client or ended by a stream error.", |s| s.h2_resets.get()),
    ("gapura_h2_enhance_your_calm_total", "counter", "HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM (reset budget, reset streams waiting, floods).", |s| s.h2_calm.get()),
    ("gapura_h2_floods_total", "counter", "HTTP/2 connections closed over their budget of SETTINGS, PING, PRIORITY and empty DATA frames.", |s| s.h2_floods.get()),
    ("gapura_h2_protocol_errors_total", "counter", "HTTP/2 connections that ended in a protocol error.", |s| s.h2_errors.get()),
];

/// Renders every counter: the shards' own, the blocks', the UDP relays',
/// proof of work's and forward-auth's, the refusals, the process's.
/// Allocates (admin thread only).
pub fn render_metrics(admin: &Admin) -> String {
    let mut out = String::with_capacity(4096);
    render_shard_counters(&mut out, admin);
    render_blocks(&mut out, admin);
    crate::udp::render_metrics(&mut out, &admin.udp);
    render_pow(&mut out, admin);
    render_auth(&mut out, admin);
    render_refusals(&mut out, admin);
    render_tls_failures(&mut out, admin);
    render_upstream_tls_failures(&mut out, admin);
    pools::render_pools(&mut out, admin);
    render_process(&mut out, admin);
    crate::fleet::render_metrics(&mut out, admin.fleet.as_ref());
    out
}

/// Failed TLS handshakes by reason.
fn render_tls_failures(out: &mut String, admin: &Admin) {
    use gapura_http::transport::tls::HandshakeFail;
    family(
        out,
        "gapura_tls_handshake_failures_total",
        "counter",
        "Failed TLS handshakes by reason.",
    );
    for (i, s) in admin.shards.iter().enumerate() {
        for why in HandshakeFail::ALL {
            let _ = writeln!(
                out,
                "gapura_tls_handshake_failures_total{{shard=\"{i}\",reason=\"{}\"}} {}",
                why.label(),
                s.tls_failures[why as usize].get()
            );
        }
    }
}

fn render_upstream_tls_failures(out: &mut String, admin: &Admin) {
    use gapura_http::transport::tls::HandshakeFail;
    family(
        out,
        "gapura_upstream_tls_failures_total",
        "counter",
        "Failed TLS handshakes with upstreams by reason (tls_verify: the server's certificate did not verify; refused: the server refused the handshake, a client certificate it wants, say).",
    );
    for (i, s) in admin.shards.iter().enumerate() {
        for why in HandshakeFail::UPSTREAM {
            let _ = writeln!(
                out,
                "gapura_upstream_tls_failures_total{{shard=\"{i}\",reason=\"{}\"}} {}",
                why.upstream_label(),
                s.upstream_tls_failures[why as usize].get()
            );
        }
    }
}

/// The per-shard samples and responses by status class.
fn render_shard_counters(out: &mut String, admin: &Admin) {
    for (name, kind, help, get) in SHARD_METRICS {
        family(out, name, kind, help);
        for (i, s) in admin.shards.iter().enumerate() {
            let _ = writeln!(out, "{name}{{shard=\"{i}\"}} {}", get(s));
        }
    }
    family(
        out,
        "gapura_responses_total",
        "counter",
        "Responses by status class.",
    );
    for (i, s) in admin.shards.iter().enumerate() {
        for (c, counter) in s.responses.iter().enumerate() {
            let _ = writeln!(
                out,
                "gapura_responses_total{{shard=\"{i}\",class=\"{}xx\"}} {}",
                c + 1,
                counter.get()
            );
        }
    }
}

/// Refusals by level and kind: untracked, connection limits, quota, errors.
fn render_refusals(out: &mut String, admin: &Admin) {
    family(
        out,
        "gapura_quota_untracked_total",
        "counter",
        "Of the quota refusals, those that failed closed at a full table (tracked-key ceiling and reserve, lease records), by level.",
    );
    for (i, s) in admin.shards.iter().enumerate() {
        for level in gapura_gate::quota::Level::ALL {
            let _ = writeln!(
                out,
                "gapura_quota_untracked_total{{shard=\"{i}\",level=\"{}\"}} {}",
                level.name(),
                s.quota_untracked[level as usize].get()
            );
        }
    }
    family(
        out,
        "gapura_connection_limit_refused_total",
        "counter",
        "Connections closed at accept by [quota.connections], by kind.",
    );
    for (i, s) in admin.shards.iter().enumerate() {
        for (kind, v) in [
            ("concurrent", s.connection_limit_concurrent.get()),
            ("rate", s.connection_limit_rate.get()),
        ] {
            let _ = writeln!(
                out,
                "gapura_connection_limit_refused_total{{shard=\"{i}\",kind=\"{kind}\"}} {v}"
            );
        }
    }
    family(
        out,
        "gapura_quota_refused_total",
        "counter",
        "Requests refused with 429 by quota level.",
    );
    for (i, s) in admin.shards.iter().enumerate() {
        for level in gapura_gate::quota::Level::ALL {
            let _ = writeln!(
                out,
                "gapura_quota_refused_total{{shard=\"{i}\",level=\"{}\"}} {}",
                level.name(),
                s.quota_refused[level as usize].get()
            );
        }
    }
    family(
        out,
        "gapura_errors_total",
        "counter",
        "Connections ended by an error, by kind.",
    );
    for (i, s) in admin.shards.iter().enumerate() {
        for kind in ErrorKind::ALL {
            let _ = writeln!(
                out,
                "gapura_errors_total{{shard=\"{i}\",kind=\"{}\"}} {}",
                kind.label(),
                s.errors[kind as usize].get()
            );
        }
    }
}

/// The process's own: reloads, generation, shards.
fn render_process(out: &mut String, admin: &Admin) {
    family(
        out,
        "gapura_reloads_total",
        "counter",
        "Profile reloads by result.",
    );
    let g = &admin.global;
    let _ = writeln!(
        out,
        "gapura_reloads_total{{result=\"ok\"}} {}",
        g.reloads_ok.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "gapura_reloads_total{{result=\"failed\"}} {}",
        g.reloads_failed.load(Ordering::Relaxed)
    );
    family(
        out,
        "gapura_profile_generation",
        "gauge",
        "Latest published profile generation.",
    );
    let _ = writeln!(
        out,
        "gapura_profile_generation {}",
        g.generation.load(Ordering::Relaxed)
    );
    family(
        out,
        "gapura_access_log_unwritten_total",
        "counter",
        "Access log lines the writer could not write (a failed write, or no file after a failed reopen).",
    );
    let _ = writeln!(
        out,
        "gapura_access_log_unwritten_total {}",
        g.access_log_unwritten.load(Ordering::Relaxed)
    );
    family(out, "gapura_shards", "gauge", "Shards running.");
    let _ = writeln!(out, "gapura_shards {}", admin.shards.len());
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

/// Forward-auth counters per provider, summed over the shards.
fn render_auth(out: &mut String, admin: &Admin) {
    use std::collections::BTreeMap;
    let mut sums: BTreeMap<String, [u64; 9]> = BTreeMap::new();
    for s in &admin.shards {
        let Ok(b) = s.blocks.lock() else { continue };
        for (n, c) in &b.auth {
            let e = sums.entry(n.clone()).or_default();
            let v = [
                c.allowed,
                c.denied,
                c.redirected,
                c.cache_hits,
                c.calls,
                c.errors,
                c.timeouts,
                c.busy,
                c.shadow_hits,
            ];
            for (t, x) in e.iter_mut().zip(v) {
                *t += x;
            }
        }
    }
    family(
        out,
        "gapura_auth_provider_total",
        "counter",
        "Forward-auth outcomes by provider and result.",
    );
    let labels = [
        "allowed",
        "denied",
        "redirected",
        "cache_hit",
        "call",
        "error",
        "timeout",
        "busy",
        "shadow",
    ];
    for (n, v) in &sums {
        for (label, x) in labels.iter().zip(v) {
            let _ = writeln!(
                out,
                "gapura_auth_provider_total{{provider=\"{n}\",result=\"{label}\"}} {x}"
            );
        }
    }
}

/// Proof of work's counters, summed over the shards.
fn render_pow(out: &mut String, admin: &Admin) {
    use gapura_gate::pow::{PowCounters, Rejection};
    let mut sum = PowCounters::default();
    for s in &admin.shards {
        let Ok(b) = s.blocks.lock() else { continue };
        let c = &b.pow;
        sum.challenges += c.challenges;
        sum.solved += c.solved;
        for (t, x) in sum.rejected.iter_mut().zip(c.rejected) {
            *t += x;
        }
        sum.non_browser += c.non_browser;
        sum.cookies_valid += c.cookies_valid;
        sum.cookies_refused += c.cookies_refused;
        sum.no_key += c.no_key;
        sum.shadow_hits += c.shadow_hits;
    }
    let simple: [(&str, &str, u64); 5] = [
        (
            "gapura_pow_challenges_total",
            "Proof-of-work challenge pages sent.",
            sum.challenges,
        ),
        (
            "gapura_pow_solved_total",
            "Proof-of-work solutions verified (a cookie given).",
            sum.solved,
        ),
        (
            "gapura_pow_non_browser_total",
            "403s to clients that are not browsers on proof-of-work routes.",
            sum.non_browser,
        ),
        (
            "gapura_pow_no_key_total",
            "503s: proof of work applies but no key is loaded.",
            sum.no_key,
        ),
        (
            "gapura_pow_shadow_total",
            "Challenges a shadowed proof of work let through.",
            sum.shadow_hits,
        ),
    ];
    for (name, help, v) in simple {
        family(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }
    family(
        out,
        "gapura_pow_rejected_total",
        "counter",
        "Verify requests refused (403), by reason.",
    );
    for r in Rejection::ALL {
        let _ = writeln!(
            out,
            "gapura_pow_rejected_total{{reason=\"{}\"}} {}",
            r.name(),
            sum.rejected[r as usize]
        );
    }
    family(
        out,
        "gapura_pow_cookies_total",
        "counter",
        "gapura_pow cookies checked, by result.",
    );
    let _ = writeln!(
        out,
        "gapura_pow_cookies_total{{result=\"valid\"}} {}",
        sum.cookies_valid
    );
    let _ = writeln!(
        out,
        "gapura_pow_cookies_total{{result=\"refused\"}} {}",
        sum.cookies_refused
    );
}

/// The blocks' counters summed per name over the shards.
#[derive(Default)]
struct BlockSums {
    rules: BTreeMap<String, [u64; 6]>,
    access: BTreeMap<String, [u64; 9]>,
    maint: BTreeMap<String, [u64; 3]>,
    rates: BTreeMap<String, [u64; 2]>,
    latency: BTreeMap<String, gapura_gate::latency::Histogram>,
    robots: u64,
}

/// Sums every shard's block counters per name.
fn sum_blocks(admin: &Admin) -> BlockSums {
    let mut sums = BlockSums::default();
    let BlockSums {
        rules,
        access,
        maint,
        rates,
        latency,
        robots,
    } = &mut sums;
    for s in &admin.shards {
        let Ok(b) = s.blocks.lock() else { continue };
        *robots += b.robots_served;
        for (n, h) in &b.latency {
            latency.entry(n.clone()).or_default().merge(h);
        }
        for (n, c) in &b.rule_sets {
            let e = rules.entry(n.clone()).or_default();
            for (i, v) in [
                c.denied,
                c.dropped,
                c.allowed,
                c.challenged,
                c.regex_give_ups,
                c.shadow_hits,
            ]
            .into_iter()
            .enumerate()
            {
                e[i] += v;
            }
        }
        for (n, c) in &b.access_lists {
            let e = access.entry(n.clone()).or_default();
            let vals = [
                c.allowed,
                c.refused,
                c.dropped,
                c.challenged,
                c.cache_hits,
                c.verifications,
                c.verify_failures,
                c.queue_refusals,
                c.shadow_hits,
            ];
            for (i, v) in vals.into_iter().enumerate() {
                e[i] += v;
            }
        }
        for (n, c) in &b.rate_limits {
            let e = rates.entry(n.clone()).or_default();
            e[0] += c.refused;
            e[1] += c.shadow_hits;
        }
        for (n, c) in &b.maintenance {
            let e = maint.entry(n.clone()).or_default();
            for (i, v) in [c.served, c.bypassed, c.shadow_hits]
                .into_iter()
                .enumerate()
            {
                e[i] += v;
            }
        }
    }
    sums
}

/// Answer latency histograms per host.
fn render_latency(out: &mut String, latency: &BTreeMap<String, gapura_gate::latency::Histogram>) {
    family(
        out,
        "gapura_request_duration_seconds",
        "histogram",
        "Time from a request's complete head to its answer's end, by host (answered requests).",
    );
    for (n, h) in latency {
        let cumulative = h.cumulative();
        for (i, c) in cumulative.iter().enumerate() {
            let le = match gapura_gate::latency::BOUNDS_US.get(i) {
                Some(us) => format!("{}", *us as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(
                out,
                "gapura_request_duration_seconds_bucket{{host=\"{n}\",le=\"{le}\"}} {c}"
            );
        }
        let _ = writeln!(
            out,
            "gapura_request_duration_seconds_sum{{host=\"{n}\"}} {}",
            h.sum_us as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "gapura_request_duration_seconds_count{{host=\"{n}\"}} {}",
            h.count
        );
    }
}

/// Per rule set, access list and maintenance counters, summed per name over
/// the shards (names come from the profile; no addresses or credentials).
fn render_blocks(out: &mut String, admin: &Admin) {
    let BlockSums {
        rules,
        access,
        maint,
        rates,
        latency,
        robots,
    } = sum_blocks(admin);
    family(
        out,
        "gapura_rule_set_total",
        "counter",
        "Rule-set outcomes by set and result.",
    );
    for (n, v) in &rules {
        for (label, x) in [
            "denied",
            "dropped",
            "allowed",
            "challenged",
            "regex_give_up",
            "shadow",
        ]
        .iter()
        .zip(v)
        {
            let _ = writeln!(
                out,
                "gapura_rule_set_total{{set=\"{n}\",result=\"{label}\"}} {x}"
            );
        }
    }
    family(
        out,
        "gapura_access_list_total",
        "counter",
        "Access-list outcomes by list and result.",
    );
    let labels = [
        "allowed",
        "refused",
        "dropped",
        "challenged",
        "cache_hit",
        "verification",
        "verification_failed",
        "queue_refused",
        "shadow",
    ];
    for (n, v) in &access {
        for (label, x) in labels.iter().zip(v) {
            let _ = writeln!(
                out,
                "gapura_access_list_total{{list=\"{n}\",result=\"{label}\"}} {x}"
            );
        }
    }
    family(
        out,
        "gapura_rate_limit_total",
        "counter",
        "Rate-limit refusals (429) and shadow hits by limit.",
    );
    for (n, v) in &rates {
        for (label, x) in ["refused", "shadow"].iter().zip(v) {
            let _ = writeln!(
                out,
                "gapura_rate_limit_total{{limit=\"{n}\",result=\"{label}\"}} {x}"
            );
        }
    }
    family(
        out,
        "gapura_maintenance_total",
        "counter",
        "Maintenance outcomes by host.",
    );
    for (n, v) in &maint {
        for (label, x) in ["served", "bypassed", "shadow"].iter().zip(v) {
            let _ = writeln!(
                out,
                "gapura_maintenance_total{{host=\"{n}\",result=\"{label}\"}} {x}"
            );
        }
    }
    render_latency(out, &latency);
    family(
        out,
        "gapura_robots_served_total",
        "counter",
        "Managed robots.txt answers.",
    );
    let _ = writeln!(out, "gapura_robots_served_total {robots}");
    let drops: u64 = admin.shards.iter().map(|s| s.gate_drops.get()).sum();
    let accept_drops: u64 = admin.shards.iter().map(|s| s.accept_drops.get()).sum();
    family(
        out,
        "gapura_gate_drops_total",
        "counter",
        "Connections closed without an answer, by where.",
    );
    let _ = writeln!(out, "gapura_gate_drops_total{{at=\"request\"}} {drops}");
    let _ = writeln!(
        out,
        "gapura_gate_drops_total{{at=\"accept\"}} {accept_drops}"
    );
}
