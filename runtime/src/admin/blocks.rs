//! The gate's blocks on `/metrics`: each block's outcomes by list, set,
//! limit or host, the hosts' latency, proof of work's and forward-auth's
//! counters, summed over the shards.

use super::{family, Admin};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Forward-auth counters per provider, summed over the shards.
pub(super) fn render_auth(out: &mut String, admin: &Admin) {
    let mut sums: BTreeMap<String, [u64; 10]> = BTreeMap::new();
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
                c.abandoned,
            ];
            for (t, x) in e.iter_mut().zip(v) {
                *t += x;
            }
        }
    }
    by_result(
        out,
        ("gapura_auth_provider_total", "provider"),
        "Forward-auth outcomes by provider and result.",
        &sums,
        &[
            "allowed",
            "denied",
            "redirected",
            "cache_hit",
            "call",
            "error",
            "timeout",
            "busy",
            "shadow",
            "abandoned",
        ],
    );
}

/// Proof of work's counters, summed over the shards.
pub(super) fn render_pow(out: &mut String, admin: &Admin) {
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
    access: BTreeMap<String, [u64; 10]>,
    maint: BTreeMap<String, [u64; 3]>,
    rates: BTreeMap<String, [u64; 3]>,
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
                c.verify_timeouts,
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
            e[2] += c.allowed;
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
pub(super) fn render_blocks(out: &mut String, admin: &Admin) {
    let BlockSums {
        rules,
        access,
        maint,
        rates,
        latency,
        robots,
    } = sum_blocks(admin);
    by_result(
        out,
        ("gapura_rule_set_total", "set"),
        "Rule-set outcomes by set and result.",
        &rules,
        &[
            "denied",
            "dropped",
            "allowed",
            "challenged",
            "regex_give_up",
            "shadow",
        ],
    );
    by_result(
        out,
        ("gapura_access_list_total", "list"),
        "Access-list outcomes by list and result.",
        &access,
        &[
            "allowed",
            "refused",
            "dropped",
            "challenged",
            "cache_hit",
            "verification",
            "verification_failed",
            "queue_refused",
            "verification_timeout",
            "shadow",
        ],
    );
    by_result(
        out,
        ("gapura_rate_limit_total", "limit"),
        "Requests a rate limit let through, refused (429) and let through in shadow, by limit.",
        &rates,
        &["refused", "shadow", "allowed"],
    );
    by_result(
        out,
        ("gapura_maintenance_total", "host"),
        "Maintenance outcomes by host.",
        &maint,
        &["served", "bypassed", "shadow"],
    );
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

/// A counter family of outcomes by name and result: `metric`'s line for
/// each name (under the label `key`) and each result, its count the
/// result's place in the name's counts.
fn by_result<const N: usize>(
    out: &mut String,
    (metric, key): (&str, &str),
    help: &str,
    rows: &BTreeMap<String, [u64; N]>,
    results: &[&str; N],
) {
    family(out, metric, "counter", help);
    for (name, counts) in rows {
        for (result, x) in results.iter().zip(counts) {
            let _ = writeln!(out, "{metric}{{{key}=\"{name}\",result=\"{result}\"}} {x}");
        }
    }
}
