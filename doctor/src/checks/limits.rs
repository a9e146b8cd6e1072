//! `limits.nofile`: open files against the profile's connection limits.

use super::Ctx;
use crate::finding::{Finding, Level};
use crate::parse;
use crate::probe::Resource;

/// Descriptors beyond connections and listeners: rings, eventfds, timers,
/// log files, the admin listener's connections, upstream health checks.
pub const NOFILE_SLACK: u64 = 1024;

/// The descriptors a profile can hold at once, with the sum spelled out.
fn needed(cx: &Ctx) -> Option<(u64, String)> {
    let p = cx.profile?;
    let shards = cx.cpus.shards() as u64;
    let per_shard = u64::from(p.snapshot.server.max_connections_per_shard);
    let groups = (p.runtime.listen.len() + p.runtime.udp_listen.len()) as u64;
    let admin = u64::from(p.runtime.admin.is_some());
    let listeners = shards * groups + admin;
    let total = shards * per_shard * 2 + listeners + NOFILE_SLACK;
    let sum = format!(
        "{shards} shards × {per_shard} connections (server.max_connections_per_shard) × 2 \
         (each proxied connection holds an upstream socket) + {listeners} listening sockets \
         + {NOFILE_SLACK} spare = {total}"
    );
    Some((total, sum))
}

/// `limits.nofile`: RLIMIT_NOFILE against what the profile needs.
pub fn nofile(cx: &Ctx) -> Finding {
    const ID: &str = "limits.nofile";
    let Some(lim) = cx.probe.rlimit(Resource::NoFile) else {
        return Finding::new(ID, Level::Info, "Cannot read RLIMIT_NOFILE: cannot tell.");
    };
    let have = format!(
        "RLIMIT_NOFILE (ulimit -n) soft {}, hard {}",
        parse::limit(lim.soft),
        parse::limit(lim.hard)
    );
    let Some((total, sum)) = needed(cx) else {
        return Finding::new(
            ID,
            Level::Info,
            format!("{have}. No profile given: cannot size what it needs."),
        );
    };
    let found = format!("{have}; the profile needs about {sum}.");
    if lim.soft.is_none_or(|s| s >= total) {
        return Finding::new(ID, Level::Ok, found);
    }
    let hard_too = if lim.hard.is_some_and(|h| h < total) {
        " The hard limit is below it too: raise both."
    } else {
        ""
    };
    Finding::new(ID, Level::Warn, found)
        .why(format!(
            "Gapura runs with the limit it is started with: past the soft limit accepts and upstream \
             connects fail with EMFILE and clients are refused.{hard_too}"
        ))
        .fix(format!(
            "LimitNOFILE={total} in the [Service] section of Gapura's systemd unit; outside \
             systemd, `<user> soft nofile {total}` and `<user> hard nofile {total}` in \
             /etc/security/limits.conf (then log in again), or `ulimit -n {total}` in the \
             shell that starts it. Lowering server.max_connections_per_shard lowers the need."
        ))
}
