//! `--json FILE`: the result as one JSON document, schema `gapura-loadtest/v1`.
//!
//! The schema ships as `loadtest/schema/report-v1.schema.json` and is
//! documented in docs/loadtest.md. Fields are only ever added within a
//! version; a removal or change of meaning bumps `schema`.

use serde_json::{json, Map, Value};

use crate::cli::Config;
use crate::ctx::Outcome;
use crate::findmax::Curve;
use crate::report::{cpu_per_request_us, mode, protocol, within_stdev, PERCENTILES};

/// The schema identifier written in every document.
pub const SCHEMA: &str = "gapura-loadtest/v1";

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Builds the document. Cost: O(status codes + timeline slots + steps).
pub fn document(cfg: &Config, o: &Outcome, fm: Option<&Curve>) -> Value {
    let st = &o.stats;
    let h = &st.hist_ns;
    let secs = o.elapsed.as_secs_f64();
    let mut pct = Map::new();
    for p in PERCENTILES {
        pct.insert(format!("{p}"), json!(us(h.value_at_quantile(p / 100.0))));
    }
    let mut statuses = Map::new();
    for (code, &n) in st.statuses.iter().enumerate() {
        if n > 0 {
            statuses.insert(code.to_string(), json!(n));
        }
    }
    let slot_s = st.slot_ns as f64 / 1e9;
    let timeline: Vec<Value> = st
        .timeline
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "start_s": i as f64 * slot_s,
                "requests": s.requests,
                "errors": s.errors,
                "requests_per_s": s.requests as f64 / slot_s,
                "p99_us": s.hist_us.value_at_quantile(0.99) as f64,
            })
        })
        .collect();
    let udp = cfg.targets[0].scheme == crate::target::Scheme::Udp;
    json!({
        "schema": SCHEMA,
        "tool": { "name": "gapura-loadtest", "version": env!("CARGO_PKG_VERSION") },
        "config": {
            "targets": cfg.targets.iter().map(|t| t.url()).collect::<Vec<_>>(),
            "protocol": protocol(cfg),
            "tls": cfg.targets[0].scheme == crate::target::Scheme::Https,
            "mode": mode(cfg),
            "method": cfg.method,
            "shards": cfg.shards,
            "connections": cfg.connections,
            "pipeline": cfg.pipeline,
            "streams": cfg.streams,
            "rate": cfg.rate,
            "duration_s": cfg.duration.map(|d| d.as_secs_f64()),
            "requests_limit": cfg.requests,
            "warmup_s": cfg.warmup.as_secs_f64(),
            "timeout_s": cfg.timeout.as_secs_f64(),
            "source_ips": cfg.source_ips.as_ref().map(|s| s.count),
            "driver": st.driver,
            "engine": st.engine,
        },
        "summary": {
            "elapsed_s": secs,
            "requests": st.requests,
            "warmup_requests": st.warmup_requests,
            "requests_per_s": st.requests as f64 / secs,
            "bytes_read": st.bytes_read,
            "bytes_written": st.bytes_written,
            "bytes_read_per_s": st.bytes_read as f64 / secs,
            "missing_shards": o.missing_shards,
        },
        "latency_us": {
            "count": h.len(),
            "min": us(if h.is_empty() { 0 } else { h.min() }),
            "mean": h.mean() / 1000.0,
            "stdev": h.stdev() / 1000.0,
            "max": us(h.max()),
            "within_stdev_pct": within_stdev(h),
            "percentiles": pct,
        },
        "status_counts": statuses,
        "errors": {
            "connect": st.errors.connect,
            "read": st.errors.read,
            "write": st.errors.write,
            "timeout": st.errors.timeout,
            "parse": st.errors.parse,
            "total": st.errors.total(),
        },
        "cpu": {
            "user_s": o.cpu_user.as_secs_f64(),
            "sys_s": o.cpu_sys.as_secs_f64(),
            "per_request_us": cpu_per_request_us(o),
        },
        "timeline": { "slot_s": slot_s, "slots": timeline },
        "udp": if udp { json!({ "sent": st.udp_sent, "replies": st.requests, "timeouts": st.errors.timeout }) } else { Value::Null },
        "find_max": match fm {
            None => Value::Null,
            Some(c) => json!({
                "slo_p99_us": us(c.slo_p99_ns),
                "max_error_ratio": c.max_error_ratio,
                "max_rate": c.max_rate,
                "steps": c.steps.iter().map(|s| json!({
                    "rate": s.rate,
                    "achieved_rps": s.achieved,
                    "p99_us": us(s.p99_ns),
                    "error_ratio": s.error_ratio,
                    "ok": s.ok,
                    "attempt": s.attempt,
                })).collect::<Vec<_>>(),
            }),
        },
    })
}
