//! The HTTP/1.1 upstream pools' samples, by upstream group, summed over
//! the shards (each shard copies its figures once a second).

use super::{family, Admin};
use gapura_http::upstream::pool::{CloseReason, PoolCounts};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Every group's figures, summed over the shards, by name.
pub(super) fn sum_pools(admin: &Admin) -> BTreeMap<String, PoolCounts> {
    let mut sums: BTreeMap<String, PoolCounts> = BTreeMap::new();
    for s in &admin.shards {
        let Ok(b) = s.blocks.lock() else { continue };
        for (name, c) in &b.upstreams {
            sums.entry(name.clone()).or_default().add(c);
        }
    }
    sums
}

pub(super) fn render_pools(out: &mut String, admin: &Admin) {
    let sums = sum_pools(admin);
    type Get = fn(&PoolCounts) -> u64;
    #[rustfmt::skip]
    let simple: [(&str, &str, &str, Get); 6] = [
        ("gapura_upstream_connections_opened_total", "counter", "HTTP/1.1 connections made to the group's servers.", |c| c.opened),
        ("gapura_upstream_connections", "gauge", "HTTP/1.1 connections to the group's servers now (connecting, busy and idle).", |c| c.open),
        ("gapura_upstream_queue_length", "gauge", "Requests waiting now for a connection to one of the group's servers.", |c| c.queued),
        ("gapura_upstream_queued_total", "counter", "Requests that waited for a connection (every connection busy, none more allowed).", |c| c.waited),
        ("gapura_upstream_queue_timeouts_total", "counter", "Requests answered 503 after waiting past queue_timeout_ms.", |c| c.queue_timeouts),
        ("gapura_upstream_queue_full_total", "counter", "Requests that found a server's queue full (sent to another server, else answered 503).", |c| c.queue_full),
    ];
    for (name, kind, help, get) in simple {
        family(out, name, kind, help);
        for (group, c) in &sums {
            let _ = writeln!(out, "{name}{{upstream=\"{group}\"}} {}", get(c));
        }
    }
    let name = "gapura_upstream_connections_closed_total";
    family(
        out,
        name,
        "counter",
        "HTTP/1.1 connections to the group's servers closed, by reason.",
    );
    for (group, c) in &sums {
        for why in CloseReason::ALL {
            let _ = writeln!(
                out,
                "{name}{{upstream=\"{group}\",reason=\"{}\"}} {}",
                why.label(),
                c.closed[why as usize]
            );
        }
    }
}
