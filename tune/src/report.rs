//! The readable report: the pass's counts, then per group its figures and
//! suggested rate limit, then per host its connections' `connection_rate`,
//! then the source budget.

use crate::analyze::{Analysis, GroupStats, HostConnections};
use crate::histogram::{Histogram, EXACT, SUB};
use crate::suggest::{self, percent};
use std::fmt::Write as _;

/// Groups with requests, busiest first (ties in order of appearance).
pub fn ordered(a: &Analysis) -> Vec<&GroupStats> {
    let mut groups: Vec<&GroupStats> = a.groups.iter().filter(|g| g.requests > 0).collect();
    groups.sort_by_key(|g| std::cmp::Reverse(g.requests));
    groups
}

/// What the report says about the pass itself.
pub struct Context<'a> {
    pub log: &'a str,
    /// Where the window came from: "the profile" or "the default".
    pub window_from: &'a str,
    pub max_clients: usize,
    pub max_groups: usize,
}

fn dist(out: &mut String, label: &str, h: &Histogram) {
    let _ = writeln!(
        out,
        "  {label}: samples {}, mean {:.2}, σ {:.2}, p99 {}, max {}",
        h.count(),
        h.mean(),
        h.std_dev(),
        h.quantile(0.99),
        h.max()
    );
}

fn header(out: &mut String, a: &Analysis, ctx: &Context<'_>) {
    let _ = writeln!(out, "gapura tune: {}", ctx.log);
    let _ = writeln!(
        out,
        "lines {}: used {}, malformed {}, blank {}, late {}, without a client {}",
        a.lines, a.requests, a.malformed, a.blank, a.late, a.no_client
    );
    let _ = writeln!(out, "window {} ms (from {})", a.window_ms, ctx.window_from);
    let clients: u64 = a.groups.iter().map(|g| g.clients).sum();
    if clients == 1 {
        let _ = writeln!(
            out,
            "warning: the log has one client: a spread of one cannot say what many \
             clients do; a rate from it is that client's, not a population's"
        );
    }
    let _ = writeln!(
        out,
        "client table: capacity {}, most held {}, evictions {}; prefix table: most held {}, evictions {}",
        ctx.max_clients, a.peak_clients, a.client_evictions, a.peak_prefixes, a.prefix_evictions
    );
    let _ = writeln!(
        out,
        "groups: {} (at most {}; further host/route pairs count in \"(other)\")",
        a.groups.len(),
        ctx.max_groups
    );
    let _ = writeln!(
        out,
        "samples: a client's requests in one second (or window) in which it sent any; \
         p99 exact below {EXACT}, above it at most {:.2} % high",
        100.0 / SUB as f64
    );
}

fn group(out: &mut String, g: &GroupStats, window_ms: u64, seconds: u64) {
    let _ = writeln!(out, "\nhost {}  route {}", g.name.host, g.name.route);
    let _ = writeln!(
        out,
        "  requests {} (admitted {}, refused with 429 {}), clients {}",
        g.requests,
        g.requests - g.refused,
        g.refused,
        g.clients
    );
    dist(out, "per client per second", &g.per_second);
    dist(
        out,
        &format!("per client per window ({window_ms} ms)"),
        &g.per_window,
    );
    if let Some(note) = suggest::refused_note(g.refused, g.requests) {
        let _ = writeln!(out, "  note: {note}");
    }
    if let Some(why) = suggest::too_little(g.clients, seconds) {
        let _ = writeln!(out, "  {why}: no suggestion");
        return;
    }
    let Some(r) = suggest::rate(&g.per_second, &g.client_peaks) else {
        let _ = writeln!(out, "  no samples: no suggestion");
        return;
    };
    let _ = writeln!(
        out,
        "  this rests on {} clients over {seconds} s of log",
        g.clients
    );
    let _ = writeln!(
        out,
        "  suggested rate {} per second (mean + 3.5σ = {:.2}), burst {} (ten times the busiest second, {})",
        r.rate,
        r.raw,
        r.burst,
        g.client_peaks.max()
    );
    let _ = writeln!(
        out,
        "  over the suggestion in this log: {} of {} clients ({:.2} %) had a busiest second over {}",
        r.refused,
        r.clients,
        percent(r.refused, r.clients),
        r.burst
    );
}

/// Hosts whose connections have samples, busiest first.
pub fn ordered_hosts(a: &Analysis) -> Vec<&HostConnections> {
    let mut hosts: Vec<&HostConnections> = a
        .connections
        .iter()
        .filter(|h| h.per_second.count() > 0)
        .collect();
    hosts.sort_by_key(|h| std::cmp::Reverse(h.per_second.sum()));
    hosts
}

/// What tune cannot see in an access log, said where a reader looks for it.
pub const NOT_IN_THE_LOG: &str = "a WebSocket tunnel's messages and a UDP relay's datagrams are \
    not in the access log (one line per HTTP request): tune suggests no `websocket` limits and \
    no relay session rate";

fn connections(out: &mut String, a: &Analysis) {
    let _ = writeln!(
        out,
        "\nconnection_rate (requests per connection per second, per host; set on the [[host]])"
    );
    if a.without_connection > 0 {
        let _ = writeln!(
            out,
            "  {} requests have no `connection` key (lines from before it): not counted here",
            a.without_connection
        );
    }
    let hosts = ordered_hosts(a);
    if hosts.is_empty() {
        let _ = writeln!(out, "  no line names its connection: no suggestion");
    }
    for h in hosts {
        let Some(r) = suggest::rate(&h.per_second, &h.peaks) else {
            continue;
        };
        let _ = writeln!(out, "  host {}: connections {}", h.host, h.connections);
        dist(out, "  per connection per second", &h.per_second);
        let _ = writeln!(
            out,
            "    suggested connection_rate = {{ requests = {}, burst = {} }} (mean + 3.5σ = {:.2}; \
             burst ten times the busiest second, {})",
            r.rate,
            r.burst,
            r.raw,
            h.peaks.max()
        );
        let _ = writeln!(
            out,
            "    over the suggestion in this log: {} of {} connections ({:.2} %) had a busiest second over {}",
            r.refused,
            r.clients,
            percent(r.refused, r.clients),
            r.burst
        );
    }
    let _ = writeln!(out, "  not suggested: {NOT_IN_THE_LOG}");
}

fn sources(out: &mut String, a: &Analysis) {
    let _ = writeln!(
        out,
        "\nsource budget (per IPv4 /24 and IPv6 /56, all hosts together, window {} ms)",
        a.window_ms
    );
    if a.hashed > 0 {
        let _ = writeln!(
            out,
            "  {} requests have a hashed client (log_addresses = \"hash\"): their source \
             prefixes cannot be derived, so they are not in the budget",
            a.hashed
        );
    }
    let s = &a.sources;
    let Some(b) = suggest::budget(&s.per_window, &s.peaks) else {
        let _ = writeln!(out, "  no address in the log: budgets skipped");
        return;
    };
    let _ = writeln!(out, "  prefixes {}", s.prefixes);
    dist(out, "per prefix per window", &s.per_window);
    let _ = writeln!(
        out,
        "  suggested [quota.source] requests = {} per window (mean + 3.5σ = {:.2})",
        b.requests, b.raw
    );
    let _ = writeln!(
        out,
        "  over the suggestion in this log: {} of {} prefixes ({:.2} %) had a busiest window over {}",
        b.refused,
        b.prefixes,
        percent(b.refused, b.prefixes),
        b.requests
    );
}

/// The whole report.
pub fn render(a: &Analysis, ctx: &Context<'_>) -> String {
    let mut out = String::new();
    header(&mut out, a, ctx);
    for g in ordered(a) {
        group(&mut out, g, a.window_ms, a.span_seconds());
    }
    connections(&mut out, a);
    sources(&mut out, a);
    out
}
