//! `--write`: the suggestions as a profile fragment to append to a
//! profile: one `[[rate_limit]]` per group with samples, and a
//! `[quota.source]` with the budget, each value with a comment giving the
//! figures it came from. Each host's `connection_rate` is a comment line to
//! copy into that host's `[[host]]` table (a fragment appended to a profile
//! cannot add a key to a table above it).

use crate::analyze::Analysis;
use crate::group::GroupName;
use crate::report::{ordered, ordered_hosts, NOT_IN_THE_LOG};
use crate::suggest::{self, percent};
use std::collections::HashSet;
use std::fmt::Write as _;

/// The longest rate-limit name a profile takes.
const MAX_NAME: usize = 64;

/// A rate-limit name for a group: its host and route in ASCII lowercase,
/// every byte that is not `a-z`, `0-9`, `_` or `-` as `-`, runs of `-`
/// as one, no `-` at either end, at most 64 bytes; `limit` when nothing is
/// left. A name already taken gets `-2`, `-3`, ... (its start cut to fit).
pub fn limit_name(name: &GroupName, taken: &mut HashSet<String>) -> String {
    let mut s = String::new();
    let route = name.route.trim_start_matches("= ");
    let route = if route == "*" { "" } else { route };
    for c in name.host.chars().chain(['-']).chain(route.chars()) {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            c
        } else {
            '-'
        };
        if !(c == '-' && (s.is_empty() || s.ends_with('-'))) {
            s.push(c);
        }
    }
    let mut base: String = s.trim_end_matches('-').chars().take(MAX_NAME).collect();
    base.truncate(base.trim_end_matches('-').len());
    if base.is_empty() {
        base = "limit".into();
    }
    let mut candidate = base.clone();
    let mut n = 2u64;
    while taken.contains(&candidate) {
        let suffix = format!("-{n}");
        let keep = MAX_NAME.saturating_sub(suffix.len()).min(base.len());
        candidate = format!("{}{suffix}", &base[..keep]);
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

/// The fragment. `log` names the log in the opening comment.
pub fn render(a: &Analysis, log: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# gapura tune: limits suggested by {log} ({} requests of {} lines).",
        a.requests, a.lines
    );
    let _ = writeln!(
        out,
        "# Name each rate limit on its host or route with rate_limit = \"NAME\".\n\
         # Method: mean + 3.5σ, rounded up to two significant digits."
    );
    let mut taken = HashSet::new();
    for g in ordered(a) {
        if let Some(why) = suggest::too_little(g.clients, a.span_seconds()) {
            let _ = writeln!(
                out,
                "\n# host {}, route {}: {why}",
                g.name.host, g.name.route
            );
            continue;
        }
        let Some(r) = suggest::rate(&g.per_second, &g.client_peaks) else {
            continue;
        };
        if let Some(note) = suggest::refused_note(g.refused, g.requests) {
            let _ = writeln!(out, "\n# note: {note}");
        }
        let h = &g.per_second;
        let _ = writeln!(
            out,
            "\n# host {}, route {}: {} requests, {} clients, {} active client-seconds\n\
             # per client per second: mean {:.2}, σ {:.2}, mean + 3.5σ = {:.2}, p99 {}, max {}\n\
             # over the suggestion in this log: {} of {} clients ({:.2} %) had a busiest second over the burst",
            g.name.host,
            g.name.route,
            g.requests,
            g.clients,
            h.count(),
            h.mean(),
            h.std_dev(),
            r.raw,
            h.quantile(0.99),
            h.max(),
            r.refused,
            r.clients,
            percent(r.refused, r.clients)
        );
        let _ = writeln!(
            out,
            "[[rate_limit]]\nname = \"{}\"\nrequests = {:<8} # ceil(mean + 3.5σ), rounded up\n\
             per = \"second\"\nburst = {:<11} # 10 x the busiest second a client had, rounded up\nkey = \"ip\"",
            limit_name(&g.name, &mut taken),
            r.rate,
            r.burst
        );
    }
    connection_rates(&mut out, a);
    budget(&mut out, a);
    out
}

fn connection_rates(out: &mut String, a: &Analysis) {
    let hosts = ordered_hosts(a);
    if hosts.is_empty() {
        let _ = writeln!(
            out,
            "\n# No connection_rate: no line names its connection (a log from before\n\
             # the access log's `connection` key)."
        );
    }
    for h in hosts {
        let Some(r) = suggest::rate(&h.per_second, &h.peaks) else {
            continue;
        };
        let p = &h.per_second;
        let _ = writeln!(
            out,
            "\n# host {}: {} connections, {} active connection-seconds\n\
             # per connection per second: mean {:.2}, σ {:.2}, mean + 3.5σ = {:.2}, p99 {}, max {}\n\
             # over the suggestion in this log: {} of {} connections ({:.2} %); in that [[host]]:\n\
             # connection_rate = {{ requests = {}, burst = {} }}",
            h.host,
            h.connections,
            p.count(),
            p.mean(),
            p.std_dev(),
            r.raw,
            p.quantile(0.99),
            p.max(),
            r.refused,
            r.clients,
            percent(r.refused, r.clients),
            r.rate,
            r.burst
        );
    }
    let _ = writeln!(out, "\n# Not suggested: {NOT_IN_THE_LOG}.");
}

fn budget(out: &mut String, a: &Analysis) {
    let s = &a.sources;
    let Some(b) = suggest::budget(&s.per_window, &s.peaks) else {
        let _ = writeln!(
            out,
            "\n# No source budget: the log has no client address (hashed clients,\n\
             # log_addresses = \"hash\", have no source prefix)."
        );
        return;
    };
    let h = &s.per_window;
    let _ = writeln!(
        out,
        "\n# per source prefix (IPv4 /24, IPv6 /56) per window of {} ms, all hosts:\n\
         # {} prefixes, {} active prefix-windows, mean {:.2}, σ {:.2}, mean + 3.5σ = {:.2},\n\
         # p99 {}, max {}; over the suggestion in this log: {} of {} prefixes ({:.2} %)",
        a.window_ms,
        s.prefixes,
        h.count(),
        h.mean(),
        h.std_dev(),
        b.raw,
        h.quantile(0.99),
        h.max(),
        b.refused,
        b.prefixes,
        percent(b.refused, b.prefixes)
    );
    if a.hashed > 0 {
        let _ = writeln!(
            out,
            "# ({} requests with hashed clients are not counted here)",
            a.hashed
        );
    }
    let _ = writeln!(
        out,
        "[quota.source]\nrequests = {:<8} # per window, ceil(mean + 3.5σ), rounded up",
        b.requests
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(host: &str, route: &str) -> GroupName {
        GroupName {
            host: host.into(),
            route: route.into(),
        }
    }

    #[test]
    fn names_follow_the_profile_rules() {
        let mut taken = HashSet::new();
        assert_eq!(
            limit_name(&name("A.test", "/api/v2"), &mut taken),
            "a-test-api-v2"
        );
        assert_eq!(limit_name(&name("a.test", "*"), &mut taken), "a-test");
        assert_eq!(limit_name(&name("a.test", "/"), &mut taken), "a-test-2");
        assert_eq!(
            limit_name(&name("a.test", "= /ws"), &mut taken),
            "a-test-ws"
        );
        assert_eq!(limit_name(&name("(no host)", "*"), &mut taken), "no-host");
        assert_eq!(limit_name(&name("..", "*"), &mut taken), "limit");
        let long = "x".repeat(100);
        let n = limit_name(&name(&long, "*"), &mut taken);
        assert_eq!(n.len(), 64);
        let n2 = limit_name(&name(&long, "*"), &mut taken);
        assert_eq!((n2.len(), n2.ends_with("-2")), (64, true));
    }
}
