//! The `/metrics` page: the shards' own counters, the refusals, TLS
//! failures and the process's figures, and the order every part of the
//! page is rendered in (the blocks', proof of work's and forward-auth's
//! in `blocks`, the pools' in `pools`, the UDP relays' and the fleet's in
//! their modules).

use super::{blocks, family, pools, Admin};
use gapura_http::server::{ErrorKind, ShardStats};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

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
    ("gapura_h3_connections_total", "counter", "HTTP/3 (QUIC) connections accepted.", |s| s.h3_connections.get()),
    ("gapura_h3_streams_total", "counter", "HTTP/3 requests, each through the gate.", |s| s.h3_streams.get()),
    ("gapura_h3_retries_total", "counter", "New QUIC connections asked to prove their address with a Retry.", |s| s.h3_retries.get()),
    ("gapura_h3_handshakes_evicted_total", "counter", "QUIC handshakes in progress closed, the oldest first, to make room for a new one (at most 1,024 a shard).", |s| s.h3_handshakes_evicted.get()),
    ("gapura_h3_early_requests_total", "counter", "HTTP/3 requests that arrived in 0-RTT data and were served (GET, HEAD, OPTIONS).", |s| s.h3_early_requests.get()),
    ("gapura_h3_early_refused_total", "counter", "HTTP/3 requests that arrived in 0-RTT data and were answered 425 Too Early (every method but GET, HEAD, OPTIONS).", |s| s.h3_early_refused.get()),
    ("gapura_h3_refused_streams_total", "counter", "HTTP/3 request streams refused before they were served (malformed, too large, cut short, reset).", |s| s.h3_refused_streams.get()),
];

/// Renders every counter: the shards' own, the blocks', the UDP relays',
/// proof of work's and forward-auth's, the refusals, the process's.
/// Allocates (admin thread only).
pub fn render_metrics(admin: &Admin) -> String {
    let mut out = String::with_capacity(4096);
    render_shard_counters(&mut out, admin);
    blocks::render_blocks(&mut out, admin);
    crate::udp::render_metrics(&mut out, &admin.udp);
    blocks::render_pow(&mut out, admin);
    blocks::render_auth(&mut out, admin);
    render_refusals(&mut out, admin);
    render_tls_failures(&mut out, admin);
    render_upstream_tls_failures(&mut out, admin);
    pools::render_pools(&mut out, admin);
    render_process(&mut out, admin);
    render_verification(&mut out, admin);
    crate::fleet::render_metrics(&mut out, admin.fleet.as_ref());
    crate::acme::Running::metrics(&admin.acme, &mut out);
    if let Some(p) = &admin.profile {
        render_profile(&mut out, p);
    }
    out
}

/// A pulling node's version, last pull, ACKs and NACKs.
fn render_profile(out: &mut String, p: &gapura_fleet::profile::ProfileStats) {
    use std::sync::atomic::Ordering;
    let rows = [
        (
            "gapura_fleet_profile_version",
            "gauge",
            "The fleet's profile version this node runs (0: its local profile).",
            &p.version,
        ),
        (
            "gapura_fleet_profile_last_pull_seconds",
            "gauge",
            "When this node last read the fleet's pointer (Unix seconds).",
            &p.last_pull,
        ),
        (
            "gapura_fleet_profile_acks_total",
            "counter",
            "Versions this node applied and acknowledged.",
            &p.acks,
        ),
        (
            "gapura_fleet_profile_nacks_total",
            "counter",
            "Versions this node refused (NACK).",
            &p.nacks,
        ),
    ];
    for (name, kind, help, v) in rows {
        family(out, name, kind, help);
        let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
    }
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
/// The verification line: checks waiting, and checks running.
fn render_verification(out: &mut String, admin: &Admin) {
    let Some(pool) = &admin.verifier else { return };
    let (queued, running) = pool.load();
    family(
        out,
        "gapura_verification_queued",
        "gauge",
        "Password checks waiting in the process's verification line.",
    );
    let _ = writeln!(out, "gapura_verification_queued {queued}");
    family(
        out,
        "gapura_verification_running",
        "gauge",
        "Password checks running on the verification pool now.",
    );
    let _ = writeln!(out, "gapura_verification_running {running}");
}

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
